"""Does deciding more often change a schedule?  The simulator with a periodic re-decision.

The controller re-decides on every flow start and finish and every ``interval_s`` (0.2 s in emulation);
the simulator only on starts and finishes.  This runs each scenario's coflow and echelon schedules with
an extra decision every PERIOD seconds (``Decision.valid_until_s``) and prints job completions and the
objective: identical numbers mean the fluid schedule is time-consistent, so any emulated difference comes
from the wire (rates not delivered, reports that lag), not from the controller deciding more often.

    .venv/bin/python benchmarks/decision_period.py fattree-fsdp-ps fattree-gpipe-ring
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from echelonflow.scenario import load_scenario  # noqa: E402
from echelonflow.schedulers.base import Scheduler  # noqa: E402
from echelonflow.schedulers.echelon import EchelonScheduler  # noqa: E402
from echelonflow.schedulers.varys import CoflowScheduler  # noqa: E402
from echelonflow.schedulers.view import Allocation, FlowView  # noqa: E402
from simulator.engine import simulate  # noqa: E402


def periodic(cls: type[Scheduler], period_s: float | None) -> Scheduler:
    """An instance of ``cls`` whose every decision asks to be renewed after ``period_s``."""

    class Periodic(cls):  # type: ignore[valid-type, misc]
        def decide(self, view: FlowView) -> Allocation:
            allocation = super().decide(view)
            if period_s is None:
                return allocation
            return dataclasses.replace(allocation, valid_until_s=view.now_s + period_s)

    Periodic.name = cls.name
    return Periodic()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="+")
    parser.add_argument("--period", type=float, action="append",
                        help="seconds (repeatable; default 0.2 and 0.05)")
    args = parser.parse_args()
    periods: list[float | None] = [None, *(args.period or [0.2, 0.05])]
    for name in args.scenario:
        scenario = load_scenario(name)
        for cls in (CoflowScheduler, EchelonScheduler):
            for period in periods:
                run = simulate(scenario.topology, scenario.jobs, periodic(cls, period), alone_runs=False)
                jobs = "  ".join(f"{job} {r.completion_s:.4f} s" for job, r in run.jobs.items())
                label = "events only" if period is None else f"every {period:g} s"
                print(f"{name:20s} {cls.name:8s} {label:12s} {jobs}  objective {run.objective_s:.4f} s")


if __name__ == "__main__":
    main()
