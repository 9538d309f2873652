"""Mininet ``Topo`` classes built from :mod:`echelonflow.topology` (never a second description).

Every host, switch, link and port number comes from a :class:`echelonflow.topology.Topology`:

* hosts ``h1..hN`` get the graph's ``ip`` (as a /8, the whole fabric is one subnet) and ``mac``;
* switches keep the graph's names (``e3``, ``a2``, ``c1``, ``l1``, ``p1``, ``s1``) and its dpid, written
  as the 16 hex digits Mininet and OVS expect;
* each link is added with the graph's OpenFlow port numbers (``port1=``/``port2=``), so Mininet names
  the interfaces ``<node>-eth<port>`` and OVS numbers them exactly as the controller computes paths.

Link rates are not given to Mininet (no ``TCLink``): :mod:`topologies.fabric` shapes every port with
OVS QoS instead, because Mininet's tc and OVS's QoS would both own the root qdisc of a port.

The module-level ``topos`` dict makes ``mn --custom topologies/mininet_topo.py --topo fattree,4``
work with Debian's ``mn``; the classes take positional arguments for that reason.  When ``mn`` loads
this file by path (it ``exec()``s it with neither ``__package__`` nor ``__file__``), the repository root
is put on ``sys.path`` first so that ``echelonflow.topology`` imports.

Kept Python 3.9 compatible.
"""

from __future__ import annotations

import os
import sys

if not globals().get("__package__"):  # loaded by path; `mn --custom` exec()s us without __file__
    _THIS_FILE = globals().get("__file__") or sys._getframe().f_code.co_filename
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(_THIS_FILE))))

from mininet.topo import Topo  # noqa: E402

from echelonflow.topology import (  # noqa: E402
    Topology,
    bigswitch,
    dpid_hex,
    dumbbell,
    fattree,
    leaf_spine,
    two_hosts,
)

DEFAULT_RATE_BPS = 10e6  # only recorded on the graph; shaping is the fabric's job


class GraphTopo(Topo):
    """A Mininet topology that is exactly a :class:`Topology`; ``self.topology`` keeps the graph."""

    def build(self, topology: Topology) -> None:  # type: ignore[override]
        self.topology = topology
        g = topology.graph
        for host in topology.hosts:
            data = g.nodes[host]
            self.addHost(host, ip=data["ip"] + "/8", mac=data["mac"])
        for switch in topology.switches:
            self.addSwitch(switch, dpid=dpid_hex(g.nodes[switch]["dpid"]))
        # Links in a fixed order so interface creation is reproducible.
        for a, b, data in topology.links_in_port_order():
            self.addLink(a, b, port1=data["ports"][a], port2=data["ports"][b])


class TwoHostsTopo(GraphTopo):
    """h1 - s1 - h2 (``--topo two_hosts``)."""

    def build(self, rate_bps: float = DEFAULT_RATE_BPS) -> None:  # type: ignore[override]
        super().build(two_hosts(float(rate_bps)))


class DumbbellTopo(GraphTopo):
    """Two switches joined by one bottleneck (``--topo dumbbell,HOSTS_PER_SIDE``)."""

    def build(self, hosts_per_side: int = 2, rate_bps: float = DEFAULT_RATE_BPS) -> None:  # type: ignore[override]
        super().build(dumbbell(float(rate_bps), hosts_per_side=int(hosts_per_side)))


class FatTreeTopo(GraphTopo):
    """Al-Fares k-ary fat-tree (``--topo fattree,K[,RATE_BPS[,OVERSUBSCRIPTION]]``)."""

    def build(self, k: int = 4, rate_bps: float = DEFAULT_RATE_BPS,  # type: ignore[override]
              oversubscription: float = 1) -> None:
        super().build(fattree(float(rate_bps), k=int(k), oversubscription=float(oversubscription)))


class BigSwitchTopo(GraphTopo):
    """N hosts on one switch (``--topo bigswitch,N``)."""

    def build(self, hosts: int = 2, rate_bps: float = DEFAULT_RATE_BPS) -> None:  # type: ignore[override]
        super().build(bigswitch(float(rate_bps), hosts=int(hosts)))


class LeafSpineTopo(GraphTopo):
    """Two-tier Clos (``--topo leafspine,LEAVES,SPINES,HOSTS_PER_LEAF``)."""

    def build(  # type: ignore[override]
        self, leaves: int = 4, spines: int = 2, hosts_per_leaf: int = 4, rate_bps: float = DEFAULT_RATE_BPS,
        oversubscription: float = 1,
    ) -> None:
        super().build(
            leaf_spine(float(rate_bps), leaves=int(leaves), spines=int(spines),
                       hosts_per_leaf=int(hosts_per_leaf), oversubscription=float(oversubscription))
        )


topos = {
    "bigswitch": BigSwitchTopo,
    "fattree": FatTreeTopo,
    "dumbbell": DumbbellTopo,
    "leafspine": LeafSpineTopo,
    "two_hosts": TwoHostsTopo,
}
