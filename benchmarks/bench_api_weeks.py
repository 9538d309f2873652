"""A controller that runs for weeks: its reads, a job's lifecycle, memory, store and restart as finished
jobs accumulate (numbers go to docs/results.md, "A controller that runs for weeks").

Grows one registry (SQLite store in a temporary folder, the default retention of
``controller.retention``) to ``--jobs`` finished jobs, each the probe of issue 34: one EchelonFlow of 4
declared flows on a k=4 fat-tree, every flow started on its own 5-tuple and finished: 10 API calls.
The calls go through the API's WSGI application in this process (routing, validation, handlers, the
scheduling rounds they trigger, the store's commits, JSON encoding), without the HTTP transport: the
fastest honest path to 100,000 jobs in minutes.  The service's clock is simulated: each job advances it by
``--job-gap-s`` (default 12 s, so 100,000 jobs span about two weeks and both retentions act).

Every ``--every`` jobs it records (the soak series): RSS, open files, store size (with its WAL), jobs
in memory, each read's median of 5 (``GET /v1/jobs``, ``/v1/flows``, ``/v1/echelons``,
``/v1/echelons?recent_s=60``, ``/v1/health``, first page at the default limit and at the largest), and the
mean lifecycle of the last ``--window`` jobs.  At the end:

* a job's lifecycle on the grown controller against a fresh one's first jobs, in alternating windows
  (the shared machine's load drifts over a long run, so the series' first and last windows alone do not
  compare);
* RSS against the empty controller (started: its first round done, the scheduler's kernels loaded) and
  against the warm one (after the first ``--window`` jobs);
* a restart on the grown store (``open_registry`` plus the service's first round, in this process);
* with ``--stall-s S`` (default 3), the decision delay while reads are polled.  The registry is then
  served over real HTTP (``controller.api_server``: eventlet hub in a thread) with a green thread that
  asks for a scheduling round every 20 ms and records how late it woke: first alone, then while another
  process only burns a core (the shared machine's part of the delay), then while a separate client
  process polls the largest pages (200 jobs, 200 flows, 50 EchelonFlows, 50 recent ones) in a loop; and
  each stretch a request held the hub (the WSGI call, JSON encoding included, cut where the page gave the
  hub a turn: ``controller.encoded``).  Each phase also says where its late rounds' delay went
  (``causes``: ``benchmarks/hub_causes.py``): the hub thread waiting for a core, garbage collections, or
  green threads holding the hub.

With ``--stalls-only`` it grows the registry and measures the decision delay only (no series, no
fresh-controller comparison, no restart): how the stall benchmark compares two versions of the code in
one session (copy this file and ``hub_causes.py`` into the other checkout's ``benchmarks/`` and run both
in turns).  Its stall phases can be chosen (``--phases``; ``loaded`` is the polling client among two
processes burning the cores) and repeated with the hub's thread placed otherwise (``--placements``: on
core 0 with the load on core 1, at nice -10, real-time SCHED_RR; needs root); ``--unsettled`` leaves the
start-up heap in full collections, as the controller did before ``controller.heap``; after the phases it
times three full collections (``full_collections_cpu_ms``).

With ``--scheduler NAME`` that policy is selected first, and every record counts the entries it keeps
(``scheduler_entries``: a learning policy's memory of the jobs it saw); ``--no-stalls`` stops after the
series.  With ``--one-job`` every lifecycle is an iteration of one job that stays live throughout (its
EchelonFlows ``i<k>.e``), what a training job that runs for weeks does.

Usage: ``.venv/bin/python benchmarks/bench_api_weeks.py [--jobs 100000] [--every 10000] [--json PATH]``,
``.venv/bin/python benchmarks/bench_api_weeks.py --stalls-only --jobs 2000 [--stall-s 3] [--json PATH]``,
``... --stalls-only --jobs 2000 --stall-s 5 --placements shared,nice,rt``
``--phases alone,cpu_busy,polled,loaded [--unsettled]``.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# The API server is imported before the controller starts and settles its heap, as the app imports it.
from benchmarks.hub_causes import Recorder, attribute, run_queue_wait_s  # noqa: E402
from controller import validation  # noqa: E402
from controller.api import Api  # noqa: E402
from controller.api_server import ApiServer, run_in_thread  # noqa: E402
from controller.config import ControllerConfig  # noqa: E402
from controller.service import SchedulingService  # noqa: E402
from controller.store import open_registry  # noqa: E402
from echelonflow.topology import fattree  # noqa: E402

#: The hook a page calls to give the hub a turn (absent from versions that built a page in one go).
COOPERATE_KEY = getattr(validation, "COOPERATE_KEY", None)
try:  # how the controller keeps its start-up heap out of full collections (absent from earlier versions)
    from controller.heap import settle
except ImportError:
    settle = None
RESULT_PATH = os.path.join(ROOT, "benchmarks", "results", "api_weeks.json")
TOKEN = "bench-token"
READS = {"jobs": "/v1/jobs", "flows": "/v1/flows", "echelons": "/v1/echelons",
         "echelons_recent_60": "/v1/echelons?recent_s=60", "health": "/v1/health",
         "jobs_200": "/v1/jobs?limit=200", "flows_200": "/v1/flows?limit=200",
         "echelons_recent_60_50": "/v1/echelons?recent_s=60&limit=50"}
#: A process that only burns a core for argv[1] seconds.
BURN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end: pass"
POLLED = ["/v1/jobs?limit=200", "/v1/flows?limit=200", "/v1/echelons?limit=50",
          "/v1/echelons?recent_s=60&limit=50"]


class Controller:
    """Registry + service + API on a simulated clock, called as WSGI."""

    def __init__(self, store_path: str, scheduler: str | None = None, settled: bool = True) -> None:
        self.now_s = 1.0e9
        self.topology = fattree(10e6, k=4)
        self.registry = open_registry(self.topology, store_path)
        self.service = SchedulingService(self.registry, None, ControllerConfig(interval_s=3600.0),
                                         now=lambda: self.now_s)
        self.api = Api(self.service, TOKEN)
        if scheduler is not None:
            self.service.set_scheduler(scheduler)
        self.service.start()  # as the controller does when it starts (the scheduler's kernels load here)
        if settled and settle is not None:
            settle()  # and then keeps its start-up heap out of full collections

    def call(self, method: str, path: str, body: Any = None) -> Any:
        raw = b"" if body is None else json.dumps(body).encode()
        path, _, query = path.partition("?")
        environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
                   "wsgi.input": io.BytesIO(raw), "CONTENT_LENGTH": str(len(raw)),
                   "CONTENT_TYPE": "application/json", "HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
        status: list[str] = []
        out = b"".join(self.api(environ, lambda s, _h: status.append(s)))
        if not status[0].startswith("2"):
            raise RuntimeError(f"{method} {path}: {status[0]} {out[:200]!r}")
        return out

    def lifecycle(self, index: int, gap_s: float, one_job: bool = False) -> None:
        """Job ``job{index}``'s one EchelonFlow, or with ``one_job`` iteration ``index`` of the job
        ``long`` that stays live throughout (an EchelonFlow ``i{index}.e`` of flows ``i{index}.f*``)."""
        self.now_s += gap_s
        job, prefix = (f"job{index}", "") if not one_job else ("long", f"i{index}.")
        hosts = [(f"h{1 + (index + i) % 8}", f"h{9 + (index + 3 * i) % 8}") for i in range(4)]
        if not one_job:
            self.call("POST", "/v1/jobs", {"job_id": job})
        elif index == 0:  # an EchelonFlow whose flow never starts keeps the job live
            self.call("POST", "/v1/jobs", {"job_id": job})
            self.call("POST", f"/v1/jobs/{job}/echelons", {"echelon_id": "keep", "flows": [
                {"flow_id": "keep", "src": "h1", "dst": "h16", "size_bytes": 10**6}]})
        self.call("POST", f"/v1/jobs/{job}/echelons", {"echelon_id": f"{prefix}e", "flows": [
            {"flow_id": f"{prefix}f{i}", "src": src, "dst": dst, "size_bytes": 10**6}
            for i, (src, dst) in enumerate(hosts)]})
        for i in range(4):
            self.call("POST", f"/v1/jobs/{job}/flows/{prefix}f{i}/start", {"src_port": 40000 + i,
                                                                           "dst_port": 5201})
        self.now_s += 0.5
        for i in range(4):
            self.call("POST", f"/v1/jobs/{job}/flows/{prefix}f{i}/finish", {})


def state_entries(obj: Any, depth: int = 2) -> int:
    """Entries the scheduler keeps (its dicts, lists and sets, and those of the policies it holds): what
    grows if a learning policy remembers every job it saw."""
    total = 0
    for value in vars(obj).values():
        if isinstance(value, (dict, list, set)):
            total += len(value)
        elif depth and type(value).__module__.startswith("echelonflow.schedulers") and vars(value):
            total += state_entries(value, depth - 1)
    return total


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def store_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def median_ms(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return 1000 * statistics.median(times)


def record(ctl: Controller, store: str, jobs: int, lifecycle_ms: float | None) -> dict[str, Any]:
    reads = {name: median_ms(lambda p=path: ctl.call("GET", p)) for name, path in READS.items()}
    return {"jobs": jobs, "simulated_days": (ctl.now_s - 1.0e9) / 86400, "rss_mib": rss_mib(),
            "open_files": len(os.listdir("/proc/self/fd")), "store_bytes": store_bytes(store),
            "jobs_in_memory": len(ctl.registry.jobs), "echelons_in_memory": len(ctl.registry.echelons),
            "flows_in_memory": len(ctl.registry.flows),
            "scheduler": ctl.service.scheduler_name,
            "scheduler_entries": state_entries(ctl.service.scheduler),
            "lifecycle_ms": lifecycle_ms, "read_ms": reads}


def lifecycle_against_fresh(ctl: Controller, workdir: str, done: int, rounds: int = 5,
                            jobs: int = 200) -> dict[str, Any]:
    """A job's lifecycle on the grown controller against a fresh one's first jobs, timed in alternating
    windows of ``jobs`` jobs (``rounds`` each), so the machine's load, which drifts over a long run on a
    shared machine, weighs on both alike."""
    fresh = Controller(os.path.join(workdir, "fresh.sqlite"))
    grown_ms, fresh_ms = [], []
    for r in range(rounds):
        for controller, first, out in ((fresh, r * jobs, fresh_ms), (ctl, done + r * jobs, grown_ms)):
            began = time.perf_counter()
            for index in range(first, first + jobs):
                controller.lifecycle(index, 12.0)
            out.append(1000 * (time.perf_counter() - began) / jobs)
    fresh.registry.store.close()
    return {"fresh_ms": fresh_ms, "grown_ms": grown_ms,
            "ratio": statistics.median(grown_ms) / statistics.median(fresh_ms)}


# ------------------------------------------------------------------------------------------ stalls
def reader(socket_path: str, seconds: float) -> int:
    """The polling client (a separate process): the largest reads in a loop for ``seconds``."""
    from controller.client import EchelonClient

    count = 0
    with EchelonClient(socket_path=socket_path, token=TOKEN) as client:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            client.request("GET", POLLED[count % len(POLLED)][3:])
            count += 1
    print(count)
    return 0


#: Where the stall phases run (``--placements``): the server's hub thread on any core or on core 0 only,
#: at the default priority, a raised one (nice -10) or real-time (SCHED_RR 1); and the load processes
#: (the polling client, the burners) on any core or on core 1 only.
PLACEMENTS = {"shared": (None, 0, False, None), "pinned": ({0}, 0, False, {1}),
              "nice": (None, -10, False, None), "pinned-nice": ({0}, -10, False, {1}),
              "rt": (None, 0, True, None)}
#: Processes burning a core beside the polling client in the "loaded" phase: with the client and the
#: server, more runnable threads than the 2 cores, as on a shared machine.
LOADED_BURNERS = 2


def place(tid: int, placement: str) -> Any:
    """Put the hub's thread where ``placement`` says; returns the load processes' preexec_fn."""
    cores, nice, realtime, load_cores = PLACEMENTS[placement]
    os.sched_setaffinity(tid, cores or range(os.cpu_count() or 1))
    if realtime:
        os.sched_setscheduler(tid, os.SCHED_RR, os.sched_param(1))
    else:
        os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    return (lambda: os.sched_setaffinity(0, load_cores)) if load_cores else None


def load(phase: str, socket_path: str, seconds: float, preexec: Any) -> int:
    """What runs beside the server for ``seconds``: nothing, a process burning a core (reading
    nothing: the machine's part), the polling client, or the client among :data:`LOADED_BURNERS`
    burning processes; returns the reads it made."""
    burners = {"alone": 0, "cpu_busy": 1, "polled": 0, "loaded": LOADED_BURNERS}[phase]
    procs = [subprocess.Popen([sys.executable, "-c", BURN, str(seconds)], preexec_fn=preexec)
             for _ in range(burners)]
    reads = 0
    if phase in ("polled", "loaded"):
        proc = subprocess.run([sys.executable, __file__, "--reader", socket_path, "--stall-s", str(seconds)],
                              capture_output=True, text=True, check=True, preexec_fn=preexec)
        reads = int(proc.stdout.strip() or 0)
    elif not procs:
        time.sleep(seconds)
    for proc in procs:
        proc.wait()
    return reads


def delay_summary(rounds: list[tuple[float, ...]], period_s: float, held: list[float],
                  held_cpu: list[float]) -> dict[str, Any]:
    got = sorted(woke - asked - period_s for asked, woke, *_ in rounds)
    return {"rounds": len(got), "delay_p50_ms": 1000 * got[len(got) // 2],
            "delay_p99_ms": 1000 * got[min(len(got) - 1, int(0.99 * len(got)))],
            "delay_max_ms": 1000 * got[-1],
            "read_held_p50_ms": 1000 * statistics.median(held) if held else None,
            "read_held_max_ms": 1000 * max(held) if held else None,
            "read_held_cpu_p50_ms": 1000 * statistics.median(held_cpu) if held else None,
            "read_held_cpu_max_ms": 1000 * max(held_cpu) if held else None}


def stalls(ctl: Controller, workdir: str, seconds: float, placements: tuple[str, ...] = ("shared",),
           phases: tuple[str, ...] = ("alone", "cpu_busy", "polled")) -> dict[str, Any]:
    import eventlet  # imported already, by controller.api_server

    rounds: list[tuple[float, float, float, float]] = []  # asked, woke, run-queue wait then and then
    stop = [False]
    period_s = 0.02
    recorder = Recorder()

    def probe() -> None:
        recorder.install()
        while not stop[0]:
            asked, waited = time.perf_counter(), run_queue_wait_s(recorder.tid)
            eventlet.sleep(period_s)
            rounds.append((asked, time.perf_counter(), waited, run_queue_wait_s(recorder.tid)))
            ctl.service.reschedule("probe")

    held: list[float] = []  # wall time of each stretch (the OS may take the core meanwhile)
    held_cpu: list[float] = []  # and the CPU time this thread spent in it (the work itself)

    def timed_api(environ: dict[str, Any], start_response: Any) -> Any:
        """The API, recording each stretch it held the hub: from the call (or a turn it gave the hub,
        ``COOPERATE_KEY`` where the server offers one) to the next turn or the answer's bytes."""
        began = [time.perf_counter(), time.thread_time()]

        def stretch() -> None:
            held.append(time.perf_counter() - began[0])
            held_cpu.append(time.thread_time() - began[1])

        turn = environ.get(COOPERATE_KEY) if COOPERATE_KEY else None
        if turn is not None:
            def timed_turn() -> None:
                stretch()
                turn()
                began[:] = [time.perf_counter(), time.thread_time()]
            environ[COOPERATE_KEY] = timed_turn
        try:
            return ctl.api(environ, start_response)
        finally:
            stretch()

    server = ApiServer(timed_api, port=0, socket_path=os.path.join(workdir, "api.sock"))
    thread = run_in_thread(server, tasks=(probe,))
    while not recorder.tid:
        time.sleep(0.01)
    out: dict[str, Any] = {}
    try:
        for placement in placements:
            load_preexec = place(recorder.tid, placement)
            for phase in phases:
                time.sleep(0.1)  # the placement in force, the last phase's stragglers gone
                for series in (rounds, held, held_cpu):
                    series.clear()
                recorder.clear()
                reads = load(phase, server.socket_path, seconds, load_preexec)
                key = phase if placement == "shared" else f"{placement}/{phase}"
                out[key] = {"reads": reads, **delay_summary(rounds, period_s, held, held_cpu),
                            "causes": attribute(list(rounds), period_s, recorder)}
        place(recorder.tid, "shared")
    finally:
        stop[0] = True
        thread.stop()
    return out


# ------------------------------------------------------------------------------------------ main
def stalls_only(ctl: Controller, workdir: str, args: argparse.Namespace) -> int:
    for index in range(args.jobs):
        ctl.lifecycle(index, args.job_gap_s)
    stall = stalls(ctl, workdir, args.stall_s, tuple(args.placements.split(",")),
                   tuple(args.phases.split(",")))
    full_collections_cpu_ms = []  # after the phases, so as not to change when one comes in them
    for _ in range(3):
        began = time.thread_time()
        gc.collect()
        full_collections_cpu_ms.append(1000 * (time.thread_time() - began))
    document = {"benchmark": "bench_api_weeks --stalls-only", "root": ROOT, "jobs": args.jobs,
                "jobs_in_memory": len(ctl.registry.jobs),
                "placements": args.placements, "phases": args.phases, "settled": not args.unsettled,
                "load_average_end": os.getloadavg(), "full_collections_cpu_ms": full_collections_cpu_ms,
                "objects_tracked": len(gc.get_objects()),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "decision_delay": stall}
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump(document, fh, indent=1)
    print(json.dumps(document))
    ctl.registry.store.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000, help="jobs between two records")
    parser.add_argument("--window", type=int, default=1000, help="jobs whose lifecycle is timed per record")
    parser.add_argument("--job-gap-s", type=float, default=12.0, help="simulated seconds per job")
    parser.add_argument("--stall-s", type=float, default=3.0)
    parser.add_argument("--stalls-only", action="store_true", help="grow, then measure the decision delay")
    parser.add_argument("--placements", default="shared",
                        help=f"comma-separated stall placements, of {', '.join(PLACEMENTS)} (--stalls-only)")
    parser.add_argument("--phases", default="alone,cpu_busy,polled",
                        help="comma-separated stall phases: alone, cpu_busy, polled, loaded (--stalls-only)")
    parser.add_argument("--scheduler", default=None, help="select this policy first")
    parser.add_argument("--unsettled", action="store_true",
                        help="leave the start-up heap in full collections (no controller.heap.settle)")
    parser.add_argument("--no-stalls", action="store_true", help="skip the fresh comparison, stalls, restart")
    parser.add_argument("--one-job", action="store_true", help="every lifecycle an iteration of one live job")
    parser.add_argument("--reader", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=RESULT_PATH)
    args = parser.parse_args()
    if args.reader:
        return reader(args.reader, args.stall_s)
    workdir = tempfile.mkdtemp(prefix="echelon-bench-weeks-")
    store = os.path.join(workdir, "registry.sqlite")
    ctl = Controller(store, args.scheduler, settled=not args.unsettled)
    if args.stalls_only:
        return stalls_only(ctl, workdir, args)
    series = [record(ctl, store, 0, None)]
    empty_rss = series[0]["rss_mib"]
    began = time.perf_counter()
    for index in range(args.jobs):
        if index == 0 or (index + args.window) % args.every == 0:  # a timed window of jobs begins
            window_start = time.perf_counter()
        ctl.lifecycle(index, args.job_gap_s, args.one_job)
        done = index + 1
        if done == args.window or done % args.every == 0:
            lifecycle_ms = 1000 * (time.perf_counter() - window_start) / args.window
            series.append(record(ctl, store, done, lifecycle_ms))
            print(json.dumps(series[-1]), file=sys.stderr, flush=True)
    grow_s = time.perf_counter() - began
    if args.no_stalls:
        return write(args, {"jobs": args.jobs, "grow_s": grow_s, "scheduler": ctl.service.scheduler_name,
                            "rss_empty_mib": empty_rss, "rss_end_mib": series[-1]["rss_mib"],
                            "scheduler_entries_end": series[-1]["scheduler_entries"]}, series)
    against_fresh = lifecycle_against_fresh(ctl, workdir, args.jobs)
    stall = stalls(ctl, workdir, args.stall_s)
    ctl.registry.store.close()
    started = time.perf_counter()
    restarted = open_registry(ctl.topology, store)
    SchedulingService(restarted, None, ControllerConfig(interval_s=3600.0)).start()
    restart_s = time.perf_counter() - started
    last, first = series[-1], series[1]
    summary = {
        "jobs": args.jobs, "grow_s": grow_s, "simulated_days": last["simulated_days"],
        "read_ms_at_end": last["read_ms"], "lifecycle_first_ms": first["lifecycle_ms"],
        "lifecycle_last_ms": last["lifecycle_ms"],
        "lifecycle_ratio": last["lifecycle_ms"] / first["lifecycle_ms"],
        "lifecycle_against_fresh": against_fresh,
        "rss_empty_mib": empty_rss, "rss_warm_mib": first["rss_mib"], "rss_end_mib": last["rss_mib"],
        "rss_growth_from_empty_mib": last["rss_mib"] - empty_rss,
        "rss_growth_from_warm_mib": last["rss_mib"] - first["rss_mib"],
        "store_mib_end": last["store_bytes"] / 2**20, "restart_s": restart_s,
        "restart_jobs_loaded": len(restarted.jobs), "decision_delay": stall,
    }
    return write(args, summary, series)


def write(args: argparse.Namespace, summary: dict[str, Any], series: list[dict[str, Any]]) -> int:
    document = {"benchmark": "bench_api_weeks", "command": " ".join(["benchmarks/bench_api_weeks.py",
                                                                      *sys.argv[1:]]),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
                "calls": "in-process WSGI (the API's handlers, no HTTP transport); stalls over HTTP",
                "summary": summary, "series": series}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump(document, fh, indent=1)
        fh.write("\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
