"""Our `sincronia` and `coflow` against the Sincronia authors' offline simulator on FB2010 prefixes.

Sincronia's simulator (github.com/sincronia-coflow/simulator, ``offlinesim/``; C++, no solver) is built
and run where it is, as a peer, never copied here: give its binary with ``--offlinesim PATH``.  It
takes every coflow at time 0 on a big switch of unit-rate ports, orders them once (``PD``: BSSI, or
``SEBF``) and serves the order with ``GREEDY`` rates (each flow in turn takes all its two ports have
left; new rates at every flow finish) or ``MADD`` (Varys's rates with back-fill; new rates only when a
MADD-served coflow completes).  Pairs compared (docs/baselines.md, "Matching Sincronia's simulator"):

* ``sincronia`` vs ``PD GREEDY``, under our exact rule (decisions at every flow start and finish, as
  its greedy loop re-decides at every flow finish);
* ``coflow`` (and ``coflow-static``, whose SEBF keys stay those of admission as theirs do) vs ``SEBF
  MADD``, under our coflow rule (with every arrival at 0, decisions at coflow completions; its MADD
  loop re-decides when a MADD-served coflow completes, ours also when a skipped one does).

``--rescheduling RULE`` runs ours under another rule instead, to show what an unfaithful rule costs.

The instance is the first N coflows of FB2010 with every arrival at 0, each reducer's bytes split evenly
over the coflow's mappers as CoflowSim does (``importers/coflow_benchmark.py``), flows between two
distinct ports only, every flow rounded to whole KiB (their reader takes integer sizes; at least 1) and
both sides given those same sizes.  Their time unit is one size unit at a port's rate: 1 KiB at our
2^30 bit/s, 2^-17 s.  Our big switch has idealised links (payload only, ``mtu_bytes=None``), the fluid
model theirs is.  Per pair it prints both average CCTs, their ratio and the Spearman rank correlation
of the per-coflow CCTs.

    .venv/bin/python benchmarks/sincronia_compare.py --offlinesim PATH [--scheduler NAME]...
        [--max-coflows N] [--rescheduling RULE] [--cache DIR] [--out DIR]

Without ``--offlinesim`` it says it skipped and exits 0.  Their runs are cached under ``--cache``
(default ``~/.cache/echelonflow/offlinesim``), keyed by ordering, rates, the input and the binary; ours
run in this process.  The numbers go to
``DIR/results.json`` and ``DIR/results.md`` (default ``benchmarks/results/sincronia``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.coflowsim_compare import spearman  # noqa: E402
from echelonflow.data_files import data_path  # noqa: E402
from echelonflow.errors import UserError  # noqa: E402
from echelonflow.importers.coflow_benchmark import ECHELON_ID, PORT_RATE_BPS, read_coflow_benchmark  # noqa: E402
from echelonflow.model import FlowTask, Job  # noqa: E402
from echelonflow.schedulers import get_scheduler  # noqa: E402
from echelonflow.topology import Topology, build  # noqa: E402
from simulator.engine import RESCHEDULING, simulate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TRACE = "coflow-benchmark/FB2010-1Hr-150-0.txt"
BYTES_PER_UNIT = 1024
#: their time unit in seconds: one size unit (1 KiB) at 2^30 bit/s
SECONDS_PER_UNIT = BYTES_PER_UNIT * 8 / PORT_RATE_BPS
#: our scheduler -> (their ordering, their rates, our faithful rescheduling rule)
PAIRS = {"sincronia": ("PD", "GREEDY", "every-flow"), "coflow": ("SEBF", "MADD", "coflow"),
         "coflow-static": ("SEBF", "MADD", "coflow")}


def instance(first: int | None) -> tuple[Topology, list[Job], int]:
    """The first ``first`` FB2010 coflows that cross the switch, all arriving at 0, sizes in whole KiB;
    the big switch (idealised links) and its port count."""
    jobs, summary = read_coflow_benchmark(data_path(TRACE))
    out = []
    for job in jobs[:first] if first else jobs:
        if not job.flows:
            continue
        kib = Job(job.job_id, arrival_s=0.0)
        kib.echelon_kinds[ECHELON_ID] = "coflow"
        for flow in job.flows:
            units = max(1, round(flow.size_bytes / BYTES_PER_UNIT))
            kib.add(FlowTask(flow.task_id, flow.src, flow.dst, units * BYTES_PER_UNIT, (), ECHELON_ID))
        out.append(kib)
    topology = build("bigswitch", PORT_RATE_BPS, mtu_bytes=None, hosts=summary.ports)
    return topology, out, summary.ports


def port(host: str) -> int:
    """Host ``h{p+1}`` -> trace port p."""
    return int(host[1:]) - 1


def offlinesim_input(jobs: list[Job], ports: int) -> str:
    """Their trace format: ``<ports> <coflows>``, then per coflow ``<id> <arrival_ms> <#flows> <#senders>
    <#receivers>`` and ``<src> <dst> <size>`` per flow (size in units, arrival ignored by offlinesim)."""
    lines = [f"{ports} {len(jobs)}"]
    for job in jobs:
        flows = job.flows
        fields = [job.job_id, "0", str(len(flows)), str(len({f.src for f in flows})),
                  str(len({f.dst for f in flows}))]
        for f in flows:
            fields += [str(port(f.src)), str(port(f.dst)), str(f.size_bytes // BYTES_PER_UNIT)]
        lines.append(" ".join(fields))
    return "\n".join(lines) + "\n"


def parse_log(text: str) -> tuple[dict[str, float], list[str]]:
    """Coflow id -> CCT in seconds, and their order, from the output log (``<id> <oracle> <position>
    <start> <completion>`` per coflow, then the average)."""
    cct, order = {}, []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 5:
            cct[fields[0]] = float(fields[4]) * SECONDS_PER_UNIT
            order.append(fields[0])
    return cct, order


def run_offlinesim(binary: Path, ordering: str, rates: str, text: str, cache: Path) -> dict:
    """Their per-coflow CCTs for one ordering and rate scheme (from the cache when already run)."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    build_digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:12]
    cached = cache / f"{ordering}-{rates}-{digest}-{build_digest}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        trace, log = Path(tmp) / "trace.txt", Path(tmp) / "out.log"
        trace.write_text(text, encoding="ascii")
        started = time.perf_counter()
        child = subprocess.Popen([str(binary), str(trace), str(log), ordering, rates],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        run_s = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            raise UserError(f"offlinesim {ordering} {rates} failed with exit status "
                            f"{os.waitstatus_to_exitcode(status)}")
        cct, order = parse_log(log.read_text())
    record = {"ordering": ordering, "rates": rates, "input_sha256_12": digest, "run_s": run_s,
              "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024,
              "cct_s": cct, "order": order}
    cached.write_text(json.dumps(record, indent=1, sort_keys=True))
    return record


def run_ours(name: str, rule: str, topology: Topology, jobs: list[Job]) -> dict:
    """Our simulator's per-coflow CCTs."""
    started, cpu = time.perf_counter(), time.process_time()
    result = simulate(topology, jobs, get_scheduler(name), check_invariants=False, alone_runs=False,
                      rescheduling=rule)
    return {"run_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "cct_s": {j.job_id: float(result.jobs[j.job_id].completion_s) for j in jobs}}


def compare(ours: dict[str, float], theirs: dict[str, float]) -> dict:
    """Averages, their ratio and Spearman over the coflows both sides have."""
    ids = [j for j in ours if j in theirs]
    a, b = [ours[j] for j in ids], [theirs[j] for j in ids]
    out = {"coflows": len(ids), "ours_avg_s": sum(a) / len(a), "offlinesim_avg_s": sum(b) / len(b),
           "spearman": spearman(a, b)}
    out["ratio"] = out["ours_avg_s"] / out["offlinesim_avg_s"]
    return out


def table(records: dict) -> str:
    lines = ["| ours (rule) | offlinesim | ours avg s | offlinesim avg s | ratio | Spearman | "
             "ours run s / CPU s | offlinesim run s / CPU s | ours / offlinesim peak MiB | date |",
             "|" + "---|" * 10]
    for label, r in sorted(records.items()):
        c, ours, theirs = r["comparison"], r["ours"], r["offlinesim"]
        lines.append(f"| {label} | {theirs['ordering']} {theirs['rates']} | "
                     f"{c['ours_avg_s']:.3f} | {c['offlinesim_avg_s']:.3f} | {c['ratio']:.4f} | "
                     f"{c['spearman']:.4f} | {ours['run_s']:.0f} / {ours['cpu_s']:.1f} | "
                     f"{theirs['run_s']:.0f} / {theirs['cpu_s']:.1f} | "
                     f"{ours['peak_rss_mib']:.0f} / {theirs['peak_rss_mib']:.0f} | {r['date']} |")
    return "\n".join(lines)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile, nearest rank (as ``benchmarks/fb2010.py``'s 95th)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def varys_over_sincronia(records: dict) -> str:
    """Sincronia's paper's measure (its Fig. 6a): Varys's average and 99th-percentile CCT over
    Sincronia's, in each simulator, from the faithful ``sincronia`` and ``coflow`` runs."""
    sinc, varys = records.get("sincronia (every-flow)"), records.get("coflow (coflow)")
    if not sinc or not varys:
        return ""
    cells = []
    for side, label in (("offlinesim", "offlinesim (SEBF+MADD over BSSI+greedy)"),
                        ("ours", "ours (coflow over sincronia)")):
        a, b = list(varys[side]["cct_s"].values()), list(sinc[side]["cct_s"].values())
        cells.append(f"{label}: average {sum(a) / sum(b):.2f}x, 99th percentile "
                     f"{percentile(a, 99) / percentile(b, 99):.2f}x")
    return "Varys over Sincronia, " + "; ".join(cells) + " (the paper's Fig. 6a: 1.7x and 7.9x)."


def render(stored: dict) -> str:
    """results.md: every prefix recorded, with how to reproduce it."""
    sections = []
    for key, records in sorted(stored.items(), key=lambda item: int(item[0].split()[1])):
        sections.append(f"## FB2010, {key}, every arrival at 0\n\n{table(records)}\n\n"
                        f"{varys_over_sincronia(records)}".rstrip())
    faithful = ", ".join(f"{name}: {rule}" for name, (_, _, rule) in PAIRS.items())
    return ("# Against Sincronia's offlinesim\n\n`.venv/bin/python benchmarks/sincronia_compare.py "
            "--offlinesim PATH --max-coflows N [--scheduler NAME]... [--rescheduling RULE]` (PATH: "
            "`offlinesim/` of github.com/sincronia-coflow/simulator at 3cadcca, built with "
            "`make all CXXFLAGS=-O2`); one run per row, on a machine shared with other work (wall times are "
            "only indicative; CPU times, ours `time.process_time` of the run, theirs the child's user + "
            "system time, compare better).  Peak MiB: theirs the child's peak resident set; ours the "
            "process's peak so far (it holds the trace and ran the rows before).  Ratio: "
            "ours / offlinesim's average CCT.  A row whose rule is not its pair's faithful one "
            f"({faithful}) shows what an unfaithful rule costs.\n\n" + "\n\n".join(sections) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--offlinesim", type=Path, help="the built offlinesim binary (skipped without it)")
    parser.add_argument("--scheduler", action="append",
                        help=f"ours, repeatable: {', '.join(PAIRS)} (default: sincronia and coflow)")
    parser.add_argument("--max-coflows", type=int, default=100, help="the first N coflows (default 100)")
    parser.add_argument("--rescheduling", choices=RESCHEDULING, default=None,
                        help="our rule for every pair instead of the one faithful to it")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "echelonflow" / "offlinesim",
                        help="folder for offlinesim's cached results (outside the repository)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sincronia",
                        help="folder for results.json and results.md")
    args = parser.parse_args(argv)
    if args.offlinesim is None:
        print("sincronia_compare: skipped: no --offlinesim given (build offlinesim/ of "
              "github.com/sincronia-coflow/simulator with 'make all' and pass its binary)", file=sys.stderr)
        return 0
    try:
        names = list(dict.fromkeys(args.scheduler or ["sincronia", "coflow"]))
        unknown = [n for n in names if n not in PAIRS]
        if unknown:
            raise UserError(f"no offlinesim counterpart for scheduler {unknown[0]!r}; "
                            f"choose from {', '.join(PAIRS)}")
        if args.max_coflows < 1:
            raise UserError(f"--max-coflows must be at least 1, got {args.max_coflows}")
        if not (args.offlinesim.is_file() and os.access(args.offlinesim, os.X_OK)):
            raise UserError(f"offlinesim binary {args.offlinesim} does not exist or is not executable")
    except UserError as exc:
        print(f"sincronia_compare: {exc}", file=sys.stderr)
        return 2
    topology, jobs, ports = instance(args.max_coflows)
    text = offlinesim_input(jobs, ports)
    key = f"first {args.max_coflows} coflows"
    print(f"{key}: {len(jobs)} cross the switch, {sum(len(j.flows) for j in jobs)} flows, all at 0",
          flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    for name in names:
        ordering, rates, faithful = PAIRS[name]
        rule = args.rescheduling or faithful
        theirs = run_offlinesim(args.offlinesim.resolve(), ordering, rates, text, args.cache)
        ours = run_ours(name, rule, topology, jobs)
        comparison = compare(ours["cct_s"], theirs["cct_s"])
        label = f"{name} ({rule})"
        stored = json.loads(results_path.read_text()) if results_path.exists() else {}
        records = stored.setdefault(key, {})
        records[label] = {"rescheduling": rule, "faithful": rule == faithful,
                          "date": date.today().isoformat(),
                          "command": " ".join(["benchmarks/sincronia_compare.py", *(argv or sys.argv[1:])]),
                          "comparison": comparison, "ours": ours,
                          "offlinesim": {k: theirs[k] for k in ("ordering", "rates", "run_s", "cpu_s",
                                                                "peak_rss_mib", "cct_s", "order")}}
        results_path.write_text(json.dumps(stored, indent=1, sort_keys=True))
        c = comparison
        print(f"{label} vs offlinesim {ordering} {rates}: average CCT {c['ours_avg_s']:.3f} vs "
              f"{c['offlinesim_avg_s']:.3f} s (ratio {c['ratio']:.4f}), Spearman {c['spearman']:.4f}; "
              f"ours {ours['run_s']:.0f} s, theirs {theirs['run_s']:.0f} s", flush=True)
    (args.out / "results.md").write_text(render(json.loads(results_path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
