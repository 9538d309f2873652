"""Rule-install latency and meter accuracy on a real k=4 fat-tree (needs root, OVS, Mininet).

Latency is measured inside the controller from the Enforcer call to the last barrier reply of every
switch the operation touched (``enforcement.latency_s`` of the API's ``POST /v1/enforcement?wait_s=``
answer, through :class:`controller.client.EchelonClient` on the API's Unix socket), for 1 flow
(repeated) and for a batch of 100 flows.  Meter accuracy: a TCP flow h1 -> h16 (50 Mbit/s links)
metered at 5, 10 and 20 Mbit/s, received rate over a 5 s iperf3 transfer divided by the meter rate.

    .venv/bin/python benchmarks/bench_rules.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from controller.client import EchelonClient, install_op, remove_op  # noqa: E402
from controller.launcher import ControllerProcess, free_tcp_port  # noqa: E402
from echelonflow.topology import Topology, fattree  # noqa: E402
from topologies.fabric import Fabric  # noqa: E402

LINK_BPS = 50e6


def install_request(topo: Topology, flow_id: str, src: str, dst: str, cport: int, sport: int,
                    queue: int = 1, rate_bps: float | None = None) -> dict:
    nodes = topo.graph.nodes
    match = {"src_ip": nodes[src]["ip"], "dst_ip": nodes[dst]["ip"], "src_port": cport, "dst_port": sport}
    return install_op(flow_id, match, queue, rate_bps=rate_bps)


def acked(reply: dict) -> float:
    """The barrier-ack latency of an answer that waited, after checking every switch acknowledged."""
    assert reply["enforcement"]["in_force"], reply
    return float(reply["enforcement"]["latency_s"])


def install_latency(api: EchelonClient, topo: Topology, repeat: int) -> dict:
    hosts = topo.hosts
    single = []
    for i in range(repeat):
        request = install_request(topo, f"one{i}", hosts[i % 16], hosts[(i + 5) % 16], 30000 + i, 80)
        single.append(acked(api.enforce(request, wait_s=5)))
        acked(api.enforce_remove(f"one{i}", wait_s=5))
    batches = []
    for rep in range(3):
        pairs = [(hosts[i % 16], hosts[(i + 1 + i // 16) % 16]) for i in range(100)]
        reqs = [install_request(topo, f"b{rep}-{i}", src, dst, 31000 + i, 81)
                for i, (src, dst) in enumerate(pairs)]
        batches.append((len(reqs), acked(api.enforce_batch(reqs, wait_s=30))))
        acked(api.enforce_batch([remove_op(r["flow_id"]) for r in reqs], wait_s=30))
    return {
        "one_flow_ms": {"median": 1e3 * statistics.median(single), "max": 1e3 * max(single), "n": repeat},
        "batch": [{"flows": n, "ms": 1e3 * s} for n, s in batches],
    }


def metered_rate(api: EchelonClient, fabric: Fabric, topo: Topology, rate_mbps: float) -> float:
    flow_id, cport, sport = f"m{rate_mbps}", 32000 + int(rate_mbps), 5501
    request = install_request(topo, flow_id, "h1", "h16", cport, sport, rate_bps=rate_mbps * 1e6)
    acked(api.enforce(request, wait_s=5))
    server = fabric.host("h16").popen(["iperf3", "-s", "-1", "-p", str(sport)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        dst_ip = topo.graph.nodes["h16"]["ip"]
        out = fabric.host("h1").cmd(f"iperf3 -c {dst_ip} -p {sport} --cport {cport} -t 5 -J")
        received = json.loads(out)["end"]["sum_received"]["bits_per_second"]
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
        acked(api.enforce_remove(flow_id, wait_s=5))
    return received / (rate_mbps * 1e6)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="single-flow installs to time")
    args = parser.parse_args()
    topo = fattree(LINK_BPS, k=4)
    port = free_tcp_port()
    ctl = ControllerProcess(topo, ofp_port=port).start()
    try:
        with Fabric(topo, controller_port=port, queues=4) as fabric, ctl.client(timeout_s=60) as api:
            ctl.wait_switches(timeout_s=20)
            result = {"install_latency": install_latency(api, topo, args.repeat),
                      "meter_achieved_over_target": {str(r): round(metered_rate(api, fabric, topo, r), 3)
                                                     for r in (5, 10, 20)}}
    finally:
        ctl.stop()
    result["controller_log_problems"] = ctl.log_problems()
    print(json.dumps(result, indent=2))
    return 0 if not result["controller_log_problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
