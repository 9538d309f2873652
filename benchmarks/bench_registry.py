"""Speed of the controller's registry API and scheduling service (numbers go to docs/results.md).

Measures, on this machine, loopback only:

1. sustained job registrations per second through the HTTP API (TCP and Unix socket; the server is a
   separate process, ``python -m controller.api_server``, so client and server do not share a GIL);
2. time to register one EchelonFlow of 8 and of 64 flows through the API (median of repeated requests);
3. one reschedule of 1,000 active flows on a k=8 fat-tree through the scheduling service, split into
   the scheduler's decision time and the enforcement-diff time (recording port, i.e. without OpenFlow I/O):
   the first round installs everything, later rounds push only what changed after progress reports.

Usage: ``.venv/bin/python benchmarks/bench_registry.py [--requests N] [--flows N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from controller.client import EchelonClient  # noqa: E402
from controller.registry import Registry  # noqa: E402
from controller.service import SchedulingService  # noqa: E402
from echelonflow.topology import fattree  # noqa: E402


class CountingSink:
    """Enforcement port that only counts calls (the cost measured is the service's own diff)."""

    def __init__(self) -> None:
        self.calls = 0

    def install(self, flow_id, match, path, queue, rate_bps):
        self.calls += 1

    def update(self, flow_id, queue=None, rate_bps=None, clear_rate=False):
        self.calls += 1

    def remove(self, flow_id):
        self.calls += 1


def start_server(workdir: str, store: bool):
    token_file = os.path.join(workdir, "token")
    sock = os.path.join(workdir, "api.sock")
    extra = ["--store", os.path.join(workdir, "registry.sqlite")] if store else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.api_server", "--topology", "fattree", "--k", "8", "--port", "0",
         "--socket", sock, "--token-file", token_file, "--interval-s", "3600", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("serving on http://"):
        proc.kill()
        proc.wait()
        raise SystemExit(f"server did not start: {line!r}")
    port = int(line.split("http://127.0.0.1:")[1].split()[0])
    return proc, port, sock, token_file


def bench_registrations(client: EchelonClient, prefix: str, count: int) -> float:
    started = time.perf_counter()
    for i in range(count):
        client.register_job(f"{prefix}{i}")
    return count / (time.perf_counter() - started)


def bench_echelon(client: EchelonClient, size: int, repeats: int, hosts: int) -> float:
    rng = random.Random(size)
    client.register_job(f"ech{size}")
    times = []
    for r in range(repeats):
        flows = []
        for j in range(size):
            src, dst = rng.sample(range(1, hosts + 1), 2)
            flows.append({"flow_id": f"r{r}f{j}", "src": f"h{src}", "dst": f"h{dst}", "size_bytes": 10**6,
                          "offset_s": 0.01 * j})
        started = time.perf_counter()
        client.register_echelon(f"ech{size}", f"e{r}", flows)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def bench_reschedule(n_flows: int, rounds: int):
    topo = fattree(10e9, 8)
    reg = Registry(topo)
    port = CountingSink()
    clock = [0.0]
    svc = SchedulingService(reg, port, now=lambda: clock[0])
    rng = random.Random(1)
    hosts = topo.hosts
    reg.add_job("bench")
    per_group = 8
    for g in range(n_flows // per_group):
        flows = []
        for j in range(per_group):
            src, dst = rng.sample(hosts, 2)
            flows.append({"flow_id": f"g{g}f{j}", "src": src, "dst": dst,
                          "size_bytes": rng.randint(10**6, 10**8), "offset_s": 0.05 * j})
        reg.add_echelon("bench", f"g{g}", flows=flows)
        for j in range(per_group):
            reg.flow_started("bench", f"g{g}f{j}", 20000 + g % 40000, 5201 + j, 0.0)
    first = svc.reschedule("bench")
    later = []
    for r in range(rounds):
        clock[0] += 0.5
        for key in rng.sample(reg.active_keys(), len(reg.active_keys()) // 10):
            flow = reg.flows[key]
            sent = min(flow.size_bytes, flow.bytes_sent + 10**6 * (r + 1))
            reg.flow_progress(flow.job_id, flow.flow_id, sent)
        later.append(svc.reschedule("bench"))
    return first, later


def bench_api(mode: str, requests: int) -> dict:
    """HTTP numbers against a server keeping the registry in memory only, or in its SQLite store."""
    out = {}
    workdir = tempfile.mkdtemp(prefix="echelon-bench-")
    proc, port, sock, token_file = start_server(workdir, store=(mode == "sqlite"))
    try:
        with EchelonClient(url=f"http://127.0.0.1:{port}", token_file=token_file) as tcp, \
                EchelonClient(socket_path=sock, token_file=token_file) as unix:
            bench_registrations(tcp, "warm", 100)
            out[f"{mode}_registrations_per_s_tcp"] = bench_registrations(tcp, "t", requests)
            out[f"{mode}_registrations_per_s_unix"] = bench_registrations(unix, "u", requests)
            out[f"{mode}_echelon_8_flows_ms"] = 1000 * bench_echelon(unix, 8, 50, 128)
            out[f"{mode}_echelon_64_flows_ms"] = 1000 * bench_echelon(unix, 64, 50, 128)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="registrations per transport")
    parser.add_argument("--flows", type=int, default=1000, help="active flows for the reschedule benchmark")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {}
    for mode in ("memory", "sqlite"):
        results.update(bench_api(mode, args.requests))
    first, later = bench_reschedule(args.flows, args.rounds)
    results["reschedule_flows"] = first.active_flows
    results["first_round_snapshot_ms"] = 1000 * first.snapshot_s
    results["first_round_decide_ms"] = 1000 * first.decide_s
    results["first_round_enforce_ms"] = 1000 * first.enforce_s
    results["first_round_pushed"] = first.installs + first.updates + first.removes
    results["later_round_snapshot_ms_median"] = 1000 * statistics.median(r.snapshot_s for r in later)
    results["later_round_decide_ms_median"] = 1000 * statistics.median(r.decide_s for r in later)
    results["later_round_enforce_ms_median"] = 1000 * statistics.median(r.enforce_s for r in later)
    pushed = [r.installs + r.updates + r.removes for r in later]
    results["later_round_pushed_median"] = statistics.median(pushed)
    if args.json:
        print(json.dumps(results, indent=2, sort_keys=True))
    else:
        for key, value in results.items():
            print(f"{key:34s} {value:10.1f}" if isinstance(value, float) else f"{key:34s} {value:10d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
