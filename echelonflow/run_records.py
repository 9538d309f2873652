"""A run's per-task and per-flow records (``RunResult.tasks``, ``.flows``), and the columns a built run
holds them in.

Why columns: a record object per task and per flow, each under its own ``job/task`` id in two
dictionaries, took 356 MiB on FB2010's 701,486 flows, more than the whole run that produced them
(docs/performance.md, "A run's records as columns").  A built run keeps only what its jobs do not
already hold: each task's start and finish, each flow's ideal finish and EchelonFlow, and the flows'
order; ids, hosts and sizes are read off the jobs, and a record is made each time one is read.  The
records read exactly as the dictionaries did (the same keys in the same order, equal values), so
reports, the JSON writers and tests read either; a document read back holds plain dictionaries.

The views are read-only and read the run's jobs, which a run does not copy: a job changed after its
run was built changes what the records say.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right
from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from dataclasses import asdict, dataclass
from typing import Any

from echelonflow.model import ComputeTask, FlowColumns, Job, Task, qualified, task_id_at, task_sequence

#: ``__slots__`` on the records where dataclasses can add them (Python 3.10+): 48 bytes less per
#: record read back from a document.
_SLOTS = {"slots": True} if sys.version_info >= (3, 10) else {}


@dataclass(**_SLOTS)
class FlowResult:
    start_s: float
    finish_s: float
    ideal_finish_s: float
    src: str
    dst: str
    size_bytes: int
    echelon: str

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(**_SLOTS)
class TaskResult:
    """A compute task has ``host``; a flow task has ``src`` and ``dst``."""

    type: str
    start_s: float
    finish_s: float
    host: str | None = None
    src: str | None = None
    dst: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.type == "compute":
            out["host"] = self.host
        else:
            out["src"], out["dst"] = self.src, self.dst
        out["start_s"], out["finish_s"] = self.start_s, self.finish_s
        return out


def float_column(values: Sequence[float]) -> array:
    """``values`` as an ``array('d')`` (itself when it is one: the simulator's times are not copied)."""
    return values if isinstance(values, array) and values.typecode == "d" else array("d", values)


class RunTasks:
    """A run's tasks by number: job by job in run order, within a job in declaration order (the
    numbering the simulator's times use), and the ``job/task`` id of each.  The simulator numbers its
    tasks with one too (``engine._Run.numbered``)."""

    __slots__ = ("jobs", "bases", "sequences", "_index", "_positions")

    def __init__(self, jobs: Sequence[Job], sequences: Sequence[Sequence[Task]] | None = None) -> None:
        """``sequences``: each job's :func:`~echelonflow.model.task_sequence`, where the caller has them."""
        self.jobs = list(jobs)
        if sequences is None:
            sequences = [task_sequence(job.tasks) for job in self.jobs]
        self.sequences = list(sequences)
        self.bases = [0]  # job i's tasks are numbers bases[i] ... bases[i + 1] - 1
        for sequence in self.sequences:
            self.bases.append(self.bases[-1] + len(sequence))
        self._index = {job.job_id: i for i, job in enumerate(self.jobs)}
        self._positions: dict[int, dict[str, int]] = {}  # object jobs' ids -> positions, at first look-up

    def __len__(self) -> int:
        return self.bases[-1]

    def number(self, qid: object) -> int:
        """The number of the task ``qid`` (``job/task``; job ids have no '/'), or -1."""
        if not isinstance(qid, str):
            return -1
        job_id, _, task_id = qid.partition("/")
        i = self._index.get(job_id)
        if i is None:
            return -1
        tasks = self.jobs[i].tasks
        if isinstance(tasks, FlowColumns):  # a binary search
            k = tasks.position(task_id)
        else:
            positions = self._positions.get(i)
            if positions is None:
                positions = self._positions[i] = {tid: k for k, tid in enumerate(tasks)}
            k = positions.get(task_id, -1)
        return -1 if k < 0 else self.bases[i] + k

    def located(self, numbers: Iterable[int]) -> Iterator[tuple[int, int, int]]:
        """(job index, position in the job, number) of each of ``numbers``; a job's numbers together
        cost no search."""
        bases, i = self.bases, 0
        for t in numbers:
            if not bases[i] <= t < bases[i + 1]:
                i = bisect_right(bases, t) - 1
            yield i, t - bases[i], t

    def place(self, t: int) -> tuple[int, int]:
        """(job index, position in the job) of task number ``t``."""
        i = bisect_right(self.bases, t) - 1
        return i, t - self.bases[i]

    def every(self) -> Iterator[tuple[int, int, int]]:
        """(job index, position, number) of every task, in number order."""
        t = 0
        for i, sequence in enumerate(self.sequences):
            for k in range(len(sequence)):
                yield i, k, t
                t += 1

    def qid(self, i: int, k: int) -> str:
        return qualified(self.jobs[i].job_id, task_id_at(self.sequences[i], k))

    def task(self, i: int, k: int) -> Task:
        return self.sequences[i][k]


class _Records(Mapping):
    """What the two views share: read-only, so a copy is the view itself; ``items()`` and ``values()``
    walk the columns instead of looking every id up."""

    __slots__ = ()
    tasks: RunTasks

    def __copy__(self) -> _Records:
        return self

    def __deepcopy__(self, memo: dict) -> _Records:
        return self

    def _walk(self) -> Iterator[tuple[int, int, int]]:
        raise NotImplementedError

    def _record(self, i: int, k: int, t: int) -> Any:
        raise NotImplementedError

    def __iter__(self) -> Iterator[str]:
        qid = self.tasks.qid
        return (qid(i, k) for i, k, _ in self._walk())

    def items(self) -> _WalkedItems:
        return _WalkedItems(self)

    def values(self) -> _WalkedValues:
        return _WalkedValues(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} records)"


class _WalkedItems(ItemsView):
    """A view's items, made in one walk of its columns."""

    _mapping: _Records

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        records = self._mapping
        qid = records.tasks.qid
        return ((qid(i, k), records._record(i, k, t)) for i, k, t in records._walk())


class _WalkedValues(ValuesView):
    """A view's records, made in one walk of its columns."""

    _mapping: _Records

    def __iter__(self) -> Iterator[Any]:
        records = self._mapping
        return (records._record(i, k, t) for i, k, t in records._walk())


class TaskRecords(_Records):
    """``RunResult.tasks`` of a built run: every task's record, in number order."""

    __slots__ = ("tasks", "start_s", "finish_s")

    def __init__(self, tasks: RunTasks, start_s: array, finish_s: array) -> None:
        self.tasks, self.start_s, self.finish_s = tasks, start_s, finish_s

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, qid: str) -> TaskResult:
        t = self.tasks.number(qid)
        if t < 0:
            raise KeyError(qid)
        return self._record(*self.tasks.place(t), t)

    def __contains__(self, qid: object) -> bool:
        return self.tasks.number(qid) >= 0

    def _walk(self) -> Iterator[tuple[int, int, int]]:
        return self.tasks.every()

    def compute_spans(self) -> Iterator[tuple[str, str, float]]:
        """:func:`compute_spans` without making a record per task, nor reading a trace's columns."""
        start_s, finish_s = self.start_s, self.finish_s
        for job, sequence, base in zip(self.tasks.jobs, self.tasks.sequences, self.tasks.bases):
            if isinstance(job.tasks, FlowColumns):  # flows only
                continue
            for t, task in enumerate(sequence, start=base):
                if isinstance(task, ComputeTask):
                    yield job.job_id, task.host, finish_s[t] - start_s[t]

    def _record(self, i: int, k: int, t: int) -> TaskResult:
        task = self.tasks.task(i, k)
        if isinstance(task, ComputeTask):
            return TaskResult("compute", self.start_s[t], self.finish_s[t], host=task.host)
        return TaskResult("flow", self.start_s[t], self.finish_s[t], src=task.src, dst=task.dst)


class FlowRecords(_Records):
    """``RunResult.flows`` of a built run: every flow's record, EchelonFlow by EchelonFlow in the order
    :meth:`add` was given them."""

    __slots__ = ("tasks", "start_s", "finish_s", "order", "ideal_finish_s", "echelon", "echelons")

    def __init__(self, tasks: RunTasks, start_s: array, finish_s: array) -> None:
        self.tasks, self.start_s, self.finish_s = tasks, start_s, finish_s
        self.order = array("q")  # the flows' task numbers, in record order
        self.ideal_finish_s = array("d", [0.0]) * len(tasks)  # by task number
        self.echelon = array("i", [-1]) * len(tasks)  # by task number: an index into ``echelons``; -1: none
        self.echelons: list[str] = []  # ``job/echelon`` ids

    def add(self, echelon: str, numbers: Sequence[int], ideal_finish_s: Sequence[float]) -> FlowIds:
        """One EchelonFlow's flows (task numbers) and their ideal finishes; its flows' ids, in order."""
        e, lo = len(self.echelons), len(self.order)
        self.echelons.append(echelon)
        for t, due_s in zip(numbers, ideal_finish_s):
            self.order.append(t)
            self.ideal_finish_s[t] = due_s
            self.echelon[t] = e
        return FlowIds(self, lo, len(self.order))

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, qid: str) -> FlowResult:
        t = self.tasks.number(qid)
        if t < 0 or self.echelon[t] < 0:
            raise KeyError(qid)
        return self._record(*self.tasks.place(t), t)

    def __contains__(self, qid: object) -> bool:
        t = self.tasks.number(qid)
        return t >= 0 and self.echelon[t] >= 0

    def _walk(self) -> Iterator[tuple[int, int, int]]:
        return self.tasks.located(self.order)

    def _record(self, i: int, k: int, t: int) -> FlowResult:
        flow = self.tasks.task(i, k)  # a flow: only flows have an EchelonFlow
        return FlowResult(self.start_s[t], self.finish_s[t], self.ideal_finish_s[t], flow.src, flow.dst,
                          flow.size_bytes, self.echelons[self.echelon[t]])


class FlowIds(Sequence):
    """One EchelonFlow's flow ids (``EchelonResult.flows`` of a built run), read off its records."""

    __slots__ = ("records", "lo", "hi")

    def __init__(self, records: FlowRecords, lo: int, hi: int) -> None:
        self.records, self.lo, self.hi = records, lo, hi

    def __len__(self) -> int:
        return self.hi - self.lo

    def __getitem__(self, j: Any) -> Any:
        if isinstance(j, slice):
            return [self[n] for n in range(*j.indices(len(self)))]
        if not -len(self) <= j < len(self):
            raise IndexError(j)
        tasks = self.records.tasks
        return tasks.qid(*tasks.place(self.records.order[self.lo + j % len(self)]))

    def __iter__(self) -> Iterator[str]:
        qid = self.records.tasks.qid
        return (qid(i, k) for i, k, _ in self.records.tasks.located(self.records.order[self.lo:self.hi]))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    def __copy__(self) -> FlowIds:
        return self

    def __deepcopy__(self, memo: dict) -> FlowIds:
        return self

    def __repr__(self) -> str:
        return repr(list(self))


def compute_spans(tasks: Mapping[str, TaskResult]) -> Iterator[tuple[str, str, float]]:
    """(job id, host, seconds it computed) of every compute task among ``tasks``, in task order."""
    if isinstance(tasks, TaskRecords):
        yield from tasks.compute_spans()
        return
    for qid, task in tasks.items():
        if task.type == "compute":
            yield qid.split("/", 1)[0], str(task.host), task.finish_s - task.start_s


def tasks_with_flows(tasks: Mapping[str, TaskResult],
                     flows: Mapping[str, FlowResult]) -> Iterator[tuple[str, TaskResult, FlowResult | None]]:
    """Every task's id and record with its flow record (None for a compute task), in task order: a
    built run's by number in one walk, where a look-up by id per task is a binary search."""
    if isinstance(tasks, TaskRecords) and isinstance(flows, FlowRecords) and flows.tasks is tasks.tasks:
        qid, echelon = tasks.tasks.qid, flows.echelon
        for i, k, t in tasks.tasks.every():
            yield qid(i, k), tasks._record(i, k, t), flows._record(i, k, t) if echelon[t] >= 0 else None
    else:
        for key, task in tasks.items():
            yield key, task, flows.get(key)
