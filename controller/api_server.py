"""Serve the API inside the controller's eventlet hub: TCP on loopback and a Unix socket.

Why eventlet.wsgi: os-ken 3.x (osken-manager) and Ryu 4.34 both run on an eventlet hub, so the API's
green threads share the one OS thread with the OpenFlow handlers and the scheduling loop: no locks, no
thread/greenlet mismatch, no new dependency.  Why a Unix socket as well: Mininet hosts live in their
own network namespaces and cannot reach the root namespace's 127.0.0.1, but they share the file system.

* TCP: ``127.0.0.1:<port>`` by default (loopback only); pass a management address to widen it.
* Unix: ``/run/echelon/controller-<port>.sock`` by default, mode 0600 (root only, like the token).
  A stale socket file from a dead controller is replaced; a live one is an error (two controllers).

A client polling in a loop cannot hold the hub: the server yields to the hub before each request, and a
long answer (a page) gives it a turn every millisecond of work (``COOPERATE_KEY``, ``controller.encoded``),
so a scheduling round due meanwhile waits about that long (docs/api.md, "Pages").

Slow clients cannot starve the others.  eventlet.wsgi serves each connection in a green thread from a
pool (1,024 by default) and its socket timeout bounds only the wait for *each* read, so a client that
sends one header byte every few seconds (slowloris) held its thread for ever: 1,100 such connections
left normal TCP requests unanswered (benchmarks/bench_api_load.py).  So here a request's head (request
line and headers) must arrive within ``request_timeout_s`` (10 s) of the server starting to wait for it
(an idle keep-alive connection is closed after that long) and its body within ``request_timeout_s`` of
the head (counted from the head, not from the wait: a keep-alive client whose next request came just
before the idle limit had its body refused); each listener takes up to
``max_connections`` (4,096) at once, capped so the process cannot run out of file descriptors (an
``accept`` failing with EMFILE would end eventlet's listener).

A refusal that leaves the request body unread (413 for a body over the limit, and 401, 404, 405, 415
refused before the body is read) closes the connection lingering: the answer is sent, the write side is
shut down, and what the client still sends is read and dropped for at most ``LINGER_S`` (and
``LINGER_BYTES``) before the socket is closed.  Closing at once with unread bytes makes the kernel answer
with a reset, which a client still writing its body (urllib, http.client) gets instead of the answer: a
2 MiB ``POST /v1/jobs`` read its 413 in 1 of 3 tries.  The rest of such a body is never read whole
(eventlet would, on a keep-alive connection, however large it is).

In the controller: ``server = ApiServer(api, port=...); server.start()`` from the app's ``start()`` (the
hub is running there) and ``server.stop()`` on close.  :func:`run_in_thread` runs a server in an OS thread
with its own hub, for tests, benchmarks and non-eventlet programs.  ``python -m controller.api_server``
serves a registry with no OpenFlow fabric (the service then enforces nothing; useful for agents'
development and for the benchmarks).

Kept Python 3.9 compatible; eventlet and stdlib only (no os_ken import).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import resource
import signal
import socket
import stat
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from controller.config import DEFAULTS, ControllerConfig, default_socket_path
from controller.validation import BODY_LIMIT_KEY, COOPERATE_KEY, REFUSED_KEY, ApiError

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # eventlet >= 0.36 warns that it is in maintenance mode
    import eventlet
    import eventlet.wsgi

LOG = logging.getLogger("echelon.api_server")
DEFAULT_PORT: int = DEFAULTS["api_port"]  # the controller setting's, written once in controller.config
DEFAULT_MAX_CONNECTIONS = 4096  # per listener
DEFAULT_REQUEST_TIMEOUT_S = 10.0
FD_RESERVE = 512  # descriptors kept for everything but API connections (switches, store, logs)
#: Longest a refused request's unread body is drained after the answer, and at most how many bytes.
LINGER_S = 2.0
LINGER_BYTES = 16 << 20
#: environ key of the callable that makes the connection close lingering after this response.
LINGER_KEY = "echelon.linger"


class GreenEvent:
    """A ``threading.Event``-like event whose ``wait`` yields to the hub's other green threads: what the
    scheduling service's allocation long-polls wait on when served here (the controller app passes its
    framework's ``hub.Event``, which is the same thing)."""

    def __init__(self) -> None:
        import eventlet.event

        self._event = eventlet.event.Event()

    def set(self) -> None:
        if not self._event.ready():
            self._event.send(True)

    def is_set(self) -> bool:
        return self._event.ready()

    def wait(self, timeout: float | None = None) -> bool:
        with eventlet.Timeout(timeout, False):
            self._event.wait()
        return self._event.ready()


class ServerError(Exception):
    """The API cannot listen where it was asked to (address in use, socket path busy, permissions)."""


class _QuietLog:
    """eventlet.wsgi access log -> our logger at DEBUG (a line per request would flood the controller log)."""

    def write(self, line: str) -> None:
        LOG.debug("%s", line.rstrip())

    def flush(self) -> None:
        pass


class _DeadlineInput:
    """A request body whose reads end at the request's deadline (then the connection is closed)."""

    def __init__(self, stream: Any, deadline: float, protocol: Any) -> None:
        self._stream, self._deadline, self._protocol = stream, deadline, protocol
        self.at_end = False  # a read came back empty: the body (chunked or not) was read whole

    def _call(self, method: str, *args: Any) -> Any:
        remaining = self._deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise socket.timeout("request not received whole in time")
            with eventlet.Timeout(remaining, socket.timeout("request not received whole in time")):
                return getattr(self._stream, method)(*args)
        except socket.timeout:
            self._protocol.close_connection = 1  # the rest of the body is not waited for
            raise

    def read(self, *args: Any) -> bytes:
        data = self._call("read", *args)
        self.at_end = self.at_end or not data
        return data

    def readline(self, *args: Any) -> bytes:
        return self._call("readline", *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _ChunkSizeGuard:
    """The connection's reader under a chunked body: refuses (413) a chunk-size line announcing more
    bytes, with the chunks before it, than the app's body limit, as soon as the line is read.

    eventlet reads every chunk-size line, and the line ending each chunk's data, with ``readline``; the
    data itself with ``read`` (the app reads with ``read``), so each line parsed here as a hexadecimal
    size is a chunk's announcement; an empty line (a chunk's end) or a trailer field is not."""

    def __init__(self, rfile: Any) -> None:
        self._rfile = rfile
        self.limit_bytes: int | None = None
        self._announced_bytes = 0

    def readline(self, *args: Any) -> bytes:
        line = self._rfile.readline(*args)
        if self.limit_bytes is not None:
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                return line
            self._announced_bytes += size
            if self._announced_bytes > self.limit_bytes:
                raise ApiError(413, "body", f"a chunk announces {size} bytes, which takes the body over the "
                                            f"limit of {self.limit_bytes}")
        return line

    def set_limit(self, limit_bytes: int) -> None:
        self.limit_bytes = int(limit_bytes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rfile, name)


def framing_problem(headers: Any) -> ApiError | None:
    """What is wrong with how a request says where its body ends (RFC 9112 6.1-6.3), or None.

    Refused, because a front end and this server could read the same bytes as different requests
    (request smuggling): ``Content-Length`` given with different values (the same value repeated is
    one length) or not as plain digits (Python's ``int`` would take ``+5`` and ``5_0``); a
    ``Transfer-Encoding`` other than exactly ``chunked``; and ``Content-Length`` together with
    ``Transfer-Encoding`` (RFC 9112 6.3 lets a server go by the encoding; refusing is the safe choice).
    """
    lengths = [value.strip() for header in headers.get_all("content-length") or ()
               for value in header.split(",")]
    for value in lengths:
        if not value.isdigit() or not value.isascii():
            return ApiError(400, "Content-Length", f"must be decimal digits, got {value!r}")
    if len({int(value) for value in lengths}) > 1:
        return ApiError(400, "Content-Length", f"given with different values {lengths!r}")
    encodings = headers.get_all("transfer-encoding")
    if encodings is not None:
        coding = ",".join(encodings).strip().lower()
        if coding != "chunked":
            return ApiError(400, "Transfer-Encoding", f"only 'chunked' is understood, got {coding!r}")
        if lengths:
            return ApiError(400, "Content-Length", "not allowed together with Transfer-Encoding")
    return None


class _DeadlineProtocol(eventlet.wsgi.HttpProtocol):
    """eventlet's HTTP protocol with deadlines per request (``request_timeout_s``, set by
    :func:`_protocol`): the head must be in that long after the wait for it began, and body reads fail
    with a timeout once that long has passed since the head came in.

    It also checks the request's framing (:func:`framing_problem`) and, for a chunked body, the sizes
    its chunks announce (:class:`_ChunkSizeGuard`); a refused request is answered by the app in JSON
    (``REFUSED_KEY``) and its connection closed lingering."""

    request_timeout_s = DEFAULT_REQUEST_TIMEOUT_S
    _linger = False
    reject_bad_requests = False  # framing_problem refuses them, answered in JSON like every refusal

    def handle_one_request(self) -> None:
        # A keep-alive client that sends its next request at once finds its bytes already read: the
        # green thread would serve it without ever yielding, and a client polling in a loop would hold
        # the hub for as many requests as it sends.  One turn of the hub before each request lets a
        # scheduling round (or an OpenFlow handler) due meanwhile go first: it waits at most one request.
        eventlet.sleep(0)
        # socket.timeout is what eventlet's server expects from a slow client: it just closes the socket
        self._head_timer = eventlet.Timeout(self.request_timeout_s, socket.timeout("request head too slow"))
        try:
            super().handle_one_request()
        finally:
            self._head_timer.cancel()

    def get_environ(self) -> dict[str, Any]:
        self._head_timer.cancel()  # the head is in; the app runs without a deadline of its own
        environ = super().get_environ()
        deadline = time.monotonic() + self.request_timeout_s
        raw = environ["wsgi.input"]
        if raw.chunked_input:
            guard = _ChunkSizeGuard(raw.rfile)
            raw.rfile = guard
            environ[BODY_LIMIT_KEY] = guard.set_limit
        environ["wsgi.input"] = _DeadlineInput(raw, deadline, self)
        environ[LINGER_KEY] = self._close_lingering
        environ[COOPERATE_KEY] = _turn
        refused = framing_problem(self.headers)
        if refused is not None:  # the body is never read: no keep-alive reuse of a desynchronised stream
            environ[REFUSED_KEY] = refused
            self._close_lingering()
        return environ

    def _close_lingering(self) -> None:
        """Answer with ``Connection: close`` and close lingering (:meth:`finish`)."""
        self.close_connection = 1
        self._linger = True

    def finish(self) -> None:
        if self._linger:
            self._drain()
        super().finish()

    def _drain(self) -> None:
        """Send what is written, shut the write side, and read (dropping it) what the client still sends
        until it closes, for at most LINGER_S and LINGER_BYTES."""
        conn = self.connection
        drained = 0
        with contextlib.suppress(OSError, ValueError), eventlet.Timeout(LINGER_S, False):
            self.wfile.flush()
            conn.shutdown(socket.SHUT_WR)
            while drained < LINGER_BYTES:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)


def _turn() -> None:
    """One turn of the hub for whatever else is due (a long answer calls it between its items)."""
    eventlet.sleep(0)


def _lingering(app: Callable[..., Any]) -> Callable[..., Any]:
    """The WSGI ``app``, marking for a lingering close every answer that leaves the request body unread
    (run after the app returned, before eventlet writes the headers, so ``Connection: close`` goes out)."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        result = app(environ, start_response)
        raw, wrapper = environ.get("eventlet.input"), environ.get("wsgi.input")
        linger = environ.get(LINGER_KEY)
        if raw is not None and linger is not None:
            chunked_left = raw.chunked_input and not getattr(wrapper, "at_end", False)
            if chunked_left or raw.position < (raw.content_length or 0):
                linger()
        return result

    return wrapped


def _protocol(request_timeout_s: float) -> type:
    return type("DeadlineProtocol", (_DeadlineProtocol,), {"request_timeout_s": request_timeout_s})


def connections_allowed(wanted: int, listeners: int, reserve: int = FD_RESERVE) -> int:
    """Connections per listener that fit the process's file descriptors: the soft limit is raised
    towards the hard one as far as ``wanted`` needs, and ``reserve`` descriptors stay free."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = wanted * listeners + reserve
    if soft < needed and (hard == resource.RLIM_INFINITY or soft < hard):
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(1, min(wanted, (soft - reserve) // max(1, listeners)))


@dataclass(frozen=True)
class ServerLimits:
    """How much one :class:`ApiServer` listener takes: ``max_connections`` at once;
    ``request_timeout_s``: the time a request has to arrive whole (and an idle keep-alive connection to
    send its next one); ``socket_timeout_s``: the longest wait for one read or write."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    socket_timeout_s: float = 30.0


class ApiServer:
    """Listens on TCP and a Unix socket and serves one WSGI app on both, as green threads, within its
    :class:`ServerLimits`."""

    def __init__(self, app: Callable[..., Any], host: str = DEFAULTS["api_host"], port: int = DEFAULT_PORT,
                 socket_path: str | None = None, unix: bool = True, name: str = "API",
                 limits: ServerLimits | None = None) -> None:
        limits = limits or ServerLimits()
        self.app = app
        self.name = name
        self.host = host
        self.port = int(port)
        self.socket_path = socket_path
        self.unix = unix
        self.socket_timeout_s = limits.socket_timeout_s
        self.max_connections = limits.max_connections
        self.request_timeout_s = limits.request_timeout_s
        self._sockets: list[Any] = []
        self._threads: list[Any] = []
        self._socket_inode: tuple[int, int] | None = None

    @property
    def tcp_address(self) -> tuple[str, int]:
        return self.host, self.port

    def check(self) -> None:
        """Refuse (:class:`ServerError`) what :meth:`start` would refuse, writing nothing: a TCP port in
        use, a socket path that is not a socket or is served by a live process, or one whose directory
        cannot be made.  A program calls it before it writes anything (its token file, its store), so a
        refused start leaves no trace; :meth:`start` checks again as it binds."""
        if self.port:
            probe = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
            try:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as eventlet.listen binds
                probe.bind((self.host, self.port))
            except OSError as exc:
                raise ServerError(f"cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
            finally:
                probe.close()
        if self.unix:
            path = self.socket_path if self.socket_path is not None else default_socket_path(self.port)
            _check_socket_path(path)

    def start(self) -> None:
        """Bind both listeners (errors raise :class:`ServerError` before anything is served)."""
        try:
            tcp = eventlet.listen((self.host, self.port))
        except OSError as exc:
            raise ServerError(f"cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        self._sockets.append(tcp)
        self.port = tcp.getsockname()[1]
        if self.unix:
            if self.socket_path is None:
                self.socket_path = default_socket_path(self.port)
            try:
                self._sockets.append(self._listen_unix(self.socket_path))
            except ServerError:
                tcp.close()
                self._sockets.clear()
                raise
        per_listener = connections_allowed(self.max_connections, len(self._sockets))
        for sock in self._sockets:
            self._threads.append(eventlet.spawn(
                eventlet.wsgi.server, sock, _lingering(self.app), log=_QuietLog(), log_output=True,
                socket_timeout=self.socket_timeout_s, debug=False, max_size=per_listener,
                protocol=_protocol(self.request_timeout_s)))
        LOG.info("%s on http://%s:%d%s (up to %d connections each, %g s per request)", self.name, self.host,
                 self.port, f" and unix:{self.socket_path}" if self.unix else "", per_listener,
                 self.request_timeout_s)

    def _listen_unix(self, path: str) -> Any:
        directory = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ServerError(f"cannot create socket directory {directory!r}: {exc.strerror}") from None
        _remove_stale_socket(path)
        old_umask = os.umask(0o177)  # the socket file is born 0600
        try:
            sock = eventlet.listen(path, family=socket.AF_UNIX)
        except OSError as exc:
            raise ServerError(f"cannot listen on unix socket {path!r}: {exc.strerror}") from None
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        info = os.stat(path)
        self._socket_inode = (info.st_dev, info.st_ino)
        return sock

    def stop(self) -> None:
        """Stop serving, close the listeners and remove our socket file (only if it is still ours)."""
        for thread in self._threads:
            thread.kill()
        self._threads.clear()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
        self._sockets.clear()
        if self.socket_path and self._socket_inode is not None:
            try:
                info = os.stat(self.socket_path)
                if (info.st_dev, info.st_ino) == self._socket_inode:
                    os.unlink(self.socket_path)
            except OSError:
                pass
            self._socket_inode = None


def _check_socket_path(path: str) -> bool:
    """Whether ``path`` holds a dead process's socket (to replace); None there is fine; a live socket,
    anything else at the path, or a directory that cannot be made raise :class:`ServerError`."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    if mode is None:
        directory = os.path.dirname(os.path.abspath(path))
        while not os.path.isdir(directory):  # the nearest existing ancestor must take the new folders
            if os.path.lexists(directory):
                raise ServerError(f"cannot create socket directory for {path!r}: {directory!r} is not a "
                                  "directory")
            directory = os.path.dirname(directory)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise ServerError(f"cannot listen on unix socket {path!r}: {directory!r} is not writable")
        return False
    if not stat.S_ISSOCK(mode):
        raise ServerError(f"{path!r} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return True  # a dead controller's leftover
        raise ServerError(f"unix socket {path!r} is unusable: {exc.strerror}") from None
    finally:
        probe.close()
    raise ServerError(f"another process is serving on {path!r}")


def _remove_stale_socket(path: str) -> None:
    if _check_socket_path(path):
        os.unlink(path)


class ThreadedServer:
    """An :class:`ApiServer` (plus optional green tasks) running in its own OS thread and eventlet hub."""

    def __init__(self, server: ApiServer, tasks: tuple[Callable[[], Any], ...] = ()) -> None:
        self.server = server
        self.tasks = tasks
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="echelon-api", daemon=True)

    def _run(self) -> None:
        try:
            self.server.start()
        except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
            self._error = exc
            self._ready.set()
            return
        green = [eventlet.spawn(task) for task in self.tasks]
        self._ready.set()
        while not self._stop.is_set():
            eventlet.sleep(0.02)
        for thread in green:
            thread.kill()
        self.server.stop()

    def start(self) -> ThreadedServer:
        self._thread.start()
        self._ready.wait(10.0)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10.0)


def run_in_thread(server: ApiServer, tasks: tuple[Callable[[], Any], ...] = ()) -> ThreadedServer:
    """Start ``server`` in a new OS thread with its own hub; ``.stop()`` ends it and cleans up."""
    return ThreadedServer(server, tasks).start()


# --------------------------------------------------------------------------- standalone
#: The controller settings the standalone server takes as options too (``--retain-done-s``, ...).
RETENTION_SETTINGS = ("retain_done_jobs", "retain_done_s", "archive_done_s")


def main(argv: list[str] | None = None) -> int:
    """Serve a registry with no OpenFlow fabric (enforcement disabled) until interrupted."""
    from controller.api import Api
    from controller.auth import DEFAULT_TOKEN_PATH, generate_token, write_token
    from controller.config import add_arguments, from_arguments
    from controller.heap import settle
    from controller.owner_lock import own_store_and_token
    from controller.registry import Registry
    from controller.service import SchedulingService
    from controller.store import open_registry
    from echelonflow.topology_spec import add_topology_arguments, topology_from_arguments

    parser = argparse.ArgumentParser(prog="python -m controller.api_server", description=main.__doc__)
    add_topology_arguments(parser)
    parser.add_argument("--host", default=DEFAULTS["api_host"])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--socket", default=None,
                        help="unix socket path (default /run/echelon/controller-PORT.sock)")
    parser.add_argument("--store", default=None, help="SQLite path (default: memory only)")
    parser.add_argument("--token-file", default=DEFAULT_TOKEN_PATH)
    parser.add_argument("--interval-s", type=float, default=0.5)
    add_arguments(parser, RETENTION_SETTINGS)  # how long done jobs stay (docs/controller-config.md)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        topo = topology_from_arguments(args)
        retention = from_arguments(args, RETENTION_SETTINGS).retention
        if not args.interval_s > 0:
            raise ValueError(f"--interval-s must be > 0, got {args.interval_s!r}")
        for what, path in (("--store", args.store), ("--token-file", args.token_file)):
            if path and os.path.isdir(path):
                raise ValueError(f"{what} {path} is a directory; give a file path")
        server = ApiServer(None, host=args.host, port=args.port, socket_path=args.socket)
        server.check()  # everything that can be refused is, before the first write (locks, store, token)
        locks = own_store_and_token(args.store or ":memory:", args.token_file)  # noqa: F841 - held till exit
        registry = (open_registry(topo, args.store, retention) if args.store
                    else Registry(topo, retention=retention))
        service = SchedulingService(registry, None, ControllerConfig(interval_s=args.interval_s),
                                    event_factory=GreenEvent)
        token = generate_token()
        write_token(args.token_file, token)
        server.app = Api(service, token)
        server.start()
    except Exception as exc:  # noqa: BLE001 - a bad topology, port or store: one line, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    service.start()
    settle()  # the start-up's objects out of full collections, which stall rounds
    signal.signal(signal.SIGTERM, lambda *_: service.stop())
    print(f"serving on http://{args.host}:{server.port} and unix:{server.socket_path}; "
          f"token in {args.token_file}", flush=True)
    try:
        service.run(eventlet.sleep)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
