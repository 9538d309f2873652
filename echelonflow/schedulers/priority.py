"""Strict priority between groups, fair sharing inside one: how a coflow *order* becomes rates.

FIFO, Sincronia and Aalo decide only an order of coflows (EchelonFlows).  The network then serves them
the way priority classes over TCP do, which is also how Sincronia proposes to deploy its order: the
first group's flows go as fast as their paths allow, sharing max-min fairly among themselves (one
priority class, TCP inside it); the next group gets what is left on every link, and so on.  Every flow
ends up crossing a full link, so the result is work-conserving.

The fair sharing inside a group is exactly ``fair``'s progressive filling, run on the residual capacity.
"""

from __future__ import annotations

from collections.abc import Sequence

from echelonflow.schedulers.base import ActiveFlow, Decision, Snapshot
from echelonflow.schedulers.fair import FairScheduler

#: Residual capacity at or below this fraction of a link's capacity counts as full (rounding dust).
EPS_RELATIVE = 1e-12


def groups_of(snapshot: Snapshot) -> dict[str, list[ActiveFlow]]:
    """group id -> its flows, flows in id order (decisions must not depend on the caller's order)."""
    groups: dict[str, list[ActiveFlow]] = {}
    for flow in sorted(snapshot.flows, key=lambda f: f.flow_id):
        groups.setdefault(flow.echelon_id, []).append(flow)
    return groups


def serve_in_order(snapshot: Snapshot, groups: dict[str, list[ActiveFlow]], order: Sequence[str]) -> Decision:
    """Rates and ranks for groups served in ``order`` (every key of ``groups`` exactly once).

    A flow's rank is its position in the global order (group order, then flow id), so the controller
    compresses it into one priority class per group, most urgent first.
    """
    residual = dict(snapshot.capacity_bps)
    rate: dict[str, float] = {}
    rank: dict[str, int] = {}
    for gid in order:
        members = groups[gid]
        # A fresh FairScheduler per group: its link numbering (and table) then spans only the group's
        # links, not every link an earlier group used (which made each group cost O(all links)).
        share = FairScheduler().decide(Snapshot(snapshot.now_s, residual, members)).rate_bps
        for flow in members:
            rank[flow.flow_id] = len(rank)
            give = share[flow.flow_id]
            rate[flow.flow_id] = give
            if give <= 0.0:
                continue
            for link in flow.path:
                left = residual[link] - give
                residual[link] = left if left > snapshot.capacity_bps[link] * EPS_RELATIVE else 0.0
    return Decision(rate_bps=rate, rank=rank)
