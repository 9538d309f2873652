"""What the switches must be told: ``plan(installed, desired) -> operations``, with no switch in sight.

The scheduling service knows what it last told the switches per flow (``installed``) and what its new
decision wants (``desired``: a priority queue and a meter rate per flow).  Splitting the difference
from sending it (the shape of Faucet's valve, which computes OpenFlow messages, and its shim, which
sends them) makes the rules of the difference testable on their own (``tests/test_plan.py``) and
leaves the service a thin loop that applies operations and records the ones a switch accepted.

Rules: a flow no longer wanted is removed; a new one is installed with its queue and meter; for one
already there, only what changed is sent: the queue when it differs, the meter when its rate moved by
more than ``rate_tolerance`` (relative), or is dropped when the decision no longer meters the flow.
Removals come first so that a flow's match is free again before anything is installed.

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Installed:
    """What the port was last told for one flow (``rate_bps`` None = no meter)."""

    queue: int
    rate_bps: float | None


@dataclass(frozen=True)
class Operation:
    """One call on the enforcement port, and what the flow holds once the port accepted it.

    ``kind`` is ``"remove"``, ``"install"`` or ``"update"``; for an update ``queue`` and ``rate_bps``
    are what to send (None: leave it), ``clear_rate`` drops the meter.  ``after`` is the flow's
    :class:`Installed` state once applied (None after a removal).
    """

    kind: str
    flow_id: str
    after: Installed | None
    queue: int | None = None
    rate_bps: float | None = None
    clear_rate: bool = False


def plan(installed: dict[str, Installed], desired: dict[str, Installed],
         rate_tolerance: float) -> list[Operation]:
    """The operations that turn ``installed`` into ``desired`` (module docstring), removals first."""
    ops = [Operation("remove", fid, None) for fid in installed if fid not in desired]
    for fid, want in desired.items():
        have = installed.get(fid)
        if have is None:
            ops.append(Operation("install", fid, want, queue=want.queue, rate_bps=want.rate_bps))
            continue
        queue = want.queue if want.queue != have.queue else None
        clear_rate = want.rate_bps is None and have.rate_bps is not None
        rate_bps = None
        if want.rate_bps is not None and (
            have.rate_bps is None or abs(want.rate_bps - have.rate_bps) > rate_tolerance * have.rate_bps
        ):
            rate_bps = want.rate_bps
        if queue is None and rate_bps is None and not clear_rate:
            continue
        rate_changed = rate_bps is not None or clear_rate
        after = Installed(want.queue, want.rate_bps if rate_changed else have.rate_bps)
        ops.append(Operation("update", fid, after, queue=queue, rate_bps=rate_bps, clear_rate=clear_rate))
    return ops
