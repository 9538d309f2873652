"""The topology: the single description the simulator, the controller and the Mininet fabric share.

A :class:`Topology` wraps an undirected ``networkx.Graph`` whose nodes are hosts and switches and whose
edges are full-duplex links of one capacity each way.  Everything the three consumers need is an
attribute here, so they can never disagree:

* host nodes: ``kind="host"``, ``ip``, ``mac`` (hosts are ``h1..hN``);
* switch nodes: ``kind="switch"``, ``layer`` (edge/agg/core, leaf/spine, or switch), ``dpid``;
* edges: ``rate_bps`` and ``ports`` = {node: OpenFlow port number on that node}.  Port numbers are
  given out per node in link-creation order starting at 1 and Mininet is told to use exactly them.
  Links above the edge/leaf layer of a fat-tree or leaf-spine run at ``rate_bps / oversubscription``.

Names and addresses live here too, so nobody derives them twice: host addresses (:func:`host_ip`,
:func:`host_mac`), interface names (``<node>-eth<port>``, Mininet's scheme, :func:`intf_name`), dpids
and their hex form (:func:`dpid_hex`).

Switch names say what they are (``e3`` edge, ``a2`` aggregation, ``c1`` core, ``l1`` leaf, ``p1``
spine, ``s1`` anything else); a dpid carries the layer in its high bits (edge 1, agg 2, core 3, leaf 4,
spine 5, other 6) and the switch's number in the low 16, so a dpid in a log reads back to a name.

Equal-cost paths come from the known structure (fat-tree, leaf-spine, big switch), not from a graph
search, so a k=16 fat-tree (1024 hosts) answers instantly; one of them is pinned per flow by a stable
hash, so the simulator and the controller put the same flow on the same path.

Pure (networkx only) and kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from itertools import product
from typing import TYPE_CHECKING

import networkx as nx

from echelonflow.errors import UserError
from echelonflow.limits import MAX_HOSTS, MAX_LINKS, MAX_SWITCHES, OVERSUBSCRIPTION, RATE_BPS

if TYPE_CHECKING:
    from echelonflow.linkstate import LinkState

DirectedLink = tuple[str, str]
NodePath = tuple[str, ...]

LAYER_CODES = {"edge": 1, "agg": 2, "core": 3, "leaf": 4, "spine": 5, "switch": 6}
LAYER_PREFIX = {"edge": "e", "agg": "a", "core": "c", "leaf": "l", "spine": "p", "switch": "s"}


#: Default link MTU: jumbo frames, as training fabrics run them.  The emulated fabric also needs them:
#: OVS's userspace datapath spends a fixed cost per main-loop wake-up (it polls every port and allocates a
#: receive batch per port), so packets per second, not bits, bound what it forwards; 9000-byte frames
#: carry six times the bytes per packet (docs/emulation.md, "Forwarding cost").
DEFAULT_MTU_BYTES = 9000
MIN_MTU_BYTES = 576
MAX_MTU_BYTES = 65000
#: Bytes of a TCP segment's headers inside the MTU (IPv4 20, TCP 20, timestamps option 12) and of the
#: Ethernet header outside it (what htb and OpenFlow meters count; no FCS or preamble on a veth).
TCP_IP_HEADER_BYTES = 52
ETHERNET_HEADER_BYTES = 14


class TopologyError(UserError, ValueError):
    """A topology that cannot be built as asked (bad kind or parameters): the user's input, so the CLI
    prints it as one line with exit status 2 without each command wrapping it."""


def host_ip(index: int) -> str:
    """Address of host ``h<index>``; 10.0.0.0/8, never a .0 or .255 last octet."""
    return f"10.0.{index // 254}.{index % 254 + 1}"


def host_mac(index: int) -> str:
    return f"00:00:00:00:{(index >> 8) & 0xFF:02x}:{index & 0xFF:02x}"


def intf_name(node: str, port_no: int) -> str:
    """Name of the interface behind OpenFlow port ``port_no`` of ``node`` (Mininet's scheme)."""
    return f"{node}-eth{port_no}"


def dpid_hex(dpid: int) -> str:
    """A dpid as the 16 hex digits Mininet's ``dpid=`` and OVS's ``other_config:datapath-id`` take."""
    return f"{dpid:016x}"


class Topology:
    """A named topology graph with path and capacity helpers."""

    def __init__(self, name: str, kind: str, params: dict[str, float], rate_bps: float,
                 mtu_bytes: int | None = DEFAULT_MTU_BYTES) -> None:
        self.name = name
        self.kind = kind
        self.params = dict(params)
        self.rate_bps = float(rate_bps)
        #: None: idealised links that carry payload only (the paper's fluid model, e.g. its Fig. 2)
        self.mtu_bytes = mtu_bytes
        self.graph = nx.Graph()
        self._next_port: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._paths: dict[tuple[str, str], list[NodePath]] = {}  # equal_cost_paths memo (graph is fixed)

    # ----------------------------------------------------------------- construction
    def add_host(self) -> str:
        index = self._counts.get("host", 0) + 1
        self._counts["host"] = index
        name = f"h{index}"
        self.graph.add_node(name, kind="host", ip=host_ip(index), mac=host_mac(index), index=index)
        return name

    def add_switch(self, layer: str, pod: int | None = None) -> str:
        index = self._counts.get(layer, 0) + 1
        self._counts[layer] = index
        name = f"{LAYER_PREFIX[layer]}{index}"
        dpid = (LAYER_CODES[layer] << 16) | index
        self.graph.add_node(name, kind="switch", layer=layer, dpid=dpid, pod=pod)
        return name

    def add_link(self, a: str, b: str, rate_bps: float | None = None) -> None:
        ports = {}
        for node in (a, b):
            ports[node] = self._next_port.get(node, 0) + 1
            self._next_port[node] = ports[node]
        self.graph.add_edge(a, b, rate_bps=float(rate_bps or self.rate_bps), ports=ports)
        self._paths.clear()

    # ----------------------------------------------------------------- framing
    @property
    def payload_fraction(self) -> float:
        """TCP payload bytes per wire byte of a full-size frame (1448/1514 at MTU 1500, 8948/9014 at 9000;
        1.0 for idealised links without an MTU).

        Link capacities are wire rates, so a flow of ``size_bytes`` occupies ``size_bytes /
        payload_fraction`` bytes of link time: the simulator and the controller's scheduler both count
        flows that way, and a fabric test checks TCP goodput through a shaped link against it.
        """
        if self.mtu_bytes is None:
            return 1.0
        return (self.mtu_bytes - TCP_IP_HEADER_BYTES) / (self.mtu_bytes + ETHERNET_HEADER_BYTES)

    def wire_bytes(self, payload_bytes: float) -> float:
        return payload_bytes / self.payload_fraction

    # ----------------------------------------------------------------- queries
    @property
    def hosts(self) -> list[str]:
        return sorted((n for n, d in self.graph.nodes(data=True) if d["kind"] == "host"), key=natural_key)

    @property
    def switches(self) -> list[str]:
        return sorted((n for n, d in self.graph.nodes(data=True) if d["kind"] == "switch"), key=natural_key)

    def port(self, node: str, neighbour: str) -> int:
        """OpenFlow port on ``node`` that leads to ``neighbour``."""
        return self.graph.edges[node, neighbour]["ports"][node]

    def neighbour_on_port(self, node: str, port_no: int) -> str | None:
        for nb in self.graph.neighbors(node):
            if self.port(node, nb) == port_no:
                return nb
        return None

    def host_switch(self, host: str) -> str:
        (switch,) = list(self.graph.neighbors(host))
        return switch

    def host_intf(self, host: str) -> str:
        """Name of a host's one interface."""
        return intf_name(host, self.port(host, self.host_switch(host)))

    def switch_port_rates(self) -> dict[str, float]:
        """Interface name -> link rate (bits/s) of every switch port (both ends of switch-switch links)."""
        out: dict[str, float] = {}
        for a, b, data in self.graph.edges(data=True):
            for node in (a, b):
                if self.graph.nodes[node]["kind"] == "switch":
                    out[intf_name(node, data["ports"][node])] = float(data["rate_bps"])
        return out

    def links_in_port_order(self) -> list[tuple[str, str, dict]]:
        """Edges ``(a, b, data)`` sorted by ``a``'s name, then ``a``'s port: a reproducible creation order."""
        return sorted(self.graph.edges(data=True), key=lambda e: (natural_key(e[0]), e[2]["ports"][e[0]]))

    def capacity_bps(self) -> dict[DirectedLink, float]:
        """Capacity of every directed link (both directions of each full-duplex edge)."""
        out: dict[DirectedLink, float] = {}
        for a, b, data in self.graph.edges(data=True):
            out[(a, b)] = data["rate_bps"]
            out[(b, a)] = data["rate_bps"]
        return out

    def equal_cost_paths(self, src: str, dst: str) -> list[NodePath]:
        """All shortest node paths between two hosts, in a deterministic order (computed once per pair)."""
        known = self._paths.get((src, dst))
        if known is None:
            known = self._paths[(src, dst)] = self._equal_cost_paths(src, dst)
        return known

    def _equal_cost_paths(self, src: str, dst: str) -> list[NodePath]:
        if src == dst:
            raise TopologyError(f"a flow needs two different hosts, got {src!r} twice")
        for host in (src, dst):
            if host not in self.graph or self.graph.nodes[host]["kind"] != "host":
                raise TopologyError(f"topology {self.name!r} has no host {host!r}")
        if self.kind == "fattree":
            return self._fattree_paths(src, dst)
        if self.kind == "leafspine":
            return self._leafspine_paths(src, dst)
        if self.kind == "bigswitch":
            return [(src, self.host_switch(src), dst)]
        return sorted(tuple(p) for p in nx.all_shortest_paths(self.graph, src, dst))

    def path_for(self, src: str, dst: str, flow_key: str, down: LinkState | None = None) -> NodePath:
        """The one equal-cost path pinned to this flow (stable across processes and runs).

        With ``down`` (links and switches out of service), a flow whose pinned path crosses one moves to
        another equal-cost path, chosen by the same hash among the paths still up; flows whose pinned
        path is up stay where they are, so a failure moves only the flows it hit, and a repair moves
        them back.  When no path is up the pinned one is returned (the caller decides what a partition
        means: ``down.passes`` tells).
        """
        paths = self.equal_cost_paths(src, dst)
        digest = zlib.crc32(flow_key.encode())
        pinned = paths[digest % len(paths)]
        if down is None or down.passes(pinned):
            return pinned
        alive = [p for p in paths if down.passes(p)]
        return alive[digest % len(alive)] if alive else pinned

    def pair_path(self, src: str, dst: str, down: LinkState | None = None) -> NodePath:
        """The route of unscheduled traffic between two hosts (one per host pair, spread by hash).

        The controller routes every host pair on it until a scheduler pins a flow to its own path, so
        the simulator uses it for schedulers that enforce nothing (``fair``): that is where TCP goes.
        """
        return self.path_for(src, dst, f"{src}->{dst}", down)

    @staticmethod
    def links_of(path: Sequence[str]) -> tuple[DirectedLink, ...]:
        return tuple(zip(path[:-1], path[1:]))

    # ----------------------------------------------------------------- structured paths
    def _up(self, node: str, layer: str) -> list[str]:
        above = [n for n in self.graph.neighbors(node) if self.graph.nodes[n].get("layer") == layer]
        return sorted(above, key=natural_key)

    def _fattree_paths(self, src: str, dst: str) -> list[NodePath]:
        e_src, e_dst = self.host_switch(src), self.host_switch(dst)
        if e_src == e_dst:
            return [(src, e_src, dst)]
        g = self.graph.nodes
        if g[e_src]["pod"] == g[e_dst]["pod"]:
            return [(src, e_src, a, e_dst, dst) for a in self._up(e_src, "agg")]
        paths = []
        for a_src in self._up(e_src, "agg"):
            for core in self._up(a_src, "core"):
                (a_dst,) = [a for a in self.graph.neighbors(core) if g[a]["pod"] == g[e_dst]["pod"]]
                paths.append((src, e_src, a_src, core, a_dst, e_dst, dst))
        return paths

    def _leafspine_paths(self, src: str, dst: str) -> list[NodePath]:
        l_src, l_dst = self.host_switch(src), self.host_switch(dst)
        if l_src == l_dst:
            return [(src, l_src, dst)]
        return [(src, l_src, spine, l_dst, dst) for spine in self._up(l_src, "spine")]


def natural_key(name: str) -> tuple[str, int]:
    """Sort key that puts ``h2`` before ``h10``."""
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return head, int(tail) if tail else -1


# --------------------------------------------------------------------- builders
def two_hosts(rate_bps: float) -> Topology:
    """h1 - s1 - h2: one bottleneck link each way (the paper's Fig. 2 setting)."""
    topo = Topology("two_hosts", "two_hosts", {}, rate_bps)
    s1 = topo.add_switch("switch")
    for _ in range(2):
        topo.add_link(topo.add_host(), s1)
    return topo


def dumbbell(rate_bps: float, hosts_per_side: int = 2) -> Topology:
    """Hosts on two switches joined by one bottleneck link (h1..hn left, the rest right)."""
    _check_positive("hosts_per_side", hosts_per_side)
    _check_size("dumbbell", 2 * hosts_per_side, 2, 2 * hosts_per_side + 1)
    topo = Topology(f"dumbbell{hosts_per_side}", "dumbbell", {"hosts_per_side": hosts_per_side}, rate_bps)
    left, right = topo.add_switch("switch"), topo.add_switch("switch")
    topo.add_link(left, right)
    for side in (left, right):
        for _ in range(hosts_per_side):
            topo.add_link(topo.add_host(), side)
    return topo


def bigswitch(rate_bps: float, hosts: int = 2) -> Topology:
    """N hosts on one non-blocking switch: the model of the Coflow-Benchmark (one port per rack)."""
    _check_positive("hosts", hosts)
    if hosts < 2:
        raise TopologyError(f"a big switch needs at least 2 hosts, got {hosts!r}")
    _check_size("big switch", hosts, 1, hosts)
    topo = Topology(f"bigswitch{hosts}", "bigswitch", {"hosts": hosts}, rate_bps)
    s1 = topo.add_switch("switch")
    for _ in range(hosts):
        topo.add_link(topo.add_host(), s1)
    return topo


def fattree(rate_bps: float, k: int = 4, oversubscription: float = 1) -> Topology:
    """Al-Fares k-ary fat-tree: k pods of k/2 edge and k/2 agg switches, (k/2)^2 cores, k^3/4 hosts.

    ``oversubscription`` r: edge-agg and agg-core links run at ``rate_bps / r``, so an edge switch's
    hosts can send r times what its uplinks carry (r:1 towards the core; 1 = full bisection).
    """
    if not isinstance(k, int) or k < 2 or k % 2:
        raise TopologyError(f"fat-tree k must be an even integer >= 2, got {k!r}")
    half = k // 2
    _check_size(f"fat-tree k={k}", k**3 // 4, 5 * k * k // 4, 3 * k**3 // 4)
    ratio = _check_ratio(oversubscription)
    params: dict[str, float] = {"k": k} if ratio == 1 else {"k": k, "oversubscription": oversubscription}
    topo = Topology(f"fattree{k}" + _ratio_suffix(ratio), "fattree", params, rate_bps)
    upper_bps = rate_bps / ratio
    cores = [topo.add_switch("core") for _ in range(half * half)]
    for pod in range(k):
        aggs = [topo.add_switch("agg", pod) for _ in range(half)]
        edges = [topo.add_switch("edge", pod) for _ in range(half)]
        for i, agg in enumerate(aggs):
            for core in cores[i * half:(i + 1) * half]:
                topo.add_link(agg, core, upper_bps)
        for edge, agg in product(edges, aggs):
            topo.add_link(edge, agg, upper_bps)
        for edge in edges:
            for _ in range(half):
                topo.add_link(topo.add_host(), edge)
    return topo


def leaf_spine(rate_bps: float, leaves: int = 4, spines: int = 2, hosts_per_leaf: int = 4,
               oversubscription: float = 1) -> Topology:
    """Two-tier Clos: every leaf connects to every spine; leaf-spine links at ``rate_bps / oversubscription``.

    A leaf's own ratio is then ``hosts_per_leaf * oversubscription / spines`` : 1.
    """
    for name, value in (("leaves", leaves), ("spines", spines), ("hosts_per_leaf", hosts_per_leaf)):
        _check_positive(name, value)
    _check_size("leaf-spine", leaves * hosts_per_leaf, leaves + spines, leaves * (spines + hosts_per_leaf))
    ratio = _check_ratio(oversubscription)
    params: dict[str, float] = {"leaves": leaves, "spines": spines, "hosts_per_leaf": hosts_per_leaf}
    if ratio != 1:
        params["oversubscription"] = oversubscription
    topo = Topology(f"leafspine{leaves}x{spines}" + _ratio_suffix(ratio), "leafspine", params, rate_bps)
    spine_names = [topo.add_switch("spine") for _ in range(spines)]
    for _ in range(leaves):
        leaf = topo.add_switch("leaf")
        for spine in spine_names:
            topo.add_link(leaf, spine, rate_bps / ratio)
        for _ in range(hosts_per_leaf):
            topo.add_link(topo.add_host(), leaf)
    return topo


BUILDERS = {
    "two_hosts": two_hosts,
    "dumbbell": dumbbell,
    "fattree": fattree,
    "leafspine": leaf_spine,
    "bigswitch": bigswitch,
}


def build(kind: str, rate_bps: float, mtu_bytes: int | None = DEFAULT_MTU_BYTES, **params: float) -> Topology:
    """Build a topology by kind name; unknown kinds or parameters raise :class:`TopologyError`.

    ``mtu_bytes=None`` gives idealised links that move payload only (the paper's fluid model)."""
    if kind not in BUILDERS:
        raise TopologyError(f"unknown topology {kind!r}; choose one of {', '.join(sorted(BUILDERS))}")
    if (not isinstance(rate_bps, (int, float)) or isinstance(rate_bps, bool)
            or not RATE_BPS.low <= rate_bps <= RATE_BPS.high):
        raise TopologyError(f"link rate must be a number of bits/s from {RATE_BPS.low:g} to "
                            f"{RATE_BPS.high:g} (echelonflow/limits.py), got {rate_bps!r}")
    if mtu_bytes is not None and (not isinstance(mtu_bytes, int) or isinstance(mtu_bytes, bool)
                                  or not MIN_MTU_BYTES <= mtu_bytes <= MAX_MTU_BYTES):
        raise TopologyError(f"mtu_bytes must be an integer from {MIN_MTU_BYTES} to {MAX_MTU_BYTES} "
                            f"(or null for idealised links), got {mtu_bytes!r}")
    try:
        topo = BUILDERS[kind](rate_bps, **params)
    except TypeError as exc:
        raise TopologyError(f"topology {kind!r}: bad parameters {params!r} ({exc})") from None
    topo.mtu_bytes = mtu_bytes
    slowest_bps = min((data["rate_bps"] for _a, _b, data in topo.graph.edges(data=True)), default=rate_bps)
    if slowest_bps < RATE_BPS.low:
        raise TopologyError(f"topology {kind!r}: its slowest links would run at {slowest_bps:g} bit/s "
                            f"(rate / oversubscription), below the {RATE_BPS.low:g} allowed "
                            "(echelonflow/limits.py)")
    return topo


def _check_positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TopologyError(f"{name} must be a positive integer, got {value!r}")


def _check_size(what: str, hosts: int, switches: int, links: int) -> None:
    """Refuse a topology beyond :mod:`echelonflow.limits` from its counts, before building any of it."""
    for count, limit, unit in ((hosts, MAX_HOSTS, "hosts"), (switches, MAX_SWITCHES, "switches"),
                               (links, MAX_LINKS, "links")):
        if count > limit:
            raise TopologyError(f"{what} would have {count:,} {unit}, more than the {limit:,} allowed "
                                "(echelonflow/limits.py)")


def _check_ratio(value: object) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not OVERSUBSCRIPTION.low <= value <= OVERSUBSCRIPTION.high):
        raise TopologyError(f"oversubscription must be a number from {OVERSUBSCRIPTION.low:g} to "
                            f"{OVERSUBSCRIPTION.high:g} (upper links run at rate / it), got {value!r}")
    return float(value)


def _ratio_suffix(ratio: float) -> str:
    """Name part for an oversubscribed fabric, e.g. ``-os4`` (none at 1:1, so old names stay)."""
    return "" if ratio == 1 else f"-os{ratio:g}"
