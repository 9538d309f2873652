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
from operator import attrgetter

from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import ActiveFlow, Decision, Scheduler, Snapshot
from echelonflow.schedulers.columns import LinkNumbering


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

    def serve(self, order: Sequence[int]) -> Decision:
        """Rates and ranks for the groups served in ``order`` (group indices, each exactly once).

        A flow's rank is its position in the global order (group order, then flow id), so the
        controller compresses it into one priority class per group, most urgent first.
        """
        ptr = self.group_ptr
        active = [k for g in order for k in range(ptr[g], ptr[g + 1])]
        served_ptr = [0]
        for g in order:
            served_ptr.append(served_ptr[-1] + ptr[g + 1] - ptr[g])
        rate = kernels.floats(len(self.flows))
        kernels.priority_decide(kernels.int_array(active), kernels.int_array(served_ptr), self.remaining,
                                self.path_ptr, self.path_links, self.capacity, rate)
        rates = kernels.to_list(rate, len(self.flows))
        ids = [self.flows[k].flow_id for k in active]
        return Decision(rate_bps={fid: rates[k] for fid, k in zip(ids, active)},
                        rank={fid: position for position, fid in enumerate(ids)})


class GroupOrderScheduler(Scheduler):
    """A policy that only orders groups (:meth:`group_order`); :class:`GroupTable` serves the order."""

    _links: LinkNumbering | None = None

    def decide(self, snapshot: Snapshot) -> Decision:
        if self._links is None:
            self._links = LinkNumbering()
        table = GroupTable(snapshot, self._links)
        return self.finish(table, table.serve(self.group_order(table)))

    def group_order(self, table: GroupTable) -> list[int]:
        """Indices of ``table``'s groups, most urgent first (each exactly once)."""
        raise NotImplementedError

    def finish(self, table: GroupTable, decision: Decision) -> Decision:
        """The decision as served, for a policy to annotate (Aalo's ``valid_until_s``)."""
        return decision
