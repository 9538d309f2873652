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
from simulator.noise import jitter_ms_argument, samples_argument


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
    parser.add_argument("--rescheduling", choices=("every-flow", "coflow"), default="every-flow",
                        help="when the scheduler decides again: at every flow start and finish (every-flow, "
                             "exact, the default), or at flow starts and coflow/EchelonFlow completions only "
                             "(coflow: Varys's and CoflowSim's rule, for coflow traces such as fb2010; it "
                             "distorts staggered EchelonFlows, docs/performance.md)")
    parser.add_argument("--timing-noise-ms", type=jitter_ms_argument, metavar="MS",
                        help="also simulate with every compute up to MS ms longer (seeded samples) and show "
                             "the spread: whether a result survives events that no longer coincide exactly")
    parser.add_argument("--samples", type=samples_argument, default=None, metavar="N",
                        help="samples under timing noise (default 20; needs --timing-noise-ms)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from echelonflow.bounds import attach_lower_bounds
    from echelonflow.fileio import check_finite
    from echelonflow.results import Results, format_table
    from echelonflow.scenario import load_scenario
    from echelonflow.schedulers import check_names, get_scheduler
    from simulator.engine import SimulationError, simulate
    from simulator.noise import DEFAULT_SAMPLES, format_noise_table, timing_noise_section

    names = check_names(args.scheduler or [])
    if args.samples is not None and args.timing_noise_ms is None:
        raise UserError("--samples needs --timing-noise-ms")
    scenario = load_scenario(args.scenario)
    results = Results(scenario.name, "simulate",
                      rescheduling=None if args.rescheduling == "every-flow" else args.rescheduling)
    for name in names or scenario.schedulers:
        try:
            results.runs.append(simulate(scenario.topology, scenario.jobs, get_scheduler(name),
                                        events=scenario.events, rescheduling=args.rescheduling))
        except SimulationError as exc:
            raise UserError(f"scenario {scenario.name}: scheduler {name}: {exc}") from None
    attach_lower_bounds(results.runs, scenario.jobs, scenario.topology)
    if args.timing_noise_ms:
        results.timing_noise = timing_noise_section(
            scenario.topology, scenario.jobs, [run.scheduler for run in results.runs],
            args.timing_noise_ms / 1e3, args.samples or DEFAULT_SAMPLES, scenario.events)
    if args.json:
        document = results.to_json_dict()
        check_finite(document, f"scenario {scenario.name}: result")  # before the first byte goes out
        json.dump(document, sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(format_table(results))
        if results.timing_noise is not None:
            print()
            print(format_noise_table(results.timing_noise, {run.scheduler: run for run in results.runs}))
    return 0
