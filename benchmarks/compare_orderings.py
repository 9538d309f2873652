"""Compare the echelon scheduler's group orderings on the bundled scenarios (simulated).

The paper leaves open how EchelonFlows are ranked against each other: ``echelon-varys`` (the paper's
sketch) can rank them by their offset-adjusted residual bottleneck, by t*_H or by plain SEBF on
remaining volume (docs/scheduler-design.md); ``echelon`` ranks them by the residual bottleneck of
everything they have left.  This
prints the Eq. 4 objective (sum of EchelonFlow tardiness) and the sum of job completion times for each,
so the default is chosen on numbers; the ``coflow`` baseline (Varys's own SEBF order) is printed once per
scenario beside them.  Run: .venv/bin/python benchmarks/compare_orderings.py
"""

from __future__ import annotations

from echelonflow.scenario import load_scenario
from echelonflow.schedulers.echelon import ORDERINGS, EchelonScheduler, EchelonVarysScheduler
from echelonflow.schedulers.varys import CoflowScheduler
from simulator.engine import simulate

SCENARIOS = ("fig2", "fattree-gpipe-ring", "fattree-fsdp-ps")


def main() -> None:
    print(f"{'scenario':20s} {'scheduler':13s} {'order_by':10s} {'objective_s':>11s} {'sum_jct_s':>9s}")
    for name in SCENARIOS:
        scenario = load_scenario(name)
        runs = [(EchelonVarysScheduler(order_by=order_by), order_by) for order_by in ORDERINGS]
        for scheduler, order_by in [*runs, (EchelonScheduler(), "whole"), (CoflowScheduler(), "sebf")]:
            result = simulate(scenario.topology, scenario.jobs, scheduler).to_json_dict()
            jct = sum(job["completion_s"] for job in result["jobs"].values())
            print(f"{name:20s} {scheduler.name:13s} {order_by:10s} {result['objective_s']:11.2f} {jct:9.2f}")


if __name__ == "__main__":
    main()
