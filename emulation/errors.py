"""The one error type of an emulation, and how any exception becomes one line of it.

A run that fails (an agent died, stalled or mis-delivered; the fabric or controller did not come up)
raises :class:`EmulationError`; library code only raises it, and the command line (``cli.main``) prints
its message as one line and exits with status 1 (the experiment keeps the runs that finished).
Mininet, OVS and the launcher raise assorted exception types, so :func:`one_line` turns any of them
into a single line that still names its type when the type says something.
"""

from __future__ import annotations

from echelonflow.errors import UserError


class EmulationError(Exception):
    """An emulation run that failed (an agent died, stalled or mis-delivered); the message says which."""


def one_line(exc: BaseException) -> str:
    """``exc`` as one line: its message, prefixed by its type unless it is one of ours."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, (EmulationError, UserError)) else f"{type(exc).__name__}: {text}"
