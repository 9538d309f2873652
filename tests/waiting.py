"""Waiting for what another thread or process publishes, instead of reading it once and hoping.

A count or a state another thread updates (a listener's accept count, a child's pid file, a log line)
is not there the instant the action that causes it returns: tests that read it right away pass or fail
with the scheduler.  :func:`wait_until` polls a predicate until it holds or a deadline passes, and says
what it waited for when it did not.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

_T = TypeVar("_T")


def wait_until(check: Callable[[], _T], timeout_s: float, what: str, interval_s: float = 0.05) -> _T:
    """The first truthy value of ``check()``, polled every ``interval_s`` until ``timeout_s`` has passed
    (checked once more at the deadline); AssertionError naming ``what`` and the last value if none."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not true after {timeout_s:g} s (last: {result!r})")
        time.sleep(interval_s)
