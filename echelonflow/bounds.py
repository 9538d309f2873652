"""A job's lower bound: no schedule on this topology can complete it faster, whatever else runs.

Slowdown against a job's own run alone depends on the scheduler that ran it alone; a bound that holds
for every scheduler lets results of different schedulers be put on one scale (completion / bound >=
1 always).  :func:`lower_bound_s` is the largest of three quantities, each a true bound on the time
from the job's arrival to its last task's finish:

* the critical path of its DAG with every compute taking its duration and every flow its wire bytes
  at the slowest link of its route (as if it were alone on an empty network and never shared a link,
  not even with its own flows);
* the busiest host's total compute (a host runs one compute at a time);
* the busiest host link: the wire bytes a host sends (or receives) over that link's rate (every route
  of a host starts or ends on its one link).

Pure and Python 3.9 compatible.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from echelonflow.echelon import check_job
from echelonflow.model import ComputeTask, Job
from echelonflow.results import RunResult
from echelonflow.topology import Topology


def lower_bound_s(job: Job, topology: Topology) -> float:
    """Seconds from arrival within which ``job`` cannot finish on ``topology`` (see module docstring)."""
    check_job(job)
    capacity_bps = topology.capacity_bps()
    task_s: dict[str, float] = {}
    host_compute_s: dict[str, float] = {}
    link_bits: dict[tuple[str, str], float] = {}
    # the dependencies of the tasks that have any, read in this one walk: a look-up per task by id, and
    # more walks for the order, made a trace's columns into task objects four times (FB2010: 7 s)
    deps_of: dict[str, tuple[str, ...]] = {}
    for task in job.tasks.values():
        if task.deps:
            deps_of[task.task_id] = task.deps
        if isinstance(task, ComputeTask):
            task_s[task.task_id] = task.duration_s
            host_compute_s[task.host] = host_compute_s.get(task.host, 0.0) + task.duration_s
            continue
        links = topology.links_of(topology.pair_path(task.src, task.dst))
        bits = 8.0 * topology.wire_bytes(task.size_bytes)
        task_s[task.task_id] = bits / min(capacity_bps[link] for link in links)
        for link in (links[0], links[-1]):  # the host's own up- and downlink
            link_bits[link] = link_bits.get(link, 0.0) + bits
    finish_s: dict[str, float] = {}
    for task_id in _topological_order(task_s, deps_of):
        start_s = max((finish_s[d] for d in deps_of.get(task_id, ())), default=0.0)
        finish_s[task_id] = start_s + task_s[task_id]
    return max(
        max(finish_s.values(), default=0.0),
        max(host_compute_s.values(), default=0.0),
        max((bits / capacity_bps[link] for link, bits in link_bits.items()), default=0.0),
    )


def attach_lower_bounds(runs: Iterable[RunResult], jobs: Sequence[Job], topology: Topology) -> None:
    """Set every job result's ``lower_bound_s`` (simulated and emulated documents carry the same keys)."""
    bounds_s = {job.job_id: lower_bound_s(job, topology) for job in jobs}
    for run in runs:
        for job_id, job_result in run.jobs.items():
            job_result.lower_bound_s = bounds_s[job_id]


def _topological_order(task_ids: Iterable[str], deps_of: Mapping[str, Sequence[str]]) -> list[str]:
    """Task ids (declaration order) with every dependency before its dependants (Kahn; ``check_job``
    ruled out cycles); ``deps_of``: the dependencies of the tasks that have any, in declaration order."""
    waiting = {tid: len(deps_of.get(tid, ())) for tid in task_ids}
    dependants: dict[str, list[str]] = {tid: [] for tid in waiting}  # as ``Job.dependants`` lists them
    for tid, deps in deps_of.items():
        for dep in deps:
            dependants[dep].append(tid)
    ready = [tid for tid, n in waiting.items() if n == 0]
    order = []
    while ready:
        tid = ready.pop()
        order.append(tid)
        for nxt in dependants[tid]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                ready.append(nxt)
    return order
