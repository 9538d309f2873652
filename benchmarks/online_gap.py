"""echelon-online against clairvoyant echelon, iteration by iteration (the "gap to clairvoyant").

A k=4 fat-tree at 10 Mbit/s shared by a 4-stage GPipe job and a 4-worker ring all-reduce job, each
running ITERATIONS iterations.  Per iteration k: the sum of tardiness of the iteration's EchelonFlows
(ids ``job/i<k>.*``, the paper's Eq. 4 restricted to that iteration) and when the iteration's last flow
finished, under ``echelon`` (told every size and offset) and ``echelon-online`` (told nothing; learns
from earlier iterations; iteration 0 is Aalo-like).

    .venv/bin/python benchmarks/online_gap.py [ITERATIONS]
"""

from __future__ import annotations

import sys

from echelonflow.schedulers import get_scheduler
from echelonflow.schedulers.echelon_online import template
from echelonflow.topology import build
from echelonflow.workloads import generate
from simulator.engine import simulate


def jobs(iterations: int):
    gpipe = generate("gpipe", "gpipe", ["h1", "h5", "h9", "h13"],
                     {"iterations": iterations, "micro_batches": 4, "activation_bytes": 625000,
                      "forward_s": 0.3, "backward_s": 0.6})
    ring = generate("ring_allreduce", "ring", ["h2", "h6", "h10", "h14"],
                    {"iterations": iterations, "bytes": 4000000, "buckets": 2, "forward_s": 0.3,
                     "backward_s": 0.6})
    return [gpipe, ring]


def per_iteration(result) -> dict[int, tuple[float, float]]:
    """iteration -> (sum of its EchelonFlows' tardiness, its last flow's finish)."""
    out: dict[int, list[float]] = {}
    for eid, ech in result.echelonflows.items():
        k = template(eid)[1]
        row = out.setdefault(k, [0.0, 0.0])
        row[0] += ech.tardiness_s
        row[1] = max(row[1], max(result.flows[f].finish_s for f in ech.flows))
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def main() -> None:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    topology = build("fattree", 10e6, k=4)
    runs = {name: simulate(topology, jobs(iterations), get_scheduler(name))
            for name in ("echelon", "echelon-online", "aalo")}
    rows = {name: per_iteration(r) for name, r in runs.items()}
    print(f"{'iteration':>9} {'echelon_tard_s':>15} {'online_tard_s':>14} {'aalo_tard_s':>12} "
          f"{'echelon_end_s':>14} {'online_end_s':>13} {'gap_end':>8}")
    for k in rows["echelon"]:
        (te, ee), (to, eo), (ta, _) = rows["echelon"][k], rows["echelon-online"][k], rows["aalo"][k]
        print(f"{k:>9} {te:>15.2f} {to:>14.2f} {ta:>12.2f} {ee:>14.2f} {eo:>13.2f} {eo / ee - 1:>+8.1%}")
    for name, r in runs.items():
        done = {j: round(v.completion_s, 2) for j, v in r.jobs.items()}
        print(f"{name}: objective_s {r.objective_s:.2f}, completion_s {done}")


if __name__ == "__main__":
    main()
