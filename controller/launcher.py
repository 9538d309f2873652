"""Run the controller app as a child process that can be waited for, talked to and stopped by its pid.

:class:`ControllerProcess` writes the topology spec, starts ``osken-manager`` (``ryu-manager`` where only
Ryu is installed; ``manager=`` picks another, e.g. a Python 3.9 venv's ``ryu-manager``) on
``controller/app.py`` with the OpenFlow port asked for, records the pid, and waits until the port listens
and the app answers on its HTTP API, the app's one control surface (:meth:`ControllerProcess.client`).

It takes the app's settings whole, as one :class:`~controller.config.ControllerConfig`.  By default
(:func:`local_config`) every instance gets its own registry store, token file, API port, metrics port and
API Unix socket (under its working directory), so parallel tests and emulation runs never collide; they
are exposed
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
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

from controller.client import ApiClientError, EchelonClient
from controller.config import START_ERROR_PREFIX, ConfigError, ControllerConfig, default_socket_path
from controller.owner_lock import owner_pid
from echelonflow import ownership
from echelonflow.errors import UserError
from echelonflow.fields import FieldError, integer
from echelonflow.topology import Topology
from echelonflow.topology_spec import write_spec

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


def check_ofp_address(host: str, port: int) -> None:
    """Switches can connect to ``host``:``port``: it resolves to an address of this host that is free to
    listen on.  Checked before the child starts, so a mistyped address is one line instead of the
    child's resolver error after its start."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else "not a valid host name"
        raise ControllerError(f"OpenFlow listen address {host!r} does not resolve: {reason}") from None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the child's listener binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise ControllerError(f"cannot listen for switches on {host}:{port}: {exc.strerror}") from None


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


def free_tcp_port(avoid: Collection[int] = ()) -> int:
    """A TCP port nothing listens on right now (the kernel's pick for port 0 on loopback), none of
    ``avoid`` (ports already handed out for the same controller)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port


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


#: Where an instance's files go by default: inside its working directory (relative paths are resolved
#: there), so parallel tests and emulation runs never share a store, a token file or a socket.
LOCAL_FILES = {"store": "registry.sqlite", "token_file": "token", "api_socket": "api.sock"}
check_ofp_port = integer(1, 65535)


def local_config(**settings: Any) -> ControllerConfig:
    """A config for one more controller on this machine: ``settings`` (:class:`ControllerConfig` fields)
    over the launcher's defaults, which are its own free API and metrics ports (also for a port given as
    0; ``metrics_port=None`` serves no metrics) and its files in the launcher's working directory
    (:data:`LOCAL_FILES`).  The app's own defaults (fixed ports, /var/lib/echelon) suit one controller
    per machine; tests and emulation runs start many side by side."""
    taken: set[int] = set()
    for name in ("api_port", "metrics_port"):
        if settings.get(name, 0) == 0:
            settings[name] = free_tcp_port(avoid=taken)
        if settings[name] is not None:
            taken.add(settings[name])
    try:
        return ControllerConfig(**{**LOCAL_FILES, **settings})
    except ConfigError as exc:
        raise ControllerError(str(exc)) from None


class ControllerProcess:
    """One controller child process for ``topology``, with the settings ``config`` (default
    :func:`local_config`), listening for switches on ``ofp_host``:``ofp_port``.

    The config is passed whole: the launcher only writes the topology as a spec file (its path is the
    app's ``topology_file``) and resolves relative paths of ``store``, ``token_file`` and ``api_socket``
    against ``workdir``.  What stays apart is the launcher's own: the OpenFlow listener (an os-ken
    option, not an app setting), the working directory (default: an own temporary one, removed on stop),
    ``manager``, the command to run the app with (default: ``compat.MANAGER`` next to the running
    Python), and ``extra_env``, environment given to the child over the config's.
    """

    def __init__(
        self,
        topology: Topology,
        config: ControllerConfig | None = None,
        *,
        ofp_port: int = 6653,
        ofp_host: str = "127.0.0.1",
        workdir: str | None = None,
        manager: str | Sequence[str] | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        try:
            self.ofp_port = check_ofp_port("ofp_port", ofp_port)
        except FieldError as exc:
            raise ControllerError(str(exc)) from None
        self.topology = topology
        self.config = local_config() if config is None else config
        self.ofp_host = ofp_host
        self.extra_env = dict(extra_env or {})
        self._own_workdir = workdir is None
        self.workdir = workdir
        self.manager = manager
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_text = ""

    # ----------------------------------------------------------------------- paths
    @property
    def spec_path(self) -> str:
        return os.path.join(str(self.workdir), "topology.json")

    @property
    def log_path(self) -> str:
        return os.path.join(str(self.workdir), "controller.log")

    def _local(self, path: str) -> str:
        """``path`` as the child sees it: relative paths are inside the working directory."""
        return os.path.join(str(self.workdir), path)

    @property
    def store_path(self) -> str:
        """The registry's SQLite file (survives ``stop()`` unless it lives in an own temporary workdir)."""
        return self._local(self.config.store)

    @property
    def token_file(self) -> str:
        return self._local(self.config.token_file)

    @property
    def api_socket_path(self) -> str:
        """The API's Unix socket: what agents inside Mininet hosts (other namespaces) connect to."""
        if not self.config.api_socket:
            return default_socket_path(self.api_port)
        return self._local(self.config.api_socket)

    @property
    def api_port(self) -> int:
        return self.config.api_port

    @property
    def metrics_port(self) -> int | None:
        return self.config.metrics_port

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
        host = self.config.metrics_host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host
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
        check_ofp_address(self.ofp_host, self.ofp_port)
        for what, path in (("registry store", self.config.store),
                           ("API token file", self.config.token_file)):
            if os.path.isabs(path) and os.path.isdir(path):  # relative ones are in a workdir made below
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
        env.update(self.app_config().to_env())
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
        """The API socket path fits, and the API and metrics ports are free."""
        if len(self.api_socket_path) > MAX_SOCKET_PATH:
            raise ControllerError(f"API socket path {self.api_socket_path!r} is longer than "
                                  f"{MAX_SOCKET_PATH} bytes (a Unix socket limit); use a shorter workdir "
                                  "or api_socket")
        for what, port in (("the API", self.api_port), ("the metrics", self.metrics_port)):
            if port is not None and tcp_port_listening(port):
                raise ControllerError(f"TCP port {port} for {what} is already in use")

    def _remove_own_workdir(self) -> None:
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def app_config(self) -> ControllerConfig:
        """What the app is given: this instance's config with the topology spec file it writes and its
        paths resolved (call once the working directory exists)."""
        return replace(self.config, topology_file=self.spec_path, store=self.store_path,
                       token_file=self.token_file, api_socket=self.api_socket_path)

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
