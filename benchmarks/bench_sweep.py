"""A sweep of many cells on one worker and on every core: is the wall time at most 0.6x?

Writes a grid of ``multitenant-k8`` (six jobs on a k=8 fat-tree) x 4 schedulers x seeds (``--cells`` in
all) into a temporary folder and runs it twice with ``simulator.sweep.run_sweep``: ``workers=1`` (one
after another, in this process) and ``workers=N`` (default: one per core), after one untimed cell so
neither pays for loading the compiled kernels.  Prints both wall times and their ratio, and checks that
both runs gave the same numbers.

    .venv/bin/python benchmarks/bench_sweep.py [--cells 100] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from simulator.grid import load_grid  # noqa: E402
from simulator.sweep import run_cell, run_sweep  # noqa: E402

SCHEDULERS = ["fair", "coflow", "echelon", "fifo"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    seeds = list(range(max(1, args.cells // len(SCHEDULERS))))
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        grid_path = os.path.join(tmp, "grid.json")
        with open(grid_path, "w") as fh:
            json.dump({"name": "bench", "scenarios": ["multitenant-k8"], "schedulers": SCHEDULERS,
                       "parameters": {"jobs.0.multi_tenant.seed": seeds}}, fh)
        grid = load_grid(grid_path)
        run_cell(grid.cells[0])
        walls, numbers = {}, {}
        for workers in (1, args.workers):
            started = time.perf_counter()
            records = run_sweep(grid, os.path.join(tmp, f"w{workers}"), workers=workers, progress=None)
            walls[workers] = time.perf_counter() - started
            assert all(r["status"] == "ok" for r in records)
            numbers[workers] = [r["jobs"] for r in records]
    assert numbers[1] == numbers[args.workers], "the parallel sweep gave other numbers"
    ratio = walls[args.workers] / walls[1]
    print(f"{len(grid.cells)} cells: one worker {walls[1]:.2f} s, {args.workers} workers "
          f"{walls[args.workers]:.2f} s, ratio {ratio:.2f} (target <= 0.6)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
