"""EchelonFlow without prior knowledge: sizes and arrangement learned from the job's earlier iterations.

The paper leans on "the repetitiveness of DDLT jobs" to profile flow sizes and the computation
arrangement.  This policy is told nothing in advance: it reads only what a network sees (ids, paths,
weights, bytes sent, when groups started; ``clairvoyant = False``) and the flow starts and finishes that
agents report (:meth:`observe`).  Repetition is recognised by ids: an EchelonFlow ``job/i<k>.<rest>`` is
iteration k of the template ``job/<rest>`` and its flow ``job/i<k>.<name>`` plays the part ``<name>``
(every generator names its tasks so; an id without the ``i<k>.`` prefix never repeats).

What it learns, per template, from the latest iteration that finished a flow of that part: the flow's
size, and its start offset from its group's first start (the arrangement: in a pipeline the consumer
needs micro-batch j about as much later as the producer made it; a coflow's flows all start together,
so its offsets are 0).  Then every decision is the clairvoyant ``echelon`` algorithm on estimates:

* a flow whose part is known: remaining = learned size - bytes sent (at least 5 % of the learned size,
  so a flow larger than last time still counts as unfinished), ideal finish = group start + learned
  offset; the controller's registry asks the same estimate for flows registered without a size
  (:meth:`EchelonOnlineScheduler.estimate_remaining_bytes`);
* a flow of a group seen for the first time (the first iteration): Aalo's view (D-CLAS,
  ``echelonflow.schedulers.aalo``): the group is assumed to end at the upper threshold of the queue its
  sent bytes put it in, shared by its active flows, with offset 0; so groups that have sent little go
  first, as least-attained-service does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from echelonflow.schedulers import kernels
from echelonflow.schedulers.aalo import AaloScheduler
from echelonflow.schedulers.base import Decision, FlowEvent, Snapshot
from echelonflow.schedulers.columns import FlowTable
from echelonflow.schedulers.echelon import EchelonScheduler
from echelonflow.schedulers.priority import slowest_on_paths

_ITERATION = re.compile(r"^i(\d+)\.(.+)$")
#: A known flow that has sent more than its learned size still counts this much (of that size) unsent.
MIN_LEFT_FRACTION = 0.05


def template(qualified_id: str) -> tuple[str, int | None]:
    """``job/i3.rest`` -> (``job/rest``, 3); an id without an iteration prefix -> (itself, None)."""
    job, sep, local = qualified_id.partition("/")
    match = _ITERATION.match(local if sep else job)
    if match is None:
        return qualified_id, None
    rest = match.group(2)
    return (f"{job}/{rest}" if sep else rest), int(match.group(1))


@dataclass
class Observed:
    """What the network sees of a decision's active flows: echelon-online's whole input beside the
    flow table's paths, as arrays.  Two callers build one: :meth:`EchelonOnlineScheduler.decide` from
    a snapshot, the simulator from its run-wide flow table (no snapshot per decision).

    Flows are numbered as in the flow table; groups as in its ``group`` array.  ``active`` lists each
    group's flows contiguously, and ``group_ptr`` cuts it into groups: group ``heads[g]`` has the
    flows ``active[group_ptr[g]:group_ptr[g + 1]]``.
    """

    active: Any
    group_ptr: Sequence[int]
    heads: Sequence[int]  # per group of active flows: its number in the table's ``group``
    group_count: int  # how many group numbers the table has
    keys: Sequence[str]  # per flow number: the part it plays (:func:`template`), what is learned by
    sent_bytes: Any  # per active position: wire bytes the flow has sent
    group_sent_bytes: Sequence[float]  # per group of active flows: wire bytes sent, finished flows too
    group_weight: Sequence[float]  # per group of active flows: its job's weight
    slowest_bps: float  # slowest link capacity on any active flow's path


class EchelonOnlineScheduler(EchelonScheduler):
    """``echelon`` on sizes and offsets learned from earlier iterations (first iteration: Aalo-like)."""

    name = "echelon-online"
    enforces = True
    clairvoyant = False

    def __init__(self) -> None:
        super().__init__()
        self.aalo = AaloScheduler()
        self.group_start_s: dict[str, float] = {}  # echelon id -> first start seen
        self.flow_start_s: dict[str, float] = {}  # flow id -> its start
        self.learned: dict[str, tuple[float, float]] = {}  # flow template -> (size_bytes, start offset_s)

    def observe(self, event: FlowEvent) -> None:
        if event.kind == "start":
            self.flow_start_s[event.flow_id] = event.time_s
            self.group_start_s.setdefault(event.echelon_id, event.time_s)
            return
        if event.kind != "finish":  # progress: the bytes sent reach decide() through the snapshot
            return
        start_s = self.flow_start_s.pop(event.flow_id, event.time_s)
        offset_s = max(0.0, start_s - self.group_start_s.get(event.echelon_id, start_s))
        self.learned[template(event.flow_id)[0]] = (float(event.size_bytes), offset_s)

    def estimate_remaining_bytes(self, flow_id: str, sent_bytes: float) -> float | None:
        known = self.learned.get(template(flow_id)[0])
        return None if known is None else _left(known[0], sent_bytes)

    def decide(self, snapshot: Snapshot) -> Decision:
        """The controller's path: the snapshot as a flow table and :class:`Observed`, then
        :meth:`estimate` and the clairvoyant decision on the estimates (the simulator calls the same
        two on its own table)."""
        flows = sorted(snapshot.flows, key=attrgetter("flow_id"))
        table, ids = self.table_of(Snapshot(snapshot.now_s, snapshot.capacity_bps, flows))
        group = kernels.to_list(table.group, len(flows))
        group_ptr = [k for k in range(len(flows)) if k == 0 or group[k] != group[k - 1]] + [len(flows)]
        head_flows = [flows[k] for k in group_ptr[:-1]]
        observed = Observed(
            active=kernels.int_array(range(len(flows))), group_ptr=group_ptr,
            heads=[group[k] for k in group_ptr[:-1]], group_count=len(head_flows),
            keys=[template(f.flow_id)[0] for f in flows],
            sent_bytes=kernels.float_array([f.sent_bytes for f in flows]),
            group_sent_bytes=[f.group_sent_bytes for f in head_flows],
            group_weight=[f.weight for f in head_flows],
            slowest_bps=slowest_on_paths(snapshot),
        )
        # Every flow's due time is its group's first start plus its estimated offset.
        table.reference = kernels.float_array([f.group_start_s for f in flows])
        self.estimate(observed, table.remaining, table)
        return self.decide_whole_table(table, ids, snapshot.now_s)

    def estimate(self, observed: Observed, remaining_bytes: Any, table: FlowTable) -> None:
        """Write the active flows' estimated bytes left and offsets (module docstring) into ``table``'s
        ``remaining`` and ``offset``; ``remaining_bytes`` (by flow number; may be ``table.remaining``
        itself) is read only to tell finished dust, which the network knows."""
        thresholds = self.aalo.thresholds(observed.slowest_bps)
        group_left = kernels.floats(observed.group_count)
        ptr = observed.group_ptr
        for g, head in enumerate(observed.heads):
            sent, weight = observed.group_sent_bytes[g], observed.group_weight[g]
            queue = self.aalo.queue_of(sent / weight, thresholds)
            upper = thresholds[min(queue, len(thresholds) - 1)] * weight
            group_left[head] = max(upper - sent, thresholds[0]) / (ptr[g + 1] - ptr[g])
        learned = self.learned
        keys = observed.keys
        known = [learned.get(keys[f]) for f in kernels.to_list(observed.active, len(observed.active))]
        known_size = kernels.float_array([-1.0 if k is None else k[0] for k in known])
        known_offset = kernels.float_array([0.0 if k is None else k[1] for k in known])
        kernels.online_estimate(observed.active, remaining_bytes, observed.sent_bytes, known_size,
                                known_offset, table.group, group_left, MIN_LEFT_FRACTION,
                                table.remaining, table.offset)

    def estimates_by_arrays(self) -> bool:
        """True when a decision is exactly :meth:`estimate` then the table decision (no ``decide`` of
        a subclass or instance in between), so the simulator may call them on its own table."""
        owner = self.method_owners("decide", "estimate")
        return (owner["decide"] is EchelonOnlineScheduler and owner["estimate"] is EchelonOnlineScheduler
                and not any(name in vars(self) for name in owner))


def _left(size_bytes: float, sent_bytes: float) -> float:
    """What a flow of learned size has left: never none while it runs (it may be larger this time)."""
    return max(size_bytes - sent_bytes, MIN_LEFT_FRACTION * size_bytes, 1.0)
