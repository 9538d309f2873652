"""Event-driven fluid (flow-level) simulator: jobs' DAGs over a topology under one scheduler.

Model.  A job enters at its ``arrival_s``; a task starts as soon as that time has come and all its
dependencies are done.  A host runs its compute tasks one
at a time (it is a GPU): among the ready ones it picks the job listed first, then the task declared
first in ``job.tasks`` (the same tie rule as ``echelonflow.echelon.ideal_schedule``).  A flow takes
the path ``topology.path_for(src, dst, "job/flow")`` (the same pinned path the controller installs)
under a scheduler that enforces, and its host pair's route ``topology.pair_path`` under one that does
not (``fair``: plain TCP follows the controller's per-pair routes), and moves as a fluid at the rate
the scheduler gives it.  The scheduler is asked again at every flow arrival and completion; between
those events every rate is constant, so the next event time is exact: the earliest compute finish or
flow finish (remaining bits / rate), a job arrival, or the time the scheduler said its decision expires
(``Decision.valid_until_s``: Aalo's queue thresholds).  Schedulers that learn see every flow start and
finish through ``Scheduler.observe``.

EchelonFlow bookkeeping comes from ``echelonflow.echelon``: each flow's offset o_j, and the group's
reference time r recomputed from the actual starts whenever one of its flows starts, so a flow's
ideal finish is r + o_j (the paper's arrangement function anchored at the head flow).  The scheduler
sees that running r; the result (tardiness, objective, ideal finish times) is built from the final task
times by ``echelonflow.results.build_run_in_order``, the same builder the emulation uses.

Rescheduling.  By default (``rescheduling="every-flow"``) the scheduler decides again at every flow
start and finish: the exact fluid model, and what the bundled results are.  ``rescheduling="coflow"``
is the rule of Varys and of its authors' simulator CoflowSim: rates are recomputed when a flow starts
and when an EchelonFlow (a coflow) completes, not when one of its flows finishes early; what such a
flow leaves free stays idle until the next such event (or until nothing else would move).  Under
MADD with back-fill every flow of a coflow finishes at its own instant, so the exact model makes one
decision per flow; on the FB2010 trace (700,000 flows, up to 160,000 active) that is hours, while the
coflow rule makes about one per coflow arrival and completion (docs/performance.md).

Skipped decisions.  Flows that finish at one instant are one event and one decision.  A decision is
skipped where it provably changes nothing: the scheduler is ``blind_to_bytes`` (its rates depend on
which flows are active and their paths, never on bytes left or the clock: fair, port-fair,
fifo-priority), nothing started, no fault and no expiry came, and every flow that finished leaves its
links without any active flow.  Progressive filling (or a per-link share) then gives every other flow
the same rate bit for bit: the finished flows' links were theirs alone, the other links see the same
operations in the same order, ties between links keep their order.  A scheduler that reads bytes left
(SEBF, MADD, BSSI, echelon's order and estimates) or the clock is asked at every such event, since its
numbers move with them (docs/performance.md, "Decisions that change nothing").

Decision interval.  ``_Run(rule=DecisionRule(interval_s=D))``, D > 0, is a rule change for studies that
trade exactness for time (``benchmarks/exact_rule_scaling.py --interval-ms`` measures its error against
the exact rule): a finish that comes less than D after the last decision waits, with every other rate
unchanged and the freed capacity idle, until D has passed; a start, fault or expiry decides at once.
D = 0, the default, is the exact rule.  It cannot be combined with the coflow rule.

A job's completion time counts from its arrival.  Slowdown of a job = its completion time with all jobs
together / its completion time when it runs alone on the same network with the same scheduler (one
extra run per job when there are several).

Faults.  ``events`` (a scenario's ``events``, :mod:`echelonflow.faults`) take links and switches down
and back up at given times; at each one every flow is re-pinned with ``path_for(..., down=links)``
(the flows on a failed path move to another equal-cost path, the others stay) and the scheduler decides
again, as the controller does when a switch reports a port down.

Pure: no os_ken, no mininet.  Invariants (no directed link over capacity, non-negative rates, every
byte delivered) are checked on every decision unless ``check_invariants=False``.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import heapq
import math
import multiprocessing
from array import array
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from echelonflow import echelon as echelon_mod
from echelonflow.echelon import EchelonSpec
from echelonflow.errors import UserError
from echelonflow.faults import FaultEvent
from echelonflow.linkstate import LinkState
from echelonflow.model import (
    ComputeTask,
    FlowColumns,
    FlowTask,
    Job,
    Task,
    qualified,
    task_id_at,
    task_sequence,
)
from echelonflow.results import RunResult, build_run_in_order, completion_after_arrival_s
from echelonflow.run_records import RunTasks
from echelonflow.schedulers.base import EPS_BYTES, ActiveFlow, FlowEvent, Scheduler, Snapshot
from echelonflow.schedulers.columns import FlowTable, numbering
from echelonflow.schedulers.crux import job_compute_s, job_profile
from echelonflow.schedulers.view import FlowView, GroupView, JobProfile, check_decision
from echelonflow.topology import Topology
from simulator import fluid, freed_memory

#: The simulator's result for one scheduler is exactly the shared result shape's run.
SimulationResult = RunResult

#: Relative tolerance: a flow or compute whose finish lies within this fraction of a time step after
#: the step's end is finished at it (rounding accumulated in remaining bytes and rates).
TIME_RTOL = 1e-9
#: Absolute times round to units in the last place of the clock (15 us at t = 1e11 s): what is due
#: within this many of them is due now.  Never a fraction of the clock itself: 1e-9 of t = 1e11 s is
#: 100 s, and events that early let a job beat the time it needs alone on an empty network.
CLOCK_ULPS = 16
#: Steps in a row that only a decision's expiry triggers (no flow or compute finished, nothing
#: arrived), per active flow: a scheduler asking to be woken again and again without anything
#: happening is not progressing (Aalo changes a group's queue at most once per threshold).
EXPIRIES_PER_FLOW = 64
#: Bytes left below this count as delivered (floating-point dust).
BYTES_ATOL = 1e-6
#: When the scheduler decides again (module docstring, "Rescheduling").
RESCHEDULING = ("every-flow", "coflow")
#: A run with this many tasks or more hands the heap's freed build memory back once built, and what its
#: decisions free after the first and every :data:`TRIM_EVERY_DECISIONS` decisions
#: (:mod:`simulator.freed_memory`); smaller runs free too little to be worth the heap walk.
TRIM_ABOVE_TASKS = 100_000
#: Each decision allocates and frees arrays sized by the active flows, which glibc keeps (fragmented);
#: on the FB2010 hour that grew sincronia's process by 43 MiB after it was built, to its peak.  A trim
#: every this many decisions took under 0.1 s of the hour in all (docs/performance.md).
TRIM_EVERY_DECISIONS = 1000


class SimulationError(RuntimeError):
    """The simulation cannot make progress (a scheduler starving every flow, or a dependency cycle)."""


def numbers_dtype(count: int) -> type:
    """The integer type of arrays that hold flow or task numbers below ``count``: 32 bits where they fit
    (half the memory of the run's per-flow bookkeeping on a trace of 700,000 flows), else 64."""
    return np.int32 if count < 2**31 else np.int64


def _then_drained(first: Iterable[int], more: deque[int]) -> Iterator[int]:
    """Every item of ``first``, then of ``more`` until it is empty (it may grow meanwhile): a queue that
    starts with ``first`` without copying it."""
    yield from first
    while more:
        yield more.popleft()


def due_tolerance_s(now_s: float, next_s: float) -> float:
    """How far after ``next_s`` a finish or arrival still counts as due at a step from ``now_s`` to
    ``next_s``: :data:`TIME_RTOL` of the step plus :data:`CLOCK_ULPS` units in the last place of the clock
    (module constants say why not a fraction of the clock)."""
    return TIME_RTOL * (next_s - now_s) + CLOCK_ULPS * math.ulp(next_s)


@dataclass
class _Echelon:
    """One EchelonFlow of a run: its spec, job, and slot in the flow table's reference array."""

    spec: EchelonSpec
    job_id: str
    slot: int
    weight: float = 1.0
    first_start_s: float = math.inf
    finished_bytes: float = 0.0  # wire bytes of its flows that have finished
    eqid: str = ""  # its ``job/echelon`` id


def check_placement(topology: Topology, jobs: Sequence[Job]) -> None:
    """Every job id unique and every host a job uses present in the topology (UserError otherwise)."""
    known = set(topology.hosts)
    seen = set()
    for job in jobs:
        if job.job_id in seen:
            raise UserError(f"duplicate job id {job.job_id!r}")
        seen.add(job.job_id)
        for task in job.tasks.values():
            hosts = [task.host] if isinstance(task, ComputeTask) else [task.src, task.dst]
            for host in hosts:
                if host not in known:
                    raise UserError(
                        f"job {job.job_id!r} task {task.task_id!r}: host {host!r} is not in topology "
                        f"{topology.name!r} (it has {len(known)} hosts, h1..h{len(known)})"
                    )
            if isinstance(task, FlowTask) and task.src == task.dst:
                raise UserError(
                    f"job {job.job_id!r} flow {task.task_id!r}: source and destination are both {task.src!r}"
                )


def simulate(
    topology: Topology,
    jobs: Sequence[Job],
    scheduler: Scheduler,
    check_invariants: bool = True,
    alone_runs: bool = True,
    workers: int = 1,
    events: Sequence[FaultEvent] = (),
    rescheduling: str = "every-flow",
) -> SimulationResult:
    """Run all ``jobs`` together (and each alone, for slowdowns); return the shared result shape.
    Every task's host must be in ``topology`` (:func:`check_placement`, a :class:`UserError` if not).

    Every run gets its own copy of ``scheduler`` as it was passed in, so a policy that learns
    (``echelon-online``) starts each run knowing nothing.  ``alone_runs=False`` skips the runs alone
    (slowdowns are then 1.0): for studies that only need completion times.  ``workers`` > 1 runs the
    alone runs in that many - 1 forked processes while this one runs the jobs together (the results
    are the same; only the wall time changes).  ``events``: faults replayed in every run (module
    docstring); the runs alone see them at the same times.  ``rescheduling``: ``"every-flow"`` (exact)
    or ``"coflow"`` (Varys's rule; module docstring).

    Python's cyclic garbage collector is paused for the call (and restored after): the runs create
    no reference cycles worth collecting, but hundreds of thousands of live task, tuple and dict
    objects made it walk them hundreds of times per run (0.4-0.6 s of bench-k8's 4-5 s at 20
    iterations, docs/performance.md).
    """
    with _collector_paused():
        return _simulate(topology, jobs, scheduler, check_invariants, alone_runs, workers, events,
                         rescheduling)


@contextlib.contextmanager
def _collector_paused():
    """``gc`` disabled inside, re-enabled on the way out if it was enabled (nesting-safe)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True)
class DecisionRule:
    """When a run decides: at every flow start and finish (``every_flow``, the exact rule) or only at
    flow starts and group completions (the coflow rule); ``interval_s`` > 0 defers finishes (module
    docstring, "Decision interval")."""

    every_flow: bool = True
    interval_s: float = 0.0

    def __post_init__(self) -> None:
        if self.interval_s < 0 or (self.interval_s > 0 and not self.every_flow):
            raise ValueError("a decision interval is >= 0 and applies to the every-flow rule only")
        object.__setattr__(self, "interval_s", float(self.interval_s))


#: The exact rule: a decision at every flow start and finish.
EXACT = DecisionRule()


def _simulate(
    topology: Topology, jobs: Sequence[Job], scheduler: Scheduler, check_invariants: bool, alone_runs: bool,
    workers: int, events: Sequence[FaultEvent], rescheduling: str,
) -> SimulationResult:
    if rescheduling not in RESCHEDULING:
        raise UserError(f"rescheduling must be one of {', '.join(RESCHEDULING)}, got {rescheduling!r}")
    check_placement(topology, jobs)
    pristine = copy.deepcopy(scheduler)
    specs = {job.job_id: echelon_mod.echelons_of(job) for job in jobs}
    # filled by the together run, read by the alone runs (none: each job's index goes with the run)
    prepared: dict[str, _JobIndex] | None = {} if alone_runs and len(jobs) > 1 else None
    rule = DecisionRule(every_flow=rescheduling == "every-flow")
    together = _Run(topology, jobs, scheduler, check_invariants, specs, events, prepared, rule)
    alone_s: dict[str, float] = {}
    if len(jobs) == 1 or not alone_runs:
        together.run()
    elif workers > 1 and _can_fork():
        global _FORKED
        _FORKED = (topology, jobs, pristine, check_invariants, specs, events, prepared, rule)
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(min(workers - 1, len(jobs)), mp_context=context) as pool:
            pending = [pool.submit(_alone_in_child, index) for index in range(len(jobs))]
            together.run()
            alone_s = dict(future.result() for future in pending)
        _FORKED = None
    else:
        together.run()
        alone_s = dict(_alone(topology, job, pristine, check_invariants, specs, events, prepared, rule)
                       for job in jobs)
    # Only the times outlive the run: its state goes before the result is built (the peak of a large
    # trace is whichever of the two is larger, not their sum).
    start_s, finish_s = together.start_s, together.finish_s
    del together, prepared
    return build_run_in_order(scheduler.name, jobs, start_s, finish_s, alone_s, specs)


def _alone(
    topology: Topology, job: Job, pristine: Scheduler, check: bool, specs: Mapping,
    events: Sequence[FaultEvent] = (), prepared: dict[str, _JobIndex] | None = None,
    rule: DecisionRule = EXACT,
) -> tuple[str, float]:
    """(job id, completion time) of ``job`` alone on the network, under a fresh copy of ``pristine``."""
    run = _Run(topology, [job], copy.deepcopy(pristine), check, specs, events, prepared, rule)
    run.run()
    return job.job_id, completion_after_arrival_s(job, run.finish_s)


#: What forked alone-run workers read (set just before the pool forks them; nothing is pickled).
_FORKED: tuple | None = None


def _alone_in_child(index: int) -> tuple[str, float]:
    assert _FORKED is not None
    topology, jobs, scheduler, check, specs, events, prepared, rule = _FORKED
    return _alone(topology, jobs[index], scheduler, check, specs, events, prepared, rule)


def _can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


class _JobIndex:
    """One job's tasks and flows as a run reads them, built once per :func:`simulate`.

    The run with all jobs together and the job's run alone index the same tasks, dependencies and
    EchelonFlow rows and pin the same paths; building them once (dependency counts, path link numbers,
    wire sizes) halves the set-up of a simulation with alone runs.  Runs only read it.

    Tasks are numbered by declaration (``k``: ``tasks[k]``); a run adds the job's first task number.
    Per-flow data are flat arrays and dependencies are kept only for tasks that have them, because
    on a trace of 700,000 flows (FB2010) one Python object per flow and field cost more memory than
    everything else in the run (docs/performance.md, "Memory").
    """

    def __init__(self, job: Job, specs: Mapping[str, EchelonSpec]) -> None:
        jid = job.job_id
        self.job_id = jid
        self.tasks = task_sequence(job.tasks)  # a trace's columns: each task made as it is read
        columns = job.tasks if isinstance(job.tasks, FlowColumns) else None
        #: task -> how many distinct tasks it waits for, and task -> its dependants (declaration order);
        #: only tasks that have any (a trace's flows have none)
        self.waiting: dict[int, int] = {}
        self.dependants: dict[int, list[int]] = {}
        task_ids = columns.ids if columns is not None else [task.task_id for task in self.tasks]
        number = {task_id: k for k, task_id in enumerate(task_ids)}  # for this job's set-up only
        if columns is not None:  # flows without dependencies: every one a root
            self.roots = array("q", range(len(columns)))
        else:
            for k, task in enumerate(self.tasks):
                if task.deps:
                    unique = dict.fromkeys(task.deps)
                    self.waiting[k] = len(unique)
                    for dep in unique:
                        self.dependants.setdefault(number[dep], []).append(k)
            self.roots = array("q", (k for k, task in enumerate(self.tasks) if not task.deps))
        # echelons_of puts every flow in exactly one spec, so every flow gets a row below.
        self.echelons: list[tuple[str, EchelonSpec]] = []
        # numbers within one job as 32-bit integers (the run's table widens them): FB2010's rows peaked
        # with the table being built from them (docs/performance.md, "Memory at trace scale")
        rows, echelon_of, offsets, deltas = array("i"), array("i"), array("d"), array("d")
        for echelon, (echelon_id, spec) in enumerate(specs.items()):
            self.echelons.append((qualified(jid, echelon_id), spec))
            ideal = spec.ideal_start_s.values()
            for flow_id, offset_s, ideal_s in zip(spec.flow_ids, spec.offsets_s.values(), ideal):
                rows.append(number[flow_id])
                echelon_of.append(echelon)
                offsets.append(offset_s)
                # r = min over started flows of start_j - delta_j (echelon.reference_time)
                deltas.append(ideal_s - ideal[0])
        #: per flow row: its task, its EchelonFlow (index into ``echelons``), o_j and delta_j
        self.flow_task = np.frombuffer(rows, dtype=np.int32)
        self.flow_echelon = np.frombuffer(echelon_of, dtype=np.int32)
        self.offset_s = np.frombuffer(offsets, dtype=np.float64)
        self.delta_s = np.frombuffer(deltas, dtype=np.float64)
        #: the rows in the order of their task ids (a run ranks flows by ``job/task`` id from it)
        ids = [task_ids[k] for k in rows]
        self.id_order = np.array(sorted(range(len(ids)), key=ids.__getitem__), dtype=np.int32)
        #: per ``enforces``: each row's path as (link count per row, link numbers), pinned with nothing
        #: down (set-up)
        self.paths: dict[bool, tuple[np.ndarray, np.ndarray]] = {}
        self.wire_bytes: np.ndarray | None = None

    def qid(self, k: int) -> str:
        """The ``job/task`` id of task ``k`` (built on demand: errors, observers, snapshots)."""
        return qualified(self.job_id, task_id_at(self.tasks, k))


class _Run:
    """One simulation of a set of jobs (internal; use :func:`simulate`).

    Flows live in a :class:`FlowTable` built once for the whole run and numbered in the order the
    scheduler wants its active flows (``scheduler.active_order``), so the active set is just a sorted
    array of flow numbers and a decision reads the table in place.  Every decision is one call of
    ``scheduler.decide`` on a :class:`FlowView` whose source is the run itself (:meth:`flow_ids`,
    :meth:`groups`, :meth:`snapshot`: a policy that decides on a snapshot gets one built here).

    Tasks are numbered job by job in declaration order (``t``; the order :func:`build_run_in_order`
    reads times in), flows by the table (``f``); ``start_s`` and ``finish_s`` are arrays of doubles by
    task number (NaN: not yet) and per-flow state is arrays by flow number.  ``job/task`` ids are
    built only where one is shown (errors, observers, snapshots): a run of FB2010's 700,000 flows held
    them and a dozen per-flow dictionaries and lists, 800 MiB (docs/performance.md, "Memory").
    """

    #: Skip the decisions that change nothing (``Scheduler.blind_to_bytes``); False only to compare with
    #: the loop that makes every one (tests).
    skip_unchanged = True

    def __init__(
        self, topology: Topology, jobs: Sequence[Job], scheduler: Scheduler, check: bool,
        specs: Mapping[str, Mapping[str, EchelonSpec]], events: Sequence[FaultEvent] = (),
        prepared: dict[str, _JobIndex] | None = None, rule: DecisionRule = EXACT,
    ) -> None:
        self.topology = topology
        self.every_flow = rule.every_flow
        self.decision_interval_s = rule.interval_s
        self.last_decision_s = -math.inf
        self.deferred_until_s = math.inf  # a decision owed for finishes, made then at the latest
        self.links = LinkState()
        self.events = deque(sorted((e for e in events if e.network), key=lambda e: e.at_s))
        self.jobs = list(jobs)
        self.scheduler = scheduler
        self.check = check
        self.now_s = 0.0
        self.roots: list[array] = []  # per job: its tasks without dependencies (numbers within the job)
        self.waiting: dict[int, int] = {}  # task -> dependencies not yet done (tasks that have any)
        self.dependants: dict[int, list[int]] = {}  # task -> the tasks that wait for it (if any)
        # per host: heap of ready compute tasks (by number: job, then declaration order)
        self.host_ready: dict[str, list[int]] = {}
        self.host_busy: dict[str, bool] = {}
        # hosts in the order they first queued a compute (the order dispatch visits them), and the hosts
        # whose state changed since the last dispatch (a compute queued or finished): only they can start
        # one, so a step does not visit every host of a large fabric
        self.host_rank: dict[str, int] = {}
        self.dispatch_due: set[str] = set()
        self.running: list[tuple[float, int, int]] = []  # (finish_s, seq, task) of computes
        self.echelons: dict[str, _Echelon] = {}
        # (arrival_s, job index) of jobs not yet arrived; their root tasks are released then.
        self.arrivals: list[tuple[float, int]] = []
        self.valid_until_s = math.inf
        self.observing = type(scheduler).observe is not Scheduler.observe
        indexes: list[_JobIndex] = []
        for job in self.jobs:
            index = prepared.get(job.job_id) if prepared is not None else None
            if index is None:
                index = _JobIndex(job, specs[job.job_id])
                if prepared is not None:
                    prepared[job.job_id] = index
            indexes.append(index)
        # the tasks by number, job by job (a trace's columns stay columns: :meth:`task`)
        self.numbered = RunTasks(self.jobs, [index.tasks for index in indexes])
        for job_index, (job, index) in enumerate(zip(self.jobs, indexes)):
            self._index_job(job, index, self.numbered.bases[job_index])
            heapq.heappush(self.arrivals, (float(job.arrival_s), job_index))
        self._build_table(indexes)
        del indexes  # the jobs' rows (kept only in ``prepared``, for the runs alone)
        count = len(self.numbered)
        # by task number, NaN until set: doubles in place, not a Python float per task (33 MiB of them by
        # the end of FB2010's hour)
        self.start_s = array("d", [math.nan]) * count
        self.finish_s = array("d", [math.nan]) * count
        self.task_starts = 0  # tasks started so far (computes' tie-break: who started first)
        self.trimming = count >= TRIM_ABOVE_TASKS
        if self.trimming:  # before the run's state takes fresh pages
            freed_memory.return_freed_memory()
        self._init_state()

    # ------------------------------------------------------------------ setup
    def _index_job(self, job: Job, index: _JobIndex, base: int) -> None:
        """A job's roots, waits, dependants and EchelonFlows, its tasks numbered from ``base``."""
        self.roots.append(index.roots)
        self.waiting.update((base + k, n) for k, n in index.waiting.items())
        self.dependants.update((base + k, [base + d for d in deps]) for k, deps in index.dependants.items())
        for eqid, spec in index.echelons:
            self.echelons[eqid] = _Echelon(spec, job.job_id, -1, float(job.weight), eqid=eqid)

    def _build_table(self, indexes: list[_JobIndex]) -> None:
        """Number links, EchelonFlows and flows; pin each flow's path; order flows for the scheduler.

        Each column is gathered from the jobs and put in the scheduler's order one at a time, so the
        build holds the jobs' rows, the finished columns and one column in the making: FB2010's hour
        held the table twice over (unordered and ordered) and peaked 100 MiB above what the run keeps
        (docs/performance.md, "The run's table built column by column")."""
        capacity = self.capacity_bps = self.topology.capacity_bps()
        self.link_ids = list(capacity)
        self.link_index = {link: i for i, link in enumerate(self.link_ids)}
        for slot, eqid in enumerate(sorted(self.echelons)):
            self.echelons[eqid].slot = slot
        enforces = bool(self.scheduler.enforces)
        only_path: dict[tuple[str, str], list[int]] = {}  # host pairs with one shortest path: their links
        paths = [self._paths(index, enforces, only_path) for index in indexes]

        def column(parts: Iterable[np.ndarray], dtype: type, order: np.ndarray | None) -> np.ndarray:
            joined = np.concatenate(list(parts) or [np.zeros(0, dtype=dtype)]).astype(dtype, copy=False)
            return joined if order is None else joined[order]

        group = column((self._per_flow(index, "slot") for index in indexes), np.int64, None)
        offset = column((index.offset_s for index in indexes), np.float64, None)
        count = len(group)
        idrank = self._idranks(indexes, count)
        # Flows numbered in the order the scheduler wants its active flows, so ``active`` (kept sorted)
        # is already in that order and a decision reads the table in place.
        perm = np.asarray(numbering(self.scheduler.active_order, idrank, group, offset), dtype=np.int64)
        group, offset, idrank = group[perm], offset[perm], idrank[perm]
        lengths = column((p[0] for p in paths), np.int64, None)
        old_start = np.zeros(count, dtype=np.int64)
        np.cumsum(lengths[:-1], out=old_start[1:])
        lengths = lengths[perm]
        path_ptr = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(lengths, out=path_ptr[1:])
        # new position p of every link number: the old start of its flow plus its place along the path
        # (one gather instead of one slice per flow)
        gather = np.repeat(old_start[perm] - path_ptr[:-1], lengths)
        del old_start, lengths
        gather += np.arange(int(path_ptr[-1]), dtype=np.int64)
        path_links = column((p[1] for p in paths), np.int64, gather)
        del gather, paths
        self.table = FlowTable(
            capacity=np.array([capacity[link] for link in self.link_ids], dtype=np.float64),
            path_ptr=path_ptr,
            path_links=path_links,
            group=group,
            offset=offset,
            idrank=idrank,
            ref_slot=group,  # one reference slot per EchelonFlow: the group numbers themselves
            reference=np.full(len(self.echelons), math.inf),
            weight=column((self._per_flow(index, "weight") for index in indexes), np.float64, perm),
            remaining=column((index.wire_bytes for index in indexes), np.float64, perm),
        )
        # Per-event bookkeeping reads Python numbers out of these arrays through memoryviews (as fast as
        # a list, 8 bytes a flow): each flow's task, wire size, delta_j and EchelonFlow slot.
        self.flow_task_array = column((index.flow_task.astype(np.int64) + base
                                       for index, base in zip(indexes, self.numbered.bases)),
                                      numbers_dtype(len(self.numbered)), perm)
        deltas = column((index.delta_s for index in indexes), np.float64, perm)
        # None when every flow starts with its group's head (every Coflow: all of FB2010), where
        # ``now - 0.0`` is ``now`` bit for bit: 8 bytes a flow less
        self.delta_s = memoryview(deltas) if deltas.any() else None
        self._members()
        self.table.layout = object()  # replaced when a fault moves a path (``_faults``)
        self.table.rows = object()  # the run's flows are numbered once

    def _init_state(self) -> None:
        """The run's per-flow and per-group state, allocated once the jobs' rows are gone."""
        count = len(self.flow_task_array)
        self.flow_task = memoryview(self.flow_task_array)
        flow_of_task = np.full(len(self.numbered), -1, dtype=numbers_dtype(count))  # -1: a compute task
        flow_of_task[self.flow_task_array] = np.arange(count)
        self.flow_of_task = memoryview(flow_of_task)
        self.wire_array = self.table.remaining.copy()
        self.wire = memoryview(self.wire_array)
        self.flow_slot = memoryview(self.table.ref_slot)
        self.path_min_capacity: np.ndarray | None = None  # per flow: slowest link on its path (Aalo)
        self.slot_profiles: list[JobProfile] | None = None  # per EchelonFlow slot: its job's (crux)
        # each group's reference time as Python floats (mirrored into ``table.reference``, which the
        # kernels read, on every change)
        self.reference = self.table.reference.tolist()
        self.rate = np.zeros(count)
        # a step's finished flows and the bytes each had left (``fluid.advance``), in finishing order;
        # per-flow numbers below are 32-bit where they fit (docs/performance.md, "Memory")
        self.finished_buf = np.zeros(count, dtype=numbers_dtype(count))
        self.leftover_buf = np.zeros(count)
        self.undelivered: dict[int, float] = {}  # flow -> bytes it had left at its finish, beyond dust
        # the flows with a rate, listed by the decision (``Allocation.rated``) or by the step's
        # ``fluid.next_finish``, for its ``fluid.advance`` (not zeroed: only the listed part is read)
        self.rated_buf = np.empty(count, dtype=numbers_dtype(count))
        self.n_rated = 0
        self.rated_listed = False  # rated_buf holds the last decision's listing (``Allocation.rated``)
        # What a decision may take as given (``FlowView.clean``): ``active`` stays in flow-number order
        # (``fluid.merged``, ``fluid.advance``), a flow joins it with its whole size and leaves it at
        # BYTES_ATOL, and paths keep their lengths through faults; so no active flow is dust or pathless
        # unless one is from the start.  The flows with a rate, by number, as the last decision listed
        # them (``FlowView.rated_before``): none before the first.
        wire = self.wire_array
        moving = wire > 0.0
        pathless = np.diff(self.table.path_ptr) == 0
        self.clean = not bool(np.any(moving & (wire <= EPS_BYTES)) or np.any(moving & pathless))
        self.rated_before: np.ndarray | None = np.zeros(0, dtype=np.int64)
        self.active = np.zeros(0, dtype=np.int64)
        # flows started since the last decision: numbers in an array, not Python ints (FB2010 offline
        # starts all 701,486 flows at once: 28 MB of them)
        self.arrived = array("q")
        # Decisions that change nothing are skipped (module docstring, "Skipped decisions"): per link, how
        # many active flows cross it, and whether the flows of the last step left their links empty.
        self.skipping = self.skip_unchanged and bool(self.scheduler.blind_to_bytes)
        self.link_users = np.zeros(len(self.link_ids), dtype=np.int64)
        self.left_alone = False
        self.decisions = 0
        self.skipped = 0
        by_slot = self.state_by_slot = sorted(self.echelons.values(), key=lambda state: state.slot)
        self.group_weight = np.array([state.weight for state in by_slot], dtype=np.float64)
        self.group_start_s = np.full(len(by_slot), math.inf)
        # active flows per EchelonFlow (the coflow rule reads it, and :meth:`groups` finds the groups by it)
        self.group_active = np.zeros(len(by_slot), dtype=np.int64)
        # each EchelonFlow's first flow number, where the numbering keeps a group's flows together (every
        # order but "id"): a decision's groups are then found without walking the active flows
        self.group_first = (np.searchsorted(self.table.group, np.arange(len(by_slot)))
                            if self.scheduler.active_order != "id" else None)
        # Flows that finish in the same step complete in the order they started (and snapshots list
        # flows so): a policy that learns from observed finishes (echelon-online) sees them as it
        # would on the network, in arrival order, whatever the table's numbering.
        self.start_seq = np.zeros(count, dtype=numbers_dtype(count))
        self.started = 0
        # For what a non-clairvoyant policy sees (``groups(seen=True)``): each group's flows in the order
        # they started, group by group (``fluid.group_sent``'s listing: base, count, by_start; the
        # finished ones dropped there), so a group's bytes are summed in start order without sorting at
        # every decision; ``seen_position`` is scratch for finding a listed flow among the active ones.
        self.start_listing = None
        if not self.scheduler.clairvoyant:
            sizes = np.bincount(self.table.group, minlength=len(by_slot))
            self.start_listing = (np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64),
                                  np.zeros(len(by_slot), dtype=np.int64),
                                  np.empty(count, dtype=numbers_dtype(count)))
            self.seen_position = np.zeros(count, dtype=numbers_dtype(count))

    def _paths(self, index: _JobIndex, enforces: bool,
               only_path: dict[tuple[str, str], list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """One job's pinned paths as (link count per flow row, link numbers), and its wire sizes; both
        computed once per job and kept in ``index`` for its run alone.  ``only_path``: the links of the
        host pairs every flow of which takes one path, shared by the run's jobs (filled here)."""
        paths = index.paths.get(enforces)
        if paths is None:  # nothing is down while a run is set up: the pinned paths
            lengths, links = array("i"), array("i")
            # Links carry frames: the flow's payload plus its framing (Topology.wire_bytes); read in the
            # same walk, at the job's first paths (a trace's flow is made each time it is read)
            wire = array("d") if index.wire_bytes is None else None
            # a host pair with one shortest path pins every flow to it, and unscheduled traffic takes one
            # route per pair: its links looked up once per run (FB2010's 701,486 flows cross 21,462
            # pairs; a flow's id is hashed only where paths differ)
            for k in index.flow_task.tolist():
                task = index.tasks[k]
                if wire is not None:
                    wire.append(self.topology.wire_bytes(task.size_bytes))
                path = only_path.get((task.src, task.dst))
                if path is None:
                    pinned = self._path(index.qid(k), task)
                    path = [self.link_index[link] for link in Topology.links_of(pinned)]
                    if not enforces or len(self.topology.equal_cost_paths(task.src, task.dst)) == 1:
                        only_path[(task.src, task.dst)] = path
                lengths.append(len(path))
                links.extend(path)
            paths = index.paths[enforces] = (np.frombuffer(lengths, dtype=np.int32),
                                             np.frombuffer(links, dtype=np.int32))
            if wire is not None:
                index.wire_bytes = np.frombuffer(wire, dtype=np.float64)
        return paths

    def _per_flow(self, index: _JobIndex, name: str) -> np.ndarray:
        """One job's flow rows' EchelonFlow ``slot`` or ``weight``."""
        states = [self.echelons[eqid] for eqid, _ in index.echelons]
        dtype = np.int64 if name == "slot" else np.float64
        return np.array([getattr(state, name) for state in states], dtype=dtype)[index.flow_echelon]

    def _idranks(self, indexes: list[_JobIndex], count: int) -> np.ndarray:
        """Each flow row's rank among every flow's ``job/task`` id, without building the ids: job ids
        hold no '/', so ids sort as (job id + '/', task id) do."""
        starts = np.cumsum([0] + [len(index.flow_task) for index in indexes])
        idrank = np.empty(count, dtype=np.int64)
        rank = 0
        for j in sorted(range(len(indexes)), key=lambda j: indexes[j].job_id + "/"):
            n = len(indexes[j].flow_task)
            idrank[starts[j] + indexes[j].id_order] = np.arange(rank, rank + n, dtype=np.int64)
            rank += n
        return idrank

    def qid(self, t: int) -> str:
        """The ``job/task`` id of task ``t``."""
        return self.numbered.qid(*self.numbered.place(t))

    def task(self, t: int) -> Task:
        """Task ``t`` (a trace's flow is made as it is read, not kept)."""
        return self.numbered.task(*self.numbered.place(t))

    def flow_qid(self, f: int) -> str:
        """The ``job/task`` id of flow ``f``."""
        return self.qid(self.flow_task[f])

    def flow_number(self, qid: str) -> int:
        """Flow number of the flow ``job/task`` (tests; a linear search)."""
        return next(f for f in range(len(self.flow_task)) if self.flow_qid(f) == qid)

    def finish_of(self, qid: str) -> float | None:
        """When task ``job/task`` finished (tests; a linear search)."""
        return next(self.finish_s[t] for t in range(len(self.numbered)) if self.qid(t) == qid)

    def _members(self) -> None:
        """Every flow of each EchelonFlow in (offset, flow id) order (``FlowTable.members``): what the
        jobs have declared, which clairvoyant policies may count before a flow starts."""
        table = self.table
        by_group = np.lexsort((table.idrank, table.offset, table.group))
        ptr = np.zeros(len(self.echelons) + 1, dtype=np.int64)
        np.cumsum(np.bincount(table.group, minlength=len(self.echelons)), out=ptr[1:])
        table.members_ptr, table.members = ptr, by_group.astype(np.int64)

    def _path(self, qid: str, task: FlowTask) -> tuple[str, ...]:
        """Where the flow really goes: its own pinned path once a scheduler enforces (the controller
        installs it per 5-tuple), otherwise the host pair's route, like plain TCP on the fabric; around
        whatever is down now."""
        if self.scheduler.enforces:
            return self.topology.path_for(task.src, task.dst, qid, self.links)
        return self.topology.pair_path(task.src, task.dst, self.links)

    def _faults(self) -> bool:
        """Apply the events due now and re-pin every flow; True when a flow's path changed."""
        tol = due_tolerance_s(self.now_s, self.now_s)
        changed = False
        while self.events and self.events[0].at_s <= self.now_s + tol:
            changed = self.events.popleft().apply(self.links) or changed
        if not changed:
            return False
        moved = False
        table = self.table
        for f, t in enumerate(self.flow_task):
            start, stop = int(table.path_ptr[f]), int(table.path_ptr[f + 1])
            path = self._path(self.qid(t), self.task(t))
            links = [self.link_index[link] for link in Topology.links_of(path)]
            if links != table.path_links[start:stop].tolist():
                table.path_links[start:stop] = links  # equal-cost paths have equal lengths
                moved = True
        if moved:
            table.layout = object()
            self.path_min_capacity = None
            self.link_users[:] = 0
            fluid.count_links(self.active, len(self.active), table.path_ptr, table.path_links,
                              self.link_users, 1)
        return moved

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        """Simulate until every task is done; the times are then in ``start_s`` and ``finish_s``."""
        flows_changed = self._faults() | self._arrive()
        idle_expiries = 0  # steps in a row that only a decision's expiry triggered
        while True:
            self._dispatch_computes()
            decided = flows_changed and bool(self.arrived or len(self.active))
            if decided:
                self._decide()
            flows_changed = False
            next_s = self.running[0][0] if self.running else math.inf
            if self.arrivals and self.arrivals[0][0] < next_s:
                next_s = self.arrivals[0][0]
            if len(self.active) and self.now_s < self.valid_until_s < next_s:
                next_s = min(next_s, max(self.valid_until_s, self._least_step_s()))
            if self.events and self.events[0].at_s < next_s and (len(self.active) or self.running
                                                                 or self.arrivals):
                next_s = self.events[0].at_s
            if self.deferred_until_s < next_s:
                next_s = self.deferred_until_s
            if self.rated_listed:  # the decision just made listed its flows with a rate
                soonest_s = fluid.soonest(self.rated_buf, self.n_rated, self.table.remaining, self.rate,
                                          self.now_s)
                self.rated_listed = False  # the step's advance reuses rated_buf
            else:
                soonest_s, self.n_rated = fluid.next_finish(self.active, self.table.remaining, self.rate,
                                                            self.now_s, self.rated_buf)
            next_s = min(next_s, soonest_s)
            if next_s == math.inf:
                if len(self.active) and not self.every_flow and not decided:
                    flows_changed = True  # the coflow rule left every active flow idle: decide now
                    continue
                if len(self.active):
                    starving = min(self.flow_qid(f) for f in self.active.tolist())
                    raise SimulationError(
                        f"scheduler {self.scheduler.name!r} gives every active flow rate 0 at "
                        f"t={self.now_s:.6f}s with nothing else pending ({len(self.active)} flows starve, "
                        f"e.g. {starving!r})"
                    )
                break
            expired = self.now_s < self.valid_until_s <= next_s
            finished = self._advance(next_s)
            faulted = self._faults()
            flows_changed = faulted | (self._complete(finished) or self._arrive())
            idle_expiries = idle_expiries + 1 if expired and not (flows_changed or finished) else 0
            if idle_expiries > EXPIRIES_PER_FLOW * max(1, len(self.active)):
                raise SimulationError(
                    f"scheduler {self.scheduler.name!r} asked to decide again {idle_expiries} times in a row "
                    f"by t={self.now_s:.6f}s while no flow or compute finished and nothing arrived"
                )
            flows_changed = flows_changed or expired
            if flows_changed and self.left_alone and not (faulted or expired or self.arrived):
                flows_changed = False  # only flows alone on their links finished: same rates for the rest
                self.skipped += 1
            if self.decision_interval_s > 0.0:
                flows_changed = self._owed(flows_changed, faulted or expired or bool(self.arrived))
        undone = [t for t, finish_s in enumerate(self.finish_s) if math.isnan(finish_s)]
        if undone:
            raise SimulationError(
                f"{len(undone)} tasks never became ready (dependency cycle?), e.g. {self.qid(undone[0])!r}"
            )
        if self.check:
            self._check_delivered()

    def _owed(self, changed: bool, urgent: bool) -> bool:
        """Whether to decide now under a decision interval (module docstring, "Decision interval"):
        ``changed`` without ``urgent`` (a start, fault or expiry) means flows finished, which wait until
        the interval since the last decision has passed; the interval's end decides what they owe."""
        now_s = self.now_s
        due_s = self.last_decision_s + self.decision_interval_s
        if changed and not urgent and now_s < due_s:
            self.deferred_until_s = min(self.deferred_until_s, due_s)
            return False
        if changed or urgent or now_s >= self.deferred_until_s - due_tolerance_s(now_s, now_s):
            self.deferred_until_s = math.inf
            return True
        return False

    def _least_step_s(self) -> float:
        """The earliest time a step can end and move the bytes of every active flow that has a rate: at
        a tiny rate over a large flow, a decision's expiry (Aalo's next queue threshold) can lie closer
        than one unit in the last place of the flow's remaining bytes, or of the clock, and a step to it
        would change nothing, the same decision expiring again at the same distance, for ever.  The
        expiry is late by at most two such units' worth of time, 2**-51 of a flow's remaining time."""
        active = self.active
        rate = self.rate[active]
        moving = rate > 0
        if not moving.any():
            return math.inf
        # two units in the last place of the remaining bytes: the subtraction then rounds to a change
        bytes_step = 2.0 * np.spacing(self.table.remaining[active][moving])
        least_s = self.now_s + float((8.0 * bytes_step / rate[moving]).max())
        return max(least_s, math.nextafter(self.now_s, math.inf))

    def _arrive(self) -> bool:
        """Release the root tasks of every job whose arrival time has come; True when a flow started."""
        released = array("q")  # numbers, not Python ints: a trace starts hundreds of thousands at once
        tol = due_tolerance_s(self.now_s, self.now_s)
        while self.arrivals and self.arrivals[0][0] <= self.now_s + tol:
            _, job_index = heapq.heappop(self.arrivals)
            base = self.numbered.bases[job_index]
            released.extend(base + k for k in self.roots[job_index])
        return self._release(released)

    def _advance(self, next_s: float) -> list[int]:
        """Move the clock to ``next_s``; return the task numbers of flows and computes that finish then."""
        tol = due_tolerance_s(self.now_s, next_s)
        table = self.table
        first, end, done, self.left_alone = fluid.advance(
            self.active, self.rated_buf, self.n_rated, table.remaining, self.rate, self.leftover_buf,
            self.now_s, next_s, tol, BYTES_ATOL, self.finished_buf, self.skipping, table.path_ptr,
            table.path_links, self.link_users,
        )
        self.active = self.active[first:end]
        numbers = self.finished_buf[:done]
        if self.check and done:
            self._note_leftovers(numbers, self.leftover_buf[:done])
        if done > 1:
            numbers = numbers[np.argsort(self.start_seq[numbers])]
        numbers = numbers.tolist()
        flow_task = self.flow_task
        finished = [flow_task[f] for f in numbers]
        self.now_s = next_s
        while self.running and self.running[0][0] <= next_s + tol:
            _, _, t = heapq.heappop(self.running)
            finished.append(t)
        return finished

    def _complete(self, finished: list[int]) -> bool:
        """Finish tasks at ``now``; release their dependants.  True when the active flow set changed."""
        changed = False
        now_s, finish_s = self.now_s, self.finish_s
        flow_of_task, flow_slot = self.flow_of_task, self.flow_slot
        wire, state_by_slot, group_active = self.wire, self.state_by_slot, self.group_active
        for t in finished:
            finish_s[t] = now_s
            f = flow_of_task[t]
            if f < 0:
                host = self.task(t).host
                self.host_busy[host] = False
                self.dispatch_due.add(host)
            else:
                slot = flow_slot[f]
                state_by_slot[slot].finished_bytes += wire[f]
                if self.observing:
                    task = self.task(t)
                    self._observe("finish", t, task, float(task.size_bytes))
                group_active[slot] -= 1
                # the coflow rule decides again only once the flow's whole EchelonFlow is done
                changed = changed or self.every_flow or group_active[slot] == 0
        released = []
        waiting, dependants = self.waiting, self.dependants
        if dependants:
            for t in finished:
                for dep in dependants.get(t, ()):
                    left = waiting[dep] - 1
                    waiting[dep] = left
                    if left == 0:
                        released.append(dep)
        return self._release(released) or changed

    def _release(self, released: Iterable[int]) -> bool:
        """Tasks whose dependencies are all done: computes queue on their host, flows start now."""
        changed = False
        pending: deque[int] = deque()  # released by the ones released here, after all of those
        now_s, flow_of_task, start_seq = self.now_s, self.flow_of_task, self.start_seq
        start_s, flow_slot, group_active, wire = self.start_s, self.flow_slot, self.group_active, self.wire
        for t in _then_drained(released, pending):
            f = flow_of_task[t]
            if f < 0:  # a compute task: the smallest task number (job, then declaration) runs first
                task = self.task(t)
                ready = self.host_ready.get(task.host)
                if ready is None:
                    ready = self.host_ready[task.host] = []
                    self.host_rank[task.host] = len(self.host_rank)
                heapq.heappush(ready, t)
                self.dispatch_due.add(task.host)
                continue
            start_s[t] = now_s
            self.task_starts += 1
            start_seq[f] = self.started
            self.started += 1
            if self.start_listing is not None:
                base, listed, by_start = self.start_listing
                slot = flow_slot[f]
                by_start[base[slot] + listed[slot]] = f
                listed[slot] += 1
            self._note_start(f, t)
            if wire[f] <= 0:  # nothing to move (its wire bytes are its payload's): done the instant it starts
                self.finish_s[t] = self.now_s
                for dep in self.dependants.get(t, ()):
                    self.waiting[dep] -= 1
                    if self.waiting[dep] == 0:
                        pending.append(dep)
                continue
            self.arrived.append(f)
            group_active[flow_slot[f]] += 1
            changed = True
        return changed

    def _note_start(self, f: int, t: int) -> None:
        """Re-anchor the flow's EchelonFlow: r = min over its started flows of start_j - delta_j."""
        slot = self.flow_slot[f]
        now_s = self.now_s
        candidate = now_s if self.delta_s is None else now_s - self.delta_s[f]
        if candidate < self.reference[slot]:
            self.reference[slot] = candidate
            self.table.reference[slot] = candidate
        state = self.state_by_slot[slot]
        if now_s < state.first_start_s:  # the clock never goes back: the group's first start
            state.first_start_s = now_s
            self.group_start_s[slot] = now_s
        if self.observing:
            self._observe("start", t, self.task(t), 0.0)

    def _observe(self, kind: str, t: int, task: FlowTask, size_bytes: float) -> None:
        eqid = self.state_by_slot[self.flow_slot[self.flow_of_task[t]]].eqid
        self.scheduler.observe(FlowEvent(kind, self.qid(t), eqid, task.src, task.dst, self.now_s, size_bytes))

    def _dispatch_computes(self) -> None:
        """Start the next ready compute on every idle host that has one, hosts in the order they first
        queued a compute.  Only hosts whose state changed since the last call (a compute queued or
        finished there) can start one, so only they are visited: on a k=16 fabric visiting every host
        at every step was a sixth of coflow's run (docs/performance.md)."""
        due = self.dispatch_due
        if not due:
            return
        hosts = sorted(due, key=self.host_rank.__getitem__) if len(due) > 1 else list(due)
        due.clear()
        for host in hosts:
            self._start_next(host)

    def _start_next(self, host: str) -> None:
        """Start ``host``'s next ready compute (the smallest task number) if the host is idle."""
        ready = self.host_ready[host]
        if ready and not self.host_busy.get(host, False):
            t = heapq.heappop(ready)
            task = self.task(t)
            self.host_busy[host] = True
            self.start_s[t] = self.now_s
            self.task_starts += 1
            heapq.heappush(self.running, (self.now_s + task.duration_s, self.task_starts, t))

    # ------------------------------------------------------------------ scheduling
    def _decide(self) -> None:
        self.decisions += 1
        # also once the first decision is made: a policy builds its kept state there (``echelon``'s
        # totals, 50 MiB on FB2010) and leaves what it built them from in the heap
        if self.trimming and (self.decisions % TRIM_EVERY_DECISIONS == 0 or self.decisions == 2):
            freed_memory.return_freed_memory()
        self.last_decision_s = self.now_s
        self.deferred_until_s = math.inf
        if self.arrived:
            table = self.table
            arrived = np.sort(np.frombuffer(self.arrived, dtype=np.int64))
            self.active = fluid.merged(self.active, arrived, self.skipping, table.path_ptr, table.path_links,
                                       self.link_users)
            self.arrived = array("q")
        # one policy writes self.rate, and nothing else does between its decisions: ``rates_kept``
        view = FlowView(self.now_s, self.table, self.active, self, self.rate, self.every_flow, self.check,
                        self.clean, self.rated_before, rates_kept=True)
        allocation = self.scheduler.decide(view)
        rated = allocation.rated
        self.rated_before = None if rated is None else np.array(rated, dtype=np.int64)
        self.valid_until_s = allocation.valid_until_s
        if self.check:
            check_decision(view, allocation)
        self.rated_listed = allocation.rated is not None
        if self.rated_listed:
            self.n_rated = len(rated)
            self.rated_buf[:self.n_rated] = rated

    # ------------------------------------------------------------------ the view's source
    def flow_ids(self, numbers: Sequence[int]) -> list[str]:
        return [self.flow_qid(f) for f in numbers]

    def groups(self, view: FlowView, seen: bool) -> GroupView:
        """The active flows cut into groups (flows are numbered group by group), with what the network
        would have seen of them when ``seen``: as a snapshot's flows would say it."""
        table = self.table
        active = self.active
        if self.group_first is not None:  # flows numbered group by group, in slot order
            heads = np.flatnonzero(self.group_active)
            group_ptr = [*np.searchsorted(active, self.group_first[heads]).tolist(), len(active)]
        else:
            slots = table.group[active]
            group_ptr = [0, *(np.flatnonzero(np.diff(slots)) + 1).tolist(), len(active)]
            heads = slots[group_ptr[:-1]]
        out = GroupView(group_ptr=group_ptr, heads=heads.tolist(), start_s=self.group_start_s[heads].tolist(),
                        weight=self.group_weight[heads].tolist())
        if seen:
            if self.start_listing is None:
                raise ValueError(f"{self.scheduler.name}: what the network has seen (groups(seen=True)) is "
                                 "kept for non-clairvoyant policies only: set clairvoyant = False")
            # each group's bytes summed in the order its flows started, as a snapshot lists them: the
            # controller's floating-point sums to the last bit (a chaotic run amplifies the last bit)
            sent, totals = np.empty(len(active)), np.empty(len(out.heads))
            fluid.group_sent(active, heads, self.start_listing, self.wire_array, table.remaining,
                             self.seen_position, sent, totals)
            out.attained_bytes = [self.state_by_slot[slot].finished_bytes + total
                                  for slot, total in zip(out.heads, totals.tolist())]
            out.flow_sent_bytes = sent
            if self.path_min_capacity is None:  # per run, and again after a fault moved paths
                self.path_min_capacity = np.minimum.reduceat(table.capacity[table.path_links],
                                                             table.path_ptr[:-1])
            slowest = self.path_min_capacity[self.active]
            out.slowest_bps = float(slowest.min()) if len(slowest) else math.inf
        return out

    def job_profiles(self, view: FlowView, groups: GroupView) -> list[JobProfile] | None:
        """Each group's job's :class:`JobProfile` (``echelonflow.schedulers.crux``), made once per run."""
        if self.slot_profiles is None:
            self.slot_profiles = self._slot_profiles()
        return [self.slot_profiles[head] for head in groups.heads]

    def _slot_profiles(self) -> list[JobProfile]:
        """Per EchelonFlow slot, its job's profile: compute seconds over its wire bytes' time on its most
        loaded link, and its links (pinned paths, the links' rates when the run starts).  A job without
        compute has intensity 0 whatever its traffic, so its flows are not walked (FB2010's coflows)."""
        table = self.table
        flow_job = np.searchsorted(np.array(self.numbered.bases), self.flow_task_array, side="right") - 1
        path_ptr, path_links, wire = table.path_ptr.tolist(), table.path_links, self.wire_array
        by_job: dict[str, JobProfile] = {}
        for j, job in enumerate(self.jobs):
            compute_s = job_compute_s(job)
            flows = np.flatnonzero(flow_job == j).tolist() if compute_s > 0.0 else []
            by_job[job.job_id] = job_profile(
                job.job_id, compute_s,
                ((path_links[path_ptr[f]:path_ptr[f + 1]].tolist(), float(wire[f])) for f in flows),
                table.capacity)
        return [by_job[state.job_id] for state in self.state_by_slot]

    def snapshot(self, view: FlowView) -> Snapshot:
        """The active flows as a :class:`Snapshot` (listed in start order), as the controller makes one."""
        table = self.table
        active = self.active[np.argsort(self.start_seq[self.active])].tolist()
        sent = {f: self.wire[f] - float(table.remaining[f]) for f in active}
        eqid_of = {f: self.state_by_slot[self.flow_slot[f]].eqid for f in active}
        group_sent: dict[str, float] = {}
        for f in active:
            group_sent[eqid_of[f]] = group_sent.get(eqid_of[f], 0.0) + sent[f]
        flows = []
        for f in active:
            state = self.echelons[eqid_of[f]]
            reference_s = float(table.reference[state.slot])
            offset_s = float(table.offset[f])
            links = table.path_links[table.path_ptr[f]:table.path_ptr[f + 1]].tolist()
            flows.append(ActiveFlow(
                flow_id=self.flow_qid(f), echelon_id=eqid_of[f],
                path=tuple(self.link_ids[li] for li in links), remaining_bytes=float(table.remaining[f]),
                ideal_finish_s=reference_s + offset_s, offset_s=offset_s, reference_s=reference_s,
                weight=state.weight, sent_bytes=sent[f],
                group_sent_bytes=state.finished_bytes + group_sent[eqid_of[f]],
                group_start_s=state.first_start_s,
            ))
        return Snapshot(self.now_s, self.capacity_bps, flows)

    # ------------------------------------------------------------------ results
    def _note_leftovers(self, finished: np.ndarray, leftover: np.ndarray) -> None:
        """Keep what the flows finishing now had left beyond dust, for :meth:`_check_delivered` (a
        per-step buffer instead of a per-flow array: 8 bytes a flow less in every run)."""
        for k in np.flatnonzero(leftover > BYTES_ATOL).tolist():
            self.undelivered[int(finished[k])] = float(leftover[k])

    def _check_delivered(self) -> None:
        for f, left in sorted(self.undelivered.items()):
            size = self.task(self.flow_task[f]).size_bytes
            if left > max(BYTES_ATOL, 1e-6 * size):
                qid = self.flow_qid(f)
                raise AssertionError(f"flow {qid}: {left} of {size} bytes undelivered at its finish")
