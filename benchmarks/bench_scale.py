"""How large a fabric this machine emulates faithfully: k, link rate, traffic.

For each fat-tree size k, the same load as ``echelon emulate --dilation auto`` calibrates with: a
fresh controller and fabric per time-dilation factor (1, 2, 4, 8, 16; links at 10 Mbit/s / F), every
host pair of the traffic sending at once, judged by the fidelity monitor (``emulation.calibrate``).  The
traffic is one data-parallel ring all-reduce over one host per edge switch (k^2/2 workers, each ring
step crossing pods: the pattern the bundled k=8 scenario's largest job has), so it grows with the
fabric.  The smallest trusted factor is the answer for that k: below it, this machine does not forward
the fabric at its link rate; with none trusted up to x16, not at all.

Run as root from the repository root (each factor costs a fabric start and stop; k=16 takes long):
    .venv/bin/python benchmarks/bench_scale.py [--ks 4 8 16] [--rate-mbps 10] [--factors 1 2 4 8 16]
        [--out DIR]
Prints one JSON object per k and a summary table; writes ``scale.json`` (and each factor's monitor
document) into DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from echelonflow.errors import UserError  # noqa: E402
from echelonflow.topology import fattree  # noqa: E402
from echelonflow.workloads import generate  # noqa: E402
from emulation.calibrate import CalibrationError, CalibrationSettings, calibrate  # noqa: E402


def ring_over_edges(k: int, rate_bps: float):
    """The topology and a ring all-reduce job over the first host of every edge switch."""
    topology = fattree(rate_bps, k=k)
    by_edge: dict[str, str] = {}
    for host in topology.hosts:
        by_edge.setdefault(topology.host_switch(host), host)
    hosts = [by_edge[edge] for edge in sorted(by_edge, key=lambda e: int(e[1:]))]
    job = generate("ring_allreduce", "ring", hosts, {"bytes": 1_000_000 * len(hosts)})
    return topology, job


def measure(k: int, rate_bps: float, out_dir: str, factors: tuple[float, ...]) -> dict:
    topology, job = ring_over_edges(k, rate_bps)
    started = time.monotonic()
    kind = topology.graph.nodes
    switch_ports = sum((kind[a]["kind"] == "switch") + (kind[b]["kind"] == "switch")
                       for a, b in topology.graph.edges)
    result: dict = {"k": k, "switches": len(topology.switches), "hosts": len(topology.hosts),
                    "switch_ports": switch_ports, "rate_mbps": rate_bps / 1e6, "ring_workers": len(job.hosts)}
    logs = os.path.join(out_dir, f"k{k}")
    try:
        chosen = calibrate(topology, [job], lambda line: print(f"k={k}: {line}", flush=True), logs_dir=logs,
                           settings=CalibrationSettings(factors=factors))
        result.update(factor=chosen["factor"], trials=chosen["calibration"]["trials"])
    except (CalibrationError, UserError) as exc:
        result.update(factor=None, error=str(exc))
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ks", type=int, nargs="*", default=[4, 8, 16])
    parser.add_argument("--rate-mbps", type=float, default=10.0)
    parser.add_argument("--factors", type=float, nargs="*", default=list(CalibrationSettings().factors),
                        help="dilation factors to try, smallest first (each costs a fabric start and stop)")
    parser.add_argument("--out", default="runs/bench-scale")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = []
    for k in args.ks:
        results.append(measure(k, args.rate_mbps * 1e6, args.out, tuple(args.factors)))
        print(json.dumps(results[-1]), flush=True)
        with open(os.path.join(args.out, "scale.json"), "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\n{'k':>3} {'switches':>8} {'hosts':>6} {'ring':>5} {'factor':>7} {'faithful rate':>14} "
          f"{'wall':>8}")
    for r in results:
        factor = "none" if r["factor"] is None else f"x{r['factor']:g}"
        rate = "-" if r["factor"] is None else f"{r['rate_mbps'] / r['factor']:g} Mbit/s"
        print(f"{r['k']:>3} {r['switches']:>8} {r['hosts']:>6} {r['ring_workers']:>5} {factor:>7} {rate:>14} "
              f"{r['wall_s']:>7.0f}s")
    print(f"(this process's peak memory {peak_mib:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
