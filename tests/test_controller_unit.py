"""Controller logic without a fabric: routing and enforcement against a recording send function, whose
ops are applied to a small table model and walked hop by hop; messages encoded and decoded by os-ken's
real OpenFlow 1.3 parser; the launcher against a real osken-manager process (no switches)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from controller import flowmods as fm
from controller.enforcement import EnforcementError, Enforcer, FlowMatch
from controller.launcher import free_tcp_port
from controller.routing import Router, path_hops
from controller.topology_spec import SpecError, load_spec, topology_from_spec, write_spec
from echelonflow.queues import dscp_for_queue
from echelonflow.topology import Topology, fattree, leaf_spine
from tests.conftest import need_tool

TOPO = fattree(10e6, k=4)


class Recorder:
    """A send function that records ops per dpid and keeps a per-switch rule/meter table model."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, list[fm.Op]]] = []
        self.rules: dict[int, dict[tuple, fm.FlowRule]] = {}
        self.meters: dict[int, dict[int, fm.MeterSet]] = {}

    def __call__(self, dpid: int, ops: list[fm.Op]) -> None:
        self.sent.append((dpid, list(ops)))
        table, meters = self.rules.setdefault(dpid, {}), self.meters.setdefault(dpid, {})
        for op in ops:
            if isinstance(op, fm.FlowRule):
                assert op.meter_id is None or op.meter_id in meters, "rule points at a missing meter"
                table[(op.priority, op.match)] = op
            elif isinstance(op, fm.FlowDelete):
                for key in [k for k, r in table.items() if (r.cookie & op.cookie_mask) == op.cookie]:
                    del table[key]
            elif isinstance(op, fm.MeterSet):
                assert op.modify == (op.meter_id in meters), "meter add/modify does not fit the switch state"
                meters[op.meter_id] = op
            elif isinstance(op, fm.MeterDelete):
                in_use = any(r.meter_id == op.meter_id for r in table.values())
                assert not in_use, "meter deleted while in use"
                meters.pop(op.meter_id, None)

    def resolve_barriers(self) -> None:
        for dpid, ops in self.sent:
            for op in ops:
                if isinstance(op, fm.Barrier) and op.ticket is not None:
                    op.ticket.switch_done(dpid)

    def walk(self, topo: Topology, src: str, packet: dict) -> list[str]:
        """Follow ``packet`` from host ``src`` through the highest-priority matching rules."""
        dpid_to_name = {topo.graph.nodes[s]["dpid"]: s for s in topo.switches}
        name_to_dpid = {v: k for k, v in dpid_to_name.items()}
        node, path = topo.host_switch(src), [src]
        while topo.graph.nodes[node]["kind"] == "switch" and len(path) < 10:
            path.append(node)
            rules = [r for r in self.rules.get(name_to_dpid[node], {}).values()
                     if all(packet.get(k) == v for k, v in r.match)]
            assert rules, f"no rule for {packet} on {node}"
            best = max(rules, key=lambda r: r.priority)
            (out,) = [a.port for a in best.actions if isinstance(a, fm.Output)]
            node = topo.neighbour_on_port(node, out)
        return path + [node]


def ip(host: str) -> str:
    return TOPO.graph.nodes[host]["ip"]


def dpid(switch: str) -> int:
    return TOPO.graph.nodes[switch]["dpid"]


# ----------------------------------------------------------------------------- imports
def test_compat_loads_one_framework_consistently():
    """os-ken where it is installed (this machine), ryu 4.34 otherwise (the VM, the Python 3.9 venv)."""
    from controller import compat

    expected = {"os_ken": ("osken-manager", "OSKenApp"), "ryu": ("ryu-manager", "RyuApp")}
    assert compat.FRAMEWORK in expected
    manager, base = expected[compat.FRAMEWORK]
    assert manager == compat.MANAGER
    assert compat.BaseApp.__name__ == base
    assert compat.ofproto_v1_3.OFP_VERSION == 4


def test_pure_modules_import_without_os_ken_ryu_or_mininet():
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("os_ken", "ryu", "mininet", "eventlet"):
                    raise ImportError("blocked " + name)
        sys.meta_path.insert(0, Block())
        for m in ("flowmods", "routing", "enforcement", "topology_spec", "launcher", "command"):
            __import__("controller." + m)
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=_root())
    assert proc.stdout.strip() == "ok", proc.stderr[-800:]


def _root() -> str:
    import os

    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------- flowmods
def _serialize(op: fm.Op):
    """Encode with os-ken's OpenFlow 1.3 parser and serialize (os-ken parses only switch-to-controller
    messages, so the bytes are checked by header, by struct layout, or by Open vSwitch's own printer)."""
    from controller.compat import ofproto_v1_3, ofproto_v1_3_parser

    msg = fm.encode(op, ofproto_v1_3, ofproto_v1_3_parser)
    msg.datapath = SimpleNamespace(ofproto=ofproto_v1_3, ofproto_parser=ofproto_v1_3_parser)
    msg.set_xid(7)
    msg.serialize()
    buf = bytes(msg.buf)
    version, msg_type, length, xid = struct.unpack("!BBHI", buf[:8])
    assert (version, length, xid) == (4, len(buf), 7)
    return msg, msg_type, buf


def _ovs_print(buf: bytes) -> str:
    return subprocess.run([need_tool("ovs-ofctl"), "ofp-print", buf.hex()], capture_output=True, text=True,
                          check=True).stdout


def test_flow_rule_encodes_meter_dscp_queue_and_output():
    from controller.compat import ofproto_v1_3 as ofp

    rule = fm.FlowRule(20, FlowMatch("10.0.0.2", "10.0.0.3", 1000, 5201).fields(),
                       (fm.SetDscp(16), fm.SetQueue(2), fm.Output(3)), cookie=fm.make_cookie(2, 9),
                       idle_timeout_s=60, meter_id=4, send_flow_removed=True)
    msg, msg_type, buf = _serialize(rule)
    assert msg_type == ofp.OFPT_FLOW_MOD and msg.flags == ofp.OFPFF_SEND_FLOW_REM
    text = _ovs_print(buf)
    for piece in ("ADD", "priority=20", "tcp", "nw_src=10.0.0.2", "nw_dst=10.0.0.3", "tp_src=1000",
                  "tp_dst=5201", "cookie:0x200000000000009", "idle:60", "send_flow_rem", "meter:4",
                  "set_field:16->ip_dscp", "set_queue:2", "output:3"):
        assert piece in text, f"{piece!r} not in {text}"


def test_meter_and_delete_messages_serialize():
    from controller.compat import ofproto_v1_3 as ofp

    _m, msg_type, buf = _serialize(fm.MeterSet(3, 10000, 1000, modify=True))
    command, flags, meter_id, band_type, _len, rate, burst = struct.unpack("!HHIHHII", buf[8:28])
    assert msg_type == ofp.OFPT_METER_MOD and command == ofp.OFPMC_MODIFY
    assert (flags, meter_id, band_type, rate, burst) == (ofp.OFPMF_KBPS | ofp.OFPMF_BURST, 3,
                                                        ofp.OFPMBT_DROP, 10000, 1000)
    _m, _t, buf = _serialize(fm.FlowDelete(fm.make_cookie(2, 4), 0xFF00000000000000))
    text = _ovs_print(buf)
    assert "DEL" in text and "cookie:0x200000000000004/0xff00000000000000" in text
    _m, msg_type, _b = _serialize(fm.Barrier())
    assert msg_type == ofp.OFPT_BARRIER_REQUEST


def test_cookie_number_must_fit():
    with pytest.raises(ValueError, match="56 bits"):
        fm.make_cookie(1, 1 << 56)


# ----------------------------------------------------------------------------- routing
def test_base_ops_reset_then_table_miss_and_arp():
    ops = Router(TOPO).base_ops()
    assert ops[0] == fm.FlowDelete() and fm.MeterDelete() in ops
    assert fm.table_miss() in ops and fm.arp_to_controller() in ops


def test_first_packet_installs_both_directions_and_forwards():
    router, rec = Router(TOPO, idle_timeout_s=30), Recorder()
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


# ----------------------------------------------------------------------------- enforcement
def make_enforcer(rec: Recorder, clock=None) -> Enforcer:
    times = iter(clock or range(1000))
    return Enforcer(TOPO, rec, queues=4, idle_timeout_s=60, clock=lambda: float(next(times)))


PATH = ("h1", "e1", "a2", "c3", "a4", "e3", "h5")
MATCH = FlowMatch(ip("h1"), ip("h5"), 40001, 5201)


def packet(match: FlowMatch) -> dict:
    return dict(match.fields())


def test_install_pins_both_directions_marks_class_and_meters_first_switch():
    rec = Recorder()
    enf = make_enforcer(rec)
    ack = enf.install("f1", MATCH, PATH, queue=1, rate_bps=10e6)
    assert rec.walk(TOPO, "h1", packet(MATCH)) == list(PATH)
    assert rec.walk(TOPO, "h5", packet(MATCH.reversed())) == list(reversed(PATH))
    for hop in path_hops(TOPO, PATH):
        (rule,) = [r for r in rec.rules[hop.dpid].values() if r.match == MATCH.fields()]
        assert rule.actions[:2] == (fm.SetDscp(dscp_for_queue(1)), fm.SetQueue(1))
        assert rule.send_flow_removed and rule.idle_timeout_s == 60
        assert (rule.meter_id is not None) == (hop.switch == "e1")
    (back,) = [r for r in rec.rules[dpid("e3")].values() if r.match == MATCH.reversed().fields()]
    assert back.actions[:2] == (fm.SetDscp(0), fm.SetQueue(0)) and back.meter_id is None
    (meter,) = rec.meters[dpid("e1")].values()
    assert meter.rate_kbps == 10000 and meter.burst_kbit == enf.meter_burst_kbit(10e6) >= 1000
    # every switch's batch ends with the ack's barrier, last switch first
    assert [d for d, _ops in rec.sent] == [dpid(s) for s in reversed(PATH[1:-1])]
    assert all(ops[-1] == fm.Barrier(ticket=ack) for _d, ops in rec.sent)
    assert not ack.done
    rec.resolve_barriers()
    assert ack.done and ack.ok and ack.latency_s > 0 and ack.wait(0)


def test_unreachable_switch_resolves_ack_as_not_ok():
    enf = make_enforcer(Recorder())
    ack = enf.install("f1", MATCH, PATH, queue=1)
    for hop in path_hops(TOPO, PATH):
        ack.switch_unreachable(hop.dpid)
    assert ack.done and not ack.ok


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"path": ("h1", "e1", "a1", "c3", "a4", "e3", "h5")}, "no link a1-c3"),
        ({"path": ("h2", "e1", "h1")}, "path: must run from h1 to h5"),
        ({"queue": 4}, "queue: must be an integer between 0 and 3, got 4"),
        ({"queue": True}, "queue: must be an integer between 0 and 3, got true"),
        ({"rate_bps": 0}, "rate_bps: must be a rate in bit/s between 1000 and 1e\\+12, got 0"),
        ({"rate_bps": float("nan")}, "rate_bps"),
        ({"match": FlowMatch("10.9.9.9", ip("h5"), 1, 2)},
         "match.src_ip: must be the IPv4 address of a host of fattree4"),
        ({"match": FlowMatch(ip("h1"), ip("h5"), 0, 2)},
         "match.src_port: must be an integer between 1 and 65535, got 0"),
        ({"match": FlowMatch(ip("h1"), ip("h5"), 1, 2, ip_proto=1)},
         "match.ip_proto: must be one of 6, 17, got 1"),
    ],
)
def test_bad_install_is_refused_and_nothing_applied(kwargs, message):
    rec = Recorder()
    enf = make_enforcer(rec)
    args = {"match": MATCH, "path": PATH, "queue": 1, "rate_bps": None, **kwargs}
    with pytest.raises(EnforcementError, match=message):
        enf.install("f1", args["match"], args["path"], args["queue"], args["rate_bps"])
    assert rec.sent == [] and enf.live_flows() == {}


def test_duplicate_and_unknown_flows_are_refused():
    enf = make_enforcer(Recorder())
    enf.install("f1", MATCH, PATH, queue=1)
    with pytest.raises(EnforcementError, match="already enforced"):
        enf.install("f1", MATCH, PATH, queue=2)
    for call in (lambda: enf.update("nope", queue=1), lambda: enf.remove("nope")):
        with pytest.raises(EnforcementError, match="no enforced flow 'nope'"):
            call()
    with pytest.raises(EnforcementError, match="not both"):
        enf.update("f1", rate_bps=1e6, clear_rate=True)
    assert enf.live_flows()["f1"].queue == 1


def test_update_changes_class_then_rate_then_clears_it():
    rec = Recorder()
    enf = make_enforcer(rec)
    enf.install("f1", MATCH, PATH, queue=1)
    enf.update("f1", queue=3)
    for hop in path_hops(TOPO, PATH):
        (rule,) = [r for r in rec.rules[hop.dpid].values() if r.match == MATCH.fields()]
        assert rule.actions[:2] == (fm.SetDscp(dscp_for_queue(3)), fm.SetQueue(3))
    enf.update("f1", rate_bps=5e6)  # adds a meter (Recorder asserts add-before-use)
    first = rec.rules[dpid("e1")][(fm.PRIORITY_ENFORCED, MATCH.fields())]
    assert first.meter_id == 1 and rec.meters[dpid("e1")][1].rate_kbps == 5000
    assert first.actions[1] == fm.SetQueue(3)
    enf.update("f1", rate_bps=8e6)  # modifies it in place
    assert rec.meters[dpid("e1")][1].rate_kbps == 8000 and rec.meters[dpid("e1")][1].modify
    enf.update("f1", clear_rate=True)  # rule unhooked before the meter goes
    assert rec.rules[dpid("e1")][(fm.PRIORITY_ENFORCED, MATCH.fields())].meter_id is None
    assert rec.meters[dpid("e1")] == {}
    assert rec.walk(TOPO, "h1", packet(MATCH)) == list(PATH)


def test_remove_deletes_rules_then_meter_and_frees_the_meter_id():
    rec = Recorder()
    enf = make_enforcer(rec)
    other = FlowMatch(ip("h5"), ip("h1"), 5202, 40002)
    enf.install("f1", MATCH, PATH, queue=1, rate_bps=1e6)
    enf.install("f2", other, tuple(reversed(PATH)), queue=2, rate_bps=2e6)
    enf.remove("f1")
    assert all(r.cookie >> 56 != fm.COOKIE_ENFORCE or r.match in (other.fields(), other.reversed().fields())
               for t in rec.rules.values() for r in t.values())
    assert rec.meters[dpid("e1")] == {} and list(enf.live_flows()) == ["f2"]
    enf.install("f3", MATCH, PATH, queue=1, rate_bps=3e6)
    assert enf.live_flows()["f3"].meter_id == 1


def test_reinstall_sends_a_switch_its_live_flows():
    rec = Recorder()
    enf = make_enforcer(rec)
    enf.install("f1", MATCH, PATH, queue=1, rate_bps=1e6)
    rec.rules[dpid("e1")].clear()
    rec.meters[dpid("e1")].clear()
    enf.reinstall(dpid("e1"))
    assert rec.walk(TOPO, "h1", packet(MATCH)) == list(PATH)
    assert 1 in rec.meters[dpid("e1")]
    assert enf.reinstall(dpid("c1")).done  # nothing there: an ack with no switches is done at once


def test_idle_timeout_of_first_forward_rule_ends_the_flow():
    rec = Recorder()
    enf = make_enforcer(rec)
    enf.install("f1", MATCH, PATH, queue=1, rate_bps=1e6)
    fwd = fm.make_cookie(fm.COOKIE_ENFORCE, enf.live_flows()["f1"].number * 2)
    assert enf.on_flow_removed(dpid("e1"), fwd + 1, idle_timeout=True) is None  # reverse rule
    assert enf.on_flow_removed(dpid("c3"), fwd, idle_timeout=True) is None  # not the first switch
    assert enf.on_flow_removed(dpid("e1"), fwd, idle_timeout=False) is None  # our own delete
    assert enf.on_flow_removed(dpid("e1"), fwd, idle_timeout=True) == "f1"
    assert enf.live_flows() == {} and rec.meters[dpid("e1")] == {}


# ----------------------------------------------------------------------------- spec, launcher, command
def test_spec_round_trip_and_errors(tmp_path):
    path = str(tmp_path / "t.json")
    write_spec(leaf_spine(1e6, leaves=2, spines=2, hosts_per_leaf=1), path)
    topo = load_spec(path)
    assert (topo.kind, topo.params, len(topo.hosts)) == ("leafspine", {"leaves": 2, "spines": 2,
                                                                       "hosts_per_leaf": 1}, 2)
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_spec(str(tmp_path / "bad.json"))
    with pytest.raises(SpecError, match="unknown topology 'ring'"):
        topology_from_spec({"kind": "ring", "rate_bps": 1e6})
    with pytest.raises(SpecError, match="unknown field"):
        topology_from_spec({"kind": "fattree", "rate_bps": 1e6, "colour": 1})
    with pytest.raises(SpecError, match="topology spec: rate_bps: missing"):
        topology_from_spec({"kind": "fattree"})


def test_launcher_runs_real_manager_and_enforcement_api(tmp_path):
    """The real manager (os-ken here, ryu-manager 4.34 under tests/test_py39.py) serves the enforcement
    primitives on its one HTTP API; with no switch connected an install resolves as unreachable."""
    import os

    from controller import compat
    from controller.client import ApiClientError, EchelonClient, install_op, remove_op
    from controller.launcher import (
        ControllerError,
        ControllerProcess,
        default_manager_name,
        tcp_port_listening,
    )

    assert default_manager_name() == compat.MANAGER
    with pytest.raises(ControllerError, match="port must be"):
        ControllerProcess(TOPO, ofp_port=70000)
    with pytest.raises(ControllerError, match="'/nonexistent/osken-manager' is not an executable"):
        ControllerProcess(TOPO, ofp_port=free_tcp_port(), manager="/nonexistent/osken-manager").start()
    manager = os.path.join(os.path.dirname(sys.executable), compat.MANAGER)
    ctl = ControllerProcess(TOPO, ofp_port=free_tcp_port(), manager=[manager])
    try:
        ctl.start()
        assert tcp_port_listening(ctl.ofp_port)
        assert not os.path.exists(os.path.join(ctl.workdir, "control.sock"))  # one API, no side channel
        with ctl.client() as api:
            assert api.health()["switches"] == {"connected": 0, "expected": 20}
            assert api.enforcement() == {}
            match = {"src_ip": ip("h1"), "dst_ip": ip("h2"), "src_port": 1, "dst_port": 2}
            with pytest.raises(ApiClientError) as bad:
                api.enforce_install("x", match, queue=7)
            assert (bad.value.status, bad.value.field) == (400, "queue")
            assert bad.value.problem == "must be an integer between 0 and 3, got 7"
            with pytest.raises(ApiClientError) as bad:
                api.enforce({"op": "frob"})
            assert (bad.value.status, bad.value.field) == (400, "op")
            assert bad.value.problem == "must be install, update, remove or batch, got 'frob'"
            for unhashable in ([[], 1e308], {"a": 1}):  # found by tests/test_enforcement_fuzz.py: was a 500
                with pytest.raises(ApiClientError) as bad:
                    api.enforce({"op": unhashable, "flow_id": "p0", "clear_rate": True})
                assert (bad.value.status, bad.value.field) == (400, "op"), bad.value
                with pytest.raises(ApiClientError) as bad:
                    api.enforce({"op": "batch", "requests": [{"op": unhashable}]})
                assert (bad.value.status, bad.value.field) == (400, "requests[0].op"), bad.value
            with pytest.raises(ApiClientError) as bad:
                EchelonClient(socket_path=ctl.api_socket_path, token="wrong").enforce_remove("x")
            assert (bad.value.status, bad.value.field) == (401, "Authorization")
            reply = api.enforce_install("x", match, queue=1, rate_bps=2e6, wait_s=2)
            path = list(TOPO.path_for("h1", "h2", "x"))
            assert reply["applied"] == [{"op": "install", "flow_id": "x"}]
            ack = reply["enforcement"]
            assert ack["in_force"] is False and ack["latency_s"] is None  # no switch connected
            assert (ack["operations"], ack["pending"], ack["unreachable"]) == (1, 0, 1)
            live = api.enforcement()["x"]
            assert (live["path"], live["queue"], live["rate_bps"], live["meter_id"]) == (path, 1, 2e6, 1)
            with pytest.raises(ApiClientError) as bad:  # a good op, then a bad one: neither applied
                api.enforce_batch([remove_op("x"), install_op("y", match, 9)], wait_s=1)
            assert (bad.value.status, bad.value.field) == (400, "requests[1].queue")
            assert list(api.enforcement()) == ["x"]
            assert api.enforce_update("x", clear_rate=True)["applied"] == [{"op": "update", "flow_id": "x"}]
            assert api.enforcement()["x"]["meter_id"] is None
            api.enforce_remove("x")
            assert api.enforcement() == {}
        with pytest.raises(ControllerError, match="only 0 of 1 switches connected"):
            ctl.wait_switches(count=1, timeout_s=0.3)
        with pytest.raises(ControllerError, match="already in use"):
            ControllerProcess(TOPO, ofp_port=ctl.ofp_port).start()
    finally:
        ctl.stop()
    assert not tcp_port_listening(ctl.ofp_port) and ctl.log_problems() == []
    assert f"echelon app up ({compat.FRAMEWORK})" in ctl.log_text


# ----------------------------------------------------------------------------- enforcement API (in-process)
TOKEN = "unit-token"


class AckingSwitches:
    """A send function standing in for connected switches: records ops and answers every barrier."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, list[fm.Op]]] = []

    def __call__(self, dpid: int, ops: list[fm.Op]) -> None:
        self.sent.append((dpid, list(ops)))
        for op in ops:
            if isinstance(op, fm.Barrier) and op.ticket is not None:
                op.ticket.switch_done(dpid)


def make_api(with_enforcer: bool = True):
    from controller.api import Api
    from controller.enforcement_api import EnforcementEndpoints
    from controller.registry import Registry
    from controller.service import SchedulingService

    switches = AckingSwitches()
    enforcer = Enforcer(TOPO, switches, queues=4)
    endpoints = EnforcementEndpoints(enforcer) if with_enforcer else None
    api = Api(SchedulingService(Registry(TOPO), None), TOKEN, enforcement=endpoints)
    return SimpleNamespace(api=api, enforcer=enforcer, switches=switches)


def call(api, method: str, path: str, body=None, token: str | None = TOKEN):
    """One request through the API's WSGI entry: (status, decoded JSON)."""
    import io

    raw = b"" if body is None else json.dumps(body).encode()
    route, _, query = path.partition("?")
    environ = {"REQUEST_METHOD": method, "PATH_INFO": route, "QUERY_STRING": query,
               "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(raw)),
               "wsgi.input": io.BytesIO(raw)}
    if token is not None:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    seen = {}
    out = api(environ, lambda status, headers: seen.update(status=status))
    return int(seen["status"].split()[0]), json.loads(b"".join(out))


def _m(**over):
    return {"src_ip": ip("h1"), "dst_ip": ip("h5"), "src_port": 40001, "dst_port": 5201, **over}


def _inst(**over):
    return {"op": "install", "flow_id": "new", "match": _m(), "queue": 1, **over}


@pytest.mark.parametrize(
    "body, query, status, field",
    [
        ([], "", 400, "body"),
        ({}, "", 400, "op"),
        ({"op": "frob", "flow_id": "a"}, "", 400, "op"),
        ({"op": "install", "flow_id": "new", "match": _m()}, "", 400, "queue"),
        (_inst(colour="red"), "", 400, "colour"),
        (_inst(flow_id=5), "", 400, "flow_id"),
        (_inst(flow_id=""), "", 400, "flow_id"),
        (_inst(flow_id="job/f"), "", 400, "flow_id"),
        (_inst(match="h1->h5"), "", 400, "match"),
        (_inst(match={"src_ip": ip("h1"), "dst_ip": ip("h5"), "src_port": 1}), "", 400, "match.dst_port"),
        (_inst(match=_m(vlan=3)), "", 400, "match.vlan"),
        (_inst(match=_m(src_ip=5)), "", 400, "match.src_ip"),
        (_inst(match=_m(src_ip="bogus")), "", 400, "match.src_ip"),
        (_inst(match=_m(dst_ip="10.9.9.9")), "", 400, "match.dst_ip"),
        (_inst(match=_m(src_port=True)), "", 400, "match.src_port"),
        (_inst(match=_m(src_port=0)), "", 400, "match.src_port"),
        (_inst(match=_m(dst_port=70000)), "", 400, "match.dst_port"),
        (_inst(match=_m(ip_proto=1)), "", 400, "match.ip_proto"),
        (_inst(path="h1"), "", 400, "path"),
        (_inst(path=["h1", "e1", "a1", "c3", "a4", "e3", "h5"]), "", 400, "path"),
        (_inst(path=["h2", "e1", "h1"]), "", 400, "path"),
        (_inst(queue=4), "", 400, "queue"),
        (_inst(queue="1"), "", 400, "queue"),
        (_inst(rate_bps=10), "", 400, "rate_bps"),
        (_inst(rate_bps="fast"), "", 400, "rate_bps"),
        (_inst(flow_id="live"), "", 409, "flow_id"),
        ({"op": "update", "flow_id": "nope", "queue": 1}, "", 404, "flow_id"),
        ({"op": "update", "flow_id": "live"}, "", 400, "op"),
        ({"op": "update", "flow_id": "live", "rate_bps": 1e6, "clear_rate": True}, "", 400, "clear_rate"),
        ({"op": "update", "flow_id": "live", "clear_rate": "yes"}, "", 400, "clear_rate"),
        ({"op": "update", "flow_id": "live", "queue": -1}, "", 400, "queue"),
        ({"op": "remove", "flow_id": "nope"}, "", 404, "flow_id"),
        ({"op": "remove", "flow_id": "live", "queue": 1}, "", 400, "queue"),
        ({"op": "batch", "requests": []}, "", 400, "requests"),
        ({"op": "batch", "requests": "all"}, "", 400, "requests"),
        ({"op": "batch"}, "", 400, "requests"),
        ({"op": "batch", "requests": [_inst()], "wait_s": 5}, "", 400, "wait_s"),
        ({"op": "batch", "requests": [_inst(), _inst(flow_id="b", queue=9)]}, "", 400, "requests[1].queue"),
        ({"op": "batch", "requests": [_inst(), _inst()]}, "", 409, "requests[1].flow_id"),
        ({"op": "batch", "requests": [{"op": "remove", "flow_id": "live"},
                                      {"op": "update", "flow_id": "live", "queue": 2}]}, "", 404,
         "requests[1].flow_id"),
        ({"op": "batch", "requests": [_inst(), {"op": "batch", "requests": []}]}, "", 400, "requests[1].op"),
        ({"op": "batch", "requests": [_inst(), 7]}, "", 400, "requests[1]"),
        (_inst(), "?wait_s=0", 400, "wait_s"),
        (_inst(), "?wait_s=61", 400, "wait_s"),
        (_inst(), "?frob=1", 400, "frob"),
    ],
)
def test_bad_enforcement_request_names_the_field_and_applies_nothing(body, query, status, field):
    served = make_api()
    live_match = FlowMatch(ip("h5"), ip("h1"), 5201, 40099)  # not the 5-tuple the bodies install
    served.enforcer.install("live", live_match, tuple(reversed(PATH)), queue=2, rate_bps=3e6)
    before, sent = served.enforcer.live_flows(), len(served.switches.sent)
    got_status, answer = call(served.api, "POST", "/v1/enforcement" + query, body)
    assert (got_status, answer["error"]["field"]) == (status, field), answer
    assert answer["error"]["problem"]
    assert served.enforcer.live_flows() == before and len(served.switches.sent) == sent


def test_enforcement_needs_the_token_and_a_fabric():
    served = make_api()
    assert call(served.api, "POST", "/v1/enforcement", _inst(), token=None)[0] == 401
    assert call(served.api, "POST", "/v1/enforcement", _inst(), token="wrong")[0] == 401
    assert call(served.api, "GET", "/v1/enforcement?x=1")[1]["error"]["field"] == "x"
    assert call(served.api, "DELETE", "/v1/enforcement")[0] == 405
    assert served.enforcer.live_flows() == {}
    standalone = make_api(with_enforcer=False)
    for method, body in (("GET", None), ("POST", _inst())):
        status, answer = call(standalone.api, method, "/v1/enforcement", body)
        assert (status, answer["error"]["field"]) == (503, "enforcement")


def test_enforcement_batch_applies_in_order_and_times_the_barriers():
    served = make_api()
    batch = {"op": "batch", "requests": [
        _inst(flow_id="a", rate_bps=5e6),
        _inst(flow_id="b", match=_m(src_port=40002), path=list(PATH), queue=3),
        {"op": "update", "flow_id": "a", "queue": 2, "rate_bps": 6e6},
        {"op": "remove", "flow_id": "b"},
        _inst(flow_id="b", match=_m(src_port=40003), queue=1, path=list(PATH)),
    ]}
    status, answer = call(served.api, "POST", "/v1/enforcement?wait_s=5", batch)
    assert status == 200, answer
    assert [a["op"] for a in answer["applied"]] == ["install", "install", "update", "remove", "install"]
    ack = answer["enforcement"]
    assert ack["in_force"] and (ack["operations"], ack["pending"], ack["unreachable"]) == (5, 0, 0)
    assert 0 <= ack["latency_s"] < 1
    status, live = call(served.api, "GET", "/v1/enforcement", token=None)  # reads are open
    flows = {f["flow_id"]: f for f in live["flows"]}
    assert sorted(flows) == ["a", "b"]
    assert flows["a"]["path"] == list(TOPO.path_for("h1", "h5", "a"))  # no path given: the pinned one
    assert (flows["a"]["queue"], flows["a"]["rate_bps"], flows["a"]["meter_id"]) == (2, 6e6, 1)
    assert flows["b"]["match"] == _m(src_port=40003, ip_proto=6) and flows["b"]["owner"] == "primitive"
    assert served.enforcer.live_flows()["b"].match.src_port == 40003
    status, answer = call(served.api, "POST", "/v1/enforcement", {"op": "remove", "flow_id": "a"})
    assert status == 200 and "enforcement" not in answer  # no wait asked for


def test_service_flows_are_listed_but_not_touchable():
    served = make_api()
    served.enforcer.install("job/f1", MATCH, PATH, queue=1)
    (view,) = call(served.api, "GET", "/v1/enforcement")[1]["flows"]
    assert (view["flow_id"], view["owner"]) == ("job/f1", "service")
    status, answer = call(served.api, "POST", "/v1/enforcement", {"op": "remove", "flow_id": "job/f1"})
    assert (status, answer["error"]["field"]) == (400, "flow_id")
    assert list(served.enforcer.live_flows()) == ["job/f1"]


def test_command_bad_topology_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "cli", "controller", "--k", "3"],
                          capture_output=True, text=True, cwd=_root())
    assert proc.returncode == 2
    assert proc.stderr.strip() == "echelon: error: fat-tree k must be an even integer >= 2, got 3"


def test_live_reply_is_json_serialisable():
    enf = make_enforcer(Recorder())
    enf.install("f1", MATCH, PATH, queue=1)
    json.dumps({k: list(v.path) for k, v in enf.live_flows().items()})


# ----------------------------------------------------------------------------- hostile input
def test_primitive_cannot_take_a_scheduled_flows_5_tuple():
    """An install on a service flow's 5-tuple (either direction) is a 409 that changes nothing."""
    served = make_api()
    served.enforcer.install("kt/a", MATCH, PATH, queue=1, rate_bps=2e6)
    before, sent = served.enforcer.live_flows(), len(served.switches.sent)
    for match in (MATCH, MATCH.reversed()):
        body = _inst(flow_id="p1", match={"src_ip": match.src_ip, "dst_ip": match.dst_ip,
                                          "src_port": match.src_port, "dst_port": match.dst_port})
        status, answer = call(served.api, "POST", "/v1/enforcement", body)
        assert (status, answer["error"]["field"]) == (409, "match"), answer
        assert "kt/a" in answer["error"]["problem"]
        batch = {"op": "batch", "requests": [_inst(flow_id="ok", match=_m(src_port=40009)), body]}
        status, answer = call(served.api, "POST", "/v1/enforcement", batch)
        assert (status, answer["error"]["field"]) == (409, "requests[1].match"), answer
    assert served.enforcer.live_flows() == before and len(served.switches.sent) == sent
    assert before["kt/a"].meter_id == 1


def test_batch_may_reuse_a_5_tuple_it_frees_first():
    served = make_api()
    assert call(served.api, "POST", "/v1/enforcement", _inst(flow_id="p1"))[0] == 200
    swap = {"op": "batch", "requests": [{"op": "remove", "flow_id": "p1"}, _inst(flow_id="p2", queue=2)]}
    status, answer = call(served.api, "POST", "/v1/enforcement", swap)
    assert status == 200, answer
    assert list(served.enforcer.live_flows()) == ["p2"]


def test_service_never_takes_a_primitives_5_tuple(caplog):
    """The reverse: the service leaves a primitive's 5-tuple alone and retries later."""
    from controller.registry import Registry
    from controller.service import SchedulingService

    switches = AckingSwitches()
    enforcer = Enforcer(TOPO, switches, queues=4)
    registry = Registry(TOPO)
    service = SchedulingService(registry, enforcer)
    enforcer.install("p1", MATCH, PATH, queue=3)
    registry.add_job("kt")
    registry.add_echelon("kt", "e", None, [{"flow_id": "a", "src": "h1", "dst": "h5", "size_bytes": 10**6}])
    registry.flow_started("kt", "a", MATCH.src_port, MATCH.dst_port, 1.0)
    with caplog.at_level("WARNING", logger="echelon.service"):
        service.reschedule("arrival")
        service.reschedule("interval")
    assert enforcer.live_flows()["p1"].queue == 3 and "kt/a" not in enforcer.live_flows()
    assert service.allocation("kt/a")["enforced"] is False
    refusals = [r for r in caplog.records if "already enforced for flow 'p1'" in r.getMessage()]
    assert len(refusals) == 1  # once per reason, not every round
    enforcer.remove("p1")
    assert service.reschedule("interval").installs == 1
    assert enforcer.live_flows()["kt/a"].path == registry.path_of("kt/a")


@pytest.mark.parametrize("rate", [10**400, -10**400, 2e12])
def test_huge_rates_are_a_400(rate):
    served = make_api()
    status, answer = call(served.api, "POST", "/v1/enforcement", _inst(rate_bps=rate))
    assert (status, answer["error"]["field"]) == (400, "rate_bps"), answer
    assert len(answer["error"]["problem"]) < 200


def test_a_full_10000_operation_batch_fits_the_body_limit():
    """The documented batch maximum must not be refused by the body size limit."""
    from controller.enforcement_api import MAX_BATCH

    served = make_api()
    requests = [_inst(flow_id=f"bench-flow-{i:05d}", match=_m(src_port=10000 + i), rate_bps=5e6,
                      path=list(TOPO.path_for("h1", "h5", f"bench-flow-{i:05d}")))
                for i in range(MAX_BATCH)]
    body = {"op": "batch", "requests": requests}
    assert len(json.dumps(body)) > 1 << 20  # over the general 1 MiB limit
    status, answer = call(served.api, "POST", "/v1/enforcement", body)
    assert status == 200, answer
    assert len(answer["applied"]) == MAX_BATCH == len(served.enforcer.live_flows())
    status, answer = call(served.api, "POST", "/v1/jobs", {"job_id": "x" * (2 << 20)})
    assert (status, answer["error"]["field"]) == (413, "body")  # other endpoints keep 1 MiB
