"""Measure the emulated fabric: start/stop time of fat-trees and achieved/target TCP rate of shaped links.

Run as root from the repository root:
    .venv/bin/python benchmarks/bench_fabric.py [--ks 4 8] [--rates 5 10 20]
Prints one JSON object (also the numbers quoted in docs/results.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from echelonflow.topology import fattree, two_hosts  # noqa: E402
from tests.fabric_helpers import iperf3_bps  # noqa: E402
from topologies.fabric import Fabric  # noqa: E402


def bench_start_stop(k: int) -> dict:
    fab = Fabric(fattree(10e6, k=k), controller_port=None)
    fab.start()
    started = dict(fab.timings_s)
    fab.stop()
    return {"k": k, "switches": len(fab.topology.switches), "hosts": len(fab.topology.hosts),
            "start_s": round(started["start"], 2), "stop_s": round(fab.timings_s["stop"], 2),
            "phases_s": {key: round(v, 2) for key, v in started.items()}}


def bench_rate(rate_mbps: float, seconds: float) -> dict:
    rate_bps = rate_mbps * 1e6
    with Fabric(two_hosts(rate_bps), controller_port=None, fail_mode="standalone") as fab:
        achieved = iperf3_bps(fab, "h1", "h2", seconds=seconds)
    return {"rate_mbps": rate_mbps, "achieved_mbps": round(achieved / 1e6, 3),
            "ratio": round(achieved / rate_bps, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ks", type=int, nargs="*", default=[4, 8])
    parser.add_argument("--rates", type=float, nargs="*", default=[5, 10, 20], help="Mbit/s")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    out = {"start_stop": [bench_start_stop(k) for k in args.ks],
           "shaped_tcp": [bench_rate(r, args.seconds) for r in args.rates]}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
