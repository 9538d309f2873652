"""The scheduling service against a recording EnforcementSink (the pure unit-test layer, Faucet-style).

The port only records what the service tells it; the real Enforcer is exercised by the fabric tests.
"""

from __future__ import annotations

import pytest

from controller.config import ControllerConfig
from controller.enforcement import Enforcer, FlowMatch
from controller.registry import Registry, RegistryError
from controller.service import SchedulingService, Tuning
from controller.store import open_registry
from echelonflow.errors import UserError
from echelonflow.schedulers import get_scheduler
from echelonflow.schedulers.view import decision_on_snapshot
from echelonflow.topology import build, fattree, two_hosts
from tests.controller_helpers import MATCH, PATH, TOPO, AckingSwitches
from tests.helpers import Clock, RecordingSink

MB = 1_000_000
B_BPS = 8 * MB  # 1 MB/s: the paper's B = 1 in MB and seconds


def fig2_registry():
    """The paper's Fig. 2: three 2 MB flows over one 1 MB/s link, ideal finishes 1, 2, 3 s apart by 1 s
    (idealised links without framing, as in the paper)."""
    reg = Registry(build("two_hosts", B_BPS, mtu_bytes=None))
    reg.add_job("pp")
    reg.add_echelon("pp", "act", flows=[
        {"flow_id": f"mb{i}", "src": "h1", "dst": "h2", "size_bytes": 2 * MB, "offset_s": float(i)}
        for i in range(3)
    ])
    return reg


def test_fig2_rates_match_the_worked_example():
    reg, clock, port = fig2_registry(), Clock(1.0), RecordingSink()
    svc = SchedulingService(reg, port, now=clock)
    reg.flow_started("pp", "mb0", 40000, 5201, 1.0)
    svc.on_arrival()
    assert svc.allocation("pp/mb0")["rate_bps"] == pytest.approx(B_BPS)
    clock.now = 2.0
    reg.flow_progress("pp", "mb0", 1 * MB)
    reg.flow_started("pp", "mb1", 40001, 5201, 2.0)
    svc.on_arrival()
    # docs/scheduler-design.md, Fig. 2 at t=2: earliest due first, as soon as possible: f1 all, f2 none
    assert svc.allocation("pp/mb0")["rate_bps"] == pytest.approx(B_BPS)
    assert svc.allocation("pp/mb1")["rate_bps"] == 0
    assert svc.allocation("pp/mb0")["rank"] < svc.allocation("pp/mb1")["rank"]
    svc.set_scheduler("echelon-varys")
    # the paper's sketch at t=2: t* = 3, f1 1/2, f2 2/3 capped to the 1/2 left
    assert svc.allocation("pp/mb0")["rate_bps"] == pytest.approx(B_BPS / 2)
    assert svc.allocation("pp/mb1")["rate_bps"] == pytest.approx(B_BPS / 2)


def test_arrival_installs_with_match_path_queue_and_meter():
    topo = fattree(20e6, 4)
    reg, port = Registry(topo), RecordingSink()
    svc = SchedulingService(reg, port, now=Clock(5.0))
    reg.add_job("j")
    reg.add_echelon("j", "e", flows=[{"flow_id": "f", "src": "h1", "dst": "h9", "size_bytes": MB}])
    assert svc.start().installs == 0 and port.take() == []  # declared flows are not enforced
    reg.flow_started("j", "f", 40000, 5201, 5.0)
    svc.on_arrival()
    ((op, fid, match, path, queue, rate),) = port.take()
    assert (op, fid, queue) == ("install", "j/f", 1)
    assert match == FlowMatch("10.0.0.2", "10.0.0.10", 40000, 5201, 6)
    assert path == topo.path_for("h1", "h9", "j/f")
    assert rate == pytest.approx(20e6)  # alone: the whole path (back-fill)
    alloc = svc.allocation("j/f")
    assert alloc["enforced"] and alloc["queue"] == 1 and alloc["dscp"] == 8
    assert alloc["meter_rate_bps"] == rate


def test_only_changes_are_pushed():
    reg, clock, port = fig2_registry(), Clock(1.0), RecordingSink()
    svc = SchedulingService(reg, port, now=clock, tuning=Tuning(rate_tolerance=0.05))
    svc.set_scheduler("echelon-varys")  # just-in-time rates: mb0's moves when mb1 arrives
    reg.flow_started("pp", "mb0", 40000, 5201, 1.0)
    svc.on_arrival()
    assert [c[0] for c in port.take()] == ["install"]
    clock.now = 1.5
    report = svc.tick()
    assert report is not None and (report.installs, report.updates, report.removes) == (0, 0, 0)
    assert port.take() == []  # nothing changed: nothing pushed
    reg.flow_started("pp", "mb1", 40001, 5201, 1.5)
    svc.on_arrival()
    calls = port.take()
    # mb1 is new (install); mb0's rate halves (one update, same queue: no queue field)
    assert [(c[0], c[1]) for c in calls] == [("update", "pp/mb0"), ("install", "pp/mb1")]
    assert calls[0][2] is None and calls[0][3] == pytest.approx(svc.state.decision.rate_bps["pp/mb0"])
    reg.flow_finished("pp", "mb0", 2.0)
    svc.on_departure()
    calls = port.take()
    assert ("remove", "pp/mb0") in calls
    assert [c[0] for c in calls if c[1] == "pp/mb1"] in ([], ["update"])


def test_small_rate_moves_within_tolerance_are_not_pushed():
    reg, clock, port = fig2_registry(), Clock(1.0), RecordingSink()
    svc = SchedulingService(reg, port, now=clock, tuning=Tuning(rate_tolerance=0.10))
    for i, start in ((0, 1.0), (1, 1.0)):
        reg.flow_started("pp", f"mb{i}", 40000 + i, 5201, start)
    svc.start()
    port.take()
    before = dict(svc.installed)
    reg.flow_progress("pp", "mb0", 20_000)  # a 1% change of remaining bytes
    clock.now = 1.01
    svc.reschedule("interval")
    assert port.take() == [] and svc.installed == before


def test_fair_enforces_nothing_and_switching_removes_everything():
    reg, port = fig2_registry(), RecordingSink()
    reg.set_setting("scheduler", "fair")
    svc = SchedulingService(reg, port, now=Clock(1.0))
    for i in range(3):
        reg.flow_started("pp", f"mb{i}", 40000 + i, 5201, 1.0 + i * 0.1)
        svc.on_arrival()
    assert port.take() == []
    alloc = svc.allocation("pp/mb1")
    assert alloc["scheduler"] == "fair" and not alloc["enforced"] and alloc["queue"] == 0
    assert alloc["rate_bps"] == pytest.approx(B_BPS / 3)  # informative: what fair sharing would give
    svc.set_scheduler("echelon")
    assert sorted(c[1] for c in port.take() if c[0] == "install") == ["pp/mb0", "pp/mb1", "pp/mb2"]
    svc.set_scheduler("fair")
    assert sorted(c[1] for c in port.take()) == ["pp/mb0", "pp/mb1", "pp/mb2"]
    assert svc.installed == {}
    assert reg.settings["scheduler"] == "fair"


def test_unknown_scheduler_is_refused_and_nothing_changes():
    reg, port = fig2_registry(), RecordingSink()
    svc = SchedulingService(reg, port, now=Clock(1.0))
    version = reg.version
    for bad in ("pfabric", 3, None):
        with pytest.raises(RegistryError) as info:
            svc.set_scheduler(bad)
        assert info.value.field == "scheduler"
    assert "echelon" in str(info.value.problem) or "one of" in str(info.value.problem)
    assert svc.scheduler_name == "echelon" and reg.version == version and port.take() == []


def test_ranks_compress_into_queues_by_group_order():
    """Four coflows of 1..4 MB on disjoint paths all send: SEBF order -> queues 1, 2, then a shared 3."""
    topo = fattree(B_BPS, 4)
    reg, port = Registry(topo), RecordingSink()
    svc = SchedulingService(reg, port, ControllerConfig(queues=4), now=Clock(0.0))
    reg.add_job("j")
    pairs = {3: ("h1", "h2"), 1: ("h3", "h4"), 4: ("h5", "h6"), 2: ("h7", "h8")}  # one edge switch each
    for size, (src, dst) in pairs.items():
        reg.add_echelon("j", f"c{size}", flows=[
            {"flow_id": f"c{size}-{k}", "src": src, "dst": dst, "size_bytes": size * MB // 2}
            for k in range(2)
        ])
        for k in range(2):  # two flows of a coflow on one path: echelon sends them one after the other
            reg.flow_started("j", f"c{size}-{k}", 40000 + k, 5201, 0.0)
    svc.reschedule("test")
    decision = decision_on_snapshot(get_scheduler("echelon"), reg.snapshot(0.0))  # the scheduler's own order
    assert decision.rank == svc.state.decision.rank
    sending = [fid for fid, rate in decision.rate_bps.items() if rate >= svc.config.min_rate_bps]
    assert sorted(sending) == ["j/c1-0", "j/c2-0", "j/c3-0", "j/c4-0"]
    expected = {"c1": 1, "c2": 2, "c3": 3, "c4": 3}
    queue = {fid: svc.state.queue[fid] for fid in reg.active_keys()}
    # a paused flow (the second of each coflow) waits unmetered in the last queue
    assert queue == {fid: expected[reg.flows[fid].echelon_id] if fid in sending else 3 for fid in queue}
    installed = {c[1]: c[4] for c in port.take() if c[0] == "install"}
    assert installed == queue


def test_paused_flows_wait_unmetered_in_the_last_queue():
    """Four coflows on ONE link: only the smallest sends; the others wait below it, without a meter."""
    reg, port = Registry(two_hosts(B_BPS)), RecordingSink()
    svc = SchedulingService(reg, port, ControllerConfig(queues=4), now=Clock(0.0))
    reg.add_job("j")
    sport = 40000
    for size in (3, 1, 4, 2):
        reg.add_echelon("j", f"c{size}", flows=[
            {"flow_id": f"c{size}-{k}", "src": "h1", "dst": "h2", "size_bytes": size * MB // 2}
            for k in range(2)
        ])
        for k in range(2):
            reg.flow_started("j", f"c{size}-{k}", sport, 5201, 0.0)
            sport += 1
    svc.reschedule("test")
    installed = {c[1]: (c[4], c[5]) for c in port.take() if c[0] == "install"}
    # the smallest coflow's first flow has the link (echelon sends a coflow's flows one after another)
    assert installed.pop("j/c1-0") == (1, pytest.approx(B_BPS))
    assert set(installed.values()) == {(3, None)}


def test_observed_switch_bytes_lower_the_remaining_estimate():
    reg = fig2_registry()
    svc = SchedulingService(reg, RecordingSink(), now=Clock(1.0), tuning=Tuning(payload_fraction=0.5))
    reg.flow_started("pp", "mb0", 40000, 5201, 1.0)
    reg.flow_progress("pp", "mb0", 100_000)
    svc.observe_bytes("pp/mb0", 1_000_000)  # frames -> 500 kB payload
    assert reg.snapshot(1.5).flows[0].remaining_bytes == 2 * MB - 500_000
    svc.observe_bytes("pp/mb0", 100)  # counter reset after a rule reinstall: the max stays
    assert reg.snapshot(1.5).flows[0].remaining_bytes == 2 * MB - 500_000
    svc.observe_bytes("pp/nope", 5)  # unknown flows are ignored (stats can race a finish)


def test_tick_respects_the_interval():
    reg, clock = fig2_registry(), Clock(10.0)
    svc = SchedulingService(reg, RecordingSink(), ControllerConfig(interval_s=0.5), now=clock)
    assert svc.tick() is not None
    clock.now = 10.3
    assert svc.tick() is None
    clock.now = 10.5
    assert svc.tick().reason == "interval"


def test_interval_loop_stops():
    svc = SchedulingService(fig2_registry(), RecordingSink(), ControllerConfig(interval_s=0.01),
                            now=Clock(0.0))
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 3:
            svc.stop()

    svc.run(sleep)
    assert sleeps == [0.01, 0.01, 0.01]


def test_failed_push_is_retried_next_round():
    reg, port = fig2_registry(), RecordingSink()
    svc = SchedulingService(reg, port, now=Clock(1.0))
    reg.flow_started("pp", "mb0", 40000, 5201, 1.0)
    port.fail_for.add("pp/mb0")
    report = svc.on_arrival()
    assert report.installs == 0 and "pp/mb0" not in svc.installed
    port.fail_for.clear()
    assert svc.reschedule("interval").installs == 1 and "pp/mb0" in svc.installed


def test_flow_dropped_by_the_port_is_installed_again():
    reg, port = fig2_registry(), RecordingSink()
    svc = SchedulingService(reg, port, now=Clock(1.0))
    svc.set_scheduler("echelon-varys")  # just-in-time rates: mb0's moves when mb1 arrives
    reg.flow_started("pp", "mb0", 40000, 5201, 1.0)
    svc.on_arrival()
    port.take()
    svc.forget("pp/mb0")  # what the app calls when the Enforcer reports an idle-timeout removal
    svc.reschedule("interval")
    assert [c[0] for c in port.take()] == ["install"]
    # an update the port refuses (it lost the flow) is forgotten, then re-installed the round after
    reg.flow_started("pp", "mb1", 40001, 5201, 1.0)
    port.fail_for.add("pp/mb0")
    svc.on_arrival()
    assert "pp/mb0" not in svc.installed
    port.fail_for.clear()
    svc.reschedule("interval")
    assert ("pp/mb0") in [c[1] for c in port.take() if c[0] == "install"]


class ForgettingSink(RecordingSink):
    """A port whose switch reports a flow's idle timeout while the pass is talking to it: the app's
    flow-removed handler (``forget``) runs inside the call, as it does when the call yields the hub."""

    def __init__(self) -> None:
        super().__init__()
        self.service: SchedulingService | None = None
        self.idles: set[str] = set()

    def _maybe_fail(self, flow_id):
        if flow_id in self.idles:
            self.idles.discard(flow_id)
            self.service.forget(flow_id)
            raise UserError(f"flow_id: no enforced flow {flow_id!r}")
        super()._maybe_fail(flow_id)


def test_a_flow_idled_out_while_its_update_is_under_way_is_installed_again():
    """Seen on a k=8 fabric: 'enforcement update refused: no enforced flow', then a KeyError out of the
    pass and an HTTP 500 to the agent whose flow start triggered it."""
    reg, port = fig2_registry(), ForgettingSink()
    svc = SchedulingService(reg, port, now=Clock(1.0))
    port.service = svc
    svc.set_scheduler("echelon-varys")  # just-in-time rates: mb0's moves when mb1 arrives
    reg.flow_started("pp", "mb0", 40000, 5201, 1.0)
    svc.on_arrival()
    port.take()
    port.idles.add("pp/mb0")
    reg.flow_started("pp", "mb1", 40001, 5201, 1.0)
    report = svc.on_arrival()  # updates mb0: the switch reports its idle timeout meanwhile
    assert "pp/mb0" not in svc.installed and report.installs == 1  # mb1 installed all the same
    svc.reschedule("interval")
    assert ("install", "pp/mb0") in port.told() and "pp/mb0" in svc.installed


def test_restart_reenforces_live_flows_from_the_store(tmp_path):
    path = str(tmp_path / "reg.sqlite")
    topo = fattree(20e6, 4)
    reg = open_registry(topo, path)
    first_port = RecordingSink()
    svc = SchedulingService(reg, first_port, now=Clock(3.0))
    svc.set_scheduler("coflow")
    reg.add_job("j")
    reg.add_echelon("j", "ar", flows=[
        {"flow_id": f"f{i}", "src": f"h{i + 1}", "dst": f"h{i + 9}", "size_bytes": MB} for i in range(4)
    ])
    for i in range(3):
        reg.flow_started("j", f"f{i}", 41000 + i, 5201, 3.0)
    reg.flow_finished("j", "f0", 3.5)
    svc.reschedule("before-crash")
    before = {c[1]: c for c in first_port.take() if c[0] == "install"}
    reg.store.close()

    # a new controller process: same store, fresh service and port, no agent says anything
    reg2 = open_registry(topo, path)
    port2 = RecordingSink()
    svc2 = SchedulingService(reg2, port2, now=Clock(3.0))
    assert svc2.scheduler_name == "coflow"
    svc2.start()
    after = {c[1]: c for c in port2.take() if c[0] == "install"}
    assert sorted(after) == ["j/f1", "j/f2"]
    for fid in after:
        assert after[fid][2:5] == before[fid][2:5]  # same match, path and queue


def test_drives_the_real_enforcer_unchanged():
    """The contract with controller.enforcement: the real Enforcer (pure, recording send) accepts the
    service's match objects, paths, queues and rates, and ends up holding exactly the service's view."""
    from controller import flowmods as fm
    from controller.enforcement import Enforcer
    from echelonflow.queues import dscp_for_queue

    topo = fattree(20e6, 4)
    sent = []
    enforcer = Enforcer(topo, lambda dpid, ops: sent.append((dpid, list(ops))))
    reg = Registry(topo)
    svc = SchedulingService(reg, enforcer, ControllerConfig(queues=enforcer.queues), now=Clock(0.0))
    reg.add_job("j")
    reg.add_echelon("j", "small", flows=[{"flow_id": "s", "src": "h1", "dst": "h5", "size_bytes": MB}])
    reg.add_echelon("j", "big", flows=[{"flow_id": "b", "src": "h2", "dst": "h5", "size_bytes": 5 * MB}])
    reg.flow_started("j", "s", 40000, 5201, 0.0)
    reg.flow_started("j", "b", 40001, 5202, 0.0)
    report = svc.reschedule("test")
    assert report.installs == 2 and not report.error
    live = enforcer.live_flows()
    assert sorted(live) == sorted(svc.installed) == ["j/b", "j/s"]
    for fid, flow in live.items():
        assert flow.path == reg.path_of(fid)
        assert flow.queue == svc.installed[fid].queue and flow.rate_bps == svc.installed[fid].rate_bps
    assert live["j/s"].queue == 1 and live["j/s"].rate_bps == pytest.approx(20e6)  # smallest first
    dpids = {topo.graph.nodes[n]["dpid"] for n in reg.path_of("j/s")[1:-1]}
    rules = [op for dpid, ops in sent if dpid in dpids for op in ops if isinstance(op, fm.FlowRule)]
    marks = {a.dscp for r in rules for a in r.actions if isinstance(a, fm.SetDscp)}
    assert dscp_for_queue(1) in marks
    assert any(isinstance(op, fm.MeterSet) and op.rate_kbps == 20000 for _d, ops in sent for op in ops)
    svc.set_scheduler("fair")
    assert enforcer.live_flows() == {} and svc.installed == {}


# --------------------------------------------------------------------------- channels
def test_channels_are_installed_idle_and_flows_on_them_only_update_class_and_rate():
    """A channel's rules go in when it is registered (last class, no meter); a flow starting on it
    changes its class and meter, finishing returns it to idle: no install or removal per flow."""
    reg = Registry(build("two_hosts", B_BPS, mtu_bytes=None))
    reg.add_job("pp")
    reg.add_echelon("pp", "act", flows=[
        {"flow_id": f"mb{i}", "src": "h1", "dst": "h2", "size_bytes": 2 * MB, "offset_s": float(i)}
        for i in range(2)])
    port = RecordingSink()
    svc = SchedulingService(reg, port, ControllerConfig(queues=4), now=Clock(1.0))
    reg.channels.add("c1", "h1", "h2", 40001, 46000)
    svc.reschedule("channel")
    ((op, key, match, path, queue, rate),) = port.take()
    assert (op, key, queue, rate) == ("install", "channel:c1", 3, None)
    assert match == FlowMatch(*reg.channels.tuple_of(reg.channels["c1"])) and path == reg.channels["c1"].path
    reg.flow_started("pp", "mb0", None, None, 1.0, channel_id="c1")
    svc.on_arrival()
    assert port.take() == [("update", "channel:c1", 1, pytest.approx(B_BPS), False)]
    allocation = svc.allocation("pp/mb0")
    assert (allocation["enforced"], allocation["queue"], allocation["meter_rate_bps"]) == (
        True, 1, pytest.approx(B_BPS))
    reg.flow_finished("pp", "mb0", 3.0)
    svc.on_departure()
    assert port.take() == [("update", "channel:c1", 3, None, True)]
    svc.set_scheduler("fair")  # plain TCP: nothing held, channels included
    assert port.take() == [("remove", "channel:c1")]


def test_switch_counters_of_a_channel_are_not_taken_for_its_current_flow():
    reg = fig2_registry()
    svc = SchedulingService(reg, RecordingSink(), now=Clock(1.0))
    reg.channels.add("c1", "h1", "h2", 40001, 46000)
    reg.flow_started("pp", "mb0", None, None, 1.0, channel_id="c1")
    svc.observe_bytes("channel:c1", 1_500_000)  # the channel's lifetime counter
    assert reg.bytes_done(reg.flows["pp/mb0"]) == 0


@pytest.mark.parametrize("hold_paused, paused_queue", [(False, 3), (True, 1)])
def test_a_paused_flow_keeps_its_class_when_senders_hold_it(hold_paused, paused_queue):
    """A flow metered in class 1 is paused when a smaller coflow starts on its link.  By default it waits
    unmetered in the last queue; with ``hold_paused`` (its sender writes nothing) it keeps class 1, so its
    packets still on the wire are never overtaken by its own later ones after a raise; idle channels then
    sit in class 1 too, so a flow's first allocation is never a raise either."""
    reg, port = Registry(two_hosts(B_BPS)), RecordingSink()
    svc = SchedulingService(reg, port, ControllerConfig(queues=4, hold_paused=hold_paused), now=Clock(0.0))
    assert svc.idle_queue == (1 if hold_paused else 3)
    reg.add_job("j")
    for name, size in (("big", 4 * MB), ("small", MB)):
        reg.add_echelon("j", name, flows=[{"flow_id": name, "src": "h1", "dst": "h2", "size_bytes": size}])
    reg.flow_started("j", "big", 40000, 5201, 0.0)
    svc.reschedule("test")
    assert [(c[0], c[4], c[5]) for c in port.take()] == [("install", 1, pytest.approx(B_BPS))]
    reg.flow_started("j", "small", 40001, 5201, 0.0)
    svc.reschedule("test")
    assert svc.state.queue == {"j/small": 1, "j/big": paused_queue}
    changes = {c[1]: c for c in port.take()}
    assert changes["j/small"][0] == "install" and changes["j/small"][4] == 1
    big = changes["j/big"]  # its meter goes; its class changes only without hold_paused
    assert big[0] == "update" and big[2] == (3 if not hold_paused else None) and big[4] is True


@pytest.mark.parametrize("fixed_class", [False, True])
def test_with_fixed_class_a_flow_keeps_the_class_of_its_first_allocation(fixed_class):
    """Two flows on disjoint paths (h1->h2 and h3->h4 share no link of the k=4 fat-tree).  ``a`` starts
    alone (class 1); the smaller ``b`` starts and its group ranks first, so ``a``'s group is second; ``b``
    ends and ``a``'s group is first again.  A raise back to class 1 would move ``a``'s newer packets ahead
    of older ones still queued in class 2; with ``fixed_class`` it stays in class 1 (its rate alone says
    what it may send) and ``b`` starts in the class its first allocation gives it."""
    reg, port = Registry(fattree(B_BPS, k=4)), RecordingSink()
    svc = SchedulingService(reg, port, ControllerConfig(queues=4, hold_paused=True, fixed_class=fixed_class),
                            now=Clock(0.0))
    reg.add_job("j")
    for name, src, dst, size in (("a", "h1", "h2", 4 * MB), ("b", "h3", "h4", MB)):
        reg.add_echelon("j", name, flows=[{"flow_id": name, "src": src, "dst": dst, "size_bytes": size}])
    reg.flow_started("j", "a", 40000, 5201, 0.0)
    svc.reschedule("test")
    assert svc.state.queue == {"j/a": 1}
    reg.flow_started("j", "b", 40001, 5201, 0.0)
    svc.reschedule("test")
    assert svc.state.queue == ({"j/a": 1, "j/b": 1} if fixed_class else {"j/a": 2, "j/b": 1})
    assert svc.state.decision.rate_bps["j/a"] == pytest.approx(B_BPS)  # both run at the line rate
    reg.flow_finished("j", "b", 1.0, MB)
    svc.reschedule("test")
    assert svc.state.queue == {"j/a": 1}
    queues_of_a = [c[4] if c[0] == "install" else c[2] for c in port.take() if c[1] == "j/a"]
    assert queues_of_a == ([1] if fixed_class else [1, 2, 1])
    assert list(svc._first_class) == (["j/a"] if fixed_class else [])  # b forgotten once it ended


def test_service_never_takes_a_primitives_5_tuple(caplog):
    """A flow enforced through the low-level primitives (``POST /v1/enforcement``) owns its 5-tuple: the
    service leaves it alone, says so once, and enforces its own flow once the primitive is gone."""
    switches = AckingSwitches()
    enforcer = Enforcer(TOPO, switches, ControllerConfig(queues=4))
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
