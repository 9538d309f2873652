"""The ``echelon`` command: one entry point, one module per sub-command.

Each sub-command module exposes ``register(subparsers)`` and keeps heavy imports (Mininet, os-ken,
matplotlib) inside its run function, so ``echelon simulate`` works on a machine without any of them.
A :class:`~echelonflow.errors.UserError` becomes a one-line message and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from echelonflow.errors import UserError

# Sub-command modules, in the order ``echelon --help`` lists them.
COMMAND_MODULES = (
    "simulator.command",
    "traffic.emulate_command",
    "reports.command",
    "traffic.demo_command",
    "controller.command",
    "topologies.command",
)


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
    try:
        return int(args.run(args) or 0)
    except UserError as err:
        print(f"echelon: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("echelon: interrupted", file=sys.stderr)
        return 130


