"""The side-by-side table: emulated and simulated values for every job and scheduler.

``echelon emulate`` and ``echelon report`` print it when a run folder holds both modes; the last column
is the relative difference of the job completion times (emulated / simulated - 1), the number the
fidelity target (within 10%) is about.
"""

from __future__ import annotations

from echelonflow.results import Results, render_table


def relative_gap(emulated: float, simulated: float) -> float | None:
    """emulated / simulated - 1, or None when the simulated value is 0."""
    return None if simulated == 0 else emulated / simulated - 1.0


def format_comparison(emulated: Results, simulated: Results) -> str:
    """One table: scheduler, job, completion (emu, sim, gap), slowdown and tardiness sum (emu, sim)."""
    sim_runs = {run.scheduler: run for run in simulated.runs}
    header = ["scheduler", "job", "emu_s", "sim_s", "gap", "emu_slowdown", "sim_slowdown", "emu_tard_s",
              "sim_tard_s"]
    rows: list[list[str]] = []
    for run in emulated.runs:
        sim = sim_runs.get(run.scheduler)
        for job_id, job in run.jobs.items():
            sjob = sim.jobs.get(job_id) if sim else None
            emu_t = sum(run.job_tardiness_s(job_id))
            sim_t = sum(sim.job_tardiness_s(job_id)) if sim else None
            gap = relative_gap(job.completion_s, sjob.completion_s) if sjob else None
            rows.append([
                run.scheduler, job_id, f"{job.completion_s:.3f}",
                f"{sjob.completion_s:.3f}" if sjob else "-", f"{gap:+.1%}" if gap is not None else "-",
                f"{job.slowdown:.3f}", f"{sjob.slowdown:.3f}" if sjob else "-",
                f"{emu_t:.3f}", f"{sim_t:.3f}" if sim_t is not None else "-",
            ])
    return render_table(f"scenario {emulated.scenario}: emulated vs simulated", header, rows)
