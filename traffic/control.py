"""Completion events between agents, over Unix datagram sockets in a shared directory.

When a task finishes, the agent that observed it (the compute's host, or a flow's receiver) tells the
agents that host the task's dependants.  Mininet hosts share the file system but not the root
namespace's loopback, and these messages must not queue behind shaped data traffic, so each agent binds
``<control_dir>/<host>.sock`` (AF_UNIX, SOCK_DGRAM: reliable and message-oriented on Linux).

Messages are small JSON objects:

* ``{"type": "done", "from": host, "job": j, "task": t, "time_s": epoch}``: a dependency is satisfied;
* ``{"type": "abort", "from": host, "reason": text}``: a peer failed, stop now (fail fast, never hang).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import threading
import time
from typing import Any, Callable

from echelonflow.fileio import loads_strict
from traffic.sockets import shut_and_close

MAX_MESSAGE_BYTES = 16 * 1024


class ControlError(Exception):
    """A control message that could not be delivered (the peer is gone or never came up)."""


class ControlEndpoint:
    """This agent's control socket: receives events in a thread, sends events to peers by host name."""

    def __init__(self, control_dir: str, host: str, on_message: Callable[[dict[str, Any]], None]) -> None:
        self.control_dir = control_dir
        self.host = host
        self.path = os.path.join(control_dir, f"{host}.sock")
        self._on_message = on_message
        self._closed = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind(self.path)  # fails if another agent already claimed this host
        except OSError as exc:
            self.sock.close()
            raise ControlError(f"cannot bind control socket {self.path}: {exc.strerror}") from None
        self._send_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._thread = threading.Thread(target=self._loop, name="control-recv", daemon=True)

    def start(self) -> ControlEndpoint:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop receiving and remove the socket file (it is ours: we created it in bind)."""
        self._closed.set()
        shut_and_close(self.sock)
        self._send_sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def send(self, host: str, message: dict[str, Any], timeout_s: float = 5.0) -> None:
        """Deliver ``message`` to ``host``'s agent, retrying while its socket does not exist yet."""
        data = json.dumps(dict(message, **{"from": self.host})).encode()
        path = os.path.join(self.control_dir, f"{host}.sock")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._send_sock.sendto(data, path)
                return
            except OSError as exc:
                retriable = exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN)
                if not retriable or time.monotonic() >= deadline:
                    raise ControlError(f"cannot reach agent {host} at {path}: {exc.strerror}") from None
                time.sleep(0.02)

    def _loop(self) -> None:
        while not self._closed.is_set():
            try:
                data = self.sock.recv(MAX_MESSAGE_BYTES)
            except OSError:
                return
            if not data:
                if self._closed.is_set():
                    return
                continue
            try:
                message = loads_strict(data.decode())
            except ValueError:  # bad UTF-8 (UnicodeDecodeError) or bad JSON, nested too deep included
                message = None
            if not isinstance(message, dict) or not isinstance(message.get("type"), str):
                self._on_message({"type": "invalid", "raw": data[:120].decode("utf-8", "replace")})
                continue
            self._on_message(message)


def wait_for_sockets(control_dir: str, hosts: Any, timeout_s: float,
                     alive: Callable[[], str | None] | None = None) -> None:
    """Block until every host's control socket exists (each agent binds it once it is ready).

    ``alive()`` may return an error text (e.g. "agent h2 exited with status 2") to stop waiting early.
    """
    deadline = time.monotonic() + timeout_s
    pending = set(hosts)
    while pending:
        pending = {h for h in pending if not os.path.exists(os.path.join(control_dir, f"{h}.sock"))}
        if not pending:
            return
        if alive is not None:
            problem = alive()
            if problem:
                raise ControlError(problem)
        if time.monotonic() >= deadline:
            raise ControlError(f"agents not ready after {timeout_s:g} s: {', '.join(sorted(pending))}")
        time.sleep(0.02)
