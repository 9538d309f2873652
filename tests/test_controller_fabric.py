"""The controller on a real fabric: k=4 fat-tree of OVS switches, Mininet hosts, TCP via iperf3.

One controller and one fabric serve the whole module (bring-up is a few seconds); the restart test runs
last because it replaces the controller.  Teardown stops both and fails if the controller logged a
traceback or a switch rejected a message.
"""

from __future__ import annotations

import re
import subprocess
import time
from types import SimpleNamespace

import pytest

from controller.launcher import ControllerProcess, free_tcp_port
from echelonflow.topology import fattree
from tests.fabric_helpers import assert_within, controller_and_fabric, iperf3_flows, measured_until, ping_loss

pytestmark = [pytest.mark.fabric, pytest.mark.slow]

LINK_BPS = 50e6


@pytest.fixture(scope="module")
def env(require_fabric):
    topo = fattree(LINK_BPS, k=4)
    port = free_tcp_port()
    state = SimpleNamespace(topo=topo, port=port, ctl=ControllerProcess(topo, ofp_port=port))
    with controller_and_fabric(state):
        yield state


def _host_ip(topo, host):
    return topo.graph.nodes[host]["ip"]


def _install(env, flow_id, ends, queue, rate_bps=None, path=None):
    """Install through the API's enforcement primitive and wait until every switch acked it (``ends``:
    source host, destination host, client port, server port)."""
    src, dst, cport, sport = ends
    match = {"src_ip": _host_ip(env.topo, src), "dst_ip": _host_ip(env.topo, dst), "src_port": cport,
             "dst_port": sport}
    with env.ctl.client() as api:
        reply = api.enforce_install(flow_id, match, queue, path=path, rate_bps=rate_bps, wait_s=5)
    assert reply["enforcement"]["in_force"], reply
    return reply


def _remove(env, flow_id):
    with env.ctl.client() as api:
        reply = api.enforce_remove(flow_id, wait_s=5)
    assert reply["enforcement"]["in_force"], reply


def _live(env):
    with env.ctl.client() as api:
        return api.enforcement()


def _iperf(env, flows, seconds=5.0, omit_s=0):
    """Concurrent TCP flows ``(src, dst, client_port, server_port)``; received bits/s of each.

    Fixed client ports make the data connection's 5-tuple known, so the Enforcer can match it.
    ``omit_s`` leaves the first seconds (slow start) out of the average.
    """
    return iperf3_flows(env.fabric, [(src, dst, None) for src, dst, _c, _s in flows], seconds,
                        omit_s=omit_s, ports=[(cport, sport) for _s, _d, cport, sport in flows])


def _dump(bridge, what="dump-flows"):
    return subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", what, bridge], capture_output=True, text=True,
                          check=True).stdout


def test_pingall_has_no_loss(env):
    assert env.fabric.net.pingAll(timeout=2) == 0.0


def test_tcp_between_pods(env):
    (rate,) = _iperf(env, [("h1", "h16", 41001, 5401)], seconds=3)
    assert_within(rate, LINK_BPS, 0.5, 1.1, "unenforced TCP h1->h16 over its 50 Mbit/s path")


def test_pairs_between_two_pods_use_the_predicted_cores(env):
    pod0, pod1 = env.topo.hosts[:4], env.topo.hosts[4:8]
    for src in pod0:  # traffic for every pair, so every pair is routed
        for dst in pod1:
            assert ping_loss(env.fabric, src, dst, count=1) == 0.0
    seen = {}
    for core in ("c1", "c2", "c3", "c4"):
        for line in _dump(core).splitlines():
            found = re.search(r"priority=10,ip,nw_src=([\d.]+),nw_dst=([\d.]+)", line)
            if found:
                seen[(found.group(1), found.group(2))] = core
    cores_used = set()
    for src in pod0:
        for dst in pod1:
            want = env.topo.path_for(src, dst, f"{src}->{dst}")[3]
            assert seen.get((_host_ip(env.topo, src), _host_ip(env.topo, dst))) == want, (src, dst)
            cores_used.add(want)
    assert len(cores_used) > 1, f"all pod0->pod1 pairs on {cores_used}"


@pytest.mark.parametrize("rate_mbps", [5, 10, 20])
def test_metered_tcp_reaches_its_meter_rate(env, rate_mbps):
    flow_id = f"meter{rate_mbps}"
    _install(env, flow_id, ("h1", "h16", 42000 + rate_mbps, 5402), queue=1, rate_bps=rate_mbps * 1e6)
    try:
        (rate,) = _iperf(env, [("h1", "h16", 42000 + rate_mbps, 5402)], seconds=5)
    finally:
        _remove(env, flow_id)
    print(f"metered TCP: {rate / 1e6:.2f} Mbit/s of {rate_mbps} ({rate / (rate_mbps * 1e6):.1%})")
    assert_within(rate, rate_mbps * 1e6, 0.90, 1.05, f"TCP through a {rate_mbps} Mbit/s meter")


def _two_flows(env, queues, cport):
    # h1->h3 and h2->h4 share e1->a1->e2 (hosts h1,h2 on e1; h3,h4 on e2).  Each test takes its own
    # client ports: a 5-tuple whose last connection's client closed first is in TIME_WAIT for 60 s, and
    # iperf3 --cport then fails with "Address already in use".
    paths = [["h1", "e1", "a1", "e2", "h3"], ["h2", "e1", "a1", "e2", "h4"]]
    flows = [("h1", "h3", cport, 5403), ("h2", "h4", cport + 1, 5404)]
    for i, ((src, dst, cport, sport), path, queue) in enumerate(zip(flows, paths, queues)):
        _install(env, f"prio{i}", (src, dst, cport, sport), queue=queue, path=path)
    try:
        # The clients start a few ms apart: the first second (both in slow start) is not "both
        # sending" yet, so it is left out.  Two BBR flows (the hosts' default) in one FIFO class can
        # split a link 36/64 for several seconds (measured), so 10 s of sharing are averaged.
        return _iperf(env, flows, seconds=10, omit_s=1)
    finally:
        for i in range(2):
            _remove(env, f"prio{i}")


def test_higher_class_takes_the_link(env):
    """Priority decides the split, the machine the total: on a slower two-core machine the userspace
    datapath carried the pair at 42-47 of 50 Mbit/s, and queue 3 got 3-5 Mbit/s in the high flow's gaps
    (CI runs 46-47: queue 1 at 37-44 Mbit/s, 88-94 % of the pair).  Equal classes split 40-60 %
    (below), one class in BBR's worst phase 36/64, so a share of 80 % is priority's alone."""
    def measure(attempt: int) -> tuple[float, float]:  # each on fresh client ports (TIME_WAIT, above)
        high, low = _two_flows(env, queues=(1, 3), cport=43001 + 2 * attempt)
        print(f"queue 1: {high / 1e6:.1f} Mbit/s, queue 3: {low / 1e6:.1f} Mbit/s")
        assert low <= 0.25 * LINK_BPS, f"queue 3 got {low / 1e6:.1f} Mbit/s beside queue 1's {high / 1e6:.1f}"
        assert high / (high + low) >= 0.8, f"queue 1 got {high / 1e6:.1f} Mbit/s, queue 3 {low / 1e6:.1f}"
        return high, low

    (high, low), _ = measured_until(measure, lambda rates: rates[0] >= 0.9 * LINK_BPS)
    assert high >= 0.7 * LINK_BPS, f"queue 1 got {high / 1e6:.1f} Mbit/s, queue 3 {low / 1e6:.1f}"


def test_equal_classes_share_the_link(env):
    """Two BBR flows in one class can hold an uneven split for seconds (15.7 / 31.8 Mbit/s over 10 s, once
    here in four runs), so a split outside 40-60 % is measured again; a priority between the two would
    split them 1/99 (above), which every measurement rules out."""
    def measure(attempt: int) -> float:  # each on fresh client ports (TIME_WAIT, above)
        a, b = _two_flows(env, queues=(2, 2), cport=43011 + 2 * attempt)
        print(f"equal classes: {a / 1e6:.1f} / {b / 1e6:.1f} Mbit/s")
        assert 0.2 <= a / (a + b) <= 0.8, f"equal classes split {a / 1e6:.1f} / {b / 1e6:.1f} Mbit/s"
        return a / (a + b)

    share, _ = measured_until(measure, lambda share: 0.4 <= share <= 0.6)
    assert 0.4 <= share <= 0.6, f"equal classes split {share:.0%} / {1 - share:.0%} in every measurement"


def test_removed_flow_leaves_no_rules_or_meter(env):
    _install(env, "gone", ("h1", "h16", 44001, 5405), queue=2, rate_bps=8e6)
    live = _live(env)["gone"]
    path, meter = live["path"], live["meter_id"]
    assert live["owner"] == "primitive" and live["rate_bps"] == 8e6
    assert path == list(env.topo.path_for("h1", "h16", "gone"))  # no path given: the pinned one
    switches = path[1:-1]
    assert f"meter={meter} " in _dump(switches[0], "dump-meters")
    assert all("tp_src=44001" in _dump(s) or "tcp_src=44001" in _dump(s) for s in switches)
    _remove(env, "gone")
    for switch in switches:
        assert "44001" not in _dump(switch), f"rules left on {switch}"
    assert f"meter={meter} " not in _dump(switches[0], "dump-meters")
    assert _live(env) == {}


def test_only_the_first_forward_rule_can_idle_out(env):
    """What OVS holds for an enforced flow: an idle timeout on the first switch's forward rule alone.
    Switches expire rules each on its own clock; a downstream or reverse rule that expired while the first
    one was kept alive by a flow resuming at its deadline dropped that flow's packets unseen."""
    _install(env, "idle", ("h1", "h16", 44003, 5407), queue=1, rate_bps=6e6)
    switches = _live(env)["idle"]["path"][1:-1]
    timed: dict[tuple[str, str], bool] = {}  # (switch, direction) -> the rule has an idle timeout
    for switch in switches:
        for line in _dump(switch).splitlines():
            if "44003" in line:
                direction = "forward" if ("tp_src=44003" in line or "tcp_src=44003" in line) else "reverse"
                assert (switch, direction) not in timed, f"two {direction} rules on {switch}"
                timed[(switch, direction)] = "idle_timeout=" in line
    assert len(timed) == 2 * len(switches), timed
    assert [rule for rule, has in timed.items() if has] == [(switches[0], "forward")], timed
    _remove(env, "idle")


def test_switch_reconnect_gets_its_rules_and_meter_back(env):
    """A switch that loses its controller connection and comes back is re-sent what it needs."""
    _install(env, "back", ("h1", "h16", 44002, 5406), queue=1, rate_bps=6e6)
    first = _live(env)["back"]["path"][1]
    meter = _live(env)["back"]["meter_id"]
    target = f"tcp:127.0.0.1:{env.port}"
    try:
        subprocess.run(["ovs-vsctl", "del-controller", first], check=True)
        # The app clears a (re)connecting switch's table, so rules seen afterwards were re-sent to it.
        subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "del-flows", first], check=True)
        subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "del-meters", first], check=True)
        assert "44002" not in _dump(first)
    finally:
        subprocess.run(["ovs-vsctl", "set-controller", first, target], check=True)
    deadline = time.monotonic() + 10
    while "tp_src=44002" not in _dump(first) and "tcp_src=44002" not in _dump(first):
        assert time.monotonic() < deadline, f"{first} did not get the enforced flow back after reconnecting"
        time.sleep(0.2)
    assert f"meter={meter} " in _dump(first, "dump-meters")
    assert ping_loss(env.fabric, "h1", "h16", count=2) == 0  # its routes came back too
    _remove(env, "back")


def test_controller_restart_routing_back_within_10s(env):
    env.ctl.stop()
    assert env.ctl.log_problems() == []
    start = time.monotonic()
    env.ctl = ControllerProcess(env.topo, ofp_port=env.port).start()
    env.ctl.wait_switches(timeout_s=10)
    while ping_loss(env.fabric, "h2", "h15", count=1) > 0:
        assert time.monotonic() - start < 10, "routing not back 10 s after the controller restarted"
    elapsed = time.monotonic() - start
    print(f"routing back {elapsed:.2f} s after controller restart")
    assert elapsed < 10
