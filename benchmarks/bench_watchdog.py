"""Time one pass of the fabric's tc filter watchdog (topologies/qos.py FilterWatchdog) on real fat-trees.

Run as root from the repository root (on a shared machine under the exclusive CPU lock):
    .venv/bin/python benchmarks/bench_watchdog.py [--ks 4 8] [--passes 5] [--strace]
Per k: starts ``Fabric(fattree(10 Mbit/s, k))`` without a controller, stops its watchdog thread (so
nothing else runs tc), then times ``passes`` calls each of ``check_once()`` and ``missing()`` on an
intact fabric; where a pass goes (the tc run of its query, the qdisc dump alone, parsing the answer);
and the text query the watchdog falls back to on a tc whose JSON does not parse (``qdisc show dev X``
and ``filter show dev X parent 1:`` per port, one ``tc -batch``; tc alone). Wall time and CPU time (the
tc child's user+sys plus this process), medians. ``--strace`` also counts the netlink dump requests of
one pass of each query and the bytes the kernel answered with.  Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from echelonflow.topology import fattree  # noqa: E402
from topologies import qos  # noqa: E402
from topologies.fabric import Fabric  # noqa: E402


def cpu_s() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(fn: Callable[[], object], passes: int) -> dict:
    wall, cpu = [], []
    for _ in range(passes):
        wall0, cpu0 = time.perf_counter(), cpu_s()
        fn()
        wall.append(time.perf_counter() - wall0)
        cpu.append(cpu_s() - cpu0)
    return {"wall_ms": round(statistics.median(wall) * 1e3, 1),
            "cpu_ms": round(statistics.median(cpu) * 1e3, 1)}


def netlink_counts(lines: list[str], json_output: bool) -> dict:
    """Dump requests by message type and bytes received for one ``tc -batch`` of ``lines`` (strace).

    Two traced runs: decoding the requests needs strace's netlink decoder, which on the answers of
    the old query (75 MB at k=8) would dominate; the second run prints no payloads and sums sizes.
    """
    dumps: dict[str, int] = {}
    received = 0
    with tempfile.TemporaryDirectory() as tmp:
        batch, trace = os.path.join(tmp, "batch"), os.path.join(tmp, "trace")
        with open(batch, "w") as f:
            f.write("\n".join(lines) + "\n")
        tc = ["tc", *(["-json"] if json_output else []), "-force", "-batch", batch]
        for calls, size in (("trace=sendmsg,sendto", []), ("trace=recvmsg", ["-s", "0"])):
            subprocess.run(["strace", "-o", trace, "-e", calls, *size, *tc], capture_output=True, check=True,
                           timeout=300)
            with open(trace) as f:
                for line in f:
                    if line.startswith(("sendmsg", "sendto")) and "NLM_F_DUMP" in line:
                        kind = re.search(r"nlmsg_type=(RTM_\w+)", line)
                        key = kind.group(1) if kind else "?"
                        dumps[key] = dumps.get(key, 0) + 1
                    elif line.startswith("recvmsg") and "MSG_PEEK" not in line:
                        got = re.search(r"= (\d+)$", line.strip())
                        received += int(got.group(1)) if got else 0
    return {"dump_requests": dumps, "received_bytes": received}


def bench(k: int, passes: int, strace: bool) -> dict:
    with Fabric(fattree(10e6, k=k), controller_port=None) as fab:
        wd = fab.watchdog
        assert wd is not None
        wd.stop()
        assert wd.missing() == [], "the fabric's filters are not all in place"
        query, legacy = qos.status_query(wd.devs), qos.legacy_status_query(wd.devs)
        answer = qos.run_tc_batch(query, json_output=True).stdout
        out = {"k": k, "switch_ports": len(wd.devs),
               "check_once": timed(wd.check_once, passes),
               "missing": timed(wd.missing, passes),
               "pass_tc_batch": timed(lambda: qos.run_tc_batch(query, json_output=True), passes),
               "pass_qdisc_dump_only": timed(lambda: qos.run_tc_batch(query[:1], json_output=True), passes),
               "pass_parse": timed(lambda: qos.parse_status(answer, wd.devs), passes),
               "legacy_tc_batch": timed(lambda: qos.run_tc_batch(legacy), passes)}
        assert wd.reapplied == 0 and not wd.legacy, "repairs or the text fall-back: the timings include them"
        if strace:
            out["netlink_per_pass"] = {"now": netlink_counts(query, True),
                                       "legacy": netlink_counts(legacy, False)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ks", type=int, nargs="*", default=[4, 8])
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--strace", action="store_true",
                        help="count the netlink dumps of one pass (needs strace)")
    args = parser.parse_args()
    if args.passes < 1 or any(k < 2 or k % 2 for k in args.ks):
        parser.error("--passes must be >= 1 and every k an even number >= 2")
    print(json.dumps({"passes": args.passes, "runs": [bench(k, args.passes, args.strace) for k in args.ks]},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
