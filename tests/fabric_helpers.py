"""Shared helpers for tests that run a real fabric (Mininet + OVS): traffic, tolerances, leftovers.

``install_static_flows`` is TEST SCAFFOLDING: it gives switches destination-based forwarding without
the os-ken controller, so fabric tests do not depend on the controller.  It is not the project's
routing (that is controller/routing.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import TypeVar

import networkx as nx

from controller.launcher import ControllerProcess, free_tcp_port, local_config
from echelonflow import ownership
from echelonflow.model import ComputeTask, FlowTask, Job
from echelonflow.topology import Topology, dumbbell, fattree
from tests.waiting import wait_until  # noqa: F401 - the suite's one wait helper, re-exported
from topologies import cleanup, ovs

#: A bulk TCP sender run inside a host (``python -c TCP_SENDER DST_IP DST_PORT SRC_PORT SIZE_BYTES``): a
#: fixed source port, so the flow's 5-tuple can be enforced before it starts.
TCP_SENDER = r"""
import socket, sys
dst, sport, cport, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("0.0.0.0", cport))
sock.connect((dst, sport))
block = b"x" * (1 << 16)
while size > 0:
    size -= sock.send(block[:min(size, len(block))])
sock.shutdown(socket.SHUT_WR)
sock.close()
"""


#: Byte-exact TCP receiver run inside a host (``python -c TCP_RECEIVER PORT``): prints JSON with the bytes
#: it got before EOF (``total``) and a timeline of (wall clock, bytes so far) every 10 ms of progress.
TCP_RECEIVER = r"""
import json, socket, sys, time
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen(1)
conn, _ = server.accept()
total, timeline, last = 0, [], 0.0
while True:
    chunk = conn.recv(1 << 16)
    if not chunk:
        break
    total += len(chunk)
    now = time.time()
    if now - last >= 0.01:
        timeline.append((now, total))
        last = now
timeline.append((time.time(), total))
print(json.dumps({"total": total, "timeline": timeline}))
"""


class Transfer:
    """One TCP transfer's ``sender`` and ``receiver`` processes (:func:`tcp_transfer`); leaving the
    ``with`` block kills whichever is still running, whatever the test raised."""

    def __init__(self, sender: subprocess.Popen, receiver: subprocess.Popen) -> None:
        self.sender, self.receiver = sender, receiver

    def __enter__(self) -> Transfer:
        return self

    def __exit__(self, *exc_info) -> None:
        for proc in (self.sender, self.receiver):
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def received(self, timeout_s: float = 60.0) -> dict:
        """The receiver's report (``total``, ``timeline``: see TCP_RECEIVER) once both ends exited, each
        with status 0 (the stderr of both in the message otherwise)."""
        out, err = self.receiver.communicate(timeout=timeout_s)
        sender_err = self.sender.communicate(timeout=10)[1]
        statuses = (self.sender.returncode, self.receiver.returncode)
        assert statuses == (0, 0), (sender_err + err).decode()[-300:]
        return json.loads(out.decode())


def tcp_transfer(fabric, src: str, dst: str, size_bytes: int, ports: tuple[int, int]) -> Transfer:
    """Start one TCP transfer of exactly ``size_bytes`` on fixed ports (client, server), so the
    controller can enforce its 5-tuple (use the result in a ``with`` block)."""
    cport, sport = ports
    receiver = fabric.host(dst).popen([sys.executable, "-c", TCP_RECEIVER, str(sport)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_until(lambda: f":{sport} " in fabric.host(dst).cmd("ss -ltn"), 5, "the receiver listening")
    sender = fabric.host(src).popen([sys.executable, "-c", TCP_SENDER, fabric.host(dst).IP(), str(sport),
                                     str(cport), str(size_bytes)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
    return Transfer(sender, receiver)


#: How soon the controller must move an enforced flow off a link or switch that went down (docs/faults.md).
REROUTE_TARGET_S = 1.0


#: How many times in all a TCP measurement short of its target is taken (:func:`measured_until`).
STARVED_ATTEMPTS = 3
Measured = TypeVar("Measured")


def measured_until(measure: Callable[[int], Measured],
                   enough: Callable[[Measured], bool]) -> tuple[Measured, int]:
    """``measure(attempt)`` (attempt 0, 1, ...) until ``enough`` of its result, at most
    :data:`STARVED_ATTEMPTS` times; returns the last result and how many were taken.  A busy core (the
    userspace datapath shares the machine's two) only ever lowers what TCP gets, and two TCP flows can hold
    an uneven split for seconds, so a measurement short of its target is taken again; ``measure`` asserts
    the bounds a broken enforcement would fail (a flow held back getting the link) on every measurement."""
    for attempt in range(STARVED_ATTEMPTS):
        result = measure(attempt)
        if enough(result):
            break
    return result, attempt + 1


def assert_within(value: float, target: float, lo: float, hi: float, what: str) -> None:
    """Assert ``lo * target <= value <= hi * target`` with a message giving the ratio."""
    if target <= 0:
        raise ValueError(f"{what}: target must be positive, got {target!r}")
    ratio = value / target
    assert lo <= ratio <= hi, (
        f"{what}: {value:.4g} is {ratio:.1%} of {target:.4g}, expected {lo:.0%}..{hi:.0%}"
    )


# --------------------------------------------------------------------------- controller + fabric
def stored_controller(state) -> ControllerProcess:
    """The controller of :func:`fattree_with_stored_controller`'s ``state``; a restart builds another on
    the same ports, folder and registry store."""
    config = local_config(api_port=state.api_port, store=state.store, interval_s=0.5)
    return ControllerProcess(state.topo, config, ofp_port=state.port, workdir=state.workdir,
                             extra_env=state.controller_env)


@contextlib.contextmanager
def fattree_with_stored_controller(link_bps: float, prefix: str,
                                   controller_env: dict[str, str] | None = None) -> Iterator[SimpleNamespace]:
    """A k=4 fat-tree with a controller that keeps its registry in a store (``state.ctl``), for one test
    module; everything is removed afterwards.  ``controller_env``: ``ECHELON_*`` settings of the
    controller (docs/controller-config.md) beyond the launcher's."""
    workdir = tempfile.mkdtemp(prefix=prefix)  # short: the API's Unix socket lives here
    state = SimpleNamespace(topo=fattree(link_bps, k=4), port=free_tcp_port(), api_port=free_tcp_port(),
                            workdir=workdir, store=os.path.join(workdir, "registry.sqlite"),
                            controller_env=dict(controller_env or {}))
    state.ctl = stored_controller(state)
    try:
        with controller_and_fabric(state):
            yield state
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def dumbbell_with_controller(link_bps: float) -> Iterator[SimpleNamespace]:
    """A dumbbell (h1 h2 | h3 h4) with the project's controller, for one test module (``state.topo``,
    ``state.fabric``, ``state.ctl``); both stopped afterwards."""
    topo = dumbbell(link_bps, hosts_per_side=2)
    port = free_tcp_port()
    state = SimpleNamespace(topo=topo, port=port, ctl=ControllerProcess(topo, ofp_port=port))
    with controller_and_fabric(state):
        yield state


@contextlib.contextmanager
def controller_and_fabric(state):
    """Start ``state.ctl`` (a ControllerProcess, not started) and a Fabric of ``state.topo`` on
    ``state.port``; always stop both, and fail if the controller logged problems.

    ``state.problems`` collects the log problems of every controller the tests ran (a restart test
    adds the replaced one's), so a restarted controller's errors are not lost.
    """
    from topologies.fabric import Fabric

    state.fabric = None
    state.problems = getattr(state, "problems", [])
    try:
        state.ctl.start()
        state.fabric = Fabric(state.topo, controller_port=state.port, queues=4).start()
        state.ctl.wait_switches(timeout_s=20)
        yield state
    finally:
        if state.fabric is not None:
            state.fabric.stop()
        state.ctl.stop()
        state.problems += state.ctl.log_problems()
    assert state.problems == [], f"controller log shows problems: {state.problems[:3]}"


# --------------------------------------------------------------------------- traffic
def two_jobs(a_flow_bytes: int) -> list[Job]:
    """Two jobs on disjoint hosts of a k=4 fat-tree, for fault tests: ``a`` sends ``a_flow_bytes`` h1->h16
    (long enough for a fault to hit it mid-flow) and 500 kB back; ``b`` sends 3 MB h5->h12 and back."""
    a = Job("a")
    a.add(ComputeTask("c0", "h1", 0.1))
    a.add(FlowTask("f1", "h1", "h16", a_flow_bytes, ("c0",)))
    a.add(ComputeTask("c1", "h16", 0.2, ("f1",)))
    a.add(FlowTask("f2", "h16", "h1", 500_000, ("c1",)))
    b = Job("b")
    b.add(ComputeTask("c0", "h5", 0.1))
    b.add(FlowTask("g1", "h5", "h12", 3_000_000, ("c0",)))
    b.add(ComputeTask("c1", "h12", 0.2, ("g1",)))
    b.add(FlowTask("g2", "h12", "h5", 3_000_000, ("c1",)))
    return [a, b]


def iperf3_flows(
    fabric, flows: Sequence[tuple[str, str, int | None]], seconds: float = 5.0, base_port: int = 5301,
    omit_s: int = 1, ports: Sequence[tuple[int, int]] | None = None,
) -> list[float]:
    """Run TCP iperf3 flows ``(src, dst, tos)`` concurrently; return each one's received bits/s.

    Servers are one-off (``-1``) and every process started here is waited for or killed by pid.
    ``omit_s`` seconds of slow start are left out of the average.  ``ports`` fixes each flow's
    (client port, server port), so its 5-tuple is known beforehand and the controller can enforce it;
    by default servers listen on ``base_port + i`` and clients take any port.
    """
    if ports is None:
        ports = [(0, base_port + i) for i in range(len(flows))]
    servers, clients = [], []
    try:
        for (_src, dst, _tos), (_cport, sport) in zip(flows, ports):
            servers.append(fabric.host(dst).popen(["iperf3", "-s", "-1", "-p", str(sport)],
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_listening(fabric, [(dst, sport) for (_s, dst, _t), (_c, sport) in zip(flows, ports)])
        for (src, dst, tos), (cport, sport) in zip(flows, ports):
            argv = ["iperf3", "-c", fabric.host(dst).IP(), "-p", str(sport), "-t", str(seconds),
                    "-O", str(omit_s), "-J"]
            if cport:
                argv += ["--cport", str(cport)]
            if tos is not None:
                argv += ["--tos", str(tos)]
            clients.append(fabric.host(src).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        results = []
        for proc in clients:
            out, err = proc.communicate(timeout=seconds + omit_s + 30)
            data = json.loads(out.decode() or "{}")
            if "error" in data or proc.returncode != 0:
                raise AssertionError(f"iperf3 failed: {data.get('error')} {err.decode()[-300:]}")
            results.append(float(data["end"]["sum_received"]["bits_per_second"]))
        return results
    finally:
        for proc in clients + servers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def iperf3_bps(fabric, src: str, dst: str, seconds: float = 5.0, tos: int | None = None) -> float:
    """Received bits/s of one TCP iperf3 flow from ``src`` to ``dst``."""
    return iperf3_flows(fabric, [(src, dst, tos)], seconds=seconds)[0]


def _wait_listening(fabric, endpoints: Sequence[tuple[str, int]], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    for host, port in endpoints:
        while f":{port} " not in fabric.host(host).cmd("ss -ltn"):
            if time.monotonic() > deadline:
                raise AssertionError(f"iperf3 server on {host}:{port} did not start")
            time.sleep(0.05)


def ping_loss(fabric, src: str, dst: str, count: int = 3) -> float:
    """Packet loss fraction of ``count`` pings from ``src`` to ``dst``."""
    out = fabric.host(src).cmd(f"ping -c {count} -i 0.2 -W 1 {fabric.host(dst).IP()}")
    for part in out.split(","):
        if "packet loss" in part:
            return float(part.split("%")[0]) / 100.0
    raise AssertionError(f"no ping summary in: {out[-300:]}")


# --------------------------------------------------------------------------- what the switches hold
def dump(switch: str, what: str = "dump-flows") -> str:
    return subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", what, switch], capture_output=True, text=True,
                          check=True).stdout


def enforced_rules(switch: str) -> list[dict]:
    """The switch's priority-20 (enforcement) rules, parsed."""
    rules = []
    for line in dump(switch).splitlines():
        if "priority=20" not in line:
            continue
        found = {name: re.search(pattern, line) for name, pattern in {
            "tp_src": r"tp_src=(\d+)", "tp_dst": r"tp_dst=(\d+)", "dscp": r"set_field:(\d+)->ip_dscp",
            "queue": r"set_queue:(\d+)", "meter": r"meter:(\d+)", "duration_s": r"duration=([\d.]+)s",
            "cookie": r"cookie=(0x[0-9a-f]+)"}.items()}
        rules.append({k: (m.group(1) if m else None) for k, m in found.items()} | {"line": line})
    return rules


def rules_of(flow: dict) -> dict[str, dict]:
    """Switch -> the forward rule of ``flow`` (a flow view from the API), for every switch on its path."""
    found = {}
    for switch in flow["path"][1:-1]:
        for rule in enforced_rules(switch):
            if rule["tp_src"] == str(flow["src_port"]) and rule["tp_dst"] == str(flow["dst_port"]):
                found[switch] = rule
    return found


# --------------------------------------------------------------------------- static flows (scaffolding)
def static_flow_table(topology: Topology) -> dict[str, list[str]]:
    """Switch -> ovs-ofctl flow lines: per destination host, forward IP and ARP along a shortest-path
    tree rooted at that host (a tree, so no loops even on the fat-tree)."""
    g = topology.graph
    flows: dict[str, list[str]] = {s: [] for s in topology.switches}
    for dst in topology.hosts:
        ip = g.nodes[dst]["ip"]
        paths = nx.single_source_shortest_path(g, dst)  # deterministic BFS tree
        for switch in topology.switches:
            next_hop = paths[switch][-2]
            port = topology.port(switch, next_hop)
            flows[switch].append(f"priority=100,ip,nw_dst={ip},actions=output:{port}")
            flows[switch].append(f"priority=100,arp,arp_tpa={ip},actions=output:{port}")
    return flows


def install_static_flows(topology: Topology) -> None:
    """Install :func:`static_flow_table` with ovs-ofctl (OpenFlow 1.3), replacing each switch's table."""
    for switch, lines in static_flow_table(topology).items():
        proc = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "replace-flows", switch, "-"],
                              input="\n".join(lines) + "\n", text=True, capture_output=True)
        assert proc.returncode == 0, f"ovs-ofctl replace-flows {switch}: {proc.stderr}"


# --------------------------------------------------------------------------- leftovers
def leftovers(tag: str, bridges: Sequence[str], interfaces: Sequence[str],
              pids: Sequence[dict[str, int]]) -> dict[str, list]:
    """Anything of a fabric that still exists: tagged rows/bridges, its interfaces, live pids, state file."""
    present = set(ovs.existing_links())
    return {
        "tagged_bridges": sorted(ovs.bridges_owned(tag)),
        "bridges": sorted(set(bridges) & set(ovs.list_bridges())),
        "qos_rows": sorted(ovs.rows_owned("QoS", tag)),
        "queue_rows": sorted(ovs.rows_owned("Queue", tag)),
        "interfaces": sorted(set(interfaces) & present),
        "pids": [r["pid"] for r in pids if ownership.same_process(r)],
        "state_file": [cleanup.state_path(tag)] if os.path.exists(cleanup.state_path(tag)) else [],
    }


def assert_nothing_left(tag: str, bridges: Sequence[str], interfaces: Sequence[str],
                        pids: Sequence[dict[str, int]]) -> None:
    found = {k: v for k, v in leftovers(tag, bridges, interfaces, pids).items() if v}
    assert not found, f"fabric {tag} left behind: {found}"


# --------------------------------------------------------------------------- floods and load
ARP_STORM = """
import socket, struct, sys, time
intf, rate, seconds, mac_text, src_ip, dst_ip = sys.argv[1:7]
rate, seconds, mac = int(rate), float(seconds), bytes.fromhex(mac_text.replace(":", ""))
arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac, socket.inet_aton(src_ip), bytes(6),
                  socket.inet_aton(dst_ip))
frame = b"\\xff" * 6 + mac + b"\\x08\\x06" + arp
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((intf, 0))
start, sent = time.monotonic(), 0
while time.monotonic() - start < seconds:
    due = int((time.monotonic() - start) * rate)
    while sent < due:
        try:
            sock.send(frame)
        except OSError:
            pass
        sent += 1
    time.sleep(0.001)
print(sent)
"""


def arp_storm(fabric, host: str, target: str, rate: int, seconds: float):
    """Start a broadcast ARP flood of ``rate`` frames/s from ``host`` (asking for ``target``); returns the
    process (its stdout is the number of frames sent)."""
    node = fabric.host(host)
    return node.popen([sys.executable, "-c", ARP_STORM, node.defaultIntf().name, str(rate), str(seconds),
                       node.MAC(), node.IP(), fabric.host(target).IP()], stdout=subprocess.PIPE)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ping_replies(fabric, src: str, dst: str, count: int = 20, interval_s: float = 0.1) -> list[int]:
    """Sequence numbers of the echo replies ``src`` got from ``dst`` (1-based)."""
    out = fabric.host(src).cmd(f"ping -c {count} -i {interval_s} -W 1 {fabric.host(dst).IP()}")
    return [int(line.split("icmp_seq=")[1].split()[0]) for line in out.splitlines() if "icmp_seq=" in line]
