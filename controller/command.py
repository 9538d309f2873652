"""``echelon controller``: run the OpenFlow controller for a topology in the foreground until Ctrl-C.

Start it before ``echelon fabric`` (Mininet's RemoteController default port is 6653, ours too); the
fabric's switches connect to it and it routes and enforces as :mod:`controller.app` describes.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from typing import Any

from controller.config import SETTINGS, ControllerConfig, add_arguments, from_arguments
from echelonflow.errors import UserError
from echelonflow.topology_spec import add_topology_arguments, topology_from_arguments

DEFAULT_OFP_PORT = 6653
#: Settings the command does not offer as they are: the topology comes from the options every command
#: that builds one takes (``add_topology_arguments``), and the launcher writes it as the spec file.
TOPOLOGY_SETTINGS = ("topology_file", "topology", "topology_params", "rate_mbps")
#: Every other setting of :data:`controller.config.SETTINGS` is an option (``api_port`` -> ``--api-port``).
OPTIONS = tuple(s.name for s in SETTINGS if s.name not in TOPOLOGY_SETTINGS)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "controller", help="run the OpenFlow controller (os-ken/Ryu) for a topology",
        description="Run the EchelonFlow OpenFlow 1.3 controller in the foreground (Ctrl-C stops it).",
    )
    add_topology_arguments(parser)
    parser.add_argument("--ofp-port", type=int, default=DEFAULT_OFP_PORT, help="OpenFlow listen port")
    parser.add_argument("--ofp-host", default="127.0.0.1",
                        help="OpenFlow listen address (default loopback; 0.0.0.0 for remote switches)")
    add_arguments(parser, OPTIONS)
    parser.set_defaults(run=run)


def config_from_arguments(args: argparse.Namespace) -> ControllerConfig:
    """The controller's settings the options give, files as absolute paths (the launcher resolves
    relative ones in its own working directory, the command's user means the current one)."""
    config = from_arguments(args, OPTIONS)
    if config.metrics_port == config.api_port:
        raise UserError(f"--metrics-port and --api-port must differ, both are {config.api_port}")
    return replace(config, store=os.path.abspath(config.store), token_file=os.path.abspath(config.token_file),
                   api_socket=config.api_socket and os.path.abspath(config.api_socket))


def run(args: argparse.Namespace) -> int:
    from controller.launcher import ControllerProcess, check_ofp_port

    topology = topology_from_arguments(args)
    check_ofp_port("--ofp-port", args.ofp_port)
    config = config_from_arguments(args)
    controller = ControllerProcess(topology, config, ofp_port=args.ofp_port, ofp_host=args.ofp_host)
    controller.start()
    try:
        print(f"echelon controller: pid {controller.pid}, topology {topology.name}, "
              f"OpenFlow on {args.ofp_host}:{args.ofp_port}, API on {controller.api_url} and "
              f"unix:{controller.api_socket_path} "
              f"(token {controller.token_file}), registry {controller.store_path}, "
              f"log {controller.log_path}; "
              "Ctrl-C stops it", flush=True)
        print(f"dashboard: {controller.dashboard_url}\nmetrics:   {controller.metrics_url}", flush=True)
        while controller.proc is not None and controller.proc.poll() is None:
            time.sleep(0.5)
        raise UserError(f"the controller {controller.exit_reason()}")
    finally:
        controller.stop()
