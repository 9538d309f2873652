"""``echelon sweep GRID.json``: a grid of scenarios x schedulers x parameters, on every core or on Ray.

The grid format and the folder it writes are in ``docs/sweep.md``; the grid is checked whole before any
cell runs (a bad one is one line, exit status 2).  Exit status 1 when some cell failed (each is named in
the progress lines and kept in ``cells.jsonl`` with its error); running the command again retries those
and skips the finished ones.

It lives in ``cli/`` because it joins two parts that must not import each other: the simulator runs the
cells, the reports draw the plots (``tests/test_layering.py``).
"""

from __future__ import annotations

import argparse
import os
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run a grid of scenarios x schedulers x parameters in parallel (resumable)",
        description="Simulate every cell of a grid file (docs/sweep.md) on worker processes or a Ray "
                    "cluster; results in OUT/results.csv (one row per cell x job) and OUT/cells.jsonl.",
    )
    parser.add_argument("grid", metavar="GRID.json", help="the grid file")
    parser.add_argument("--out", metavar="DIR",
                        help="sweep folder (default: sweep-<grid name>); finished cells in it are skipped")
    parser.add_argument("--workers", type=_positive, metavar="N",
                        help="worker processes (default: one per core) or Ray CPUs started here")
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="local: forked worker processes (default); ray: Ray tasks")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="run on the Ray cluster at ADDRESS (host:port or 'auto'); implies --backend ray")
    parser.add_argument("--no-plots", action="store_true", help="skip the plots")
    parser.set_defaults(run=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    from echelonflow.fileio import check_output_dir
    from echelonflow.schedulers import coflow_rule_warning
    from reports.runfolder import RESULTS_FILE
    from simulator.grid import load_grid
    from simulator.sweep import CELLS_FILE, CSV_FILE, run_sweep

    grid = load_grid(args.grid, progress=sys.stdout)  # stderr keeps a refusal to one line
    warning = coflow_rule_warning(c.scheduler for c in grid.cells if c.rescheduling == "coflow")
    if warning:
        print(f"echelon sweep: grid {grid.name}: {warning}", file=sys.stderr)
    out_dir = args.out or f"sweep-{grid.name}"
    # a sweep folder (cells.jsonl) is resumed; another folder's results.csv or run documents are not
    # rewritten over
    resumed = os.path.exists(os.path.join(out_dir, CELLS_FILE))
    check_output_dir(out_dir, "sweep folder", kept=(RESULTS_FILE,) + (() if resumed else (CSV_FILE,)))
    backend = "ray" if args.ray else args.backend
    records = run_sweep(grid, out_dir, backend, args.workers, args.ray)
    failed = [r for r in records if r["status"] != "ok"]
    if not args.no_plots and len(failed) < len(records):
        from reports.sweep_plots import plot_sweep

        for path in plot_sweep(grid.name, grid.parameter_paths, records, out_dir):
            print(f"plot: {path}")
    print(f"{len(records) - len(failed)} of {len(records)} cells ok; results: "
          f"{os.path.join(out_dir, CSV_FILE)}")
    for record in failed:
        print(f"failed: {record['scenario']} {record['scheduler']} {record['parameters']}: {record['error']}")
    return 1 if failed else 0
