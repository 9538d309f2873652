"""Moving exactly N bytes over TCP, and proving it: the data plane of the traffic agents.

One TCP connection per flow.  The sender binds first (so the flow's 5-tuple is known and can be
reported to the registry before the first SYN), connects, sends a small header naming the flow, then
exactly ``size_bytes`` of payload, then half-closes.  The receiver reads the header, counts payload bytes
up to the declared size, stamps the arrival of the last byte, checks that nothing more follows (EOF),
and answers with a confirmation carrying the byte count and arrival time.  The sender only reports a
flow finished after that confirmation, so a flow is "done" when its bytes really arrived, never when
they left a socket buffer.

Wire format (sender -> receiver)::

    b"EFv1" | uint32 big-endian header length | header JSON {"job", "flow", "src", "size_bytes"} | payload

and receiver -> sender: one JSON line ``{"received_bytes": n, "finish_s": epoch}`` (or ``{"error": ...}``).

The DSCP of the flow's queue goes into ``IP_TOS`` so host-egress shaping (tc u32 on the DSCP field)
honours the scheduler's priorities; it can change mid-flow (``tos_source`` is polled between chunks).
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable

MAGIC = b"EFv1"
CHUNK_BYTES = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux value; Python lacks the name
UNPACED = 0xFFFFFFFF  # ~0U: no pacing limit
#: A flow the scheduler pauses (rate 0) still trickles at this rate, so it never looks like a stall.
MIN_PACING_BYTES_PER_S = 12_500
#: Longest a sender waits inside one socket call before it re-reads its DSCP and pacing rate.  A blocking
#: send of one chunk at a low pacing rate used to take up to CHUNK_BYTES / MIN_PACING_BYTES_PER_S (~5 s),
#: and the last socket buffer's worth was paced at whatever rate held when the final chunk was queued, so a
#: flow whose rate the scheduler raised kept crawling for seconds.  Half the agent's poll period.
REFRESH_S = 0.025
_ZEROS = bytes(CHUNK_BYTES)


class TransferError(Exception):
    """A flow that could not be delivered exactly (the message names the flow and the peer)."""


@dataclass(frozen=True)
class FlowHeader:
    job: str
    flow: str
    src: str
    size_bytes: int

    def encode(self) -> bytes:
        body = json.dumps({"job": self.job, "flow": self.flow, "src": self.src,
                           "size_bytes": self.size_bytes}).encode()
        return MAGIC + struct.pack("!I", len(body)) + body

    @property
    def name(self) -> str:
        return f"{self.job}/{self.flow}"


@dataclass(frozen=True)
class SendResult:
    src_port: int
    dst_port: int
    sent_bytes: int
    received_bytes: int
    finish_s: float  # receiver's arrival time of the last byte (epoch seconds)
    connected_s: float = 0.0  # sender: connect() returned (epoch)
    last_queued_s: float = 0.0  # sender: the last payload byte was handed to the kernel (epoch)
    confirmed_s: float = 0.0  # sender: the receiver's confirmation arrived (epoch)


#: Offset of ``tcpi_bytes_acked`` (u64) in Linux's ``struct tcp_info`` (since Linux 4.1).
_TCPI_BYTES_ACKED_OFFSET = 120


def acked_bytes(sock: socket.socket, header_bytes: int = 0) -> int | None:
    """Payload bytes the peer has acknowledged so far (TCP_INFO), or None if unavailable.

    Bytes handed to ``send`` may still sit in the socket buffer (megabytes with autotuning), so this,
    not a send counter, is what a progress report should carry.  The SYN counts one byte.
    """
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except OSError:
        return None
    if len(info) < _TCPI_BYTES_ACKED_OFFSET + 8:
        return None
    (acked,) = struct.unpack_from("=Q", info, _TCPI_BYTES_ACKED_OFFSET)
    return max(0, acked - 1 - header_bytes)


def tos_for_dscp(dscp: int) -> int:
    """The IP TOS byte for a DSCP value (DSCP is the upper six bits)."""
    if not 0 <= dscp <= 63:
        raise ValueError(f"DSCP must be 0..63, got {dscp}")
    return dscp << 2


# ------------------------------------------------------------------------------------------- sender
def send_flow(
    header: FlowHeader,
    dst_ip: str,
    dst_port: int,
    *,
    bind_ip: str = "",
    connect_timeout_s: float = 10.0,
    io_timeout_s: float = 30.0,
    on_bound: Callable[[int], None] | None = None,
    tos_source: Callable[[], int | None] | None = None,
    on_connected: Callable[[socket.socket], None] | None = None,
    pacing_source: Callable[[], int | None] | None = None,
) -> SendResult:
    """Send ``header.size_bytes`` bytes to ``dst_ip:dst_port`` and wait for the receiver's confirmation.

    ``on_bound(src_port)`` runs once the local port is known and before the first packet (report the
    flow's start there); ``on_connected(sock)`` once connected (e.g. to read TCP_INFO progress).
    ``pacing_source()`` gives a pacing rate in bytes/s (None: unpaced) applied with SO_MAX_PACING_RATE
    between chunks, so a rate allocation is enforced at the sender instead of by a dropping policer.
    Connection refusals are retried with the same source port until ``connect_timeout_s``; a peer that
    stalls longer than ``io_timeout_s`` or confirms a different byte count raises :class:`TransferError`.
    """
    deadline = time.monotonic() + connect_timeout_s
    src_port = 0
    sock = None
    last_error: OSError | None = None
    while True:
        sock = _bound_socket(bind_ip, src_port)
        if not src_port:
            src_port = sock.getsockname()[1]
            if on_bound is not None:
                on_bound(src_port)
        # DSCP and pacing before the SYN: the allocation is known once the start is reported.
        _apply_tos(sock, tos_source, None)
        _apply_pacing(sock, pacing_source, None)
        remaining = deadline - time.monotonic()
        try:
            sock.settimeout(max(0.05, remaining))
            sock.connect((dst_ip, dst_port))
            break
        except OSError as exc:  # refused (peer not listening yet) or timed out
            last_error = exc
            sock.close()
            if time.monotonic() + 0.05 >= deadline:
                raise TransferError(
                    f"flow {header.name}: cannot connect to {dst_ip}:{dst_port} within "
                    f"{connect_timeout_s:g} s ({_describe(last_error)})"
                ) from None
            time.sleep(0.05)
    connected_s = time.time()
    try:
        if on_connected is not None:
            on_connected(sock)
        sock.settimeout(io_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(header.encode())
        tos = _apply_tos(sock, tos_source, None)
        pacing = _apply_pacing(sock, pacing_source, None)
        # From here on every socket call waits at most REFRESH_S, and DSCP and pacing are re-applied between
        # calls until the receiver confirms: the kernel paces (and marks) queued bytes at transmit time, so
        # a new rate takes effect at once for everything still in the send buffer.
        sock.settimeout(REFRESH_S)
        refresh = _Refresher(sock, tos_source, pacing_source, tos, pacing)
        sent = 0
        view = memoryview(_ZEROS)
        last_progress = time.monotonic()
        try:
            while sent < header.size_bytes:
                refresh()
                try:
                    n = sock.send(view[: min(CHUNK_BYTES, header.size_bytes - sent)])
                except socket.timeout:
                    if time.monotonic() - last_progress >= io_timeout_s:
                        raise
                    continue
                sent += n
                last_progress = time.monotonic()
            last_queued_s = time.time()
            sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            if isinstance(exc, socket.timeout):
                raise
            # A receiver that refuses the flow replies and closes with our bytes unread, so its kernel
            # resets the connection: the refusal may already be waiting in our receive buffer.
            _raise_refusal_if_any(sock, header, dst_ip)
            raise
        reply = _read_line(sock, header.name, refresh, io_timeout_s)
        confirmed_s = time.time()
    except socket.timeout:
        raise TransferError(f"flow {header.name}: peer {dst_ip} stalled for {io_timeout_s:g} s") from None
    except OSError as exc:
        raise TransferError(f"flow {header.name}: connection to {dst_ip} failed: {_describe(exc)}") from None
    finally:
        sock.close()
    if "error" in reply:
        raise TransferError(f"flow {header.name}: receiver {dst_ip} refused it: {reply['error']}")
    received = reply.get("received_bytes")
    if received != header.size_bytes:
        raise TransferError(
            f"flow {header.name}: sent {header.size_bytes} bytes but receiver counted {received}"
        )
    return SendResult(src_port, dst_port, sent, int(received), float(reply["finish_s"]), connected_s,
                      last_queued_s, confirmed_s)


def _raise_refusal_if_any(sock: socket.socket, header: FlowHeader, dst_ip: str) -> None:
    """Raise the receiver's refusal if its reply line arrived before the connection broke."""
    try:
        sock.settimeout(0.2)
        reply = _read_line(sock, header.name)
    except (OSError, TransferError):
        return
    if isinstance(reply, dict) and "error" in reply:
        raise TransferError(f"flow {header.name}: receiver {dst_ip} refused it: {reply['error']}")


def _bound_socket(bind_ip: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((bind_ip, port))
    return sock


def _apply_tos(sock: socket.socket, tos_source: Callable[[], int | None] | None,
               current: int | None) -> int | None:
    """Set IP_TOS when the wanted value changed; returns the value now in force."""
    if tos_source is None:
        return current
    wanted = tos_source()
    if wanted is not None and wanted != current:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, wanted)
        return wanted
    return current


def _apply_pacing(sock: socket.socket, source: Callable[[], int | None] | None,
                  current: int | None) -> int | None:
    """Set SO_MAX_PACING_RATE (bytes/s) when the wanted value changed; None lifts the limit."""
    if source is None:
        return current
    wanted = source()
    if wanted is not None:
        wanted = max(MIN_PACING_BYTES_PER_S, int(wanted))
    if wanted != current:
        # Packed as u32: Python's int form is a signed C int and cannot carry ~0U ("unpaced").
        value = UNPACED if wanted is None else min(wanted, UNPACED)
        sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("=I", value))
    return wanted


class _Refresher:
    """Re-applies a socket's DSCP and pacing rate from their sources, remembering what is in force."""

    def __init__(self, sock: socket.socket, tos_source: Callable[[], int | None] | None,
                 pacing_source: Callable[[], int | None] | None, tos: int | None, pacing: int | None) -> None:
        self.sock = sock
        self.tos_source = tos_source
        self.pacing_source = pacing_source
        self.tos = tos
        self.pacing = pacing

    def __call__(self) -> None:
        self.tos = _apply_tos(self.sock, self.tos_source, self.tos)
        self.pacing = _apply_pacing(self.sock, self.pacing_source, self.pacing)


def _read_line(sock: socket.socket, name: str, between: Callable[[], None] | None = None,
               stall_s: float | None = None) -> dict:
    """The receiver's one-line JSON reply.

    With ``between`` the socket's timeout is a short slice: ``between()`` runs after each empty slice
    (the sender's tail may still be in flight and must follow rate changes) and the wait fails with
    ``socket.timeout`` only after ``stall_s`` without any reply byte.
    """
    data = b""
    last_progress = time.monotonic()
    while not data.endswith(b"\n"):
        try:
            chunk = sock.recv(4096)
        except socket.timeout:
            if between is None or stall_s is None or time.monotonic() - last_progress >= stall_s:
                raise
            between()
            continue
        last_progress = time.monotonic()
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_HEADER_BYTES:
            break
    try:
        reply = json.loads(data.decode() or "null")
    except (UnicodeDecodeError, json.JSONDecodeError):
        reply = None
    if not isinstance(reply, dict):
        raise TransferError(f"flow {name}: receiver closed without a valid confirmation ({data[:80]!r})")
    return reply


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no error"
    if isinstance(exc, socket.timeout):
        return "timed out"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


# ------------------------------------------------------------------------------------------- receiver
@dataclass(frozen=True)
class Arrival:
    header: FlowHeader
    finish_s: float  # epoch time the last byte arrived
    received_bytes: int
    src_addr: tuple
    header_s: float = 0.0  # epoch time the flow's header was read (its first bytes arrived)


class FlowReceiver:
    """Accepts flows on ``ip:port``; one thread per connection.

    ``accept_header(header)`` returns an error string to refuse an unexpected flow, or ``None``.
    ``on_arrival(arrival)`` runs once every byte of a flow arrived (before the confirmation is sent,
    so the flow is marked done locally first); ``on_error(message)`` reports a broken transfer.
    """

    def __init__(
        self,
        ip: str,
        port: int,
        accept_header: Callable[[FlowHeader], str | None],
        on_arrival: Callable[[Arrival], None],
        on_error: Callable[[str], None],
        io_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._accept_header = accept_header
        self._on_arrival = on_arrival
        self._on_error = on_error
        self._io_timeout_s = io_timeout_s
        self._clock = clock
        self._closed = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((ip, port))
        except OSError as exc:
            self.sock.close()
            raise TransferError(f"cannot listen on {ip}:{port}: {_describe(exc)}") from None
        self.sock.listen(128)
        self._thread = threading.Thread(target=self._accept_loop, name="flow-accept", daemon=True)

    def start(self) -> FlowReceiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn, addr), name="flow-recv", daemon=True).start()

    def _serve(self, conn: socket.socket, addr: tuple) -> None:
        name = f"from {addr[0]}:{addr[1]}"
        try:
            conn.settimeout(self._io_timeout_s)
            header = _read_header(conn, name)
            header_s = self._clock()
            name = header.name
            refusal = self._accept_header(header)
            if refusal:  # report locally first, then tell the sender (its error must not overtake ours)
                self._on_error(f"flow {name} from {addr[0]}: {refusal}")
                conn.sendall((json.dumps({"error": refusal}) + "\n").encode())
                _linger_for_eof(conn)
                return
            received = _count_bytes(conn, header.size_bytes)
            finish_s = self._clock()
            if received < header.size_bytes:
                self._on_error(f"flow {name}: sender closed after {received} of {header.size_bytes} bytes")
                conn.sendall((json.dumps({"error": f"short flow: {received} bytes"}) + "\n").encode())
                return
            extra = _count_bytes(conn, 1 << 62)  # must be EOF right away
            if extra:
                self._on_error(
                    f"flow {name}: sender sent {extra} bytes more than the declared {header.size_bytes}"
                )
                conn.sendall((json.dumps({"error": f"{extra} bytes too many"}) + "\n").encode())
                return
            self._on_arrival(Arrival(header, finish_s, received, addr, header_s))
            conn.sendall((json.dumps({"received_bytes": received, "finish_s": finish_s}) + "\n").encode())
        except socket.timeout:
            self._on_error(f"flow {name}: sender {addr[0]} stalled for {self._io_timeout_s:g} s")
        except TransferError as exc:
            self._on_error(str(exc))
        except OSError as exc:
            if not self._closed.is_set():
                self._on_error(f"flow {name}: connection from {addr[0]} failed: {_describe(exc)}")
        finally:
            conn.close()


def _linger_for_eof(conn: socket.socket, limit_s: float = 1.0) -> None:
    """Half-close and read what the sender still sends (briefly) before closing.

    Closing with unread bytes makes the kernel answer with a reset, which can overtake the reply we
    just sent; reading until the sender's EOF (or ``limit_s``) lets the refusal arrive first.
    """
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(0.1)
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                if not conn.recv(65536):
                    return
            except socket.timeout:
                continue


def _recv_exact(conn: socket.socket, n: int, name: str) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise TransferError(f"flow {name}: connection closed inside the header")
        data += chunk
    return data


def _read_header(conn: socket.socket, name: str) -> FlowHeader:
    prefix = _recv_exact(conn, 8, name)
    if prefix[:4] != MAGIC:
        raise TransferError(f"connection {name}: not an EchelonFlow transfer (bad magic {prefix[:4]!r})")
    (length,) = struct.unpack("!I", prefix[4:])
    if length > MAX_HEADER_BYTES:
        raise TransferError(f"connection {name}: header of {length} bytes is too large")
    try:
        raw = json.loads(_recv_exact(conn, length, name).decode())
        header = FlowHeader(str(raw["job"]), str(raw["flow"]), str(raw["src"]), int(raw["size_bytes"]))
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise TransferError(f"connection {name}: malformed flow header") from None
    if header.size_bytes < 0:
        raise TransferError(f"flow {header.name}: negative size {header.size_bytes}")
    return header


def _count_bytes(conn: socket.socket, limit: int) -> int:
    """Read and discard up to ``limit`` bytes; returns how many came before EOF or the limit."""
    buf = bytearray(256 * 1024)
    view = memoryview(buf)
    total = 0
    while total < limit:
        n = conn.recv_into(view, min(len(buf), limit - total))
        if n == 0:
            break
        total += n
    return total
