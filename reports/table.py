"""The side-by-side table: emulated and simulated values for every job and scheduler.

``echelon emulate`` and ``echelon report`` print it when a run folder holds both modes.  Emulated values
are medians over the scheduler's repeats (``runs`` says how many, and the min..max and standard
deviation show the spread; one run: the run itself); ``gap`` is the relative difference of the median
completion to the simulated one (emulated / simulated - 1), the number the fidelity target (within 10 %)
is about.  Runs the fidelity monitor did not trust are left out while a trusted one exists; numbers from
untrusted runs only are marked ``UNTRUSTED`` (see :mod:`reports.fidelity`).
"""

from __future__ import annotations

from typing import Any

from echelonflow.results import Results, RunResult, render_table
from reports.fidelity import dilation_line, fault_groups, noisy_median, runs_label, summarize


def relative_gap(emulated: float, simulated: float) -> float | None:
    """emulated / simulated - 1, or None when the simulated value is 0."""
    return None if simulated == 0 else emulated / simulated - 1.0


def format_comparison(emulated: Results, simulated: Results) -> str:
    """One table: per scheduler and job the emulated median completion with its spread, the simulated
    value and the gap, slowdown and tardiness (emulated medians, simulated); one objective row each."""
    sim_runs = {run.scheduler: run for run in simulated.runs}
    noisy = (simulated.timing_noise or {}).get("schedulers")
    header = ["scheduler", "job", "runs", "emu_s", "min..max", "stdev", "sim_s", "gap",
              *(["noisy_sim_s"] if noisy else []), "emu_slowdown", "sim_slowdown", "emu_tard_s", "sim_tard_s"]

    def noisy_cell(scheduler: str, job_id: str | None) -> list[str]:
        """The noisy simulation's median (``simulator.noise``), when the document has one."""
        if not noisy:
            return []
        median = noisy_median(noisy, scheduler, job_id)
        return ["-" if median is None else f"{median:.3f}"]

    rows: list[list[str]] = []
    for scheduler, entry in summarize(emulated).items():
        sim = sim_runs.get(scheduler)
        for job_id, stats in entry["jobs"].items():
            sjob = sim.jobs.get(job_id) if sim else None
            completion = stats["completion_s"]
            gap = relative_gap(completion["median"], sjob.completion_s) if sjob else None
            rows.append([
                scheduler, job_id, runs_label(entry), f"{completion['median']:.3f}", _range(completion),
                f"{completion['stdev']:.3f}", f"{sjob.completion_s:.3f}" if sjob else "-",
                f"{gap:+.1%}" if gap is not None else "-", *noisy_cell(scheduler, job_id),
                f"{stats['slowdown']['median']:.3f}",
                f"{sjob.slowdown:.3f}" if sjob else "-", f"{stats['tardiness_s']['median']:.3f}",
                f"{sum(sim.job_tardiness_s(job_id)):.3f}" if sim else "-",
            ])
        objective = entry["objective_s"]
        rows.append([scheduler, "(objective)", runs_label(entry), f"{objective['median']:.3f}",
                     _range(objective), f"{objective['stdev']:.3f}", _sim_objective(sim),
                     _objective_gap(objective, sim), *noisy_cell(scheduler, None),
                     "", "", "", ""])
        rows.append(_mean_jct_row(scheduler, entry, sim, len(header) - 8))
    return render_table(f"scenario {emulated.scenario}: emulated vs simulated", header, rows)


def _mean_jct_row(scheduler: str, entry: dict[str, Any], sim: RunResult | None, blanks: int) -> list[str]:
    """The scheduler's mean job completion: emulated median over its runs beside the simulated one."""
    jct = entry["jct_mean_s"]
    if not jct["n"]:
        return [scheduler, "(mean JCT)", runs_label(entry), "-", "", "", "-", "-", *[""] * blanks]
    sim_s = None if sim is None else sim.jct_mean_s
    gap = None if sim_s is None else relative_gap(jct["median"], sim_s)
    return [scheduler, "(mean JCT)", runs_label(entry), f"{jct['median']:.3f}", _range(jct),
            f"{jct['stdev']:.3f}", "-" if sim_s is None else f"{sim_s:.3f}",
            "-" if gap is None else f"{gap:+.1%}", *[""] * blanks]


def _range(stats: dict[str, Any]) -> str:
    return f"{stats['min']:.2f}..{stats['max']:.2f}"


def _sim_objective(sim: RunResult | None) -> str:
    return "-" if sim is None else f"{sim.objective_s:.3f}"


def _objective_gap(objective: dict[str, Any], sim: RunResult | None) -> str:
    gap = None if sim is None else relative_gap(objective["median"], sim.objective_s)
    return "-" if gap is None else f"{gap:+.1%}"


def format_trust(emulated: Results) -> str:
    """One line per run the fidelity monitor did not trust, after a count (empty without verdicts)."""
    judged = [run for run in emulated.runs if run.trusted is not None]
    if not judged:
        return ""
    lines = [f"fidelity monitor: {sum(1 for run in judged if run.trusted)} of {len(judged)} run(s) trusted"]
    for run in judged:
        if not run.trusted:
            phases = (run.fidelity_monitor or {}).get("rounds", {})
            reasons = "; ".join(f"{label}: {', '.join(doc.get('reasons', []))}"
                                for label, doc in phases.items() if not doc.get("trusted"))
            which = "" if run.repeat is None else f" repeat {run.repeat + 1}"
            lines.append(f"  NOT trusted: {run.scheduler}{which}: {reasons}")
    return "\n".join(lines)


def format_report(emulated: Results, simulated: Results) -> str:
    """What ``echelon emulate`` and ``echelon report`` print: the side-by-side table, then a line per
    failed job, per set of faults injected, the fidelity monitor's verdicts and the time dilation."""
    notes = "\n".join(line for line in (format_failures(emulated), format_faults(emulated),
                                         format_trust(emulated), dilation_line(emulated.dilation)) if line)
    return format_comparison(emulated, simulated) + (f"\n{notes}" if notes else "")


def format_faults(emulated: Results) -> str:
    """One line per set of faults injected, with the runs it hit (empty when no run had any)."""
    return "\n".join(f"faults injected: {group['faults']} (runs: {', '.join(group['runs'])})"
                     for group in fault_groups(emulated))


def format_failures(emulated: Results) -> str:
    """One line per job that failed in a run (an agent of it died), empty when none did."""
    lines = []
    repeated = {run.scheduler for run in emulated.runs if run.repeat}
    for run in emulated.runs:
        which = f" repeat {run.repeat + 1}" if run.scheduler in repeated else ""
        for job_id, reason in (run.failed_jobs or {}).items():
            lines.append(f"job {job_id} FAILED under {run.scheduler}{which}: {reason}")
    return "\n".join(lines)
