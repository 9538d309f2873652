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

from dataclasses import dataclass, field
from typing import Dict, List, Tuple, Union


@dataclass(frozen=True)
class ComputeTask:
    """A timed piece of work on one host's accelerator."""

    task_id: str
    host: str
    duration_s: float
    deps: Tuple[str, ...] = ()
    label: str = ""


@dataclass(frozen=True)
class FlowTask:
    """Bytes that must move from ``src`` to ``dst`` before its dependants may start."""

    task_id: str
    src: str
    dst: str
    size_bytes: int
    deps: Tuple[str, ...] = ()
    echelon_id: str = ""
    label: str = ""


Task = Union[ComputeTask, FlowTask]


@dataclass
class Job:
    """A named DAG of tasks; ``tasks`` keeps declaration order (used to break ties deterministically)."""

    job_id: str
    tasks: Dict[str, Task] = field(default_factory=dict)
    # EchelonFlow id -> kind ("coflow" or "staggered"); informational, for reports.
    echelon_kinds: Dict[str, str] = field(default_factory=dict)
    # Optional explicit ideal finish offsets (seconds after the head flow) from a trace; when absent
    # they are derived from the DAG.
    explicit_offsets_s: Dict[str, float] = field(default_factory=dict)

    def add(self, task: Task) -> Task:
        if task.task_id in self.tasks:
            raise ValueError(f"job {self.job_id!r}: duplicate task id {task.task_id!r}")
        self.tasks[task.task_id] = task
        return task

    @property
    def flows(self) -> List[FlowTask]:
        return [t for t in self.tasks.values() if isinstance(t, FlowTask)]

    @property
    def computes(self) -> List[ComputeTask]:
        return [t for t in self.tasks.values() if isinstance(t, ComputeTask)]

    @property
    def hosts(self) -> List[str]:
        """Every host the job touches, in first-use order."""
        seen: Dict[str, None] = {}
        for task in self.tasks.values():
            if isinstance(task, ComputeTask):
                seen.setdefault(task.host)
            else:
                seen.setdefault(task.src)
                seen.setdefault(task.dst)
        return list(seen)

    def dependants(self) -> Dict[str, List[str]]:
        """task id -> ids of the tasks that depend on it (declaration order)."""
        out: Dict[str, List[str]] = {tid: [] for tid in self.tasks}
        for task in self.tasks.values():
            for dep in task.deps:
                out[dep].append(task.task_id)
        return out


def qualified(job_id: str, task_id: str) -> str:
    """Globally unique id of a task or EchelonFlow across jobs (jobs may reuse task ids)."""
    return f"{job_id}/{task_id}"
