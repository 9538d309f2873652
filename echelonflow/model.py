"""A training job as a DAG of compute and flow tasks.

This is the one workload representation shared by the trace loader, the workload generators, the
EchelonFlow grouping, the simulator and the traffic agents.  A job is *what* must happen; *when* it
happens is decided by whoever executes it (simulator or agents) under the rule that a host runs its
compute tasks one at a time (it is a GPU) and a task starts once all its dependencies are done.

Every flow names the EchelonFlow it belongs to (``echelon_id``).  Generators set it according to the
paper's Table 1; traces may state it, otherwise each flow is its own group.  Ideal finish offsets are
not stored here: they are derived from the DAG (``echelonflow.echelon``), so they can never disagree
with the compute durations.

Kept Python 3.9 compatible: the controller (ryu-manager in the VM) imports it.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from typing import Union

#: ``__slots__`` on tasks where dataclasses can add them (Python 3.10+; the controller's 3.9 venv goes
#: without): 48 bytes less per task, 32 MiB on the FB2010 trace's 700,000 flows (docs/performance.md,
#: "Memory").
_SLOTS = {"slots": True} if sys.version_info >= (3, 10) else {}


@dataclass(frozen=True, **_SLOTS)
class ComputeTask:
    """A timed piece of work on one host's accelerator."""

    task_id: str
    host: str
    duration_s: float
    deps: tuple[str, ...] = ()
    label: str = ""


@dataclass(frozen=True, **_SLOTS)
class FlowTask:
    """Bytes that must move from ``src`` to ``dst`` before its dependants may start."""

    task_id: str
    src: str
    dst: str
    size_bytes: int
    deps: tuple[str, ...] = ()
    echelon_id: str = ""
    label: str = ""


Task = Union[ComputeTask, FlowTask]


class FlowColumns(Mapping):
    """A job's tasks when every one is a flow of one EchelonFlow without dependencies (a coflow trace's
    job), held as columns; a :class:`FlowTask` is made each time one is read.

    Why: FB2010's 701,486 ``FlowTask`` objects (88 bytes each) and its jobs' task dictionaries took 77
    MiB, held by the trace and by every run of it for its whole length, the largest share of the exact
    rule's peak (docs/performance.md, "A trace's coflows as columns"); the columns take 24 bytes a flow.
    A job holding them is built whole by its importer (:meth:`append`) and read only after.
    """

    __slots__ = ("ids", "hosts", "src", "dst", "sizes", "echelon_id", "_by_id")

    def __init__(self, hosts: Sequence[str], echelon_id: str) -> None:
        if not echelon_id:
            raise ValueError("columns' flows need an echelon id (without one each flow is its own group)")
        self.hosts = hosts  # the names ``src`` and ``dst`` number (shared by a trace's jobs)
        self.echelon_id = echelon_id
        self.ids: list[str] = []
        self.src = array("i")
        self.dst = array("i")
        self.sizes = array("q")
        self._by_id: array | None = None  # positions in id order, made at the first look-up by id

    def append(self, task_id: str, src: int, dst: int, size_bytes: int) -> None:
        """One more flow, ``src`` and ``dst`` numbering ``hosts``; its id must be new to the job."""
        self.ids.append(task_id)
        self.src.append(src)
        self.dst.append(dst)
        self.sizes.append(size_bytes)
        self._by_id = None

    def at(self, k: int) -> FlowTask:
        """The ``k``-th flow (declaration order)."""
        return FlowTask(self.ids[k], self.hosts[self.src[k]], self.hosts[self.dst[k]], self.sizes[k], (),
                        self.echelon_id)

    def position(self, task_id: str) -> int:
        """Where the flow ``task_id`` is declared, or -1: a binary search over the ids' order, which a
        dictionary of every id would have held at 16 MiB on FB2010."""
        by_id, ids = self._by_id, self.ids
        if by_id is None:
            by_id = self._by_id = array("i", sorted(range(len(ids)), key=ids.__getitem__))
        lo, hi = 0, len(by_id)
        while lo < hi:
            mid = (lo + hi) // 2
            if ids[by_id[mid]] < task_id:
                lo = mid + 1
            else:
                hi = mid
        return by_id[lo] if lo < len(by_id) and ids[by_id[lo]] == task_id else -1

    def __getitem__(self, task_id: str) -> FlowTask:
        k = self.position(task_id) if isinstance(task_id, str) else -1
        if k < 0:
            raise KeyError(task_id)
        return self.at(k)

    def __contains__(self, task_id: object) -> bool:
        return isinstance(task_id, str) and self.position(task_id) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def values(self) -> ColumnTasks:
        return ColumnTasks(self)

    def items(self) -> Iterator[tuple[str, FlowTask]]:  # type: ignore[override]
        return zip(self.ids, ColumnTasks(self))


class ColumnTasks(ValuesView, Sequence):
    """:class:`FlowColumns`' flows in declaration order, made as they are read: iterating them walks the
    columns (a mapping's values would look each id up), and a run reads the ``k``-th by number."""

    def __iter__(self) -> Iterator[FlowTask]:
        columns = self._mapping
        return (columns.at(k) for k in range(len(columns)))

    def __getitem__(self, k: int) -> FlowTask:  # type: ignore[override]
        return self._mapping.at(k)

    def task_id(self, k: int) -> str:
        return self._mapping.ids[k]


def task_sequence(tasks: Mapping[str, Task]) -> Sequence[Task]:
    """A job's tasks in declaration order, by number: columns' flows are made as they are read."""
    return tasks.values() if isinstance(tasks, FlowColumns) else list(tasks.values())


def task_id_at(tasks: Sequence[Task], k: int) -> str:
    """The id of ``tasks[k]`` (a :func:`task_sequence`), read off columns without making the task."""
    return tasks.task_id(k) if isinstance(tasks, ColumnTasks) else tasks[k].task_id


@dataclass
class Job:
    """A named DAG of tasks; ``tasks`` keeps declaration order (used to break ties deterministically).
    A trace's coflow may hold them as :class:`FlowColumns`, read-only."""

    job_id: str
    tasks: dict[str, Task] | FlowColumns = field(default_factory=dict)
    # When the job enters the cluster (seconds from the run's start): no task starts earlier, and its
    # completion time counts from here.
    arrival_s: float = 0.0
    # Eq. 4's weight w_i (> 0): how much its EchelonFlows' tardiness counts; schedulers that can use it.
    weight: float = 1.0
    # EchelonFlow id -> kind ("coflow" or "staggered"); informational, for reports.
    echelon_kinds: dict[str, str] = field(default_factory=dict)
    # Optional explicit ideal finish offsets (seconds after the head flow) from a trace; when absent
    # they are derived from the DAG.
    explicit_offsets_s: dict[str, float] = field(default_factory=dict)

    def add(self, task: Task) -> Task:
        if isinstance(self.tasks, FlowColumns):
            raise TypeError(f"job {self.job_id!r}: its tasks are a trace's columns, which are read-only")
        if task.task_id in self.tasks:
            raise ValueError(f"job {self.job_id!r}: duplicate task id {task.task_id!r}")
        self.tasks[task.task_id] = task
        return task

    @property
    def flows(self) -> list[FlowTask]:
        return [t for t in self.tasks.values() if isinstance(t, FlowTask)]

    @property
    def computes(self) -> list[ComputeTask]:
        return [t for t in self.tasks.values() if isinstance(t, ComputeTask)]

    @property
    def hosts(self) -> list[str]:
        """Every host the job touches, in first-use order."""
        seen: dict[str, None] = {}
        for task in self.tasks.values():
            if isinstance(task, ComputeTask):
                seen.setdefault(task.host)
            else:
                seen.setdefault(task.src)
                seen.setdefault(task.dst)
        return list(seen)

    def dependants(self) -> dict[str, list[str]]:
        """task id -> ids of the tasks that depend on it (declaration order)."""
        out: dict[str, list[str]] = {tid: [] for tid in self.tasks}
        for task in self.tasks.values():
            for dep in task.deps:
                out[dep].append(task.task_id)
        return out


def qualified(job_id: str, task_id: str) -> str:
    """Globally unique id of a task or EchelonFlow across jobs (jobs may reuse task ids)."""
    return f"{job_id}/{task_id}"


def echelon_members(job: Job) -> dict[str, list[str]]:
    """EchelonFlow id -> its flow ids in declaration order; a flow with no ``echelon_id`` is alone in a
    group named by its own task id (so that id must not also be another group's echelon id)."""
    members: dict[str, list[str]] = {}
    for flow in job.flows:
        members.setdefault(flow.echelon_id or flow.task_id, []).append(flow.task_id)
    return members


def ungrouped_clashes(job: Job, members: dict[str, list[str]]) -> list[str]:
    """Flows without an echelon whose task id is also the echelon id of other flows (ambiguous groups)."""
    return [f.task_id for f in job.flows if not f.echelon_id and len(members[f.task_id]) > 1]


def unknown_deps(job: Job) -> list[tuple[str, str]]:
    """(task id, missing dependency id) pairs, in declaration order; empty when every dep exists."""
    return [(task.task_id, dep) for task in job.tasks.values() for dep in task.deps if dep not in job.tasks]


def find_cycle(job: Job) -> list[str]:
    """Task ids along one dependency cycle (each depends on the next... and the last on the first).

    Empty when the DAG is acyclic.  Unknown dependencies are ignored here (see :func:`unknown_deps`).
    Iterative, so a job with tens of thousands of chained tasks cannot hit the recursion limit.
    """
    white, grey, black = 0, 1, 2
    colour = {tid: white for tid in job.tasks}
    for root, task in job.tasks.items():
        if colour[root] != white:
            continue
        if not task.deps:  # on no cycle; a trace's flows (one look-up each by id saved)
            colour[root] = black
            continue
        path: list[str] = [root]
        iters = [iter(task.deps)]
        colour[root] = grey
        while path:
            nxt = next(iters[-1], None)
            if nxt is None:
                colour[path.pop()] = black
                iters.pop()
                continue
            if nxt not in colour:
                continue
            if colour[nxt] == grey:
                return path[path.index(nxt):]
            if colour[nxt] == white:
                colour[nxt] = grey
                path.append(nxt)
                iters.append(iter(job.tasks[nxt].deps))
    return []
