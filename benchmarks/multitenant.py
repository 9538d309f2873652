"""Multi-tenant DDL evaluation: job slowdowns and the objective per scheduler at three loads x three seeds.

Workloads come from ``echelonflow.workloads.multitenant`` (mixed models and parallelisms, Poisson arrivals
at a target load on the host links, seeded placement); each (topology, load, seed) is simulated under
every scheduler.  Per job it records the completion time (from arrival), the slowdown (completion with
everyone / completion alone on the same network under the same scheduler: the simulator's definition)
and the stretch (completion / the job's scheduler-independent lower bound, ``echelonflow.bounds``).

Writes into ``--out`` (default ``benchmarks/results/multitenant``): ``results.json`` (every job of every
run, rewritten after each run so an interrupted sweep keeps what it did), ``results.md`` (per topology,
load and scheduler: mean and p95 slowdown, mean stretch and objective, each as the mean over seeds with
the min..max spread), and per topology ``<topology>-cdf.png`` (CDF of job slowdowns per load, all seeds
pooled) and ``<topology>-bars.png`` (mean slowdown, p95 slowdown and objective; bars are the mean over
seeds, whiskers the spread).

    .venv/bin/python benchmarks/multitenant.py [--k 8] [--rate-gbps 10] [--oversubscription 1 4]
        [--jobs 12] [--iterations 2] [--loads 0.1 0.3 1.0] [--seeds 1 2 3] [--scheduler NAME]...
        [--workers N] [--resume]

``--workers N`` simulates N cells (topology x load x seed x scheduler) at once, each in its own process
(results are the same as one after another: every cell is deterministic); ``--resume`` keeps the runs
already in ``--out/results.json`` and simulates only the cells missing there (a grid grown, or an
interrupted one finished).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from echelonflow.bounds import lower_bound_s
from echelonflow.results import render_table
from echelonflow.schedulers import check_names, get_scheduler
from echelonflow.topology import build
from echelonflow.workloads import multitenant
from simulator.engine import simulate

SCHEDULERS = ("fair", "fifo", "coflow", "sincronia", "aalo", "echelon", "echelon-online")
OUT_DIR = Path(__file__).resolve().parent / "results" / "multitenant"


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def run_cell(cell: tuple[int, float, float, float, int, int, int, str]) -> dict[str, Any]:
    """One grid cell, from plain values (what a worker process receives)."""
    k, rate_gbps, ratio, load, seed, jobs, iterations, scheduler = cell
    topology = build("fattree", rate_gbps * 1e9, k=k, oversubscription=ratio)
    spec = {"jobs": jobs, "load": load, "seed": seed, "iterations": iterations}
    return run_one(topology, spec, scheduler)


def run_one(topology: Any, spec: dict[str, Any], scheduler: str) -> dict[str, Any]:
    """One scheduler on one drawn workload: per-job numbers and the objective."""
    workload = multitenant.generate(spec, topology)
    bounds = {job.job_id: lower_bound_s(job, topology) for job in workload.jobs}
    started = time.perf_counter()
    result = simulate(topology, workload.jobs, get_scheduler(scheduler), check_invariants=False)
    jobs = {
        job.job_id: {
            "kind": kind.label,
            "arrival_s": job.arrival_s,
            "completion_s": result.jobs[job.job_id].completion_s,
            "slowdown": result.jobs[job.job_id].slowdown,
            "lower_bound_s": bounds[job.job_id],
            "stretch": result.jobs[job.job_id].completion_s / bounds[job.job_id],
        }
        for job, kind in zip(workload.jobs, workload.kinds)
    }
    return {"topology": topology.name, "load": spec["load"], "seed": spec["seed"], "scheduler": scheduler,
            "arrival_rate_per_s": workload.arrival_rate_per_s, "objective_s": result.objective_s,
            "run_s": time.perf_counter() - started, "jobs": jobs}


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (topology, load, scheduler): each metric's mean over seeds and its min..max spread."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["topology"], run["load"], run["scheduler"]), []).append(run)
    rows = []
    for (topo, load, scheduler), members in groups.items():
        per_seed = {
            "mean_slowdown": [statistics.fmean(j["slowdown"] for j in r["jobs"].values()) for r in members],
            "p95_slowdown": [p95([j["slowdown"] for j in r["jobs"].values()]) for r in members],
            "mean_stretch": [statistics.fmean(j["stretch"] for j in r["jobs"].values()) for r in members],
            "objective_s": [r["objective_s"] for r in members],
        }
        row: dict[str, Any] = {"topology": topo, "load": load, "scheduler": scheduler, "seeds": len(members)}
        for metric, values in per_seed.items():
            row[metric] = {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    def cell(stat: dict[str, float]) -> str:
        return f"{stat['mean']:.2f} ({stat['min']:.2f}..{stat['max']:.2f})"

    header = ("topology", "load", "scheduler", "seeds", "mean slowdown", "p95 slowdown", "mean stretch",
              "objective_s")
    table = [[r["topology"], f"{r['load']:g}", r["scheduler"], str(r["seeds"]), cell(r["mean_slowdown"]),
              cell(r["p95_slowdown"]), cell(r["mean_stretch"]), cell(r["objective_s"])] for r in rows]
    lines = ["# Multi-tenant DDL evaluation", "", f"`{command}`", "",
             "Mean over seeds, (min..max) across seeds. Slowdown: completion with everyone / alone under the "
             "same scheduler. Stretch: completion / the job's scheduler-independent lower bound.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in table]
    return "\n".join(lines) + "\n"


def plot(runs: list[dict[str, Any]], rows: list[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for topo in dict.fromkeys(r["topology"] for r in runs):
        loads = sorted({r["load"] for r in runs if r["topology"] == topo})
        schedulers = list(dict.fromkeys(r["scheduler"] for r in runs if r["topology"] == topo))
        fig, axes = plt.subplots(1, len(loads), figsize=(4.5 * len(loads), 3.6), squeeze=False, sharey=True)
        for ax, load in zip(axes[0], loads):
            for scheduler in schedulers:
                values = sorted(j["slowdown"] for r in runs if (r["topology"], r["load"], r["scheduler"])
                                == (topo, load, scheduler) for j in r["jobs"].values())
                ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post",
                        label=scheduler)
            ax.set_xscale("log")
            ax.set_title(f"{topo}, load {load:g}")
            ax.set_xlabel("job slowdown (log)")
        axes[0][0].set_ylabel("fraction of jobs")
        axes[0][-1].legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{topo}-cdf.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

        metrics = (("mean_slowdown", "mean slowdown"), ("p95_slowdown", "p95 slowdown"),
                   ("objective_s", "objective (s)"))
        fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.6), squeeze=False)
        width = 0.8 / len(schedulers)
        for ax, (metric, label) in zip(axes[0], metrics):
            for s_index, scheduler in enumerate(schedulers):
                found = {r["load"]: r[metric] for r in rows
                         if (r["topology"], r["scheduler"]) == (topo, scheduler)}
                shown = [i for i, load in enumerate(loads) if load in found]  # an interrupted sweep has gaps
                stats = [found[loads[i]] for i in shown]
                xs = [i + (s_index - (len(schedulers) - 1) / 2) * width for i in shown]
                means = [s["mean"] for s in stats]
                spread = [[m - s["min"] for m, s in zip(means, stats)],
                          [s["max"] - m for m, s in zip(means, stats)]]
                ax.bar(xs, means, width, yerr=spread, capsize=2, label=scheduler)
            ax.set_xticks(range(len(loads)), [f"load {load:g}" for load in loads])
            ax.set_title(f"{topo}: {label}")
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{topo}-bars.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=8, help="fat-tree arity (8: 128 hosts, 16: 1024)")
    parser.add_argument("--rate-gbps", type=float, default=10.0, help="host link rate")
    parser.add_argument("--oversubscription", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--scheduler", action="append", help="repeatable; default: " + " ".join(SCHEDULERS))
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--replot", action="store_true", help="only re-render from --out/results.json")
    parser.add_argument("--workers", type=int, default=1, help="cells simulated at once (processes)")
    parser.add_argument("--resume", action="store_true",
                        help="keep --out/results.json's runs and simulate only the missing cells")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    command = "benchmarks/multitenant.py " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in vars(args).items() if k in ("k", "rate_gbps", "oversubscription", "jobs", "iterations",
                                                 "loads", "seeds"))
    document_path = args.out / "results.json"
    if args.replot:
        document = json.loads(document_path.read_text())
        runs, command = document["runs"], document["command"]
    else:
        schedulers = check_names(args.scheduler or []) or list(SCHEDULERS)
        runs = json.loads(document_path.read_text())["runs"] if args.resume and document_path.exists() else []
        done = {(r["topology"], r["load"], r["seed"], r["scheduler"]) for r in runs}
        cells = []
        for ratio in args.oversubscription:
            name = build("fattree", args.rate_gbps * 1e9, k=args.k, oversubscription=ratio).name
            cells += [(args.k, args.rate_gbps, ratio, load, seed, args.jobs, args.iterations, scheduler)
                      for load in args.loads for seed in args.seeds for scheduler in schedulers
                      if (name, load, seed, scheduler) not in done]
        with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
            for future in as_completed([pool.submit(run_cell, cell) for cell in cells]):
                run = future.result()
                runs.append(run)
                slowdowns = [j["slowdown"] for j in run["jobs"].values()]
                print(f"{run['topology']} load {run['load']:g} seed {run['seed']} {run['scheduler']:<10} "
                      f"mean slowdown {statistics.fmean(slowdowns):.2f} p95 {p95(slowdowns):.2f} "
                      f"objective {run['objective_s']:.1f} s ({run['run_s']:.1f} s)", flush=True)
                document_path.write_text(json.dumps({"command": command, "runs": runs}, indent=1))
        order = {name: index for index, name in enumerate(SCHEDULERS)}
        runs.sort(key=lambda r: (r["topology"], r["load"], r["seed"], order.get(r["scheduler"], len(order))))
        document_path.write_text(json.dumps({"command": command, "runs": runs}, indent=1))
    rows = summarise(runs)
    (args.out / "results.md").write_text(markdown(rows, command))
    plot(runs, rows, args.out)
    header = ("topology", "load", "scheduler", "mean slowdown", "p95 slowdown", "mean stretch", "objective_s")
    print(render_table("multi-tenant", header, [
        [r["topology"], f"{r['load']:g}", r["scheduler"]]
        + [f"{r[m]['mean']:.2f} ({r[m]['min']:.2f}..{r[m]['max']:.2f})"
           for m in ("mean_slowdown", "p95_slowdown", "mean_stretch", "objective_s")] for r in rows]))


if __name__ == "__main__":
    main()
