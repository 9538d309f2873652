"""The ``echelon`` command: one entry point, one module per sub-command.

Each sub-command module exposes ``register(subparsers)`` and keeps heavy imports (Mininet, os-ken,
matplotlib) inside its run function, so ``echelon simulate`` works on a machine without any of them.
Library code only raises; this module alone prints and chooses the exit status: a
:class:`~echelonflow.errors.UserError` becomes a one-line message and exit status 2, an
:class:`~emulation.errors.EmulationError` (a run that failed) one line and exit status 1.

SIGTERM and SIGHUP stop a command the way Ctrl-C does: they raise :class:`Terminated` (a
``KeyboardInterrupt``) in the main thread, so every ``finally`` stops what the command started (fabric,
controller, agents, by pid) and removes its temporary files before the exit status 128 + signal.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from echelonflow.errors import UserError
from emulation.errors import EmulationError

# Sub-command modules, in the order ``echelon --help`` lists them.
COMMAND_MODULES = (
    "simulator.command",
    "cli.sweep_command",
    "emulation.command",
    "reports.command",
    "emulation.demo_command",
    "controller.command",
    "topologies.command",
)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: unwind like Ctrl-C (clean-up in ``finally`` blocks), exit 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, _frame: object) -> None:
    for other in (signal.SIGTERM, signal.SIGHUP):  # the clean-up now running is not to be cut short
        signal.signal(other, signal.SIG_IGN)
    raise Terminated(signum)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default prints usage; keep it to one line
        self.exit(2, f"echelon: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="echelon", description="EchelonFlow scheduling for distributed training networks")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous = {signum: signal.signal(signum, _terminate) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return int(args.run(args) or 0)
    except UserError as err:
        print(f"echelon: error: {err}", file=sys.stderr)
        return 2
    except EmulationError as err:
        print(f"echelon: error: {err}", file=sys.stderr)
        return 1
    except Terminated as stop:
        print(f"echelon: stopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:
        print("echelon: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (``echelon simulate fig2 | head -1``): stop quietly, as the shell tools do;
        # stdout goes to /dev/null so the interpreter's final flush does not fail a second time
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:  # a caller in this process (a test, a notebook) gets its own handlers back
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)


