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
from dataclasses import replace

from echelonflow.schedulers.aalo import AaloScheduler
from echelonflow.schedulers.base import EPS_BYTES, Decision, FlowEvent, Snapshot
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
        thresholds = self.aalo.thresholds(slowest_on_paths(snapshot))
        active: dict[str, int] = {}
        for flow in snapshot.flows:
            active[flow.echelon_id] = active.get(flow.echelon_id, 0) + 1
        estimated = []
        for flow in snapshot.flows:
            start_s = flow.group_start_s
            known = self.learned.get(template(flow.flow_id)[0])
            if flow.remaining_bytes <= EPS_BYTES:  # finished dust (known to the network): keep it so
                left, offset_s = 0.0, 0.0
            elif known is not None:
                size, offset_s = known
                left = _left(size, flow.sent_bytes)
            else:
                queue = self.aalo.queue_of(flow.group_sent_bytes / flow.weight, thresholds)
                upper = thresholds[min(queue, len(thresholds) - 1)] * flow.weight
                left = max(upper - flow.group_sent_bytes, thresholds[0]) / active[flow.echelon_id]
                offset_s = 0.0
            estimated.append(replace(flow, remaining_bytes=left, offset_s=offset_s, reference_s=start_s,
                                     ideal_finish_s=start_s + offset_s))
        return super().decide(Snapshot(snapshot.now_s, snapshot.capacity_bps, estimated))


def _left(size_bytes: float, sent_bytes: float) -> float:
    """What a flow of learned size has left: never none while it runs (it may be larger this time)."""
    return max(size_bytes - sent_bytes, MIN_LEFT_FRACTION * size_bytes, 1.0)
