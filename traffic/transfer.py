"""Moving exactly N bytes per flow over persistent TCP connections ("channels"), and proving it.

Collective libraries (NCCL, Gloo) connect a job's ranks once and keep those connections for the job's
lifetime; the agents do the same.  A :class:`Channel` is one TCP connection from this host to a peer
agent.  It is opened, and registered with the controller (which installs its path, rules and class once),
before the run starts, then reused by flow after flow, one flow at a time::

    sender -> receiver, per flow:  b"EFv2" | uint32 big-endian header length
                                   | header JSON {"job", "flow", "src", "size_bytes"} | exactly size_bytes
    receiver -> sender, per flow:  one JSON line {"flow": "job/flow", "received_bytes": n, "finish_s": t}
                                   or {"error": ...}, after which the receiver closes the connection

The receiver stamps a flow's finish when its last byte arrives and reports the arrival locally *before*
it confirms, so dependants wake on real arrival.  The sender's channel is free again once the
confirmation is in: the pipe is then empty, so a next flow's bytes never queue behind the last one's tail,
and each flow's start, finish and byte count stay exact.  Between a flow's dependencies and its first
byte there is no handshake, no slow start (the fabric sets ``net.ipv4.tcp_slow_start_after_idle=0`` in
every host) and no controller round trip.

The DSCP of the flow's queue goes into ``IP_TOS`` (host egress shapers classify on it) and its allocated
rate into ``SO_MAX_PACING_RATE``; both are re-read between socket calls that each wait at most
:data:`REFRESH_S`, so a changed allocation applies to everything still in the send buffer within that time
(the kernel marks and paces segments when it transmits them).
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from echelonflow.fileio import loads_strict
from traffic.sockets import shut_and_close

MAGIC = b"EFv2"
CHUNK_BYTES = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux value; Python lacks the name
UNPACED = 0xFFFFFFFF  # ~0U: no pacing limit
#: Longest a sender waits inside one socket call before it re-reads its DSCP and pacing rate.  A blocking
#: send at a low pacing rate would hold a raised rate back for seconds; half the agents' poll period.
REFRESH_S = 0.025
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)  # Linux value
#: Fallback segment size when the kernel does not say (TCP_MAXSEG): a 1500-byte frame's payload.
DEFAULT_MSS_BYTES = 1448
_ZEROS = bytes(CHUNK_BYTES)
_T = TypeVar("_T")
#: Offsets in Linux's ``struct tcp_info``: ``tcpi_backoff`` (u8: retransmission timeouts in a row, the RTO's
#: current doubling), ``tcpi_total_retrans`` (u32) and ``tcpi_bytes_acked`` (u64, since Linux 4.1).
_TCPI_BACKOFF_OFFSET = 4
_TCPI_TOTAL_RETRANS_OFFSET = 100
_TCPI_BYTES_ACKED_OFFSET = 120


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
    """One delivered flow, from the sender's side (epoch seconds)."""

    sent_bytes: int  # payload handed to the kernel
    received_bytes: int  # payload the receiver confirmed
    finish_s: float  # the receiver's arrival time of the last byte
    first_byte_s: float  # the header was handed to the kernel
    last_queued_s: float  # the last payload byte was handed to the kernel
    confirmed_s: float  # the receiver's confirmation arrived


class TcpCounters(NamedTuple):
    """What the kernel says of a connection (TCP_INFO)."""

    acked_bytes: int  # bytes the peer acknowledged so far, the SYN excluded
    total_retrans: int  # segments retransmitted over the connection's life
    backoff: int  # retransmission timeouts in a row right now (0: none pending)


def tcp_counters(sock: socket.socket) -> TcpCounters | None:
    """The connection's :class:`TcpCounters`, or None if the kernel gives none.

    Bytes handed to ``send`` may still sit in the socket buffer (megabytes with autotuning), so acknowledged
    bytes, not a send counter, are what a progress report should carry; retransmissions and the timeout
    back-off say whether a slow interval was TCP recovering from loss or a delay rather than the allocation.
    """
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except OSError:
        return None
    if len(info) < _TCPI_BYTES_ACKED_OFFSET + 8:
        return None
    (acked,) = struct.unpack_from("=Q", info, _TCPI_BYTES_ACKED_OFFSET)
    (retrans,) = struct.unpack_from("=I", info, _TCPI_TOTAL_RETRANS_OFFSET)
    return TcpCounters(max(0, acked - 1), retrans, info[_TCPI_BACKOFF_OFFSET])


class FlowProgress(NamedTuple):
    """One progress sample of the flow a channel carries."""

    acked_payload: int  # payload bytes of this flow the peer acknowledged
    retransmits: int  # segments retransmitted since this flow began
    backoff: int  # retransmission timeouts in a row right now
    #: payload bytes of this flow handed to the kernel: on their way whatever the sender does next (the
    #: socket keeps at most two segments unsent), so what the scheduler can still steer is the rest
    written_payload: int


# ------------------------------------------------------------------------------------------- sender
@dataclass(frozen=True)
class ChannelRoute:
    """Where a channel goes: from agent ``src`` (bound to ``bind_ip``) to agent ``dst`` listening on
    ``dst_ip``:``dst_port``, over ``path`` (None: the host pair's route), whose slowest link is
    ``path_rate_bps`` (None: not known; what a flow alone on the path would get)."""

    src: str
    dst: str
    bind_ip: str
    dst_ip: str
    dst_port: int
    path: tuple[str, ...] | None = None
    path_rate_bps: float | None = None


class Channel:
    """One persistent connection to a peer agent; :meth:`send_flow` moves one flow at a time over it.

    Life: :meth:`bind` (the source port is known: register the 5-tuple now), :meth:`connect`, any number of
    :meth:`send_flow`, :meth:`close`.
    """

    def __init__(self, channel_id: str, route: ChannelRoute, io_timeout_s: float = 30.0,
                 congestion_control: str | None = None) -> None:
        self.channel_id = channel_id
        self.route = route
        self.congestion_control = congestion_control
        self.io_timeout_s = io_timeout_s
        self.src_port = 0
        self.sock: socket.socket | None = None
        #: Bytes written on the connection before the current flow's header, and that header's length:
        #: the current flow's delivered payload is ``acked - flow_offset - header_bytes``.
        self.flow_offset = 0
        self.header_bytes = 0
        self.flow_retrans = 0  # the connection's retransmissions before the current flow
        self._written = 0
        self._pending = b""
        #: Payload bytes per write, and the socket's limit of unsent bytes (TCP_NOTSENT_LOWAT): one
        #: segment each, so the kernel never holds more than about two segments the flow has not sent.
        #: Bytes once in the socket cannot be taken back: with 64 KB writes, a flow started before its
        #: allocation arrived (unpaced, in the idle class) or paused right after a write pushed up to
        #: 128 KB at the top class against the scheduler's pause (docs/emulation.md, "The allocation
        #: delivered", item 7).  Set from the connection's MSS on connect.
        self.piece_bytes = CHUNK_BYTES
        self._refresh: _Refresher | None = None

    @property
    def five_tuple(self) -> tuple[str, str, int, int]:
        return self.route.bind_ip, self.route.dst_ip, self.src_port, self.route.dst_port

    def bind(self) -> int:
        """Take a local port (the channel's 5-tuple is then fixed); returns it."""
        self.sock = _bound_socket(self.route.bind_ip, self.src_port, self.congestion_control)
        self.src_port = self.sock.getsockname()[1]
        return self.src_port

    def connect(self, timeout_s: float) -> None:
        """Connect, retrying refusals (the peer agent may not listen yet) with the same source port."""
        deadline = time.monotonic() + timeout_s
        if self.sock is None:
            self.bind()
        while True:
            assert self.sock is not None
            try:
                self.sock.settimeout(max(0.05, deadline - time.monotonic()))
                self.sock.connect((self.route.dst_ip, self.route.dst_port))
                break
            except OSError as exc:
                self.sock.close()
                if time.monotonic() + 0.05 >= deadline:
                    raise TransferError(f"channel {self.channel_id}: cannot connect to {self.route.dst} at "
                                        f"{self.route.dst_ip}:{self.route.dst_port} within {timeout_s:g} s "
                                        f"({_describe(exc)})") from None
                time.sleep(0.05)
                self.sock = _bound_socket(self.route.bind_ip, self.src_port, self.congestion_control)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.piece_bytes = _segment_bytes(self.sock)
        self.sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, self.piece_bytes)

    def progress(self) -> FlowProgress | None:
        """How far the current flow is (TCP_INFO), or None."""
        counters = None if self.sock is None else tcp_counters(self.sock)
        if counters is None:
            return None
        start = self.flow_offset + self.header_bytes
        return FlowProgress(max(0, counters.acked_bytes - start),
                            max(0, counters.total_retrans - self.flow_retrans), counters.backoff,
                            max(0, self._written - start))

    def acked_payload(self) -> int | None:
        """Payload bytes of the current flow the peer has acknowledged (TCP_INFO), or None."""
        progress = self.progress()
        return None if progress is None else progress.acked_payload

    def send_flow(self, header: FlowHeader, tos_source: Callable[[], int | None] | None = None,
                  pacing_source: Callable[[], int | None] | None = None,
                  hold_source: Callable[[], bool] | None = None) -> SendResult:
        """Send one flow and wait for its confirmation; raises :class:`TransferError` if not delivered
        exactly.  A failed channel must not be used again.

        While ``hold_source()`` is true the sender writes no more payload and keeps the marking and pacing
        it had: what is already on the wire drains in its class, and nothing of the flow is left queued in
        a lower class when it resumes."""
        if self.sock is None:
            raise TransferError(f"channel {self.channel_id} is not connected")
        sock = self.sock
        encoded = header.encode()
        self.flow_offset, self.header_bytes = self._written, len(encoded)
        counters = tcp_counters(sock)
        self.flow_retrans = 0 if counters is None else counters.total_retrans
        if self._refresh is None or self._refresh.sock is not sock:
            self._refresh = _Refresher(sock, self.piece_bytes)
        refresh = self._refresh
        refresh.tos_source, refresh.pacing_source = tos_source, pacing_source
        refresh.hold_source = hold_source
        refresh()
        sock.settimeout(REFRESH_S)
        try:
            first_byte_s = time.time()
            self._send_all(memoryview(encoded), header, refresh)
            payload_start = self._written
            remaining = header.size_bytes
            while remaining:
                chunk = min(self.piece_bytes, remaining)
                self._await_turn(chunk, refresh)
                self._send_all(memoryview(_ZEROS)[:chunk], header, refresh)
                remaining -= chunk
            last_queued_s = time.time()
            reply = self._read_reply(header, refresh)
            confirmed_s = time.time()
        except OSError as exc:
            raise TransferError(f"flow {header.name}: connection to {self.route.dst_ip} failed: "
                                f"{_describe(exc)}") from None
        if "error" in reply:
            raise TransferError(f"flow {header.name}: receiver {self.route.dst_ip} refused it: "
                                f"{reply['error']}")
        if reply.get("flow") != header.name or reply.get("received_bytes") != header.size_bytes:
            raise TransferError(f"flow {header.name}: sent {header.size_bytes} bytes but receiver confirmed "
                                f"{reply.get('received_bytes')!r} for {reply.get('flow')!r}")
        return SendResult(self._written - payload_start, header.size_bytes, float(reply["finish_s"]),
                          first_byte_s, last_queued_s, confirmed_s)

    def _await_turn(self, chunk: int, refresh: _Refresher) -> None:
        """Return when the flow may write its next ``chunk``: not held, and, at a rate the sender paces
        itself (:attr:`_Refresher.own_rate`), once that rate has earned it."""
        while True:
            if refresh.hold_source is not None and refresh.hold_source():
                time.sleep(REFRESH_S)
                continue
            refresh()
            wait_s = refresh.own_pacing_wait_s(chunk)
            if wait_s <= 0:
                return
            time.sleep(min(wait_s, REFRESH_S))

    def _send_all(self, view: memoryview, header: FlowHeader, refresh: Callable[[], None]) -> None:
        assert self.sock is not None
        stalled = f"flow {header.name}: peer {self.route.dst_ip} stalled for {self.io_timeout_s:g} s"
        while view:
            n = self._patiently(stalled, refresh, self.sock.send, view)
            view = view[n:]
            self._written += n
            refresh()

    def _read_reply(self, header: FlowHeader, refresh: Callable[[], None]) -> dict:
        """The receiver's one-line JSON confirmation; keeps marking and pacing the tail meanwhile."""
        assert self.sock is not None
        stalled = (f"flow {header.name}: peer {self.route.dst_ip} did not confirm within "
                   f"{self.io_timeout_s:g} s")
        data = self._pending
        while b"\n" not in data:
            chunk = self._patiently(stalled, refresh, self.sock.recv, 4096)
            if not chunk:
                raise TransferError(f"flow {header.name}: receiver {self.route.dst_ip} closed without a "
                                    f"confirmation ({data[:80]!r})")
            data += chunk
            if len(data) > MAX_HEADER_BYTES:
                break
        line, _, self._pending = data.partition(b"\n")
        try:
            reply = loads_strict(line.decode())
        except ValueError:  # bad UTF-8 or bad JSON
            reply = None
        if not isinstance(reply, dict):
            raise TransferError(f"flow {header.name}: receiver sent an invalid confirmation ({line[:80]!r})")
        return reply

    def _patiently(self, stalled: str, refresh: Callable[[], None], call: Callable[..., _T],
                   *args: Any) -> _T:
        """``call(*args)`` (a socket call) retried until it makes progress: every :data:`REFRESH_S` timeout
        in between re-applies marking and pacing, and ``io_timeout_s`` without progress is the
        :class:`TransferError` ``stalled``."""
        deadline = time.monotonic() + self.io_timeout_s
        while True:
            try:
                return call(*args)
            except socket.timeout:
                if time.monotonic() >= deadline:
                    raise TransferError(stalled) from None
                refresh()

    def close(self) -> None:
        """Half-close (the receiver sees EOF between flows and ends its side), then close."""
        if self.sock is None:
            return
        shut_and_close(self.sock, socket.SHUT_WR)
        self.sock = None


def available_congestion_controls(path: str = "/proc/sys/net/ipv4/tcp_available_congestion_control"
                                  ) -> list[str]:
    """The TCP congestion controls this kernel offers: a socket may take any of them with TCP_CONGESTION
    (a Mininet host's root may, even where the namespace's default is limited to the allowed list)."""
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().split()
    except OSError:
        return []


def _segment_bytes(sock: socket.socket) -> int:
    """The connection's maximum segment payload (TCP_MAXSEG), capped at :data:`CHUNK_BYTES`."""
    try:
        mss = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
    except OSError:
        mss = 0
    return min(CHUNK_BYTES, mss if mss > 0 else DEFAULT_MSS_BYTES)


def _bound_socket(bind_ip: str, port: int, congestion_control: str | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if congestion_control is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion_control.encode())
        except OSError as exc:
            sock.close()
            raise TransferError(f"TCP congestion control {congestion_control!r}: {_describe(exc)}") from None
    sock.bind((bind_ip, port))
    return sock


class _Refresher:
    """Applies a socket's DSCP (IP TOS) and pacing rate from their sources when they change.

    One per connection: what was applied stays in force across flows until a source says otherwise.

    Rates the kernel can pace without stalling a later raise go into ``SO_MAX_PACING_RATE``.  Linux paces
    by departure time: after a segment leaves, the next may leave ``segment / rate`` later, and a new rate
    does not move a departure already set, so a flow paced at 130 kbit/s with 9000-byte frames sent
    nothing for 0.55 s after the scheduler raised it to the line rate.  Rates slower than one segment per
    :data:`REFRESH_S` are therefore paced here instead (:attr:`own_rate`): the socket is left unlimited and
    the sender writes one segment each time the rate has earned it, so a raise takes effect at the next
    write and a slow flow still moves, as the fluid model moves it (docs/emulation.md, item 7).
    """

    def __init__(self, sock: socket.socket, segment_bytes: int) -> None:
        self.sock = sock
        self.segment_bytes = segment_bytes
        self.tos_source: Callable[[], int | None] | None = None
        self.pacing_source: Callable[[], int | None] | None = None
        self.hold_source: Callable[[], bool] | None = None  # while true: keep marking and pacing as they are
        self.tos: int | None = None
        #: None: no limit (never set: the socket keeps the kernel's default small-queue budget, which the
        #: fabric caps per host at two frames, see topologies/fabric.py; a set limit, even "unpaced", would
        #: switch the socket to TCP's internal pacing and lift that cap)
        self.pacing: int | None = None
        #: payload bytes per second the sender paces itself at (None: the kernel paces, or nobody)
        self.own_rate: int | None = None
        self._credit_bytes = float(segment_bytes)  # what the own rate has earned, at most one segment
        self._credit_at = time.monotonic()

    def __call__(self) -> None:
        if self.hold_source is not None and self.hold_source():
            return
        if self.tos_source is not None:
            wanted = self.tos_source()
            if wanted is not None and wanted != self.tos:
                self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, wanted)
                self.tos = wanted
        if self.pacing_source is not None:
            rate = self.pacing_source()
            rate = None if rate is None else max(1, int(rate))
            own = rate is not None and rate * REFRESH_S < self.segment_bytes
            self._earn()
            self.own_rate = rate if own else None
            kernel = UNPACED if own else rate
            if kernel != self.pacing and not (kernel == UNPACED and self.pacing is None):
                # Packed as u32: Python's int form is a signed C int and cannot carry ~0U ("unpaced").
                value = UNPACED if kernel is None else min(kernel, UNPACED)
                self.sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("=I", value))
                self.pacing = kernel

    def _earn(self) -> None:
        """Credit the time since the last call at the own rate in force (a full segment without one)."""
        now = time.monotonic()
        if self.own_rate is None:
            self._credit_bytes = float(self.segment_bytes)
        else:
            self._credit_bytes = min(float(self.segment_bytes),
                                     self._credit_bytes + (now - self._credit_at) * self.own_rate)
        self._credit_at = now

    def own_pacing_wait_s(self, chunk: int) -> float:
        """0 and the ``chunk`` charged when it may be written now; else how long until it may."""
        if self.own_rate is None:
            return 0.0
        self._earn()
        if self._credit_bytes >= min(chunk, self.segment_bytes):
            self._credit_bytes -= chunk
            return 0.0
        return (min(chunk, self.segment_bytes) - self._credit_bytes) / self.own_rate


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
    header_s: float  # epoch time the flow's header arrived (its first bytes)


class FlowReceiver:
    """Accepts channels on ``ip:port``; one thread per connection, each carrying flows one after another.

    ``accept_header(header)`` returns an error string to refuse an unexpected flow (the channel is then
    closed), or ``None``.  ``on_arrival(arrival)`` runs once every byte of a flow arrived, before the
    confirmation is sent; ``on_error(message)`` reports a broken transfer.  An idle channel may wait for
    its next flow indefinitely; once a flow's header arrived, its bytes must keep coming within
    ``io_timeout_s``.
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
        self._connections: set[socket.socket] = set()
        self._confirming: set[socket.socket] = set()  # a flow arrived whole, its confirmation not yet sent
        self._lock = threading.Lock()
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

    def close(self, grace_s: float = 2.0) -> None:
        """Stop accepting; let a flow whose last byte is in finish its confirmation (the agent may close
        right after that arrival, while the sender still waits for the line), then end every channel."""
        self._closed.set()
        shut_and_close(self.sock)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._confirming:
                    break
            time.sleep(0.01)
        with self._lock:
            for conn in list(self._connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return  # closed
            with self._lock:
                self._connections.add(conn)
            threading.Thread(target=self._serve, args=(conn, addr), name="flow-recv", daemon=True).start()

    def _serve(self, conn: socket.socket, addr: tuple) -> None:
        try:
            while not self._closed.is_set():
                conn.settimeout(None)  # an idle channel waits for its next flow as long as the run lasts
                prefix = _recv_exact(conn, 8, f"from {addr[0]}:{addr[1]}", eof_ok=True)
                if prefix is None:
                    return  # the sender closed the channel between flows
                header_s = self._clock()
                conn.settimeout(self._io_timeout_s)
                header = _read_header(conn, prefix, f"from {addr[0]}:{addr[1]}")
                if not self._receive_one(conn, addr, header, header_s):
                    return
        except socket.timeout:
            self._on_error(f"channel from {addr[0]}:{addr[1]}: sender stalled for {self._io_timeout_s:g} s")
        except TransferError as exc:
            self._on_error(str(exc))
        except OSError as exc:
            if not self._closed.is_set():
                self._on_error(f"channel from {addr[0]}:{addr[1]} failed: {_describe(exc)}")
        finally:
            with self._lock:
                self._connections.discard(conn)
            conn.close()

    def _receive_one(self, conn: socket.socket, addr: tuple, header: FlowHeader, header_s: float) -> bool:
        """Receive one flow's payload and confirm it; False when the channel must close."""
        refusal = self._accept_header(header)
        if refusal:  # report locally first, then tell the sender (its error must not overtake ours)
            self._on_error(f"flow {header.name} from {addr[0]}: {refusal}")
            conn.sendall((json.dumps({"error": refusal}) + "\n").encode())
            _linger_for_eof(conn)
            return False
        received = _count_bytes(conn, header.size_bytes)
        finish_s = self._clock()
        if received < header.size_bytes:
            self._on_error(f"flow {header.name}: sender closed after {received} of {header.size_bytes} bytes")
            return False
        with self._lock:
            self._confirming.add(conn)
        try:
            self._on_arrival(Arrival(header, finish_s, received, addr, header_s))
            conn.sendall((json.dumps({"flow": header.name, "received_bytes": received, "finish_s": finish_s})
                          + "\n").encode())
        finally:
            with self._lock:
                self._confirming.discard(conn)
        return True


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


def _recv_exact(conn: socket.socket, n: int, name: str, eof_ok: bool = False) -> bytes | None:
    """Exactly ``n`` bytes; None on EOF before the first byte when ``eof_ok`` (a channel closing)."""
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            if eof_ok and not data:
                return None
            raise TransferError(f"connection {name}: closed inside a flow header")
        data += chunk
    return data


def _read_header(conn: socket.socket, prefix: bytes, name: str) -> FlowHeader:
    if prefix[:4] != MAGIC:
        raise TransferError(f"connection {name}: not an EchelonFlow channel (bad magic {prefix[:4]!r})")
    (length,) = struct.unpack("!I", prefix[4:])
    if length > MAX_HEADER_BYTES:
        raise TransferError(f"connection {name}: header of {length} bytes is too large")
    try:
        raw = loads_strict((_recv_exact(conn, length, name) or b"").decode())
        header = FlowHeader(str(raw["job"]), str(raw["flow"]), str(raw["src"]), int(raw["size_bytes"]))
    except (KeyError, TypeError, ValueError):  # ValueError: bad UTF-8 or JSON (also nested too deep)
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
