"""``echelon controller``: run the OpenFlow controller for a topology in the foreground until Ctrl-C.

Start it before ``echelon fabric`` (Mininet's RemoteController default port is 6653, ours too); the
fabric's switches connect to it and it routes and enforces as :mod:`controller.app` describes.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from controller.config import ControllerConfig
from echelonflow.errors import UserError
from echelonflow.topology import add_topology_arguments

DEFAULT_OFP_PORT = 6653
DEFAULTS = ControllerConfig()


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "controller", help="run the OpenFlow controller (os-ken/Ryu) for a topology",
        description="Run the EchelonFlow OpenFlow 1.3 controller in the foreground (Ctrl-C stops it).",
    )
    add_topology_arguments(parser)
    parser.add_argument("--queues", type=int, default=DEFAULTS.queues,
                        help="priority queues per port (as the fabric)")
    parser.add_argument("--ofp-port", type=int, default=DEFAULT_OFP_PORT, help="OpenFlow listen port")
    parser.add_argument("--ofp-host", default="127.0.0.1",
                        help="OpenFlow listen address (default loopback; 0.0.0.0 for remote switches)")
    parser.add_argument("--api-port", type=int, default=DEFAULTS.api_port, help="HTTP API port on 127.0.0.1")
    parser.add_argument("--api-socket", default=None,
                        help="HTTP API unix socket (default /run/echelon/controller-<api-port>.sock)")
    parser.add_argument("--store", default=DEFAULTS.store, help="registry SQLite file (kept across restarts)")
    parser.add_argument("--token-file", default=DEFAULTS.token_file,
                        help="where the API bearer token is written")
    parser.add_argument("--interval-s", type=float, default=DEFAULTS.interval_s,
                        help="reschedule interval in seconds")
    parser.add_argument("--metrics-port", type=int, default=DEFAULTS.metrics_port,
                        help="Prometheus /metrics port (default %(default)s, as Faucet's exporter)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="address the metrics listen on (default loopback only)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from controller.launcher import ControllerProcess
    from echelonflow.topology import topology_from_arguments

    topology = topology_from_arguments(args)
    if not 1 <= args.api_port <= 65535:
        raise UserError(f"--api-port must be 1..65535, got {args.api_port}")
    if not 1 <= args.metrics_port <= 65535:
        raise UserError(f"--metrics-port must be 1..65535, got {args.metrics_port}")
    if args.metrics_port == args.api_port:
        raise UserError(f"--metrics-port and --api-port must differ, both are {args.api_port}")
    if not args.interval_s > 0:
        raise UserError(f"--interval-s must be positive, got {args.interval_s}")
    socket_path = args.api_socket or f"/run/echelon/controller-{args.api_port}.sock"
    controller = ControllerProcess(topology, ofp_port=args.ofp_port, queues=args.queues,
                                   api_port=args.api_port, store_path=args.store, token_file=args.token_file,
                                   api_socket_path=socket_path, interval_s=args.interval_s,
                                   metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                                   ofp_host=args.ofp_host)
    controller.start()
    try:
        print(f"echelon controller: pid {controller.pid}, topology {topology.name}, "
              f"OpenFlow on {args.ofp_host}:{args.ofp_port}, API on {controller.api_url} and "
              f"unix:{socket_path} "
              f"(token {args.token_file}), registry {args.store}, log {controller.log_path}; "
              "Ctrl-C stops it", flush=True)
        print(f"dashboard: {controller.dashboard_url}\nmetrics:   {controller.metrics_url}", flush=True)
        while controller.proc is not None and controller.proc.poll() is None:
            time.sleep(0.5)
        raise UserError(f"the controller {controller.exit_reason()}")
    finally:
        controller.stop()
