"""Reactive routing as plain decisions: the ops a first packet, a repeat or a reconnecting switch gets, walked
hop by hop through a model of the switches' tables."""

from __future__ import annotations

from controller import flowmods as fm
from controller.config import ControllerConfig
from controller.routing import Router
from tests.controller_helpers import TOPO, Recorder, dpid, ip


def test_base_ops_reset_then_table_miss_and_arp():
    ops = Router(TOPO).base_ops()
    assert ops[0] == fm.FlowDelete() and fm.MeterDelete() in ops
    assert fm.table_miss() in ops and fm.arp_to_controller() in ops


def test_first_packet_installs_both_directions_and_forwards():
    router, rec = Router(TOPO, ControllerConfig(route_idle_s=30)), Recorder()
    for target, ops in router.on_ipv4(dpid("e1"), 1, ip("h1"), ip("h16"), b"pkt", now_s=0.0).items():
        rec(target, ops)
    assert rec.walk(TOPO, "h1", {"eth_type": 0x800, "ipv4_src": ip("h1"), "ipv4_dst": ip("h16")}) == list(
        TOPO.path_for("h1", "h16", "h1->h16"))
    assert rec.walk(TOPO, "h16", {"eth_type": 0x800, "ipv4_src": ip("h16"), "ipv4_dst": ip("h1")}) == list(
        TOPO.path_for("h16", "h1", "h16->h1"))
    outs = [op for _d, ops in rec.sent for op in ops if isinstance(op, fm.PacketOut)]
    assert outs == [fm.PacketOut(1, TOPO.port("e1", TOPO.path_for("h1", "h16", "h1->h16")[2]), b"pkt")]
    rules = [op for _d, ops in rec.sent for op in ops if isinstance(op, fm.FlowRule)]
    assert len(rules) == 10 and all(r.idle_timeout_s == 30 for r in rules)


def test_repeat_packet_inside_guard_only_forwards():
    router = Router(TOPO, reinstall_guard_s=1.0)
    router.on_ipv4(dpid("e1"), 1, ip("h1"), ip("h16"), b"a", now_s=0.0)
    path = router.pair_path("h1", "h16")
    again = router.on_ipv4(dpid(path[2]), 1, ip("h1"), ip("h16"), b"b", now_s=0.5)
    assert again == {dpid(path[2]): [fm.PacketOut(1, TOPO.port(path[2], path[3]), b"b")]}
    later = router.on_ipv4(dpid("e1"), 1, ip("h1"), ip("h16"), b"c", now_s=2.0)
    assert sum(isinstance(op, fm.FlowRule) for ops in later.values() for op in ops) == 10


def test_unknown_hosts_or_switches_are_dropped():
    router = Router(TOPO)
    assert router.on_ipv4(dpid("e1"), 1, "192.168.1.1", ip("h2"), b"", 0.0) == {}
    assert router.on_ipv4(0x999, 1, ip("h1"), ip("h2"), b"", 0.0) == {}
    assert router.arp_reply_mac("192.168.1.1") is None
    assert router.arp_reply_mac(ip("h5")) == TOPO.graph.nodes["h5"]["mac"]


def test_pod_to_pod_pairs_spread_over_cores():
    router = Router(TOPO)
    cores = {router.pair_path(s, d)[3] for s in TOPO.hosts[:4] for d in TOPO.hosts[4:8]}
    assert len(cores) > 1


def test_reconnecting_switch_gets_the_routes_through_it():
    router = Router(TOPO)
    router.on_ipv4(dpid("e1"), 1, ip("h1"), ip("h16"), b"", 0.0)
    core = router.pair_path("h1", "h16")[3]
    ops = router.ops_for_switch(dpid(core))
    routes = [op for op in ops if isinstance(op, fm.FlowRule) and op.priority == fm.PRIORITY_ROUTE]
    assert any(dict(r.match)["ipv4_dst"] == ip("h16") for r in routes)
    assert ops[: len(router.base_ops())] == router.base_ops()
