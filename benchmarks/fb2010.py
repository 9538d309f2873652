"""Coflow completion times on the Coflow-Benchmark FB2010 trace, per scheduler, with the Varys bins.

The bundled ``fb2010`` scenario: 526 coflows of one hour of a Facebook MapReduce cluster on a 150-port
big switch at 1 Gbit/s (2^30 bit/s) per port, each coflow a job arriving when the trace says.  Prints
average, median and 95th-percentile coflow completion time (CCT) per scheduler, the same for the four
bins of the Varys paper (short/long: longest flow below/above 5 MB; narrow/wide: at most/more than 50
flows), and each scheduler's average CCT relative to ``fair`` (per-flow fairness).  Coflows that never
cross the switch (all mappers on their reducer's port) complete at arrival and are left out of the
statistics.

    .venv/bin/python benchmarks/fb2010.py [--max-coflows N] [--scheduler NAME]...

Published anchors on this trace (CoflowSim): Varys up to 3.16x faster on average than per-flow
fairness; Aalo 1.93x faster on average and 3.59x at the 95th percentile.
"""

from __future__ import annotations

import argparse
import statistics
import time

from echelonflow.importers.coflow_benchmark import BYTES_PER_MB
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from simulator.engine import simulate

SHORT_BYTES = 5 * BYTES_PER_MB
NARROW_FLOWS = 50


def bin_of(job) -> str:
    longest = max(f.size_bytes for f in job.flows)
    return ("short" if longest < SHORT_BYTES else "long") + "-" + (
        "narrow" if len(job.flows) <= NARROW_FLOWS else "wide")


def stats(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return statistics.fmean(ordered), statistics.median(ordered), p95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-coflows", type=int, default=None, help="only the first N coflows")
    parser.add_argument("--scheduler", action="append",
                        help="scheduler (repeatable; default: the scenario's)")
    args = parser.parse_args()
    scenario = load_scenario("fb2010")
    jobs = scenario.jobs[:args.max_coflows] if args.max_coflows else scenario.jobs
    networked = [j for j in jobs if j.flows]
    bins = {j.job_id: bin_of(j) for j in networked}
    print(f"{len(jobs)} coflows ({len(networked)} cross the switch), "
          f"{sum(len(j.flows) for j in jobs)} flows, {scenario.topology.name}")
    names = ("short-narrow", "long-narrow", "short-wide", "long-wide")
    print(f"{'scheduler':<15} {'run_s':>7} {'avg_s':>8} {'p50_s':>8} {'p95_s':>8} {'vs_fair':>8}  "
          + "  ".join(f"{b + ' avg/p95':>22}" for b in names))
    fair_avg = None
    for name in args.scheduler or scenario.schedulers:
        started = time.perf_counter()
        result = simulate(scenario.topology, jobs, get_scheduler(name), check_invariants=False,
                          alone_runs=False)
        run_s = time.perf_counter() - started
        cct = {j.job_id: result.jobs[j.job_id].completion_s for j in networked}
        avg, p50, p95 = stats(list(cct.values()))
        fair_avg = avg if name == "fair" else fair_avg
        ratio = f"{fair_avg / avg:.2f}x" if fair_avg else "-"
        cells = []
        for b in names:
            values = [c for j, c in cct.items() if bins[j] == b]
            cells.append(f"{stats(values)[0]:>10.2f}/{stats(values)[2]:<10.2f}" if values else f"{'-':>22}")
        print(f"{name:<15} {run_s:>7.1f} {avg:>8.2f} {p50:>8.2f} {p95:>8.2f} {ratio:>8}  " + "  ".join(cells),
              flush=True)


if __name__ == "__main__":
    main()
