"""Truth on the wire: capture the fabric's first-hop switch ports and check each flow against it.

Why: every number the emulation reports comes from the agents' own clocks and from what the controller
says it allocated.  A capture shows what the network actually carried: which DSCP mark (so which queue)
each packet of a flow had, and when its first and last packets passed.

Capturing (``python -m emulation.capture OUT_DIR IFACE...``, started and stopped by pid by the phase):
one AF_PACKET socket per interface in the root namespace (the switch side of each host's link), a
classic BPF filter that keeps IPv4 TCP only and cuts every packet to :data:`SNAP_BYTES` in the kernel
(headers are all the check needs, and copying less costs less), kernel receive timestamps
(``SO_TIMESTAMPNS``, the same wall clock the agents stamp with), written as nanosecond pcap files with
scapy's pcap writer, one per interface.  SIGTERM flushes and exits; ``capture.json`` records packet
counts, kernel drops and the CPU time the capture used.  The loop is plain ``recvmsg`` + write: scapy
dissects a packet in tens of microseconds, too slow for the hot path on this 2-core machine, so the
checker reads the files back with scapy's pcap reader and decodes the few header fields it needs itself.

Checking (:func:`check_phase`): a flow is its 5-tuple (the agents report the source and destination
port) AND its time window [start, finish] (with persistent connections several flows use one 5-tuple
one after another).  A packet belongs to the flow whose window, widened by the tolerance, contains it.
Only packets with payload count (pure ACKs go the other way and carry no class).  Per flow:

* the sender side (packets from the source host, at its first-hop port): marks as the source host's
  agent set them; the receiver side (packets to the destination host, at its first-hop port): marks as
  the last switch left them (rules rewrite DSCP along the path);
* expected mark at time t: the DSCP of the allocation the agent recorded as in force at t (the
  ``allocations`` list of the sent record: ``{"t_s", "dscp", "pacing_bytes_per_s"}``); a packet may
  still carry the previous mark for :data:`MARK_TOLERANCE_S` after a change (queued before it);
  an allocation with ``dscp`` null assigns no class, so its packets are not judged; a flow of a
  scheduler that enforces nothing (fair) must stay unmarked (DSCP 0);
* first sender-side packet against the agent's start, last receiver-side packet against the receiver's
  finish: disagreement beyond :data:`TIME_TOLERANCE_S` is listed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from echelonflow import ownership
from echelonflow.fileio import read_json, write_json_atomic
from traffic.result import AgentResult

#: Bytes kept per packet: Ethernet (14) + IPv4 (20, more with options) + TCP with timestamps (32) fit.
SNAP_BYTES = 96
#: How far a packet's time may be outside a flow's [start, finish] and still belong to it, and how far
#: first/last packet times may be from the agents' start/finish (see docs/emulation.md, measured there).
TIME_TOLERANCE_S = 0.02
#: How long after an allocation change packets may still carry the previous mark.
MARK_TOLERANCE_S = 0.05

_ETH_P_ALL = 0x0003
_SO_ATTACH_FILTER = 26
_SO_TIMESTAMPNS = 35
_SOL_PACKET = 263
_PACKET_STATISTICS = 6
CAPTURE_FILE = "capture.json"
READY_FILE = "ready"  # written once every socket is open


def bpf_ipv4_tcp(snap_bytes: int = SNAP_BYTES) -> list[tuple[int, int, int, int]]:
    """Classic BPF: accept IPv4 TCP cut to ``snap_bytes``, drop everything else (code, jt, jf, k)."""
    return [
        (0x28, 0, 0, 12),  # ldh [12]          ethertype
        (0x15, 0, 3, 0x0800),  # jeq IPv4, else drop
        (0x30, 0, 0, 23),  # ldb [23]          IP protocol
        (0x15, 0, 1, 6),  # jeq TCP, else drop
        (0x06, 0, 0, snap_bytes),  # ret snap_bytes
        (0x06, 0, 0, 0),  # ret 0 (drop)
    ]


def _attach_filter(sock: socket.socket, program: Sequence[tuple[int, int, int, int]]) -> None:
    code = b"".join(struct.pack("HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(code)
    fprog = struct.pack("HL", len(program), ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)


def _open(iface: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
    _attach_filter(sock, bpf_ipv4_tcp())  # before bind: no unfiltered packet is ever queued
    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((iface, _ETH_P_ALL))
    sock.setblocking(False)
    return sock


def capture(out_dir: str, ifaces: Sequence[str], stop: Any = None) -> dict[str, Any]:
    """Capture ``ifaces`` into ``out_dir/<iface>.pcap`` until SIGTERM/SIGINT (or ``stop()`` is true)."""
    from scapy.utils import RawPcapWriter  # scapy (the experiments extra) takes ~1 s to import: only here

    os.makedirs(out_dir, exist_ok=True)
    socks = {iface: _open(iface) for iface in ifaces}
    writers = {}
    for iface in ifaces:
        writer = RawPcapWriter(os.path.join(out_dir, f"{iface}.pcap"), linktype=1, nano=True,
                               snaplen=SNAP_BYTES)
        writer.write_header(None)
        writers[iface] = writer
    by_fd = {sock.fileno(): iface for iface, sock in socks.items()}
    counts = dict.fromkeys(ifaces, 0)
    stopping = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.append(True))
    poller = select.poll()
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    started_s = time.time()
    with open(os.path.join(out_dir, READY_FILE), "w", encoding="ascii") as fh:
        fh.write(f"{os.getpid()}\n")
    cmsg_space = socket.CMSG_SPACE(16)
    try:
        while not stopping and not (stop and stop()):
            for fd, _event in poller.poll(200):
                iface, sock, writer = by_fd[fd], socks[by_fd[fd]], writers[by_fd[fd]]
                while True:
                    try:
                        data, ancillary, _flags, _addr = sock.recvmsg(SNAP_BYTES, cmsg_space)
                    except BlockingIOError:
                        break
                    sec, nsec = _stamp(ancillary)
                    writer.write_packet(data, sec=sec, usec=nsec, caplen=len(data),
                                        wirelen=_wire_length(data))
                    counts[iface] += 1
    finally:
        drops = {}
        for iface, sock in socks.items():
            with contextlib.suppress(OSError):
                _packets, dropped = struct.unpack("II", sock.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8))
                drops[iface] = dropped
            sock.close()
        for writer in writers.values():
            writer.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    summary = {"ifaces": list(ifaces), "snap_bytes": SNAP_BYTES, "started_s": started_s,
               "stopped_s": time.time(),
               "packets": counts, "kernel_drops": drops, "cpu_s": usage.ru_utime + usage.ru_stime}
    write_json_atomic(os.path.join(out_dir, CAPTURE_FILE), summary)
    return summary


def _stamp(ancillary: Iterable[tuple[int, int, bytes]]) -> tuple[int, int]:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            return sec, nsec
    now = time.time_ns()
    return now // 1_000_000_000, now % 1_000_000_000


def _wire_length(data: bytes) -> int:
    """A packet's length on the wire (the kernel filter cut it): Ethernet header + IPv4 total length."""
    return 14 + struct.unpack_from("!H", data, 16)[0] if len(data) >= 18 else len(data)


# ------------------------------------------------------------------------------------------ reading
@dataclass(frozen=True)
class WirePacket:
    """The fields of a captured TCP/IPv4 packet the checks need."""

    time_s: float  # epoch
    src_ip: str
    src_port: int
    dst_ip: str
    dst_port: int
    dscp: int
    payload_bytes: int


def decode(frame: bytes, time_s: float) -> WirePacket | None:
    """A captured Ethernet frame's IPv4/TCP fields; None for anything else or a frame cut too short."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    ihl = (frame[14] & 0x0F) * 4
    if frame[23] != 6 or len(frame) < 14 + ihl + 13:
        return None
    tos = frame[15]
    total = struct.unpack_from("!H", frame, 16)[0]
    tcp = 14 + ihl
    src_port, dst_port = struct.unpack_from("!HH", frame, tcp)
    tcp_len = (frame[tcp + 12] >> 4) * 4
    return WirePacket(time_s, socket.inet_ntoa(frame[26:30]), src_port, socket.inet_ntoa(frame[30:34]),
                      dst_port, tos >> 2, max(0, total - ihl - tcp_len))


def read_pcap(path: str) -> list[WirePacket]:
    """Every TCP/IPv4 packet of a capture file (scapy reads the pcap framing, nanosecond or not)."""
    from scapy.utils import RawPcapReader  # deferred like RawPcapWriter in capture()

    out = []
    reader = RawPcapReader(path)
    try:
        scale = 1e-9 if getattr(reader, "nano", False) else 1e-6
        for frame, meta in reader:
            packet = decode(frame, meta.sec + meta.usec * scale)
            if packet is not None:
                out.append(packet)
    finally:
        reader.close()
    return out


# ------------------------------------------------------------------------------------------ checking
@dataclass
class FlowWindow:
    """One flow as the agents saw it: 5-tuple, time window (epoch) and the marks it should carry."""

    qid: str
    src_ip: str
    src_port: int
    dst_ip: str
    dst_port: int
    start_s: float
    finish_s: float
    allocations: list[tuple[float, int | None]] | None  # (epoch, dscp); None: not recorded
    must_be_unmarked: bool = False  # scheduler enforces nothing: DSCP 0 throughout

    def expected(self, time_s: float) -> set[int] | None:
        """Marks acceptable at ``time_s`` (any in force during the tolerance before), None: not judged."""
        if self.must_be_unmarked:
            return {0}
        if not self.allocations:
            return None
        marks = set()
        for index, (since_s, dscp) in enumerate(self.allocations):
            until_s = self.allocations[index + 1][0] if index + 1 < len(self.allocations) else float("inf")
            if since_s <= time_s and until_s > time_s - MARK_TOLERANCE_S:
                if dscp is None:
                    return None
                marks.add(dscp)
        return marks or None


@dataclass
class SideCheck:
    """What one capture point saw of a flow."""

    packets: int = 0
    first_s: float | None = None
    last_s: float | None = None
    marks: dict[int, int] = field(default_factory=dict)
    mismatched: int = 0
    unjudged: int = 0
    example: str = ""

    def add(self, packet: WirePacket, flow: FlowWindow) -> None:
        self.packets += 1
        self.first_s = packet.time_s if self.first_s is None else min(self.first_s, packet.time_s)
        self.last_s = packet.time_s if self.last_s is None else max(self.last_s, packet.time_s)
        self.marks[packet.dscp] = self.marks.get(packet.dscp, 0) + 1
        expected = flow.expected(packet.time_s)
        if expected is None:
            self.unjudged += 1
        elif packet.dscp not in expected:
            self.mismatched += 1
            if not self.example:
                self.example = f"DSCP {packet.dscp} where {sorted(expected)} was assigned"


def flow_windows(documents: Mapping[str, AgentResult], hosts_ip: Mapping[str, str], t0_s: float,
                 enforces: bool) -> tuple[list[FlowWindow], list[str]]:
    """Every flow of a phase from the agents' results (sent + received records), and problems."""
    flows, problems = [], []
    received_by_qid = {qid: rec for doc in documents.values() for qid, rec in doc.received.items()}
    for host, doc in documents.items():
        for qid, sent in doc.sent.items():
            received = received_by_qid.get(qid, {})
            if "src_port" not in sent or "dst_port" not in sent or "finish" not in received:
                problems.append(f"{qid}: no 5-tuple or finish recorded by the agents")
                continue
            raw = sent.get("allocations")
            allocations = None if raw is None else [(t0_s + float(a["t_s"]), a.get("dscp")) for a in raw]
            flows.append(FlowWindow(qid, hosts_ip[host], int(sent["src_port"]), hosts_ip[sent["dst"]],
                                    int(sent["dst_port"]), t0_s + float(sent["start"]),
                                    t0_s + float(received["finish"]), allocations, not enforces))
    return flows, problems


def assign(packets: Iterable[WirePacket], flows: Sequence[FlowWindow],
           tolerance_s: float = TIME_TOLERANCE_S) -> dict[str, list[WirePacket]]:
    """Data packets per flow: same 5-tuple, time inside [start - tol, finish + tol]; when windows of
    one 5-tuple overlap there, the flow whose own window is nearest wins."""
    by_tuple: dict[tuple, list[FlowWindow]] = {}
    for flow in flows:
        by_tuple.setdefault((flow.src_ip, flow.src_port, flow.dst_ip, flow.dst_port), []).append(flow)
    out: dict[str, list[WirePacket]] = {flow.qid: [] for flow in flows}
    for packet in packets:
        if packet.payload_bytes == 0:
            continue
        candidates = by_tuple.get((packet.src_ip, packet.src_port, packet.dst_ip, packet.dst_port), ())
        best, best_distance = None, None
        for flow in candidates:
            distance = max(flow.start_s - packet.time_s, packet.time_s - flow.finish_s, 0.0)
            if distance <= tolerance_s and (best_distance is None or distance < best_distance):
                best, best_distance = flow, distance
        if best is not None:
            out[best.qid].append(packet)
    return out


def check_flows(flows: Sequence[FlowWindow], sender_side: Mapping[str, list[WirePacket]],
                receiver_side: Mapping[str, list[WirePacket]], t0_s: float,
                tolerance_s: float = TIME_TOLERANCE_S) -> dict[str, Any]:
    """Per flow marks and times on both sides; the mismatches, one line each."""
    per_flow: dict[str, Any] = {}
    mismatches: list[str] = []
    start_deltas, finish_deltas = [], []
    for flow in flows:
        sides = {}
        for side, packets in (("sender", sender_side.get(flow.qid, [])),
                              ("receiver", receiver_side.get(flow.qid, []))):
            check = SideCheck()
            for packet in packets:
                check.add(packet, flow)
            sides[side] = check
        sender, receiver = sides["sender"], sides["receiver"]
        entry: dict[str, Any] = {
            "sender": _side_json(sender, t0_s), "receiver": _side_json(receiver, t0_s),
            "start_s": round(flow.start_s - t0_s, 6), "finish_s": round(flow.finish_s - t0_s, 6),
        }
        if sender.first_s is not None:
            entry["first_packet_after_start_s"] = round(sender.first_s - flow.start_s, 6)
            start_deltas.append(sender.first_s - flow.start_s)
        if receiver.last_s is not None:
            entry["finish_after_last_packet_s"] = round(flow.finish_s - receiver.last_s, 6)
            finish_deltas.append(flow.finish_s - receiver.last_s)
        problems = []
        if not sender.packets or not receiver.packets:
            problems.append(f"no data packets seen at the {'sender' if not sender.packets else 'receiver'}")
        for side, check in sides.items():
            if check.mismatched:
                problems.append(f"{check.mismatched} of {check.packets} packets at the {side} with a mark "
                                f"other than assigned (e.g. {check.example})")
        start_delta = entry.get("first_packet_after_start_s")
        if start_delta is not None and not -tolerance_s <= start_delta <= tolerance_s:
            problems.append(f"first packet {start_delta * 1000:+.1f} ms from the agent's start")
        finish_delta = entry.get("finish_after_last_packet_s")
        if finish_delta is not None and not -tolerance_s <= finish_delta <= tolerance_s:
            problems.append(f"receiver's finish {finish_delta * 1000:+.1f} ms from the last packet")
        entry["problems"] = problems
        per_flow[flow.qid] = entry
        mismatches += [f"{flow.qid}: {text}" for text in problems]
    judged = sum(e[s]["judged"] for e in per_flow.values() for s in ("sender", "receiver"))
    wrong = sum(e[s]["mismatched"] for e in per_flow.values() for s in ("sender", "receiver"))
    return {
        "flows": len(flows), "flows_with_problems": sum(1 for e in per_flow.values() if e["problems"]),
        "packets_judged": judged, "packets_mismatched": wrong,
        "first_packet_after_start_s": _spread_ms(start_deltas),
        "finish_after_last_packet_s": _spread_ms(finish_deltas),
        "tolerance_s": tolerance_s, "mark_tolerance_s": MARK_TOLERANCE_S,
        "mismatches": mismatches, "per_flow": per_flow,
    }


def _side_json(check: SideCheck, t0_s: float) -> dict[str, Any]:
    return {"packets": check.packets, "marks": {str(k): v for k, v in sorted(check.marks.items())},
            "judged": check.packets - check.unjudged, "mismatched": check.mismatched,
            "first_s": None if check.first_s is None else round(check.first_s - t0_s, 6),
            "last_s": None if check.last_s is None else round(check.last_s - t0_s, 6)}


def _spread_ms(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"min": None, "median": None, "max": None}
    ordered = sorted(values)
    return {"min": round(ordered[0], 6), "median": round(ordered[len(ordered) // 2], 6),
            "max": round(ordered[-1], 6)}


def check_phase(capture_dir: str, documents: Mapping[str, AgentResult], hosts_ip: Mapping[str, str],
                host_ports: Mapping[str, str], t0_s: float, enforces: bool) -> dict[str, Any]:
    """Check one phase's capture (``capture_dir`` with ``<port>.pcap`` per host port) against the
    agents' documents; ``host_ports`` maps each host to its first-hop switch port."""
    flows, problems = flow_windows(documents, hosts_ip, t0_s, enforces)
    ip_host = {ip: host for host, ip in hosts_ip.items()}
    sender_packets: list[WirePacket] = []
    receiver_packets: list[WirePacket] = []
    for host, port in host_ports.items():
        path = os.path.join(capture_dir, f"{port}.pcap")
        if not os.path.exists(path):
            continue
        for packet in read_pcap(path):
            if ip_host.get(packet.src_ip) == host:
                sender_packets.append(packet)
            elif ip_host.get(packet.dst_ip) == host:
                receiver_packets.append(packet)
    doc = check_flows(flows, assign(sender_packets, flows), assign(receiver_packets, flows), t0_s)
    doc["mismatches"] = problems + doc["mismatches"]
    try:
        doc["capture"] = read_json(os.path.join(capture_dir, CAPTURE_FILE), "capture summary", ValueError)
    except ValueError:
        doc["capture"] = None
    return doc


class CaptureError(RuntimeError):
    """The capture process could not start (the message says why)."""


class WireCapture:
    """The capture process of one phase: started before the agents, stopped (by pid) after them (and
    sent SIGTERM by the kernel if the process that started it dies: :data:`ownership.PDEATHSIG`).

    :meth:`check` then compares the pcaps with the agents' documents (:func:`check_phase`), writes the
    full per-flow result to ``check.json`` next to the pcaps and returns it without the per-flow part.
    """

    def __init__(self, out_dir: str, ifaces: Sequence[str], python: str = sys.executable,
                 ready_timeout_s: float = 15.0) -> None:
        self.out_dir = out_dir
        self.ifaces = list(ifaces)
        self.python = python
        self.ready_timeout_s = ready_timeout_s
        self.proc: Any = None

    def start(self) -> WireCapture:
        os.makedirs(self.out_dir, exist_ok=True)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(os.path.join(self.out_dir, "capture.log"), "w", encoding="utf-8") as log:
            argv = ownership.PDEATHSIG + [self.python, "-m", "emulation.capture", self.out_dir, *self.ifaces]
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=root, env=env)
        deadline = time.monotonic() + self.ready_timeout_s
        while not os.path.exists(os.path.join(self.out_dir, READY_FILE)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise CaptureError(f"capture of {', '.join(self.ifaces[:4])} did not start: "
                                   f"{_last_line(os.path.join(self.out_dir, 'capture.log'))}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        ownership.stop_children([self.proc], grace_s=30.0)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.out_dir, READY_FILE))

    def __enter__(self) -> WireCapture:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check(self, documents: Mapping[str, AgentResult], hosts_ip: Mapping[str, str],
              host_ports: Mapping[str, str], t0_s: float, enforces: bool) -> dict[str, Any]:
        doc = check_phase(self.out_dir, documents, hosts_ip, host_ports, t0_s, enforces)
        write_json_atomic(os.path.join(self.out_dir, "check.json"), doc)
        summary = {k: v for k, v in doc.items() if k != "per_flow"}
        summary["pcaps"] = sorted(f"{port}.pcap" for port in host_ports.values())
        return summary


def _last_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = [line.strip() for line in fh if line.strip()]
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        print("usage: python -m emulation.capture OUT_DIR IFACE...", file=sys.stderr)
        return 2
    try:
        capture(args[0], args[1:])
    except OSError as exc:
        print(f"capture: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
