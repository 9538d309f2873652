"""The scheduler matrix: every scheduler on every scenario, exact and under timing noise, judged against
the best *other* scheduler of each cell.

The grids are ``benchmarks/matrix/*.json`` (``echelon sweep`` grids: the bundled training scenarios,
the multi-tenant generator on k=8 and k=16 fat-trees at two loads, 1:1 and 4:1, three seeds, and the
FB2010 hour under the coflow rescheduling rule), run with :func:`simulator.sweep.run_sweep` into
``--out`` (resumable: run the same command again to finish an interrupted matrix).  A *cell* is one
scenario with its parameter values at one noise level (0, 1 or 5 ms: every compute up to that much
longer, ``simulator.noise``, 10 seeded samples).  Per cell and scheduler: the median over the samples
of the objective (the weighted sum of EchelonFlow tardiness, Eq. 4) and of the mean job completion
time (for FB2010 a job is a coflow: its CCT; coflows that never cross the switch complete at arrival
and count as 0 for every scheduler alike).  Each is divided by the best other scheduler's.

Prints the table and writes ``--out/matrix.md`` (the table with the command) and ``--out/matrix.json``.
The summary judges ``--focus`` (default ``echelon``): its largest ratio to the best other scheduler,
the cells where it exceeds 1.01, and per scenario the share of its exact-tie gain over ``coflow`` (1 - its
objective / coflow's) that it keeps under noise.

    .venv/bin/python benchmarks/scheduler_matrix.py [--grid NAME]... [--workers N] [--out DIR]
        [--summary-only] [--focus NAME]
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
from echelonflow.fileio import write_text_atomic  # noqa: E402
from echelonflow.schedulers import coflow_rule_warning  # noqa: E402
from simulator.grid import Grid, load_grid  # noqa: E402
from simulator.sweep import read_records, run_sweep  # noqa: E402

HERE = Path(__file__).resolve().parent
GRIDS = ("bundled", "multitenant-k8", "multitenant-k16", "fb2010")
OUT_DIR = HERE / "results" / "scheduler-matrix"
#: Echelon's objective may be at most this much above the best other scheduler's in a cell.
TARGET_RATIO = 1.01


def cell_label(record: dict[str, Any]) -> str:
    """A short name for a record's scenario with its parameter values (without the noise)."""
    short = {"topology.k": "k", "topology.oversubscription": "os", "jobs.0.multi_tenant.load": "load",
             "jobs.0.multi_tenant.seed": "seed"}
    parameters = record["parameters"]  # named in ``short``'s order: records may list them in any order
    values = [f"{label}{parameters[path]}" for path, label in short.items() if path in parameters]
    return " ".join([record["scenario"], *values])


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per cell (scenario + parameters + noise) and scheduler: medians over the samples, and ratios to
    the best other scheduler of the cell."""
    samples: dict[tuple[str, float], dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: {"objective_s": [], "mean_completion_s": []}))
    for record in records:
        if record.get("status") != "ok":
            continue
        completions = [job["completion_s"] for job in record["jobs"].values()]
        runs = samples[(cell_label(record), float(record.get("noise_ms", 0.0)))][record["scheduler"]]
        runs["objective_s"].append(record["objective_s"])
        runs["mean_completion_s"].append(statistics.fmean(completions))
    cells = []
    for (label, noise_ms), by_scheduler in samples.items():
        medians = {name: {metric: statistics.median(values) for metric, values in runs.items()}
                   for name, runs in by_scheduler.items()}
        row: dict[str, Any] = {"cell": label, "noise_ms": noise_ms,
                               "samples": max(len(r["objective_s"]) for r in by_scheduler.values()),
                               "schedulers": {}}
        for name, value in medians.items():
            others = {other: v for other, v in medians.items() if other != name}
            entry = dict(value)
            for metric in ("objective_s", "mean_completion_s"):
                best = min((v[metric] for v in others.values()), default=float("nan"))
                entry[f"{metric}_vs_best_other"] = value[metric] / best if best > 0 else float("nan")
            entry["best_other"] = min(others, key=lambda n: others[n]["objective_s"], default=None)
            row["schedulers"][name] = entry
        cells.append(row)
    cells.sort(key=lambda c: (c["cell"], c["noise_ms"]))
    return {"cells": cells}


def judge(summary: dict[str, Any], focus: str) -> dict[str, Any]:
    """The focus scheduler against the targets: worst ratio to the best other, cells above 1.01, and per
    scenario cell the share of its exact gain over coflow (1 - objective / coflow's) kept under each
    noise level."""
    ratios = [(c["schedulers"][focus]["objective_s_vs_best_other"], c["cell"], c["noise_ms"])
              for c in summary["cells"] if focus in c["schedulers"]]
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
    return {"focus": focus, "cells": len(ratios), "worst": max(ratios, default=None),
            "above_target": sorted(r for r in ratios if r[0] > TARGET_RATIO),
            "gain_kept_under_noise": kept}


def scenario_of(cell: str) -> str:
    """The family a cell belongs to in the per-scenario summary: the multi-tenant cells by fabric size."""
    if cell.startswith("multitenant-k8"):
        return "multi-tenant k=16" if " k16" in cell else "multi-tenant k=8"
    return cell


def by_scenario(summary: dict[str, Any], focus: str) -> list[str]:
    """Per scenario and noise level: the focus's worst and geometric-mean ratio to the best other
    scheduler over the cells, which scheduler was that best other (how often), and the worst ratio of
    mean completion times (the table docs/results.md quotes)."""
    families: dict[tuple[str, float], list[dict[str, Any]]] = defaultdict(list)
    for c in summary["cells"]:
        if focus in c["schedulers"]:
            families[(scenario_of(c["cell"]), c["noise_ms"])].append(c)
    lines = [f"| scenario | noise | samples | {focus} / best other: worst | geomean | best other (cells) "
             "| mean JCT ratio, worst |", "|---|---|---|---|---|---|---|"]
    for (family, noise_ms), cells in sorted(families.items(),
                                            key=lambda kv: (kv[0][0].startswith("multi"), kv[0])):
        ratios = [c["schedulers"][focus]["objective_s_vs_best_other"] for c in cells]
        best = Counter(c["schedulers"][focus]["best_other"] for c in cells)
        named = ", ".join(f"{n} ({k})" if len(cells) > 1 else n for n, k in best.most_common())
        geomean = math.exp(statistics.fmean(math.log(r) for r in ratios))
        jct = max(c["schedulers"][focus]["mean_completion_s_vs_best_other"] for c in cells)
        lines.append(f"| {family} | {noise_ms:g} ms | {cells[0]['samples']} x {len(cells)} cells | "
                     f"{max(ratios):.3f} | {geomean:.3f} | {named} | {jct:.3f} |")
    return lines


def render(summary: dict[str, Any], verdict: dict[str, Any], names: list[str]) -> str:
    head = f"| cell | noise | n | {' | '.join(names)} |"
    lines = [f"Per scenario, {verdict['focus']} against the best other scheduler of each cell:", "",
             *by_scenario(summary, verdict["focus"]), "",
             "Objective (median over the samples, seconds) and, in brackets, its ratio to the best other "
             "scheduler of the cell.", "", head, "|" + "---|" * (3 + len(names))]
    for c in summary["cells"]:
        parts = []
        for name in names:
            entry = c["schedulers"].get(name)
            parts.append("" if entry is None else
                         f"{entry['objective_s']:.2f} ({entry['objective_s_vs_best_other']:.3f})")
        lines.append(f"| {c['cell']} | {c['noise_ms']:g} | {c['samples']} | {' | '.join(parts)} |")
    lines += ["", "Mean job (coflow) completion time, ratio to the best other scheduler.", "",
              head, "|" + "---|" * (3 + len(names))]
    for c in summary["cells"]:
        ratios = {n: e["mean_completion_s_vs_best_other"] for n, e in c["schedulers"].items()}
        parts = [f"{ratios[n]:.3f}" if n in ratios else "" for n in names]
        lines.append(f"| {c['cell']} | {c['noise_ms']:g} | {c['samples']} | {' | '.join(parts)} |")
    focus = verdict["focus"]
    worst = verdict["worst"]
    lines += ["", f"**{focus}**: {verdict['cells']} cells; worst ratio to the best other scheduler "
              + (f"{worst[0]:.3f} ({worst[1]}, {worst[2]:g} ms)" if worst else "-")
              + f"; above {TARGET_RATIO}: {len(verdict['above_target'])} cells"]
    for ratio, label, noise_ms in verdict["above_target"]:
        lines.append(f"- {label}, {noise_ms:g} ms: {ratio:.3f}")
    if verdict["gain_kept_under_noise"]:
        lines += ["", f"Share of {focus}'s exact gain over coflow kept under noise (target 80 %):", ""]
        for k in verdict["gain_kept_under_noise"]:
            lines.append(f"- {k['cell']}, {k['noise_ms']:g} ms: {100 * k['kept']:.0f} % "
                         f"({100 * k['noisy_gain']:.1f} % below coflow's objective, exact "
                         f"{100 * k['exact_gain']:.1f} %)")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="append", choices=GRIDS, help="one of the grids (repeatable; all)")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: one per core)")
    parser.add_argument("--out", default=str(OUT_DIR), help="the matrix folder (a sweep folder per grid)")
    parser.add_argument("--summary-only", action="store_true", help="summarise what the folder holds")
    parser.add_argument("--focus", default="echelon", help="the scheduler judged (default echelon)")
    args = parser.parse_args()
    out = Path(args.out)
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        for name in args.grid or GRIDS:
            grid: Grid = load_grid(str(HERE / "matrix" / f"{name}.json"))
            warning = coflow_rule_warning(c.scheduler for c in grid.cells if c.rescheduling == "coflow")
            if warning:
                print(f"scheduler_matrix: grid {name}: {warning}", file=sys.stderr)
            folder = out / name
            if args.summary_only:
                done = read_records(str(folder))
                records += [done[cell.key] for cell in grid.cells if cell.key in done]
            else:
                records += run_sweep(grid, str(folder), workers=args.workers)
    except UserError as err:
        print(f"scheduler_matrix: {err}", file=sys.stderr)
        return 2
    summary = summarise(records)
    names = sorted({name for c in summary["cells"] for name in c["schedulers"]})
    verdict = judge(summary, args.focus)
    text = render(summary, verdict, names)
    print(text)
    command = " ".join(["benchmarks/scheduler_matrix.py", *sys.argv[1:]])
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(str(out / "matrix.md"), f"# Scheduler matrix\n\n`.venv/bin/python {command}` "
                      f"({time.strftime('%Y-%m-%d')}, {len(records)} runs, "
                      f"{time.perf_counter() - started:.0f} s)\n\n" + text, mode=0o644)
    write_text_atomic(str(out / "matrix.json"), json.dumps({"summary": summary, "verdict": verdict},
                                                           indent=1, default=str), mode=0o644)
    return 0


if __name__ == "__main__":
    sys.exit(main())
