"""Flows as flat arrays: the form the scheduling kernels read (``schedulers/kernels.py``).

A :class:`FlowTable` numbers flows ``0..F-1`` and links ``0..L-1`` once, so a decision is a walk over
integer arrays instead of dictionaries keyed by strings and link tuples.  Two callers build one:

* :meth:`FlowTable.from_snapshot` for :meth:`Scheduler.decide` (the controller, the tests): a fresh
  table per snapshot, flows numbered in flow-id order;
* the simulator, once per run for every flow the run will ever start, updating ``remaining`` and
  ``reference`` in place as time passes (so a decision costs nothing per flow beyond the kernel).

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import EPS_BYTES, Decision, Scheduler, Snapshot


@dataclass
class FlowTable:
    """Static and current per-flow data, as arrays (numpy with numba, lists without).

    ``reference`` is indexed by ``ref_slot[f]``: one slot per EchelonFlow in the simulator (its
    flows' due times move together when the group's reference time changes), one per flow in a
    snapshot.  ``group`` numbers EchelonFlows in the order of their ids (the schedulers' tie rule);
    ``idrank`` numbers flows in the order of their ids.
    """

    capacity: Any  # per link, bits/s
    path_ptr: Any  # flow f crosses path_links[path_ptr[f]:path_ptr[f + 1]]
    path_links: Any
    group: Any
    offset: Any  # o_j, seconds
    idrank: Any
    ref_slot: Any
    reference: Any  # r, seconds
    remaining: Any  # bytes
    weight: Any  # the flow's job weight (Eq. 4)

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, links: LinkNumbering) -> tuple[FlowTable, list[str]]:
        """A table of the snapshot's flows in flow-id order, and those ids.

        ``links`` (kept by the caller between snapshots) remembers the link numbers of paths already
        seen, which is most of the conversion's cost; capacities are read from the snapshot each time.
        """
        flows = sorted(snapshot.flows, key=lambda f: f.flow_id)
        path_ptr = [0]
        path_links: list[int] = []
        for flow in flows:
            if flow.remaining_bytes > EPS_BYTES:  # a finished flow's links play no part
                path_links.extend(links.of_flow(flow.flow_id, flow.path))
            path_ptr.append(len(path_links))
        group_ids = sorted({f.echelon_id for f in flows})
        group_of = {gid: i for i, gid in enumerate(group_ids)}
        count = len(flows)
        table = cls(
            capacity=kernels.float_array([snapshot.capacity_bps[link] for link in links.links]),
            path_ptr=kernels.int_array(path_ptr),
            path_links=kernels.int_array(path_links),
            group=kernels.int_array([group_of[f.echelon_id] for f in flows]),
            offset=kernels.float_array([f.offset_s for f in flows]),
            idrank=kernels.int_array(range(count)),
            ref_slot=kernels.int_array(range(count)),
            reference=kernels.float_array([f.reference_s for f in flows]),
            remaining=kernels.float_array([f.remaining_bytes for f in flows]),
            weight=kernels.float_array([f.weight for f in flows]),
        )
        return table, [f.flow_id for f in flows]


class LinkNumbering:
    """Numbers for links in order of first use, and the numbers of every path seen (bounded memo)."""

    MAX_PATHS = 1_000_000

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.links: list[Any] = []
        self.paths: dict[tuple, tuple[int, ...]] = {}
        self.by_flow: dict[str, tuple[tuple, tuple[int, ...]]] = {}

    def of_flow(self, flow_id: str, path: tuple) -> tuple[int, ...]:
        """:meth:`of_path`, found by flow id while the caller passes the very same path object (the
        controller's registry keeps one per flow), which skips hashing the path's link tuples."""
        known = self.by_flow.get(flow_id)
        if known is not None and known[0] is path:
            return known[1]
        if len(self.by_flow) >= self.MAX_PATHS:
            self.by_flow.clear()
        numbers = self.of_path(path)
        self.by_flow[flow_id] = (path, numbers)
        return numbers

    def of_path(self, path: tuple) -> tuple[int, ...]:
        known = self.paths.get(path)
        if known is None:
            if len(self.paths) >= self.MAX_PATHS:
                self.paths.clear()
            known = self.paths[path] = tuple(self._link(link) for link in path)
        return known

    def _link(self, link: Any) -> int:
        li = self.index.get(link)
        if li is None:
            li = self.index[link] = len(self.links)
            self.links.append(link)
        return li


class ColumnarScheduler(Scheduler):
    """A scheduler whose decision is a kernel over a :class:`FlowTable` (the simulator's fast path).

    Subclasses implement :meth:`flow_order` and :meth:`decide_table`; :meth:`table_of` turns a
    snapshot into a table for their :meth:`decide`.
    """

    _links: LinkNumbering | None = None
    #: The order :meth:`decide_table` wants its active flows in, as ``LiveFlowTable`` keeps them:
    #: ``"id"`` (flow id), ``"group"`` (group id, flow id) or ``"group-offset"`` (group id, offset,
    #: flow id).
    live_order = "id"

    def decides_by_table(self) -> bool:
        """True when :meth:`decide` is exactly the table decision, so a caller may use the table path.

        False for a subclass that overrides ``decide`` (``echelon-online`` feeds learned sizes in) and
        for an instance whose ``decide`` was replaced (a test recording snapshots).
        """
        owner = self.method_owners("decide", "decide_table")
        return owner["decide"] is owner["decide_table"] and "decide" not in vars(self)

    def table_of(self, snapshot: Snapshot) -> tuple[FlowTable, list[str]]:
        if self._links is None:
            self._links = LinkNumbering()
        return FlowTable.from_snapshot(snapshot, self._links)

    def flow_order(self, table: FlowTable) -> list[int]:
        """Flow numbers of ``table`` in the order :meth:`decide_table` wants its active flows."""
        raise NotImplementedError

    def decide_table(self, table: FlowTable, active: Any, now_s: float, rate: Any, order: Any) -> int:
        """Rates of the ``active`` flows of ``table`` into ``rate``; their ranking into ``order``;
        returns how many flows were ranked."""
        raise NotImplementedError

    def table_decision(self, ids: list[str], rates: list[float], ranked: list[str]) -> Decision:
        """A Decision from a table decision: ``ids`` in flow-id order with their ``rates``; ranks 0..
        in ``ranked`` order (most urgent first), the flows not ranked after them in id order."""
        rank = dict(zip(ranked, range(len(ranked))))
        if len(rank) < len(ids):
            position = len(ranked)
            for fid in ids:
                if fid not in rank:
                    rank[fid] = position
                    position += 1
        return Decision(rate_bps=dict(zip(ids, rates)), rank=rank)
