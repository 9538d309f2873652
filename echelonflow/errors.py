"""User-facing errors: the CLI prints their message on one line and exits with status 2.

Anything raised as a :class:`UserError` is the user's input being wrong (a trace, a scenario, an
argument), never a bug, so it must say which thing is wrong and why, and must not show a traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user; ``str(err)`` is the whole message."""


class TraceError(UserError):
    """A job trace file that cannot be loaded (names the job, the task and the problem)."""


class ScenarioError(UserError):
    """A scenario file or scenario name that cannot be used."""
