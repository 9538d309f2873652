"""Coflow completion times on the Coflow-Benchmark FB2010 trace, per scheduler, with the Varys bins.

The bundled ``fb2010`` scenario: 526 coflows of one hour of a Facebook MapReduce cluster on a 150-port
big switch at 1 Gbit/s (2^30 bit/s) per port, each coflow a job arriving when the trace says.  Prints
average, median and 95th-percentile coflow completion time (CCT) per scheduler, the same for the four
bins of the Varys paper (short/long: longest flow below/above 5 MB; narrow/wide: at most/more than 50
flows), and each scheduler's average CCT relative to ``fair`` (per-flow fairness).  Coflows that never
cross the switch (all mappers on their reducer's port) complete at arrival and are left out of the
statistics.

    .venv/bin/python benchmarks/fb2010.py [--max-coflows N] [--scheduler NAME]... [--rescheduling RULE]
        [--out DIR]

``--rescheduling coflow`` runs the simulator under Varys's rule (rates recomputed at flow starts and
coflow completions, as Varys and CoflowSim do) instead of the exact one; its rows are labelled
"NAME (coflow rule)" next to the exact ones.  ``--coflowsim-arrivals`` reads the trace's arrival times
as CoflowSim does (its 1,024-ms second and its 10.24-s admission epochs,
``echelonflow/importers/coflow_benchmark.py``); its rows say "CoflowSim arrivals".

Each scheduler's CCTs are written to ``DIR/results.json`` (default ``benchmarks/results/fb2010``) as soon
as its run ends, keyed by scheduler and coflow count, so a long sweep can run one scheduler per process
and a later run adds to the table; the table printed (and written to ``DIR/results.md``) covers every
scheduler recorded for the same coflow count.

Published anchors on this trace (CoflowSim): Varys up to 3.16x faster on average than per-flow
fairness; Aalo 1.93x faster on average and 3.59x at the 95th percentile.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

from echelonflow.errors import UserError
from echelonflow.fileio import check_output_dir, read_json, write_text_atomic
from echelonflow.importers.coflow_benchmark import BYTES_PER_MB, COFLOWSIM_EPOCH_MS, COFLOWSIM_MS_PER_SECOND
from echelonflow.scenario import Scenario, parse_scenario, resolve
from echelonflow.schedulers import check_names, get_scheduler
from simulator.engine import RESCHEDULING, simulate

SHORT_BYTES = 5 * BYTES_PER_MB
NARROW_FLOWS = 50
BINS = ("short-narrow", "long-narrow", "short-wide", "long-wide")
ORDER = ("fair", "port-fair", "fifo", "fifo-priority", "coflow", "sincronia", "aalo", "echelon",
         "echelon-online")


def bin_of(job) -> str:
    longest = max(f.size_bytes for f in job.flows)
    return ("short" if longest < SHORT_BYTES else "long") + "-" + (
        "narrow" if len(job.flows) <= NARROW_FLOWS else "wide")


def fb2010(coflowsim_arrivals: bool = False) -> Scenario:
    """The bundled scenario, with CoflowSim's arrival model when asked."""
    path = resolve("fb2010")
    data = read_json(path, "scenario", UserError)
    if coflowsim_arrivals:
        for entry in data["jobs"]:
            entry.update(ms_per_second=COFLOWSIM_MS_PER_SECOND, admission_epoch_ms=COFLOWSIM_EPOCH_MS)
    return parse_scenario(data, path)


def stats(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return statistics.fmean(ordered), statistics.median(ordered), p95


def table(records: dict, names_in_order: list[str]) -> str:
    """Markdown table of every recorded scheduler, with the average CCT relative to fair's."""
    fair_avg = records.get("fair", {}).get("avg_s")
    header = ("| scheduler | run_s | peak MiB | avg_s | p50_s | p95_s | avg vs fair | p95 vs fair | "
              + " | ".join(f"{b} avg/p95 (n)" for b in BINS) + " |")
    lines = [header, "|" + "---|" * (8 + len(BINS))]
    fair_p95 = records.get("fair", {}).get("p95_s")
    for name in names_in_order:
        r = records[name]
        ratio = f"{fair_avg / r['avg_s']:.2f}x" if fair_avg else "-"
        ratio95 = f"{fair_p95 / r['p95_s']:.2f}x" if fair_p95 else "-"
        cells = [f"{r['bins'][b]['avg_s']:.2f}/{r['bins'][b]['p95_s']:.2f} ({r['bins'][b]['count']})"
                 if b in r["bins"] else "-" for b in BINS]
        peak = f"{r['peak_rss_mib']:.0f}" if "peak_rss_mib" in r else "-"
        lines.append(f"| {name} | {r['run_s']:.1f} | {peak} | {r['avg_s']:.2f} | {r['p50_s']:.2f} | "
                     f"{r['p95_s']:.2f} | {ratio} | {ratio95} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _stored(path: Path) -> dict:
    """The results kept at ``path`` (each run adds its scheduler's), {} when there are none; a file that
    is not such a document is one line, before the simulations (a traceback after them, before)."""
    if not path.exists():
        return {}
    stored = read_json(path, "results", UserError)
    if not isinstance(stored, dict) or not all(isinstance(v, dict) for v in stored.values()):
        raise UserError(f"results {path}: not the results this script writes (an object of objects); "
                        "give another --out")
    return stored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-coflows", type=int, default=None, help="only the first N coflows")
    parser.add_argument("--scheduler", action="append",
                        help="scheduler (repeatable; default: the scenario's)")
    parser.add_argument("--rescheduling", choices=RESCHEDULING, default="every-flow",
                        help="the simulator's rescheduling rule (coflow: Varys's, at coflow arrivals and "
                             "completions; recorded with each scheduler's numbers)")
    parser.add_argument("--coflowsim-arrivals", action="store_true",
                        help="arrival times as CoflowSim reads them (1,024-ms second, 10.24-s epochs)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/fb2010"),
                        help="folder for results.json and results.md")
    args = parser.parse_args()
    try:
        names = check_names(args.scheduler or [])
        if args.max_coflows is not None and args.max_coflows < 1:  # [:-5] dropped the last five instead
            raise UserError(f"--max-coflows must be at least 1, got {args.max_coflows}")
        check_output_dir(str(args.out), "--out")
        stored = _stored(args.out / "results.json")
    except UserError as exc:
        print(f"fb2010: {exc}", file=sys.stderr)
        sys.exit(2)
    scenario = fb2010(args.coflowsim_arrivals)
    jobs = scenario.jobs[:args.max_coflows] if args.max_coflows else scenario.jobs
    networked = [j for j in jobs if j.flows]
    bins = {j.job_id: bin_of(j) for j in networked}
    key = f"{len(jobs)} coflows"
    print(f"{len(jobs)} coflows ({len(networked)} cross the switch), "
          f"{sum(len(j.flows) for j in jobs)} flows, {scenario.topology.name}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    records = stored.setdefault(key, {})
    for name in names or scenario.schedulers:
        started, cpu_started = time.perf_counter(), time.process_time()
        result = simulate(scenario.topology, jobs, get_scheduler(name), check_invariants=False,
                          alone_runs=False, rescheduling=args.rescheduling)
        run_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
        cct = {j.job_id: float(result.jobs[j.job_id].completion_s) for j in networked}
        avg, p50, p95 = stats(list(cct.values()))
        per_bin = {}
        for b in BINS:
            values = [c for j, c in cct.items() if bins[j] == b]
            if values:
                b_avg, b_p50, b_p95 = stats(values)
                per_bin[b] = {"count": len(values), "avg_s": b_avg, "p50_s": b_p50, "p95_s": b_p95}
        # the process's peak resident memory so far (Linux reports KiB): one scheduler per process
        # gives each its own peak
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        # the exact rule on the trace's own arrivals keeps the scheduler's name; variants are labelled
        variant = [part for part, on in (("coflow rule", args.rescheduling == "coflow"),
                                         ("CoflowSim arrivals", args.coflowsim_arrivals)) if on]
        label = f"{name} ({', '.join(variant)})" if variant else name
        records[label] = {"rescheduling": args.rescheduling, "coflowsim_arrivals": args.coflowsim_arrivals,
                          "run_s": run_s, "cpu_s": cpu_s, "avg_s": avg, "p50_s": p50,
                          "p95_s": p95, "bins": per_bin, "cct_s": cct, "peak_rss_mib": peak_mib}
        write_text_atomic(str(results_path), json.dumps(stored, indent=1, sort_keys=True), mode=0o644)
        print(f"{label}: {run_s:.1f} s of simulation, average CCT {avg:.2f} s, "
              f"peak memory {peak_mib:.0f} MiB", flush=True)
    order = [label for n in ORDER for label in sorted(records) if label == n or label.startswith(f"{n} (")]
    order += sorted(n for n in records if n not in order)
    text = table(records, order)
    heading = f"# FB2010, {key} ({len(networked)} cross the switch), {scenario.topology.name}"
    write_text_atomic(str(args.out / "results.md"), f"{heading}\n\n{text}\n", mode=0o644)
    print(text)


if __name__ == "__main__":
    main()
