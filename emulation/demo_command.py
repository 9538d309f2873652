"""``echelon demo``: check the set-up, then emulate the paper's Fig. 2 and one fat-tree scenario.

The set-up check is idempotent: it starts Open vSwitch if it is not running (nothing else is changed)
and names what is missing and how to get it otherwise.  Then each scenario runs under fair, coflow and
echelon exactly as ``echelon emulate`` would (:func:`emulation.experiment.emulate_and_report`), and the
demo prints the side-by-side tables and where the run folders (CSV, plots, logs) are.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys

from echelonflow.errors import UserError
from echelonflow.scenario import load_scenario
from emulation.experiment import EmulationRequest, emulate_and_report
from reports.runfolder import default_run_dir
from simulator.noise import DEFAULT_JITTER_S
from topologies.ovs import ensure_ovs_running, ovs_running

DEFAULT_FATTREE = "fattree-gpipe-ring"
SCHEDULERS = ("fair", "coflow", "echelon")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="check the set-up and emulate fig2 and a fat-tree scenario under fair, coflow and echelon",
        description="Check the machine (root, Open vSwitch, Mininet, os-ken), then emulate the paper's "
                    "Fig. 2 and one fat-tree scenario under fair, coflow and echelon.",
    )
    parser.add_argument("--fattree", default=DEFAULT_FATTREE, metavar="SCENARIO",
                        help=f"the fat-tree scenario to run after fig2 (default {DEFAULT_FATTREE})")
    parser.add_argument("--quick", action="store_true", help="only fig2")
    parser.add_argument("--check-only", action="store_true", help="only the set-up check")
    parser.add_argument("--out-base", default="runs", metavar="DIR",
                        help="where run folders go (default runs)")
    parser.set_defaults(run=run)


def setup_problems() -> list[str]:
    """What prevents an emulation here, each with the fix; starts OVS when only that is missing."""
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (Mininet and Open vSwitch need it): use sudo")
    for tool, package in (("ovs-vsctl", "openvswitch-switch"), ("mnexec", "mininet"), ("tc", "iproute2"),
                          ("ethtool", "ethtool"), ("ping", "iputils-ping")):
        if shutil.which(tool) is None:
            problems.append(f"{tool} not found: apt-get install {package}")
    if importlib.util.find_spec("mininet") is None:
        problems.append("the mininet Python module is not importable: run bash bootstrap.sh (a venv with "
                        "--system-site-packages over Debian's python3-mininet)")
    if importlib.util.find_spec("os_ken") is None and importlib.util.find_spec("ryu") is None:
        problems.append("neither os-ken nor ryu is installed: run bash bootstrap.sh")
    if not problems:
        was_running = ovs_running()
        try:
            ensure_ovs_running()
        except Exception as exc:  # report, do not crash: the demo must say what to do
            problems.append(f"Open vSwitch is not running and could not be started: {exc}")
        else:
            print(f"set-up: Open vSwitch {'running' if was_running else 'started'}", file=sys.stderr)
    return problems


def run(args: argparse.Namespace) -> int:
    scenarios = [load_scenario("fig2")] + ([] if args.quick else [load_scenario(args.fattree)])
    problems = setup_problems()
    if problems:
        for problem in problems:
            print(f"set-up: {problem}", file=sys.stderr)
        raise UserError(f"the machine is not ready for emulation ({len(problems)} problem(s) above)")
    print("set-up: ok (root, Open vSwitch, Mininet, controller framework)", file=sys.stderr)
    if args.check_only:
        return 0
    folders = []
    for scenario in scenarios:
        out = default_run_dir(scenario.name, base=args.out_base)
        request = EmulationRequest(list(SCHEDULERS), out=out, timing_noise_ms=DEFAULT_JITTER_S * 1e3)
        outcome = emulate_and_report(scenario, request)
        print(outcome.table)
        print(f"run folder: {outcome.folder.path}\n", flush=True)
        folders.append(outcome.folder)
    print("demo done. Tables: results.csv; plots: timeline-*.png (per host, like the paper's Fig. 2) and "
          "jct.png (completion and slowdown, emulated vs simulated):")
    for folder in folders:
        print(f"  {folder.path}")
    return 0
