"""An example scheduler (docs/scheduler-design.md, "Adding a scheduler"): smallest flow first.

Every flow, whatever its EchelonFlow, is served in order of the bytes it has left (fewest first; ties
by flow id), each taking what its path still has free: per-flow shortest-remaining-first, as pFabric
approximates it with switch priorities.  It decides on a :class:`Snapshot`, the simple way in; the
default ``Scheduler.decide`` builds the snapshot for it, in the simulator and in the controller alike.
"""

from __future__ import annotations

from echelonflow.schedulers.base import Decision, Scheduler, Snapshot


class SmallestFlowFirst(Scheduler):
    name = "smallest-flow-first"
    enforces = True  # the controller installs its ranks as queues and its rates as meters
    clairvoyant = True  # it reads remaining_bytes

    def decide_snapshot(self, snapshot: Snapshot) -> Decision:
        free = dict(snapshot.capacity_bps)  # bits/s left on each directed link
        order = sorted(snapshot.flows, key=lambda f: (f.remaining_bytes, f.flow_id))
        rate_bps: dict[str, float] = {}
        rank: dict[str, int] = {}
        for position, flow in enumerate(order):
            rank[flow.flow_id] = position
            if flow.remaining_bytes <= 0 or not flow.path:
                rate_bps[flow.flow_id] = 0.0
                continue
            take = min(free[link] for link in flow.path)
            rate_bps[flow.flow_id] = take
            for link in flow.path:
                free[link] -= take
        return Decision(rate_bps=rate_bps, rank=rank)
