"""Telling each agent the moment its flows' enforcement changes, instead of at its next poll.

The scheduling service re-decides on every flow start and finish, but an agent that polled would learn
its other flows' new rates and classes only at its next poll (every 50 ms): a flow paused at another's
arrival would go on sending for 25 ms on average, long enough to move 30 KB at 10 Mbit/s against the
pause (docs/emulation.md, "The allocation delivered", item 9).  So an agent keeps one long-poll open,
``GET /v1/allocations?src=HOST&after=SEQ&wait_s=S`` (``controller.api``), which this watch answers as
soon as a pass changed what is enforced for one of HOST's flows.

Only a change of what agents apply wakes them: a flow's class or its installed meter rate (the decided
rate moves a little at every pass; the meter only past the service's ``rate_tolerance``), or a new
flow.  Hosts nobody watches cost nothing per pass.

Kept Python 3.9 compatible and framework-neutral: the event type comes from the caller (the app passes
its hub's, whose ``wait`` yields to other green threads; tests use ``threading.Event``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Callable

#: What an agent applies of a flow's allocation: (class, installed meter rate in bit/s or None).
Signature = tuple[Any, Any]


class AllocationWatch:
    """Per watched host, the sequence number of the last pass that changed one of its flows."""

    def __init__(self, event_factory: Callable[[], Any] = threading.Event,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._event_factory = event_factory
        self._clock = clock
        self._event = event_factory()
        self.seq = 0
        #: watched host -> ``seq`` of the last change to one of its flows
        self.host_seq: dict[str, int] = {}
        self._signatures: dict[str, Signature] = {}

    def watch(self, host: str) -> None:
        """Start counting ``host``'s changes (its first long-poll does)."""
        self.host_seq.setdefault(host, self.seq)

    def update(self, flows: Mapping[str, tuple[str, Signature]]) -> None:
        """After a pass: ``flows`` maps every decided flow of a watched host to (its source host, what
        agents apply of it); hosts with a changed or new flow are woken."""
        changed = {src for key, (src, signature) in flows.items() if self._signatures.get(key) != signature}
        self._signatures = {key: signature for key, (_src, signature) in flows.items()}
        if not changed:
            return
        self.seq += 1
        for host in changed:
            self.host_seq[host] = self.seq
        # seq first, then a fresh event, then wake the old one's waiters: a waiter that took the old
        # event before this update is woken; one that takes the new event already sees the new seq
        woken, self._event = self._event, self._event_factory()
        woken.set()

    def wait(self, host: str, after: int, timeout_s: float) -> int:
        """Until a change of ``host``'s flows newer than ``after`` (or ``timeout_s``); its current seq."""
        self.watch(host)
        deadline = self._clock() + timeout_s
        while True:
            event = self._event
            left = deadline - self._clock()
            if self.host_seq[host] > after or left <= 0:
                return self.host_seq[host]
            event.wait(left)
