"""``echelon report RUN_DIR``: re-render a run folder's CSV, fidelity section and plots from its JSON.

Useful after editing plot code, or on a run folder copied from another machine; the table printed is
the same one ``echelon simulate``/``emulate`` print (with repeats: medians and spread), and a run that
did not finish says so in one line.
"""

from __future__ import annotations

import argparse
import os


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="re-render the table, CSV and plots of a run folder",
        description="Re-create results.csv, fidelity.md and the PNG plots of a run folder from its "
                    "results*.json.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder written by echelon emulate")
    parser.add_argument("--no-plots", action="store_true", help="only the table and the CSV")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from echelonflow.results import format_table
    from reports.runfolder import (
        FIDELITY_TEXT,
        SHAPE_ERRORS,
        load_run_folder,
        read_status,
        rerender,
        status_line,
        unreadable,
    )
    from reports.table import format_report

    primary, others = load_run_folder(args.run_dir)
    simulated = next((d for d in others if d.mode == "simulate"), None)
    try:  # the table first: a document it cannot read leaves the folder as it was
        if primary.mode == "emulate" and simulated is not None:
            table = format_report(primary, simulated)
        else:
            table = "\n".join(format_table(doc) for doc in (primary, *others))
    except SHAPE_ERRORS as exc:
        raise unreadable(args.run_dir, exc) from None
    folder = rerender(args.run_dir, plots=not args.no_plots)
    print(table)
    partial = status_line(read_status(args.run_dir))
    if partial:
        print(partial)
    print()
    print(f"run folder: {folder.path}")
    print(f"  {os.path.basename(folder.csv)}")
    if os.path.exists(os.path.join(folder.path, FIDELITY_TEXT)):
        print(f"  {FIDELITY_TEXT}")
    for plot in folder.plots:
        print(f"  {os.path.basename(plot)}")
    return 0
