"""Time dilation: the same schedule, F times slower, so a small machine can forward it faithfully.

An emulated fabric is only trustworthy while the machine keeps up with its packets (see
``docs/emulation.md``, "Fidelity monitor" and "Time dilation").  Dilating a scenario by a factor F divides
every link rate by F and multiplies every compute duration, job arrival and explicit ideal-finish offset by
F; flow sizes stay as they are.  Every flow then takes F times as long on its links, every compute F times
as long, so the whole fluid schedule keeps its shape and every time in it is exactly F times the
undilated one, while the fabric carries F times fewer packets per second.

The emulation runs the dilated scenario and reports its times divided by F (:func:`contract_run`), i.e.
in the scenario's own time scale, next to the undilated simulation.  Slowdowns are ratios of times and do
not change.  What does not scale is the machinery: control intervals, RTTs and per-flow set-up costs stay
the same in wall-clock time, so they shrink by F in the reported time scale (which is part of why a
dilated run is closer to the fluid model; docs/emulation.md says how much).

Pure functions on the core's types (no fabric, no I/O): unit-tested by simulating both scenarios.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence

from echelonflow.errors import UserError
from echelonflow.limits import DILATION, RATE_BPS, SECONDS
from echelonflow.model import ComputeTask, Job
from echelonflow.results import RunResult
from echelonflow.topology import Topology

#: The factors ``--dilation auto`` tries, smallest first (doubling: a factor is only worth its cost in
#: run time if the smaller one was not trusted).
CALIBRATION_FACTORS = (1.0, 2.0, 4.0, 8.0, 16.0)


class DilationError(UserError):
    """A dilation factor outside ``limits.DILATION``, or one that takes a scenario out of the ranges."""


def check_factor(factor: object) -> float:
    """``factor`` as a float, or :class:`DilationError`: within ``limits.DILATION`` (dilating by less
    than 1 would speed a scenario up, which is never what a machine that cannot keep up needs; 1e6 would
    build 10 bit/s links and 3e7 s timeouts, in effect a hang)."""
    ok = isinstance(factor, (int, float)) and not isinstance(factor, bool) and math.isfinite(factor)
    if not ok or not DILATION.low <= factor <= DILATION.high:
        raise DilationError(f"dilation factor must be a number from {DILATION.low:g} to {DILATION.high:g}, "
                            f"got {factor!r}")
    return float(factor)


def check_dilation(topology: Topology, jobs: Sequence[Job], fault_times_s: Sequence[float],
                   factor: float) -> None:
    """:class:`DilationError` unless the scenario dilated by ``factor`` stays within the table of ranges
    (``echelonflow.limits``): its slowest link at least ``RATE_BPS.low``, every compute, arrival,
    offset and fault time at most ``SECONDS.high`` (the agents read the dilated jobs back as a trace).
    Checked before anything runs, the simulation included."""
    factor = check_factor(factor)
    slowest_bps = min(topology.capacity_bps().values(), default=topology.rate_bps)
    if slowest_bps / factor < RATE_BPS.low:
        raise DilationError(f"dilation x{factor:g} would run the slowest links at {slowest_bps / factor:g} "
                            f"bit/s, below the {RATE_BPS.low:g} allowed (echelonflow/limits.py)")
    for job in jobs:
        times = [("arrival_s", job.arrival_s), *((f"offsets_s[{k!r}]", v) for k, v in
                                                 job.explicit_offsets_s.items()),
                 *((f"task {t.task_id!r} duration_s", t.duration_s) for t in job.tasks.values()
                   if isinstance(t, ComputeTask))]
        for name, seconds in times:
            if seconds * factor > SECONDS.high:
                raise DilationError(f"dilation x{factor:g}: job {job.job_id!r} {name} {seconds:g} s would "
                                    f"become {seconds * factor:g} s, beyond the {SECONDS.high:g} s allowed "
                                    "(echelonflow/limits.py)")
    late = [t for t in fault_times_s if t * factor > SECONDS.high]
    if late:
        raise DilationError(f"dilation x{factor:g}: a fault at {late[0]:g} s would come at "
                            f"{late[0] * factor:g} s, beyond the {SECONDS.high:g} s allowed")


def dilate_topology(topology: Topology, factor: float) -> Topology:
    """A copy of ``topology`` with every link rate divided by ``factor`` (names, ports, paths unchanged)."""
    factor = check_factor(factor)
    out = copy.deepcopy(topology)
    out.rate_bps = topology.rate_bps / factor
    for _a, _b, data in out.graph.edges(data=True):
        data["rate_bps"] = data["rate_bps"] / factor
    return out


def dilate_job(job: Job, factor: float) -> Job:
    """A copy of ``job`` with compute durations, arrival and explicit ideal-finish offsets times ``factor``;
    flows (sizes, endpoints, EchelonFlow membership) unchanged."""
    factor = check_factor(factor)
    out = Job(job.job_id, arrival_s=job.arrival_s * factor, weight=job.weight,
              echelon_kinds=dict(job.echelon_kinds),
              explicit_offsets_s={k: v * factor for k, v in job.explicit_offsets_s.items()})
    for task in job.tasks.values():
        if isinstance(task, ComputeTask):
            task = dataclasses.replace(task, duration_s=task.duration_s * factor)
        out.add(task)
    return out


def dilate_jobs(jobs: Sequence[Job], factor: float) -> list[Job]:
    return [dilate_job(job, factor) for job in jobs]


def contract_run(run: RunResult, factor: float) -> RunResult:
    """A run measured on the dilated scenario, in the undilated scenario's time scale: every time divided
    by ``factor`` (task and flow times, ideal finishes, completions, tardiness, the objective, the
    training metrics, the times alone); slowdowns unchanged; what the run carries about the machine
    (fidelity monitor, wire check) is wall-clock and kept as it is."""
    factor = check_factor(factor)
    out = copy.deepcopy(run)
    for job in out.jobs.values():
        job.completion_s /= factor
    for ech in out.echelonflows.values():
        ech.tardiness_s /= factor
    # records of its own to scale (a built run's are made as they are read, a document's were copied)
    out.flows, out.tasks = dict(out.flows.items()), dict(out.tasks.items())
    for flow in out.flows.values():
        flow.start_s /= factor
        flow.finish_s /= factor
        flow.ideal_finish_s /= factor
    for task in out.tasks.values():
        task.start_s /= factor
        task.finish_s /= factor
    out.objective_s /= factor
    if out.alone_s is not None:
        out.alone_s = {job_id: time_s / factor for job_id, time_s in out.alone_s.items()}
    out.set_training_metrics()
    return out
