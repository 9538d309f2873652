"""Run the controller app as a child process that can be waited for, talked to and stopped by its pid.

:class:`ControllerProcess` writes the topology spec, starts ``osken-manager`` (``ryu-manager`` where only
Ryu is installed) on ``controller/app.py`` with the OpenFlow port asked for, records the pid, and waits
until the port listens and the app answers on its control socket.  ``stop()`` signals that pid only
(SIGTERM, then SIGKILL), never anything found by name.  The log is kept in memory after stop so tests
can fail when the controller logged a traceback or a switch rejected a message (:meth:`log_problems`).

Imports no os-ken/Ryu/Mininet: the framework is picked by looking for the package, not importing it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from controller.topology_spec import ENV_VAR, write_spec
from echelonflow.errors import UserError
from topologies.graphs import Topology

APP_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "app.py")
PROBLEM_MARKS = ("Traceback (most recent call last)", "uncaught exception", "OFP-ERROR")


class ControllerError(UserError):
    """The controller could not be started or did not become ready; the message says why."""


def manager_command() -> list[str]:
    """The manager executable: ``osken-manager`` when os-ken is installed, else ``ryu-manager``."""
    name = "osken-manager" if importlib.util.find_spec("os_ken") else "ryu-manager"
    beside = os.path.join(os.path.dirname(sys.executable), name)
    found = beside if os.access(beside, os.X_OK) else shutil.which(name)
    if not found:
        raise ControllerError(f"{name} not found next to {sys.executable} or on PATH; run bootstrap.sh")
    return [found]


def tcp_port_listening(port: int) -> bool:
    """Whether any socket on this host (root namespace) listens on TCP ``port`` (from /proc/net/tcp*)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as handle:
                next(handle)
                for line in handle:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            continue
    return False


class ControllerProcess:
    """One controller child process for ``topology`` listening for switches on ``ofp_port``."""

    def __init__(
        self,
        topology: Topology,
        ofp_port: int = 6653,
        queues: int = 4,
        workdir: str | None = None,
        route_idle_s: int = 30,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(ofp_port, int) or isinstance(ofp_port, bool) or not 0 < ofp_port < 65536:
            raise ControllerError(f"OpenFlow port must be 1..65535, got {ofp_port!r}")
        self.topology = topology
        self.ofp_port = ofp_port
        self.queues = queues
        self.route_idle_s = route_idle_s
        self.extra_env = dict(extra_env or {})
        self._own_workdir = workdir is None
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_text = ""

    # ----------------------------------------------------------------------- paths
    @property
    def spec_path(self) -> str:
        return os.path.join(str(self.workdir), "topology.json")

    @property
    def socket_path(self) -> str:
        return os.path.join(str(self.workdir), "control.sock")

    @property
    def log_path(self) -> str:
        return os.path.join(str(self.workdir), "controller.log")

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    # ----------------------------------------------------------------------- life cycle
    def start(self, timeout_s: float = 20.0) -> ControllerProcess:
        if self.proc is not None:
            raise ControllerError("controller already started")
        if tcp_port_listening(self.ofp_port):
            raise ControllerError(f"TCP port {self.ofp_port} is already in use (another controller running?)")
        if self.workdir is None:
            self.workdir = tempfile.mkdtemp(prefix="echelon-ctl-")
        write_spec(self.topology, self.spec_path)
        env = dict(os.environ)
        env.update({
            ENV_VAR: self.spec_path,
            "ECHELON_QUEUES": str(self.queues),
            "ECHELON_CONTROL_SOCKET": self.socket_path,
            "ECHELON_ROUTE_IDLE_S": str(self.route_idle_s),
            "PYTHONWARNINGS": "ignore::DeprecationWarning",
        })
        env.update(self.extra_env)
        cmd = manager_command() + ["--ofp-tcp-listen-port", str(self.ofp_port), APP_PATH]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        try:
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout_s: float) -> None:
        """Until the OpenFlow port listens and the app answers a ping (or the child died)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ControllerError(f"controller exited with status {self.proc.returncode}: {self._tail()}")
            if tcp_port_listening(self.ofp_port) and os.path.exists(self.socket_path):
                try:
                    if self.request({"op": "ping"}, timeout_s=1.0).get("ok"):
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        raise ControllerError(f"controller not ready after {timeout_s:.0f} s: {self._tail()}")

    def wait_switches(self, count: int | None = None, timeout_s: float = 30.0) -> float:
        """Seconds until ``count`` (default: all of the topology's) switches are connected."""
        want = len(self.topology.switches) if count is None else count
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if self.request({"op": "ping"})["switches"] >= want:
                return time.monotonic() - start
            time.sleep(0.1)
        raise ControllerError(f"only {self.request({'op': 'ping'})['switches']} of {want} switches connected "
                              f"after {timeout_s:.0f} s")

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM the recorded pid, SIGKILL after ``timeout_s``; keep the log text; remove our files."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.workdir and os.path.exists(self.log_path):
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                self.log_text = handle.read()
        if self.workdir and self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        elif self.workdir:
            for path in (self.spec_path, self.socket_path):
                if os.path.exists(path):
                    os.unlink(path)

    def __enter__(self) -> ControllerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------------- talking to it
    def request(self, message: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
        """One request on the app's control socket (see ``controller.app.ControlChannel``)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(self.socket_path)
            sock.sendall((json.dumps(message) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("controller closed the control socket without a reply")
                data += chunk
        return json.loads(data)

    def current_log(self) -> str:
        if self.proc is not None and self.workdir and os.path.exists(self.log_path):
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        return self.log_text

    def log_problems(self) -> list[str]:
        """Log lines showing a bug or a rejected message (tracebacks, uncaught exceptions, OFP errors)."""
        return [line for line in self.current_log().splitlines() if any(m in line for m in PROBLEM_MARKS)]

    def _tail(self, lines: int = 15) -> str:
        return " | ".join(self.current_log().splitlines()[-lines:]) or "(empty log)"
