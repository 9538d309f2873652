"""The fluid simulation under timing noise: what a schedule gives when events do not coincide exactly.

Bundled scenarios start flows at exactly the same instant (four ring workers finish the same compute at
0.9 s, a pipeline stage's activation with them), and a deterministic fluid run then breaks every such
tie by flow id.  A real fabric never produces exact ties: compute wakes 0.1-1.5 ms after its
dependencies, a flow alone on its path lasts a few milliseconds more or less than the fluid model says
(docs/emulation.md, "Simulation under timing noise").  Where a schedule sits on such a knife edge, one
deterministic run is not a property of the scheduler but of the tie rule: fattree-gpipe-ring under
echelon gives an objective of 11.47 s with exact ties and 12.87 s (median of 30) once every compute
lasts up to 1 ms longer.

:func:`noisy_runs` therefore simulates a scenario ``samples`` times with every compute task lasting
``U[0, jitter_s]`` longer (seeded, so reproducible), keeping the ideal-finish offsets the jobs declare
(the ones the scheduler and the registry see in emulation), and :func:`noisy_summary` reduces the runs to
the same spread statistics as the emulation's repeats, so emulated medians can be judged against both.

Pure: no Mininet or os-ken.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
from collections.abc import Sequence
from typing import Any

from echelonflow.echelon import echelons_of
from echelonflow.limits import NOISE_MS
from echelonflow.model import ComputeTask, Job
from echelonflow.results import RunResult
from echelonflow.topology import Topology

#: Default compute jitter (seconds): above what the emulation measures (docs/emulation.md).
DEFAULT_JITTER_S = 0.005
DEFAULT_SAMPLES = 20


def jittered(jobs: Sequence[Job], jitter_s: float, seed: int) -> list[Job]:
    """Copies of ``jobs`` whose compute tasks last ``U[0, jitter_s]`` longer (one seeded stream over all
    jobs in order), with every flow's ideal-finish offset pinned to the one the unperturbed job derives:
    the noise is in what happens, not in what the scheduler is told."""
    if jitter_s < 0:
        raise ValueError(f"jitter_s must be >= 0, got {jitter_s}")
    rng = random.Random(seed)
    out = []
    for job in jobs:
        offsets = {fid: off for spec in echelons_of(job).values() for fid, off in spec.offsets_s.items()}
        tasks = {tid: dataclasses.replace(task, duration_s=task.duration_s + rng.uniform(0.0, jitter_s))
                 if isinstance(task, ComputeTask) else task for tid, task in job.tasks.items()}
        out.append(dataclasses.replace(job, tasks=tasks, explicit_offsets_s={**offsets,
                                                                             **job.explicit_offsets_s}))
    return out


def noisy_runs(topology: Topology, jobs: Sequence[Job], scheduler_name: str,
               jitter_s: float = DEFAULT_JITTER_S, samples: int = DEFAULT_SAMPLES,
               events: Sequence[Any] = (), checks: bool = True) -> list[RunResult]:
    """``samples`` simulations of ``jobs`` under ``scheduler_name`` with jittered compute (seeds 1..N);
    all jobs together only (no alone runs: completions and the objective are what is compared).
    ``checks``: every decision checked (``simulate``'s ``check_invariants``)."""
    from echelonflow.schedulers import get_scheduler
    from simulator.engine import simulate

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    return [simulate(topology, jittered(jobs, jitter_s, seed), get_scheduler(scheduler_name),
                     check_invariants=checks, alone_runs=False, events=events)
            for seed in range(1, samples + 1)]


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` by linear interpolation (values need not be sorted)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _stats(values: Sequence[float]) -> dict[str, float | int]:
    return {"n": len(values), "median": statistics.median(values), "p10": quantile(values, 0.1),
            "p90": quantile(values, 0.9), "min": min(values), "max": max(values)}


def noisy_summary(runs: Sequence[RunResult]) -> dict[str, Any]:
    """Median, p10, p90, min and max of every job's completion and of the objective over ``runs``."""
    job_ids = list(dict.fromkeys(job_id for run in runs for job_id in run.jobs))
    return {"jobs": {job_id: _stats([run.jobs[job_id].completion_s for run in runs if job_id in run.jobs])
                     for job_id in job_ids},
            "objective_s": _stats([run.objective_s for run in runs])}


def timing_noise_section(topology: Topology, jobs: Sequence[Job], schedulers: Sequence[str],
                         jitter_s: float = DEFAULT_JITTER_S, samples: int = DEFAULT_SAMPLES,
                         events: Sequence[Any] = (), checks: bool = True) -> dict[str, Any]:
    """The ``timing_noise`` section of a result document (docs/results-format.md); ``checks`` as for
    :func:`noisy_runs`."""
    return {"jitter_s": jitter_s, "samples": samples,
            "schedulers": {name: noisy_summary(noisy_runs(topology, jobs, name, jitter_s, samples, events,
                                                          checks))
                           for name in schedulers}}


def format_noise_table(section: dict[str, Any], exact: dict[str, RunResult]) -> str:
    """One table: per scheduler and job (and the objective) the exact-tie run next to the noisy spread."""
    from echelonflow.results import render_table

    rows = []
    for name, summary in section["schedulers"].items():
        run = exact.get(name)
        entries = [(job_id, stats, run.jobs[job_id].completion_s if run and job_id in run.jobs else None)
                   for job_id, stats in summary["jobs"].items()]
        entries.append(("(objective)", summary["objective_s"], None if run is None else run.objective_s))
        for label, stats, exact_s in entries:
            rows.append([name, label, "-" if exact_s is None else f"{exact_s:.3f}",
                         f"{stats['median']:.3f}", f"{stats['p10']:.2f}..{stats['p90']:.2f}",
                         f"{stats['min']:.2f}..{stats['max']:.2f}"])
    title = (f"under timing noise: every compute up to {section['jitter_s'] * 1e3:g} ms longer, "
             f"{section['samples']} seeded samples")
    header = ["scheduler", "job", "exact_s", "noisy_median_s", "p10..p90", "min..max"]
    return render_table(title, header, rows)


def jitter_ms_argument(text: str) -> float:
    """argparse type of ``--timing-noise-ms``: milliseconds in ``limits.NOISE_MS`` (0: no noisy samples)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not NOISE_MS.low <= value <= NOISE_MS.high:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be a number of milliseconds in [{NOISE_MS.low:g}, "
                                         f"{NOISE_MS.high:g}], got {text!r}")
    return value


def samples_argument(text: str) -> int:
    """argparse type of ``--samples``: a whole number from 1 to 10000."""
    if not text.isdigit() or not 1 <= int(text) <= 10_000:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 10000, got {text!r}")
    return int(text)
