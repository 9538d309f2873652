"""The plots of a sweep folder: per scenario, mean job slowdown per scheduler against each parameter.

One PNG per scenario (``slowdown-<scenario>.png``): one panel per grid parameter, the value on the x axis
(categories in grid order when not all numbers), the mean slowdown over the scenario's jobs and over the
other parameters' values on the y axis, one line per scheduler; a grid without parameters gets one bar per
scheduler.  Means hide spread: the CSV beside the plots has every run x job.
"""

from __future__ import annotations

import os
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)


def plot_sweep(name: str, parameter_paths: Sequence[str], records: list[dict[str, Any]],
               out_dir: str) -> list[str]:
    """Write the PNGs of sweep ``name`` (its grid's parameter paths, its cell records) into ``out_dir``;
    return their paths."""
    ok = [r for r in records if r["status"] == "ok"]
    paths = []
    for scenario in dict.fromkeys(r["scenario"] for r in ok):
        mine = [r for r in ok if r["scenario"] == scenario]
        schedulers = list(dict.fromkeys(r["scheduler"] for r in mine))
        panels = list(parameter_paths) or [None]
        fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
        for ax, path in zip(axes[0], panels):
            _panel(ax, mine, schedulers, path)
        fig.suptitle(f"{name}: {scenario}")
        fig.tight_layout()
        target = os.path.join(out_dir, f"slowdown-{re.sub(r'[^A-Za-z0-9._-]', '_', scenario)}.png")
        fig.savefig(target, dpi=110)
        plt.close(fig)
        paths.append(target)
    return paths


def _panel(ax: Any, records: list[dict[str, Any]], schedulers: list[str], path: str | None) -> None:
    ax.set_ylabel("mean job slowdown")
    if path is None:
        means = [_mean_slowdown(r for r in records if r["scheduler"] == s) for s in schedulers]
        ax.bar(schedulers, means, color="tab:blue")
        return
    value_of = {repr(r["parameters"][path]): r["parameters"][path] for r in records}
    values = list(value_of)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value_of.values())
    by_value: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_value[(record["scheduler"], repr(record["parameters"][path]))].append(record)
    for scheduler in schedulers:
        xs = [v for v in values if (scheduler, v) in by_value]
        ys = [_mean_slowdown(by_value[(scheduler, v)]) for v in xs]
        positions = [float(value_of[v]) for v in xs] if numeric else [values.index(v) for v in xs]
        ax.plot(positions, ys, marker="o", label=scheduler)
    if not numeric:
        ax.set_xticks(range(len(values)), values)
    ax.set_xlabel(path)
    ax.legend(fontsize="small")


def _mean_slowdown(records: Any) -> float:
    return statistics.fmean(job["slowdown"] for r in records for job in r["jobs"].values())
