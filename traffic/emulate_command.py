"""``echelon emulate SCENARIO [--scheduler NAME]... [--json] [--out RUN_DIR]``: run a scenario for real.

For each scheduler in turn: a fresh Mininet/OVS fabric and controller (scheduler selected through the
controller's API), one traffic agent per host used by the jobs, real TCP transfers; then everything is
torn down.  The same scenario is simulated for comparison, and one table shows emulated and simulated
values side by side.  The run folder (default ``runs/<timestamp>-<scenario>/``) gets results.json (mode
``emulate``, the same shape as ``echelon simulate --json``), results-simulate.json, results.csv, the plots
and the agents' and controller's logs.  Progress goes to stderr; ``--json`` prints the emulated document
on stdout.  ``--live`` gives every controller of the run the same API and metrics ports (8181 and 9302),
so the dashboard and ``/metrics`` stay at one address while the run goes from round to round.  Needs
root, Open vSwitch and Mininet.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "emulate",
        help="run a scenario on an emulated Mininet/OVS fabric with real TCP traffic",
        description="Run a scenario (bundled name such as fig2, or a JSON file) on a Mininet fabric of Open "
                    "vSwitch switches with the EchelonFlow controller and real TCP traffic agents; compare "
                    "with the simulator.",
    )
    parser.add_argument("scenario", help="bundled scenario name or path to a scenario JSON file")
    parser.add_argument("--scheduler", action="append", metavar="NAME",
                        help="scheduler to run (repeatable; default: the scenario's list)")
    parser.add_argument("--json", action="store_true", help="print the emulated result document on stdout")
    parser.add_argument("--out", metavar="RUN_DIR", help="run folder (default: runs/<timestamp>-<scenario>)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-alone", action="store_true",
                        help="with several jobs, skip the runs of each job alone (slowdown then uses the "
                             "simulator's alone time)")
    parser.add_argument("--no-pacing", action="store_true",
                        help="agents only mark DSCP and do not pace flows at their allocated rates")
    parser.add_argument("--live", action="store_true",
                        help="serve the dashboard at http://127.0.0.1:8181/ui/ and metrics on port 9302 "
                             "during the run (the controller restarts per scheduler and round; the page "
                             "reconnects)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from echelonflow.scenario import load_scenario
    from echelonflow.schedulers import check_names

    names = check_names(args.scheduler or [])
    scenario = load_scenario(args.scenario)
    outcome = emulate_and_report(scenario, names or list(scenario.schedulers), out=args.out,
                                 plots=not args.no_plots, alone_runs=not args.no_alone,
                                 pace=not args.no_pacing, live=args.live)
    if outcome is None:
        return 1
    emulated, folder, table = outcome
    if args.json:
        json.dump(emulated.to_json_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(table)
        print(f"\nrun folder: {folder.path}")
    return 0


def emulate_and_report(scenario, schedulers, out=None, plots=True, alone_runs=True, progress=None, pace=True,
                       live=False):
    """Simulate, emulate every scheduler, write the run folder; returns (emulated, folder, table).

    Returns None after printing one error line when the emulation failed (an agent, the fabric or the
    controller); everything started has been stopped by then.
    """
    from echelonflow.results import Results
    from echelonflow.schedulers import get_scheduler
    from reports.runfolder import default_run_dir, write_run_folder
    from reports.table import format_comparison
    from simulator.engine import simulate
    from traffic.emulate import EmulationError, EmulationSettings, emulate_scheduler

    start = time.monotonic()
    say = progress or (lambda text: print(f"[{time.monotonic() - start:6.1f}s] {text}", file=sys.stderr,
                                          flush=True))
    run_dir = out or default_run_dir(scenario.name)
    simulated = Results(scenario.name, "simulate")
    for name in schedulers:
        simulated.runs.append(simulate(scenario.topology, scenario.jobs, get_scheduler(name)))
    emulated = Results(scenario.name, "emulate")
    settings = EmulationSettings(alone_runs=alone_runs, logs_dir=run_dir, pace=pace)
    if live:
        from controller.command import DEFAULT_API_PORT, DEFAULT_METRICS_PORT

        settings.api_port, settings.metrics_port = DEFAULT_API_PORT, DEFAULT_METRICS_PORT
        say(f"live dashboard: http://127.0.0.1:{DEFAULT_API_PORT}/ui/  metrics: "
            f"http://127.0.0.1:{DEFAULT_METRICS_PORT}/metrics")
    for sim_run in simulated.runs:
        sim_s = {j: r.completion_s for j, r in sim_run.jobs.items()}
        alone_fallback_s = None
        if not alone_runs and len(scenario.jobs) > 1:  # slowdowns against the simulated alone times
            scheduler = get_scheduler(sim_run.scheduler)
            alone_fallback_s = {job.job_id: simulate(scenario.topology, [job], scheduler).jobs[job.job_id]
                                .completion_s for job in scenario.jobs}
        say(f"scheduler {sim_run.scheduler}: emulating {scenario.name} "
            f"(simulated completion {_times(sim_s)})")
        try:
            result = emulate_scheduler(scenario.topology, scenario.jobs, sim_run.scheduler, sim_s, settings,
                                       say, alone_fallback_s)
        except EmulationError as exc:
            print(f"echelon: error: emulation of {scenario.name} under {sim_run.scheduler} failed: {exc} "
                  f"(logs in {run_dir}/logs/{sim_run.scheduler})", file=sys.stderr)
            return None
        emulated.runs.append(result)
        emu_s = {j: r.completion_s for j, r in result.jobs.items()}
        say(f"scheduler {sim_run.scheduler}: emulated completion {_times(emu_s)}")
    folder = write_run_folder(run_dir, emulated, [simulated], plots=plots)
    return emulated, folder, format_comparison(emulated, simulated)


def _times(completion_s: dict) -> str:
    return ", ".join(f"{job} {value:.2f} s" for job, value in completion_s.items())
