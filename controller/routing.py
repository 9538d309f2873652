"""Per-host-pair routing over the known topology, as plain decisions (no datapath, no sending).

Reactive by design: the first IPv4 packet of a (source host, destination host) pair reaches the
controller through the table-miss rule, and the whole pinned path of that pair *and* of the reverse pair
is installed at once, with an idle timeout.  Reactive rather than proactive because the rule count
stays proportional to the pairs that talk (a k=8 fat-tree has 16,256 host pairs, ~80k rules proactively)
while the install cost is one packet-in per pair, paid once.  The path is
``Topology.path_for(src, dst, "src->dst")``: the same stable hash the simulator uses, so pairs between
two pods spread deterministically over the cores.  ARP is answered from the topology (a fat-tree has
loops, nothing is ever flooded).

Links and switches that are down (``links``, the controller's :class:`~echelonflow.linkstate.LinkState`)
are routed around with ``Topology.pair_path(src, dst, links)``, the simulator's rule: a pair whose route
crosses one moves to another equal-cost path, the others stay; :meth:`Router.reroute` gives the rule
changes when the down set changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller import flowmods as fm
from controller.config import ControllerConfig
from echelonflow.linkstate import LinkState
from echelonflow.topology import NodePath, Topology

OpsByDpid = dict[int, list[fm.Op]]
ALL_BITS = (1 << 64) - 1  # a cookie mask matching one cookie exactly


@dataclass(frozen=True)
class Hop:
    """One switch on a path: its name, dpid and the port it forwards out of."""

    switch: str
    dpid: int
    out_port: int


def path_hops(topology: Topology, path: Sequence[str]) -> list[Hop]:
    """The switches of a host-to-host node path, in order, with their egress ports."""
    hops = []
    for index in range(1, len(path) - 1):
        node = path[index]
        hops.append(Hop(node, topology.graph.nodes[node]["dpid"], topology.port(node, path[index + 1])))
    return hops


class Router:
    """Routing state for one topology: host lookup, pair routes installed, and the rules they need."""

    def __init__(self, topology: Topology, config: ControllerConfig | None = None,
                 reinstall_guard_s: float = 1.0, links: LinkState | None = None) -> None:
        """``config``: the controller's settings (default: their defaults); routes idle for
        ``route_idle_s`` are removed by the switches."""
        self.topology = topology
        self.links = links if links is not None else LinkState()
        self.idle_timeout_s = (config or ControllerConfig()).route_idle_s
        self.reinstall_guard_s = reinstall_guard_s
        nodes = topology.graph.nodes
        self.host_by_ip: dict[str, str] = {nodes[h]["ip"]: h for h in topology.hosts}
        self.switch_by_dpid: dict[int, str] = {nodes[s]["dpid"]: s for s in topology.switches}
        self.routes: dict[tuple[str, str], NodePath] = {}
        self._installed_at_s: dict[tuple[str, str], float] = {}
        self._pair_numbers: dict[tuple[str, str], int] = {}

    # ----------------------------------------------------------------------- lookups
    def mac_of_ip(self, ip: str) -> str | None:
        host = self.host_by_ip.get(ip)
        return None if host is None else self.topology.graph.nodes[host]["mac"]

    def pair_path(self, src: str, dst: str) -> NodePath:
        return self.topology.pair_path(src, dst, self.links)

    # ----------------------------------------------------------------------- rule sets
    def base_ops(self) -> list[fm.Op]:
        """What every switch needs on (re)connect: a clean table, table-miss, ARP and IPv6 rules."""
        return [*fm.reset_switch(), fm.table_miss(), fm.drop_ipv6(), fm.arp_to_controller()]

    def pair_rules(self, src: str, dst: str) -> OpsByDpid:
        """The route rules of one direction of a host pair, keyed by dpid."""
        path = self.pair_path(src, dst)
        nodes = self.topology.graph.nodes
        match = fm.match_of(eth_type=fm.ETH_TYPE_IPV4, ipv4_src=nodes[src]["ip"], ipv4_dst=nodes[dst]["ip"])
        cookie = fm.make_cookie(fm.COOKIE_ROUTE, self._pair_number(src, dst))
        out: OpsByDpid = {}
        for hop in path_hops(self.topology, path):
            rule = fm.FlowRule(
                fm.PRIORITY_ROUTE, match, (fm.Output(hop.out_port),), cookie=cookie,
                idle_timeout_s=self.idle_timeout_s,
            )
            out.setdefault(hop.dpid, []).append(rule)
        return out

    def _pair_number(self, src: str, dst: str) -> int:
        nodes = self.topology.graph.nodes
        return (nodes[src]["index"] << 24) | nodes[dst]["index"]

    # ----------------------------------------------------------------------- events
    def on_ipv4(
        self, dpid: int, in_port: int, src_ip: str, dst_ip: str, data: bytes, now_s: float
    ) -> OpsByDpid:
        """Decide what a table-miss IPv4 packet causes: pair routes (both ways) and its packet-out.

        Packets from or to unknown addresses, or arriving at a switch off the pair's path, are dropped
        (an empty decision) rather than guessed at.  A pair installed less than ``reinstall_guard_s``
        ago is only forwarded: the packet overtook the rules on their way to a later switch.
        """
        src, dst = self.host_by_ip.get(src_ip), self.host_by_ip.get(dst_ip)
        switch = self.switch_by_dpid.get(dpid)
        if src is None or dst is None or switch is None or src == dst:
            return {}
        out: OpsByDpid = {}
        pair = (src, dst)
        last = self._installed_at_s.get(pair)
        if last is None or now_s - last >= self.reinstall_guard_s:
            for a, b in (pair, (dst, src)):
                self.routes[(a, b)] = self.pair_path(a, b)
                self._installed_at_s[(a, b)] = now_s
                for rule_dpid, rules in self.pair_rules(a, b).items():
                    out.setdefault(rule_dpid, []).extend(rules)
        path = self.routes.get(pair) or self.pair_path(src, dst)
        if switch in path:
            next_node = path[path.index(switch) + 1]
            out_port = self.topology.port(switch, next_node)
            out.setdefault(dpid, []).append(fm.PacketOut(in_port, out_port, data))
        return out

    def reroute(self) -> OpsByDpid:
        """After the down set changed: every installed pair route whose path changed goes onto its new
        path (rules replaced in place where the paths share a switch) and off the old path's others."""
        out: OpsByDpid = {}
        for (src, dst), old in sorted(self.routes.items()):
            if self.pair_path(src, dst) == old:
                continue
            self.routes[(src, dst)] = self.pair_path(src, dst)
            rules = self.pair_rules(src, dst)
            for dpid, ops in rules.items():
                out.setdefault(dpid, []).extend(ops)
            gone = fm.FlowDelete(fm.make_cookie(fm.COOKIE_ROUTE, self._pair_number(src, dst)), ALL_BITS)
            for hop in path_hops(self.topology, old):
                if hop.dpid not in rules:
                    out.setdefault(hop.dpid, []).append(gone)
        return out

    def ops_for_switch(self, dpid: int) -> list[fm.Op]:
        """Everything a (re)connecting switch must hold for routing: base rules and its pair routes."""
        ops = self.base_ops()
        for src, dst in sorted(self.routes):
            ops.extend(self.pair_rules(src, dst).get(dpid, []))
        return ops

    def arp_reply_mac(self, target_ip: str) -> str | None:
        """MAC to answer an ARP request for ``target_ip`` with, or None (not a fabric host: ignore)."""
        return self.mac_of_ip(target_ip)
