"""The agent's side of a controller restart (traffic/registry_link.py, controller/client.py).

A controller killed with SIGKILL may have stored a report (a flow's start or finish) without answering
it; the agent repeats the report to the successor, which loaded the store and refuses it (409: already
active, already finished).  That refusal failed the run although nothing was lost.  Here the real API
server (registry, scheduling service and SQLite store; ``python -m controller.api_server``, no fabric)
is killed with SIGKILL and started again on the same store, socket and token file, and the repeated
report is produced exactly as the restart leaves it: the registry already has it.

Also: the client turns every way a dying server can cut an answer (a body cut short, a token file its
predecessor took along) into "unreachable" (status 0), which the agent rides out, instead of an
exception that ended the agent's reporting threads; and a held sender fails with the registry's error
instead of holding on silently until its peer gives up 30 s later.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from controller.client import ApiClientError, EchelonClient
from echelonflow.model import FlowTask, Job
from tests.waiting import wait_until
from traffic.registry_link import RegistryLink, RegistryLinkError
from traffic.runspec import RegistrySettings
from traffic.transfer import Channel, ChannelRoute

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Server:
    """``python -m controller.api_server`` on a store, a socket and a token file that outlive it."""

    def __init__(self, tmp_path) -> None:
        self.socket_path, self.token_file = str(tmp_path / "api.sock"), str(tmp_path / "token")
        self.store, self.log = str(tmp_path / "registry.sqlite"), str(tmp_path / "api.log")
        self.proc: subprocess.Popen | None = None

    def start(self) -> Server:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        argv = [sys.executable, "-m", "controller.api_server", "--topology", "fattree", "--k", "4",
                "--port", str(port), "--socket", self.socket_path, "--token-file", self.token_file,
                "--store", self.store, "--interval-s", "0.1"]
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: self._serving(), 20, "the API server serving")
        return self

    def _serving(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self._log_tail()
        try:
            with EchelonClient(socket_path=self.socket_path, token_file=self.token_file) as client:
                return client.health()["status"] == "ok"
        except ApiClientError:
            return False

    def _log_tail(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as fh:
            return fh.read()[-2000:]

    def kill(self) -> None:
        """SIGKILL, as the emulation's controller fault does (nothing of it runs afterwards)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def client(self) -> EchelonClient:
        return EchelonClient(socket_path=self.socket_path, token_file=self.token_file)


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path).start()
    with srv.client() as client:
        client.set_scheduler("echelon")
    yield srv
    srv.stop()


def _link_with_a_flow(server: Server, job_id: str = "j"):
    """A RegistryLink (polling every 50 ms) with job ``job_id``: one 1 MB flow ``f`` h1 -> h16, and a
    channel for it registered (never connected: no fabric here)."""
    job = Job(job_id)
    job.add(FlowTask("f", "h1", "h16", 1_000_000))
    logged: list[str] = []
    link = RegistryLink(RegistrySettings(server.socket_path, server.token_file, 0.05, "", True, 0.0),
                        log=logged.append)
    link.declare_job(job)
    channel = Channel("ch1", ChannelRoute("h1", "h16", "127.0.0.1", "127.0.0.2", 47000))
    channel.src_port = 40001
    link.register_channel(channel)
    return link, job, channel, logged


def test_a_start_the_restarted_registry_already_has_is_taken_as_answered(server):
    """The start reached the store, the controller died before answering, the agent's repeat reaches
    the successor: refused as 'already active' before, which failed the run; now taken as answered."""
    link, job, channel, logged = _link_with_a_flow(server)
    start_s = time.time()
    try:
        with server.client() as other:  # the first attempt: stored, its answer never arrived
            other.flow_started("j", "f", start_s=start_s, channel_id="ch1")
        server.kill()
        server.start()  # the successor loads the store
        link.flow_started(job, job.tasks["f"], channel, start_s)  # the agent's repeat
        wait_until(lambda: link.pacing_bytes_per_s("j", "f") is not None, 10, "the allocation applied")
        assert link.dscp("j", "f") == 8  # no error: the flow runs in its class
        assert any("already had the start" in line for line in logged), logged
        link.flow_finished(job, job.tasks["f"], time.time())
        with server.client() as other:
            wait_until(lambda: other.flow("j", "f")["state"] == "finished", 10, "the finish reported")
        assert link.dscp("j", "f") is not None  # still no error
    finally:
        link.close()


def test_a_finish_the_restarted_registry_already_has_is_taken_as_done(server):
    link, job, channel, logged = _link_with_a_flow(server)
    try:
        link.flow_started(job, job.tasks["f"], channel, time.time())
        wait_until(lambda: link.pacing_bytes_per_s("j", "f") is not None, 10, "the start answered")
        finish_s = time.time()
        with server.client() as other:  # the finish reached the store, its answer did not come back
            other.flow_finished("j", "f", finish_s=finish_s, bytes_sent=1_000_000)
        server.kill()
        server.start()
        link.flow_finished(job, job.tasks["f"], finish_s)
        wait_until(lambda: any("already had the finish" in line for line in logged), 10, "the repeat judged")
        assert link.dscp("j", "f") is not None  # no error
    finally:
        link.close()


def test_a_refusal_the_registry_state_does_not_explain_still_fails_the_run(server):
    """Only the registry's own record excuses a 409: a start on a channel that another flow holds is
    still an error, and a held sender hears of it at once (it calls nothing else while held)."""
    link, job, channel, _logged = _link_with_a_flow(server)
    job.add(FlowTask("g", "h1", "h16", 1_000_000))
    try:
        with server.client() as other:
            other.register_echelon("j", "g", [{"flow_id": "g", "src": "h1", "dst": "h16",
                                               "size_bytes": 1_000_000}])
            other.flow_started("j", "g", start_s=time.time(), channel_id="ch1")  # the channel is taken
        link.flow_started(job, job.tasks["f"], channel, time.time())
        wait_until(lambda: link.connection.errors, 10, "the refusal recorded")
        with pytest.raises(RegistryLinkError, match="refused the start"):
            link.held("j", "f")
    finally:
        link.close()


def test_a_poll_across_a_restart_keeps_the_flow_going(server):
    """kill -9 and a restart on the same store while a flow is active: the link's poller and reports
    ride it out (the successor writes a new token), and the finish lands in the successor."""
    link, job, channel, _logged = _link_with_a_flow(server)
    try:
        link.flow_started(job, job.tasks["f"], channel, time.time())
        wait_until(lambda: link.pacing_bytes_per_s("j", "f") is not None, 10, "the start answered")
        server.kill()
        time.sleep(0.3)  # a few polls find nobody
        server.start()
        link.flow_finished(job, job.tasks["f"], time.time())
        with server.client() as other:
            wait_until(lambda: other.flow("j", "f")["state"] == "finished", 10, "the finish reported")
        assert link.dscp("j", "f") is not None and not link.connection.errors
    finally:
        link.close()


# ------------------------------------------------------------------ the client
def test_an_answer_cut_short_is_unreachable_not_an_exception(tmp_path):
    """A server that dies inside an answer (headers sent, body cut): http.client raised IncompleteRead,
    which no caller expected (it ended the agent's reporting thread); now status 0, like any death."""
    path = str(tmp_path / "cut.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def serve_one() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"st")

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    try:
        with EchelonClient(socket_path=path, token="t") as client, pytest.raises(ApiClientError) as err:
            client.health()
        assert err.value.status == 0
    finally:
        thread.join(5)
        listener.close()


def test_a_missing_token_file_is_unreachable_not_an_exception(tmp_path):
    """Between a controller's death and its successor's start the token file is gone (its launcher
    removed it): a call needing it is 'unreachable' (status 0, retried), not a TokenError."""
    client = EchelonClient(socket_path=str(tmp_path / "none.sock"), token_file=str(tmp_path / "gone"))
    with client, pytest.raises(ApiClientError) as err:
        client.register_job("j")
    assert err.value.status == 0 and "token" in err.value.problem
