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
times by ``echelonflow.results.build_run``, the same builder the emulation uses.

A job's completion time counts from its arrival.  Slowdown of a job = its completion time with all jobs
together / its completion time when it runs alone on the same network with the same scheduler (one
extra run per job when there are several).

Pure: no os_ken, no mininet.  Invariants (no directed link over capacity, non-negative rates, every
byte delivered) are checked on every decision unless ``check_invariants=False``.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from echelonflow import echelon as echelon_mod
from echelonflow.echelon import EchelonSpec
from echelonflow.errors import UserError
from echelonflow.model import ComputeTask, FlowTask, Job, qualified
from echelonflow.results import RunResult, build_run, job_completion_s
from echelonflow.schedulers.base import ActiveFlow, Decision, FlowEvent, Scheduler, Snapshot
from echelonflow.topology import Topology

#: The simulator's result for one scheduler is exactly the shared result shape's run.
SimulationResult = RunResult

#: Relative tolerance: a flow whose finish lies within this fraction of a time step is finished.
TIME_RTOL = 1e-9
#: Bytes left below this count as delivered (floating-point dust).
BYTES_ATOL = 1e-6
#: Allowed relative excess of a link's summed rates over its capacity.
CAPACITY_RTOL = 1e-6


class SimulationError(RuntimeError):
    """The simulation cannot make progress (a scheduler starving every flow, or a dependency cycle)."""


@dataclass
class _Flow:
    """Mutable state of one started flow (its start time is in ``_Run.start_s``)."""

    echelon_qid: str
    offset_s: float
    links: tuple[Any, ...]
    remaining_bytes: float
    rate_bps: float = 0.0


@dataclass
class _EchelonState:
    """One EchelonFlow's run-time anchor: the actual starts of its flows and the reference time r."""

    spec: EchelonSpec
    job_id: str
    weight: float = 1.0
    starts_s: dict[str, float] = field(default_factory=dict)
    reference_s: float = math.inf
    first_start_s: float = math.inf
    finished_bytes: float = 0.0  # wire bytes of its flows that have finished


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
    placement_check: bool = True,
    check_invariants: bool = True,
    alone_runs: bool = True,
) -> SimulationResult:
    """Run all ``jobs`` together (and each alone, for slowdowns); return the shared result shape.

    Every run gets its own copy of ``scheduler`` as it was passed in, so a policy that learns
    (``echelon-online``) starts each run knowing nothing.  ``alone_runs=False`` skips the runs alone
    (slowdowns are then 1.0): for studies that only need completion times.
    """
    if placement_check:
        check_placement(topology, jobs)
    pristine = copy.deepcopy(scheduler)
    together = _Run(topology, jobs, scheduler, check_invariants)
    together.run()
    alone_s: dict[str, float] = {}
    if len(jobs) > 1 and alone_runs:
        for job in jobs:
            solo = _Run(topology, [job], copy.deepcopy(pristine), check_invariants)
            solo.run()
            alone_s[job.job_id] = job_completion_s(job, solo.finish_s)
    return build_run(scheduler.name, jobs, together.start_s, together.finish_s, alone_s, together.specs)


class _Run:
    """One simulation of a set of jobs (internal; use :func:`simulate`)."""

    def __init__(self, topology: Topology, jobs: Sequence[Job], scheduler: Scheduler, check: bool) -> None:
        self.topology = topology
        self.jobs = list(jobs)
        self.scheduler = scheduler
        self.check = check
        self.capacity_bps = topology.capacity_bps()
        self.now_s = 0.0
        self.task_of: dict[str, tuple[int, int, Any]] = {}  # qid -> (job index, declaration index, task)
        self.waiting: dict[str, int] = {}
        self.dependants: dict[str, list[str]] = {}
        self.start_s: dict[str, float] = {}
        self.finish_s: dict[str, float] = {}
        self.host_ready: dict[str, list[tuple[int, int, str]]] = {}
        self.host_busy: dict[str, bool] = {}
        self.running: list[tuple[float, int, str]] = []  # (finish_s, seq, qid) of computes
        self.active: dict[str, _Flow] = {}
        self.flow_echelon: dict[str, tuple[str, float]] = {}  # flow qid -> (echelon qid, offset_s)
        self.echelons: dict[str, _EchelonState] = {}
        self.specs: dict[str, dict[str, EchelonSpec]] = {}  # job id -> its EchelonFlows
        self.leftover_bytes: dict[str, float] = {}
        # (arrival_s, job index) of jobs not yet arrived; their root tasks are released then.
        self.arrivals: list[tuple[float, int]] = []
        self.valid_until_s = math.inf
        self.observing = type(scheduler).observe is not Scheduler.observe
        for job_index, job in enumerate(self.jobs):
            self._index_job(job_index, job)
            heapq.heappush(self.arrivals, (float(job.arrival_s), job_index))

    # ------------------------------------------------------------------ setup
    def _index_job(self, job_index: int, job: Job) -> None:
        for decl, task in enumerate(job.tasks.values()):
            qid = qualified(job.job_id, task.task_id)
            self.task_of[qid] = (job_index, decl, task)
            self.waiting[qid] = len(set(task.deps))
            self.dependants[qid] = []
        for task in job.tasks.values():
            for dep in dict.fromkeys(task.deps):
                self.dependants[qualified(job.job_id, dep)].append(qualified(job.job_id, task.task_id))
        # echelons_of puts every flow in exactly one spec, so every flow has an entry below.
        self.specs[job.job_id] = echelon_mod.echelons_of(job)
        for echelon_id, spec in self.specs[job.job_id].items():
            eqid = qualified(job.job_id, echelon_id)
            self.echelons[eqid] = _EchelonState(spec, job.job_id, float(job.weight))
            for flow_id in spec.flow_ids:
                self.flow_echelon[qualified(job.job_id, flow_id)] = (eqid, spec.offsets_s[flow_id])

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        """Simulate until every task is done; the times are then in ``start_s`` and ``finish_s``."""
        flows_changed = self._arrive()
        while True:
            self._dispatch_computes()
            if flows_changed and self.active:
                self._decide()
            flows_changed = False
            next_s = self.running[0][0] if self.running else math.inf
            if self.arrivals and self.arrivals[0][0] < next_s:
                next_s = self.arrivals[0][0]
            if self.active and self.now_s < self.valid_until_s < next_s:
                next_s = self.valid_until_s
            for flow in self.active.values():
                if flow.rate_bps > 0:
                    done_s = self.now_s + 8.0 * flow.remaining_bytes / flow.rate_bps
                    if done_s < next_s:
                        next_s = done_s
            if next_s == math.inf:
                if self.active:
                    raise SimulationError(
                        f"scheduler {self.scheduler.name!r} gives every active flow rate 0 at "
                        f"t={self.now_s:.6f}s with nothing else pending ({len(self.active)} flows starve, "
                        f"e.g. {min(self.active)!r})"
                    )
                break
            expired = self.now_s < self.valid_until_s <= next_s
            finished = self._advance(next_s)
            flows_changed = self._complete(finished) or self._arrive() or expired
        undone = [qid for qid in self.task_of if qid not in self.finish_s]
        if undone:
            raise SimulationError(
                f"{len(undone)} tasks never became ready (dependency cycle?), e.g. {undone[0]!r}"
            )
        if self.check:
            self._check_delivered()

    def _arrive(self) -> bool:
        """Release the root tasks of every job whose arrival time has come; True when a flow started."""
        released = []
        tol = TIME_RTOL * max(1.0, self.now_s)
        while self.arrivals and self.arrivals[0][0] <= self.now_s + tol:
            _, job_index = heapq.heappop(self.arrivals)
            job = self.jobs[job_index]
            released.extend(qualified(job.job_id, t.task_id) for t in job.tasks.values() if not t.deps)
        return self._release(released)

    def _advance(self, next_s: float) -> list[str]:
        """Move the clock to ``next_s``; return the qids of flows and computes that finish then."""
        dt = next_s - self.now_s
        tol = TIME_RTOL * max(1.0, next_s)
        finished: list[str] = []
        for qid, flow in self.active.items():
            if flow.rate_bps <= 0:
                continue
            done_s = self.now_s + 8.0 * flow.remaining_bytes / flow.rate_bps
            if done_s <= next_s + tol:
                self.leftover_bytes[qid] = max(0.0, flow.remaining_bytes - flow.rate_bps * dt / 8.0)
                flow.remaining_bytes = 0.0
                finished.append(qid)
            else:
                flow.remaining_bytes -= flow.rate_bps * dt / 8.0
                if flow.remaining_bytes <= BYTES_ATOL:
                    self.leftover_bytes[qid] = max(0.0, flow.remaining_bytes)
                    flow.remaining_bytes = 0.0
                    finished.append(qid)
        self.now_s = next_s
        while self.running and self.running[0][0] <= next_s + tol:
            _, _, qid = heapq.heappop(self.running)
            finished.append(qid)
        return finished

    def _complete(self, qids: list[str]) -> bool:
        """Finish tasks at ``now``; release their dependants.  True when the active flow set changed."""
        changed = False
        for qid in qids:
            self.finish_s[qid] = self.now_s
            task = self.task_of[qid][2]
            if isinstance(task, ComputeTask):
                self.host_busy[task.host] = False
            else:
                flow = self.active.pop(qid)
                state = self.echelons[flow.echelon_qid]
                state.finished_bytes += self.topology.wire_bytes(task.size_bytes)
                if self.observing:
                    self._observe("finish", qid, task, float(task.size_bytes))
                changed = True
        released = []
        for qid in qids:
            for dep in self.dependants[qid]:
                self.waiting[dep] -= 1
                if self.waiting[dep] == 0:
                    released.append(dep)
        return self._release(released) or changed

    def _release(self, qids: list[str]) -> bool:
        """Tasks whose dependencies are all done: computes queue on their host, flows start now."""
        changed = False
        pending = deque(qids)
        while pending:
            qid = pending.popleft()
            job_index, decl, task = self.task_of[qid]
            if isinstance(task, ComputeTask):
                heapq.heappush(self.host_ready.setdefault(task.host, []), (job_index, decl, qid))
                continue
            self.start_s[qid] = self.now_s
            self._note_start(qid, task)
            if task.size_bytes <= 0:  # nothing to move: done the instant it starts
                self.finish_s[qid] = self.now_s
                for dep in self.dependants[qid]:
                    self.waiting[dep] -= 1
                    if self.waiting[dep] == 0:
                        pending.append(dep)
                continue
            eqid, offset_s = self.flow_echelon[qid]
            # Where the flow really goes: its own pinned path once a scheduler enforces (the controller
            # installs it per 5-tuple), otherwise the host pair's route, like plain TCP on the fabric.
            if self.scheduler.enforces:
                path = self.topology.path_for(task.src, task.dst, qid)
            else:
                path = self.topology.pair_path(task.src, task.dst)
            # Links carry frames: the flow's payload plus its TCP/IP/Ethernet framing (Topology.wire_bytes).
            wire_bytes = self.topology.wire_bytes(task.size_bytes)
            self.active[qid] = _Flow(eqid, offset_s, Topology.links_of(path), wire_bytes)
            changed = True
        return changed

    def _note_start(self, qid: str, task: FlowTask) -> None:
        """Record a flow's actual start and re-anchor its EchelonFlow's reference time."""
        state = self.echelons[self.flow_echelon[qid][0]]
        state.starts_s[task.task_id] = self.now_s
        state.reference_s = float(echelon_mod.reference_time(state.spec, state.starts_s))
        state.first_start_s = min(state.first_start_s, self.now_s)
        if self.observing:
            self._observe("start", qid, task, 0.0)

    def _observe(self, kind: str, qid: str, task: FlowTask, size_bytes: float) -> None:
        eqid = self.flow_echelon[qid][0]
        self.scheduler.observe(FlowEvent(kind, qid, eqid, task.src, task.dst, self.now_s, size_bytes))

    def _dispatch_computes(self) -> None:
        for host, ready in self.host_ready.items():
            if ready and not self.host_busy.get(host, False):
                _, _, qid = heapq.heappop(ready)
                task = self.task_of[qid][2]
                self.host_busy[host] = True
                self.start_s[qid] = self.now_s
                heapq.heappush(self.running, (self.now_s + task.duration_s, len(self.start_s), qid))

    # ------------------------------------------------------------------ scheduling
    def _decide(self) -> None:
        group_sent: dict[str, float] = {}
        sent: dict[str, float] = {}
        for qid, flow in self.active.items():
            sent[qid] = self.topology.wire_bytes(self.task_of[qid][2].size_bytes) - flow.remaining_bytes
            group_sent[flow.echelon_qid] = group_sent.get(flow.echelon_qid, 0.0) + sent[qid]
        flows = []
        for qid, flow in self.active.items():
            state = self.echelons[flow.echelon_qid]
            reference_s = state.reference_s
            flows.append(
                ActiveFlow(
                    flow_id=qid,
                    echelon_id=flow.echelon_qid,
                    path=flow.links,
                    remaining_bytes=flow.remaining_bytes,
                    ideal_finish_s=reference_s + flow.offset_s,
                    offset_s=flow.offset_s,
                    reference_s=reference_s,
                    weight=state.weight,
                    sent_bytes=sent[qid],
                    group_sent_bytes=state.finished_bytes + group_sent[flow.echelon_qid],
                    group_start_s=state.first_start_s,
                )
            )
        snapshot = Snapshot(self.now_s, self.capacity_bps, flows)
        decision = self.scheduler.decide(snapshot)
        if self.check:
            check_decision(snapshot, decision)
        self.valid_until_s = decision.valid_until_s
        for qid, flow in self.active.items():
            flow.rate_bps = float(decision.rate_bps.get(qid, 0.0))

    # ------------------------------------------------------------------ results
    def _check_delivered(self) -> None:
        for qid, left in self.leftover_bytes.items():
            size = self.task_of[qid][2].size_bytes
            if left > max(BYTES_ATOL, 1e-6 * size):
                raise AssertionError(f"flow {qid}: {left} of {size} bytes undelivered at its finish")


def check_decision(snapshot: Snapshot, decision: Decision) -> None:
    """The invariants every scheduler must keep: a rate per flow, non-negative, no link over capacity."""
    load: dict[Any, float] = {}
    for flow in snapshot.flows:
        if flow.flow_id not in decision.rate_bps:
            raise AssertionError(f"decision has no rate for flow {flow.flow_id}")
        rate = decision.rate_bps[flow.flow_id]
        if not rate >= 0 or math.isinf(rate):
            raise AssertionError(f"flow {flow.flow_id}: bad rate {rate!r}")
        for link in flow.path:
            load[link] = load.get(link, 0.0) + rate
    for link, used in load.items():
        cap = snapshot.capacity_bps[link]
        if used > cap * (1 + CAPACITY_RTOL):
            raise AssertionError(f"link {link}: {used} bps allocated over capacity {cap} bps")
