"""Enforcement primitives: a 5-tuple pinned to a path, a class and a rate, as the ops each switch gets
(applied to a model of its table and meters, and walked hop by hop); bad installs refused with nothing
applied."""

from __future__ import annotations

import pytest

from controller import flowmods as fm
from controller.enforcement import EnforcementError, FlowMatch
from controller.routing import path_hops
from echelonflow.queues import dscp_for_queue
from tests.controller_helpers import MATCH, PATH, TOPO, Recorder, dpid, ip, make_enforcer, packet


def test_install_pins_both_directions_marks_class_and_meters_first_switch():
    rec = Recorder()
    enf = make_enforcer(rec)
    ack = enf.install("f1", MATCH, PATH, queue=1, rate_bps=10e6)
    assert rec.walk(TOPO, "h1", packet(MATCH)) == list(PATH)
    assert rec.walk(TOPO, "h5", packet(MATCH.reversed())) == list(reversed(PATH))
    for hop in path_hops(TOPO, PATH):
        (rule,) = [r for r in rec.rules[hop.dpid].values() if r.match == MATCH.fields()]
        assert rule.actions[:2] == (fm.SetDscp(dscp_for_queue(1)), fm.SetQueue(1))
        assert rule.send_flow_removed
        # only the first switch's forward rule may idle out: switches expire rules each on its own clock
        assert rule.idle_timeout_s == (60 if hop.switch == "e1" else 0)
        assert (rule.meter_id is not None) == (hop.switch == "e1")
    (back,) = [r for r in rec.rules[dpid("e3")].values() if r.match == MATCH.reversed().fields()]
    assert back.actions[:2] == (fm.SetDscp(0), fm.SetQueue(0)) and back.meter_id is None
    assert back.idle_timeout_s == 0
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
