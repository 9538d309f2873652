"""``echelon emulate SCENARIO [--scheduler NAME]... [--repeat N] [--capture] [--fault SPEC]... [--json]
[--out RUN_DIR]``: the command line of an experiment (:mod:`emulation.experiment`).

The arguments become one :class:`~emulation.experiment.EmulationRequest` (each checked as it is read:
a bad one is one line and exit status 2), the ``--fault`` specs join the scenario's own events (checked
like them), and the experiment does the rest: for each scheduler in turn (``--repeat N``: N times each)
a fresh Mininet/OVS fabric and controller, one traffic agent per host, real TCP; the same scenario
simulated beside it; a run folder.  The command prints the side-by-side table and the folder (or, with
``--json``, the folder's results.json).  Exit status 1 when a run failed (one line on stderr, the
finished runs kept in the folder, marked partial) or a job failed that no ``--fault agent:HOST``
explains.

Options in brief (their help says more): ``--live`` keeps the dashboard and ``/metrics`` at one address
(8181 and 9302) while the run goes from phase to phase; ``--dilation F`` runs the scenario time-dilated
by F (link rates / F, compute and arrivals x F) and reports its times divided by F, ``--dilation auto``
picks F by a calibration on the fabric (docs/emulation.md, "Time dilation"); ``--fault link:a1-e1@3s``
(repeatable) takes a link or switch down, and optionally back, in every phase and in the simulation
alike, ``agent:h5@3s`` kills that host's agent in the phase with all jobs together (its jobs fail in one
line each, the others go on), ``controller@4s`` kills the controller and restarts it on the same store
(``controller@4s..6s``: restarted at 6 s), ``ovs@3s`` restarts ovs-vswitchd, every switch's flows,
meters and ports gone at once (``ovs@3s..5s``: started again at 5 s) (docs/faults.md).  Needs root,
Open vSwitch and Mininet.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace

from echelonflow.errors import UserError
from echelonflow.faults import FaultEvent, check_no_partition, flow_pairs, parse_fault
from echelonflow.limits import DILATION
from echelonflow.scenario import Scenario, load_scenario
from echelonflow.schedulers import check_names
from emulation.experiment import EmulationRequest, emulate_and_report
from simulator.noise import DEFAULT_JITTER_S, jitter_ms_argument
from topologies.fabric import cluster_argument, host_sysctl_problem
from traffic.result import DIED, Failure
from traffic.transfer import available_congestion_controls


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def _dilation(text: str) -> float | str:
    """``auto`` or a factor in ``limits.DILATION`` (checked as the arguments are read: before the
    simulation side or any fabric runs)."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not DILATION.low <= value <= DILATION.high:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be 'auto' or a number from {DILATION.low:g} to "
                                         f"{DILATION.high:g}, got {text!r}")
    return value


def _congestion_control(text: str) -> str:
    """One of the kernel's TCP congestion controls (the agents set it on their channels)."""
    offered = available_congestion_controls()
    if text not in offered:
        listed = ", ".join(offered) or "(none listed)"
        raise argparse.ArgumentTypeError(f"must be one of this kernel's {listed}, got {text!r}")
    return text


def _host_sysctl(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` of a network sysctl this kernel has (set in every host's namespace)."""
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
                             "during the run (the controller restarts per scheduler and phase; the page "
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
                             "restarted at 6 s); ovs@3s stops ovs-vswitchd, the daemon behind every "
                             "switch, and starts it again (ovs@3s..5s: at 5 s): the switches lose their "
                             "flows, meters and ports and the controller puts them back")
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
    names = check_names(args.scheduler or [])
    loaded = load_scenario(args.scenario)
    scenario = replace(loaded, events=with_faults(loaded, args.fault))
    outcome = emulate_and_report(scenario, request_of(args, names or list(scenario.schedulers)))
    if args.json:  # exactly results.json: the runs plus status, summary and fidelity
        with open(outcome.folder.results, encoding="utf-8") as fh:
            json.dump(json.load(fh), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(outcome.table)
        print(f"\nrun folder: {outcome.folder.path}")
    return 1 if unplanned_failures(outcome.failures, scenario.events) else 0


def request_of(args: argparse.Namespace, schedulers: Sequence[str]) -> EmulationRequest:
    """The experiment the arguments ask for."""
    return EmulationRequest(schedulers=list(schedulers), out=args.out, plots=not args.no_plots,
                            alone_runs=not args.no_alone, pace=not args.no_pacing, live=args.live,
                            repeat=args.repeat, capture=args.capture, dilation=args.dilation,
                            congestion_control=args.congestion_control, host_sysctls=dict(args.host_sysctl),
                            timing_noise_ms=args.timing_noise_ms, cluster=args.cluster)


def unplanned_failures(failures: Sequence[Failure], faults: Sequence[FaultEvent]) -> list[Failure]:
    """Job failures no ``--fault agent:HOST`` explains (an agent that died by itself, or one the faults
    did not name): these fail the command."""
    killed = {f.target[0] for f in faults if f.kind == "agent"}
    return [failure for failure in failures if not (failure.cause == DIED and failure.host in killed)]


def with_faults(scenario: Scenario, specs: Sequence[str]) -> list[FaultEvent]:
    """The scenario's events plus the ``--fault`` ones, checked like the scenario's own (UserError)."""
    events = list(scenario.events)
    for spec in specs:
        events += parse_fault(spec, scenario.topology)
    events.sort(key=lambda e: e.at_s)
    agents = [e.target[0] for e in events if e.kind == "agent"]
    if len(set(agents)) != len(agents):
        raise UserError(f"--fault: agent {max(agents, key=agents.count)} is killed twice; once is enough")
    check_no_partition(scenario.topology, events, flow_pairs(scenario.jobs), field="--fault")
    return events
