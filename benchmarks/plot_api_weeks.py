"""Plot the series of ``benchmarks/bench_api_weeks.py`` (RSS, store size, a job's lifecycle and the reads
against the finished jobs behind the controller) into one PNG next to its JSON.

Usage: ``.venv/bin/python benchmarks/plot_api_weeks.py [benchmarks/results/api_weeks.json]``.
"""

from __future__ import annotations

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "benchmarks", "results", "api_weeks.json")
READS = ("jobs", "flows", "echelons", "echelons_recent_60", "health")


def main(path: str = DEFAULT) -> int:
    with open(path, encoding="utf-8") as fh:
        series = json.load(fh)["series"]
    jobs = [point["jobs"] / 1000 for point in series]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    axes[0].plot(jobs, [p["rss_mib"] for p in series], marker="o")
    axes[0].set_title("RSS (MiB)")
    axes[1].plot(jobs, [p["store_bytes"] / 2**20 for p in series], marker="o")
    axes[1].set_title("store with WAL (MiB)")
    timed = [p for p in series if p["lifecycle_ms"] is not None]
    axes[2].plot([p["jobs"] / 1000 for p in timed], [p["lifecycle_ms"] for p in timed], marker="o")
    axes[2].set_title("a job's lifecycle, 10 calls (ms)")
    for name in READS:
        axes[3].plot(jobs, [p["read_ms"][name] for p in series], marker=".", label=name)
    axes[3].set_title("reads, first page (ms)")
    axes[3].legend(fontsize=7)
    for ax in axes:
        ax.set_xlabel("finished jobs (thousands)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = os.path.splitext(path)[0] + ".png"
    fig.savefig(out, dpi=90)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
