"""A client polling the API in a loop on one keep-alive connection cannot hold the controller's hub: a
scheduling round (here a green task that sleeps 10 ms at a time) due while requests stream in waits for
the request being served, not for every request the client sends.  Real server, real HTTP, the client
in another process (so its pace is not the GIL's)."""

from __future__ import annotations

import subprocess
import sys
import time

import eventlet

from controller.api import Api
from controller.api_server import ApiServer, GreenEvent, run_in_thread
from controller.registry import Registry
from controller.service import SchedulingService
from echelonflow.topology import fattree

POLLER = """
import sys, time
from controller.client import EchelonClient
with EchelonClient(socket_path=sys.argv[1], token="x") as client:
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        client.request("GET", "/jobs?limit=200")
"""


def test_a_polling_client_does_not_hold_the_hub(tmp_path):
    registry = Registry(fattree(20e6, 4))
    for j in range(150):
        registry.add_job(f"j{j}")
    api = Api(SchedulingService(registry, None, event_factory=GreenEvent), "t" * 32)
    requests: list[tuple[float, float]] = []
    wakes: list[tuple[float, float]] = []
    running = [True]

    def app(environ, start_response):
        began = time.perf_counter()
        try:
            return api(environ, start_response)
        finally:
            requests.append((began, time.perf_counter()))

    def probe():
        while running[0]:
            due = time.perf_counter() + 0.01
            eventlet.sleep(0.01)
            wakes.append((due, time.perf_counter()))

    server = ApiServer(app, port=0, socket_path=str(tmp_path / "fair.sock"))
    thread = run_in_thread(server, tasks=(probe,))
    try:
        subprocess.run([sys.executable, "-c", POLLER, server.socket_path, "2"], check=True, timeout=60)
    finally:
        running[0] = False
        thread.stop()
    assert len(requests) > 100
    # requests begun after the round was due and before it ran: none, or one that began at the edge
    overtaking = [sum(1 for began, _end in requests if due < began < woke) for due, woke in wakes]
    assert max(overtaking) <= 1, sorted(overtaking)[-10:]
