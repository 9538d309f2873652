"""One scheduling decision with 10,000 active flows on a k=16 fat-tree (target: < 200 ms each).

Run: ``.venv/bin/python benchmarks/bench_scheduler.py [--flows N] [--k K] [--repeat R]``.
Flows: random host pairs (seeded), sizes 1 KB..100 MB, 500 EchelonFlows with staggered offsets, each
pinned to its ECMP path exactly as the simulator and controller pin them.  ``decide_ms`` is the whole
``decide(snapshot)`` (the controller's call: the snapshot becomes a flow table first); ``table_ms`` is
the decision on a prepared flow table, what the simulator pays per decision (schedulers with a
compiled kernel only; the first, untimed call compiles or loads it).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from echelonflow.schedulers import SCHEDULERS, get_scheduler, kernels  # noqa: E402
from echelonflow.schedulers.base import ActiveFlow, Snapshot  # noqa: E402
from echelonflow.schedulers.columns import ColumnarScheduler  # noqa: E402
from echelonflow.topology import Topology, build  # noqa: E402


def make_snapshot(n_flows: int, k: int, seed: int = 1) -> Snapshot:
    rng = random.Random(seed)
    topo = build("fattree", 1e9, k=k)
    hosts = topo.hosts
    n_groups = max(1, n_flows // 20)
    refs = [rng.uniform(0, 10) for _ in range(n_groups)]
    flows = []
    for i in range(n_flows):
        src, dst = rng.sample(hosts, 2)
        g = i % n_groups
        offset = (i // n_groups) * rng.uniform(0, 0.01)
        path = Topology.links_of(topo.path_for(src, dst, f"job/f{i}"))
        size_bytes = rng.uniform(1e3, 1e8)
        due_s = refs[g] + offset
        flows.append(ActiveFlow(f"job/f{i}", f"job/e{g}", path, size_bytes, due_s, offset, refs[g]))
    return Snapshot(10.0, topo.capacity_bps(), flows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=10_000)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    snapshot = make_snapshot(args.flows, args.k)
    print(f"{args.flows} active flows, k={args.k} fat-tree ({len(snapshot.capacity_bps)} directed links)")
    print(f"{'scheduler':<15} {'decide_ms':>10} {'table_ms':>9}  (medians of {args.repeat}) target < 200 ms")
    worst = 0.0
    for name in SCHEDULERS:
        scheduler = get_scheduler(name)
        scheduler.decide(snapshot)  # untimed: compiles or loads the kernel, fills the link numbering
        decide_ms = median_ms(args.repeat, scheduler.decide, snapshot)
        worst = max(worst, decide_ms)
        table_ms = "-"
        if isinstance(scheduler, ColumnarScheduler) and scheduler.decides_by_table():
            table, _ = scheduler.table_of(snapshot)
            active = kernels.int_array(scheduler.flow_order(table))
            rate, order = kernels.floats(len(active)), kernels.ints(len(active))
            call = (table, active, snapshot.now_s, rate, order)
            table_ms = f"{median_ms(args.repeat, scheduler.decide_table, *call):.2f}"
        print(f"{name:<15} {decide_ms:>10.1f} {table_ms:>9}", flush=True)
    return 0 if worst < 200 else 1


def median_ms(repeat: int, call, *call_args) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call(*call_args)
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


if __name__ == "__main__":
    sys.exit(main())
