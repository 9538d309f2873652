"""Where each emulated flow's time goes, per scheduler and repeat.

Runs ``echelon emulate`` (or reads a finished run folder) and prints, per emulated run, each part of a
flow's life (``reports.flow_breakdown``), each flow's emulated/simulated duration ratio, the achieved
vs allocated rate, and every job's emulated completion against the simulated one.  Writes
``breakdown.json`` into the run folder.

    .venv/bin/python benchmarks/bench_flow_breakdown.py fattree-gpipe-ring --repeat 3
    .venv/bin/python benchmarks/bench_flow_breakdown.py --from runs/2026...-fattree-gpipe-ring

Emulation numbers vary from run to run: use ``--repeat 3`` or more and read medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from echelonflow.model import qualified  # noqa: E402
from echelonflow.scenario import load_scenario  # noqa: E402
from reports.flow_breakdown import (  # noqa: E402
    allocation_lag,
    flow_parts,
    format_class_changes,
    format_lag,
    format_rate_after_raise,
    format_summary,
    host_tcp,
    load_phase,
    rate_after_raise,
    rate_tracking,
    retransmits_by_class_changes,
    run_folder_name,
    summarise,
    tcp_recovery,
)


def emulate(scenario: str, schedulers: list[str], repeat: int, out: str, extra: list[str]) -> None:
    argv = [sys.executable, "-m", "cli", "emulate", scenario, "--no-plots", "--no-alone",
            "--repeat", str(repeat), "--out", out, *extra]
    for name in schedulers:
        argv += ["--scheduler", name]
    t = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"bench_flow_breakdown: echelon emulate failed (exit {proc.returncode})")
    print(f"emulated in {time.monotonic() - t:.0f} s")


def analyse(run_dir: str, scenario_name: str | None) -> dict:
    with open(os.path.join(run_dir, "results.json"), encoding="utf-8") as fh:
        emulated = json.load(fh)
    with open(os.path.join(run_dir, "results-simulate.json"), encoding="utf-8") as fh:
        simulated = {run["scheduler"]: run for run in json.load(fh)["runs"]}
    scenario = load_scenario(scenario_name or emulated["scenario"])
    topology = scenario.topology
    topology.mtu_bytes = topology.mtu_bytes or 9000  # what the fabric carries (emulate's rule)
    deps = {qualified(job.job_id, tid): [qualified(job.job_id, d) for d in task.deps]
            for job in scenario.jobs for tid, task in job.tasks.items()}
    repeats = int(emulated.get("status", {}).get("repeat", 1))
    report: dict = {"scenario": emulated["scenario"], "runs": []}
    gains: dict[str, list[float]] = {}
    pooled: dict[int, list[int]] = {}  # class changes -> retransmitted segments per flow, all runs
    raises: dict[str, dict[str, list]] = {}  # scheduler -> since-raise bucket -> [(achieved, allocated)]
    pooled_lags: dict[str, list[float]] = {}  # scheduler -> decision-to-applied delays, all runs
    for run in emulated["runs"]:
        name = run_folder_name(run["scheduler"], int(run.get("repeat", 0)), repeats)
        docs = load_phase(run_dir, name)
        sim = simulated[run["scheduler"]]
        parts = flow_parts(docs, deps, sim["flows"])
        summary = summarise(parts)
        tracking = rate_tracking(docs, topology.payload_fraction)
        recovery = tcp_recovery(docs)
        recovery["hosts"] = host_tcp(docs)
        jobs = {job: {"emulated_s": r["completion_s"], "simulated_s": sim["jobs"][job]["completion_s"]}
                for job, r in run["jobs"].items()}
        channels = {host: doc.get("channels") for host, doc in docs.items()}
        print()
        title = f"{name} ({len(parts)} flows, trusted={run.get('trusted')})"
        print(format_summary(title, summary, tracking, recovery))
        print("  hosts' TCP counters: " + ", ".join(f"{k} {v}" for k, v in recovery["hosts"].items()))
        lags = allocation_lag(docs)
        print(format_lag(lags))
        pooled_lags.setdefault(run["scheduler"], []).extend(lags)
        for label, pairs in rate_after_raise(docs, topology.payload_fraction).items():
            raises.setdefault(run["scheduler"], {}).setdefault(label, []).extend(pairs)
        for changes, counts in retransmits_by_class_changes(docs).items():
            pooled.setdefault(changes, []).extend(counts)
        for job, row in jobs.items():
            gap = row["emulated_s"] / row["simulated_s"] - 1
            print(f"  job {job:12s} emulated {row['emulated_s']:6.2f} s  "
                  f"simulated {row['simulated_s']:6.2f} s ({gap:+.1%})")
        print(f"  objective emulated {run['objective_s']:.2f} s, simulated {sim['objective_s']:.2f} s")
        late = sum((c or {}).get("opened_late", 0) for c in channels.values())
        print(f"  channels opened late (a handshake on a flow's path): {late}")
        gains.setdefault(run["scheduler"], []).append(run["objective_s"])
        report["runs"].append({"run": name, "scheduler": run["scheduler"], "trusted": run.get("trusted"),
                               "summary": summary, "rate_tracking": tracking,
                               "tcp_recovery": recovery, "jobs": jobs,
                               "objective_s": {"emulated": run["objective_s"],
                                               "simulated": sim["objective_s"]},
                               "channels_opened_late": late})
    print()
    for scheduler, values in gains.items():
        print(f"objective {scheduler:8s} emulated median {statistics.median(values):6.2f} s over "
              f"{len(values)} run(s); simulated {simulated[scheduler]['objective_s']:.2f} s")
    for scheduler, groups in raises.items():
        print(f"{scheduler}: achieved vs allocated rate by time since the flow's allocation last rose "
              f"(all runs):")
        print("\n".join(format_rate_after_raise(groups)))
    for scheduler, lags in pooled_lags.items():
        print(f"{scheduler}: {format_lag(lags).strip()} (all runs)")
    report["allocation_lag_s"] = pooled_lags
    report["rate_after_raise"] = raises  # scheduler -> bucket -> [(achieved, allocated) bit/s], pooled
    print("retransmissions by class changes while the flow ran (all runs):")
    print("\n".join(format_class_changes(dict(sorted(pooled.items())))))
    report["retransmits_by_class_changes"] = {str(k): v for k, v in sorted(pooled.items())}
    with open(os.path.join(run_dir, "breakdown.json"), "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    print(f"breakdown written to {os.path.join(run_dir, 'breakdown.json')}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", help="bundled scenario name or scenario file")
    parser.add_argument("--scheduler", action="append", default=[], help="repeatable (default: scenario's)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", help="run folder (default: runs/breakdown-<scenario>-<time>)")
    parser.add_argument("--from", dest="from_dir", help="analyse this finished run folder instead")
    parser.add_argument("--congestion-control", metavar="NAME",
                        help="passed to echelon emulate (the agents' TCP congestion control)")
    parser.add_argument("--host-sysctl", action="append", default=[], metavar="NAME=VALUE",
                        help="passed to echelon emulate (repeatable)")
    args = parser.parse_args()
    if args.from_dir:
        analyse(args.from_dir, args.scenario)
        return
    if not args.scenario:
        parser.error("give a scenario, or --from RUN_DIR")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or str(ROOT / "runs" / f"breakdown-{Path(args.scenario).stem}-{stamp}")
    extra = ["--congestion-control", args.congestion_control] if args.congestion_control else []
    for setting in args.host_sysctl:
        extra += ["--host-sysctl", setting]
    emulate(args.scenario, args.scheduler, args.repeat, out, extra)
    analyse(out, args.scenario)


if __name__ == "__main__":
    main()
