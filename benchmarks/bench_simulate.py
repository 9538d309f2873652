"""Simulate a scenario once per scheduler and time it (target for echelon on bench-k8 at 20 iterations:
<= 4 s, issue 31).

Run: ``.venv/bin/python benchmarks/bench_simulate.py [SCENARIO] [--iterations N] [--scheduler NAME]...
[--workers N] [--profile N]``.
The time covers the run with all jobs together plus one run per job alone (for slowdowns), with
invariant checks on every decision.  ``--iterations`` rewrites every generated job's ``iterations``
parameter (bench-k8: 5 -> 13,280 flows, 20 -> 53,120 flows).  The first (untimed) run of the smallest
scenario loads the compiled kernels, so the numbers exclude numba's one-off compilation.

``gc_s`` is the time Python's cyclic garbage collector spent inside the timed call (``gc.callbacks``).
``cpu_s`` is the process's CPU time for the call (``time.process_time``): on a shared machine it moves
far less with the load than the wall time does, so runs of two checkouts compare by it.  ``x_calib`` is
the wall time over that of a fixed pure-Python loop timed just before (:func:`calibration_s`).
``--profile N`` runs each timed call under cProfile instead (wall times then include the profiler's
overhead) and prints its N functions with the most own time, and N by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from echelonflow.scenario import load_scenario, parse_scenario, resolve  # noqa: E402
from echelonflow.schedulers import get_scheduler  # noqa: E402
from simulator.engine import simulate  # noqa: E402


def load(name: str, iterations: int | None):
    if iterations is None:
        return load_scenario(name)
    path = resolve(name)
    data = json.loads(path.read_text(encoding="utf-8"))
    for job in data["jobs"]:
        if "params" in job:
            job["params"]["iterations"] = iterations
    return parse_scenario(data, path)


def calibration_s(rounds: int = 3) -> float:
    """The best of ``rounds`` timings of a fixed pure-Python loop (3,000,000 additions and modulos)."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        total = 0
        for i in range(3_000_000):
            total += i % 7
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="bench-k8")
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--scheduler", action="append", default=None)
    parser.add_argument("--target-s", type=float, default=4.0)
    parser.add_argument("--workers", type=int, default=1,
                        help="processes: >1 runs the alone runs beside the shared run (same results)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="run under cProfile and print the top N functions (own and cumulative time)")
    args = parser.parse_args()
    if args.iterations is not None and args.iterations < 1:
        parser.error("--iterations must be at least 1")
    warm = load_scenario("fig2")
    for sched in args.scheduler or warm.schedulers:
        simulate(warm.topology, warm.jobs, get_scheduler(sched))
    scenario = load(args.scenario, args.iterations)
    n_flows = sum(len(job.flows) for job in scenario.jobs)
    n_tasks = sum(len(job.tasks) for job in scenario.jobs)
    print(f"scenario {scenario.name}: {len(scenario.jobs)} jobs, {n_tasks} tasks, {n_flows} flows")
    print(f"{'scheduler':<10} {'wall_s':>8} {'cpu_s':>7} {'objective_s':>12} {'max_completion_s':>17} "
          f"{'gc_s':>6} {'x_calib':>8}  target < {args.target_s:g} s")
    pauses: list[float] = []
    gc.callbacks.append(lambda phase, info: pauses.append(time.perf_counter()))
    worst = 0.0
    for sched in args.scheduler or scenario.schedulers:
        profiler = cProfile.Profile() if args.profile else None
        pauses.clear()
        calibration = calibration_s()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        if profiler:
            profiler.enable()
        result = simulate(scenario.topology, scenario.jobs, get_scheduler(sched), workers=args.workers)
        if profiler:
            profiler.disable()
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        gc_s = sum(stop - start for start, stop in zip(pauses[::2], pauses[1::2]))
        worst = max(worst, wall)
        done = max(j.completion_s for j in result.jobs.values())
        print(f"{sched:<10} {wall:>8.2f} {cpu:>7.2f} {result.objective_s:>12.3f} {done:>17.3f} {gc_s:>6.2f} "
              f"{wall / calibration:>8.2f}", flush=True)
        if profiler:
            stats = pstats.Stats(profiler, stream=sys.stdout)
            stats.sort_stats("tottime").print_stats(args.profile)
            stats.sort_stats("cumulative").print_stats(args.profile)
    return 0 if worst < args.target_s else 1


if __name__ == "__main__":
    sys.exit(main())
