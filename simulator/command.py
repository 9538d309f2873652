"""``echelon simulate SCENARIO [--scheduler NAME]... [--json]``: compare schedulers in the fluid simulator.

Human output is one table (per job completion, slowdown, EchelonFlow tardiness); ``--json`` prints
one document in the result shape of ``echelonflow.results`` (the same one ``echelon emulate`` writes),
each job also with its scheduler-independent lower bound (``echelonflow.bounds``).
"""

from __future__ import annotations

import argparse
import json
import sys

from echelonflow.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="run a scenario in the flow-level simulator and compare schedulers",
        description="Run a scenario (bundled name such as fig2, or a JSON file) in the flow-level simulator.",
    )
    parser.add_argument("scenario", help="bundled scenario name or path to a scenario JSON file")
    parser.add_argument(
        "--scheduler",
        action="append",
        metavar="NAME",
        help="scheduler to run (repeatable; default: the scenario's list, normally fair, coflow, echelon)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON result document on stdout")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from echelonflow.bounds import attach_lower_bounds
    from echelonflow.results import Results, format_table
    from echelonflow.scenario import load_scenario
    from echelonflow.schedulers import check_names, get_scheduler
    from simulator.engine import SimulationError, simulate

    names = check_names(args.scheduler or [])
    scenario = load_scenario(args.scenario)
    results = Results(scenario.name, "simulate")
    for name in names or scenario.schedulers:
        try:
            results.runs.append(simulate(scenario.topology, scenario.jobs, get_scheduler(name),
                                        events=scenario.events))
        except SimulationError as exc:
            raise UserError(f"scenario {scenario.name}: scheduler {name}: {exc}") from None
    attach_lower_bounds(results.runs, scenario.jobs, scenario.topology)
    if args.json:
        json.dump(results.to_json_dict(), sys.stdout, indent=1, sort_keys=False)
        sys.stdout.write("\n")
    else:
        print(format_table(results))
    return 0
