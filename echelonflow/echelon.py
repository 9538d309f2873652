"""EchelonFlow grouping, ideal finish offsets and tardiness (paper section 3, Table 1, Eqs. 1-4).

Paper: Pan et al., "Efficient flow scheduling in distributed deep learning training with echelon
formation", HotNets '22.  The arrangement function of every paradigm is derived from the job's DAG by
one generic rule (docs/scheduler-design.md): run the job with an infinitely fast network and see when
each flow's data is first needed.

Zero-communication schedule (:func:`ideal_schedule`)
    A flow takes 0 s: it starts and finishes when its last dependency finishes.  Compute tasks run
    one at a time per host, non-preemptively, as soon as their dependencies are done and the host is
    free.  **Tie rule** (shared with the simulator): when several compute tasks on one host are ready
    at the same moment the host is free, the one declared first in ``job.tasks`` runs first;
    :func:`compute_order_key` gives that declaration index.  All tasks that become done at one instant
    are settled before any host picks its next task, so a zero-second flow chain finishing "now" can
    still hand its consumer to a free host "now".

Ideal finish time d_j (:func:`ideal_finish_times`)
    The latest moment flow j may finish without delaying any compute in that schedule: the minimum,
    over the tasks that directly depend on j, of a compute dependant's ideal start or a flow
    dependant's own d (so the deadline propagates back along chains of flows, e.g. the steps of a ring
    all-gather; a flow directly consumed by compute gets exactly that compute's ideal start, as in the
    paper).  A flow nobody depends on gets its own zero-communication finish (= its ideal start).

Groups and offsets (:func:`echelons_of`)
    Flows sharing ``FlowTask.echelon_id`` form one EchelonFlow; a flow with an empty id is alone and
    its group id is its task id.  Flows are ordered by ideal start (ties by declaration order); the
    first is the head.  Offset o_j = d_j - d_head, negative values clamped to 0 (the head is the
    reference, nothing is due before it).  ``job.explicit_offsets_s`` (from a trace) overrides the
    derived value of a flow.  ``job.echelon_kinds`` may label a group: ``"coflow"`` then means the
    paper's Eq. 5 (every d_j = r), so its derived offsets are all 0 even where consumers start at
    different times (e.g. a ring all-reduce's last steps feed the next iteration's forward).  Without a
    label the kind is ``"coflow"`` when every offset is 0, else ``"staggered"`` (:func:`infer_kind`).

Run time (:func:`reference_time`, :func:`reference_time_from_starts`, tardiness functions)
    r = min over started flows j of (actual start_j - (ideal start_j - ideal start_head)); that is the
    head's actual start when the head starts first, and never lets a late head push everyone's due
    time back.  Flow j is due at r + o_j.  Flows declared to the controller may come without their
    ideal-start offset (ideal start_j - ideal start_head); such a flow takes part only if it is the
    first to start, and then with its ideal-finish offset o_j instead ("r = start of the first flow to
    start minus its offset").  The fallback is deliberately limited to the first flow: a flow that
    starts long before it is needed (an FSDP all-gather prefetched with the others) would otherwise
    drag r back by its offset.  For a punctual head both rules give exactly r = start of the head.

Pure and Python 3.9 compatible.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Callable, NamedTuple

from echelonflow.errors import UserError
from echelonflow.model import (
    ComputeTask,
    FlowColumns,
    FlowTask,
    Job,
    echelon_members,
    find_cycle,
    ungrouped_clashes,
    unknown_deps,
)

KINDS = ("coflow", "staggered")
_EPS_S = 1e-12  # events this close together are one instant (sums of float durations drift)


class FlowTimes(Mapping[str, float]):
    """flow id -> seconds, for the flows of one spec, held as a tuple in the spec's flow order.

    A spec has two of these per flow (offset, ideal start).  As dicts they took 33 MiB for FB2010's
    701,486 flows, 48 bytes a flow more than a tuple (docs/performance.md, "Memory at trace
    scale").  The runs read them in flow order (``values()`` beside ``flow_ids``); a look-up
    by flow id builds the index once, on first use.  When every flow has the same time (a Coflow's
    offsets and ideal starts: all of FB2010's), the one value is kept instead of the tuple
    (:class:`Same`), 8 bytes a flow less each."""

    __slots__ = ("_flow_ids", "_seconds", "_index")

    def __init__(self, flow_ids: tuple[str, ...], seconds: tuple[float, ...]) -> None:
        self._flow_ids = flow_ids
        self._seconds: Sequence[float] = Same.of(seconds) or seconds
        self._index: dict[str, int] | None = None

    def __getitem__(self, flow_id: str) -> float:
        if self._index is None:
            self._index = {fid: k for k, fid in enumerate(self._flow_ids)}
        return self._seconds[self._index[flow_id]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._flow_ids)

    def __len__(self) -> int:
        return len(self._flow_ids)

    def values(self) -> Sequence[float]:  # type: ignore[override]
        """The seconds in the spec's flow order, without building the index."""
        return self._seconds

    def items(self) -> Iterator[tuple[str, float]]:  # type: ignore[override]
        return zip(self._flow_ids, self._seconds)

    def __repr__(self) -> str:
        return f"FlowTimes({dict(self.items())!r})"


class Same(Sequence[float]):
    """``count`` times one float, the very same object (its sign of zero included), without a tuple."""

    __slots__ = ("value", "count")

    def __init__(self, value: float, count: int) -> None:
        self.value = value
        self.count = count

    @classmethod
    def of(cls, seconds: tuple[float, ...]) -> Same | None:
        """``seconds`` as one value when they are all the same number, bit for bit; else None."""
        if not seconds:
            return None
        first = seconds[0]
        sign = math.copysign(1.0, first)
        if all(v == first and math.copysign(1.0, v) == sign for v in seconds):
            return cls(first, len(seconds))
        return None

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return (self.value,) * len(range(*k.indices(self.count)))
        if not -self.count <= k < self.count:
            raise IndexError(k)
        return self.value

    def __iter__(self) -> Iterator[float]:
        return itertools.repeat(self.value, self.count)


@dataclass(frozen=True)
class EchelonSpec:
    """One EchelonFlow (or Coflow) of a job, as schedulers and reports need it."""

    echelon_id: str  # as in FlowTask.echelon_id (unique within the job)
    kind: str  # "coflow" (all offsets 0) or "staggered"
    flow_ids: tuple[str, ...]  # ordered by ideal start; flow_ids[0] is the head flow
    offsets_s: FlowTimes  # flow_id -> o_j = d_j - d_head (head: 0.0; never negative)
    ideal_start_s: FlowTimes  # flow_id -> start time in the zero-communication schedule

    @property
    def head(self) -> str:
        return self.flow_ids[0]


def compute_order_key(job: Job) -> dict[str, int]:
    """task id -> declaration index; among ready compute tasks on one host the smallest runs first."""
    return {tid: index for index, tid in enumerate(job.tasks)}


def check_job(job: Job, where: str = "", error: Callable[[str], Exception] = UserError) -> None:
    """Raise ``error("<where>: task 't': problem")`` for the first thing that makes ``job`` unusable: an
    unknown dependency, a dependency cycle, or a flow without an echelon whose id is another group's
    echelon id.  ``where`` defaults to ``job 'id'``; a trace passes its file and job, and its error class."""
    where = where or f"job {job.job_id!r}"
    if isinstance(job.tasks, FlowColumns):  # flows without dependencies, all of one echelon: nothing to find
        return
    missing = unknown_deps(job)
    if missing:
        task_id, dep = missing[0]
        raise error(f"{where}: task {task_id!r}: unknown dependency {dep!r}")
    cycle = find_cycle(job)
    if cycle:
        chain = " -> ".join(cycle + [cycle[0]])
        raise error(f"{where}: task {cycle[0]!r}: dependency cycle ({chain})")
    clashes = ungrouped_clashes(job, echelon_members(job))
    if clashes:
        raise error(
            f"{where}: task {clashes[0]!r}: flow without an echelon has the same id as echelon "
            f"{clashes[0]!r} of other flows (give it an echelon or rename it)"
        )


def ideal_schedule(job: Job) -> dict[str, tuple[float, float]]:
    """task id -> (start_s, finish_s) with zero communication time (see the module docstring)."""
    check_job(job)
    order = compute_order_key(job)
    dependants: dict[str, list[str]] = {tid: [] for tid in job.tasks}
    waiting: dict[str, int] = {}
    for task in job.tasks.values():
        unique_deps = dict.fromkeys(task.deps)
        waiting[task.task_id] = len(unique_deps)
        for dep in unique_deps:
            dependants[dep].append(task.task_id)

    schedule: dict[str, tuple[float, float]] = {}
    ready: dict[str, list[tuple[int, str]]] = {}  # host -> heap of (declaration index, task id)
    busy: dict[str, bool] = {}
    running: list[tuple[float, int, str]] = []  # heap of (finish_s, index, task id)
    done_now: list[str] = []

    def release(task_id: str, now_s: float) -> None:
        task = job.tasks[task_id]
        if isinstance(task, FlowTask):
            schedule[task_id] = (now_s, now_s)
            done_now.append(task_id)
        else:
            heapq.heappush(ready.setdefault(task.host, []), (order[task_id], task_id))

    now_s = 0.0
    for tid, count in waiting.items():
        if count == 0:
            release(tid, now_s)
    while True:
        progress = True
        while progress:  # settle everything that happens at this instant
            progress = False
            while done_now:
                finished = done_now.pop()
                for child in dependants[finished]:
                    waiting[child] -= 1
                    if waiting[child] == 0:
                        release(child, now_s)
            for host, queue in ready.items():
                if busy.get(host) or not queue:
                    continue
                _, tid = heapq.heappop(queue)
                task = job.tasks[tid]
                assert isinstance(task, ComputeTask)
                finish_s = now_s + task.duration_s
                schedule[tid] = (now_s, finish_s)
                if task.duration_s <= 0:
                    done_now.append(tid)
                else:
                    busy[host] = True
                    heapq.heappush(running, (finish_s, order[tid], tid))
                progress = True
        if not running:
            break
        now_s = running[0][0]
        while running and running[0][0] <= now_s + _EPS_S * max(1.0, now_s):
            _, _, tid = heapq.heappop(running)
            busy[job.tasks[tid].host] = False  # type: ignore[union-attr]
            done_now.append(tid)
    if len(schedule) != len(job.tasks):  # cannot happen for a checked DAG; guard against silent loss
        stuck = next(tid for tid in job.tasks if tid not in schedule)
        raise UserError(f"job {job.job_id!r}: task {stuck!r} can never start")
    return schedule


def ideal_finish_times(
    job: Job, schedule: Mapping[str, tuple[float, float]] | None = None
) -> dict[str, float]:
    """flow id -> d_j, the latest zero-communication finish that delays no compute (module docstring)."""
    if schedule is None:
        schedule = ideal_schedule(job)
    dependants = job.dependants()
    due: dict[str, float] = {}
    # Depth-first over flow dependants (iterative: long chains must not hit the recursion limit).
    for flow in job.flows:
        stack = [flow.task_id]
        while stack:
            fid = stack[-1]
            if fid in due:
                stack.pop()
                continue
            pending = [c for c in dependants[fid] if isinstance(job.tasks[c], FlowTask) and c not in due]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            candidates = []
            for child in dependants[fid]:
                if isinstance(job.tasks[child], FlowTask):
                    candidates.append(due[child])
                else:
                    candidates.append(schedule[child][0])
            due[fid] = min(candidates) if candidates else schedule[fid][1]
    return {flow.task_id: due[flow.task_id] for flow in job.flows}


def echelons_of(job: Job) -> dict[str, EchelonSpec]:
    """echelon id -> its EchelonSpec; every flow of the job is in exactly one spec (module docstring)."""
    if isinstance(job.tasks, FlowColumns) and not job.explicit_offsets_s:
        return _columns_spec(job, job.tasks)
    schedule = ideal_schedule(job)
    due = ideal_finish_times(job, schedule)
    order = compute_order_key(job)
    members = echelon_members(job)
    specs: dict[str, EchelonSpec] = {}
    for echelon_id, flow_ids in members.items():
        ordered = tuple(sorted(flow_ids, key=lambda fid: (schedule[fid][0], order[fid])))
        label = job.echelon_kinds.get(echelon_id)
        if label is not None and label not in KINDS:
            raise UserError(
                f"job {job.job_id!r}: echelon {echelon_id!r} has kind {label!r}; "
                f"valid kinds: {', '.join(KINDS)}"
            )
        head_due = due[ordered[0]]
        offsets: list[float] = []
        for fid in ordered:
            if fid in job.explicit_offsets_s:
                value = float(job.explicit_offsets_s[fid])
            elif label == "coflow":
                value = 0.0
            else:
                value = due[fid] - head_due
            offsets.append(value if value > 0 else 0.0)
        if label is None:
            label = infer_kind(offsets)
        specs[echelon_id] = EchelonSpec(
            echelon_id=echelon_id,
            kind=label,
            flow_ids=ordered,
            offsets_s=FlowTimes(ordered, tuple(offsets)),
            ideal_start_s=FlowTimes(ordered, tuple(schedule[fid][0] for fid in ordered)),
        )
    return specs


def _columns_spec(job: Job, columns: FlowColumns) -> dict[str, EchelonSpec]:
    """:func:`echelons_of` for a trace's coflow: its flows depend on nothing and nothing on them, so each
    starts and is due at 0 in the ideal schedule, and the one spec lists them in declaration order at
    offset 0.  Walking the general path made every flow's task about ten times (FB2010: 11 s, where the
    trace's tasks as objects took 2.4 s)."""
    label = job.echelon_kinds.get(columns.echelon_id, "coflow")
    if label not in KINDS:
        raise UserError(f"job {job.job_id!r}: echelon {columns.echelon_id!r} has kind {label!r}; "
                        f"valid kinds: {', '.join(KINDS)}")
    ordered = tuple(columns.ids)
    zeros = (0.0,) * len(ordered)
    spec = EchelonSpec(echelon_id=columns.echelon_id, kind=label, flow_ids=ordered,
                       offsets_s=FlowTimes(ordered, zeros), ideal_start_s=FlowTimes(ordered, zeros))
    return {columns.echelon_id: spec}


def infer_kind(offsets_s: Iterable[float]) -> str:
    """``"coflow"`` when every ideal-finish offset is 0 (the paper's Eq. 5), else ``"staggered"``."""
    return "coflow" if all(v == 0 for v in offsets_s) else "staggered"


class FlowStart(NamedTuple):
    """A started flow as the reference time needs it."""

    start_s: float  # actual start
    start_offset_s: float | None  # ideal start relative to the head's ideal start (None: not declared)
    offset_s: float  # ideal-finish offset o_j


def reference_time_from_starts(started: Sequence[FlowStart]) -> float | None:
    """r from an EchelonFlow's started flows (module docstring); None if none has started.

    Among flows that started at the same moment the one listed first counts as the first to start.
    """
    if not started:
        return None
    first = min(started, key=lambda f: f.start_s)  # min keeps the first of equal starts
    first_offset = first.start_offset_s if first.start_offset_s is not None else first.offset_s
    anchors = [first.start_s - first_offset]
    anchors.extend(f.start_s - f.start_offset_s for f in started if f.start_offset_s is not None)
    return min(anchors)


def reference_time(spec: EchelonSpec, actual_start_s: Mapping[str, float]) -> float | None:
    """r at run time from the flows of ``spec`` that have started (keys: the spec's flow ids).

    Every flow of a spec knows its ideal start, so r = min_j (actual start_j - (ideal start_j - ideal
    start_head)); None if none has started.
    """
    ideal = spec.ideal_start_s.values()
    return reference_time_from_starts([
        FlowStart(actual_start_s[fid], ideal_s - ideal[0], offset_s)
        for fid, ideal_s, offset_s in zip(spec.flow_ids, ideal, spec.offsets_s.values())
        if fid in actual_start_s
    ])


def flow_tardiness(finish_s: float, reference_s: float, offset_s: float) -> float:
    """Eq. 1: t_f = e - d with d = r + o (negative when the flow beat its ideal finish)."""
    return finish_s - (reference_s + offset_s)


def echelon_tardiness(spec: EchelonSpec, finish_s: Mapping[str, float], reference_s: float) -> float:
    """Eq. 2: t_H = max_j (e_j - d_j) over the spec's flows present in ``finish_s``.

    Raises ValueError when none of the spec's flows has a finish time (the tardiness is undefined).
    """
    values = [
        flow_tardiness(finish_s[fid], reference_s, offset_s)
        for fid, offset_s in spec.offsets_s.items()
        if fid in finish_s
    ]
    if not values:
        raise ValueError(f"echelon {spec.echelon_id!r}: no flow has finished, tardiness is undefined")
    return max(values)


def total_tardiness(values: Iterable[float], weights: Iterable[float] | None = None) -> float:
    """Eq. 4: sum_i w_i * t_{H_i} (all weights 1 when ``weights`` is None; lengths must match)."""
    values = list(values)
    if weights is None:
        return math.fsum(values)
    weights = list(weights)
    if len(weights) != len(values):
        raise ValueError(f"total_tardiness: {len(values)} values but {len(weights)} weights")
    return math.fsum(w * v for w, v in zip(weights, values))
