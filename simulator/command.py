"""``echelon simulate SCENARIO [--scheduler NAME]... [--json]``: compare schedulers in the fluid simulator.

Every decision is checked against the invariants every scheduler keeps (``view.check_decision``);
``--no-checks`` leaves the checks out: the same results, sooner on long traces, where the checks walk
every active flow at every decision.

Human output is one table (per job completion, slowdown, EchelonFlow tardiness); ``--json`` prints
one document in the result shape of ``echelonflow.results`` (the same one ``echelon emulate`` writes),
each job also with its scheduler-independent lower bound (``echelonflow.bounds``).  By default that
document has no per-flow records (jobs, EchelonFlows and a summary: a few MB for FB2010's 700,000
flows, where every flow's record made 529 MB); ``--per-flow`` puts them in it (streamed), and
``--flows FILE`` writes them as JSON lines beside it (docs/results-format.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from echelonflow.errors import UserError
from simulator.noise import jitter_ms_argument, samples_argument

if TYPE_CHECKING:
    from echelonflow.results import Results


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
    parser.add_argument("--json", action="store_true",
                        help="print one JSON result document on stdout: jobs, EchelonFlows and a summary per "
                             "scheduler (every flow and task too with --per-flow)")
    parser.add_argument("--per-flow", action="store_true",
                        help="with --json: every flow's and task's record in the document as well")
    parser.add_argument("--flows", metavar="FILE",
                        help="write every task's record (flows: start, finish, ideal finish, size, "
                             "EchelonFlow) to FILE as JSON lines, one per task and scheduler")
    parser.add_argument("--rescheduling", choices=("every-flow", "coflow"), default="every-flow",
                        help="when the scheduler decides again: at every flow start and finish (every-flow, "
                             "exact, the default), or at flow starts and coflow/EchelonFlow completions only "
                             "(coflow: Varys's and CoflowSim's rule, for coflow traces such as fb2010; "
                             "faithful only to coflow, coflow-static and fifo, it idles the bandwidth other "
                             "schedulers free and distorts staggered EchelonFlows, docs/performance.md)")
    parser.add_argument("--timing-noise-ms", type=jitter_ms_argument, metavar="MS",
                        help="also simulate with every compute up to MS ms longer (seeded samples) and show "
                             "the spread: whether a result survives events that no longer coincide exactly")
    parser.add_argument("--samples", type=samples_argument, default=None, metavar="N",
                        help="samples under timing noise (default 20; needs --timing-noise-ms)")
    parser.add_argument("--no-checks", action="store_true",
                        help="do not check every decision (rates finite and non-negative, no link over "
                             "its capacity, rankings of active flows): the same results, for long traces, "
                             "where the checks walk every active flow at every decision")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from echelonflow.bounds import attach_lower_bounds
    from echelonflow.fileio import check_finite
    from echelonflow.results import Results, format_table
    from echelonflow.scenario import load_scenario
    from echelonflow.schedulers import check_names, coflow_rule_warning, get_scheduler
    from simulator.engine import SimulationError, simulate
    from simulator.noise import DEFAULT_SAMPLES, format_noise_table, timing_noise_section

    names = check_names(args.scheduler or [])
    if args.per_flow and not args.json:
        raise UserError("--per-flow needs --json (or write the records with --flows FILE)")
    if args.flows:
        _check_flows_file(args.flows)
    if args.samples is not None and args.timing_noise_ms is None:
        raise UserError("--samples needs --timing-noise-ms")
    scenario = load_scenario(args.scenario)
    warning = coflow_rule_warning(names or scenario.schedulers) if args.rescheduling == "coflow" else None
    if warning:
        print(f"echelon simulate: {warning}", file=sys.stderr)
    results = Results(scenario.name, "simulate",
                      rescheduling=None if args.rescheduling == "every-flow" else args.rescheduling)
    for name in names or scenario.schedulers:
        try:
            results.runs.append(simulate(scenario.topology, scenario.jobs, get_scheduler(name),
                                        check_invariants=not args.no_checks, events=scenario.events,
                                        rescheduling=args.rescheduling))
        except SimulationError as exc:
            raise UserError(f"scenario {scenario.name}: scheduler {name}: {exc}") from None
    attach_lower_bounds(results.runs, scenario.jobs, scenario.topology)
    if args.timing_noise_ms:
        results.timing_noise = timing_noise_section(
            scenario.topology, scenario.jobs, [run.scheduler for run in results.runs],
            args.timing_noise_ms / 1e3, args.samples or DEFAULT_SAMPLES, scenario.events,
            checks=not args.no_checks)
    if args.flows:
        _write_flows(args.flows, results)
    if args.json:
        # the compact document holds every number a run derives (objective, summaries): checked before
        # the first byte goes out; per-flow records hold only simulated times
        check_finite(results.to_json_dict(per_flow=False), f"scenario {scenario.name}: result")
        results.write_json(sys.stdout, per_flow=args.per_flow)
    else:
        print(format_table(results))
        if results.timing_noise is not None:
            print()
            print(format_noise_table(results.timing_noise, {run.scheduler: run for run in results.runs}))
    return 0


def _write_flows(path: str, results: Results) -> None:
    """``--flows FILE``: the records through a temporary file renamed over FILE, so a write that fails
    or is interrupted leaves an earlier FILE as it was; a device, a pipe or a symbolic link
    (``/dev/stdout``, which a rename would replace, not write through) is written as it is."""
    from echelonflow.fileio import atomic_writer, path_kind

    try:
        if path_kind(path, "--flows") in (None, "file") and not os.path.islink(path):
            with atomic_writer(path, 0o666 & ~_umask()) as flows_out:
                results.write_task_records(flows_out)
        else:
            with open(path, "w", encoding="utf-8") as flows_out:
                results.write_task_records(flows_out)
    except OSError as exc:
        raise UserError(f"--flows {path}: cannot write ({exc.strerror})") from None


def _umask() -> int:
    """The process's umask (read by setting it, then put back): what a plain open() would have applied."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _check_flows_file(path: str) -> None:
    """``--flows FILE`` checked before the simulation runs (a bad path fails at once, and nothing is
    created before the records exist)."""
    if os.path.isdir(path):
        raise UserError(f"--flows {path}: is a directory")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UserError(f"--flows {path}: cannot write (no folder {folder})")
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        raise UserError(f"--flows {path}: cannot write (permission denied)")
