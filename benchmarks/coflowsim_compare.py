"""Our Varys-family baselines against the Varys authors' simulator CoflowSim on the FB2010 trace.

CoflowSim (github.com/coflow/coflowsim) is run where it is built, as a peer, never copied here: give
its folder with ``--coflowsim DIR`` (``javac`` output with ``coflowsim/CoflowSim.class``, or a Maven
build's ``target/classes`` or ``target/coflowsim-*.jar``).  Pairs compared (docs/baselines.md):

* ``coflow`` and ``coflow-static`` (SEBF keys fixed at admission, as CoflowSim keeps them) vs
  CoflowSim's SEBF (Varys), and ``fifo`` vs its FIFO, all under our simulator's coflow rescheduling
  rule (rates recomputed at flow starts and coflow completions, as CoflowSim does);
* ``port-fair`` vs its FAIR, under the exact rule (CoflowSim recomputes FAIR's shares every 8 ms step,
  so a finished flow's share goes to the others at once).

Per pair it prints each side's average CCT, their ratio, the Spearman rank correlation of the
per-coflow CCTs, and the ratio of average CCTs per Varys bin (``benchmarks/fb2010.py``), over the
coflows that cross our switch (523 of the 526; the other 3 only shuffle inside one port).

Both run CoflowSim's arrival model: our side reads the trace with ``benchmarks/fb2010.py
--coflowsim-arrivals`` (CoflowSim's second of 1,024 trace milliseconds, in which its ports move 2^30
bits as ours do in one of ours, and its 10.24-s admission epochs; ``importers/coflow_benchmark.py``),
and CoflowSim's CCTs (milliseconds) are divided by 1,024.  What still differs: our links carry framing
(0.7 % more time per byte), CoflowSim keeps the 0.7 % of bytes whose mapper and reducer share a port
(we leave them out), and CoflowSim moves bytes in 8-ms steps; docs/baselines.md has the effects.

    .venv/bin/python benchmarks/coflowsim_compare.py --coflowsim DIR [--scheduler NAME]...
        [--max-coflows N] [--cache DIR] [--out DIR]

Each CoflowSim run (19 minutes for the whole hour) is cached under ``--cache`` (default
``~/.cache/echelonflow/coflowsim``), keyed by policy, trace, prefix and the built classes; ours run one
per process through ``benchmarks/fb2010.py`` (so each has its own peak memory).  The numbers go to
``DIR/results.json`` and ``DIR/results.md`` (default ``benchmarks/results/coflowsim``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fb2010 import BINS, bin_of  # noqa: E402
from echelonflow.data_files import data_path  # noqa: E402
from echelonflow.errors import UserError  # noqa: E402
from echelonflow.scenario import load_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TRACE = "coflow-benchmark/FB2010-1Hr-150-0.txt"
#: our scheduler -> (CoflowSim's policy, our rescheduling rule)
PAIRS = {"coflow": ("SEBF", "coflow"), "coflow-static": ("SEBF", "coflow"), "fifo": ("FIFO", "coflow"),
         "port-fair": ("FAIR", "every-flow")}
#: CoflowSim's milliseconds per second of port time (its ``SIMULATION_SECOND_MILLIS``)
COFLOWSIM_MS_PER_S = 1024.0


def classpath(folder: Path) -> str:
    """Where CoflowSim's classes are under ``folder``; UserError when it is not built there."""
    if (folder / "coflowsim" / "CoflowSim.class").is_file():
        return str(folder)
    if (folder / "target" / "classes" / "coflowsim" / "CoflowSim.class").is_file():
        return str(folder / "target" / "classes")
    jars = sorted((folder / "target").glob("coflowsim-*.jar")) if (folder / "target").is_dir() else []
    if jars:
        return str(jars[-1])
    raise UserError(f"no built CoflowSim under {folder} (looked for coflowsim/CoflowSim.class, "
                    "target/classes/coflowsim/CoflowSim.class and target/coflowsim-*.jar)")


def build_digest(cp: str) -> str:
    """A digest of the built classes (a cached result is only reused for the same build)."""
    digest = hashlib.sha256()
    root = Path(cp)
    files = [root] if root.is_file() else sorted(root.rglob("*.class"))
    for path in files:
        digest.update(str(path.relative_to(root) if root.is_dir() else path.name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def prefix_trace(trace: Path, first: int | None, folder: Path) -> Path:
    """The trace itself, or its first ``first`` coflows written to a file in ``folder``."""
    if first is None:
        return trace
    lines = trace.read_text(encoding="ascii").splitlines()
    ports = lines[0].split()[0]
    out = folder / f"first{first}.txt"
    out.write_text("\n".join([f"{ports} {first}", *lines[1:1 + first]]) + "\n", encoding="ascii")
    return out


def parse_coflowsim(stdout: str) -> dict[str, float]:
    """Coflow id -> CCT in seconds from CoflowSim's per-job lines (``JOB-<id> start finish mappers
    reducers bytes max_bytes duration_ms ...``), durations converted with its 1,024 ms second."""
    cct = {}
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[0].startswith("JOB-"):
            cct[fields[0][len("JOB-"):]] = float(fields[7]) / COFLOWSIM_MS_PER_S
    return cct


def run_coflowsim(cp: str, policy: str, trace: Path, first: int | None, cache: Path) -> dict:
    """CoflowSim's per-coflow CCTs for ``policy`` (from the cache when this build already ran it)."""
    trace_digest = hashlib.sha256(trace.read_bytes()).hexdigest()[:12]
    key = f"{policy}-{trace_digest}-{first or 'all'}-{build_digest(cp)}.json"
    cached = cache / key
    if cached.is_file():
        return json.loads(cached.read_text())
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = prefix_trace(trace, first, Path(tmp))
        output = Path(tmp) / "stdout.txt"
        started = time.perf_counter()
        with output.open("w") as out:  # its progress lines (one per simulated second) go to stderr
            command = ["java", "-XX:ActiveProcessorCount=1", "-cp", cp, "coflowsim.CoflowSim", policy,
                       "COFLOW-BENCHMARK", str(path)]
            child = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL)
            _, status, usage = os.wait4(child.pid, 0)
        run_s = time.perf_counter() - started
        stdout = output.read_text()
    if os.waitstatus_to_exitcode(status) != 0:
        raise UserError(f"CoflowSim {policy} failed with exit status {os.waitstatus_to_exitcode(status)}")
    record = {"policy": policy, "trace_sha256_12": trace_digest, "first": first, "run_s": run_s,
              "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024,
              "cct_s": parse_coflowsim(stdout)}
    cached.write_text(json.dumps(record, indent=1, sort_keys=True))
    return record


def run_ours(name: str, rescheduling: str, first: int | None) -> dict:
    """Our simulator's run through ``benchmarks/fb2010.py`` in a process of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, str(ROOT / "benchmarks" / "fb2010.py"), "--scheduler", name,
                   "--rescheduling", rescheduling, "--coflowsim-arrivals", "--out", tmp]
        if first is not None:
            command += ["--max-coflows", str(first)]
        subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        stored = json.loads((Path(tmp) / "results.json").read_text())
    (record,) = next(iter(stored.values())).values()
    return record


def ranks(values: list[float]) -> list[float]:
    """Ranks 1..n, ties sharing their average rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation: Pearson's on the (tie-averaged) ranks."""
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else 1.0


def compare(ours: dict[str, float], theirs: dict[str, float], bins: dict[str, str]) -> dict:
    """Averages, ratio, Spearman and per-bin ratios over the coflows both sides have."""
    ids = [j for j in bins if j in ours and j in theirs]
    a, b = [ours[j] for j in ids], [theirs[j] for j in ids]
    out = {"coflows": len(ids), "ours_avg_s": statistics.fmean(a), "coflowsim_avg_s": statistics.fmean(b),
           "spearman": spearman(a, b), "bins": {}}
    out["ratio"] = out["ours_avg_s"] / out["coflowsim_avg_s"]
    for name in BINS:
        members = [j for j in ids if bins[j] == name]
        if members:
            mine = statistics.fmean(ours[j] for j in members)
            other = statistics.fmean(theirs[j] for j in members)
            out["bins"][name] = {"count": len(members), "ours_avg_s": mine, "coflowsim_avg_s": other,
                                 "ratio": mine / other}
    return out


def table(records: dict) -> str:
    header = ("| ours (rule) | CoflowSim | ours avg s | CoflowSim avg s | ratio | Spearman | "
              + " | ".join(f"{b} ratio (n)" for b in BINS)
              + " | ours CPU s / peak MiB | CoflowSim CPU s / peak MiB |")
    lines = [header, "|" + "---|" * (8 + len(BINS))]
    for name, r in records.items():
        c = r["comparison"]
        cells = [f"{c['bins'][b]['ratio']:.3f} ({c['bins'][b]['count']})" if b in c["bins"] else "-"
                 for b in BINS]
        lines.append(
            f"| {name} ({r['rescheduling']}) | {r['coflowsim_policy']} | {c['ours_avg_s']:.2f} | "
            f"{c['coflowsim_avg_s']:.2f} | {c['ratio']:.3f} | {c['spearman']:.4f} | " + " | ".join(cells)
            + f" | {r['ours']['cpu_s']:.0f} / {r['ours']['peak_rss_mib']:.0f} | "
            f"{r['coflowsim']['cpu_s']:.0f} / {r['coflowsim']['peak_rss_mib']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--coflowsim", type=Path, required=True, help="folder where CoflowSim is built")
    parser.add_argument("--scheduler", action="append",
                        help=f"ours, repeatable: {', '.join(PAIRS)} (default: all)")
    parser.add_argument("--max-coflows", type=int, default=None, help="only the first N coflows")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "echelonflow" / "coflowsim",
                        help="folder for CoflowSim's cached results (outside the repository)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "coflowsim",
                        help="folder for results.json and results.md")
    args = parser.parse_args(argv)
    try:
        names = list(dict.fromkeys(args.scheduler or PAIRS))
        unknown = [n for n in names if n not in PAIRS]
        if unknown:
            raise UserError(f"no CoflowSim counterpart for scheduler {unknown[0]!r}; "
                            f"choose from {', '.join(PAIRS)}")
        if args.max_coflows is not None and args.max_coflows < 1:
            raise UserError(f"--max-coflows must be at least 1, got {args.max_coflows}")
        if not args.coflowsim.is_dir():
            raise UserError(f"CoflowSim folder {args.coflowsim} does not exist")
        cp = classpath(args.coflowsim)
        if shutil.which("java") is None:
            raise UserError("no 'java' on PATH: CoflowSim needs a Java runtime")
        trace = data_path(TRACE)
    except UserError as exc:
        print(f"coflowsim_compare: {exc}", file=sys.stderr)
        return 2
    jobs = load_scenario("fb2010").jobs
    jobs = jobs[:args.max_coflows] if args.max_coflows else jobs
    bins = {j.job_id: bin_of(j) for j in jobs if j.flows}
    key = f"{len(jobs)} coflows"
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    stored = json.loads(results_path.read_text()) if results_path.exists() else {}
    records = stored.setdefault(key, {})
    for name in names:
        policy, rule = PAIRS[name]
        theirs = run_coflowsim(cp, policy, trace, args.max_coflows, args.cache)
        ours = run_ours(name, rule, args.max_coflows)
        comparison = compare(ours["cct_s"], theirs["cct_s"], bins)
        records[name] = {
            "rescheduling": rule, "coflowsim_policy": policy, "date": date.today().isoformat(),
            "comparison": comparison,
            "ours": {"run_s": ours["run_s"], "cpu_s": ours["cpu_s"], "peak_rss_mib": ours["peak_rss_mib"],
                     "cct_s": ours["cct_s"]},
            "coflowsim": {"run_s": theirs["run_s"], "cpu_s": theirs["cpu_s"],
                          "peak_rss_mib": theirs["peak_rss_mib"],
                          "cct_s": {j: theirs["cct_s"][j] for j in bins if j in theirs["cct_s"]}},
        }
        results_path.write_text(json.dumps(stored, indent=1, sort_keys=True))
        c = comparison
        print(f"{name} vs CoflowSim {policy}: average CCT {c['ours_avg_s']:.2f} vs "
              f"{c['coflowsim_avg_s']:.2f} s (ratio {c['ratio']:.3f}), Spearman {c['spearman']:.4f}; per bin "
              + ", ".join(f"{b} {v['ratio']:.3f}" for b, v in c["bins"].items()), flush=True)
    text = table(records)
    title = f"# FB2010 against CoflowSim, {key} ({len(bins)} cross the switch)"
    (args.out / "results.md").write_text(f"{title}\n\n{text}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
