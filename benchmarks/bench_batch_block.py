"""How long one large enforcement batch holds the controller's hub (nothing else is served meanwhile).

Everything in the controller runs as green threads of one eventlet hub (controller/app.py): while a
``POST /v1/enforcement`` batch is validated and applied, no OpenFlow message, API request or scheduling
round is served.  This measures that stall from outside, as a client sees it: a probe thread sends
``GET /v1/health`` over the API's Unix socket every 5 ms while another client posts a batch of N
installs (then N removes) on a real controller (k=4 fat-tree at 10 Mbit/s); the hub was blocked at
least as long as the slowest probe answer that overlapped the batch.  ``--fabric`` connects a real
Mininet/OVS fabric (needs root), so every operation is also encoded and sent to the switches as
OpenFlow messages (without it the switches are unreachable and the Enforcer skips the sending).

    .venv/bin/python benchmarks/bench_batch_block.py [--ops 10000] [--repeat 3] [--fabric]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from controller.client import EchelonClient, install_op, remove_op  # noqa: E402
from controller.launcher import ControllerProcess, free_tcp_port, local_config  # noqa: E402
from echelonflow.topology import Topology, fattree  # noqa: E402

PROBE_INTERVAL_S = 0.005


class Probe:
    """``GET /v1/health`` every PROBE_INTERVAL_S on its own connection: (sent at, answered at) pairs."""

    def __init__(self, ctl: ControllerProcess) -> None:
        self.client = ctl.client(timeout_s=60.0)
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            self.client.health()
            self.samples.append((sent, time.monotonic()))
            self._stop.wait(PROBE_INTERVAL_S)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60.0)
        self.client.close()

    def longest_wait_s(self, start: float, end: float) -> float:
        """The slowest answer to a probe that was waiting at some point in [start, end]."""
        return max((done - sent for sent, done in self.samples if sent <= end and done >= start), default=0.0)

    def typical_s(self, before: float) -> float:
        return statistics.median(done - sent for sent, done in self.samples if done < before)


def batch(topo: Topology, ops: int, rep: int) -> list[dict]:
    """``ops`` installs on distinct 5-tuples between host pairs of ``topo`` (queue 1, a meter each)."""
    hosts, nodes = topo.hosts, topo.graph.nodes
    out = []
    for i in range(ops):
        src, dst = hosts[i % len(hosts)], hosts[(i + 1 + i // len(hosts)) % len(hosts)]
        if src == dst:
            dst = hosts[(i + 2) % len(hosts)]
        match = {"src_ip": nodes[src]["ip"], "dst_ip": nodes[dst]["ip"], "src_port": 20000 + i % 40000,
                 "dst_port": 1000 + rep * 10 + i // 40000}
        out.append(install_op(f"r{rep}-{i}", match, 1, rate_bps=1e6))
    return out


def timed(api: EchelonClient, probe: Probe, requests: list[dict]) -> dict[str, float]:
    time.sleep(0.3)  # probes before, for the typical answer time
    start = time.monotonic()
    api.enforce_batch(requests)
    end = time.monotonic()
    time.sleep(0.3)
    return {"request_s": end - start, "hub_blocked_s": probe.longest_wait_s(start, end),
            "probe_typical_ms": 1e3 * probe.typical_s(start)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=10000, help="operations per batch (the API's maximum)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fabric", action="store_true", help="connect a real Mininet/OVS fabric (root)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    topo = fattree(10e6, k=4)
    fabric = None
    rows = []
    with ControllerProcess(topo, local_config(metrics_port=None, stats_interval_s=0),
                           ofp_port=free_tcp_port()) as ctl:
        if args.fabric:
            from topologies.fabric import Fabric

            fabric = Fabric(topo, controller_port=ctl.ofp_port, tag=f"bbb{os.getpid()}")
            fabric.start()
            ctl.wait_switches()
        try:
            with ctl.client(timeout_s=300.0) as api, Probe(ctl) as probe:
                for rep in range(args.repeat):
                    requests = batch(topo, args.ops, rep)
                    install = timed(api, probe, requests)
                    remove = timed(api, probe, [remove_op(r["flow_id"]) for r in requests])
                    rows.append({"install": install, "remove": remove})
                    print(f"run {rep + 1}: {args.ops} installs: request {install['request_s']:.2f} s, hub "
                          f"blocked {install['hub_blocked_s']:.2f} s; {args.ops} removes: request "
                          f"{remove['request_s']:.2f} s, hub blocked {remove['hub_blocked_s']:.2f} s "
                          f"(probe answer otherwise {install['probe_typical_ms']:.1f} ms)", flush=True)
        finally:
            if fabric is not None:
                fabric.stop()
    summary = {kind: {key: statistics.median(row[kind][key] for row in rows) for key in rows[0][kind]}
               for kind in ("install", "remove")}
    print(f"median of {args.repeat}: installs block the hub {summary['install']['hub_blocked_s']:.2f} s, "
          f"removes {summary['remove']['hub_blocked_s']:.2f} s ({args.ops} operations, "
          f"{'with' if args.fabric else 'without'} a fabric)")
    if args.json:
        print(json.dumps({"ops": args.ops, "fabric": args.fabric, "runs": rows, "median": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
