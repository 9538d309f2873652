"""A flow table kept current as flows start, progress and finish: the controller's scheduling state.

The simulator numbers every flow of a run once (``FlowTable``); the controller cannot, because flows are
declared and started while it runs.  Building a snapshot of the registry and turning it into a fresh
table at every decision (``FlowTable.of_flows``) costs far more than the decision itself at cluster
scale (120-136 ms for 10,000 flows on a k=16 fat-tree, under 2 ms of it in the kernel;
docs/performance.md), so the registry keeps this table instead and changes one row per event.  A
decision then reads it in place through the same ``Scheduler.decide`` the simulator calls
(:meth:`LiveFlowTable.view`), so both run one algorithm on one layout and decide identically
(``tests/test_live_table.py`` compares it with decisions on snapshots, on random event sequences).

What is kept, per event, at O(path length) plus one ordered insertion:

* one row per active or declared flow (path as link numbers, group, offset, weight, wire bytes left,
  wire bytes delivered, the least capacity on its path); a flow that finishes leaves a dead row
  behind, compacted away once dead rows outnumber live ones;
* one reference time per EchelonFlow (a start can move the whole group's due times at once);
* the active rows in the order the scheduler's kernel wants them (``Scheduler.active_order``:
  flow id; or group id then flow id; or group id, offset, flow id).  Ids are strings; the order
  compares integer labels that sort like them (:class:`OrderLabels`), so nothing is sorted per
  decision.

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import Snapshot
from echelonflow.schedulers.columns import FlowTable
from echelonflow.schedulers.view import FlowView, GroupView, JobProfile

#: Compact when dead rows exceed live ones and this many.
COMPACT_SLACK = 1024
#: Dropped group slots kept beyond the live ones before they are swept: every round and every
#: declaration walks the slots, so fewer than dead rows (a sweep costs a walk of the rows).
GROUP_SLACK = 64


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
    """The active flows as a :class:`FlowTable`, changed in place by :meth:`declare`, :meth:`add`,
    :meth:`remove`, :meth:`set_remaining`, :meth:`set_reference` and :meth:`set_path`; a scheduler
    decides on it through :meth:`view`.

    Declared flows (a size known, not started yet) have rows too, outside ``active``: the table's
    ``members`` list every row of a group in (offset, flow id) order, which is what clairvoyant
    policies count before a flow starts (``FlowTable.members``).  A finished flow's row keeps no bytes.

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
        self.sent = _Column("float")  # wire bytes delivered (what non-clairvoyant policies read)
        self.slowest = _Column("float")  # the least capacity on the row's path, bits/s
        self.reference = _Column("float")  # per group slot
        self.admission_key = _Column("float")  # per group slot (FlowTable.admission_key)
        self.row_ids: list[str | None] = []  # flow id per row (None: dead)
        self.ids_cache: Any = None  # row_ids as a numpy object array, while unchanged
        self.row_of: dict[str, int] = {}
        self.group_slot: dict[str, int] = {}
        self.group_label: list[int] = []  # per group slot
        self.slot_ids: list[str] = []  # group id per slot
        self.flow_labels = OrderLabels()
        self.group_labels = OrderLabels()
        self.order_mode = "id"
        self.active: Any = kernels.int_array([])
        self.active_rows: set[int] = set()
        self.slot_members: list[list[tuple[float, str, int]]] = []  # per group slot: (offset, id, row)
        self.members_cache: tuple[Any, Any] | None = None  # (members_ptr, members) while unchanged
        self.rows: object = object()  # ``FlowTable.rows``: renewed when :meth:`_compact` renumbers them

    def __len__(self) -> int:
        return len(self.active_rows)

    def __contains__(self, flow_id: str) -> bool:
        return flow_id in self.row_of

    # ------------------------------------------------------------------ events
    def declare(self, flow_id: str, group_id: str, path: Sequence[Hashable], offset_s: float, weight: float,
                remaining_bytes: float) -> None:
        """A flow was declared with its size and has not started: a member of its group, not active."""
        if flow_id in self.row_of:
            raise ValueError(f"flow {flow_id!r} is in the table already")
        self._new_row(flow_id, group_id, path, offset_s, weight, remaining_bytes)

    def add(self, flow_id: str, group_id: str, path: Sequence[Hashable], offset_s: float, weight: float,
            remaining_bytes: float, sent_bytes: float = 0.0) -> None:
        """A flow became active (``path``: directed links; ``remaining_bytes`` and ``sent_bytes``: wire
        bytes left and delivered); a declared flow's row becomes active (on ``path``: a flow started on a
        channel takes the channel's)."""
        row = self.row_of.get(flow_id)
        if row is not None and row in self.active_rows:
            raise ValueError(f"flow {flow_id!r} is in the table already")
        if row is not None:
            self.set_path(flow_id, path)
            row = self.row_of[flow_id]
            self.remaining.data[row] = float(remaining_bytes)
        else:
            row = self._new_row(flow_id, group_id, path, offset_s, weight, remaining_bytes)
        self.sent.data[row] = float(sent_bytes)
        self.active_rows.add(row)
        self._insert_active(row)

    def _new_row(self, flow_id: str, group_id: str, path: Sequence[Hashable], offset_s: float, weight: float,
                 remaining_bytes: float) -> int:
        slot = self._group(group_id)
        row = len(self.row_ids)
        slowest = math.inf
        for link in path:
            number = self.link_index[link]
            self.path_links.append(number)
            slowest = min(slowest, float(self.capacity[number]))
        self.path_ptr.append(self.path_links.size)
        self.slowest.append(slowest)
        self.sent.append(0.0)
        self.group.append(slot)
        self.offset.append(float(offset_s))
        self.remaining.append(float(remaining_bytes))
        self.weight.append(float(weight))
        self.row_ids.append(flow_id)
        self.ids_cache = None
        self.row_of[flow_id] = row
        if self.flow_labels.add(flow_id):
            for fid, label in zip(self.flow_labels.keys, self.flow_labels.labels):
                if fid != flow_id:
                    self.idrank.data[self.row_of[fid]] = label
        self.idrank.append(self.flow_labels.label(flow_id))
        bisect.insort(self.slot_members[slot], (float(offset_s), flow_id, row))
        self.members_cache = None
        return row

    def remove(self, flow_id: str) -> None:
        """A flow is no longer active or declared (finished, aborted): its row keeps no bytes."""
        row = self.row_of.pop(flow_id)
        self.row_ids[row] = None
        self.ids_cache = None
        self.remaining.data[row] = 0.0
        self.flow_labels.remove(flow_id)
        if row in self.active_rows:
            self.active_rows.discard(row)
            if kernels.HAVE_NUMBA:
                at = int(kernels.np.flatnonzero(self.active == row)[0])
                self.active = kernels.np.delete(self.active, at)
            else:
                self.active.remove(row)
        if len(self.row_ids) - len(self.row_of) > len(self.row_of) + COMPACT_SLACK:
            self._compact()

    def drop_group(self, group_id: str) -> None:
        """The group is gone for good (the controller forgot its job) and has no row left: its slot is
        freed, all at once when the dropped slots outnumber the kept ones, so the table's size follows
        the live groups, not every group there ever was."""
        if self.group_slot.pop(group_id, None) is None:
            return
        self.group_labels.remove(group_id)
        if len(self.slot_ids) - len(self.group_slot) > len(self.group_slot) + GROUP_SLACK:
            self._compact()  # first the dead rows, which may still name dropped slots
            self._compact_groups()

    def _compact_groups(self) -> None:
        keep = sorted(self.group_slot.values())
        renumber = {old: new for new, old in enumerate(keep)}
        self.group.replace([renumber[slot] for slot in self.group.view()])
        for column in (self.reference, self.admission_key):
            old = column.view()
            column.replace([old[slot] for slot in keep])
        self.group_label = [self.group_label[slot] for slot in keep]
        self.slot_members = [self.slot_members[slot] for slot in keep]
        self.slot_ids = [self.slot_ids[slot] for slot in keep]
        self.group_slot = {gid: renumber[slot] for gid, slot in self.group_slot.items()}
        self.members_cache = None

    def set_remaining(self, flow_id: str, remaining_bytes: float) -> None:
        self.remaining.data[self.row_of[flow_id]] = float(remaining_bytes)

    def set_sent(self, flow_id: str, sent_bytes: float) -> None:
        """The wire bytes an active flow has delivered (:meth:`sent_of`)."""
        self.sent.data[self.row_of[flow_id]] = float(sent_bytes)

    def set_reference(self, group_id: str, reference_s: float) -> None:
        slot = self._group(group_id)  # first: a new group may grow (replace) the reference array
        self.reference.data[slot] = float(reference_s)

    def set_path(self, flow_id: str, path: Sequence[Hashable]) -> None:
        """The flow was re-routed: same flow, a new row with the new path (active if it was)."""
        row = self.row_of[flow_id]
        numbers = [self.link_index[link] for link in path]
        links = self.path_links.view()
        if list(links[self.path_ptr.data[row]:self.path_ptr.data[row + 1]]) == numbers:
            return
        group_id = self.slot_ids[self.group.data[row]]
        offset, weight, remaining = self.offset.data[row], self.weight.data[row], self.remaining.data[row]
        was_active = row in self.active_rows
        slot = self.group.data[row]
        self.slot_members[slot].remove((float(offset), flow_id, row))
        sent = self.sent.data[row]
        self.remove(flow_id)
        if was_active:
            self.add(flow_id, group_id, path, offset, weight, remaining, sent)
        else:
            self.declare(flow_id, group_id, path, offset, weight, remaining)

    # ------------------------------------------------------------------ deciding
    def view(self, now_s: float, active_order: str, source: Any = None) -> FlowView:
        """The table as a scheduler's view at ``now_s``, its active rows in ``active_order``
        (``Scheduler.active_order``); ``source`` answers snapshots and what the network has seen
        (the controller's registry), else the table itself answers flow ids and groups."""
        self._order_for(active_order)
        return FlowView(float(now_s), self.table(), self.active, source or TableSource(self),
                        kernels.floats(len(self.row_ids)))

    def table(self) -> FlowTable:
        """The rows as a :class:`FlowTable` (views, not copies: valid until the next change)."""
        members_ptr, members = self._members()
        return FlowTable(
            capacity=self.capacity, path_ptr=self.path_ptr.view(), path_links=self.path_links.view(),
            group=self.group.view(), offset=self.offset.view(), idrank=self.idrank.view(),
            ref_slot=self.group.view(), reference=self.reference.view(), remaining=self.remaining.view(),
            weight=self.weight.view(), members_ptr=members_ptr, members=members,
            admission_key=self.admission_key.view(), rows=self.rows,
        )

    def _members(self) -> tuple[Any, Any]:
        """Every group's rows in (offset, flow id) order, as arrays, rebuilt only after a declaration,
        a new row or a compaction (a start or a finish changes no membership: a finished row has no bytes)."""
        if self.members_cache is None:
            ptr = [0]
            rows: list[int] = []
            for members in self.slot_members:
                rows.extend(row for _, _, row in members)
                ptr.append(len(rows))
            self.members_cache = (kernels.int_array(ptr), kernels.int_array(rows))
        return self.members_cache

    def ids_of(self, rows: Sequence[int]) -> list[str]:
        """The flow ids of ``rows``: one numpy take on an object array of the ids (made again only
        after a row was added or removed) where numpy is installed."""
        if not kernels.HAVE_NUMBA:
            ids = self.row_ids
            return [ids[row] for row in rows]
        if self.ids_cache is None:
            self.ids_cache = kernels.np.array(self.row_ids, dtype=object)
        return self.ids_cache[kernels.np.asarray(rows, dtype=kernels.np.int64)].tolist()

    def sent_of(self, rows: Sequence[int]) -> Any:
        """Each row's wire bytes delivered, as an array in the order of ``rows``."""
        if kernels.HAVE_NUMBA:
            return self.sent.view()[rows]
        sent = self.sent.data
        return [sent[row] for row in rows]

    def slowest_of(self, rows: Sequence[int]) -> float:
        """The least capacity on any of the rows' paths (infinity without rows)."""
        if not len(rows):
            return math.inf
        if kernels.HAVE_NUMBA:
            return float(self.slowest.view()[rows].min())
        slowest = self.slowest.data
        return min(slowest[row] for row in rows)

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
            self.admission_key.append(-1.0)
            self.group_label.append(0)
            self.slot_members.append([])
            self.slot_ids.append(group_id)
            if self.group_labels.add(group_id):
                for gid, label in zip(self.group_labels.keys, self.group_labels.labels):
                    self.group_label[self.group_slot[gid]] = label
            else:
                self.group_label[slot] = self.group_labels.label(group_id)
        return slot

    def _compact(self) -> None:
        """Drop dead rows; live rows are renumbered, active ones first in active order (so ``active``
        becomes 0..n-1), declared ones after them."""
        keep = kernels.to_list(self.active, len(self.active))
        keep += sorted(row for row in self.row_of.values() if row not in self.active_rows)
        ptr, links = self.path_ptr.view(), self.path_links.view()
        new_links: list[int] = []
        new_ptr = [0]
        for row in keep:
            new_links.extend(links[ptr[row]:ptr[row + 1]])
            new_ptr.append(len(new_links))
        self.path_links.replace(new_links)
        self.path_ptr.replace(new_ptr)
        for column in (self.group, self.offset, self.idrank, self.remaining, self.weight, self.sent,
                       self.slowest):
            old = column.view()
            column.replace([old[row] for row in keep])
        self.row_ids = [self.row_ids[row] for row in keep]
        self.ids_cache = None
        self.rows = object()
        self.row_of = {fid: row for row, fid in enumerate(self.row_ids)}
        renumber = {old: new for new, old in enumerate(keep)}
        self.slot_members = [[(off, fid, renumber[row]) for off, fid, row in members if row in renumber]
                             for members in self.slot_members]
        self.members_cache = None
        count = len(self.active)
        self.active_rows = set(range(count))
        self.active = kernels.int_array(range(count))


class TableSource:
    """A view's source from the table alone: flow ids and groups (without what the network has seen,
    and with unknown group starts); the controller's registry answers the rest."""

    def __init__(self, table: LiveFlowTable) -> None:
        self.live = table

    def flow_ids(self, numbers: Sequence[int]) -> list[str]:
        return self.live.ids_of(numbers)

    def groups(self, view: FlowView, seen: bool) -> GroupView:
        if seen:
            raise ValueError("a table alone has not seen what the network delivered")
        return table_groups(view)

    def snapshot(self, view: FlowView) -> Snapshot:
        raise ValueError("a table alone makes no snapshot")

    def job_profiles(self, view: FlowView, groups: GroupView) -> list[JobProfile] | None:
        return None  # a table alone knows flows, not the jobs' compute


def table_groups(view: FlowView) -> GroupView:
    """The view's active rows cut into groups (``active_order`` "group" or "group-offset"), each with its
    weight; every group's start unknown (0.0: the caller who knows them writes ``start_s``)."""
    group, weight = view.table.group, view.table.weight
    if kernels.HAVE_NUMBA:
        np = kernels.np
        active = np.asarray(view.active, dtype=np.int64)
        slots = group[active]
        firsts = np.concatenate(([0], np.flatnonzero(slots[1:] != slots[:-1]) + 1)) if len(active) else active
        ptr = [*firsts.tolist(), len(active)]
        heads = slots[firsts].tolist()
        weights = weight[active[firsts]].tolist()
    else:
        rows = list(view.active)
        ptr = [k for k in range(len(rows)) if k == 0 or group[rows[k]] != group[rows[k - 1]]]
        ptr.append(len(rows))
        heads = [int(group[rows[lo]]) for lo in ptr[:-1]]
        weights = [float(weight[rows[lo]]) for lo in ptr[:-1]]
    return GroupView(group_ptr=ptr, heads=heads, start_s=[0.0] * len(heads), weight=weights)
