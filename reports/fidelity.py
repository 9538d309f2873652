"""Repeats and fidelity: spread over repeated emulation runs, and emulated against simulated.

Emulation numbers vary from run to run (two cores shared by the fabric, the controller and every
agent), so an emulation is judged on repeats: ``echelon emulate --repeat N`` runs every scheduler N
times.  This module turns those runs into

* :func:`summarize`: per scheduler, the mean, median, min, max and standard deviation of every job's
  completion time and of the objective, with the number of runs behind them;
* :func:`fidelity`: per job and scheduler the emulated median against the simulated value, the same for
  the objective, and echelon's gain over coflow and over fair on both sides (from medians), i.e. the
  numbers the fidelity targets are about; :func:`format_fidelity` renders them as the run folder's
  ``fidelity.md``.

Runs the fidelity monitor did not trust (``trusted`` false, see :mod:`emulation.monitor`) are left out
whenever at least one trusted run exists; when none does, every number is computed from all runs and
marked untrusted, so nothing is reported as a plain result that the machine did not forward faithfully.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from echelonflow.faults import FaultEvent
from echelonflow.results import TRAINING_KEYS, Results, RunResult, render_table

#: The fidelity targets (docs/emulation.md): completion within 10 % of simulated, >= 75 % of the
#: simulated gain kept, run-to-run spread (max - min over the median) at most 5 %.
GAP_TARGET = 0.10
GAIN_KEPT_TARGET = 0.75
SPREAD_TARGET = 0.05
BASELINES = ("coflow", "fair")


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, mean, median, min, max, stdev (sample; 0 for one value) and range/median of ``values``."""
    if not values:
        return {"n": 0, "mean": None, "median": None, "min": None, "max": None, "stdev": None,
                "range_share": None}
    median = statistics.median(values)
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "median": median,
        "min": min(values),
        "max": max(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "range_share": (max(values) - min(values)) / median if median else None,
    }


def runs_by_scheduler(results: Results) -> dict[str, list[RunResult]]:
    """The document's runs grouped by scheduler, in first-appearance order."""
    out: dict[str, list[RunResult]] = {}
    for run in results.runs:
        out.setdefault(run.scheduler, []).append(run)
    return out


def judged_runs(runs: Sequence[RunResult]) -> tuple[list[RunResult], bool]:
    """The runs numbers are computed from, and whether they are trusted (see module docstring).

    A run without a verdict (``trusted`` None: simulated, or emulated before the monitor existed)
    counts as trusted.
    """
    trusted = [run for run in runs if run.trusted is not False]
    return (trusted, True) if trusted else (list(runs), False)


def summarize(results: Results) -> dict[str, Any]:
    """Per scheduler: runs, trusted runs, whether the numbers are trusted, and the spread of each job's
    completion, slowdown and tardiness (sum over its EchelonFlows), of the objective and of the training
    metrics (``TRAINING_KEYS``: ``n`` 0 where a run has none)."""
    out: dict[str, Any] = {}
    for scheduler, runs in runs_by_scheduler(results).items():
        used, trusted = judged_runs(runs)
        job_ids = list(dict.fromkeys(job_id for run in used for job_id in run.jobs))
        jobs = {}
        for job_id in job_ids:
            having = [run for run in used if job_id in run.jobs]
            jobs[job_id] = {
                "completion_s": spread([run.jobs[job_id].completion_s for run in having]),
                "slowdown": spread([run.jobs[job_id].slowdown for run in having]),
                "tardiness_s": spread([sum(run.job_tardiness_s(job_id)) for run in having]),
            }
        out[scheduler] = {
            "runs": len(runs),
            "trusted_runs": sum(1 for run in runs if run.trusted is not False),
            "numbers_trusted": trusted,
            "jobs": jobs,
            "objective_s": spread([run.objective_s for run in used]),
            **{key: spread([getattr(run, key) for run in used if getattr(run, key) is not None])
               for key in TRAINING_KEYS},
        }
    return out


def representative(runs: Sequence[RunResult]) -> RunResult:
    """The judged run whose objective is the median (the lower one of an even count): the one a timeline
    shows."""
    used, _trusted = judged_runs(runs)
    ordered = sorted(used, key=lambda run: run.objective_s)
    return ordered[(len(ordered) - 1) // 2]


def runs_label(entry: dict[str, Any]) -> str:
    """How many runs a scheduler's numbers come from: ``3``, ``2 of 3`` (one left out as untrusted) or
    ``2 UNTRUSTED`` (no trusted run: computed from all)."""
    if not entry["numbers_trusted"]:
        return f"{entry['runs']} UNTRUSTED"
    if entry["trusted_runs"] < entry["runs"]:
        return f"{entry['trusted_runs']} of {entry['runs']}"
    return str(entry["runs"])


def _gap(emulated: float | None, simulated: float | None) -> float | None:
    if emulated is None or simulated is None or simulated == 0:
        return None
    return emulated / simulated - 1.0


def _gain(ours: float | None, theirs: float | None) -> float | None:
    """Relative improvement of ``ours`` over ``theirs`` (lower is better): 1 - ours / theirs."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return 1.0 - ours / theirs


def fidelity(emulated: Results, simulated: Results) -> dict[str, Any]:
    """Emulated (medians over the judged repeats) against simulated: jobs, objective, echelon's gains.

    When ``simulated`` carries a ``timing_noise`` section (``simulator.noise``), every row also has the
    noisy simulation's median (``noisy_s``) and the gap to it, and every gain the noisy simulated gain
    and the share of it kept: the same judgement against a reference that does not hang on exact ties."""
    summary = summarize(emulated)
    sim = {run.scheduler: run for run in simulated.runs}
    noise = simulated.timing_noise or {}
    noisy = noise.get("schedulers", {})
    jobs, objective = [], []
    for scheduler, entry in summary.items():
        sim_run = sim.get(scheduler)
        for job_id, job_stats in entry["jobs"].items():
            stats = job_stats["completion_s"]
            sim_s = sim_run.jobs[job_id].completion_s if sim_run and job_id in sim_run.jobs else None
            noisy_s = noisy_median(noisy, scheduler, job_id)
            gap = _gap(stats["median"], sim_s)
            jobs.append({"scheduler": scheduler, "job": job_id, "simulated_s": sim_s, "emulated": stats,
                         "gap": gap, "within_target": gap is not None and abs(gap) <= GAP_TARGET,
                         "noisy_s": noisy_s, "noisy_gap": _gap(stats["median"], noisy_s),
                         "spread_ok": stats["range_share"] is not None
                         and stats["range_share"] <= SPREAD_TARGET,
                         "trusted": entry["numbers_trusted"], "runs": runs_label(entry)})
        sim_obj = sim_run.objective_s if sim_run else None
        noisy_obj = noisy_median(noisy, scheduler, None)
        objective.append({"scheduler": scheduler, "simulated_s": sim_obj, "emulated": entry["objective_s"],
                          "gap": _gap(entry["objective_s"]["median"], sim_obj), "noisy_s": noisy_obj,
                          "noisy_gap": _gap(entry["objective_s"]["median"], noisy_obj),
                          "trusted": entry["numbers_trusted"], "runs": runs_label(entry)})
    return {"scenario": emulated.scenario, "targets": {"gap": GAP_TARGET, "gain_kept": GAIN_KEPT_TARGET,
                                                      "spread": SPREAD_TARGET},
            "timing_noise": {"jitter_s": noise["jitter_s"], "samples": noise["samples"]} if noise else None,
            "jobs": jobs, "objective": objective, "gains": _gains(summary, sim, noisy),
            "runs": run_verdicts(emulated), "dilation": emulated.dilation, "faults": fault_groups(emulated)}


def describe_faults(records: Sequence[dict[str, Any]] | None) -> str:
    """A run's ``faults`` records in words (``link a1-e1 down at 3 s; link a1-e1 up at 6 s``; '' for none)."""
    events = [FaultEvent(r["at_s"], r["kind"], tuple(r.get("target") or ()), bool(r.get("up")))
              for r in records or []]
    return "; ".join(event.describe() for event in events)


def run_label(run: RunResult, repeated: bool) -> str:
    """``echelon``, or ``echelon repeat 2`` when its scheduler ran more than once."""
    return run.scheduler + (f" repeat {run.repeat + 1}" if repeated and run.repeat is not None else "")


def fault_groups(results: Results) -> list[dict[str, Any]]:
    """The faults injected, each set once with the runs it hit: ``[{"faults": text, "runs": [label]}]``
    in first-run order (empty when no run had any)."""
    repeated = {scheduler for scheduler, runs in runs_by_scheduler(results).items() if len(runs) > 1}
    groups: dict[str, list[str]] = {}
    for run in results.runs:
        text = describe_faults(run.faults)
        if text:
            groups.setdefault(text, []).append(run_label(run, run.scheduler in repeated))
    return [{"faults": text, "runs": labels} for text, labels in groups.items()]


def noisy_median(noisy: dict[str, Any], scheduler: str, job_id: str | None) -> float | None:
    """The noisy simulation's median completion of ``job_id`` (None: the objective), if it has one."""
    entry = noisy.get(scheduler)
    if entry is None:
        return None
    stats = entry["objective_s"] if job_id is None else entry["jobs"].get(job_id)
    return None if stats is None else stats["median"]


def run_verdicts(emulated: Results) -> list[dict[str, Any]]:
    """Per run: the fidelity monitor's verdict and worst numbers over its phases, the hosts' TCP
    retransmission timeouts, and the wire check's counts and mismatches (runs without either are left
    out)."""
    out = []
    for run in emulated.runs:
        if run.fidelity_monitor is None and run.wire_check is None:
            continue
        phases = (run.fidelity_monitor or {}).get("rounds", {})
        row: dict[str, Any] = {
            "scheduler": run.scheduler, "repeat": run.repeat, "trusted": run.trusted,
            "reasons": [f"{label}: {reason}" for label, doc in phases.items()
                        for reason in doc.get("reasons", [])],
            "slow_link_share": max((doc.get("slow_link_share") or 0.0 for doc in phases.values()),
                                   default=None),
            "cpu_idle_median": min((doc["cpu_idle"]["median"] for doc in phases.values()
                                    if doc.get("cpu_idle", {}).get("median") is not None), default=None),
            "tcp_timeouts": run_timeouts(phases),
        }
        wire = (run.wire_check or {}).get("rounds", {})
        if wire:
            counts = ("flows", "flows_with_problems", "packets_judged", "packets_mismatched")
            row["wire"] = {key: sum(doc.get(key, 0) for doc in wire.values()) for key in counts}
            row["mismatches"] = [f"{label}: {line}" for label, doc in wire.items()
                                 for line in doc.get("mismatches", [])]
        out.append(row)
    return out


def run_timeouts(phases: dict[str, Any]) -> dict[str, int] | None:
    """Host -> TCP retransmission timeouts over a run's phases (``emulation.monitor.judge_tcp_timeouts``),
    hosts with any; None when no phase counted them (a run folder written before the check)."""
    counted = [doc for doc in phases.values() if "tcp_timeouts" in doc]
    if not counted:
        return None
    total: dict[str, int] = {}
    for doc in counted:
        for host, n in doc["tcp_timeouts"].items():
            total[host] = total.get(host, 0) + int(n)
    return total


def _timeouts_cell(timeouts: dict[str, int] | None) -> str:
    """fidelity.md's ``rto`` cell: ``-`` (not counted), ``0``, or ``9 on 2 hosts``."""
    if timeouts is None:
        return "-"
    if not timeouts:
        return "0"
    return f"{sum(timeouts.values())} on {len(timeouts)} host{'s' if len(timeouts) > 1 else ''}"


def _gains(summary: dict[str, Any], sim: dict[str, RunResult],
           noisy: dict[str, Any]) -> list[dict[str, Any]]:
    """echelon over each baseline, on the objective and on every job's completion, on both sides (and
    against the noisy simulation's medians when there are any)."""
    if "echelon" not in summary or "echelon" not in sim:
        return []
    ours = summary["echelon"]
    rows = []
    for base in BASELINES:
        if base not in summary or base not in sim:
            continue
        theirs = summary[base]
        metrics = [("objective", None, ours["objective_s"], theirs["objective_s"], sim["echelon"].objective_s,
                    sim[base].objective_s)]
        sim_ours, sim_theirs = sim["echelon"].jobs, sim[base].jobs
        for job_id, job_stats in ours["jobs"].items():
            if job_id in theirs["jobs"] and job_id in sim_ours and job_id in sim_theirs:
                metrics.append((f"{job_id} completion", job_id, job_stats["completion_s"],
                                theirs["jobs"][job_id]["completion_s"], sim_ours[job_id].completion_s,
                                sim_theirs[job_id].completion_s))
        for metric, job_id, emu_ours, emu_theirs, sim_ours_s, sim_theirs_s in metrics:
            emu_gain = _gain(emu_ours["median"], emu_theirs["median"])
            sim_gain = _gain(sim_ours_s, sim_theirs_s)
            noisy_gain = _gain(noisy_median(noisy, "echelon", job_id), noisy_median(noisy, base, job_id))
            kept = _kept(emu_gain, sim_gain)
            kept_noisy = _kept(emu_gain, noisy_gain)
            rows.append({"over": base, "metric": metric, "simulated_gain": sim_gain,
                         "emulated_gain": emu_gain, "kept": kept,
                         "kept_ok": kept is not None and kept >= GAIN_KEPT_TARGET,
                         "noisy_gain": noisy_gain, "kept_noisy": kept_noisy,
                         "kept_noisy_ok": kept_noisy is not None and kept_noisy >= GAIN_KEPT_TARGET,
                         "runs": [runs_label(ours), runs_label(theirs)],
                         "trusted": ours["numbers_trusted"] and theirs["numbers_trusted"]})
    return rows


def _kept(emulated_gain: float | None, simulated_gain: float | None) -> float | None:
    """The share of a positive simulated gain the emulation kept (None when there is none to keep)."""
    if emulated_gain is None or not simulated_gain or simulated_gain <= 0:
        return None
    return emulated_gain / simulated_gain


# ------------------------------------------------------------------------------------------ text
def _s(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _span(stats: dict[str, Any]) -> str:
    return f"{_s(stats['min'])}..{_s(stats['max'])}"


def format_fidelity(doc: dict[str, Any]) -> str:
    """The run folder's fidelity.md: three tables (jobs, objective, gains) and how to read them."""
    targets = doc["targets"]
    noise = doc.get("timing_noise")

    def noisy(*cells: str) -> list[str]:  # the noisy-simulation columns, when there is one
        return list(cells) if noise else []

    job_rows = []
    for r in doc["jobs"]:
        emu = r["emulated"]
        job_rows.append([r["scheduler"], r["job"], _s(r["simulated_s"]), _s(emu["median"]), _span(emu),
                         r["runs"], _pct(r["gap"]), "yes" if r["within_target"] else "NO",
                         "-" if emu["range_share"] is None else f"{emu['range_share']:.1%}",
                         *noisy(_s(r.get("noisy_s")), _pct(r.get("noisy_gap")))])
    obj_rows = [[r["scheduler"], _s(r["simulated_s"]), _s(r["emulated"]["median"]), _span(r["emulated"]),
                 r["runs"], _pct(r["gap"]), *noisy(_s(r.get("noisy_s")), _pct(r.get("noisy_gap")))]
                for r in doc["objective"]]
    gain_rows = [[f"echelon over {r['over']}", r["metric"], _pct(r["simulated_gain"]),
                  _pct(r["emulated_gain"]), _share(r["kept"]), "yes" if r["kept_ok"] else "NO",
                  *noisy(_pct(r.get("noisy_gain")), _share(r.get("kept_noisy"))),
                  f"{r['runs'][0]} vs {r['runs'][1]}"]
                 for r in doc["gains"]]
    noisy_head = ["noisy_sim", "gap_noisy"]
    parts = [
        f"# Fidelity: {doc['scenario']}, emulated vs simulated",
        "",
        "Emulated numbers are medians over the repeats the fidelity monitor trusted (all runs, marked "
        "UNTRUSTED, when it trusted none); `runs` says how many. Targets: completion within "
        f"{targets['gap']:.0%} of simulated, spread (max - min over the median) at most "
        f"{targets['spread']:.0%}, at least {targets['gain_kept']:.0%} of the simulated gain kept.",
    ]
    if noise:
        parts += ["", f"`noisy_sim`: median of {noise['samples']} simulations with every compute up to "
                      f"{noise['jitter_s'] * 1e3:g} ms longer (seeded; docs/emulation.md, \"Simulation under "
                      "timing noise\"): the reference that does not hang on flows starting at exactly the "
                      "same instant; `gap_noisy` and `kept_noisy` judge the emulation against it."]
    parts += [
        "",
        "```",
        render_table("job completion (s)", ["scheduler", "job", "sim", "emu_median", "emu_min..max", "runs",
                                            "gap", "within", "spread", *noisy(*noisy_head)], job_rows),
        "",
        render_table("objective: sum of EchelonFlow tardiness (s)",
                     ["scheduler", "sim", "emu_median", "emu_min..max", "runs", "gap",
                      *noisy(*noisy_head)], obj_rows),
    ]
    if gain_rows:
        parts += ["", render_table("echelon's gain (1 - echelon / baseline; medians)",
                                   ["comparison", "metric", "sim_gain", "emu_gain", "kept", "target",
                                    *noisy("noisy_gain", "kept_noisy"), "runs"],
                                   gain_rows)]
    parts.append("```")
    parts += _format_faults(doc.get("faults") or [])
    parts += _format_dilation(doc.get("dilation"))
    parts += _format_runs(doc.get("runs", []))
    return "\n".join(parts) + "\n"


def _format_faults(groups: list[dict[str, Any]]) -> list[str]:
    """fidelity.md's lines on the faults injected: which runs had which (none: no section)."""
    if not groups:
        return []
    return ["", "## Faults injected", "",
            "Times are seconds after the run's start, in the scenario's time scale; links and switches went "
            "down (and up) in every phase of a run and in its simulation alike, an agent or the controller "
            "in the phase with all jobs together only (docs/faults.md).", ""] + [
        f"- {group['faults']}: {', '.join(group['runs'])}" for group in groups]


def dilation_line(dilation: dict[str, Any] | None) -> str:
    """One line saying a run was time-dilated, by how much and how the factor was chosen ('' if not)."""
    if not dilation:
        return ""
    factor = dilation["factor"]
    if dilation.get("chosen_by") == "hand":
        how = "given by hand"
    else:
        how = ("chosen by calibration: the smallest factor whose calibration traffic the fidelity monitor "
               "trusted")
        refused = [f"x{c['factor']:g}" for c in dilation.get("confirmation", []) if not c["trusted"]]
        if refused:
            how += (f", then doubled until the first real run was trusted (not trusted at "
                    f"{', '.join(refused)})")
    return (f"Time dilation x{factor:g} ({how}): emulated with link rates / {factor:g} and compute "
            f"x{factor:g}; emulated times are wall clock / {factor:g}, in the scenario's own time scale.")


def _format_dilation(dilation: dict[str, Any] | None) -> list[str]:
    """fidelity.md's lines on the time dilation: the factor and, when calibrated, every factor tried."""
    line = dilation_line(dilation)
    if not line:
        return []
    parts = ["", "## Time dilation", "", line]
    trials = (dilation.get("calibration") or {}).get("trials", [])
    if trials:
        def share(value: float | None) -> str:
            return "-" if value is None else f"{value:.0%}"

        rows = [[f"x{t['factor']:g}", "yes" if t["trusted"] else "NO", share(t["slow_link_share"]),
                 share(t["link_ratio_median"]), str(t["busy_port_intervals"]), share(t["cpu_idle_median"]),
                 share(t["ovs_thread_busy_p90"])] for t in trials]
        parts += ["", "```", render_table("calibration (every used host pair sending at once)",
                                          ["factor", "trusted", "slow_ports", "link_ratio", "busy_intervals",
                                           "idle", "ovs_p90"], rows), "```"]
    return parts


#: Wire mismatches listed per run in fidelity.md (the rest: results.json and captures/.../check.json).
MISMATCH_LINES = 12


def _format_runs(runs: list[dict[str, Any]]) -> list[str]:
    """fidelity.md's section on every run: monitor verdict, wire counts, reasons and mismatches."""
    if not runs:
        return []
    rows = []
    for r in runs:
        wire = r.get("wire")
        rows.append([r["scheduler"], "-" if r["repeat"] is None else str(r["repeat"] + 1),
                     {True: "yes", False: "NO", None: "-"}[r["trusted"]],
                     "-" if r["slow_link_share"] is None else f"{r['slow_link_share']:.0%}",
                     "-" if r["cpu_idle_median"] is None else f"{r['cpu_idle_median']:.0%}",
                     _timeouts_cell(r.get("tcp_timeouts")),
                     "-" if not wire else f"{wire['flows_with_problems']} of {wire['flows']}",
                     "-" if not wire else f"{wire['packets_mismatched']} of {wire['packets_judged']}"])
    parts = ["", "## Runs: fidelity monitor and wire check", "",
             "`slow_ports`: share of busy (backlogged) switch-port intervals below 90 % of the link rate, "
             "worst phase; `idle`: the machine's median idle share, lowest phase; `rto`: the hosts' TCP "
             "retransmission timeouts, all phases (judged per host against `tcp_timeouts_max`, 0 by default, "
             "except in phases with faults injected; docs/emulation.md, \"Fidelity monitor\"). Wire "
             "columns only for `--capture` runs (\"Wire capture\").", "", "```",
             render_table("runs", ["scheduler", "repeat", "trusted", "slow_ports", "idle", "rto",
                                   "wire_flows_off", "marks_off"], rows), "```"]
    for r in runs:
        which = f"{r['scheduler']}" + ("" if r["repeat"] is None else f" repeat {r['repeat'] + 1}")
        if r["reasons"]:
            parts += ["", f"Not trusted, {which}:"] + [f"- {reason}" for reason in r["reasons"]]
        mismatches = r.get("mismatches") or []
        if mismatches:
            parts += ["", f"Wire mismatches, {which} ({len(mismatches)}):"]
            parts += [f"- {line}" for line in mismatches[:MISMATCH_LINES]]
            if len(mismatches) > MISMATCH_LINES:
                parts.append(f"- ... and {len(mismatches) - MISMATCH_LINES} more (results.json wire_check)")
    return parts
