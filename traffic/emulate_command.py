"""``echelon emulate SCENARIO [--scheduler NAME]... [--repeat N] [--capture] [--fault SPEC]... [--json]
[--out RUN_DIR]``.

For each scheduler in turn (``--repeat N``: N times each): a fresh Mininet/OVS fabric and controller
(scheduler selected through the controller's API), one traffic agent per host used by the jobs, real
TCP transfers; then everything is torn down.  The same scenario is simulated for comparison, and one
table shows emulated (with repeats: median, min..max and standard deviation) and simulated values side
by side.  The run folder (default ``runs/<timestamp>-<scenario>/``) gets results.json (mode
``emulate``, the same shape as ``echelon simulate --json``, every repeat a run of its own, plus the
spread and the fidelity section), results-simulate.json, results.csv, fidelity.md, the plots and the
agents' and controller's logs; ``--capture`` adds pcaps of the hosts' first-hop switch ports and a
check of DSCP marks and flow times against them (:mod:`traffic.capture`).  Every round is watched by
the fidelity monitor (:mod:`traffic.monitor`); a run it does not trust is marked, not reported as a
plain result.

Nothing finished is lost: results.json is rewritten after every run with its status (partial until the
last one), so a failed run (one line, exit status 1), Ctrl-C or SIGTERM leaves the runs done so far and
says why the folder is partial.  Progress goes to stderr; ``--json`` prints the emulated document
(results.json) on stdout.  ``--live`` gives every controller of the run the same API and metrics ports
(8181 and 9302), so the dashboard and ``/metrics`` stay at one address while the run goes from round to
round.  ``--dilation F`` runs the scenario time-dilated by F (link rates / F, compute and arrivals x F)
and reports its times divided by F; ``--dilation auto`` picks F by a calibration on the fabric
(:mod:`traffic.calibrate`; docs/emulation.md, "Time dilation").  ``--fault link:a1-e1@3s`` (repeatable, like
the scenario's ``events``) takes a link or switch down, and optionally back, at that time in every round
and in the simulation alike (:mod:`traffic.fault_injector`, docs/faults.md).  ``agent:h5@3s`` kills
that host's agent in the round with all jobs together (its jobs fail in one line each, the others go
on); ``controller@4s`` kills the controller and restarts it on the same store (``controller@4s..6s``:
restarted at 6 s).  Needs root, Open vSwitch and Mininet.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from simulator.noise import DEFAULT_JITTER_S, jitter_ms_argument
from topologies.fabric import cluster_argument


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def _dilation(text: str) -> Any:
    """``auto`` or a factor >= 1."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value >= 1 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 'auto' or a number >= 1, got {text!r}")
    return value


def _congestion_control(text: str) -> str:
    """One of the kernel's TCP congestion controls (the agents set it on their channels)."""
    from traffic.transfer import available_congestion_controls

    offered = available_congestion_controls()
    if text not in offered:
        listed = ", ".join(offered) or "(none listed)"
        raise argparse.ArgumentTypeError(f"must be one of this kernel's {listed}, got {text!r}")
    return text


def _host_sysctl(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` of a network sysctl this kernel has (set in every host's namespace)."""
    from topologies.fabric import host_sysctl_problem

    name, sep, value = text.partition("=")
    problem = host_sysctl_problem(name, value) if sep else f"must be NAME=VALUE, got {text!r}"
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return name, value


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
    parser.add_argument("--repeat", type=_positive_int, default=1, metavar="N",
                        help="run every scheduler N times; tables and results.json give the median, mean "
                             "and spread (default 1)")
    parser.add_argument("--capture", action="store_true",
                        help="capture the hosts' first-hop switch ports (pcaps in the run folder) and check "
                             "each flow's DSCP marks and first/last packet times against the agents'")
    parser.add_argument("--dilation", type=_dilation, default=None, metavar="F|auto",
                        help="time dilation: divide every link rate and multiply every compute duration "
                             "and arrival by F so this machine forwards the fabric faithfully; results stay "
                             "in the scenario's own time scale. 'auto': the smallest of 1, 2, 4, 8, 16 whose "
                             "calibration traffic the fidelity monitor trusts (default: 1, no calibration)")
    parser.add_argument("--fault", action="append", default=[], metavar="KIND:TARGET@TIME[..TIME]",
                        help="inject a fault TIME seconds after the run starts (repeatable), e.g. "
                             "link:a1-e1@3s (link down at 3 s), link:a1-e1@3s..6s (and back at 6 s), "
                             "switch:c1@2s (all its links); added to the scenario's events, and the "
                             "simulation replays the same (docs/faults.md); agent:HOST@3s kills that host's "
                             "traffic agent (its jobs fail, the others go on); controller@4s kills the "
                             "controller and restarts it on the same registry store (controller@4s..6s: "
                             "restarted at 6 s)")
    parser.add_argument("--congestion-control", type=_congestion_control, metavar="NAME", default=None,
                        help="TCP congestion control of the agents' connections (one of the kernel's "
                             "net.ipv4.tcp_available_congestion_control; default: the hosts' own, bbr here)")
    parser.add_argument("--host-sysctl", type=_host_sysctl, action="append", default=[], metavar="NAME=VALUE",
                        help="set a network sysctl in every host's namespace (repeatable), e.g. "
                             "net.ipv4.tcp_recovery=5; for transport experiments (docs/emulation.md)")
    parser.add_argument("--cluster", type=cluster_argument, default=None, metavar="SERVERS",
                        help="build the fabric through Mininet's cluster mode (MininetCluster, remote-"
                             "capable nodes, SwitchBinPlacer) on these comma-separated servers; only "
                             "localhost is supported (docs/emulation.md, 'Beyond one machine')")
    parser.add_argument("--timing-noise-ms", type=jitter_ms_argument, default=DEFAULT_JITTER_S * 1e3,
                        metavar="MS",
                        help="also simulate the scenario with every compute up to MS ms longer (20 seeded "
                             f"samples, default {DEFAULT_JITTER_S * 1e3:g} ms; 0: not) and judge the "
                             "emulation against that spread too: a real fabric never starts two flows at "
                             "exactly the same instant (docs/emulation.md, timing noise)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from echelonflow.scenario import load_scenario
    from echelonflow.schedulers import check_names

    names = check_names(args.scheduler or [])
    scenario = load_scenario(args.scenario)
    scenario.events = with_faults(scenario, args.fault)
    outcome = emulate_and_report(scenario, names or list(scenario.schedulers), out=args.out,
                                 plots=not args.no_plots, alone_runs=not args.no_alone,
                                 pace=not args.no_pacing, live=args.live, repeat=args.repeat,
                                 capture=args.capture, dilation=args.dilation,
                                 congestion_control=args.congestion_control,
                                 host_sysctls=dict(args.host_sysctl), timing_noise_ms=args.timing_noise_ms,
                                 cluster=args.cluster)
    if outcome is None:
        return 1
    emulated, folder, table = outcome
    if args.json:  # exactly results.json: the runs plus status, summary and fidelity
        with open(folder.results, encoding="utf-8") as fh:
            json.dump(json.load(fh), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(table)
        print(f"\nrun folder: {folder.path}")
    return 1 if _unplanned_failures(emulated, scenario.events) else 0


def _unplanned_failures(emulated: Any, faults: Any) -> list[str]:
    """Failed jobs no ``--fault agent:HOST`` explains (an agent died by itself): these fail the command."""
    killed = tuple(f"agent {f.target[0]} died" for f in faults if f.kind == "agent")
    return [reason for run in emulated.runs for reason in (run.failed_jobs or {}).values()
            if not (killed and reason.startswith(killed))]


def with_faults(scenario: Any, specs: list[str]) -> list:
    """The scenario's events plus the ``--fault`` ones, checked like the scenario's own (UserError)."""
    from echelonflow.errors import UserError
    from echelonflow.faults import check_no_partition, flow_pairs, parse_fault

    events = list(scenario.events)
    for spec in specs:
        events += parse_fault(spec, scenario.topology)
    events.sort(key=lambda e: e.at_s)
    agents = [e.target[0] for e in events if e.kind == "agent"]
    if len(set(agents)) != len(agents):
        raise UserError(f"--fault: agent {max(agents, key=agents.count)} is killed twice; once is enough")
    check_no_partition(scenario.topology, events, flow_pairs(scenario.jobs), field="--fault")
    return events


def emulate_and_report(scenario, schedulers, out=None, plots=True, alone_runs=True, progress=None, pace=True,
                       live=False, repeat=1, capture=False, dilation=None,
                       congestion_control=None, host_sysctls=None, timing_noise_ms=0.0, cluster=None):
    """Simulate, emulate every scheduler ``repeat`` times, write the run folder; returns (emulated, folder,
    table).

    ``dilation`` (a factor >= 1, or ``"auto"``: calibrated on the fabric first) emulates the scenario
    time-dilated and reports its times divided by the factor, i.e. next to the undilated simulation.
    ``timing_noise_ms`` > 0 also simulates it under that much compute jitter (``simulator.noise``), which
    the fidelity section judges the emulation against as well.  ``cluster`` (servers) builds every
    fabric through Mininet's cluster mode (``localhost`` only; a ``"auto"`` dilation is calibrated on a
    plain fabric).

    Returns None after printing one error line when the emulation failed (an agent, the fabric or the
    controller); everything started has been stopped by then and the run folder holds the runs that
    finished, marked partial.  Ctrl-C / SIGTERM likewise mark it partial, then propagate.
    """
    from echelonflow.bounds import attach_lower_bounds
    from echelonflow.dilation import contract_run, dilate_jobs, dilate_topology
    from echelonflow.results import Results
    from echelonflow.schedulers import get_scheduler
    from echelonflow.topology import DEFAULT_MTU_BYTES
    from reports.fidelity import dilation_line
    from reports.runfolder import default_run_dir, write_run_folder
    from reports.table import format_comparison, format_failures, format_trust
    from simulator.engine import simulate
    from simulator.noise import timing_noise_section
    from traffic.emulate import EmulationError, EmulationSettings, emulate_scheduler, fault_records
    from traffic.monitor import Thresholds

    start = time.monotonic()
    say = progress or (lambda text: print(f"[{time.monotonic() - start:6.1f}s] {text}", file=sys.stderr,
                                          flush=True))
    run_dir = out or default_run_dir(scenario.name)
    if scenario.topology.mtu_bytes is None:  # idealised links cannot be emulated: both sides use real frames
        scenario.topology.mtu_bytes = DEFAULT_MTU_BYTES
    simulated = Results(scenario.name, "simulate")
    for name in schedulers:
        simulated.runs.append(simulate(scenario.topology, scenario.jobs, get_scheduler(name),
                                       events=scenario.events))
    attach_lower_bounds(simulated.runs, scenario.jobs, scenario.topology)
    if timing_noise_ms:
        simulated.timing_noise = timing_noise_section(scenario.topology, scenario.jobs, schedulers,
                                                      timing_noise_ms / 1e3, events=scenario.events)
    emulated = Results(scenario.name, "emulate")
    if dilation == "auto":
        from traffic.calibrate import CalibrationError, calibrate

        say(f"calibrating the time dilation on {scenario.topology.name} (factors tried until the fidelity "
            f"monitor trusts one)")
        try:
            emulated.dilation = calibrate(scenario.topology, scenario.jobs, say, logs_dir=run_dir)
        except CalibrationError as exc:
            print(f"echelon: error: {exc}", file=sys.stderr)
            return None
    elif dilation is not None:
        emulated.dilation = {"factor": float(dilation), "chosen_by": "hand"}
    factor = emulated.dilation["factor"] if emulated.dilation else 1.0
    base = EmulationSettings(alone_runs=alone_runs, logs_dir=run_dir, pace=pace, capture=capture,
                             monitor_thresholds=Thresholds(), tcp_congestion_control=congestion_control,
                             host_sysctls=dict(host_sysctls or {}), cluster=cluster)

    def dilate(new_factor: float) -> tuple[Any, Any, EmulationSettings]:
        """The emulated topology, jobs and settings at ``new_factor`` (control periods, timeouts, the
        monitor's thresholds and the faults' times stretched with it)."""
        if new_factor != 1.0:
            say(f"time dilation x{new_factor:g}: links at {scenario.topology.rate_bps / new_factor / 1e6:g} "
                f"Mbit/s, compute, arrivals and the control loop's periods x{new_factor:g}; times below: "
                f"the scenario's own time scale (wall clock / {new_factor:g})")
        dilated = replace(base.dilated(new_factor),
                          faults=[replace(e, at_s=e.at_s * new_factor) for e in scenario.events])
        return dilate_topology(scenario.topology, new_factor), dilate_jobs(scenario.jobs, new_factor), dilated

    emu_topology, emu_jobs, settings = dilate(factor)
    if congestion_control or host_sysctls:
        say("hosts' transport: " + ", ".join(
            ([f"congestion control {congestion_control}"] if congestion_control else [])
            + [f"{k}={v}" for k, v in (host_sysctls or {}).items()]))
    for event in scenario.events:
        say(f"fault planned: {event.describe()}" + (f" (x{factor:g}: {event.at_s * factor:g} s wall clock)"
                                                     if factor != 1.0 else ""))
    if live:
        from controller.config import ControllerConfig

        defaults = ControllerConfig()
        for chosen in (base, settings):  # base too: a re-dilated run (--dilation auto) keeps them
            chosen.api_port, chosen.metrics_port = defaults.api_port, defaults.metrics_port
        say(f"live dashboard: http://127.0.0.1:{defaults.api_port}/ui/  metrics: "
            f"http://127.0.0.1:{defaults.metrics_port}/metrics")
    planned = len(simulated.runs) * repeat

    def checkpoint(reason: str | None = None, complete: bool = False) -> Any:
        status = {"complete": complete, "runs_done": len(emulated.runs), "runs_planned": planned,
                  "repeat": repeat}
        if reason:
            status["reason"] = reason
        return write_run_folder(run_dir, emulated, [simulated], plots=plots and complete, status=status)

    running = "still running, or the emulation died before finishing (e.g. killed)"
    checkpoint(running)
    try:
        for sim_run in simulated.runs:
            sim_s = {j: r.completion_s for j, r in sim_run.jobs.items()}
            alone_s = None
            if not alone_runs and len(scenario.jobs) > 1:  # slowdowns against the simulated alone times
                scheduler = get_scheduler(sim_run.scheduler)
                alone_s = {job.job_id: simulate(scenario.topology, [job], scheduler, events=scenario.events)
                           .jobs[job.job_id].completion_s for job in scenario.jobs}
            index = 0
            while index < repeat:
                name = sim_run.scheduler if repeat == 1 else f"{sim_run.scheduler}-r{index + 1}"
                which = "" if repeat == 1 else f" (repeat {index + 1} of {repeat})"
                say(f"scheduler {sim_run.scheduler}{which}: emulating {scenario.name} "
                    f"(simulated completion {_times(sim_s)})")
                try:
                    # the channel plan needs only which flows overlap: the same at any dilation
                    result = emulate_scheduler(emu_topology, emu_jobs, sim_run.scheduler,
                                               {j: factor * s for j, s in sim_s.items()}, settings, say,
                                               None if alone_s is None else
                                               {j: factor * s for j, s in alone_s.items()},
                                               run_name=name, simulated_flows=sim_run.flows)
                except EmulationError as exc:
                    reason = f"emulation of {scenario.name} under {sim_run.scheduler}{which} failed: {exc}"
                    folder = checkpoint(reason)
                    print(f"echelon: error: {reason} (logs in {run_dir}/logs/{name}; the "
                          f"{len(emulated.runs)} finished run(s) are in {folder.results}, marked partial)",
                          file=sys.stderr)
                    return None
                if dilation == "auto" and not emulated.runs and result.trusted is False \
                        and factor * 2 <= MAX_DILATION:
                    factor = escalate(emulated.dilation, result, run_dir, name, say)
                    emu_topology, emu_jobs, settings = dilate(factor)
                    continue  # the same run again, slower
                if dilation == "auto" and not emulated.runs:
                    emulated.dilation.setdefault("confirmation", []).append(
                        {"factor": factor, "trusted": result.trusted is not False,
                         "reasons": monitor_reasons(result)})
                if factor != 1.0:
                    result = contract_run(result, factor)
                if scenario.events:  # in the scenario's own time scale
                    result.faults = fault_records(scenario.events)
                result.repeat = index
                attach_lower_bounds([result], scenario.jobs, scenario.topology)
                emulated.runs.append(result)
                checkpoint(running)
                emu_s = {j: r.completion_s for j, r in result.jobs.items()}
                trust = "" if result.trusted else " (NOT trusted by the fidelity monitor)"
                say(f"scheduler {sim_run.scheduler}{which}: emulated completion {_times(emu_s)}{trust}")
                for job_id, why in (result.failed_jobs or {}).items():
                    say(f"scheduler {sim_run.scheduler}{which}: job {job_id} FAILED: {why}")
                index += 1
    except (KeyboardInterrupt, SystemExit) as stop:  # Ctrl-C, or SIGTERM/SIGHUP unwinding the same way
        signum = getattr(stop, "signum", None)
        if isinstance(stop, SystemExit):
            checkpoint(f"stopped (exit status {stop.code})")
        else:
            checkpoint(f"stopped by signal {signum}" if signum else "interrupted (Ctrl-C)")
        raise
    folder = checkpoint(complete=True)
    notes = "\n".join(line for line in (format_failures(emulated), format_trust(emulated),
                                         dilation_line(emulated.dilation)) if line)
    return emulated, folder, format_comparison(emulated, simulated) + (f"\n{notes}" if notes else "")


#: Largest factor ``--dilation auto`` goes to (the calibration's last).
MAX_DILATION = 16.0


def escalate(dilation: dict[str, Any], run: Any, run_dir: str, run_name: str,
             say: Callable[[str], None]) -> float:
    """``--dilation auto`` after a first run the fidelity monitor did not trust: the factor doubles.

    The calibration loads the fabric with plain bulk traffic, which leaves out what the real run costs
    besides forwarding (the controller deciding on every start and finish, an agent per host writing and
    pacing each flow's segments): at k=8 it trusted 10 Mbit/s while the first real round left the
    machine 1 % idle.  So the first run confirms the factor, and until one is trusted (or
    :data:`MAX_DILATION`) it is run again, twice as slow; the untrusted trial keeps its logs under
    ``logs/<run>-x<F>-untrusted`` and its verdict in ``dilation.confirmation``."""
    factor = float(dilation["factor"])
    reasons = monitor_reasons(run)
    dilation.setdefault("confirmation", []).append({"factor": factor, "trusted": False, "reasons": reasons})
    dilation["factor"] = factor * 2
    dilation["chosen_by"] = "calibration, then the first run"
    logs = os.path.join(run_dir, "logs", run_name)
    if os.path.isdir(logs):
        os.replace(logs, f"{logs}-x{factor:g}-untrusted")
    say(f"time dilation x{factor:g}: the first run was NOT trusted ({'; '.join(reasons) or 'no reason'}); "
        f"running it again at x{factor * 2:g}")
    return factor * 2


def monitor_reasons(run: Any) -> list[str]:
    """Why the fidelity monitor did not trust a run, over its rounds (empty when it did)."""
    return [reason for doc in (run.fidelity_monitor or {}).get("rounds", {}).values()
            for reason in doc.get("reasons", [])]


def _times(completion_s: dict) -> str:
    return ", ".join(f"{job} {value:.2f} s" for job, value in completion_s.items())
