"""Fidelity monitor: is the emulated fabric forwarding faithfully while a phase runs?

An emulation is only a result if the machine kept up with it.  This 2-core machine forwards every
packet of the fabric through ovs-vswitchd's main thread (userspace datapath) and shapes every port with
kernel htb, while the controller and one Python agent per host compete for the same cores.  When they
do not keep up, flows take longer for reasons that have nothing to do with the scheduler, and the run
must say so instead of reporting its numbers as a plain result.  Like Mininet-HiFi's invariant checks,
the monitor samples during every phase:

* **CPU saturation of the forwarding path**: the busy fraction of each ovs-vswitchd thread (from
  ``/proc/<pid>/task/<tid>/stat``; the userspace datapath forwards on its main thread, so a thread near
  100 % of a core is a saturated switch), and the whole machine's idle share (``/proc/stat``);
* **achieved vs configured link rates**: for every switch port of the fabric, bytes sent
  (``/proc/net/dev``) and the backlog of its root htb qdisc (netlink ``RTM_GETQDISC``).  A port whose
  queue holds a backlog at both ends of an interval was busy, and a busy htb link must send at its
  configured rate; one that achieves well below it means the kernel's shaping is starved of CPU;
* **ingress lag of the switch**: bytes waiting in ovs-vswitchd's packet-socket receive queues of the
  fabric's ports (``/proc/net/packet``), i.e. packets the switch has not yet looked at.

After the phase, the agents' own account joins them (:func:`judge_tcp_timeouts`): **TCP retransmission
timeouts** per host, from the kernel counters each agent records (``traffic.tcpstats``).  A flow whose
packets are lost for good (a hole in its path) leaves ports and CPU idle, which the samples above read as
a healthy machine; its sender's timeouts are what shows it.

Layers: :class:`Sample` is one reading (``take_sample`` reads it from the machine);
:func:`interval_stats` and :func:`evaluate` are pure functions from samples to per-interval numbers and
a verdict against :class:`Thresholds` (unit-tested without a fabric); :class:`FidelityMonitor` is the
sampling thread each phase starts around its agents (:mod:`emulation.phase`).  How the thresholds were
chosen is in ``docs/emulation.md`` ("Fidelity monitor").
"""

from __future__ import annotations

import os
import socket
import statistics
import struct
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from echelonflow.fileio import write_json_atomic
from topologies.ovs import socket_fds, vswitchd_pid, vswitchd_pidfile_pid


# ------------------------------------------------------------------------------------------ thresholds
@dataclass(frozen=True)
class Thresholds:
    """Where a phase stops being trustworthy (measured; see docs/emulation.md, "Fidelity monitor").

    ``ovs_thread_busy_max`` is None (not judged) by default: ovs-vswitchd's main thread was measured at
    90-99 % of a core whenever fat-tree traffic flows, in faithful and unfaithful runs alike (its poll
    loop grows to the work there is), so its share is recorded but does not decide.

    ``tcp_timeouts_max`` is 0: unlike a slow port interval, one timeout is not noise, since it stalls
    its flow for at least the hosts' minimum RTO (1 s of the scenario's time, several flows' worth), and
    every sound run measured had none.  It is a count, so :meth:`dilated` leaves it as it is.
    """

    cpu_idle_min: float = 0.05  # share of all cores idle; below: the machine is pegged
    ovs_thread_busy_max: float | None = None  # fraction of one core (None: recorded, not judged)
    saturated_share_max: float = 0.10  # share of the phase's time allowed in CPU saturation
    link_ratio_min: float = 0.90  # achieved / configured rate of a busy (backlogged) port
    slow_link_share_max: float = 0.05  # share of busy port intervals allowed below link_ratio_min ...
    slow_link_min_count: int = 3  # ... once at least this many are (one slow interval is noise)
    ingress_lag_max_s: float = 0.05  # bytes waiting in the switch's receive queues, as time at link rate
    lagging_share_max: float = 0.10  # share of the phase's time allowed with ingress lag above that
    tcp_timeouts_max: int | None = 0  # TCP retransmission timeouts allowed per host (None: not judged)

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)

    def dilated(self, factor: float) -> Thresholds:
        """The same limits for a run time-dilated by ``factor`` (echelonflow/dilation.py): ingress lag is
        time at the link rate, and at rate / F the same bytes wait F times longer while every flow lasts F
        times longer too, so the lag is judged in the scenario's own time scale (the limit x F)."""
        return replace(self, ingress_lag_max_s=self.ingress_lag_max_s * factor)


# ------------------------------------------------------------------------------------------ samples
@dataclass
class PortCounters:
    tx_bytes: int
    backlog_bytes: int  # root qdisc backlog (0 when unknown)
    ingress_queued_bytes: int = 0  # bytes in ovs-vswitchd's receive queue for this port


@dataclass
class Sample:
    """One reading of the machine: clocks, CPU jiffies, and counters of the fabric's switch ports."""

    wall_s: float  # epoch seconds (the agents' clock)
    cpu_total_jiffies: int
    cpu_idle_jiffies: int
    ovs_thread_jiffies: dict[int, int] = field(default_factory=dict)  # tid -> utime + stime
    ports: dict[str, PortCounters] = field(default_factory=dict)
    controller_jiffies: int | None = None


@dataclass
class IntervalStats:
    """What happened between two samples (pure arithmetic on them)."""

    start_s: float
    end_s: float
    cpu_idle: float  # share of all cores idle
    ovs_thread_busy: float  # busiest ovs-vswitchd thread, fraction of one core
    ovs_busy: float  # all ovs-vswitchd threads together, cores
    controller_busy: float | None  # the controller process, cores
    busy_ports: dict[str, float]  # port -> achieved / configured rate, for ports backlogged at both ends
    ingress_lag_s: float  # largest per-port receive-queue backlog of the switch, in seconds at link rate

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def interval_stats(prev: Sample, cur: Sample, port_rates_bps: Mapping[str, float],
                   clock_ticks: int = 100) -> IntervalStats | None:
    """Numbers for the interval between two samples; None when it is empty or the counters went back."""
    dt = cur.wall_s - prev.wall_s
    total = cur.cpu_total_jiffies - prev.cpu_total_jiffies
    if dt <= 0 or total <= 0:
        return None
    idle = (cur.cpu_idle_jiffies - prev.cpu_idle_jiffies) / total
    thread_busy = [
        (cur.ovs_thread_jiffies[tid] - before) / (clock_ticks * dt)
        for tid, before in prev.ovs_thread_jiffies.items() if tid in cur.ovs_thread_jiffies
    ]
    controller = None
    if prev.controller_jiffies is not None and cur.controller_jiffies is not None:
        controller = (cur.controller_jiffies - prev.controller_jiffies) / (clock_ticks * dt)
    busy_ports: dict[str, float] = {}
    lag_s = 0.0
    for port, now in cur.ports.items():
        rate = port_rates_bps.get(port)
        before = prev.ports.get(port)
        if not rate or before is None or now.tx_bytes < before.tx_bytes:
            continue
        if before.backlog_bytes > 0 and now.backlog_bytes > 0:
            busy_ports[port] = (now.tx_bytes - before.tx_bytes) * 8 / dt / rate
        lag_s = max(lag_s, now.ingress_queued_bytes * 8 / rate)
    return IntervalStats(prev.wall_s, cur.wall_s, max(0.0, min(1.0, idle)),
                         max(thread_busy, default=0.0), sum(thread_busy), controller, busy_ports, lag_s)


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _summary(values: Sequence[float]) -> dict[str, float | None]:
    return {"median": _quantile(values, 0.5), "p90": _quantile(values, 0.9), "max": max(values, default=None),
            "min": min(values, default=None)}


def evaluate(intervals: Sequence[IntervalStats], thresholds: Thresholds = Thresholds(),
             window: tuple[float, float] | None = None) -> dict[str, Any]:
    """The phase's monitor document: summaries, shares of time in violation, ``trusted`` and reasons.

    Only intervals inside ``window`` (epoch start, end; the agents' t0 to the phase's end) count: agents
    starting up (interpreter imports) load the CPU before t0 without touching the traffic.  A phase with
    no interval to judge is not trusted (nothing says it was faithful).
    """
    if window is not None:
        intervals = [i for i in intervals if i.start_s >= window[0] - 1e-6 and i.end_s <= window[1] + 1e-6]
    total_s = sum(i.duration_s for i in intervals)
    busy_max = thresholds.ovs_thread_busy_max
    saturated_s = sum(i.duration_s for i in intervals
                      if i.cpu_idle < thresholds.cpu_idle_min
                      or (busy_max is not None and i.ovs_thread_busy > busy_max))
    lagging_s = sum(i.duration_s for i in intervals if i.ingress_lag_s > thresholds.ingress_lag_max_s)
    ratios = [r for i in intervals for r in i.busy_ports.values()]
    slow = [r for r in ratios if r < thresholds.link_ratio_min]
    worst: dict[str, float] = {}
    for i in intervals:
        for port, ratio in i.busy_ports.items():
            worst[port] = min(ratio, worst.get(port, ratio))
    doc: dict[str, Any] = {
        "intervals": len(intervals),
        "observed_s": round(total_s, 3),
        "ovs_thread_busy": _summary([i.ovs_thread_busy for i in intervals]),
        "cpu_idle": _summary([i.cpu_idle for i in intervals]),
        "controller_busy": _summary([i.controller_busy for i in intervals if i.controller_busy is not None]),
        "ingress_lag_s": _summary([i.ingress_lag_s for i in intervals]),
        "busy_port_intervals": len(ratios),
        "link_ratio": _summary(ratios),
        "slowest_ports": dict(sorted(worst.items(), key=lambda kv: kv[1])[:5]),
        "saturated_share": saturated_s / total_s if total_s else None,
        "lagging_share": lagging_s / total_s if total_s else None,
        "slow_link_share": len(slow) / len(ratios) if ratios else 0.0,
        "thresholds": thresholds.to_json_dict(),
    }
    reasons = []
    if not intervals:
        reasons.append("no samples during the traffic")
    else:
        if doc["saturated_share"] > thresholds.saturated_share_max:
            reasons.append(f"CPU-saturated {doc['saturated_share']:.0%} of the time (machine idle median "
                           f"{doc['cpu_idle']['median']:.0%}, busiest ovs-vswitchd thread p90 "
                           f"{doc['ovs_thread_busy']['p90']:.0%} of a core)")
        if doc["lagging_share"] > thresholds.lagging_share_max:
            reasons.append(f"switch ingress lag above {thresholds.ingress_lag_max_s * 1000:.0f} ms "
                           f"{doc['lagging_share']:.0%} of the time (max "
                           f"{doc['ingress_lag_s']['max'] * 1000:.0f} ms)")
        if (doc["slow_link_share"] > thresholds.slow_link_share_max
                and len(slow) >= thresholds.slow_link_min_count):
            reasons.append(f"{doc['slow_link_share']:.0%} of busy port intervals below "
                           f"{thresholds.link_ratio_min:.0%} of the configured rate (min "
                           f"{doc['link_ratio']['min']:.0%})")
    doc["trusted"] = not reasons
    doc["reasons"] = reasons
    return doc


#: Hosts named in a timeout reason; the rest are counted (all of them are in ``tcp_timeouts``).
TIMEOUT_HOSTS_NAMED = 8


def judge_tcp_timeouts(doc: dict[str, Any], tcp_by_host: Mapping[str, Mapping[str, int] | None],
                       thresholds: Thresholds = Thresholds(),
                       faults_injected: bool = False) -> dict[str, Any]:
    """``doc`` (a phase's :func:`evaluate` document) with the hosts' TCP retransmission timeouts judged.

    ``tcp_by_host`` is each agent's ``tcp`` record (``traffic.tcpstats.difference`` over its run; None
    or no ``TCPTimeouts`` where it has none, e.g. an agent killed by a fault).  Adds ``tcp_timeouts``
    (host -> timeouts, hosts with any), ``tcp_hosts_counted`` and ``tcp_timeouts_judged``; a host above
    ``thresholds.tcp_timeouts_max`` adds a reason and makes the phase untrusted.  A black-holed flow
    backs off timeout after timeout; the fluid model has no timeouts at all, so any stall one causes
    is time the schedule did not spend.  Not judged (recorded only) in a phase with injected faults,
    where timeouts are the fault's cost that the fault experiments measure (docs/faults.md).
    """
    counted = {host: int(tcp["TCPTimeouts"]) for host, tcp in tcp_by_host.items()
               if tcp and tcp.get("TCPTimeouts") is not None}
    timeouts = {host: n for host, n in sorted(counted.items(), key=lambda kv: _host_order(kv[0])) if n > 0}
    limit = thresholds.tcp_timeouts_max
    judged = limit is not None and not faults_injected
    doc.update(tcp_timeouts=timeouts, tcp_hosts_counted=len(counted), tcp_timeouts_judged=judged)
    over = {host: n for host, n in timeouts.items() if judged and n > limit}
    if over:
        named = [f"{host} ({n})" for host, n in list(over.items())[:TIMEOUT_HOSTS_NAMED]]
        if len(over) > TIMEOUT_HOSTS_NAMED:
            named.append(f"{len(over) - TIMEOUT_HOSTS_NAMED} more hosts")
        allowed = "" if limit == 0 else f" (more than {limit} per host)"
        doc["reasons"] = [*doc.get("reasons", []), (
            f"TCP retransmission timeouts{allowed} on {', '.join(named)}: flows stalled, the run's times "
            "are not the schedule's")]
        doc["trusted"] = False
    return doc


def _host_order(name: str) -> tuple[str, int, str]:
    """h2 before h10: the name's letters, then its number."""
    stem = name.rstrip("0123456789")
    digits = name[len(stem):]
    return (stem, int(digits) if digits else -1, name)


def combine(phases: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A run's verdict from its phases' documents: trusted only if every phase was."""
    untrusted = {label: doc.get("reasons", []) for label, doc in phases.items() if not doc.get("trusted")}
    # the results format's keys for the phases: "rounds", "untrusted_rounds" (docs/results-format.md)
    return {"rounds": dict(phases), "trusted": not untrusted and bool(phases),
            "untrusted_rounds": sorted(untrusted)}


# ------------------------------------------------------------------------------------------ readers
def read_cpu_jiffies(path: str = "/proc/stat") -> tuple[int, int]:
    """(total, idle + iowait) jiffies over all cores since boot."""
    with open(path, encoding="ascii") as fh:
        fields = fh.readline().split()
    values = [int(v) for v in fields[1:]]
    return sum(values[:8]), values[3] + values[4]


def read_process_jiffies(pid: int) -> int | None:
    """utime + stime of a process (all threads), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


def read_thread_jiffies(pid: int) -> dict[int, int]:
    """utime + stime of every thread of ``pid`` (empty if the process is gone)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = int(fields[11]) + int(fields[12])
    return out


def parse_net_dev(text: str) -> dict[str, int]:
    """Interface -> transmitted bytes, from ``/proc/net/dev``'s text."""
    out = {}
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) >= 9:
            out[name.strip()] = int(fields[8])
    return out


def parse_packet_sockets(text: str, inodes: Iterable[int] | None = None) -> dict[int, int]:
    """Interface index -> bytes queued in receive buffers of packet sockets (``/proc/net/packet``).

    Only sockets whose inode is in ``inodes`` count when it is given (ovs-vswitchd's own sockets).
    """
    wanted = None if inodes is None else set(inodes)
    out: dict[int, int] = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 9:
            continue
        ifindex, rmem, inode = int(fields[4]), int(fields[6]), int(fields[8])
        if ifindex and (wanted is None or inode in wanted):
            out[ifindex] = out.get(ifindex, 0) + rmem
    return out


_RTM_GETQDISC = 38
_NLM_F_REQUEST_DUMP = 0x1 | 0x300
_NLMSG_DONE, _NLMSG_ERROR = 3, 2
_TCA_STATS2, _TCA_STATS_QUEUE = 7, 3
_TC_H_ROOT = 0xFFFFFFFF


def _attributes(data: bytes, offset: int, end: int) -> Iterable[tuple[int, bytes]]:
    while offset + 4 <= end:
        length, kind = struct.unpack_from("HH", data, offset)
        if length < 4:
            return
        yield kind & 0x3FFF, data[offset + 4:offset + length]
        offset += (length + 3) & ~3


def parse_qdisc_dump(messages: bytes) -> tuple[dict[int, int], bool]:
    """Interface index -> backlog bytes of its root qdisc, from one batch of netlink RTM_NEWQDISC
    messages, and whether the batch ended the dump (NLMSG_DONE)."""
    out: dict[int, int] = {}
    offset = 0
    while offset + 16 <= len(messages):
        length, kind = struct.unpack_from("IH", messages, offset)
        if length < 16:
            break
        if kind == _NLMSG_DONE:
            return out, True
        if kind == _NLMSG_ERROR:
            (code,) = struct.unpack_from("i", messages, offset + 16)
            raise OSError(-code, f"netlink qdisc dump failed: {os.strerror(-code)}")
        _family, ifindex, _handle, parent = struct.unpack_from("B3xiII", messages, offset + 16)
        if parent == _TC_H_ROOT:
            for attr, payload in _attributes(messages, offset + 36, offset + length):
                if attr == _TCA_STATS2:
                    for sub, body in _attributes(payload, 0, len(payload)):
                        if sub == _TCA_STATS_QUEUE and len(body) >= 8:
                            out[ifindex] = struct.unpack_from("II", body)[1]
        offset += (length + 3) & ~3
    return out, False


class QdiscReader:
    """Root-qdisc backlogs of this network namespace through one netlink socket (no ``tc`` process)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
        self.sock.settimeout(2.0)
        self.seq = 0

    def backlogs(self) -> dict[int, int]:
        self.seq += 1
        request = struct.pack("IHHII", 36, _RTM_GETQDISC, _NLM_F_REQUEST_DUMP, self.seq, 0)
        request += struct.pack("B3xiIII", 0, 0, 0, 0, 0)
        self.sock.send(request)
        out: dict[int, int] = {}
        done = False
        while not done:
            part, done = parse_qdisc_dump(self.sock.recv(1 << 18))
            out.update(part)
        return out

    def close(self) -> None:
        self.sock.close()


def interface_indexes(names: Iterable[str]) -> dict[int, str]:
    out = {}
    for name in names:
        try:
            with open(f"/sys/class/net/{name}/ifindex", encoding="ascii") as fh:
                out[int(fh.read())] = name
        except (OSError, ValueError):
            continue
    return out


# ------------------------------------------------------------------------------------------ sampling
def sample_interval_s(ports: int) -> float:
    """A sampling period that keeps the monitor's own cost near 1-3 % of a core: one sample costs ~1-2.5
    ms on a k=4 fat-tree (80 switch ports) and ~15 ms on a k=8 one (640), mostly parsing the qdisc dump
    and /proc/net/dev; so 0.25 s up to ~300 ports, then growing with the port count (0.5 s at k=8)."""
    return max(0.25, 0.0008 * ports)


#: Samples after an ovs-vswitchd restart that list its sockets again (its ports come back within seconds).
INODE_REREADS = 40


class FidelityMonitor:
    """Samples the machine every ``interval_s`` in a thread between :meth:`start` and :meth:`stop`.

    ``port_rates_bps`` maps the fabric's switch ports (root-namespace interfaces) to their configured
    rates; ``controller_pid`` adds the controller's CPU for the record.  What a sample costs:
    :func:`sample_interval_s`.
    """

    def __init__(self, port_rates_bps: Mapping[str, float], interval_s: float = 0.25,
                 controller_pid: int | None = None, thresholds: Thresholds = Thresholds()) -> None:
        self.port_rates_bps = dict(port_rates_bps)
        self.interval_s = interval_s
        self.controller_pid = controller_pid
        self.thresholds = thresholds
        self.samples: list[Sample] = []
        self.sample_cost_s: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ovs_pid = vswitchd_pid()
        self._ifindex = interface_indexes(self.port_rates_bps)
        self._ovs_inodes = set(socket_fds(self._ovs_pid)) if self._ovs_pid else set()
        self._inode_reads_left = 0  # samples that read the sockets of a restarted ovs-vswitchd again
        self._qdisc: QdiscReader | None = None
        self._clock_ticks = os.sysconf("SC_CLK_TCK")

    def take_sample(self) -> Sample:
        t_cost = time.perf_counter()
        total, idle = read_cpu_jiffies()
        threads = read_thread_jiffies(self._ovs_pid) if self._ovs_pid else {}
        if self._ovs_pid and not threads:
            threads = self._follow_vswitchd()
        elif self._inode_reads_left:
            self._inode_reads_left -= 1
            self._ovs_inodes = set(socket_fds(self._ovs_pid))
        with open("/proc/net/dev", encoding="ascii") as fh:
            tx = parse_net_dev(fh.read())
        backlog: dict[int, int] = {}
        if self._qdisc is not None:
            try:
                backlog = self._qdisc.backlogs()
            except OSError as exc:
                self._note(f"qdisc backlog unreadable: {exc}")
        with open("/proc/net/packet", encoding="ascii") as fh:
            queued = parse_packet_sockets(fh.read(), self._ovs_inodes)
        ports = {}
        for ifindex, name in self._ifindex.items():
            if name in tx:
                ports[name] = PortCounters(tx[name], backlog.get(ifindex, 0), queued.get(ifindex, 0))
        controller = read_process_jiffies(self.controller_pid) if self.controller_pid else None
        sample = Sample(time.time(), total, idle, threads, ports, controller)
        self.sample_cost_s.append(time.perf_counter() - t_cost)
        return sample

    def _follow_vswitchd(self) -> dict[int, int]:
        """The watched ovs-vswitchd is gone (``--fault ovs@T`` restarted it): watch the one its pidfile
        names now.  It reopens its ports' sockets over its first seconds, so they are read again at the
        next :data:`INODE_REREADS` samples."""
        pid = vswitchd_pidfile_pid()
        if pid is None:
            return {}
        self._ovs_pid = pid
        self._ovs_inodes = set(socket_fds(pid))
        self._inode_reads_left = INODE_REREADS
        return read_thread_jiffies(pid)

    def start(self) -> FidelityMonitor:
        try:
            self._qdisc = QdiscReader()
        except OSError as exc:
            self._note(f"no netlink socket for qdisc backlogs: {exc}")
        if self._ovs_pid is None:
            self._note("ovs-vswitchd not found: no switch CPU numbers")
        self.samples.append(self.take_sample())
        self._thread = threading.Thread(target=self._loop, name="fidelity-monitor", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.samples.append(self.take_sample())
            except OSError as exc:
                self._note(f"sample failed: {exc}")

    def _note(self, text: str) -> None:
        if text not in self.errors:
            self.errors.append(text)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        if self._qdisc is not None:
            self._qdisc.close()
            self._qdisc = None

    def intervals(self) -> list[IntervalStats]:
        pairs = zip(self.samples, self.samples[1:])
        found = (interval_stats(a, b, self.port_rates_bps, self._clock_ticks) for a, b in pairs)
        return [i for i in found if i is not None]

    def report(self, window: tuple[float, float] | None = None) -> dict[str, Any]:
        """The phase's monitor document (see :func:`evaluate`), plus sampling cost and any problems."""
        doc = evaluate(self.intervals(), self.thresholds, window)
        doc["sample_interval_s"] = self.interval_s
        doc["sample_cost_ms"] = (round(1000 * statistics.median(self.sample_cost_s), 3)
                                 if self.sample_cost_s else None)
        doc["ports"] = len(self.port_rates_bps)
        if self.errors:
            doc["problems"] = list(self.errors)
        return doc

    def save_intervals(self, path: str) -> None:
        """Every interval's numbers as JSON (the raw material thresholds are chosen from)."""
        write_json_atomic(path, {"interval_s": self.interval_s, "port_rates_bps": self.port_rates_bps,
                                 "intervals": [asdict(i) for i in self.intervals()]})

    def __enter__(self) -> FidelityMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
