"""The registry API driving real enforcement: the real controller (os-ken) and real OVS switches.

1. Registration-to-rules-acknowledged latency on a k=4 fat-tree: register one EchelonFlow of N flows
   (N = 8, 64), report every flow started, the last start with ``?wait_s=`` so the answer comes when every
   switch has acknowledged (barrier) everything the service pushed.  Clock: client side, from the
   registration call to that answer.  Median and max over ``--repeat`` EchelonFlows.
2. Reschedule + re-enforce 1,000 active flows on a k=8 fat-tree (80 switches): flows are started under
   ``fair`` (nothing enforced), then the scheduler is switched (fair -> echelon: installs, echelon ->
   coflow: updates, coflow -> fair: removes).  Reported separately: the scheduler's decision time and
   the enforcement push time (both measured inside the controller, ``/v1/health`` ``last_round``), the
   wait for every switch's barrier acks, and the whole request.

    .venv/bin/python benchmarks/bench_registry_fabric.py [--repeat 5] [--flows 1000] [--skip-k8]

Needs root, Open vSwitch and Mininet (takes the fabric lock).  Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from controller.launcher import ControllerProcess, free_tcp_port, local_config  # noqa: E402
from echelonflow.topology import Topology, fattree  # noqa: E402
from topologies.fabric import Fabric  # noqa: E402


def flows_spec(topo: Topology, count: int, rng: random.Random, prefix: str) -> list[dict]:
    out = []
    for j in range(count):
        src, dst = rng.sample(topo.hosts, 2)
        out.append({"flow_id": f"{prefix}f{j}", "src": src, "dst": dst, "size_bytes": 10**8,
                    "offset_s": 0.05 * j})
    return out


def registration_latency(ctl: ControllerProcess, topo: Topology, sizes: list[int],
                         repeat: int) -> dict:
    rng = random.Random(7)
    out = {}
    with ctl.client(timeout_s=120) as client:
        client.register_job("lat")
        port = 20000
        for size in sizes:
            samples = []
            for r in range(repeat):
                prefix = f"n{size}r{r}"
                spec = flows_spec(topo, size, rng, prefix)
                started = time.perf_counter()
                client.register_echelon("lat", prefix, spec)
                for j, flow in enumerate(spec):
                    port += 1
                    last = j == len(spec) - 1
                    answer = client.flow_started("lat", flow["flow_id"], port, 5201,
                                                 wait_s=30 if last else None)
                elapsed = time.perf_counter() - started
                assert answer["enforcement"]["in_force"], answer
                samples.append(elapsed)
                for j, flow in enumerate(spec):  # clean up before the next sample (last one waits for acks)
                    client.flow_finished("lat", flow["flow_id"], wait_s=30 if j == len(spec) - 1 else None)
            out[f"echelon_{size}_flows_ms"] = {"median": round(1e3 * statistics.median(samples), 1),
                                               "max": round(1e3 * max(samples), 1), "n": repeat}
    return out


def reschedule_1000(ctl: ControllerProcess, topo: Topology, n_flows: int) -> dict:
    rng = random.Random(11)
    out: dict = {"flows": n_flows, "switches": len(topo.switches)}
    with ctl.client(timeout_s=300) as client:
        client.set_scheduler("fair")
        client.register_job("big")
        per_group = 8
        started = time.perf_counter()
        for g in range(n_flows // per_group):
            spec = flows_spec(topo, per_group, rng, f"g{g}")
            for f in spec:
                f["size_bytes"] = rng.randint(10**6, 10**8)
            client.register_echelon("big", f"g{g}", spec)
            for j, flow in enumerate(spec):
                client.flow_started("big", flow["flow_id"], 10000 + g, 5201 + j)
        out["register_and_start_s"] = round(time.perf_counter() - started, 2)
        for name in ("echelon", "coflow", "fair"):
            t0 = time.perf_counter()
            answer = client.set_scheduler(name, wait_s=60)
            total = time.perf_counter() - t0
            last = client.health()["last_round"]
            out[f"to_{name}"] = {
                "pushed": answer["pushed"], "in_force": answer["enforcement"]["in_force"],
                "decide_ms": round(1e3 * last["decide_s"], 1),
                "snapshot_ms": round(1e3 * last["snapshot_s"], 1),
                "enforce_push_ms": round(1e3 * last["enforce_s"], 1),
                "barrier_wait_ms": round(1e3 * answer["enforcement"]["waited_s"], 1),
                "request_ms": round(1e3 * total, 1),
            }
    return out


def run(topo: Topology, job) -> tuple[dict, list[str]]:
    port = free_tcp_port()
    ctl = ControllerProcess(topo, local_config(interval_s=3600.0), ofp_port=port)
    ctl.start()
    try:
        with Fabric(topo, controller_port=port, queues=4, connect_timeout_s=120) as fabric:
            ctl.wait_switches(timeout_s=120)
            result = job(ctl)
            result["fabric_start_s"] = round(fabric.timings_s.get("start", 0.0), 1)
    finally:
        ctl.stop()
    return result, ctl.log_problems()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--flows", type=int, default=1000)
    parser.add_argument("--skip-k8", action="store_true")
    args = parser.parse_args()
    result, problems = {}, []
    k4 = fattree(50e6, k=4)
    result["k4_registration_to_acked"], p = run(
        k4, lambda c: registration_latency(c, k4, [8, 64], args.repeat))
    problems += p
    if not args.skip_k8:
        k8 = fattree(50e6, k=8)
        result["k8_reschedule"], p = run(k8, lambda c: reschedule_1000(c, k8, args.flows))
        problems += p
    result["controller_log_problems"] = problems
    print(json.dumps(result, indent=2))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
