"""The emulated fabric for real: Mininet hosts, OVS bridges (userspace datapath), htb queues, cleanup.

Switches run without the project's controller here: loop-free topologies use OVS's standalone
learning mode, the fat-tree gets static destination-based flows from tests/fabric_helpers.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from echelonflow.queues import dscp_for_queue, tos_for_queue
from echelonflow.topology import bigswitch, dumbbell, fattree, two_hosts
from tests.fabric_helpers import (
    assert_nothing_left,
    assert_within,
    install_static_flows,
    iperf3_bps,
    iperf3_flows,
    ping_loss,
    static_flow_table,
)
from topologies import ovs, qos
from topologies.fabric import FABRIC_FIELDS, Fabric, FabricError, FabricOptions, build_deadline_s, fabric_lock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
RATE_BPS = 10e6


def snapshot(fab: Fabric):
    """What a fabric owns, captured while it runs (to check later that all of it is gone)."""
    assert fab.state is not None
    return fab.tag, list(fab.bridges), list(fab.interfaces), list(fab.state.pids)


# --------------------------------------------------------------------------- no root needed
def test_bad_arguments_are_clear_errors():
    topo = two_hosts(RATE_BPS)
    with pytest.raises(FabricError, match="queues: must be an integer between 2 and 8"):
        Fabric(topo, queues=1)
    with pytest.raises(FabricError, match="datapath: must be one of"):
        Fabric(topo, datapath="dpdk")
    with pytest.raises(FabricError, match="tag: must be an id"):
        Fabric(topo, tag="bad tag!")
    with pytest.raises(FabricError, match="controller_port"):
        Fabric(topo, controller_port=70000)
    with pytest.raises(FabricError, match="Topology"):
        Fabric("fattree")  # type: ignore[arg-type]


def test_fabric_options_are_read_through_the_one_field_checker():
    """Every option has its check in FABRIC_FIELDS, a typo is named, and keywords override ``options``."""
    assert [spec.name for spec in FABRIC_FIELDS] == [f.name for f in dataclasses.fields(FabricOptions)]
    with pytest.raises(FabricError, match="^contoller_port: unknown fabric option"):
        Fabric(two_hosts(RATE_BPS), contoller_port=None)
    with pytest.raises(FabricError, match=r"^packet_in_limit\[1\]: must be an integer >= 1, got 0"):
        FabricOptions(packet_in_limit=(200, 0))
    with pytest.raises(FabricError, match="^cluster: must be an array of server names"):
        FabricOptions(cluster="localhost")
    fab = Fabric(two_hosts(RATE_BPS), FabricOptions(queues=6, controller_port=None), queues=3, tag="t1")
    assert (fab.options.queues, fab.options.controller_port, fab.tag, fab.options.host_sysctls) == (
        3, None, "t1", {})
    assert fab.build_timeout_s == build_deadline_s(two_hosts(RATE_BPS))


def test_queue_dscp_mapping_and_filter_parsing():
    assert [dscp_for_queue(q) for q in range(4)] == [0, 8, 16, 24]
    with pytest.raises(ValueError, match="queue must be"):
        dscp_for_queue(8)
    lines = qos.filter_lines("s1-eth1", 4)
    assert lines[0].endswith("match ip dsfield 0x20 0xfc flowid 1:2") and len(lines) == 3
    text_dump = (
        "qdisc htb 1: root refcnt 3 r2q 10 default 0x1\n"
        "filter protocol ip pref 1 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 "
        "*flowid 1:2 not_in_hw\n"
        "  match 00200000/00fc0000 at 0\n"
        "qdisc noqueue 0: root refcnt 2\n"
    )
    assert qos.parse_filter_dump(text_dump) == [("htb 1:", {(0x20, 2)}), ("noqueue 0:", set())]
    # `tc -json -batch` of FilterWatchdog's query: whole-namespace qdisc dump, then one filter answer per
    # device (output of tc 6.1, one u32 hash table and one DSCP filter on s1-eth1)
    dump = (
        '[{"kind":"noqueue","handle":"0:","dev":"s1-eth2","root":true,"refcnt":2,"options":{}},'
        '{"kind":"htb","handle":"1:","dev":"s1-eth1","root":true,"refcnt":3,"options":{"r2q":10}}]\n'
        '[{"protocol":"ip","pref":1,"kind":"u32","chain":0},{"protocol":"ip","pref":1,"kind":"u32",'
        '"chain":0,"options":{"fh":"800:","ht_divisor":1}},{"protocol":"ip","pref":1,"kind":"u32",'
        '"chain":0,"options":{"fh":"800::800","order":2048,"key_ht":"800","bkt":"0","flowid":"1:2",'
        '"not_in_hw":true,"match":{"value":"200000","mask":"fc0000","offmask":"","off":0}}}]\n'
        '[]\n'
    )
    devs = ["s1-eth1", "s1-eth2"]
    assert qos.status_query(devs) == ["qdisc show", "filter show dev s1-eth1 parent 1:",
                                      "filter show dev s1-eth2 parent 1:"]
    assert qos.parse_status(dump, devs) == {"s1-eth1": ("htb 1:", {(0x20, 2)}),
                                            "s1-eth2": ("noqueue 0:", set())}
    assert qos.parse_status(dump, devs + ["s1-eth3"]) == {}  # a device without answers: the pass fails
    # older iproute2 printed u32 keys as text inside the JSON: the parse refuses it (-> text query)
    old_tc = ('[{"protocol":"ip","pref":1,"kind":"u32","chain":0,"options":{fh 800::800 order 2048 '
              'key ht 800 bkt 0 *flowid 1:2 not_in_hw \n  match 00200000/00fc0000 at 0\n}}]')
    with pytest.raises(ValueError):
        qos.parse_filters(old_tc)


def test_static_flows_are_loop_free_trees():
    topo = fattree(RATE_BPS, k=4)
    table = static_flow_table(topo)
    # Follow every (switch, destination) along the installed ports: it must reach the host in <= 5 hops.
    for dst in topo.hosts:
        ip = topo.graph.nodes[dst]["ip"]
        for start in topo.switches:
            node, hops = start, 0
            while topo.graph.nodes[node]["kind"] == "switch":
                (line,) = [f for f in table[node] if f",ip,nw_dst={ip}," in f]
                node = topo.neighbour_on_port(node, int(line.rsplit(":", 1)[1]))
                hops += 1
                assert hops <= 5, f"loop from {start} towards {dst}"
            assert node == dst


# --------------------------------------------------------------------------- real fabric
@pytest.mark.fabric
def test_mn_custom_builds_our_topologies(require_fabric, tmp_path):
    """Debian's `mn` loads the file by path and builds working networks from echelonflow/topology.py."""
    custom = os.path.join(ROOT, "topologies", "mininet_topo.py")
    with fabric_lock(timeout_s=600):  # mn uses machine-global bridge/interface names too
        before = set(ovs.list_bridges()), set(ovs.existing_links())
        ping = subprocess.run(
            ["mn", "--custom", custom, "--topo", "dumbbell,2", "--switch", "ovsbr,datapath=user",
             "--controller", "none", "--test", "pingall"],
            capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
        )
        build = subprocess.run(
            ["mn", "--custom", custom, "--topo", "fattree,4", "--switch", "ovs,datapath=user",
             "--controller", "none", "--test", "none"],
            capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
        )
        after = set(ovs.list_bridges()), set(ovs.existing_links())
    assert "Results: 0% dropped (12/12 received)" in ping.stdout + ping.stderr, ping.stderr[-2000:]
    log = build.stdout + build.stderr
    assert build.returncode == 0, log[-2000:]
    switches = log.split("*** Adding switches:")[1].split("***")[0].split()
    assert sorted(switches) == sorted(fattree(RATE_BPS, 4).switches)
    assert after == before, "mn left bridges or interfaces behind"


@pytest.mark.fabric
def test_two_hosts_ping_goodput_and_clean_stop(require_fabric):
    """Hosts configured as an emulation configures them, a ping, and the framing constant the simulator
    and the scheduler count with (Topology.payload_fraction) measured at the default MTU: bulk TCP through
    one shaped 10 Mbit/s link delivers rate x payload_fraction of payload (so the shaped rate holds);
    then nothing of the fabric is left."""
    topo = two_hosts(RATE_BPS)
    fab = Fabric(topo, controller_port=None, fail_mode="standalone", tcp_rto_min_ms=1000,
                 host_sysctls={"net.ipv4.tcp_reordering": 9})
    with fab:
        owned = snapshot(fab)
        assert ovs.bridges_owned(fab.tag) == {"s1": fab.tag}
        # hosts keep an idle connection's congestion window (the agents' channels) and wait 1 s before a
        # retransmission timeout; the root namespace keeps its own settings
        for host in ("h1", "h2"):
            assert fab.host(host).cmd("sysctl -n net.ipv4.tcp_slow_start_after_idle").strip() == "0"
            assert fab.host(host).cmd("sysctl -n net.ipv4.tcp_reordering").strip() == "9"  # host_sysctls
            intf = fab.topology.host_intf(host)
            assert "rto_min lock 1s" in fab.host(host).cmd(f"ip -o route show dev {intf}")
        assert fab.host("h1").cmd("cat /sys/class/net/h1-eth1/mtu").strip() == str(topo.mtu_bytes)
        assert ping_loss(fab, "h1", "h2") == 0.0
        _assert_goodput(iperf3_bps(fab, "h1", "h2", seconds=8), topo)
    assert_nothing_left(*owned)


def _assert_goodput(goodput_bps: float, topo) -> None:
    print(f"MTU {topo.mtu_bytes}: goodput {goodput_bps / RATE_BPS:.4f} of the rate, "
          f"payload_fraction {topo.payload_fraction:.4f}")
    assert_within(goodput_bps, RATE_BPS * topo.payload_fraction, 0.97, 1.005,
                  f"TCP goodput at MTU {topo.mtu_bytes}")


def test_a_bad_rto_minimum_is_refused():
    with pytest.raises(FabricError, match="tcp_rto_min_ms: must be an integer between 1 and 60000, got 0"):
        Fabric(two_hosts(RATE_BPS), tcp_rto_min_ms=0)


@pytest.mark.parametrize("sysctls, problem", [
    ({"kernel.panic": 1}, "'kernel.panic' is not a net.ipv4, net.ipv6 or net.core sysctl name"),
    ({"net.ipv4.tcp_reordering": "3; reboot"}, "value '3; reboot' is not 1-40 letters"),
    ({"net.ipv4.no_such_thing": 1}, "this kernel has no sysctl 'net.ipv4.no_such_thing'"),
])
def test_bad_host_sysctls_are_refused_before_anything_starts(sysctls, problem):
    with pytest.raises(FabricError, match=re.escape(problem)):
        Fabric(two_hosts(RATE_BPS), host_sysctls=sysctls)


@pytest.mark.fabric
def test_goodput_at_mtu_1500_is_the_topologys_payload_fraction(require_fabric):
    """The same framing constant at MTU 1500 (at the default MTU, 9000:
    test_two_hosts_ping_goodput_and_clean_stop)."""
    topo = two_hosts(RATE_BPS)
    topo.mtu_bytes = 1500
    with Fabric(topo, controller_port=None, fail_mode="standalone") as fab:
        assert fab.host("h1").cmd("cat /sys/class/net/h1-eth1/mtu").strip() == "1500"
        goodput_bps = iperf3_bps(fab, "h1", "h2", seconds=8)
    _assert_goodput(goodput_bps, topo)


@pytest.mark.fabric
def test_dumbbell_priority(require_fabric):
    """Two senders into the shared 10 Mbit/s link: queue 1 beats queue 3.  That equal classes share the
    link (ten seconds of two TCP flows to converge) is held on the controller's fabric, through the same
    htb classes and DSCP filters: test_controller_fabric.py::test_equal_classes_share_the_link."""
    tos = tos_for_queue
    with Fabric(dumbbell(RATE_BPS, 2), controller_port=None, fail_mode="standalone") as fab:
        assert ping_loss(fab, "h1", "h3") == 0.0 and ping_loss(fab, "h2", "h3") == 0.0
        high, low = iperf3_flows(fab, [("h1", "h3", tos(1)), ("h2", "h3", tos(3))], seconds=5)
        assert high / (high + low) >= 0.90, f"queue 1 got {high:.3g} bps, queue 3 got {low:.3g} bps"
        assert_within(high + low, RATE_BPS, 0.85, 1.05, "priority pair total")


@pytest.mark.fabric
def test_watchdog_restores_filters_after_ovs_rebuilds_qos(require_fabric):
    with Fabric(two_hosts(RATE_BPS), controller_port=None, fail_mode="standalone") as fab:
        assert fab.watchdog is not None and fab.watchdog.missing() == []
        qos_uuid = ovs.run(["ovs-vsctl", "get", "Port", "s1-eth2", "qos"]).strip()
        ovs.run(["ovs-vsctl", "clear", "Port", "s1-eth2", "qos"])  # OVS deletes the htb root ...
        ovs.run(["ovs-vsctl", "set", "Port", "s1-eth2", f"qos={qos_uuid}"])  # ... and builds a new one
        deadline = time.monotonic() + 5
        while fab.watchdog.reapplied == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fab.watchdog.reapplied >= 1
        assert fab.watchdog.missing() == []


@pytest.mark.fabric
def test_fattree_through_mininets_cluster_mode_on_localhost(require_fabric):
    """The fabric built by Mininet's cluster mode (``MininetCluster``, its remote-capable node and link
    classes, ``SwitchBinPlacer``) on a cluster of one server, localhost: every node placed, all pairs
    reachable, the shaped rate held, and nothing left afterwards, not even the ssh control folder
    cluster mode makes (docs/emulation.md, "Beyond one machine")."""
    from mininet.examples.cluster import MininetCluster, RemoteLink, RemoteMixin

    ssh_dir = os.path.expanduser("~/.ssh")
    had_ssh_dir = os.path.isdir(ssh_dir)
    topo = fattree(RATE_BPS, k=4)
    fab = Fabric(topo, controller_port=None, cluster=["localhost"])
    with fab:
        owned = snapshot(fab)
        assert isinstance(fab.net, MininetCluster)
        assert all(isinstance(node, RemoteMixin) for node in fab.net.hosts + fab.net.switches)
        assert all(isinstance(link, RemoteLink) for link in fab.net.links)
        assert fab.placement == {node: "localhost" for node in topo.hosts + topo.switches}
        assert ovs.bridges_owned(fab.tag) == {name: fab.tag for name in topo.switches}  # tagged bridges
        install_static_flows(topo)
        assert fab.net.pingAll(timeout=1) == 0.0
        # across the core, through QoS on every switch port
        assert_within(iperf3_bps(fab, "h1", "h16", seconds=4), RATE_BPS, 0.90, 1.05, "h1 -> h16")
    assert_nothing_left(*owned)
    assert os.path.isdir(ssh_dir) == had_ssh_dir


def test_cluster_servers_other_than_localhost_are_refused():
    with pytest.raises(FabricError, match="only localhost is supported, not server2"):
        Fabric(two_hosts(RATE_BPS), cluster=["localhost", "server2"])
    with pytest.raises(FabricError, match="name at least one server"):
        Fabric(two_hosts(RATE_BPS), cluster=[])


@pytest.mark.fabric
def test_bigswitch_is_one_ovs_switch_at_full_rate_per_port(require_fabric):
    """The Coflow-Benchmark model: N hosts on one switch; two disjoint pairs each get the port rate."""
    topo = bigswitch(RATE_BPS, hosts=6)
    with Fabric(topo, controller_port=None, fail_mode="standalone") as fab:
        owned = snapshot(fab)
        assert list(ovs.bridges_owned(fab.tag)) == ["s1"]
        assert fab.net.pingAll(timeout=1) == 0.0
        a, b = iperf3_flows(fab, [("h1", "h2", None), ("h3", "h4", None)], seconds=5)
        assert_within(a, RATE_BPS, 0.85, 1.05, "bigswitch pair 1")
        assert_within(b, RATE_BPS, 0.85, 1.05, "bigswitch pair 2 (non-blocking: no sharing)")
    assert_nothing_left(*owned)


@pytest.mark.fabric
def test_fattree_k4_pingall_with_static_flows_shaped_upper_links_and_clean_stop(require_fabric):
    """A k=4 fat-tree (its switches' datapath ids, OpenFlow 1.3, the datapath) reaches every pair through
    the static flows, and with oversubscription 4 shapes edge-agg and agg-core at 2.5 Mbit/s while inside
    one edge switch it gets 10; then nothing of it is left."""
    topo = fattree(RATE_BPS, k=4, oversubscription=4)
    fab = Fabric(topo, controller_port=None)
    with fab:
        owned = snapshot(fab)
        assert len(owned[3]) == 16 + 20  # host and switch shells recorded
        install_static_flows(topo)
        assert fab.net.pingAll(timeout=1) == 0.0
        dpids = ovs.run(["ovs-vsctl", "get", "Bridge", "c1", "other_config:datapath-id"]).strip().strip('"')
        assert int(dpids, 16) == topo.graph.nodes["c1"]["dpid"]
        protocols = ovs.run(["ovs-vsctl", "get", "Bridge", "c1", "protocols"]).strip()
        assert protocols in ("[OpenFlow13]", '["OpenFlow13"]')
        assert ovs.run(["ovs-vsctl", "get", "Bridge", "c1", "datapath_type"]).strip() in ("netdev", '""')
        assert_within(iperf3_bps(fab, "h1", "h16", seconds=5), RATE_BPS / 4, 0.85, 1.05, "across the core")
        assert_within(iperf3_bps(fab, "h1", "h2", seconds=5), RATE_BPS, 0.85, 1.05, "under one edge switch")
    assert_nothing_left(*owned)


@pytest.mark.fabric
def test_controller_timeout_tears_down_and_explains(require_fabric):
    fab = Fabric(two_hosts(RATE_BPS), controller_port=6, connect_timeout_s=2)
    with pytest.raises(FabricError, match=r"1 of 1 switches did not connect .*tcp:127.0.0.1:6 "):
        fab.start()
    assert fab.net is None and fab.state is None
    assert_nothing_left(fab.tag, fab.bridges, fab.interfaces, [])


OWNER_SCRIPT = """
import sys, time
from echelonflow.topology import dumbbell
from topologies.fabric import Fabric
fab = Fabric(dumbbell(10e6, 1), controller_port=None, fail_mode="standalone", tag=sys.argv[1]).start()
print("READY", flush=True)
time.sleep(600)
"""


def _start_owner(tag: str, sigint: Any = signal.SIG_DFL, sighup: Any = signal.SIG_DFL) -> subprocess.Popen:
    def dispositions() -> None:  # SIGTERM as a fresh process has it, whatever the test process holds
        signal.signal(signal.SIGINT, sigint)
        signal.signal(signal.SIGHUP, sighup)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    proc = subprocess.Popen([PY, "-c", OWNER_SCRIPT, tag], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            preexec_fn=dispositions)
    line = proc.stdout.readline() if proc.stdout else ""
    assert line.strip() == "READY", f"fabric owner did not start (exit {proc.poll()})"
    return proc


@contextlib.contextmanager
def _owner_cleaned_up(proc: subprocess.Popen) -> Iterator[None]:
    """If the body fails with the owner still running, kill it and clean its fabric: one failed test
    must not leave a fabric whose names and lock fail every fabric test after it."""
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
            subprocess.run([PY, "-m", "cli", "fabric", "clean"], cwd=ROOT, capture_output=True, timeout=120)


def _owned_by(tag: str):
    from topologies import cleanup

    state = cleanup.FabricState.load(cleanup.state_path(tag))
    return tag, state.bridges, state.interfaces, state.pids


@pytest.mark.fabric
def test_sigterm_to_owner_removes_everything(require_fabric):
    tag = f"sigterm{os.getpid()}"
    proc = _start_owner(tag)
    owned = _owned_by(tag)
    with _owner_cleaned_up(proc):
        assert ovs.bridges_owned(tag)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) != 0
    assert_nothing_left(*owned)


@pytest.mark.fabric
def test_an_owner_that_ignores_sigint_keeps_its_fabric_through_one(require_fabric):
    """A background job inherits SIGINT ignored: a Ctrl-C meant for the terminal's foreground must not
    tear its fabric down under a still-running owner (CI's emulations then stalled for 30 s)."""
    tag = f"sigign{os.getpid()}"
    proc = _start_owner(tag, sigint=signal.SIG_IGN)
    owned = _owned_by(tag)
    with _owner_cleaned_up(proc):
        proc.send_signal(signal.SIGINT)
        time.sleep(2.0)
        assert proc.poll() is None and set(ovs.bridges_owned(tag)) == set(owned[1])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) != 0
    assert_nothing_left(*owned)


@pytest.mark.fabric
def test_an_owner_under_nohup_stops_its_node_shells_on_sigterm(require_fabric):
    """Under ``nohup`` (SIGHUP ignored, and so in every child) Mininet's stop, a SIGHUP to each node's
    shell, must still end the shells: the owner then exits on SIGTERM and leaves nothing."""
    tag = f"nohup{os.getpid()}"
    proc = _start_owner(tag, sigint=signal.SIG_IGN, sighup=signal.SIG_IGN)
    owned = _owned_by(tag)
    with _owner_cleaned_up(proc):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) != 0
    assert_nothing_left(*owned)


@pytest.mark.fabric
def test_kill9_then_echelon_fabric_clean_removes_everything(require_fabric):
    tag = f"kill9x{os.getpid()}"
    proc = _start_owner(tag)
    owned = _owned_by(tag)
    assert len(ovs.rows_owned("Queue", tag)) == 4 and ovs.bridges_owned(tag)
    proc.kill()
    proc.wait(timeout=10)
    assert ovs.bridges_owned(tag), "SIGKILL should leave the bridges for clean to remove"
    out = subprocess.run([PY, "-m", "cli", "fabric", "clean"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "removed" in out.stdout
    assert_nothing_left(*owned)


# --------------------------------------------------------------------------- a fabric that fails fast
#: ``mnexec`` as it behaves where namespaces cannot be made (a chroot, a container without
#: CAP_SYS_ADMIN): it fails, and a Mininet node waiting for its shell's prompt would wait forever.
FAILING_MNEXEC = '#!/bin/sh\necho "mnexec: setns: Operation not permitted" >&2\nexit 1\n'
#: The same, except that the pre-flight check passes: only the build's deadline can stop the hang.
HANGING_MNEXEC = ('#!/bin/sh\nif [ "$*" = "-cdn true" ]; then exit 0; fi\n'
                  'echo "mnexec: setns: Operation not permitted" >&2\nexit 1\n')


def _with_mnexec(script: str, tmp_path, monkeypatch) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "mnexec").write_text(script)
    (folder / "mnexec").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")


@pytest.mark.fabric
def test_a_node_that_cannot_be_made_fails_in_seconds(require_fabric, tmp_path, monkeypatch):
    _with_mnexec(FAILING_MNEXEC, tmp_path, monkeypatch)
    fab = Fabric(two_hosts(RATE_BPS), controller_port=None, fail_mode="standalone")
    t0 = time.monotonic()
    with pytest.raises(FabricError, match=r"no node can be made here: `mnexec -cdn true` failed \(exit 1\): "
                                          r"mnexec: setns: Operation not permitted"):
        fab.start()
    assert time.monotonic() - t0 < 15
    assert fab.net is None and fab.state is None
    assert_nothing_left(fab.tag, fab.bridges, fab.interfaces, [])


@pytest.mark.fabric
def test_a_build_that_hangs_is_stopped_at_its_deadline_naming_the_node(require_fabric, tmp_path, monkeypatch):
    _with_mnexec(HANGING_MNEXEC, tmp_path, monkeypatch)
    fab = Fabric(two_hosts(RATE_BPS), controller_port=None, fail_mode="standalone", build_timeout_s=3)
    t0 = time.monotonic()
    with pytest.raises(FabricError, match=r"creating node h1 took over 3 s"):
        fab.start()
    assert time.monotonic() - t0 < 20
    assert fab.net is None and fab.state is None
    assert_nothing_left(fab.tag, fab.bridges, fab.interfaces, [])


def test_the_build_deadline_grows_with_the_topology_and_is_checked():
    assert build_deadline_s(fattree(RATE_BPS, k=8)) > build_deadline_s(fattree(RATE_BPS, k=4))
    for bad in (0, -1, "5", 1e9):
        with pytest.raises(FabricError, match="build_timeout_s: must be a number > 0 and <= 3600"):
            Fabric(two_hosts(RATE_BPS), build_timeout_s=bad)
