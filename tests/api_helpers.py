"""The controller's API served as the controller serves it: a registry, its scheduling service and the
WSGI app behind the real server (``controller.api_server``: eventlet on a Unix socket and a loopback TCP
port, in a thread of its own), called through real clients (``controller.client``).  The one way the
API tests serve it; the in-process WSGI call without a server is ``tests.controller_helpers.call``."""

from __future__ import annotations

import time
from typing import Any

from controller.api import Api
from controller.api_server import ApiServer, GreenEvent, run_in_thread
from controller.client import EchelonClient
from controller.registry import Registry
from controller.service import SchedulingService
from echelonflow.topology import fattree
from tests.controller_helpers import TOKEN
from tests.helpers import RecordingSink

#: The body limit the served API has: small, so a test's oversized body is cheap to send.
MAX_BODY_BYTES = 64 * 1024


def flows(*specs: tuple[str, str, str, int]) -> list[dict[str, Any]]:
    """Flow declarations (``flow_id``, ``src``, ``dst``, ``size_bytes``) as a request body lists them."""
    return [{"flow_id": f, "src": a, "dst": b, "size_bytes": n} for f, a, b, n in specs]


class ServedApi:
    """A registry (a fat-tree k=4 at 20 Mbit/s unless given one, with its store when it has one) behind
    the real API server, with a client on the Unix socket (``unix``) and one on TCP (``tcp``).
    Enforcement goes to a :class:`~tests.helpers.RecordingSink` (``sink``).  The service's clock is the
    wall clock, or the test's when ``now_s`` is given (moved with :meth:`tick`).  :meth:`stop` stops the
    server and closes the clients and the store."""

    def __init__(self, tmp_path, registry: Registry | None = None, now_s: float | None = None,
                 name: str = "api.sock", **server_options: Any) -> None:
        self.now_s = now_s
        self.registry = registry or Registry(fattree(20e6, 4))
        self.sink = RecordingSink()
        self.service = SchedulingService(self.registry, self.sink, now=self._now, event_factory=GreenEvent)
        self.api = Api(self.service, TOKEN, max_body_bytes=MAX_BODY_BYTES)
        self.server = ApiServer(self.api, port=0, socket_path=str(tmp_path / name), **server_options)
        self.thread = run_in_thread(self.server)
        self.unix = EchelonClient(socket_path=self.server.socket_path, token=TOKEN)
        self.tcp = EchelonClient(url=f"http://127.0.0.1:{self.server.port}", token=TOKEN)

    def _now(self) -> float:
        return time.time() if self.now_s is None else self.now_s

    def seed(self) -> None:
        """Job ``j1`` with EchelonFlow ``e1`` of two flows, ``f2`` started, and channel ``c1``."""
        self.unix.register_job("j1")
        self.unix.register_echelon("j1", "e1", flows(("f1", "h1", "h5", 1000), ("f2", "h2", "h6", 1000)))
        self.unix.flow_started("j1", "f2", 40000, 5201)
        self.unix.register_channel("c1", "h1", "h5", 40001, 46000)

    def run_job(self, job_id: str) -> None:
        """Register ``job_id`` with one EchelonFlow of two flows h1 -> h5, start and finish them now."""
        c = self.unix
        c.register_job(job_id)
        c.register_echelon(job_id, "e", flows(("f0", "h1", "h5", 1000), ("f1", "h1", "h5", 1000)))
        for i, flow_id in enumerate(("f0", "f1")):
            c.flow_started(job_id, flow_id, 40000 + i, 5201)
        for flow_id in ("f0", "f1"):
            c.flow_finished(job_id, flow_id)

    def tick(self, now_s: float) -> None:
        """The test's clock moves to ``now_s`` and the service's interval pass runs (with the retention)."""
        self.now_s = now_s
        self.service.tick()  # no request is being served meanwhile: the test waits for each answer

    def stop(self) -> None:
        self.unix.close()
        self.tcp.close()
        self.thread.stop()
        if self.registry.store is not None:
            self.registry.store.close()
