"""Plots of result documents (matplotlib, Agg backend: no display needed).

* :func:`plot_timeline`: one scheduler's run drawn like the paper's Fig. 2.  One block per host: a
  compute lane, then lanes for outgoing flows and lanes for incoming flows (a flow that overlaps another
  gets its own lane, so concurrent flows stay visible).  Colour = job; outgoing flows are hatched ``//``,
  incoming ``\\\\``; a black tick on an outgoing flow marks its ideal finish time d_j, so tardiness
  (finish - d_j) is the distance from the tick to the bar's end.
* :func:`plot_jct`: job completion time and slowdown per scheduler, one bar per job and mode
  (emulated solid, simulated hatched), so emulation and simulation sit side by side.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.patches import Patch  # noqa: E402

from echelonflow.results import Results, RunResult  # noqa: E402
from reports.fidelity import judged_runs, runs_by_scheduler  # noqa: E402

_COLORS = plt.get_cmap("tab10").colors
_MODE_STYLE = {"emulate": {"alpha": 0.95, "hatch": ""}, "simulate": {"alpha": 0.45, "hatch": "..."}}


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


Span = tuple[float, float, str, str]  # (start_s, finish_s, qualified task id, job id)


def _lanes(spans: list[Span], max_lanes: int) -> list[list[Span]]:
    """Greedy interval colouring: each span goes to the first lane whose last span ended before it.

    Beyond ``max_lanes`` a span joins the lane that frees up first (bars then overlap, drawn translucent),
    so a busy host does not blow up the figure's height.
    """
    lanes: list[list[Span]] = []
    for span in sorted(spans):
        for lane in lanes:
            if lane[-1][1] <= span[0] + 1e-9:
                lane.append(span)
                break
        else:
            if len(lanes) < max_lanes:
                lanes.append([span])
            else:
                min(lanes, key=lambda lane: lane[-1][1]).append(span)
    return lanes


def plot_timeline(run: RunResult, path: str, title: str = "") -> None:
    """Write a PNG of ``run``'s tasks per host over time (see module docstring)."""
    jobs = sorted({qid.split("/", 1)[0] for qid in run.tasks}, key=_natural)
    color = {job: _COLORS[i % len(_COLORS)] for i, job in enumerate(jobs)}
    per_host: dict[str, dict[str, list]] = {}
    for qid, task in run.tasks.items():
        span = (task.start_s, task.finish_s, qid, qid.split("/", 1)[0])
        if task.type == "compute":
            per_host.setdefault(task.host, {}).setdefault("compute", []).append(span)
        else:
            per_host.setdefault(task.src, {}).setdefault("out", []).append(span)
            per_host.setdefault(task.dst, {}).setdefault("in", []).append(span)
    rows: list[tuple[str, list]] = []  # (label, spans) top to bottom
    many = len(per_host) > 6  # big fabrics: fewer lanes, and incoming flows only show at their senders
    directions = ("out",) if many else ("out", "in")
    for host in sorted(per_host, key=_natural):
        kinds = per_host[host]
        if kinds.get("compute"):
            rows.append((f"{host} compute", sorted(kinds["compute"])))
        for kind, arrow in ((d, d) for d in directions):
            for i, lane in enumerate(_lanes(kinds.get(kind, []), 2 if many else 4)):
                rows.append((f"{host} {arrow}" + (f" {i + 1}" if i else ""), lane))
        rows.append(("", []))  # gap between hosts
    if rows:
        rows.pop()
    end = max((t.finish_s for t in run.tasks.values()), default=1.0) or 1.0
    height = min(40.0, 1.8 + 0.3 * max(1, len(rows)))
    fig, ax = plt.subplots(figsize=(11, height))
    for y, (label, spans) in enumerate(rows):
        kind = label.split(" ")[1] if label else ""
        for start, finish, qid, job in spans:
            width = max(finish - start, end * 0.002)
            style = {"compute": {"hatch": "", "alpha": 0.9}, "out": {"hatch": "//", "alpha": 0.55},
                     "in": {"hatch": "\\\\", "alpha": 0.55}}[kind]
            ax.barh(y, width, left=start, height=0.72, color=color[job], edgecolor="black", linewidth=0.5,
                    **style)
            if width > end * 0.05:
                short = qid.split("/", 1)[1]
                ax.text(start + width / 2, y, short, ha="center", va="center", fontsize=7, clip_on=True,
                        bbox={"boxstyle": "round,pad=0.1", "facecolor": "white", "alpha": 0.7,
                              "linewidth": 0})
            if kind == "out" and qid in run.flows:
                due = run.flows[qid].ideal_finish_s
                ax.plot([due, due], [y - 0.42, y + 0.42], color="black", linewidth=1.6)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label for label, _ in rows], fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, end * 1.02)
    ax.set_xlabel("time since job start (s)")
    ax.grid(axis="x", linestyle=":", linewidth=0.6)
    completions = ", ".join(f"{j} {r.completion_s:.2f} s" for j, r in run.jobs.items())
    fig.suptitle(f"{title}\njob completion: {completions}; "
                 f"objective (sum of tardiness) {run.objective_s:.2f} s", fontsize=10)
    handles = [Patch(facecolor=color[j], label=f"job {j}") for j in jobs]
    handles += [Patch(facecolor="white", edgecolor="black", label="compute"),
                Patch(facecolor="white", edgecolor="black", hatch="//", label="flow out"),
                Patch(facecolor="white", edgecolor="black", hatch="\\\\", label="flow in"),
                plt.Line2D([], [], color="black", linewidth=1.6, label="ideal finish d_j")]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(handles), 7),
              fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_jct(documents: Sequence[Results], path: str) -> None:
    """Write a PNG with completion time and slowdown per scheduler, one bar per job and mode.

    With repeats a bar is the median over the judged runs (:func:`reports.fidelity.judged_runs`) and a
    whisker spans their min..max; ``n=`` under the value says how many runs."""
    modes = [d.mode for d in documents]
    schedulers: list[str] = []
    jobs: list[str] = []
    values: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for doc in documents:
        for scheduler, runs in runs_by_scheduler(doc).items():
            if scheduler not in schedulers:
                schedulers.append(scheduler)
            for run in judged_runs(runs)[0]:
                for job_id, job in run.jobs.items():
                    if job_id not in jobs:
                        jobs.append(job_id)
                    samples = values.setdefault((doc.mode, scheduler, job_id), [])
                    samples.append((job.completion_s, job.slowdown))
    bars = [(job, mode) for job in jobs for mode in modes]
    width = 0.8 / max(1, len(bars))
    fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 2.2 * len(schedulers) + 0.5 * len(bars)), 4.2))
    for ax, index, label in ((axes[0], 0, "job completion time (s)"), (axes[1], 1, "slowdown (x alone)")):
        for b, (job, mode) in enumerate(bars):
            xs, ys, low, high, counts = [], [], [], [], []
            for s, sched in enumerate(schedulers):
                samples = [v[index] for v in values.get((mode, sched, job), [])]
                if samples:
                    median = statistics.median(samples)
                    xs.append(s - 0.4 + width * (b + 0.5))
                    ys.append(median)
                    low.append(median - min(samples))
                    high.append(max(samples) - median)
                    counts.append(len(samples))
            style = _MODE_STYLE.get(mode, {"alpha": 0.7, "hatch": "xx"})
            rects = ax.bar(xs, ys, width=width * 0.95, color=_COLORS[jobs.index(job) % len(_COLORS)],
                           edgecolor="black", linewidth=0.5, label=f"{job} ({mode})", **style)
            if any(c > 1 for c in counts):
                ax.errorbar(xs, ys, yerr=[low, high], fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
            for rect, y, n, up in zip(rects, ys, counts, high):
                text = f"{y:.2f}" + (f"\nn={n}" if n > 1 else "")
                ax.annotate(text, (rect.get_x() + rect.get_width() / 2, y + up), ha="center", va="bottom",
                            fontsize=6 if n > 1 else 7, xytext=(0, 1), textcoords="offset points")
        ax.set_xticks(range(len(schedulers)))
        ax.set_xticklabels(schedulers)
        ax.set_ylabel(label)
        ax.grid(axis="y", linestyle=":", linewidth=0.6)
        ax.margins(y=0.15)
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    scenario = documents[0].scenario if documents else ""
    fig.suptitle(f"{scenario}: {' vs '.join(modes)}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_fidelity(doc: dict[str, Any], path: str) -> None:
    """Write the fidelity section's PNG (``doc`` from :func:`reports.fidelity.fidelity`).

    Left: each job's and each objective's gap, emulated median over simulated - 1, with the +-10 % band
    of the target; a whisker spans the gaps of the fastest and slowest run.  Right: echelon's gain over
    coflow and over fair, simulated next to emulated (from medians)."""
    rows = [(f"{r['scheduler']}\n{r['job']}", r) for r in doc["jobs"]]
    rows += [(f"{r['scheduler']}\nobjective", r) for r in doc["objective"]]
    rows = [(label, r) for label, r in rows if r["gap"] is not None]
    gains = [g for g in doc["gains"] if g["simulated_gain"] is not None and g["emulated_gain"] is not None]
    fig, axes = plt.subplots(1, 2, figsize=(max(10.0, 0.9 * len(rows) + 0.9 * len(gains) + 3), 4.6),
                             gridspec_kw={"width_ratios": [max(1, len(rows)), max(1, len(gains))]})
    ax = axes[0]
    target = doc["targets"]["gap"]
    ax.axhspan(-100 * target, 100 * target, color="tab:green", alpha=0.12, label=f"target +-{target:.0%}")
    for x, (_label, r) in enumerate(rows):
        emu, sim = r["emulated"], r["simulated_s"]
        gap = 100 * r["gap"]
        color = "tab:blue" if r["trusted"] else "tab:gray"
        ax.bar(x, gap, width=0.6, color=color, edgecolor="black", linewidth=0.5,
               hatch="" if r["trusted"] else "//")
        top = gap
        if emu["n"] > 1 and sim:
            low, top = 100 * (emu["min"] / sim - 1), 100 * (emu["max"] / sim - 1)
            ax.errorbar([x], [gap], yerr=[[gap - low], [top - gap]], fmt="none", ecolor="black",
                        elinewidth=0.8, capsize=3)
        ax.annotate(f"{gap:+.1f}%\nn={r['runs']}", (x, max(top, 0)), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([label for label, _ in rows], fontsize=8)
    ax.set_ylabel("emulated median vs simulated (%)")
    ax.set_title("gap per job and objective (grey, hatched: untrusted runs only)", fontsize=9)
    ax.grid(axis="y", linestyle=":", linewidth=0.6)
    ax.legend(fontsize=8, loc="upper left", frameon=False)
    ax.margins(y=0.2)
    ax = axes[1]
    for x, g in enumerate(gains):
        ax.bar(x - 0.18, 100 * g["simulated_gain"], width=0.36, color="tab:orange", alpha=0.5, hatch="...",
               edgecolor="black", linewidth=0.5, label="simulated" if x == 0 else None)
        ax.bar(x + 0.18, 100 * g["emulated_gain"], width=0.36, color="tab:orange", edgecolor="black",
               linewidth=0.5, label="emulated" if x == 0 else None)
        kept = "" if g["kept"] is None else f"{g['kept']:.0%} kept"
        ax.annotate(kept, (x, max(100 * g["simulated_gain"], 100 * g["emulated_gain"], 0)), ha="center",
                    va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(gains)))
    ax.set_xticklabels([f"over {g['over']}\n{g['metric']}" for g in gains], fontsize=8)
    ax.set_ylabel("echelon's gain, 1 - echelon / baseline (%)")
    ax.set_title("echelon's gain: simulated vs emulated (medians)", fontsize=9)
    ax.grid(axis="y", linestyle=":", linewidth=0.6)
    if gains:
        ax.legend(fontsize=8, loc="upper right", frameon=False)
    ax.margins(y=0.2)
    fig.suptitle(f"{doc['scenario']}: fidelity, emulated vs simulated", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
