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

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from echelonflow.schedulers import kernels
from echelonflow.schedulers.aalo import AaloScheduler
from echelonflow.schedulers.base import FlowEvent
from echelonflow.schedulers.columns import FlowTable
from echelonflow.schedulers.echelon import EchelonScheduler
from echelonflow.schedulers.view import Allocation, FlowView, GroupView

_ITERATION = re.compile(r"^i(\d+)\.(.+)$")
#: A known flow that has sent more than its learned size still counts this much (of that size) unsent.
MIN_LEFT_FRACTION = 0.05
#: What it remembers is bounded, so a controller that runs for weeks does not keep every job it saw:
#: the first starts of this many EchelonFlows (the newest: a group's start matters until its last flow
#: finishes), the starts of this many flows not finished yet (an aborted flow's never is), and what it
#: learned of this many templates (the latest learned: a job still running relearns its own every
#: iteration, so the ones dropped first are those of jobs that ended).
MAX_GROUPS = 20_000
MAX_OPEN_STARTS = 20_000
MAX_TEMPLATES = 50_000
#: The parts of flows that are no longer active are forgotten once they outnumber the active flows' by
#: this many (each decision would otherwise copy the table of parts), and templates are renumbered from
#: scratch when their numbers do.
PARTS_SLACK = 1024


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
    active_order = "group"  # offsets are estimated per decision: the kernel orders by them itself

    def __init__(self) -> None:
        self.aalo = AaloScheduler()
        self.group_start_s: dict[str, float] = {}  # echelon id -> first start seen
        self.flow_start_s: dict[str, float] = {}  # flow id -> its start
        self.learned: dict[str, tuple[float, float]] = {}  # flow template -> (size_bytes, start offset_s)
        self.parts: dict[str, int] = {}  # flow id -> its template's number (a regex per flow; PARTS_SLACK)
        self._parts = _TemplateNumbers()
        self._changed: set[str] = set()  # templates learned or forgotten since the last decision
        self._kept: _RowState | None = None

    def observe(self, event: FlowEvent) -> None:
        if event.kind == "start":
            _keep(self.flow_start_s, event.flow_id, event.time_s, MAX_OPEN_STARTS)
            if event.echelon_id not in self.group_start_s:
                _keep(self.group_start_s, event.echelon_id, event.time_s, MAX_GROUPS)
            return
        if event.kind != "finish":  # progress: the bytes sent reach decide() through the snapshot
            return
        start_s = self.flow_start_s.pop(event.flow_id, event.time_s)
        offset_s = max(0.0, start_s - self.group_start_s.get(event.echelon_id, start_s))
        part = template(event.flow_id)[0]
        self._changed.update(_keep(self.learned, part, (float(event.size_bytes), offset_s), MAX_TEMPLATES))
        self._changed.add(part)

    def estimate_remaining_bytes(self, flow_id: str, sent_bytes: float) -> float | None:
        known = self.learned.get(template(flow_id)[0])
        return None if known is None else _left(known[0], sent_bytes)

    def decide(self, view: FlowView) -> Allocation:
        """The clairvoyant decision on this policy's estimates: a copy of the view's table with its own
        bytes left and offsets (:meth:`estimate`), due times from each group's first start."""
        groups = view.groups(seen=True)
        table = view.table
        kept = self._state_for(table)
        first_start = [math.inf] * kept.slots
        for head, start_s in zip(groups.heads, groups.start_s):
            first_start[head] = start_s
        # it knows nothing of flows that have not started: no members
        estimates = replace(table, remaining=kept.remaining, offset=kept.offset, ref_slot=table.group,
                            reference=kernels.float_array(first_start), members_ptr=(), members=())
        self.estimate(view, groups, estimates, kept)
        return super().decide(FlowView(view.now_s, estimates, view.active, view.source, view.rate,
                                       view.every_flow, view.ranked))

    def estimate(self, view: FlowView, groups: GroupView, estimates: FlowTable, kept: _RowState) -> None:
        """Write the active flows' estimated bytes left and offsets (module docstring) into
        ``estimates``' ``remaining`` and ``offset``; the view's own ``remaining`` is read only to tell
        finished dust, which the network knows.  Only the ids of flows whose template is not numbered in
        ``kept`` yet are read: an id per active flow at every decision was nearly all of this policy's
        time on FB2010."""
        assert groups.attained_bytes is not None and groups.slowest_bps is not None
        thresholds = self.aalo.thresholds(groups.slowest_bps)
        group_left = kernels.floats(kept.slots)
        ptr = groups.group_ptr
        for g, head in enumerate(groups.heads):
            sent, weight = groups.attained_bytes[g], groups.weight[g]
            queue = self.aalo.queue_of(sent / weight, thresholds)
            upper = thresholds[min(queue, len(thresholds) - 1)] * weight
            group_left[head] = max(upper - sent, thresholds[0]) / (ptr[g + 1] - ptr[g])
        self._look_up(view, kept)
        known = self._parts
        for name in self._changed:
            known.set_learned(name, self.learned.get(name))
        self._changed.clear()
        kernels.online_estimate(view.active, view.table.remaining, groups.flow_sent_bytes, kept.part,
                                known.size, known.offset, estimates.group, group_left, MIN_LEFT_FRACTION,
                                estimates.remaining, estimates.offset)

    def _look_up(self, view: FlowView, kept: _RowState) -> None:
        """Number the templates of the active flows that have none in ``kept`` yet."""
        new = kernels.online_unnumbered(view.active, kept.part)
        if not len(new):
            return
        if self._parts.full(len(view.active)):  # renumber from scratch now and then: bounded
            self._parts = _TemplateNumbers()
            self.parts = {}
            kept.part = kernels._unnumbered(len(kept.part))
            new = view.active
        part = kept.part
        numbers = kernels.to_list(new, len(new))
        ids = view.flow_ids(numbers)
        parts, known = self.parts, self._parts
        for f, fid in zip(numbers, ids):
            number = parts.get(fid)
            if number is None:
                name = template(fid)[0]
                number = parts[fid] = known.number(name, self.learned.get(name))
            part[f] = number
        if len(parts) > 2 * len(ids) + PARTS_SLACK:  # forget the flows that left, now and then
            self.parts = {fid: parts[fid] for fid in ids}

    def _state_for(self, table: FlowTable) -> _RowState:
        """What is kept per flow number while the table numbers its flows the same way
        (``FlowTable.rows``: the simulator's run; the controller's table until it compacts, growing as
        flows are added), so that only new flows' ids are read; made afresh at every decision without
        (a table per snapshot).  Looking up every active flow's template at each round was a fifth of
        this policy's controller decision at 10,000 flows (docs/performance.md)."""
        count = len(table.group)
        kept = self._kept
        if table.rows is None or kept is None or kept.rows is not table.rows:
            kept = _RowState(table.rows, _slots(table.group, 0, count, 0), kernels._unnumbered(count),
                             kernels.floats(count), kernels.floats(count))
            self._kept = kept if table.rows is not None else None
        elif count > len(kept.part):  # flows added since: theirs unnumbered
            known = len(kept.part)
            kept.slots = _slots(table.group, known, count, kept.slots)
            part = kernels._unnumbered(count)
            part[:known] = kept.part
            kept.part = part
            kept.remaining = kernels.grown(kept.remaining, count)
            kept.offset = kernels.grown(kept.offset, count)
        return kept


def _slots(group: Any, start: int, stop: int, slots: int) -> int:
    """At least ``slots`` and one more than the group number of each flow from ``start`` to ``stop``."""
    return max(slots, 1 + max(kernels.to_list(group[start:stop], stop - start), default=-1))


@dataclass
class _RowState:
    """echelon-online's per-flow state while its table numbers its flows the same way."""

    rows: object | None  # ``FlowTable.rows``
    slots: int  # more than any group number in the table
    part: Any  # per flow number: its template's number (``_TemplateNumbers``), -1 not looked up yet
    remaining: Any  # per flow number: the estimate of bytes left (written for the active flows)
    offset: Any  # per flow number: the estimated offset


class _TemplateNumbers:
    """Templates numbered as looked up, with what is learned of each (size -1: nothing) as arrays the
    kernel reads by number.  Renumbered from scratch once it holds many more templates than a
    decision needs (``full``), as the flow ids are forgotten (``PARTS_SLACK``), so that a run of the
    whole FB2010 hour (every flow its own template) or a controller that runs for weeks does not keep
    every flow it saw."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        self.size = kernels.floats(64)
        self.offset = kernels.floats(64)

    def full(self, active: int) -> bool:
        """Time to renumber: a decision needs only its active flows' templates."""
        return len(self.numbers) > 2 * active + PARTS_SLACK

    def number(self, name: str, learned: tuple[float, float] | None) -> int:
        number = self.numbers.get(name)
        if number is None:
            number = self.numbers[name] = len(self.numbers)
            if number >= len(self.size):
                self.size = kernels.grown(self.size, 2 * number)
                self.offset = kernels.grown(self.offset, 2 * number)
            self.set_learned(name, learned)
        return number

    def set_learned(self, name: str, learned: tuple[float, float] | None) -> None:
        number = self.numbers.get(name)
        if number is not None:
            self.size[number], self.offset[number] = (-1.0, 0.0) if learned is None else learned


def _keep(table: dict, key: str, value: object, most: int) -> list:
    """``table[key] = value`` as its newest entry, the oldest dropped beyond ``most`` entries (dicts keep
    insertion order); returns the keys dropped."""
    table.pop(key, None)
    table[key] = value
    dropped = []
    while len(table) > most:
        dropped.append(next(iter(table)))
        del table[dropped[-1]]
    return dropped


def _left(size_bytes: float, sent_bytes: float) -> float:
    """What a flow of learned size has left: never none while it runs (it may be larger this time)."""
    return max(size_bytes - sent_bytes, MIN_LEFT_FRACTION * size_bytes, 1.0)
