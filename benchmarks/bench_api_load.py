"""The controller's API under hostile and heavy clients: slow connections held open, and 8 threads of load.

Runs the real controller app (``osken-manager controller/app.py`` through ``ControllerProcess``; no
switches are needed to serve the API) on a k=4 fat-tree registry with one job of 16 flows, then:

1. **slow clients**: opens ``--slow`` TCP connections (default 1,100) to the API port, each sending a
   request line and then one more header byte every 10 s, never finishing the request (what a
   slowloris client does); one the server closes is opened again.  While they are held, ``--probe``
   normal requests (``GET /v1/health``, each on a fresh connection, ``--probe-gap-s`` apart) go over TCP
   and over the Unix socket: their success count and p50/p99 latency (a probe not answered in 5 s
   fails; probing stops after 5 failures).  Also: how many slow connections the server closed, and
   how many it still holds at the end;
2. **load**: ``--threads`` threads (default 8), each with its own keep-alive client over TCP, for
   ``--seconds`` each: reads (``GET /v1/jobs/j/flows/fN``) and then writes (``POST /v1/jobs`` with new
   ids, persisted in the SQLite store): requests/s and p50/p99 latency of each.

Every number is the median over ``--runs`` runs (default 3), each on a fresh controller; the single
runs are in the JSON too.  Needs ``ulimit -n`` above the slow-connection count (raised here when the
hard limit allows).  Usage: ``.venv/bin/python benchmarks/bench_api_load.py [--runs 3] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import socket
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from controller.client import ApiClientError, EchelonClient  # noqa: E402
from controller.launcher import ControllerProcess, free_tcp_port, local_config  # noqa: E402
from echelonflow.topology import fattree  # noqa: E402

PROBE_TIMEOUT_S = 5.0  # a normal request not answered within this counts as failed
RESULT_PATH = os.path.join(ROOT, "benchmarks", "results", "api_load.json")


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def latency_summary(latencies_s: list[float], failures: int) -> dict[str, Any]:
    return {"ok": len(latencies_s), "failed": failures,
            "p50_ms": None if not latencies_s else 1000 * percentile(latencies_s, 0.50),
            "p99_ms": None if not latencies_s else 1000 * percentile(latencies_s, 0.99)}


# ------------------------------------------------------------------------------------------ slow clients
class SlowClients:
    """``count`` connections that start a request and add one header byte every ``trickle_s``; one the
    server closes is opened again (a persistent slowloris client).  Trickling and re-opening run in
    separate threads, so a connect that waits on a full server never delays the others' bytes."""

    def __init__(self, port: int, count: int, trickle_s: float = 10.0) -> None:
        self.port, self.count, self.trickle_s = port, count, trickle_s
        self.socks: list[socket.socket | None] = []
        self.refused = 0
        self.closed_by_server = 0
        self._serial = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._trickle, daemon=True),
                         threading.Thread(target=self._reopen, daemon=True)]

    def _open(self) -> socket.socket | None:
        sock = socket.socket()
        sock.settimeout(5.0)
        self._serial += 1
        try:
            sock.connect(("127.0.0.1", self.port))
            sock.sendall(f"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow-{self._serial}: ".encode())
            sock.setblocking(False)  # from now on: one byte at a time, and reads that never wait
        except OSError:
            self.refused += 1
            sock.close()
            return None
        return sock

    def __enter__(self) -> SlowClients:
        self._threads[0].start()  # trickling from the start: no connection waits longer than trickle_s
        for _ in range(self.count):
            sock = self._open()
            with self._lock:
                self.socks.append(sock)
        self._threads[1].start()
        return self

    def _trickle(self) -> None:
        while not self._stop.wait(self.trickle_s):
            with self._lock:
                socks = list(enumerate(self.socks))
            for index, sock in socks:
                if sock is None:
                    continue
                if _closed(sock):
                    self.closed_by_server += 1
                    sock.close()
                    with self._lock:
                        self.socks[index] = None
                else:
                    with contextlib.suppress(OSError):
                        sock.send(b"a")

    def _reopen(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                gone = [index for index, sock in enumerate(self.socks) if sock is None]
            for index in gone:
                if self._stop.is_set():
                    return
                sock = self._open()
                with self._lock:
                    self.socks[index] = sock

    def still_open(self) -> int:
        """Connections the server has not closed."""
        with self._lock:
            socks = [sock for sock in self.socks if sock is not None]
        return sum(1 for sock in socks if not _closed(sock))

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(30.0)
        for sock in self.socks:
            if sock is not None:
                sock.close()


def _closed(sock: socket.socket) -> bool:
    """Whether the server has closed (or answered) ``sock``: a read would not block."""
    try:
        sock.recv(1)  # EOF or the start of an answer
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def probe(make_client, requests: int, gap_s: float, give_up_after: int = 5) -> dict[str, Any]:
    """``requests`` health checks ``gap_s`` apart, each on a fresh connection (a new client each time);
    stops after ``give_up_after`` failures (a starved server would otherwise cost a client timeout each)."""
    latencies, failures = [], 0
    for _ in range(requests):
        time.sleep(gap_s)
        started = time.perf_counter()
        try:
            with make_client() as client:
                client.health()
            latencies.append(time.perf_counter() - started)
        except (ApiClientError, OSError):
            failures += 1
            if failures >= give_up_after:
                break
    return latency_summary(latencies, failures)


# ------------------------------------------------------------------------------------------ load
def load(make_client, threads: int, seconds: float, action: str) -> dict[str, Any]:
    """``threads`` keep-alive clients doing ``action`` (read or write) as fast as answers come."""
    latencies: list[list[float]] = [[] for _ in range(threads)]
    failures = [0] * threads
    start = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        with make_client() as client:
            start.wait()
            deadline = time.perf_counter() + seconds
            n = 0
            while time.perf_counter() < deadline:
                n += 1
                began = time.perf_counter()
                try:
                    if action == "read":
                        client.flow("j", f"f{n % 16}")
                    else:
                        client.register_job(f"w{index}-{n}-{time.monotonic_ns()}")
                    latencies[index].append(time.perf_counter() - began)
                except ApiClientError:
                    failures[index] += 1

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - began
    flat = [x for lat in latencies for x in lat]
    return {"requests_per_s": len(flat) / elapsed, **latency_summary(flat, sum(failures))}


# ------------------------------------------------------------------------------------------ one run
def one_run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="echelon-bench-api-")
    ctl = ControllerProcess(fattree(10e6, k=4), local_config(interval_s=0.5), ofp_port=free_tcp_port(),
                            workdir=workdir)
    ctl.start()
    try:
        def tcp_client() -> EchelonClient:
            return EchelonClient(url=f"http://127.0.0.1:{ctl.api_port}", token_file=ctl.token_file,
                                 timeout_s=PROBE_TIMEOUT_S)

        def unix_client() -> EchelonClient:
            return EchelonClient(socket_path=ctl.api_socket_path, token_file=ctl.token_file,
                                 timeout_s=PROBE_TIMEOUT_S)

        with unix_client() as client:
            client.register_job("j")
            client.register_echelon("j", "e", [{"flow_id": f"f{i}", "src": f"h{1 + i % 8}",
                                                 "dst": f"h{9 + i % 8}", "size_bytes": 10**6}
                                                for i in range(16)])
        out: dict[str, Any] = {}
        with SlowClients(ctl.api_port, args.slow) as slow:
            time.sleep(1.0)  # let the server take them all in
            out["slow"] = {"connections": args.slow, "refused": slow.refused,
                           "probe_tcp": probe(tcp_client, args.probe, args.probe_gap_s),
                           "probe_unix": probe(unix_client, args.probe, args.probe_gap_s),
                           "held_after_probes": slow.still_open(), "closed_by_server": slow.closed_by_server}
        out["load_read"] = load(tcp_client, args.threads, args.seconds, "read")
        out["load_write"] = load(tcp_client, args.threads, args.seconds, "write")
        with unix_client() as client:
            out["health_after"] = client.health()["status"]
        return out
    finally:
        ctl.stop()


def median_of(runs: list[dict[str, Any]], *keys: str) -> float | None:
    values = []
    for run in runs:
        value: Any = run
        for key in keys:
            value = value[key]
        if value is not None:
            values.append(float(value))
    return statistics.median(values) if values else None


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slow", type=int, default=1100, help="slow connections held open")
    parser.add_argument("--probe", type=int, default=100, help="normal requests while they are held")
    parser.add_argument("--probe-gap-s", type=float, default=0.15,
                        help="pause before each probe (the default spreads them past the 10 s deadline)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each load phase")
    parser.add_argument("--json", default=RESULT_PATH, help=f"where the results go (default {RESULT_PATH})")
    args = parser.parse_args()
    raise_fd_limit(args.slow + 1024)  # the controller inherits it
    runs = []
    for index in range(args.runs):
        runs.append(one_run(args))
        print(f"run {index + 1}/{args.runs}: {json.dumps(runs[-1])}", file=sys.stderr, flush=True)
    summary = {
        "slow_connections": args.slow,
        "slow_refused": median_of(runs, "slow", "refused"),
        "slow_held_after_probes": median_of(runs, "slow", "held_after_probes"),
        "slow_closed_by_server": median_of(runs, "slow", "closed_by_server"),
        "probe_tcp_ok": median_of(runs, "slow", "probe_tcp", "ok"),
        "probe_tcp_p50_ms": median_of(runs, "slow", "probe_tcp", "p50_ms"),
        "probe_tcp_p99_ms": median_of(runs, "slow", "probe_tcp", "p99_ms"),
        "probe_unix_ok": median_of(runs, "slow", "probe_unix", "ok"),
        "probe_unix_p50_ms": median_of(runs, "slow", "probe_unix", "p50_ms"),
        "probe_unix_p99_ms": median_of(runs, "slow", "probe_unix", "p99_ms"),
        "read_requests_per_s": median_of(runs, "load_read", "requests_per_s"),
        "read_p50_ms": median_of(runs, "load_read", "p50_ms"),
        "read_p99_ms": median_of(runs, "load_read", "p99_ms"),
        "read_failed": median_of(runs, "load_read", "failed"),
        "write_requests_per_s": median_of(runs, "load_write", "requests_per_s"),
        "write_p50_ms": median_of(runs, "load_write", "p50_ms"),
        "write_p99_ms": median_of(runs, "load_write", "p99_ms"),
        "write_failed": median_of(runs, "load_write", "failed"),
    }
    document = {"benchmark": "bench_api_load", "command": " ".join(["benchmarks/bench_api_load.py",
                                                                     *sys.argv[1:]]),
                "runs": args.runs, "probe_requests": args.probe, "threads": args.threads,
                "seconds_per_load_phase": args.seconds, "cpus": os.cpu_count(),
                "median": summary, "each_run": runs}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump(document, fh, indent=1)
        fh.write("\n")
    for key, value in summary.items():
        print(f"{key:26s} {value if value is None else round(value, 2)}")
    print(f"(median of {args.runs} runs; written to {args.json})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
