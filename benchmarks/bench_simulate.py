"""Simulate the bench-k8 scenario once per scheduler and time it (target: < 30 s each on one core).

Run: ``.venv/bin/python benchmarks/bench_simulate.py [SCENARIO]``.  The time covers the run with all
jobs together plus one run per job alone (for slowdowns), with invariant checks on every decision.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from echelonflow.scenario import load_scenario  # noqa: E402
from echelonflow.schedulers import get_scheduler  # noqa: E402
from simulator.engine import simulate  # noqa: E402


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "bench-k8"
    scenario = load_scenario(name)
    n_flows = sum(len(job.flows) for job in scenario.jobs)
    n_tasks = sum(len(job.tasks) for job in scenario.jobs)
    print(f"scenario {scenario.name}: {len(scenario.jobs)} jobs, {n_tasks} tasks, {n_flows} flows")
    print(f"{'scheduler':<10} {'wall_s':>8} {'objective_s':>12} {'max_completion_s':>17}  target < 30 s")
    worst = 0.0
    for sched in scenario.schedulers:
        t0 = time.perf_counter()
        result = simulate(scenario.topology, scenario.jobs, get_scheduler(sched))
        wall = time.perf_counter() - t0
        worst = max(worst, wall)
        done = max(j.completion_s for j in result.jobs.values())
        print(f"{sched:<10} {wall:>8.2f} {result.objective_s:>12.3f} {done:>17.3f}")
    return 0 if worst < 30 else 1


if __name__ == "__main__":
    sys.exit(main())
