"""The exact rule's cost on FB2010 prefixes: the first N coflows, every arrival at 0 (offline).

Run: ``.venv/bin/python benchmarks/exact_rule_scaling.py [--coflows N]... [--scheduler NAME]...``
(defaults: 100 coflows; coflow, sincronia, echelon).  Each scheduler runs in this process under the
exact rule (a decision at every flow start and finish), without alone runs and without invariant checks,
after an untimed fig2 run that loads the compiled kernels.  Prints per scheduler and prefix the wall
time and CPU time (``time.process_time``: on a shared machine the steadier of the two), the simulator's
decisions (and those skipped as changing nothing), the flows, the average CCT and the process's peak
resident memory so far.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from echelonflow import echelon as echelon_mod  # noqa: E402
from echelonflow.scenario import load_scenario  # noqa: E402
from echelonflow.schedulers import get_scheduler  # noqa: E402
from simulator import engine  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coflows", type=int, action="append", default=None)
    parser.add_argument("--scheduler", action="append", default=None)
    args = parser.parse_args()
    warm = load_scenario("fig2")
    names = args.scheduler or ["coflow", "sincronia", "echelon"]
    for name in names:
        engine.simulate(warm.topology, warm.jobs, get_scheduler(name))
    scenario = load_scenario("fb2010")
    print(f"{'coflows':>7} {'scheduler':<10} {'wall_s':>8} {'cpu_s':>8} {'decisions':>9} {'skipped':>7} "
          f"{'flows':>7} {'avg_cct_s':>9} {'peak_MiB':>8}", flush=True)
    for count in args.coflows or [100]:
        jobs = [dataclasses.replace(job, arrival_s=0.0) for job in scenario.jobs[:count]]
        specs = {job.job_id: echelon_mod.echelons_of(job) for job in jobs}
        flows = sum(len(job.flows) for job in jobs)
        for name in names:
            t0, cpu0 = time.perf_counter(), time.process_time()
            with engine._collector_paused():
                run = engine._Run(scenario.topology, jobs, get_scheduler(name), False, specs)
                run.run()
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            ccts = [engine.completion_after_arrival_s(job, run.finish_s[base:base + len(job.tasks)])
                    for job, base in zip(jobs, run.job_base)]
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{count:>7} {name:<10} {wall:>8.1f} {cpu:>8.1f} {run.decisions:>9} {run.skipped:>7} "
                  f"{flows:>7} {sum(ccts) / len(ccts):>9.5f} {peak:>8.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
