"""Bring up and tear down the emulated fabric: Open vSwitch bridges + Mininet hosts + shaped queues.

One :class:`Fabric` is one :class:`echelonflow.topology.Topology` made real (Mininet is imported only
when a fabric starts, so this module loads, and says what is missing, on a machine without it):

* OVS bridges (OpenFlow 1.3 only) on the userspace datapath (``datapath_type=netdev``) unless the
  kernel module exists, each pointed at the controller at ``tcp:<controller_ip>:<controller_port>``;
  the switches live in the root namespace, so 127.0.0.1 reaches a local controller.  There is no
  management network: agents reach the controller over a Unix socket on the shared file system.
* Mininet hosts in network namespaces with the graph's ip/mac, checksum offload off on their
  interface (``ethtool -K <intf> tx off rx off``; through the userspace datapath TCP silently stalls
  otherwise), and, when ``shape_hosts``, an htb shaper at the link rate on their egress, with the same
  classes and DSCP filters as the switches (the simulator treats host uplinks as capacity-limited).
* every switch port shaped to its link rate with OVS linux-htb QoS and ``queues`` queues, plus DSCP ->
  class tc filters kept in place by a watchdog thread (see :mod:`topologies.qos` for why).

Ownership and cleanup: the machine-global names (bridges, interfaces) are protected by
:func:`fabric_lock`; everything is tagged ``external_ids:echelon-owner=<tag>`` and listed in a state
file before it is created (see :mod:`topologies.cleanup`).  :meth:`Fabric.stop` runs on normal exit,
on exceptions (context manager), at interpreter exit (atexit) and on SIGINT/SIGTERM (handlers installed
when the fabric is started from the main thread).  After a SIGKILL the bridges, QoS rows and
switch-side veths survive; the next :meth:`Fabric.start` or ``echelon fabric clean`` removes them.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from echelonflow import ownership
from echelonflow import queues as queue_marks
from echelonflow.errors import UserError
from echelonflow.fields import (
    Check,
    Field,
    FieldError,
    boolean,
    identifier,
    integer,
    mapping,
    nullable,
    number,
    one_of,
    read,
    show,
    text,
)
from echelonflow.topology import DEFAULT_MTU_BYTES, Topology, intf_name
from topologies import cleanup, ovs, qos

LOCK_PATH = "/run/echelon-fabric.lock"
_TAG_RE = re.compile(r"[A-Za-z0-9_.-]{1,40}")
_SYSCTL_NAME_RE = re.compile(r"net\.(ipv4|ipv6|core)\.[a-z0-9_]{1,60}")
_SYSCTL_VALUE_RE = re.compile(r"[A-Za-z0-9_.-]{1,40}")
#: Packet-ins per second (and burst) each switch may send the controller.  Measured with a 10,000
#: frames/s ARP storm from one host of a k=4 fat-tree (tests/test_faults.py prints it): unlimited, the
#: controller ran at 93 % CPU and a new pair on the storming switch got no ping through; at 200/50 it ran
#: at 27 % and new pairs on that switch and elsewhere answered their first ping (100/25: 15 %; 1000/100:
#: 52 %, pings of 160 ms).
PACKET_IN_LIMIT = (200, 50)


class FabricError(UserError):
    """The fabric cannot be brought up as asked (message says what and what to do)."""


# --------------------------------------------------------------------------- lock
class _FlockLock:
    """An exclusive flock on :data:`LOCK_PATH`; the holder's pid is written into the file for messages."""

    def __init__(self, path: str = LOCK_PATH) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, timeout_s: float | None) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                    os.close(fd)
                    raise FabricError(
                        f"another fabric holds {self.path} (pid {holder}); waited {timeout_s:.0f} s"
                    ) from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


@contextlib.contextmanager
def fabric_lock(timeout_s: float | None = None) -> Iterator[None]:
    """Hold the machine-wide fabric lock (bridge and interface names are global on the machine)."""
    lock = _FlockLock()
    lock.acquire(timeout_s)
    try:
        yield
    finally:
        lock.release()


# --------------------------------------------------------------------------- fabric
def _without_problem(problem_of: Callable[[Any], str | None]) -> Check:
    """A check from one of the ``*_problem`` functions below (None: fine)."""

    def check(field: str, value: Any) -> Any:
        problem = problem_of(value)
        if problem:
            raise FieldError(field, problem)
        return value

    return check


def _sysctls_problem(sysctls: Mapping[str, str | int]) -> str | None:
    for name, value in sysctls.items():
        problem = host_sysctl_problem(str(name), str(value))
        if problem:
            return problem
    return None


def _servers(field: str, value: Any) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise FieldError(field, f"must be an array of server names, got {show(value)}")
    return list(_without_problem(cluster_problem)(field, value))


def _rate_and_burst(field: str, value: Any) -> tuple[int, int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise FieldError(field, f"must be (packets per second, burst), got {show(value)}")
    return (integer(1)(f"{field}[0]", value[0]), integer(1)(f"{field}[1]", value[1]))


@dataclass(frozen=True)
class FabricOptions:
    """How a :class:`Fabric` is built, checked once through :mod:`echelonflow.fields` (see
    :data:`FABRIC_FIELDS`, and :class:`Fabric` for what each option does)."""

    controller_port: int | None = 6653
    controller_ip: str = "127.0.0.1"
    datapath: str = "auto"
    queues: int = queue_marks.DEFAULT_QUEUES
    tag: str | None = None
    shape_hosts: bool = True
    fail_mode: str = "secure"
    connect_timeout_s: float = 30.0
    lock_timeout_s: float | None = 600.0
    packet_in_limit: tuple[int, int] | None = PACKET_IN_LIMIT
    tcp_rto_min_ms: int | None = None
    host_sysctls: Mapping[str, str | int] = field(default_factory=dict)
    cluster: Sequence[str] | None = None
    build_timeout_s: float | None = None

    def __post_init__(self) -> None:
        given = {spec.name: getattr(self, spec.name) for spec in FABRIC_FIELDS}
        try:
            checked = read(given, FABRIC_FIELDS, what="fabric options")
        except FieldError as err:
            raise FabricError(str(err)) from None
        for name, value in checked.items():
            object.__setattr__(self, name, value)


#: The check of every :class:`FabricOptions` field.
FABRIC_FIELDS = (
    Field("controller_port", nullable(integer(1, 65535))),
    Field("controller_ip", text()),
    Field("datapath", one_of("auto", "user", "kernel")),
    Field("queues", integer(2, queue_marks.MAX_QUEUES)),
    Field("tag", nullable(identifier(_TAG_RE, "1-40 letters, digits, '_', '.', '-'"))),
    Field("shape_hosts", boolean()),
    Field("fail_mode", one_of("secure", "standalone")),
    Field("connect_timeout_s", number(0.0, above=True)),
    Field("lock_timeout_s", nullable(number(0.0))),
    Field("packet_in_limit", nullable(_rate_and_burst)),
    Field("tcp_rto_min_ms", nullable(integer(1, 60_000))),
    Field("host_sysctls", lambda field, value: _without_problem(_sysctls_problem)(
        field, mapping()(field, {} if value is None else value))),
    Field("cluster", nullable(_servers)),
    Field("build_timeout_s", nullable(number(0.0, 3600.0, above=True))),
)


class Fabric:
    """An emulated fabric for one topology; use as a context manager or call start()/stop()."""

    def __init__(self, topology: Topology, options: FabricOptions | None = None, **given: Any) -> None:
        """``options`` (or the :class:`FabricOptions` fields given by keyword, over ``options``):

        ``controller_port=None`` starts the switches without a controller (for static flows or
        ``fail_mode="standalone"`` learning-switch tests); otherwise start() waits for every switch to
        connect to ``controller_ip:controller_port``.  ``packet_in_limit`` (packets/s, burst) caps each
        switch's packet-ins (:data:`PACKET_IN_LIMIT`; None: unlimited).  ``tcp_rto_min_ms`` sets TCP's
        minimum retransmission timeout on every host's route (None: the kernel's 200 ms); emulations raise
        it because a flow the schedule parks behind more urgent classes would otherwise time out, see
        docs/emulation.md.  ``host_sysctls`` (name -> value, e.g. ``net.ipv4.tcp_reordering``) are set in
        every host's namespace on top of the fabric's own.  ``cluster`` builds the network through
        Mininet's cluster mode (``mininet.examples.cluster.MininetCluster``) on these servers; only
        ``localhost`` is supported (see :func:`cluster_problem`).  ``build_timeout_s`` bounds the creation
        of every node and link (default :func:`build_deadline_s` of the topology): Mininet waits forever for
        a node whose shell never starts."""
        if not isinstance(topology, Topology):
            raise FabricError(f"Fabric needs an echelonflow.topology.Topology, got {type(topology).__name__}")
        unknown = sorted(set(given) - {spec.name for spec in FABRIC_FIELDS})
        if unknown:
            raise FabricError(f"{unknown[0]}: unknown fabric option (allowed: "
                              f"{', '.join(spec.name for spec in FABRIC_FIELDS)})")
        self.topology = topology
        self.options = options = replace(options or FabricOptions(), **given)
        #: what this fabric's OVS rows, interfaces and state file are tagged with: the options' or its own
        self.tag = options.tag or f"f{os.getpid()}x{int(time.time() * 1000) % 10**8}"
        #: the options' bound on building the nodes and links, or the topology's default
        self.build_timeout_s = options.build_timeout_s or build_deadline_s(topology)
        self._made_dirs: list[str] = []  # folders Mininet's cluster mode made (its ssh control folder)
        self.net: Any = None
        self.watchdog: qos.FilterWatchdog | None = None
        self.state: cleanup.FabricState | None = None
        self.timings_s: dict[str, float] = {}
        self.tx_buffer_bytes: int | None = None  # ovs-vswitchd's tx socket buffer after start (user datapath)
        self._lock = _FlockLock()
        self._started = False
        self._stopping = threading.Lock()
        self._old_handlers: dict[int, Any] = {}

    # ------------------------------------------------------------------ names
    @property
    def bridges(self) -> list[str]:
        return list(self.topology.switches)

    @property
    def switch_ports(self) -> dict[str, float]:
        """Switch-side interface name -> link rate (bps), for every switch port."""
        return self.topology.switch_port_rates()

    @property
    def interfaces(self) -> list[str]:
        """Every interface the fabric creates (switch ports and host interfaces)."""
        hosts = [self.topology.host_intf(h) for h in self.topology.hosts]
        return sorted(self.switch_ports) + hosts

    def host(self, name: str) -> Any:
        """The Mininet host object ``name`` (e.g. ``h1``)."""
        if self.net is None:
            raise FabricError("the fabric is not started")
        if name not in self.topology.hosts:
            raise FabricError(f"topology {self.topology.name!r} has no host {name!r}")
        return self.net.get(name)

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Take the link ``a``-``b`` down (both interfaces administratively down, so each switch sees its
        port go down, as when a cable is pulled) or bring it back; :class:`FabricError` if that fails."""
        if self.net is None:
            raise FabricError("the fabric is not started")
        if not self.topology.graph.has_edge(a, b):
            raise FabricError(f"topology {self.topology.name!r} has no link {a}-{b}")
        for node, other in ((a, b), (b, a)):
            intf = intf_name(node, self.topology.port(node, other))
            command = f"ip link set dev {intf} {'up' if up else 'down'}"
            if self.topology.graph.nodes[node]["kind"] == "host":
                out = self.net.get(node).cmd(command + "; echo rc=$?")
                failed = "rc=0" not in out
            else:
                proc = subprocess.run(command.split(), capture_output=True, text=True, timeout=10)
                failed, out = proc.returncode != 0, proc.stderr
            if failed:
                raise FabricError(f"{command} failed: {out.strip()[:200]}")

    def set_switch(self, switch: str, up: bool) -> None:
        """Take every link of a switch down (what its neighbours see when it dies) or bring them back."""
        if self.topology.graph.nodes.get(switch, {}).get("kind") != "switch":
            raise FabricError(f"topology {self.topology.name!r} has no switch {switch!r}")
        for neighbour in sorted(self.topology.graph.neighbors(switch)):
            self.set_link(switch, neighbour, up)

    # ------------------------------------------------------------------ the switch daemon
    def stop_switch_daemon(self) -> int:
        """Stop ovs-vswitchd, the one process behind every bridge of the machine (``ovs-appctl exit`` on
        the pid its pidfile names): every switch loses its flows, meters and datapath ports at once, and
        its controller connection.  OVSDB keeps the bridges, ports, controllers and QoS rows.  Returns
        the pid stopped; :class:`FabricError` if that fails."""
        if self.net is None:
            raise FabricError("the fabric is not started")
        try:
            return ovs.stop_vswitchd()
        except ovs.OvsError as exc:
            raise FabricError(f"stopping ovs-vswitchd failed: {exc}") from None

    def start_switch_daemon(self, timeout_s: float = 30.0) -> dict[str, float]:
        """Start ovs-vswitchd again as bring-up starts it and wait for what it must re-create from OVSDB:
        every bridge's datapath ports, and every port's htb tree with its DSCP filters (the filter
        watchdog re-adds filters lost with a rebuilt root).  Seconds from the start to each
        (``ports``, ``qos``); the send buffer of its new transmit socket is enlarged later
        (:func:`topologies.ovs.ensure_tx_buffer`, once packets flowed).  The bridges reconnect to their
        controller by themselves (their ``Controller`` rows); the controller then puts their rules and
        meters back.  :class:`FabricError` if something is not back within ``timeout_s``."""
        if self.net is None:
            raise FabricError("the fabric is not started")
        t0 = time.monotonic()
        try:
            ovs.start_vswitchd(timeout_s)
        except ovs.OvsError as exc:
            raise FabricError(f"starting ovs-vswitchd again failed: {exc}") from None
        self.tx_buffer_bytes = None
        timings = {"started": time.monotonic() - t0}
        wanted = self._ports_by_bridge()
        deadline = t0 + timeout_s
        while True:
            have = ovs.datapath_ports()
            missing = sorted(f"{bridge}:{port}" for bridge, ports in wanted.items()
                             for port in ports - have.get(bridge, set()))
            if not missing:
                break
            if time.monotonic() > deadline:
                raise FabricError(f"ovs-vswitchd restarted but {len(missing)} ports are not back in its "
                                  f"datapath after {timeout_s:.0f} s, e.g. {', '.join(missing[:5])}")
            time.sleep(0.05)
        timings["ports"] = time.monotonic() - t0
        if self.watchdog is not None:
            self._await_qos(deadline, 0.05, "ovs-vswitchd restarted but did not rebuild htb QoS with DSCP "
                                            f"filters within {timeout_s:.0f} s")
        timings["qos"] = time.monotonic() - t0
        return timings

    def _ports_by_bridge(self) -> dict[str, set[str]]:
        """Bridge -> the interface names of its ports (what its datapath must hold)."""
        out: dict[str, set[str]] = {bridge: set() for bridge in self.bridges}
        for switch in self.bridges:
            for neighbour in self.topology.graph.neighbors(switch):
                out[switch].add(intf_name(switch, self.topology.port(switch, neighbour)))
        return out

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Fabric:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Fabric:
        """Create everything; on any failure tear down what was created and raise :class:`FabricError`."""
        if self._started:
            raise FabricError("this fabric is already started")
        _check_prerequisites()
        t_wait = time.monotonic()
        self._lock.acquire(self.options.lock_timeout_s)
        t0 = time.monotonic()
        self.timings_s = {"lock_wait": t0 - t_wait}  # the other timings exclude waiting for the lock
        self._started = True
        try:
            self._install_exit_hooks()
            try:
                ovs.ensure_ovs_running()
            except ovs.OvsError as exc:
                raise FabricError(str(exc)) from None
            self._recover_crashed()
            datapath = self._resolve_datapath()
            self._check_names_free()
            self.state = cleanup.FabricState(
                tag=self.tag, owner=ownership.proc_record(os.getpid()),
                bridges=self.bridges, interfaces=self.interfaces,
            )
            self.state.save()
            _check_node_creation()
            with _deadline(self.build_timeout_s, self._build_stall):
                self._build(datapath)
            self.timings_s["build"] = time.monotonic() - t0
            self._configure_hosts()
            self.timings_s["hosts"] = time.monotonic() - t0
            with _deadline(self.build_timeout_s, self._start_stall):
                self.net.start()
            self.timings_s["switches"] = time.monotonic() - t0
            self._apply_qos()
            self.timings_s["qos"] = time.monotonic() - t0
            if datapath == "user":
                # Best effort: the shared tx socket exists only once ovs-vswitchd sent a packet (the
                # emulation runner calls it again after its warm-up pings).
                with contextlib.suppress(ovs.OvsError, OSError):
                    self.tx_buffer_bytes = ovs.ensure_tx_buffer()
            if self.options.controller_port is not None:
                if self.options.packet_in_limit is not None:
                    ovs.limit_packet_ins(self.bridges, *self.options.packet_in_limit)
                self._wait_connected()
        except BaseException as exc:
            try:
                self.stop()
            except Exception as cleanup_exc:  # noqa: BLE001 (report the start's own error, not the clean-up's)
                if not isinstance(exc, Exception):
                    raise exc from None  # Ctrl-C stays Ctrl-C
                raise FabricError(f"{exc}; removing the half-started fabric failed too ({cleanup_exc}): "
                                  "`echelon fabric clean` removes what is left") from exc
            raise
        self.timings_s["start"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Remove exactly what this fabric created; safe to call twice or on a half-started fabric."""
        if not self._stopping.acquire(blocking=False):
            return  # a signal handler interrupted a stop in progress
        try:
            if not self._started:
                return
            t0 = time.monotonic()
            try:
                if self.watchdog is not None:
                    self.watchdog.stop()
                    self.watchdog = None
                if self.net is not None:
                    net, self.net = self.net, None
                    # Links first, in one batch: Mininet deletes them one shell round trip at a time.
                    with contextlib.suppress(ovs.OvsError, OSError, subprocess.SubprocessError):
                        ovs.delete_links(sorted(self.switch_ports))
                    with contextlib.suppress(Exception):  # Mininet raises assorted errors on half-built nets
                        net.stop()
                if self.state is not None:
                    cleanup.remove_state(self.state)  # whatever Mininet missed, incl. QoS/Queue rows
                    self.state = None
                for folder in reversed(self._made_dirs):
                    with contextlib.suppress(OSError):  # only if still empty: then it is ours alone
                        os.rmdir(folder)
                self._made_dirs = []
            finally:
                self._remove_exit_hooks()
                self._started = False
                self._lock.release()
                self.timings_s["stop"] = time.monotonic() - t0
        finally:
            self._stopping.release()

    # ------------------------------------------------------------------ steps
    def _resolve_datapath(self) -> str:
        has_kernel = ovs.kernel_datapath_available()
        if self.options.datapath == "kernel" and not has_kernel:
            raise FabricError("datapath='kernel' asked for, but this kernel has no openvswitch module")
        if self.options.datapath == "auto":
            return "kernel" if has_kernel else "user"
        return self.options.datapath

    def _recover_crashed(self) -> None:
        """Remove fabrics whose owner died without cleaning up (we hold the lock, so none is starting)."""
        for state in cleanup.list_states():
            if not state.owner_alive():
                cleanup.remove_state(state)

    def _check_names_free(self) -> None:
        taken = sorted(set(self.bridges) & set(ovs.list_bridges()))
        taken += sorted(set(self.interfaces + self.bridges) & set(ovs.existing_links()))
        if taken:
            shown = ", ".join(sorted(set(taken))[:8])
            raise FabricError(
                f"names this fabric needs already exist (not ours, e.g. left by a plain `mn`): {shown}; "
                "remove them (ovs-vsctl del-br / ip link del) and retry"
            )

    def _build(self, datapath: str) -> None:
        from mininet.link import Link
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import Host

        from topologies.mininet_topo import GraphTopo

        setLogLevel(os.environ.get("ECHELON_MININET_LOG", "error"))
        network: Any = Mininet
        classes: dict[str, Any] = {"switch": _switch_class(), "host": Host, "link": Link}
        if self.options.cluster is not None:
            network, classes = self._cluster_network()
        switch = partial(
            classes["switch"], owner_tag=self.tag, datapath=datapath, protocols="OpenFlow13",
            failMode=self.options.fail_mode,
        )
        self.net = network(
            topo=GraphTopo(self.topology), switch=switch, host=classes["host"], controller=None,
            link=classes["link"], build=False, autoSetMacs=False, autoStaticArp=False, waitConnected=False,
        )
        if self.options.controller_port is not None:
            self.net.addController(
                _controller_class()("c0", ip=self.options.controller_ip, port=self.options.controller_port)
            )
        self.net.build()
        assert self.state is not None
        nodes = list(self.net.hosts) + list(self.net.switches) + list(self.net.controllers)
        self.state.pids = [ownership.proc_record(n.pid) for n in nodes if n.pid]
        self.state.save()

    def _build_stall(self) -> str:
        """What the build was doing when its deadline passed: the first node Mininet had not made."""
        made = set()
        if self.net is not None:
            made = {node.name for node in list(self.net.hosts) + list(self.net.switches)}
        waiting = [name for name in [*self.topology.hosts, *self.topology.switches] if name not in made]
        what = f"creating node {waiting[0]}" if waiting else "linking the nodes"
        return (f"{what} took over {self.build_timeout_s:.0f} s (Mininet waits forever for a node whose "
                "shell never starts: can `mnexec -cdn bash` run here?)")

    def _start_stall(self) -> str:
        return f"starting the switches took over {self.build_timeout_s:.0f} s (is ovsdb-server answering?)"

    def _cluster_network(self) -> tuple[Any, dict[str, Any]]:
        """Mininet's cluster mode: ``MininetCluster`` places the nodes on the ``cluster`` servers (switches in
        even bins, each host beside its switch: ``SwitchBinPlacer``, ``mn --cluster``'s default) and
        builds them as its remote-capable classes (:func:`_cluster_classes`), which run commands
        locally for ``localhost``."""
        from mininet.examples.cluster import MininetCluster, RemoteLink, SwitchBinPlacer, findUser

        # MininetCluster makes ~/.ssh/mn for its ssh control sockets whether it needs them or not.
        home = os.path.expanduser("~")
        self._made_dirs = [d for d in (os.path.join(home, ".ssh"), os.path.join(home, ".ssh", "mn"))
                           if not os.path.isdir(d)]
        user = findUser()  # once, not per node (it runs `who am i`)
        network = partial(MininetCluster, servers=self.options.cluster, placement=SwitchBinPlacer, user=user)
        host, switch = _cluster_classes()
        return network, {"switch": partial(switch, user=user), "host": partial(host, user=user),
                         "link": RemoteLink}

    @property
    def placement(self) -> dict[str, str]:
        """Node name -> the server it runs on (``localhost`` for every node without cluster mode)."""
        if self.net is None:
            raise FabricError("the fabric is not started")
        nodes = list(self.net.hosts) + list(self.net.switches)
        return {node.name: getattr(node, "server", "localhost") for node in nodes}

    def _configure_hosts(self) -> None:
        """The topology's MTU on every link, offload off (TCP needs it through the userspace datapath),
        no slow-start restart after idle in the hosts (the agents' persistent channels sit idle between
        flows, as a collective library's connections do; a restart would cost every flow a slow start)
        and, if asked, egress shaping."""
        mtu = self.topology.mtu_bytes or DEFAULT_MTU_BYTES  # idealised links still need a real MTU here
        lines = "".join(f"link set dev {port} mtu {mtu}\n" for port in sorted(self.switch_ports))
        proc = subprocess.run(["ip", "-batch", "-"], input=lines, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise FabricError(f"setting MTU {mtu} on the switch ports failed: {proc.stderr.strip()[:300]}")
        for name in self.topology.hosts:
            node = self.net.get(name)
            intf = self.topology.host_intf(name)
            sysctls = {"net.ipv4.tcp_slow_start_after_idle": 0,
                       "net.ipv4.tcp_limit_output_bytes": 2 * (mtu + 1000), **self.options.host_sysctls}
            settings = " ".join(f"{k}={v}" for k, v in sysctls.items())
            out = node.cmd(f"ip link set dev {intf} mtu {mtu} && "
                           f"ethtool -K {intf} tx off rx off >/dev/null 2>&1 && "
                           f"sysctl -qw {settings}; echo rc=$?")
            if "rc=0" not in out:
                raise FabricError(f"MTU {mtu}, ethtool -K {intf} tx off rx off or sysctl {settings} "
                                  f"failed in host {name}")
            rto_min_ms = self.options.tcp_rto_min_ms
            if rto_min_ms is not None:
                out = node.cmd(f"ip route change $(ip -o route show dev {intf} | head -1) dev {intf} "
                               f"rto_min {rto_min_ms}ms; echo rc=$?")
                if "rc=0" not in out:
                    raise FabricError(f"rto_min {rto_min_ms}ms on the route of {intf} failed in host {name}")
            if self.options.shape_hosts:
                rate_bps = self.topology.graph.edges[name, self.topology.host_switch(name)]["rate_bps"]
                htb = qos.htb_lines(intf, rate_bps, self.options.queues)
                proc = qos.run_tc_batch(htb, netns_pid=node.pid)
                if proc.returncode != 0:
                    raise FabricError(f"shaping {intf} in host {name} failed: {proc.stderr.strip()[:300]}")

    def _apply_qos(self) -> None:
        """Create one tagged QoS (+queues) per distinct link rate, attach it to every switch port."""
        assert self.state is not None
        ports = self.switch_ports
        rates = sorted(set(ports.values()))
        create: list[list[str]] = []
        for i, rate in enumerate(rates):
            create += qos.ovs_qos_commands(f"r{i}", rate, self.options.queues, self.tag)
        uuids = ovs.vsctl_transactions(create)  # one transaction: @refs stay valid
        per_rate = 1 + self.options.queues
        qos_uuid: dict[float, str] = {}
        for i, rate in enumerate(rates):
            chunk = uuids[i * per_rate:(i + 1) * per_rate]
            qos_uuid[rate] = chunk[0]
            self.state.qos.append(chunk[0])
            self.state.queues.extend(chunk[1:])
        self.state.save()
        ovs.vsctl_transactions([["set", "Port", p, f"qos={qos_uuid[r]}"] for p, r in sorted(ports.items())])
        self.watchdog = qos.FilterWatchdog(sorted(ports), self.options.queues)
        # OVS applies QoS asynchronously; the filters go on once every port has its htb root
        self._await_qos(time.monotonic() + 30, 0.2, "OVS did not build htb QoS with DSCP filters")
        self.watchdog.reapplied = 0
        self.watchdog.start()

    def _await_qos(self, deadline: float, poll_s: float, problem: str) -> None:
        """Until every switch port has OVS's htb root with every DSCP filter (the watchdog adds what is
        missing as it checks); past ``deadline`` a FabricError: ``problem``, then a few of the ports."""
        assert self.watchdog is not None
        while True:
            self.watchdog.check_once()
            missing = self.watchdog.missing()
            if missing == []:
                return
            if time.monotonic() > deadline:
                shown = ", ".join((missing or self.watchdog.devs)[:5])
                raise FabricError(f"{problem} on ports such as {shown}")
            time.sleep(poll_s)

    def _wait_connected(self) -> None:
        options = self.options
        deadline = time.monotonic() + options.connect_timeout_s
        ours = set(self.bridges)
        while True:
            waiting = sorted(ours - ovs.connected_bridges())
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise FabricError(
                    f"{len(waiting)} of {len(ours)} switches did not connect to the controller at "
                    f"tcp:{options.controller_ip}:{options.controller_port} within "
                    f"{options.connect_timeout_s:.0f} s "
                    f"(e.g. {', '.join(waiting[:5])}); is the controller running?"
                )
            time.sleep(0.2)

    # ------------------------------------------------------------------ exit hooks
    def _install_exit_hooks(self) -> None:
        atexit.register(self.stop)
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) is signal.SIG_IGN:
                continue  # ignored here (a background job's SIGINT, nohup's SIGHUP): it stops nothing
            self._old_handlers[signum] = signal.signal(signum, self._on_signal)

    def _remove_exit_hooks(self) -> None:
        atexit.unregister(self.stop)
        for signum, handler in self._old_handlers.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signum, handler)
        self._old_handlers = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        previous = self._old_handlers.get(signum)
        self.stop()
        if callable(previous):
            previous(signum, frame)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise SystemExit(128 + signum)


def _check_prerequisites() -> None:
    if os.geteuid() != 0:
        raise FabricError("the fabric needs root (network namespaces, OVS, tc)")
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        raise FabricError(
            "the mininet Python module is not importable; use a venv made with --system-site-packages "
            "from Debian's /usr/bin/python3 (bash bootstrap.sh)"
        ) from None


#: Creating one node (a shell in new namespaces, or a bridge) takes well under this, even loaded.
NODE_BUILD_S = 0.5
#: Set-up of Mininet itself, whatever the size.
BUILD_BASE_S = 30.0


def build_deadline_s(topology: Topology) -> float:
    """How long creating ``topology``'s nodes and links may take before the fabric gives up."""
    return BUILD_BASE_S + NODE_BUILD_S * (len(topology.hosts) + len(topology.switches))


def _check_node_creation(timeout_s: float = 10.0) -> None:
    """Fail in seconds, naming the cause, where Mininet would hang: ``mnexec`` (which puts every node's
    shell into its own namespaces) must be able to run a command in new namespaces.  In a chroot, a
    container without CAP_SYS_ADMIN or a kernel without network namespaces it cannot, and Mininet then
    waits for the node's shell prompt forever."""
    command = ["mnexec", "-cdn", "true"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise FabricError("mnexec is not on PATH (Debian's mininet package has it): "
                          "no node can be made") from None
    except subprocess.TimeoutExpired:
        raise FabricError(f"`{' '.join(command)}` did not return within {timeout_s:.0f} s: "
                          "no node can be made here") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise FabricError(f"no node can be made here: `{' '.join(command)}` failed (exit {done.returncode})"
                          + (f": {said[-1]}" if said else ""))


class _DeadlinePassedError(Exception):
    """Raised inside a build that ran past its deadline (turned into a FabricError naming the stall)."""


@contextlib.contextmanager
def _deadline(seconds: float, stall: Callable[[], str]) -> Iterator[None]:
    """Interrupt the body after ``seconds`` with a FabricError saying ``stall()``.  A real-time timer
    signal is the one way to interrupt Mininet's blocking reads; it exists only in the main thread, so
    elsewhere the body runs unbounded (the pre-flight check above still catches the usual cause)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise _DeadlinePassedError

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _DeadlinePassedError:
        raise FabricError(stall()) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_SWITCH_CLASS: Any = None


def _switch_class() -> Any:
    """Mininet's OVSSwitch plus our owner tag on the bridge row (defined lazily: mininet is optional)."""
    global _SWITCH_CLASS
    if _SWITCH_CLASS is None:
        from mininet.node import OVSSwitch

        class TaggedOVSSwitch(OVSSwitch):
            """OVSSwitch whose bridge row carries ``external_ids:echelon-owner=<tag>``."""

            def __init__(self, name: str, owner_tag: str = "", **params: Any) -> None:
                self.owner_tag = owner_tag
                super().__init__(name, **params)

            def bridgeOpts(self) -> str:  # noqa: N802 (Mininet's name)
                return super().bridgeOpts() + f" external_ids:{ovs.OWNER_KEY}={self.owner_tag}"

        _SWITCH_CLASS = TaggedOVSSwitch
    return _SWITCH_CLASS


_CLUSTER_CLASSES: tuple[Any, Any] | None = None


def _cluster_classes() -> tuple[Any, Any]:
    """Cluster mode's host class, and our tagged switch as a cluster node (defined lazily).

    Nodes on this machine start processes as plain Mininet nodes do.  RemoteMixin makes every process
    lead its own process group first (so an ssh session ignores the terminal's Ctrl-C), and ``mnexec
    -d`` then forks because its caller leads a group: the Popen's pid is not the command's, and it
    "exits" at once while the command runs on (agents looked finished at t0 with no result).

    The switch is :func:`_switch_class`'s with RemoteMixin, not RemoteOVSSwitch: that one sends the
    batch that creates every bridge and port to the first switch's shell, whose pty cuts a line at
    4,095 characters (a k=4 fat-tree came up without its ports).
    """
    global _CLUSTER_CLASSES
    if _CLUSTER_CLASSES is None:
        from mininet.examples.cluster import RemoteHost, RemoteMixin
        from mininet.node import Node

        class LocalPopen:
            """RemoteMixin's process start for remote nodes only (see _cluster_classes)."""

            isRemote: bool  # noqa: N815 (Mininet's name)

            def _popen(self, cmd: Any, sudo: bool = True, tt: bool = True, **params: Any) -> Any:
                if self.isRemote:
                    return super()._popen(cmd, sudo=sudo, tt=tt, **params)
                return Node._popen(self, cmd.split() if isinstance(cmd, str) else cmd, **params)

        class ClusterHost(LocalPopen, RemoteHost):
            """RemoteHost that starts local processes as Mininet's Host does."""

        class ClusterOVSSwitch(LocalPopen, RemoteMixin, _switch_class()):
            """Our tagged OVSSwitch placed by cluster mode (RemoteMixin), started as the plain fabric's."""

        _CLUSTER_CLASSES = (ClusterHost, ClusterOVSSwitch)
    return _CLUSTER_CLASSES


def cluster_problem(servers: Sequence[str]) -> str | None:
    """Why the fabric cannot run on ``servers`` in Mininet's cluster mode, or None.

    Only ``localhost``: Mininet's cluster mode would place switches and hosts on other servers, but
    everything this fabric does around Mininet runs on the local machine (OVS QoS rows and their tc
    filter watchdog, the switch ports' MTU, the clean-up of tagged bridges, agents and controller
    talking over Unix sockets), and its cross-server links need GRE (absent from this kernel) or
    ssh tunnels (no sshd here): docs/emulation.md, "Beyond one machine".
    """
    names = [str(server) for server in servers]
    if not names:
        return "name at least one server (localhost)"
    others = sorted({name for name in names if name != "localhost"})
    if others:
        return (f"only localhost is supported, not {', '.join(others)}: the fabric's QoS, tc filters and "
                "clean-up run on this machine (docs/emulation.md, 'Beyond one machine')")
    return None


def cluster_argument(text: str) -> list[str]:
    """The ``--cluster SERVER[,SERVER...]`` option's type (argparse): the servers, or a clear error."""
    import argparse

    servers = [name.strip() for name in text.split(",") if name.strip()]
    problem = cluster_problem(servers)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return servers


def host_sysctl_problem(name: str, value: str) -> str | None:
    """Why ``name=value`` cannot be set in a host's namespace, or None (names and values are pasted
    into a shell command, so both are held to a plain alphabet)."""
    if not _SYSCTL_NAME_RE.fullmatch(name):
        return f"{name!r} is not a net.ipv4, net.ipv6 or net.core sysctl name"
    if not _SYSCTL_VALUE_RE.fullmatch(value):
        return f"{name}: value {value!r} is not 1-40 letters, digits, '_', '.', '-'"
    if not os.path.exists(os.path.join("/proc/sys", *name.split("."))):
        return f"this kernel has no sysctl {name!r}"
    return None


def controller_listening(ip: str, port: int, timeout_s: float = 2.0) -> bool:
    """Does something accept TCP connections at ``ip:port``?  A plain connect: no bytes are read, so
    whatever the controller sends first (its OpenFlow HELLO) cannot upset the check."""
    try:
        with socket.create_connection((ip, port), timeout=timeout_s):
            return True
    except OSError:
        return False


_CONTROLLER_CLASS: Any = None


def _controller_class() -> Any:
    """Mininet's RemoteController with a reachability check that cannot crash (defined lazily).

    Mininet's own check runs ``echo A | telnet IP PORT`` in a shell and decodes its output as UTF-8; when
    the controller's binary HELLO reaches telnet first, the decode raises UnicodeDecodeError and the
    fabric start dies with a traceback (2 of 60 constructions under CPU load, and one real emulation).
    Reachability is only a hint here anyway: :meth:`Fabric._wait_connected` waits for every switch."""
    global _CONTROLLER_CLASS
    if _CONTROLLER_CLASS is None:
        from mininet.log import warn
        from mininet.node import RemoteController

        class ProbedRemoteController(RemoteController):
            """RemoteController whose ``checkListening`` is a socket connect (see _controller_class)."""

            def checkListening(self) -> None:  # noqa: N802 (Mininet's name)
                if self.port is None:
                    self.port = 6653
                if not controller_listening(self.ip, self.port):
                    warn(f"controller at {self.ip}:{self.port} is not listening (yet)\n")

        _CONTROLLER_CLASS = ProbedRemoteController
    return _CONTROLLER_CLASS


__all__ = ["Fabric", "FabricError", "fabric_lock"]
