"""The scheduler matrix: every scheduler on every scenario, exact and under timing noise, judged against
the best *other* scheduler of each cell.

The grids are ``benchmarks/matrix/*.json`` (``echelon sweep`` grids: the bundled training scenarios,
the multi-tenant generator on k=8 and k=16 fat-trees at two loads, 1:1 and 4:1, three seeds, and the
FB2010 hour under the coflow rescheduling rule), run with :func:`simulator.sweep.run_sweep` into
``--out`` (resumable: run the same command again to finish an interrupted matrix).  A *cell* is one
scenario with its parameter values at one noise level (0, 1 or 5 ms: every compute up to that much
longer, ``simulator.noise``, 10 seeded samples).  Per cell and scheduler: the median over the samples
of the objective (the weighted sum of EchelonFlow tardiness, Eq. 4), of the mean and the 95th-percentile
job completion time (for FB2010 a job is a coflow: its CCT; coflows that never cross the switch complete
at arrival and count as 0 for every scheduler alike) and of the GPU-busy fraction (docs/scheduler-design.md,
"What users train for"; none for FB2010, whose jobs have no compute).  Each is divided by the best other
scheduler's (the lowest time, the highest fraction).

Prints the table and writes ``--out/matrix.md`` (the table with the command) and ``--out/matrix.json``.
The summary judges ``--focus`` (default ``echelon``): its largest ratio to the best other scheduler,
the cells where its objective exceeds 1.01x the best other's, its mean JCT 1.005x, its GPU-busy fraction
falls below any other's, the cells where another scheduler is at least as good on the objective, mean JCT
and GPU-busy fraction and better on one (dominates it: the three weigh completions differently, so none
may lead on all three), and per scenario the share of its exact-tie gain over ``coflow`` (1 - its
objective / coflow's) that it keeps under noise.

``--summary-only`` summarises the sweep folders under ``--out``; a grid whose folder is not there (they
are not kept in the repository) keeps its cells from ``--out/matrix.json``, re-judged, so a matrix
re-run in part (some grids, run elsewhere and linked under ``--out``) updates only those grids.  Records
and cells written before the p95 and GPU-busy metrics existed show them as missing (``-``, null in the
JSON) and are not judged on them.

    .venv/bin/python benchmarks/scheduler_matrix.py [--grid NAME]... [--workers N] [--out DIR]
        [--summary-only] [--focus NAME]

``--grid smoke --out /tmp/smoke`` runs a few cells in seconds (not part of the matrix; keep it out of
the kept results folder).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from echelonflow.errors import UserError  # noqa: E402
from echelonflow.fileio import check_output_dir, loads_strict, write_text_atomic  # noqa: E402
from echelonflow.results import percentile_nearest_rank  # noqa: E402
from echelonflow.schedulers import check_names, coflow_rule_warning  # noqa: E402
from simulator.grid import Grid, load_grid  # noqa: E402
from simulator.sweep import read_records, run_sweep  # noqa: E402

HERE = Path(__file__).resolve().parent
GRIDS = ("bundled", "multitenant-k8", "multitenant-k16", "fb2010")
#: Grids run only when named: ``smoke``, a few cells to check the metrics and the verdict in seconds.
EXTRA_GRIDS = ("smoke",)
OUT_DIR = HERE / "results" / "scheduler-matrix"
#: Echelon's objective may be at most this much above the best other scheduler's in a cell.
TARGET_RATIO = 1.01
#: ... its mean job completion time at most this much above the best other's.
TARGET_JCT_RATIO = 1.005
#: Two medians this close (relative) are equal: the same schedule, summed in another order.
SAME_RTOL = 1e-9
#: Per cell and scheduler, the metrics (medians over the samples): lower is better but for the last.
METRICS = ("objective_s", "mean_completion_s", "p95_completion_s", "gpu_busy_fraction")
#: What the dominance check compares: the objective and the two measures users train for (the p95 is a
#: tail of the mean's distribution, reported but not a third criterion).
DOMINANCE_METRICS = ("objective_s", "mean_completion_s", "gpu_busy_fraction")
HIGHER_IS_BETTER = {"gpu_busy_fraction"}


def cell_label(record: dict[str, Any]) -> str:
    """A short name for a record's scenario with its parameter values (without the noise)."""
    short = {"topology.k": "k", "topology.oversubscription": "os", "jobs.0.multi_tenant.load": "load",
             "jobs.0.multi_tenant.seed": "seed"}
    parameters = record["parameters"]  # named in ``short``'s order: records may list them in any order
    values = [f"{label}{parameters[path]}" for path, label in short.items() if path in parameters]
    return " ".join([record["scenario"], *values])


def record_metrics(record: dict[str, Any]) -> dict[str, float | None]:
    """A sweep record's metrics (:data:`METRICS`); a record written before the p95 and GPU-busy fields
    existed has its p95 recomputed from its jobs and its GPU-busy fraction None (its tasks are gone)."""
    completions = [job["completion_s"] for job in record["jobs"].values()]
    p95 = record.get("jct_p95_s")
    if p95 is None and completions:
        p95 = percentile_nearest_rank(completions, 0.95)
    return {"objective_s": record["objective_s"],
            "mean_completion_s": statistics.fmean(completions) if completions else None,
            "p95_completion_s": p95, "gpu_busy_fraction": record.get("gpu_busy_fraction")}


def median_or_none(values: list[float | None]) -> float | None:
    """The median, or None when any sample lacks the metric (a median of some samples would mislead)."""
    return None if not values or any(v is None for v in values) else statistics.median(values)


def ratio_to_best_other(metric: str, value: float | None, others: list[float | None]) -> float | None:
    """``value`` over the best of ``others`` (lowest; highest for a fraction); None where undefined."""
    known = [v for v in others if v is not None]
    if value is None or not known:
        return None
    best = max(known) if metric in HIGHER_IS_BETTER else min(known)
    return value / best if best > 0 else float("nan")


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per cell (scenario + parameters + noise) and scheduler: medians over the samples, and ratios to
    the best other scheduler of the cell."""
    samples: dict[tuple[str, float], dict[str, dict[str, list[float | None]]]] = defaultdict(
        lambda: defaultdict(lambda: {metric: [] for metric in METRICS}))
    for record in records:
        if record.get("status") != "ok":
            continue
        runs = samples[(cell_label(record), float(record.get("noise_ms", 0.0)))][record["scheduler"]]
        for metric, value in record_metrics(record).items():
            runs[metric].append(value)
    cells = []
    for (label, noise_ms), by_scheduler in samples.items():
        medians = {name: {metric: median_or_none(values) for metric, values in runs.items()}
                   for name, runs in by_scheduler.items()}
        row: dict[str, Any] = {"cell": label, "noise_ms": noise_ms,
                               "samples": max(len(r["objective_s"]) for r in by_scheduler.values()),
                               "schedulers": {name: dict(value) for name, value in medians.items()}}
        cells.append(with_ratios(row))
    cells.sort(key=lambda c: (c["cell"], c["noise_ms"]))
    return {"cells": cells}


def with_ratios(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (a cell) with every scheduler's ratios to the best other scheduler and that best other
    (by objective); metrics a scheduler's entry lacks count as missing."""
    medians = {name: {metric: entry.get(metric) for metric in METRICS}
               for name, entry in row["schedulers"].items()}
    for name, value in medians.items():
        others = {other: v for other, v in medians.items() if other != name}
        entry = row["schedulers"][name]
        entry.update(value)
        for metric in METRICS:
            entry[f"{metric}_vs_best_other"] = ratio_to_best_other(
                metric, value[metric], [v[metric] for v in others.values()])
        entry["best_other"] = min(others, key=lambda n: others[n]["objective_s"], default=None)
    return row


def cells_of_matrix(path: Path) -> list[dict[str, Any]]:
    """The cells of a matrix.json this script wrote (its ratios recomputed: older ones lack metrics)."""
    try:
        document = loads_strict(path.read_text(encoding="utf-8"))
        cells = document["summary"]["cells"]
        return [with_ratios(cell) for cell in cells]
    except OSError as err:
        raise UserError(f"no sweep folder under {path.parent} and no matrix to re-read ({err})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(f"{path} is not a matrix this script wrote ({type(err).__name__}: {err})") from None


def dominating(entries: dict[str, dict[str, Any]], focus: str) -> list[str]:
    """The other schedulers of a cell at least as good as ``focus`` on every one of
    :data:`DOMINANCE_METRICS` both have, and better on one (values within ``SAME_RTOL`` relative are equal:
    the same schedule, summed in another order).  The objective, mean JCT and GPU-busy fraction weigh the
    same completions differently (docs/scheduler-design.md, "Why no schedule wins all three"), so a
    scheduler can be behind the best on each and still be one no other improves on in all three."""
    mine = entries[focus]
    found = []
    for name, other in entries.items():
        if name == focus:
            continue
        signs = []
        for metric in DOMINANCE_METRICS:
            a, b = mine.get(metric), other.get(metric)
            if a is None or b is None:
                continue
            gain = (b - a) if metric in HIGHER_IS_BETTER else (a - b)  # > 0: the other is better
            tolerance = SAME_RTOL * max(abs(a), abs(b))
            signs.append(0 if abs(gain) <= tolerance else (1 if gain > 0 else -1))
        if signs and min(signs) >= 0 and max(signs) > 0:
            found.append(name)
    return found


def carried_cells(path: Path, grids: list[Grid], required: bool) -> list[dict[str, Any]]:
    """The cells of the matrix.json at ``path`` that belong to ``grids`` (by scenario and parameters),
    for ``--summary-only`` where those grids have no sweep folder: a matrix re-run in part keeps the rest
    of what it had.  Without the file: nothing, or a :class:`UserError` when ``required`` (nothing else
    to summarise)."""
    if not path.exists() and not required:
        return []
    labels = {cell_label({"scenario": cell.scenario, "parameters": cell.parameters})
              for grid in grids for cell in grid.cells}
    return [cell for cell in cells_of_matrix(path) if cell["cell"] in labels]


def judge(summary: dict[str, Any], focus: str) -> dict[str, Any]:
    """The focus scheduler against the targets: worst ratio to the best other, cells above 1.01 (objective)
    and 1.005 (mean JCT), cells where another scheduler keeps the GPUs busier, cells where another
    scheduler dominates it (:func:`dominating`), and per scenario cell the share of its exact gain over
    coflow (1 - objective / coflow's) kept under each noise level."""

    def judged(metric: str) -> list[tuple[float, str, float]]:
        """(ratio to the best other, cell, noise) wherever the focus's ratio is known."""
        return [(c["schedulers"][focus][f"{metric}_vs_best_other"], c["cell"], c["noise_ms"])
                for c in summary["cells"] if focus in c["schedulers"]
                and c["schedulers"][focus].get(f"{metric}_vs_best_other") is not None]

    ratios, jct = judged("objective_s"), judged("mean_completion_s")
    p95, gpu = judged("p95_completion_s"), judged("gpu_busy_fraction")
    by_cell: dict[str, dict[float, dict[str, Any]]] = defaultdict(dict)
    for c in summary["cells"]:
        by_cell[c["cell"]][c["noise_ms"]] = c["schedulers"]
    kept = []
    for label, levels in sorted(by_cell.items()):
        exact = levels.get(0.0, {})
        if focus not in exact or "coflow" not in exact:
            continue
        gain = 1.0 - exact[focus]["objective_s"] / exact["coflow"]["objective_s"]
        for noise_ms, schedulers in sorted(levels.items()):
            if noise_ms == 0.0 or gain <= 0:
                continue
            noisy_gain = 1.0 - schedulers[focus]["objective_s"] / schedulers["coflow"]["objective_s"]
            kept.append({"cell": label, "noise_ms": noise_ms, "exact_gain": gain, "noisy_gain": noisy_gain,
                         "kept": noisy_gain / gain})
    dominated = [(c["cell"], c["noise_ms"], dominating(c["schedulers"], focus)) for c in summary["cells"]
                 if focus in c["schedulers"]]
    return {"focus": focus, "cells": len(ratios), "worst": max(ratios, default=None),
            "dominance_cells": len(dominated), "dominated": [entry for entry in dominated if entry[2]],
            "above_target": sorted(r for r in ratios if r[0] > TARGET_RATIO),
            "jct_cells": len(jct), "jct_worst": max(jct, default=None),
            "jct_above_target": sorted(r for r in jct if r[0] > TARGET_JCT_RATIO),
            "p95_worst": max(p95, default=None),
            "gpu_cells": len(gpu), "gpu_worst": min(gpu, default=None),
            "gpu_below_other": sorted(r for r in gpu if r[0] < 1.0 - SAME_RTOL),
            "gain_kept_under_noise": kept}


def scenario_of(cell: str) -> str:
    """The family a cell belongs to in the per-scenario summary: the multi-tenant cells by fabric size."""
    if cell.startswith("multitenant-k8"):
        return "multi-tenant k=16" if " k16" in cell else "multi-tenant k=8"
    return cell


def by_scenario(summary: dict[str, Any], focus: str) -> list[str]:
    """Per scenario and noise level: the focus's worst and geometric-mean ratio to the best other
    scheduler over the cells, which scheduler was that best other (how often), the worst and geometric-mean
    ratio of mean completion times, the worst of p95 completion times and the lowest ratio of GPU-busy
    fractions (``-``: not known for any cell)."""
    families: dict[tuple[str, float], list[dict[str, Any]]] = defaultdict(list)
    for c in summary["cells"]:
        if focus in c["schedulers"]:
            families[(scenario_of(c["cell"]), c["noise_ms"])].append(c)
    lines = [f"| scenario | noise | samples | {focus} / best other: worst | geomean | best other (cells) "
             "| mean JCT ratio, worst | geomean | p95 JCT ratio, worst | GPU-busy ratio, lowest |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (family, noise_ms), cells in sorted(families.items(),
                                            key=lambda kv: (kv[0][0].startswith("multi"), kv[0])):
        ratios = known(cells, focus, "objective_s")
        best = Counter(c["schedulers"][focus]["best_other"] for c in cells
                       if c["schedulers"][focus]["best_other"] is not None)
        named = ", ".join(f"{n} ({k})" if len(cells) > 1 else n for n, k in best.most_common()) or "-"
        jct = known(cells, focus, "mean_completion_s")
        lines.append(f"| {family} | {noise_ms:g} ms | {cells[0]['samples']} x {len(cells)} cells | "
                     f"{cell_text(max(ratios, default=None))} | "
                     f"{cell_text(geomean(ratios) if ratios else None)} | {named} | "
                     f"{cell_text(max(jct, default=None))} | "
                     f"{cell_text(geomean(jct) if jct else None)} | "
                     f"{cell_text(max(known(cells, focus, 'p95_completion_s'), default=None))} | "
                     f"{cell_text(min(known(cells, focus, 'gpu_busy_fraction'), default=None))} |")
    return lines


def known(cells: list[dict[str, Any]], focus: str, metric: str) -> list[float]:
    """The focus's ratios to the best other for ``metric`` over ``cells``, where known."""
    ratios = (c["schedulers"][focus].get(f"{metric}_vs_best_other") for c in cells)
    return [r for r in ratios if r is not None]


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def cell_text(value: float | None, digits: int = 3) -> str:
    """A number for the tables, ``-`` where the metric is missing."""
    return "-" if value is None else f"{value:.{digits}f}"


def render(summary: dict[str, Any], verdict: dict[str, Any], names: list[str]) -> str:
    head = f"| cell | noise | n | {' | '.join(names)} |"
    lines = [f"Per scenario, {verdict['focus']} against the best other scheduler of each cell:", "",
             *by_scenario(summary, verdict["focus"])]
    for metric, title, digits in (
            ("objective_s", "Objective (seconds)", 2),
            ("mean_completion_s", "Mean job (coflow) completion time", 3),
            ("p95_completion_s", "95th-percentile job completion time (nearest rank)", 3),
            ("gpu_busy_fraction", "GPU-busy fraction (higher is better; - for FB2010, whose jobs have no "
                                  "compute, and for records without it)", 3)):
        lines += ["", f"{title}: median over the samples and, in brackets, its ratio to the best other "
                  "scheduler of the cell.", "", head, "|" + "---|" * (3 + len(names))]
        for c in summary["cells"]:
            parts = []
            for name in names:
                entry = c["schedulers"].get(name)
                if entry is None or entry.get(metric) is None:
                    parts.append("" if entry is None else "-")
                else:
                    ratio = entry.get(f"{metric}_vs_best_other")
                    parts.append(f"{cell_text(entry[metric], digits)} ({cell_text(ratio)})")
            lines.append(f"| {c['cell']} | {c['noise_ms']:g} | {c['samples']} | {' | '.join(parts)} |")
    focus = verdict["focus"]
    lines += ["", f"**{focus}**: {verdict['cells']} cells; worst objective ratio to the best other scheduler "
              + where(verdict["worst"]) + f"; above {TARGET_RATIO}: {len(verdict['above_target'])} cells"]
    lines += [f"- {label}, {noise_ms:g} ms: {ratio:.3f}"
              for ratio, label, noise_ms in verdict["above_target"]]
    lines += [f"**{focus}**: {verdict['jct_cells']} cells with mean JCT; worst ratio "
              + where(verdict["jct_worst"]) + f"; above {TARGET_JCT_RATIO}: "
              + f"{len(verdict['jct_above_target'])} cells; worst p95 JCT ratio "
              + where(verdict["p95_worst"])]
    lines += [f"- {label}, {noise_ms:g} ms: {ratio:.3f}"
              for ratio, label, noise_ms in verdict["jct_above_target"]]
    lines += [f"**{focus}**: {verdict['gpu_cells']} cells with a GPU-busy fraction; lowest ratio to the "
              f"busiest other {where(verdict['gpu_worst'])}; below another scheduler's: "
              f"{len(verdict['gpu_below_other'])} cells"]
    lines += [f"- {label}, {noise_ms:g} ms: {ratio:.4f}"
              for ratio, label, noise_ms in verdict["gpu_below_other"]]
    lines += [f"**{focus}**: dominated (another scheduler at least as good on the objective, mean JCT and "
              f"GPU-busy fraction, and better on one) in {len(verdict['dominated'])} of "
              f"{verdict['dominance_cells']} cells"]
    lines += [f"- {label}, {noise_ms:g} ms: by {', '.join(names)}"
              for label, noise_ms, names in verdict["dominated"]]
    if verdict["gain_kept_under_noise"]:
        lines += ["", f"Share of {focus}'s exact gain over coflow kept under noise (target 80 %):", ""]
        for k in verdict["gain_kept_under_noise"]:
            lines.append(f"- {k['cell']}, {k['noise_ms']:g} ms: {100 * k['kept']:.0f} % "
                         f"({100 * k['noisy_gain']:.1f} % below coflow's objective, exact "
                         f"{100 * k['exact_gain']:.1f} %)")
    return "\n".join(lines) + "\n"


def where(judged: tuple[float, str, float] | None) -> str:
    """A judged ratio with its cell and noise level, ``-`` when nothing was judged."""
    return "-" if judged is None else f"{judged[0]:.3f} ({judged[1]}, {judged[2]:g} ms)"


def collect(args: argparse.Namespace, out: Path) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """Run (or with ``--summary-only`` read) every grid asked for: (the sweep records, their summary, the
    grids whose cells were carried over from ``out``'s matrix.json, as text)."""
    records: list[dict[str, Any]] = []
    unread: list[Grid] = []  # --summary-only: grids without a sweep folder here
    for name in args.grid or GRIDS:
        grid: Grid = load_grid(str(HERE / "matrix" / f"{name}.json"))
        warning = coflow_rule_warning(c.scheduler for c in grid.cells if c.rescheduling == "coflow")
        if warning and not args.summary_only:  # said when cells run, not when they are read back
            print(f"scheduler_matrix: grid {name}: {warning}", file=sys.stderr)
        folder = out / name
        if args.summary_only:
            done = read_records(str(folder))
            found = [done[cell.key] for cell in grid.cells if cell.key in done]
            records += found
            if not found:
                unread.append(grid)
        else:
            records += run_sweep(grid, str(folder), workers=args.workers)
    summary = summarise(records)
    if not unread:
        return records, summary, ""
    summary["cells"] += carried_cells(out / "matrix.json", unread, required=not records)
    summary["cells"].sort(key=lambda c: (c["cell"], c["noise_ms"]))
    return records, summary, ", ".join(grid.name for grid in unread)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="append", choices=GRIDS + EXTRA_GRIDS,
                        help=f"one of the grids (repeatable; default: {', '.join(GRIDS)})")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: one per core)")
    parser.add_argument("--out", default=str(OUT_DIR), help="the matrix folder (a sweep folder per grid)")
    parser.add_argument("--summary-only", action="store_true", help="summarise what the folder holds")
    parser.add_argument("--focus", default="echelon", help="the scheduler judged (default echelon)")
    args = parser.parse_args()
    out = Path(args.out)
    started = time.perf_counter()
    try:
        # checked before any grid runs (hours for the whole matrix): a misspelt --focus judged a scheduler
        # that ran nowhere and rewrote the kept matrix.md with it
        check_names([args.focus])
        if args.workers is not None and args.workers < 1:
            raise UserError(f"--workers must be at least 1, got {args.workers}")
        check_output_dir(str(out), "matrix folder")
        records, summary, carried = collect(args, out)
    except UserError as err:
        print(f"scheduler_matrix: {err}", file=sys.stderr)
        return 2
    names = sorted({name for c in summary["cells"] for name in c["schedulers"]})
    verdict = judge(summary, args.focus)
    text = render(summary, verdict, names)
    print(text)
    command = " ".join(["benchmarks/scheduler_matrix.py", *sys.argv[1:]])
    carried_note = f"; the cells of {carried} carried over from the matrix.json kept here" if carried else ""
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(str(out / "matrix.md"), f"# Scheduler matrix\n\n`.venv/bin/python {command}` "
                      f"({time.strftime('%Y-%m-%d')}, {len(records)} runs, "
                      f"{time.perf_counter() - started:.0f} s{carried_note})\n\n" + text, mode=0o644)
    write_text_atomic(str(out / "matrix.json"), json.dumps({"summary": summary, "verdict": verdict},
                                                           indent=1, default=str), mode=0o644)
    return 0


if __name__ == "__main__":
    sys.exit(main())
