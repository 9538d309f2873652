"""Strict priority between groups, fair sharing inside one: how a coflow *order* becomes rates.

FIFO, Sincronia and Aalo decide only an order of coflows (EchelonFlows).  The network then serves them
the way priority classes over TCP do, which is also how Sincronia proposes to deploy its order: the
first group's flows go as fast as their paths allow, sharing max-min fairly among themselves (one
priority class, TCP inside it); the next group gets what is left on every link, and so on.  Every flow
ends up crossing a full link, so the result is work-conserving.

The fair sharing inside a group is exactly ``fair``'s progressive filling, run on the residual capacity;
the loop over groups is ``kernels.priority_decide`` (flat arrays, compiled where numba is installed).
:class:`GroupTable` is a snapshot's flows grouped once, as those arrays, for the policies to order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import ActiveFlow, Decision, Scheduler, Snapshot
from echelonflow.schedulers.columns import LinkNumbering


@dataclass
class GroupArrays:
    """Groups of flows as kernel arrays: what an order-only policy reads (two callers build it).

    Group ``g`` is ``active[group_ptr[g]:group_ptr[g + 1]]`` (flow numbers into the per-flow arrays,
    in flow-id order; groups in group-id order).  A :class:`GroupTable` builds one from a snapshot;
    the simulator builds one from its run-wide flow table without making a snapshot.
    """

    active: Any
    group_ptr: Any
    remaining: Any  # per flow number, bytes
    path_ptr: Any
    path_links: Any
    capacity: Any  # per link number, bits/s
    start_s: list[float]  # per group: when its first flow started
    weight: list[float]  # per group: its job's weight
    #: Only for policies with :attr:`GroupOrderScheduler.needs_attained` (Aalo): per group, the wire
    #: bytes it has sent so far, finished flows included; the slowest link capacity on any active
    #: flow's path (bits/s).
    attained_bytes: list[float] | None = None
    slowest_bps: float | None = None


def slowest_on_paths(snapshot: Snapshot) -> float:
    """The slowest link capacity on any of ``snapshot``'s flow paths, bits/s (inf with no flows)."""
    capacity = snapshot.capacity_bps
    return min((capacity[link] for f in snapshot.flows for link in f.path), default=float("inf"))


def serve_arrays(groups: GroupArrays, order: Sequence[int], rate: Any) -> list[int]:
    """Rates into ``rate`` (by flow number) for the groups served in ``order``; returns the served
    flow numbers in rank order (group order, then flow id)."""
    ptr = groups.group_ptr
    active = groups.active
    served_ptr = [0]
    for g in order:
        served_ptr.append(served_ptr[-1] + ptr[g + 1] - ptr[g])
    if kernels.HAVE_NUMBA:
        pieces = [active[ptr[g]:ptr[g + 1]] for g in order]
        served = kernels.np.concatenate(pieces) if pieces else kernels.int_array([])
    else:
        served = [active[k] for g in order for k in range(ptr[g], ptr[g + 1])]
    kernels.priority_decide(served, kernels.int_array(served_ptr), groups.remaining,
                            groups.path_ptr, groups.path_links, groups.capacity, rate)
    return served


class GroupTable:
    """A snapshot's flows sorted by (group id, flow id), as kernel arrays.

    ``gids`` are the group ids in order; group ``g`` is ``flows[group_ptr[g]:group_ptr[g + 1]]``
    (decisions must not depend on the order the caller listed the flows in).
    """

    def __init__(self, snapshot: Snapshot, links: LinkNumbering) -> None:
        self.snapshot = snapshot
        self.flows = sorted(snapshot.flows, key=attrgetter("echelon_id", "flow_id"))
        self.gids: list[str] = []
        group_ptr: list[int] = []
        path_ptr = [0]
        path_links: list[int] = []
        previous = None
        for index, flow in enumerate(self.flows):
            if flow.echelon_id != previous:
                previous = flow.echelon_id
                self.gids.append(previous)
                group_ptr.append(index)
            path_links.extend(links.of_flow(flow.flow_id, flow.path))
            path_ptr.append(len(path_links))
        group_ptr.append(len(self.flows))
        self.group_ptr = group_ptr
        self.path_ptr = kernels.int_array(path_ptr)
        self.path_links = kernels.int_array(path_links)
        self.remaining = kernels.float_array([f.remaining_bytes for f in self.flows])
        self.capacity = kernels.float_array([snapshot.capacity_bps[link] for link in links.links])

    def members(self, g: int) -> list[ActiveFlow]:
        return self.flows[self.group_ptr[g]:self.group_ptr[g + 1]]

    def arrays(self, attained: bool = False) -> GroupArrays:
        """The groups as kernel arrays; ``attained`` adds what Aalo reads (attained bytes, slowest links)."""
        count = len(self.flows)
        heads = [self.flows[start] for start in self.group_ptr[:-1]]
        groups = GroupArrays(
            active=kernels.int_array(range(count)), group_ptr=self.group_ptr, remaining=self.remaining,
            path_ptr=self.path_ptr, path_links=self.path_links, capacity=self.capacity,
            start_s=[min(f.group_start_s for f in self.members(g)) for g in range(len(self.gids))],
            weight=[head.weight for head in heads],
        )
        if attained:
            groups.attained_bytes = [head.group_sent_bytes for head in heads]
            groups.slowest_bps = slowest_on_paths(self.snapshot)
        return groups

    def serve(self, order: Sequence[int], groups: GroupArrays) -> tuple[Decision, Any]:
        """Rates and ranks for the groups served in ``order`` (group indices, each exactly once), and
        the rates by flow number.

        A flow's rank is its position in the global order (group order, then flow id), so the
        controller compresses it into one priority class per group, most urgent first.
        """
        rate = kernels.floats(len(self.flows))
        served = serve_arrays(groups, order, rate)
        active = kernels.to_list(served, len(served))
        rates = kernels.to_list(rate, len(self.flows))
        ids = [self.flows[k].flow_id for k in active]
        return Decision(rate_bps={fid: rates[k] for fid, k in zip(ids, active)},
                        rank={fid: position for position, fid in enumerate(ids)}), rate


class GroupOrderScheduler(Scheduler):
    """A policy that only orders groups (:meth:`order_arrays`); :func:`serve_arrays` serves the order.

    The controller's path (:meth:`decide`) and the simulator's (its flow table's arrays, no snapshot)
    call the same two methods, so both decide alike.
    """

    _links: LinkNumbering | None = None
    #: Does the policy read ``GroupArrays.attained_bytes`` and ``slowest_bps`` (Aalo)?
    needs_attained = False

    def decide(self, snapshot: Snapshot) -> Decision:
        if self._links is None:
            self._links = LinkNumbering()
        table = GroupTable(snapshot, self._links)
        groups = table.arrays(self.needs_attained)
        decision, rate = table.serve(self.order_arrays(groups), groups)
        decision.valid_until_s = self.valid_until_arrays(groups, rate, snapshot.now_s)
        return decision

    def order_arrays(self, groups: GroupArrays) -> list[int]:
        """Indices of the groups, most urgent first (each exactly once)."""
        raise NotImplementedError

    def valid_until_arrays(self, groups: GroupArrays, rate: Any, now_s: float) -> float:
        """When the decision served at ``rate`` (by flow number) stops holding (Aalo: a queue change)."""
        return float("inf")

    def orders_by_arrays(self) -> bool:
        """True when a decision is exactly :meth:`order_arrays` served by priority (no ``decide`` of a
        subclass or instance in between), so the simulator may call the arrays methods directly."""
        owner = self.method_owners("decide", "order_arrays", "valid_until_arrays")
        return (owner["order_arrays"] is not GroupOrderScheduler and owner["decide"] is GroupOrderScheduler
                and not any(name in vars(self) for name in owner))
