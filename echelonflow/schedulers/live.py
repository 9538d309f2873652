"""A flow table kept current as flows start, progress and finish: the controller's scheduling state.

The simulator numbers every flow of a run once (``FlowTable``); the controller cannot, because flows are
declared and started while it runs.  Building a snapshot of the registry and turning it into a fresh
table at every decision (``FlowTable.from_snapshot``) costs far more than the decision itself at cluster
scale (120-136 ms for 10,000 flows on a k=16 fat-tree, under 2 ms of it in the kernel;
docs/performance.md, item 11), so the registry keeps this table instead and changes one row per event.
A decision then reads it in place through the same ``ColumnarScheduler.decide_table`` the simulator
calls, so both run one algorithm on one layout and decide identically
(``tests/test_live_table.py`` compares it with ``decide(snapshot)`` on random event sequences).

What is kept, per event, at O(path length) plus one ordered insertion:

* one row per active flow (path as link numbers, group, offset, weight, wire bytes left); a flow that
  finishes leaves a dead row behind, compacted away once dead rows outnumber live ones;
* one reference time per EchelonFlow (a start can move the whole group's due times at once);
* the active rows in the order the scheduler's kernel wants them (``ColumnarScheduler.live_order``:
  flow id; or group id then flow id; or group id, offset, flow id).  Ids are strings; the order
  compares integer labels that sort like them (:class:`OrderLabels`), so nothing is sorted per
  decision.

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import Decision
from echelonflow.schedulers.columns import ColumnarScheduler, FlowTable

#: Compact when dead rows exceed live ones and this many.
COMPACT_SLACK = 1024


class OrderLabels:
    """Integers that sort like the strings they label, assigned so that inserting a string rarely
    changes another's label: each new label is the midpoint of its neighbours'; only when two
    neighbours are adjacent integers is everything renumbered (the caller is told)."""

    GAP = 1 << 32
    LIMIT = 1 << 62

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.labels: list[int] = []

    def add(self, key: str) -> bool:
        """Label ``key`` (not present yet); True when every label changed."""
        i = bisect.bisect_left(self.keys, key)
        low = self.labels[i - 1] if i > 0 else 0
        high = self.labels[i] if i < len(self.labels) else low + 2 * self.GAP
        self.keys.insert(i, key)
        if high - low >= 2 and high < self.LIMIT:
            self.labels.insert(i, (low + high) // 2)
            return False
        self.labels = [(k + 1) * self.GAP for k in range(len(self.keys))]
        return True

    def remove(self, key: str) -> None:
        i = bisect.bisect_left(self.keys, key)
        del self.keys[i]
        del self.labels[i]

    def label(self, key: str) -> int:
        return self.labels[bisect.bisect_left(self.keys, key)]


class _Column:
    """A growable array: numpy with spare capacity under numba, a plain list without."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.size = 0
        self.data: Any = [] if not kernels.HAVE_NUMBA else self._empty(64)

    def _empty(self, n: int) -> Any:
        return kernels.np.zeros(n, kernels.np.float64 if self.kind == "float" else kernels.np.int64)

    def append(self, value: Any) -> None:
        if not kernels.HAVE_NUMBA:
            self.data.append(value)
        else:
            if self.size == len(self.data):
                grown = self._empty(2 * len(self.data))
                grown[:self.size] = self.data
                self.data = grown
            self.data[self.size] = value
        self.size += 1

    def view(self) -> Any:
        return self.data[:self.size] if kernels.HAVE_NUMBA else self.data

    def replace(self, values: Any) -> None:
        """New content (compaction)."""
        self.size = len(values)
        if not kernels.HAVE_NUMBA:
            self.data = list(values)
        else:
            self.data = self._empty(max(64, 2 * self.size))
            self.data[:self.size] = values


class LiveFlowTable:
    """The active flows as a :class:`FlowTable`, changed in place by :meth:`add`, :meth:`remove`,
    :meth:`set_remaining`, :meth:`set_reference` and :meth:`set_path`, decided by :meth:`decide`.

    Link numbers are fixed up front from ``capacity_bps`` (every link the topology has).  Units as in
    ``schedulers.base``: bits/s, wire bytes, seconds.
    """

    def __init__(self, capacity_bps: Mapping[Hashable, float]) -> None:
        self.link_index = {link: i for i, link in enumerate(capacity_bps)}
        self.capacity = kernels.float_array(list(capacity_bps.values()))
        self.path_ptr = _Column("int")
        self.path_ptr.append(0)
        self.path_links = _Column("int")
        self.group = _Column("int")
        self.offset = _Column("float")
        self.idrank = _Column("int")
        self.remaining = _Column("float")
        self.weight = _Column("float")
        self.reference = _Column("float")  # per group slot
        self.row_ids: list[str | None] = []  # flow id per row (None: dead)
        self.row_of: dict[str, int] = {}
        self.group_slot: dict[str, int] = {}
        self.group_label: list[int] = []  # per group slot
        self.slot_ids: list[str] = []  # group id per slot
        self.flow_labels = OrderLabels()
        self.group_labels = OrderLabels()
        self.order_mode = "id"
        self.active: Any = kernels.int_array([])

    def __len__(self) -> int:
        return len(self.row_of)

    def __contains__(self, flow_id: str) -> bool:
        return flow_id in self.row_of

    # ------------------------------------------------------------------ events
    def add(self, flow_id: str, group_id: str, path: Sequence[Hashable], offset_s: float, weight: float,
            remaining_bytes: float) -> None:
        """A flow became active (``path``: directed links; ``remaining_bytes``: wire bytes)."""
        if flow_id in self.row_of:
            raise ValueError(f"flow {flow_id!r} is in the table already")
        slot = self._group(group_id)
        row = len(self.row_ids)
        for link in path:
            self.path_links.append(self.link_index[link])
        self.path_ptr.append(self.path_links.size)
        self.group.append(slot)
        self.offset.append(float(offset_s))
        self.remaining.append(float(remaining_bytes))
        self.weight.append(float(weight))
        self.row_ids.append(flow_id)
        self.row_of[flow_id] = row
        if self.flow_labels.add(flow_id):
            for fid, label in zip(self.flow_labels.keys, self.flow_labels.labels):
                if fid != flow_id:
                    self.idrank.data[self.row_of[fid]] = label
        self.idrank.append(self.flow_labels.label(flow_id))
        self._insert_active(row)

    def remove(self, flow_id: str) -> None:
        """A flow is no longer active (finished, aborted)."""
        row = self.row_of.pop(flow_id)
        self.row_ids[row] = None
        self.flow_labels.remove(flow_id)
        if kernels.HAVE_NUMBA:
            at = int(kernels.np.flatnonzero(self.active == row)[0])
            self.active = kernels.np.delete(self.active, at)
        else:
            self.active.remove(row)
        if len(self.row_ids) - len(self.row_of) > len(self.row_of) + COMPACT_SLACK:
            self._compact()

    def set_remaining(self, flow_id: str, remaining_bytes: float) -> None:
        self.remaining.data[self.row_of[flow_id]] = float(remaining_bytes)

    def set_reference(self, group_id: str, reference_s: float) -> None:
        slot = self._group(group_id)  # first: a new group may grow (replace) the reference array
        self.reference.data[slot] = float(reference_s)

    def set_path(self, flow_id: str, path: Sequence[Hashable]) -> None:
        """The flow was re-routed: same flow, a new row with the new path."""
        row = self.row_of[flow_id]
        group_id = self.slot_ids[self.group.data[row]]
        offset, weight, remaining = self.offset.data[row], self.weight.data[row], self.remaining.data[row]
        self.remove(flow_id)
        self.add(flow_id, group_id, path, offset, weight, remaining)

    # ------------------------------------------------------------------ deciding
    def decide(self, scheduler: ColumnarScheduler, now_s: float) -> Decision:
        """``scheduler``'s decision on the active flows, equal to ``scheduler.decide(snapshot)`` on the
        same flows; the scheduler must decide by table (:meth:`ColumnarScheduler.decides_by_table`)."""
        self._order_for(scheduler.live_order)
        table = self.table()
        active = self.active
        count = len(active)
        rate = kernels.floats(len(self.row_ids))
        order = kernels.ints(count)
        ranked = scheduler.decide_table(table, active, float(now_s), rate, order)
        ids = self.row_ids
        if kernels.HAVE_NUMBA:
            np = kernels.np
            by_id = active if self.order_mode == "id" else active[np.argsort(table.idrank[active])]
            rows = by_id.tolist()
            rates = rate[by_id].tolist()
            ranked_rows = order[:ranked].tolist()
        else:
            rows = active if self.order_mode == "id" else sorted(active, key=table.idrank.__getitem__)
            rates = [rate[f] for f in rows]
            ranked_rows = order[:ranked]
        return scheduler.table_decision(list(map(ids.__getitem__, rows)), rates,
                                        list(map(ids.__getitem__, ranked_rows)))

    def table(self) -> FlowTable:
        """The rows as a :class:`FlowTable` (views, not copies: valid until the next change)."""
        return FlowTable(
            capacity=self.capacity, path_ptr=self.path_ptr.view(), path_links=self.path_links.view(),
            group=self.group.view(), offset=self.offset.view(), idrank=self.idrank.view(),
            ref_slot=self.group.view(), reference=self.reference.view(), remaining=self.remaining.view(),
            weight=self.weight.view(),
        )

    # ------------------------------------------------------------------ order
    def _key(self, row: int) -> tuple:
        if self.order_mode == "id":
            return (self.idrank.data[row],)
        group = self.group_label[self.group.data[row]]
        if self.order_mode == "group":
            return (group, self.idrank.data[row])
        return (group, self.offset.data[row], self.idrank.data[row])

    def _insert_active(self, row: int) -> None:
        key = self._key(row)
        active = self.active
        low, high = 0, len(active)
        while low < high:
            mid = (low + high) // 2
            if self._key(active[mid]) < key:
                low = mid + 1
            else:
                high = mid
        if kernels.HAVE_NUMBA:
            self.active = kernels.np.insert(active, low, row)
        else:
            active.insert(low, row)

    def _order_for(self, mode: str) -> None:
        if mode != self.order_mode:
            self.order_mode = mode
            self.active = kernels.int_array(sorted(kernels.to_list(self.active, len(self.active)),
                                                   key=self._key))

    def _group(self, group_id: str) -> int:
        slot = self.group_slot.get(group_id)
        if slot is None:
            slot = self.group_slot[group_id] = len(self.group_label)
            self.reference.append(0.0)
            self.group_label.append(0)
            self.slot_ids.append(group_id)
            if self.group_labels.add(group_id):
                for gid, label in zip(self.group_labels.keys, self.group_labels.labels):
                    self.group_label[self.group_slot[gid]] = label
            else:
                self.group_label[slot] = self.group_labels.label(group_id)
        return slot

    def _compact(self) -> None:
        """Drop dead rows; live rows are renumbered in active order (so ``active`` becomes 0..n-1)."""
        keep = kernels.to_list(self.active, len(self.active))
        ptr, links = self.path_ptr.view(), self.path_links.view()
        new_links: list[int] = []
        new_ptr = [0]
        for row in keep:
            new_links.extend(links[ptr[row]:ptr[row + 1]])
            new_ptr.append(len(new_links))
        self.path_links.replace(new_links)
        self.path_ptr.replace(new_ptr)
        for column in (self.group, self.offset, self.idrank, self.remaining, self.weight):
            old = column.view()
            column.replace([old[row] for row in keep])
        self.row_ids = [self.row_ids[row] for row in keep]
        self.row_of = {fid: row for row, fid in enumerate(self.row_ids)}
        self.active = kernels.int_array(range(len(keep)))
