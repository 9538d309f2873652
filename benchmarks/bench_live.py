"""What the live view costs the controller (numbers go to docs/results.md).

1. Building what a scrape and a dashboard poll read, on a k=4 fat-tree with 100 active flows and on a
   k=8 fat-tree (80 switches, 640 switch ports) with ``--flows`` (1,000) active flows, in EchelonFlows
   of 10, every port and every flow's meter reported by the switches: one ``/metrics`` exposition
   (prometheus-client's ``generate_latest``), one
   ``/v1/echelons?recent_s=60``, one ``/v1/links`` (median of ``--repeats``, in process: the work the
   controller's hub does, without HTTP).
2. With ``--fabric`` (root, Open vSwitch, Mininet): the controller process's CPU time while it idles for
   ``--seconds`` on a k=4 fat-tree with the stats poll on (1 s: port, meter and flow counters of every
   switch) and off, from /proc/<pid>/stat; ovs-vswitchd's CPU in the same window is printed too (shared
   with whatever else runs on the machine, so only indicative).

Usage: ``.venv/bin/python benchmarks/bench_live.py [--flows N] [--repeats N] [--fabric] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from prometheus_client import generate_latest  # noqa: E402

from controller.live_view import LiveView  # noqa: E402
from controller.metrics import ControllerMetrics  # noqa: E402
from controller.registry import Registry  # noqa: E402
from controller.service import SchedulingService  # noqa: E402
from controller.switch_stats import MeterCounters, SwitchPortCounters, SwitchStats  # noqa: E402
from echelonflow.topology import fattree  # noqa: E402


def median_s(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def build_views(k: int, flows: int, repeats: int) -> dict:
    topo = fattree(10e6, k=k)
    registry = Registry(topo)
    service = SchedulingService(registry, None, now=time.time)
    hosts = topo.hosts
    registry.add_job("bench")
    for group in range(flows // 10):
        specs = [{"flow_id": f"f{group}-{i}", "src": hosts[(group + i) % len(hosts)],
                  "dst": hosts[(group + i + len(hosts) // 2) % len(hosts)], "size_bytes": 10_000_000,
                  "offset_s": 0.1 * i}
                 for i in range(10)]
        registry.add_echelon("bench", f"e{group}", None, specs)
        for number, spec in enumerate(specs):
            registry.flow_started("bench", spec["flow_id"], 20_000 + group * 10 + number, 5_000, time.time())
    service.reschedule("arrival")
    stats = SwitchStats(topo)
    for at_s in (1.0, 2.0):
        for switch in topo.switches:
            ports = {topo.port(switch, nb): SwitchPortCounters(tx_bytes=int(at_s * 1e6),
                                                               rx_bytes=int(at_s * 1e6))
                     for nb in topo.graph.neighbors(switch)}
            stats.record_ports(topo.graph.nodes[switch]["dpid"], at_s, ports)
    first_hop = topo.graph.nodes["e1"]["dpid"]
    stats.record_meters(first_hop, {m: MeterCounters(1, 1000, 10, 0, 0) for m in range(1, flows + 1)})
    live = LiveView(service, stats)
    metrics = ControllerMetrics(live, connected=lambda: [topo.graph.nodes[s]["dpid"] for s in topo.switches])
    exposition = generate_latest(metrics.registry)
    return {
        "k": k, "switches": len(topo.switches), "active_flows": len(registry.active_keys()),
        "metrics_bytes": len(exposition),
        "metrics_series": exposition.count(b"\n") - exposition.count(b"\n#"),
        "scrape_ms": 1e3 * median_s(lambda: generate_latest(metrics.registry), repeats),
        "echelons_view_ms": 1e3 * median_s(lambda: live.echelons(60.0), repeats),
        "links_view_ms": 1e3 * median_s(live.links, repeats),
    }


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (clock ticks from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_controller_cpu(seconds: float) -> dict:
    from controller.launcher import ControllerProcess, free_tcp_port, local_config
    from topologies.fabric import Fabric

    out = {}
    topo = fattree(20e6, k=4)
    with open("/var/run/openvswitch/ovs-vswitchd.pid", encoding="ascii") as handle:
        vswitchd = int(handle.read())
    for label, interval in (("stats poll 1 s", 1.0), ("stats poll off", 0.0)):
        port = free_tcp_port()
        with ControllerProcess(topo, local_config(stats_interval_s=interval), ofp_port=port) as ctl:
            fabric = Fabric(topo, controller_port=port, queues=4).start()
            try:
                ctl.wait_switches(timeout_s=30)
                time.sleep(2.0)
                before = (cpu_s(ctl.pid), cpu_s(vswitchd))
                time.sleep(seconds)
                after = (cpu_s(ctl.pid), cpu_s(vswitchd))
            finally:
                fabric.stop()
        out[label] = {"controller_cpu_pct": 100 * (after[0] - before[0]) / seconds,
                      "vswitchd_cpu_pct": 100 * (after[1] - before[1]) / seconds}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--fabric", action="store_true", help="also measure an idle controller on a fabric")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {"views": [build_views(4, 100, args.repeats), build_views(8, args.flows, args.repeats)]}
    if args.fabric:
        result["idle"] = idle_controller_cpu(args.seconds)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for views in result["views"]:
        print(f"k={views['k']} fat-tree, {views['switches']} switches, {views['active_flows']} active "
              f"flows: /metrics {views['scrape_ms']:.1f} ms ({views['metrics_bytes'] / 1e3:.0f} kB, "
              f"{views['metrics_series']} series), /v1/echelons {views['echelons_view_ms']:.1f} ms, "
              f"/v1/links {views['links_view_ms']:.1f} ms (median of {args.repeats})")
    for label, numbers in result.get("idle", {}).items():
        print(f"idle k=4 controller, {label}: controller {numbers['controller_cpu_pct']:.2f} % CPU, "
              f"ovs-vswitchd {numbers['vswitchd_cpu_pct']:.1f} % ({args.seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
