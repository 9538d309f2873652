"""Flows as flat arrays: the form the scheduling kernels read (``schedulers/kernels.py``).

A :class:`FlowTable` numbers flows ``0..F-1`` and links ``0..L-1`` once, so a decision is a walk over
integer arrays instead of dictionaries keyed by strings and link tuples.  Two callers build one:

* :meth:`FlowTable.of_flows` for a view of a snapshot (``schedulers/view.py``: tests, benchmarks,
  simple policies): a fresh table per snapshot;
* the simulator, once per run for every flow the run will ever start, updating ``remaining`` and
  ``reference`` in place as time passes (so a decision costs nothing per flow beyond the kernel).

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import EPS_BYTES, ActiveFlow, Snapshot


class TableArrays(NamedTuple):
    """A :class:`FlowTable`'s arrays as one kernel argument (numba compiles a named tuple of arrays like
    the arrays themselves): a kernel reads each by its name, so no caller can hand one in another's
    place.  Built by :meth:`FlowTable.arrays`; the fields are the table's, described there."""

    remaining: Any
    group: Any
    offset: Any
    reference: Any
    ref_slot: Any
    idrank: Any
    weight: Any
    path_ptr: Any
    path_links: Any
    capacity: Any
    members_ptr: Any
    members: Any


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
    #: Per group number, every flow of the group the caller knows, declared ones that have not started
    #: included, in (offset, flow id) order: ``members[members_ptr[g]:members_ptr[g + 1]]`` (flow
    #: numbers; a finished flow has no bytes left).  Empty when the caller knows only active flows.
    members_ptr: Any = ()
    members: Any = ()
    #: Per reference slot, a group's key fixed by a policy the first time it orders the group (-1: not
    #: yet; ``coflow-static``).  Lives as long as the table; a caller that rebuilds the table for each
    #: decision from longer-lived columns passes its own (the controller's ``LiveFlowTable``).
    admission_key: Any = None
    #: Who keeps this table and its layout (flows, paths, members): a caller that keeps one table through
    #: many decisions (the simulator) sets a fresh object here and replaces it whenever a path or a
    #: membership changes, so that a policy may keep state of its own from one decision to the next
    #: (``echelon``'s exact totals).  None: nothing may be kept (a table per snapshot; the controller's).
    layout: Any = None
    #: Who numbers the flows: the same object for as long as every flow number keeps its flow (numbers
    #: may be added after the last), replaced when flows are renumbered, so that a policy may keep state
    #: per flow number (``echelon-online``'s template of each flow).  The simulator numbers a run's flows
    #: once; the controller's ``LiveFlowTable`` adds rows and renumbers them when it compacts.  None:
    #: nothing may be kept (a table per snapshot).
    rows: Any = None
    #: ``view.check_decision``'s scratch (per link, per flow), zeros between checks: kept with the table
    #: so that a check does not allocate and clear a per-flow array (``kernels.decision_fault``).
    check_scratch: Any = None

    def arrays(self) -> TableArrays:
        """The arrays the kernels read, as one argument (``members_ptr``/``members`` as integer arrays,
        empty when the caller knows only the active flows)."""
        return TableArrays(self.remaining, self.group, self.offset, self.reference, self.ref_slot,
                           self.idrank, self.weight, self.path_ptr, self.path_links, self.capacity,
                           kernels.int_array(self.members_ptr), kernels.int_array(self.members))

    def admission_keys(self) -> Any:
        """:attr:`admission_key`, made (all -1) on first use."""
        if self.admission_key is None or len(self.admission_key) != len(self.reference):
            self.admission_key = kernels.float_array([-1.0] * len(self.reference))
        return self.admission_key

    @classmethod
    def of_flows(cls, snapshot: Snapshot, flows: list[ActiveFlow], links: LinkNumbering) -> FlowTable:
        """A table of ``flows`` (a snapshot's, in the order they are listed: flow number = position).

        ``links`` (kept by the caller between snapshots) remembers the link numbers of paths already
        seen, which is most of the conversion's cost; capacities are read from the snapshot each time.
        Groups are numbered in the order of their ids (the schedulers' tie rule), flows' ``idrank`` in
        the order of theirs.
        """
        path_ptr = [0]
        path_links: list[int] = []
        for flow in flows:
            if flow.remaining_bytes > EPS_BYTES:  # a finished flow's links play no part
                path_links.extend(links.of_flow(flow.flow_id, flow.path))
            path_ptr.append(len(path_links))
        group_ids = sorted({f.echelon_id for f in flows})
        group_of = {gid: i for i, gid in enumerate(group_ids)}
        by_id = sorted(range(len(flows)), key=lambda k: flows[k].flow_id)
        idrank = [0] * len(flows)
        for rank, k in enumerate(by_id):
            idrank[k] = rank
        count = len(flows)
        return cls(
            capacity=kernels.float_array([snapshot.capacity_bps[link] for link in links.links]),
            path_ptr=kernels.int_array(path_ptr),
            path_links=kernels.int_array(path_links),
            group=kernels.int_array([group_of[f.echelon_id] for f in flows]),
            offset=kernels.float_array([f.offset_s for f in flows]),
            idrank=kernels.int_array(idrank),
            ref_slot=kernels.int_array(range(count)),
            reference=kernels.float_array([f.reference_s for f in flows]),
            remaining=kernels.float_array([f.remaining_bytes for f in flows]),
            weight=kernels.float_array([f.weight for f in flows]),
        )


def numbering(active_order: str, idrank: Any, group: Any, offset: Any) -> Any:
    """Flow numbers (positions in the three per-flow arrays) in ``active_order``
    (``Scheduler.active_order``): flow id; group, flow id; or group, offset, flow id.  The simulator
    renumbers its table so before a run; an integer array where numpy is, else a list."""
    keys: tuple = (idrank,)
    if active_order != "id":
        keys = (idrank, offset, group) if active_order == "group-offset" else (idrank, group)
    if kernels.HAVE_NUMBA:
        return kernels.np.lexsort(keys)
    return sorted(range(len(idrank)), key=lambda f: tuple(key[f] for key in reversed(keys)))


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
