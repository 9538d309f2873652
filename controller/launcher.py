"""Run the controller app as a child process that can be waited for, talked to and stopped by its pid.

:class:`ControllerProcess` writes the topology spec, starts ``osken-manager`` (``ryu-manager`` where only
Ryu is installed; ``manager=`` picks another, e.g. a Python 3.9 venv's ``ryu-manager``) on
``controller/app.py`` with the OpenFlow port asked for, records the pid, and waits until the port listens
and the app answers on its HTTP API, the app's one control surface (:meth:`ControllerProcess.client`).

Every instance gets its own registry store, token file, API port, metrics port and API Unix socket (under
its working directory unless given), so parallel tests and emulation runs never collide; they are exposed
as ``store_path``, ``token_file``, ``api_port``, ``api_socket_path``, ``api_url``, ``dashboard_url``,
``metrics_port`` and ``metrics_url``, and
:meth:`ControllerProcess.client` returns an :class:`~controller.client.EchelonClient` for them.  A restart
on the same ``store_path`` (and ``api_port``) gets the stored registry back.  ``stop()`` signals that pid only
(SIGTERM, then SIGKILL), never anything found by name.  The child also gets SIGTERM when the process that
started it dies, even by SIGKILL (a parent-death signal), and, in an own temporary working directory, its
pid is written down in the directory's ``owner.json`` for ``echelon fabric clean``
(:mod:`echelonflow.ownership`; the owner of a given workdir records it there).  OpenFlow listens on
loopback only unless ``ofp_host`` says otherwise (the switches of a Mininet fabric connect from the root
namespace).  The log is kept in memory after stop so tests
can fail when the controller logged a traceback or a switch rejected a message (:meth:`log_problems`).

Imports no os-ken/Ryu/Mininet: the framework is picked by looking for the package, not importing it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Sequence

from controller.client import ApiClientError, EchelonClient
from controller.config import START_ERROR_PREFIX, ConfigError, ControllerConfig
from controller.owner_lock import owner_pid
from controller.topology_spec import write_spec
from echelonflow import ownership
from echelonflow.errors import UserError
from echelonflow.topology import Topology

APP_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "app.py")
PROBLEM_MARKS = ("Traceback (most recent call last)", "uncaught exception", "OFP-ERROR")
#: Log lines that say why a manager stopped (its last one is quoted when it exits).
ERROR_MARKS = ("Error", "error:", "ERROR", "CRITICAL", "Errno")


class ControllerError(UserError):
    """The controller could not be started or did not become ready; the message says why."""


def default_manager_name() -> str:
    """``compat.MANAGER`` without importing os-ken/Ryu: ``osken-manager`` if os-ken is installed, else
    ``ryu-manager`` (the same preference as controller.compat's import fallback)."""
    return "osken-manager" if importlib.util.find_spec("os_ken") else "ryu-manager"


def manager_command(manager: str | Sequence[str] | None = None) -> list[str]:
    """The manager command line: ``manager`` (a path/name or an argv list) or the default manager found
    next to the running Python (its venv's bin) or else on PATH."""
    if manager is None:
        name = default_manager_name()
        beside = os.path.join(os.path.dirname(sys.executable), name)
        found = beside if os.access(beside, os.X_OK) else shutil.which(name)
        if not found:
            raise ControllerError(f"{name} not found next to {sys.executable} or on PATH; run bootstrap.sh")
        return [found]
    argv = [manager] if isinstance(manager, str) else [str(part) for part in manager]
    if not argv or not argv[0]:
        raise ControllerError(f"manager must be a command (a path or an argument list), got {manager!r}")
    exe = argv[0]
    if os.sep in exe:
        found = exe if os.path.isfile(exe) and os.access(exe, os.X_OK) else None
    else:
        found = shutil.which(exe)
    if not found:
        raise ControllerError(f"controller manager {exe!r} is not an executable file or on PATH")
    return [found] + argv[1:]


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


def free_tcp_port() -> int:
    """A TCP port nothing listens on right now (the kernel's pick for port 0 on loopback)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: Unix socket paths longer than this do not fit ``sockaddr_un.sun_path`` (108 bytes with the NUL).
MAX_SOCKET_PATH = 107


def _stale_socket(path: str) -> bool:
    """Whether ``path`` is a Unix socket nobody serves on (a dead or refused controller's to remove)."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError:
        return True
    finally:
        probe.close()
    return False


def _check_port(what: str, port: object, allow_zero: bool = False) -> None:
    low = 0 if allow_zero else 1
    if not isinstance(port, int) or isinstance(port, bool) or not low <= port < 65536:
        raise ControllerError(f"{what} port must be {low}..65535, got {port!r}")


class ControllerProcess:
    """One controller child process for ``topology`` listening for switches on ``ofp_port``.

    ``api_port`` 0 (default) picks a free port at start; ``store_path``, ``token_file`` and
    ``api_socket_path`` default to files in the working directory.  ``metrics_port`` 0 (default) picks a
    free port for ``/metrics``, None serves no metrics; ``metrics_host`` is the address it listens on
    (loopback unless a Prometheus elsewhere must scrape it).  ``interval_s`` is the scheduling
    service's reschedule interval, ``stats_interval_s`` its switch-counter poll (0 = off), ``min_rate_bps``
    the allocation below which a flow counts as paused.  ``manager``
    is the command to run the app with (default: ``compat.MANAGER`` next to the running Python).
    """

    def __init__(
        self,
        topology: Topology,
        ofp_port: int = 6653,
        queues: int = 4,
        workdir: str | None = None,
        route_idle_s: int = 30,
        extra_env: dict[str, str] | None = None,
        *,
        api_port: int = 0,
        store_path: str | None = None,
        token_file: str | None = None,
        api_socket_path: str | None = None,
        interval_s: float = 0.5,
        stats_interval_s: float = 1.0,
        min_rate_bps: float = 8000.0,
        hold_paused: bool = False,
        fixed_class: bool = False,
        manager: str | Sequence[str] | None = None,
        metrics_port: int | None = 0,
        metrics_host: str = "127.0.0.1",
        ofp_host: str = "127.0.0.1",
    ) -> None:
        _check_port("OpenFlow", ofp_port)
        _check_port("API", api_port, allow_zero=True)
        if metrics_port is not None:
            _check_port("metrics", metrics_port, allow_zero=True)
        try:  # the app's own checks of these settings, before anything starts
            ControllerConfig(queues=queues, route_idle_s=route_idle_s, interval_s=interval_s,
                             stats_interval_s=stats_interval_s, min_rate_bps=min_rate_bps,
                             metrics_host=metrics_host)
        except ConfigError as exc:
            raise ControllerError(str(exc)) from None
        self.topology = topology
        self.ofp_port = ofp_port
        self.ofp_host = ofp_host
        self.queues = queues
        self.route_idle_s = route_idle_s
        self.extra_env = dict(extra_env or {})
        self._own_workdir = workdir is None
        self.workdir = workdir
        self.api_port = api_port
        self._store_path = store_path
        self._token_file = token_file
        self._api_socket_path = api_socket_path
        self.interval_s = interval_s
        self.stats_interval_s = stats_interval_s
        self.min_rate_bps = min_rate_bps
        self.hold_paused = hold_paused
        self.fixed_class = fixed_class
        self.manager = manager
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_text = ""

    # ----------------------------------------------------------------------- paths
    @property
    def spec_path(self) -> str:
        return os.path.join(str(self.workdir), "topology.json")

    @property
    def log_path(self) -> str:
        return os.path.join(str(self.workdir), "controller.log")

    @property
    def store_path(self) -> str:
        """The registry's SQLite file (survives ``stop()`` unless it lives in an own temporary workdir)."""
        return self._store_path or os.path.join(str(self.workdir), "registry.sqlite")

    @property
    def token_file(self) -> str:
        return self._token_file or os.path.join(str(self.workdir), "token")

    @property
    def api_socket_path(self) -> str:
        """The API's Unix socket: what agents inside Mininet hosts (other namespaces) connect to."""
        return self._api_socket_path or os.path.join(str(self.workdir), "api.sock")

    @property
    def api_url(self) -> str:
        """The API over TCP on loopback (root namespace only)."""
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def dashboard_url(self) -> str:
        """The live dashboard (served by the API)."""
        return f"{self.api_url}/ui/"

    @property
    def metrics_url(self) -> str | None:
        """Prometheus metrics (None when started with ``metrics_port=None``)."""
        if self.metrics_port is None:
            return None
        host = "127.0.0.1" if self.metrics_host in ("0.0.0.0", "") else self.metrics_host
        return f"http://{host}:{self.metrics_port}/metrics"

    def client(self, timeout_s: float = 30.0, tcp: bool = False) -> EchelonClient:
        """An API client for this controller (Unix socket by default, ``tcp=True`` for loopback TCP)."""
        if tcp:
            return EchelonClient(url=self.api_url, token_file=self.token_file, timeout_s=timeout_s)
        return EchelonClient(socket_path=self.api_socket_path, token_file=self.token_file,
                             timeout_s=timeout_s)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    # ----------------------------------------------------------------------- life cycle
    def start(self, timeout_s: float = 20.0) -> ControllerProcess:
        """Check what can be checked here (ports, paths), start the child, wait until it serves.

        A refused start leaves nothing behind: an own temporary workdir made for it is removed again,
        and nothing another controller owns (its token file, its socket) is touched."""
        if self.proc is not None:
            raise ControllerError("controller already started")
        command = manager_command(self.manager)
        if tcp_port_listening(self.ofp_port):
            raise ControllerError(f"TCP port {self.ofp_port} is already in use (another controller running?)")
        for what, path in (("registry store", self._store_path), ("API token file", self._token_file)):
            if path is not None and os.path.isdir(path):
                raise ControllerError(f"{what} {path} is a directory; give a file path")
        if self.workdir is None:
            self.workdir = ownership.make_run_folder("ctl")
        try:
            self._check_listeners()
            write_spec(self.topology, self.spec_path)
        except BaseException:
            self._remove_own_workdir()
            raise
        env = dict(os.environ)
        env.update(self.config().to_env())
        env["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
        env.update(self.extra_env)
        cmd = ownership.PDEATHSIG + command + [
            "--ofp-listen-host", self.ofp_host, "--ofp-tcp-listen-port", str(self.ofp_port), APP_PATH]
        with open(self.log_path, "wb") as log:  # forked from a thread that lives as long as we do
            self.proc = ownership.spawn(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        try:
            if self._own_workdir:  # a given workdir is its owner's to record (the emulation runner does)
                ownership.record_processes(self.workdir, self.proc.pid)
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _check_listeners(self) -> None:
        """The API socket path fits, and the API and metrics ports are free (picked when 0)."""
        if len(self.api_socket_path) > MAX_SOCKET_PATH:
            raise ControllerError(f"API socket path {self.api_socket_path!r} is longer than "
                                  f"{MAX_SOCKET_PATH} bytes (a Unix socket limit); use a shorter workdir "
                                  "or api_socket_path")
        if self.api_port == 0:
            self.api_port = free_tcp_port()
        elif tcp_port_listening(self.api_port):
            raise ControllerError(f"TCP port {self.api_port} for the API is already in use")
        if self.metrics_port == 0:
            self.metrics_port = free_tcp_port()
        elif self.metrics_port is not None and tcp_port_listening(self.metrics_port):
            raise ControllerError(f"TCP port {self.metrics_port} for the metrics is already in use")

    def _remove_own_workdir(self) -> None:
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def config(self) -> ControllerConfig:
        """The app's configuration for this instance (its ports resolved: call after they are picked)."""
        return ControllerConfig(
            topology_file=self.spec_path, queues=self.queues, route_idle_s=self.route_idle_s,
            store=self.store_path, token_file=self.token_file, api_host="127.0.0.1", api_port=self.api_port,
            api_socket=self.api_socket_path, interval_s=self.interval_s,
            stats_interval_s=self.stats_interval_s, min_rate_bps=self.min_rate_bps,
            hold_paused=self.hold_paused, fixed_class=self.fixed_class,
            metrics_host=self.metrics_host, metrics_port=self.metrics_port)

    def wait_ready(self, timeout_s: float) -> None:
        """Until the OpenFlow port listens and the API answers ``GET /v1/health`` (or the process died)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ControllerError(self.refusal() or f"controller {self.exit_reason()}")
            if tcp_port_listening(self.ofp_port) and os.path.exists(self.api_socket_path):
                try:
                    with self.client(timeout_s=1.0) as client:
                        client.health()
                    return
                except (OSError, ApiClientError):
                    pass
            time.sleep(0.1)
        raise ControllerError(f"controller not ready after {timeout_s:.0f} s: {self._tail()}")

    def wait_switches(self, count: int | None = None, timeout_s: float = 30.0) -> float:
        """Seconds until ``count`` (default: all of the topology's) switches are connected."""
        want = len(self.topology.switches) if count is None else count
        start = time.monotonic()
        with self.client(timeout_s=10.0) as client:
            while True:
                connected = int(client.health()["switches"]["connected"])
                if connected >= want:
                    return time.monotonic() - start
                if time.monotonic() - start >= timeout_s:
                    raise ControllerError(f"only {connected} of {want} switches connected after "
                                          f"{timeout_s:.0f} s")
                time.sleep(0.1)

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM the recorded pid, SIGKILL after ``timeout_s``; keep the log text; remove our files.

        An own temporary workdir goes entirely (with its store); a given workdir or ``store_path`` keeps
        the store and the log.
        """
        ownership.stop_children([self.proc], timeout_s)
        self.proc = None
        if self.workdir and os.path.exists(self.log_path):
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                self.log_text = handle.read()
        if self.workdir is None:
            return
        # The spec, socket and token are this run's; the store is kept (a restart on it resumes).  The
        # token and socket go only if no other live controller owns them: a start refused because
        # another controller holds them must not take them from under it.
        spec, socket_path, token_file = self.spec_path, self.api_socket_path, self.token_file
        self._remove_own_workdir()
        if os.path.isfile(spec):
            os.unlink(spec)
        if _stale_socket(socket_path):
            os.unlink(socket_path)
        if os.path.isfile(token_file) and owner_pid(token_file) is None:
            os.unlink(token_file)

    def __enter__(self) -> ControllerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------------- its log
    def current_log(self) -> str:
        if self.proc is not None and self.workdir and os.path.exists(self.log_path):
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        return self.log_text

    def log_problems(self) -> list[str]:
        """Log lines showing a bug or a rejected message (tracebacks, uncaught exceptions, OFP errors)."""
        return [line for line in self.current_log().splitlines() if any(m in line for m in PROBLEM_MARKS)]

    def refusal(self) -> str | None:
        """Why the app refused to start (the one line it printed before exiting with status 2), or None."""
        if self.proc is None or self.proc.poll() != 2:
            return None
        lines = [line.strip() for line in self.current_log().splitlines()
                 if line.startswith(START_ERROR_PREFIX)]
        return lines[-1][len(START_ERROR_PREFIX):] if lines else None

    def exit_reason(self) -> str:
        """How the child ended, in words: the signal that killed it, or its status and the last error line
        of its log (not merely the last line, which is usually an unrelated 'switch ready')."""
        code = None if self.proc is None else self.proc.poll()
        if code is None:
            return "is running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"was killed by {name}"
        errors = [line.strip() for line in self.current_log().splitlines()
                  if any(mark in line for mark in ERROR_MARKS)]
        detail = errors[-1] if errors else "its log has no error line"
        return f"exited with status {code}: {detail}"

    def _tail(self, lines: int = 15) -> str:
        return " | ".join(self.current_log().splitlines()[-lines:]) or "(empty log)"
