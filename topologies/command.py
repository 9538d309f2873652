"""``echelon fabric ...``: manual fabric bring-up and crash cleanup.

* ``echelon fabric clean`` removes what crashed fabrics left behind (after a SIGKILL nothing in the
  owning process runs): every OVS bridge/QoS/Queue tagged ``echelon-owner`` whose owner is dead, and
  what the dead owners' state files list (Mininet shells by pid + start time, veths).  Fabrics whose
  owner is alive are left alone unless ``--all``.
* ``echelon fabric up fattree --k 4`` runs a fabric until Ctrl-C (for poking around by hand).
"""

from __future__ import annotations

import argparse
import time

from echelonflow.errors import UserError
from echelonflow.topology_spec import add_topology_arguments
from topologies.fabric import FabricOptions, cluster_argument

#: The fabric's defaults, as the options below show them (written once, in FabricOptions).
DEFAULTS = FabricOptions()


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("fabric", help="bring up or clean up the emulated Mininet/OVS fabric")
    actions = parser.add_subparsers(dest="fabric_action", metavar="ACTION")
    actions.required = True

    clean = actions.add_parser("clean", help="remove bridges, QoS rows, veths and shells of dead fabrics")
    clean.add_argument("--all", action="store_true", help="also remove fabrics whose owner is still running")
    clean.set_defaults(run=run_clean)

    up = actions.add_parser("up", help="run a fabric until Ctrl-C")
    add_topology_arguments(up, positional=True)
    up.add_argument("--queues", type=int, default=DEFAULTS.queues,
                    help=f"queues per port (default {DEFAULTS.queues})")
    up.add_argument("--controller-port", type=int, default=DEFAULTS.controller_port,
                    help=f"OpenFlow controller port ({DEFAULTS.controller_port})")
    up.add_argument("--no-controller", action="store_true", help="no controller: switches act as learning "
                    "switches (fail_mode standalone; loop-free topologies only)")
    up.add_argument("--cluster", type=cluster_argument, default=None, metavar="SERVERS",
                    help="build it through Mininet's cluster mode on these comma-separated servers "
                         "(localhost only; docs/emulation.md)")
    up.set_defaults(run=run_up)


def run_clean(args: argparse.Namespace) -> int:
    from topologies import cleanup, ovs

    try:
        totals = cleanup.clean(include_alive=args.all)
    except ovs.OvsError as exc:
        raise UserError(f"fabric clean failed: {exc}") from None
    print(
        "removed {fabrics} fabric(s): {bridges} bridge(s), {rows} QoS/Queue row(s), {processes} process(es); "
        "left {skipped_alive} running fabric(s) alone".format(**totals)
    )
    return 0


def run_up(args: argparse.Namespace) -> int:
    from echelonflow.topology_spec import topology_from_arguments
    from topologies.fabric import Fabric

    topology = topology_from_arguments(args)
    fabric = Fabric(
        topology,
        controller_port=None if args.no_controller else args.controller_port,
        queues=args.queues,
        fail_mode="standalone" if args.no_controller else "secure",
        cluster=args.cluster,
    )
    with fabric:
        print(f"fabric {fabric.tag} up: {topology.name}, {len(topology.switches)} switches, "
              f"{len(topology.hosts)} hosts, started in {fabric.timings_s['start']:.1f} s; Ctrl-C stops it",
              flush=True)
        while True:
            time.sleep(3600)
