"""The fidelity monitor: pure arithmetic and verdicts on hand-made samples, readers on real /proc text,
and sampling on a real fabric (a backlogged port, an idle one, and a CPU-starved machine)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from emulation.monitor import (
    FidelityMonitor,
    IntervalStats,
    PortCounters,
    QdiscReader,
    Sample,
    Thresholds,
    combine,
    evaluate,
    interval_stats,
    judge_tcp_timeouts,
    parse_net_dev,
    parse_packet_sockets,
    parse_qdisc_dump,
    read_cpu_jiffies,
    read_thread_jiffies,
    sample_interval_s,
)
from emulation.progress import say_monitor
from tests.helpers import agent_records
from topologies.ovs import socket_fds, vswitchd_pid

RATE = 10e6


def sample(wall_s, total, idle, threads=None, ports=None, controller=None):
    return Sample(wall_s, total, idle, dict(threads or {}), dict(ports or {}), controller)


# ------------------------------------------------------------------------------------------ pure
def test_interval_stats_rates_cpu_and_busy_ports():
    before = sample(100.0, 1000, 600, {1: 50, 2: 10}, {
        "p1": PortCounters(0, 3000), "p2": PortCounters(0, 0), "p3": PortCounters(0, 1500)}, 40)
    after = sample(100.5, 1100, 610, {1: 95, 2: 12}, {
        "p1": PortCounters(600_000, 1500), "p2": PortCounters(625_000, 0),
        "p3": PortCounters(100, 3000, 12500)}, 60)
    stats = interval_stats(before, after, {"p1": RATE, "p2": RATE, "p3": RATE}, clock_ticks=100)
    assert stats.duration_s == pytest.approx(0.5)
    assert stats.cpu_idle == pytest.approx(0.1)
    assert stats.ovs_thread_busy == pytest.approx(0.9)  # 45 jiffies of 50 possible in 0.5 s
    assert stats.ovs_busy == pytest.approx(0.94)
    assert stats.controller_busy == pytest.approx(0.4)
    # p1 backlogged at both ends: 600 kB in 0.5 s = 9.6 Mbit/s of 10; p2 never backlogged: not judged;
    # p3 backlogged but sent nearly nothing: ratio ~0
    assert stats.busy_ports == pytest.approx({"p1": 0.96, "p3": 0.00016})
    assert stats.ingress_lag_s == pytest.approx(12500 * 8 / RATE)


def test_interval_stats_refuses_empty_or_reset_intervals():
    a = sample(5.0, 100, 50, ports={"p": PortCounters(1000, 10)})
    assert interval_stats(a, a, {"p": RATE}) is None
    later = sample(6.0, 200, 60, ports={"p": PortCounters(10, 10)})  # counter went back (port recreated)
    assert interval_stats(a, later, {"p": RATE}).busy_ports == {}


def stats(start, busy=0.3, idle=0.5, ports=None, lag=0.0, length=0.5):
    return IntervalStats(start, start + length, idle, busy, busy, 0.2, dict(ports or {}), lag)


def test_evaluate_trusts_a_quiet_round_and_says_why_not_for_a_saturated_one():
    quiet = [stats(t * 0.5, busy=0.4, ports={"p": 0.98}) for t in range(20)]
    doc = evaluate(quiet)
    assert doc["trusted"] and doc["reasons"] == []
    assert doc["intervals"] == 20 and doc["observed_s"] == pytest.approx(10.0)
    assert doc["link_ratio"]["median"] == pytest.approx(0.98)
    # 3 of 20 intervals with the machine pegged (1 % idle): 15 % > the 10 % allowed
    hot = quiet[:17] + [stats(8.5 + t * 0.5, idle=0.01) for t in range(3)]
    doc = evaluate(hot)
    assert not doc["trusted"]
    assert doc["saturated_share"] == pytest.approx(0.15)
    assert "CPU-saturated 15% of the time" in doc["reasons"][0]
    # exactly at the budget is still trusted
    assert evaluate(quiet[:18] + [stats(9 + t * 0.5, idle=0.01) for t in range(2)])["trusted"]


def test_evaluate_slow_links_lag_window_and_no_samples():
    slow = [stats(t * 0.5, ports={"a": 0.5, "b": 1.0}) for t in range(10)]
    doc = evaluate(slow)
    assert not doc["trusted"] and doc["slow_link_share"] == pytest.approx(0.5)
    assert doc["slowest_ports"] == {"a": 0.5, "b": 1.0}
    assert "50% of busy port intervals below 90%" in doc["reasons"][0]
    # two slow intervals out of ten are over the 5 % share but below the count that is not noise
    assert evaluate(slow[:2] + [stats(5 + t * 0.5, ports={"b": 1.0}) for t in range(8)])["trusted"]
    lagging = [stats(t * 0.5, lag=0.2) for t in range(10)]
    assert "ingress lag above 50 ms 100% of the time" in evaluate(lagging)["reasons"][0]
    # only intervals inside the window count: a start-up spike before t0 is ignored
    spiky = [stats(0.0, idle=0.0), stats(0.5, idle=0.0)] + [stats(1.0 + t * 0.5) for t in range(10)]
    assert not evaluate(spiky)["trusted"]
    assert evaluate(spiky, window=(1.0, 6.0))["trusted"]
    assert evaluate([])["reasons"] == ["no samples during the traffic"]
    assert not evaluate(spiky, window=(100.0, 101.0))["trusted"]


def test_thresholds_are_configurable_and_recorded():
    rounds = [stats(t * 0.5, busy=0.99) for t in range(4)]
    assert evaluate(rounds)["trusted"]  # the switch thread's share alone does not decide (measured)
    strict = Thresholds(ovs_thread_busy_max=0.5)
    doc = evaluate(rounds, strict)
    assert not doc["trusted"] and doc["thresholds"]["ovs_thread_busy_max"] == 0.5


def test_sampling_period_grows_with_the_fabric():
    assert sample_interval_s(2) == sample_interval_s(80) == 0.25  # fig2, k=4
    assert sample_interval_s(640) == pytest.approx(0.512)  # k=8


def test_combine_trusts_a_run_only_if_every_round_was():
    good, bad = evaluate([stats(0)]), evaluate([stats(0, idle=0.0)])
    assert combine({"together": good, "alone-a": good})["trusted"]
    run = combine({"together": good, "alone-a": bad})
    assert not run["trusted"] and run["untrusted_rounds"] == ["alone-a"]
    assert not combine({})["trusted"]


# ------------------------------------------------------------------------------------------ TCP timeouts
def quiet_phase():
    return evaluate([stats(t * 0.5, busy=0.1, idle=0.9) for t in range(20)])


def test_tcp_timeouts_on_a_host_make_the_phase_untrusted_naming_hosts_and_counts(tmp_path):
    """The crux k=8 outlier's counters (docs/results.md): 5 timeouts on h34, 4 on h50, none elsewhere;
    ports and CPU were idle, so the machine's numbers alone trusted it."""
    tcp = agent_records(tmp_path, {"h1": 0, "h34": 5, "h50": 4, "h66": 0})
    assert tcp["h34"]["TCPTimeouts"] == 5 and tcp["h1"]["TCPTimeouts"] == 0
    doc = quiet_phase()
    assert doc["trusted"]
    judge_tcp_timeouts(doc, tcp)
    assert not doc["trusted"]
    assert doc["reasons"] == ["TCP retransmission timeouts on h34 (5), h50 (4): flows stalled, the run's "
                              "times are not the schedule's"]
    assert doc["tcp_timeouts"] == {"h34": 5, "h50": 4}
    assert doc["tcp_hosts_counted"] == 4 and doc["tcp_timeouts_judged"]
    assert not combine({"together": doc})["trusted"]


def test_no_tcp_timeouts_leave_the_verdict_and_some_add_to_other_reasons(tmp_path):
    tcp = agent_records(tmp_path / "clean", {"h1": 0, "h2": 0})
    doc = judge_tcp_timeouts(quiet_phase(), tcp)
    assert doc["trusted"] and doc["reasons"] == [] and doc["tcp_timeouts"] == {}
    saturated = evaluate([stats(t * 0.5, idle=0.0) for t in range(4)])
    judge_tcp_timeouts(saturated, agent_records(tmp_path / "hot", {"h1": 1}))
    assert not saturated["trusted"] and len(saturated["reasons"]) == 2
    assert saturated["reasons"][0].startswith("CPU-saturated")
    assert saturated["reasons"][1].startswith("TCP retransmission timeouts on h1 (1):")


def test_one_tcp_timeout_is_enough_by_default_and_the_threshold_is_a_setting(tmp_path):
    """A congested flow's one timeout still stalls it for a minimum RTO (docs/emulation.md); a run that
    wants to tolerate some says so in ``Thresholds.tcp_timeouts_max``; None turns the check off."""
    tcp = agent_records(tmp_path, {"h2": 1, "h3": 2, "h7": 6})
    assert Thresholds().tcp_timeouts_max == 0 and Thresholds().dilated(8).tcp_timeouts_max == 0
    lenient = judge_tcp_timeouts(quiet_phase(), tcp, Thresholds(tcp_timeouts_max=2))
    assert lenient["reasons"] == ["TCP retransmission timeouts (more than 2 per host) on h7 (6): flows "
                                  "stalled, the run's times are not the schedule's"]
    assert lenient["tcp_timeouts"] == {"h2": 1, "h3": 2, "h7": 6}
    off = judge_tcp_timeouts(quiet_phase(), tcp, Thresholds(tcp_timeouts_max=None))
    assert off["trusted"] and not off["tcp_timeouts_judged"] and off["tcp_timeouts"]["h7"] == 6


def test_tcp_timeouts_in_a_phase_with_injected_faults_are_recorded_not_judged(tmp_path):
    """A link or switch taken down loses what was in flight, and TCP times out by design: that cost is what
    the fault runs measure (docs/faults.md), so it is recorded and said, not held against the run.  A
    killed agent left no counters and is not counted."""
    tcp = agent_records(tmp_path, {"h1": 2, "h16": 0, "h5": 0}, killed=("h5",))
    doc = judge_tcp_timeouts(quiet_phase(), tcp, faults_injected=True)
    assert doc["trusted"] and doc["reasons"] == []
    assert doc["tcp_timeouts"] == {"h1": 2} and doc["tcp_hosts_counted"] == 2
    assert not doc["tcp_timeouts_judged"]
    lines = []
    say_monitor(lines.append, "together", doc)
    assert lines[0].startswith("together: fidelity monitor: trusted (")
    assert lines[0].endswith(", TCP retransmission timeouts (not judged) h1 2)")
    judged = judge_tcp_timeouts(quiet_phase(), tcp)
    say_monitor(lines.append, "together", judged)
    assert "NOT trusted: TCP retransmission timeouts on h1 (2)" in lines[1] and "(not judged)" not in lines[1]


def test_tcp_timeouts_name_hosts_in_order_and_count_the_rest(tmp_path):
    tcp = agent_records(tmp_path, {f"h{i}": 1 for i in (10, 2, 33, 4, 5, 6, 7, 8, 9, 1)})
    doc = judge_tcp_timeouts(quiet_phase(), tcp)
    assert list(doc["tcp_timeouts"]) == ["h1", "h2", "h4", "h5", "h6", "h7", "h8", "h9", "h10", "h33"]
    assert ("on h1 (1), h2 (1), h4 (1), h5 (1), h6 (1), h7 (1), h8 (1), h9 (1), 2 more hosts: flows "
            "stalled") in doc["reasons"][0]


# ------------------------------------------------------------------------------------------ readers
def test_parsers_on_kernel_formats():
    net_dev = ("Inter-|   Receive |  Transmit\n face |bytes packets|bytes\n"
               "    lo: 30281773   27028    0    0    0     0          0         0 30281700   27028    0    0"
               "    0     0       0          0\n"
               "s1-eth2:  900 9 0 0 0 0 0 0 123456 99 0 0 0 0 0 0\n")
    assert parse_net_dev(net_dev) == {"lo": 30281700, "s1-eth2": 123456}
    packet = ("sk               RefCnt Type Proto  Iface R Rmem   User   Inode\n"
              "0000000048533e83 2      3    0003   0     0 0      0      50304\n"
              "0000000048533e84 3      3    0003   419   1 4608   0      50305\n"
              "0000000048533e85 3      3    0003   419   1 1000   0      50306\n"
              "0000000048533e86 3      3    0003   420   1 2304   0      60000\n")
    assert parse_packet_sockets(packet) == {419: 5608, 420: 2304}
    assert parse_packet_sockets(packet, inodes={50305}) == {419: 4608}


def _qdisc_message(ifindex: int, parent: int, backlog: int) -> bytes:
    queue = struct.pack("IIIII", 3, backlog, 0, 0, 0)  # qlen, backlog, drops, requeues, overlimits
    stats_queue = struct.pack("HH", 4 + len(queue), 3) + queue
    stats2 = struct.pack("HH", 4 + len(stats_queue), 7) + stats_queue
    kind = struct.pack("HH", 8, 1) + b"htb\0"
    body = struct.pack("B3xiII", 0, ifindex, 0x10000, parent) + struct.pack("I", 0) + kind + stats2
    return struct.pack("IHHII", 16 + len(body), 36, 2, 1, 0) + body


def test_qdisc_dump_parser_keeps_root_backlogs_until_done():
    batch = _qdisc_message(7, 0xFFFFFFFF, 4500) + _qdisc_message(7, 0x10001, 999)
    assert parse_qdisc_dump(batch) == ({7: 4500}, False)
    done = struct.pack("IHHII", 20, 3, 2, 1, 0) + struct.pack("i", 0)
    assert parse_qdisc_dump(_qdisc_message(8, 0xFFFFFFFF, 0) + done) == ({8: 0}, True)
    error = struct.pack("IHHII", 36, 2, 0, 1, 0) + struct.pack("i", -1) + bytes(16)
    with pytest.raises(OSError, match="netlink qdisc dump failed"):
        parse_qdisc_dump(error)


def test_readers_on_this_machine():
    total, idle = read_cpu_jiffies()
    assert total > idle > 0
    threads = read_thread_jiffies(os.getpid())
    assert os.getpid() in threads and all(v >= 0 for v in threads.values())
    assert read_thread_jiffies(2**22 + 12345) == {}
    reader = QdiscReader()
    try:
        backlogs = reader.backlogs()
    finally:
        reader.close()
    with open("/sys/class/net/lo/ifindex", encoding="ascii") as fh:
        assert int(fh.read()) in backlogs  # every interface has a root qdisc (noqueue included)


def test_socket_fds_finds_a_process_sockets_by_inode():
    """The monitor's ovs-vswitchd sockets and ensure_tx_buffer's descriptor come from this one reader."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        inode = os.fstat(sock.fileno()).st_ino
        assert socket_fds(os.getpid())[inode] == sock.fileno()
    assert inode not in socket_fds(os.getpid())
    assert socket_fds(2**22 + 12345) == {}  # no such process
    pid = vswitchd_pid()  # None where OVS does not run; else a live ovs-vswitchd
    if pid is not None:
        with open(f"/proc/{pid}/comm", encoding="ascii") as fh:
            assert fh.read().strip() == "ovs-vswitchd"


# ------------------------------------------------------------------------------------------ fabric
def _spinners(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


@pytest.mark.fabric
def test_monitor_on_a_real_fabric_backlogged_link_and_starved_cpu(require_fabric):
    """iperf3 through a two-host fabric: the receiver-facing port is backlogged and sends at its
    configured rate; the same traffic with every core kept busy by spinners is not trusted."""
    from echelonflow.topology import two_hosts
    from tests.fabric_helpers import iperf3_flows
    from topologies.fabric import Fabric

    # hosts unshaped: the switch port toward h2 is the bottleneck, so its htb holds the backlog
    with Fabric(two_hosts(RATE), controller_port=None, fail_mode="standalone", shape_hosts=False) as fab:
        ports = fab.switch_ports
        with FidelityMonitor(ports, interval_s=0.25) as quiet:
            window_start = time.time()
            iperf3_flows(fab, [("h1", "h2", None)], seconds=4.0)
            window = (window_start + 1.0, time.time())  # after slow start
        doc = quiet.report(window)
        spinners = _spinners(os.cpu_count() or 2)
        try:
            with FidelityMonitor(ports, interval_s=0.25) as starved:
                window_start = time.time()
                iperf3_flows(fab, [("h1", "h2", None)], seconds=4.0)
                starved_window = (window_start + 1.0, time.time())
        finally:
            for proc in spinners:
                proc.kill()
                proc.wait()
        starved_doc = starved.report(starved_window)
    toward_h2 = f"s1-eth{fab.topology.port('s1', 'h2')}"
    assert doc["busy_port_intervals"] >= 8, doc
    assert toward_h2 in doc["slowest_ports"]
    assert 0.9 <= doc["link_ratio"]["median"] <= 1.1, doc
    assert doc["ovs_thread_busy"]["max"] > 0.0 and doc["sample_cost_ms"] < 20
    assert doc["trusted"], doc["reasons"]
    assert starved_doc["cpu_idle"]["median"] < 0.03, starved_doc
    assert not starved_doc["trusted"] and "CPU-saturated" in starved_doc["reasons"][0], starved_doc


@pytest.mark.fabric
def test_a_black_holed_flow_on_a_real_fabric_is_caught_by_its_senders_tcp_timeouts(require_fabric, tmp_path):
    """One emulated run (fair, h1 -> h2, 3 MB at 10 Mbit/s) whose switch drops the flow's packets for
    2.5 s mid-flow, longer than the hosts' 1 s minimum RTO (what a hole in a flow's path does): the run
    completes with every byte, and is not trusted, for the sender's timeouts."""
    from echelonflow.model import ComputeTask, FlowTask, Job
    from echelonflow.topology import two_hosts
    from emulation.phase import Simulated
    from emulation.run import emulate_scheduler
    from emulation.settings import EmulationSettings

    job = Job("bh")
    job.add(ComputeTask("c0", "h1", 0.5))
    job.add(FlowTask("f", "h1", "h2", 3_000_000, ("c0",)))
    topo = two_hosts(RATE)
    hosts_ip = {h: topo.graph.nodes[h]["ip"] for h in topo.hosts}
    rule = f"cookie=0xb1ac,priority=65000,ip,nw_src={hosts_ip['h1']},nw_dst={hosts_ip['h2']}"

    def black_hole(on: bool) -> None:
        """The drop rule on s1 added (``on``) or removed; only this test's cookie is touched (the bridge
        and the rule go with the run's fabric in any case)."""
        args = ["add-flow", "s1", rule + ",actions=drop"] if on else ["del-flows", "s1", "cookie=0xb1ac/-1"]
        subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args], check=False, capture_output=True)

    timers = [threading.Timer(1.5, black_hole, (True,)), threading.Timer(4.0, black_hole, (False,))]
    lines: list[str] = []

    def progress(text: str) -> None:  # the flow starts 0.7 s after this line (t0 + the compute)
        lines.append(text)
        if text.endswith("together: agents ready; running"):
            for timer in timers:
                timer.start()

    try:
        result, _failures = emulate_scheduler(topo, [job], "fair", Simulated({"bh": 3.0}),
                                              EmulationSettings(logs_dir=str(tmp_path)), progress)
    finally:
        for timer in timers:
            timer.cancel()
            if timer.is_alive():
                timer.join()
    phase = result.fidelity_monitor["rounds"]["together"]
    assert result.jobs["bh"].completion_s > 3.0 + 2.0, lines  # 2.9 s unhindered, then the stall
    assert phase["tcp_timeouts"].get("h1", 0) >= 1 and "h2" not in phase["tcp_timeouts"], phase
    assert not result.trusted and phase["tcp_timeouts_judged"]
    assert (f"TCP retransmission timeouts on h1 ({phase['tcp_timeouts']['h1']}): flows stalled, the run's "
            "times are not the schedule's") in phase["reasons"]
    assert any("fidelity monitor: NOT trusted" in line and "TCP retransmission timeouts on h1" in line
               for line in lines), lines


def test_dilated_thresholds_judge_ingress_lag_in_the_scenarios_time_scale():
    lagging = [stats(t * 0.5, lag=0.12) for t in range(10)]  # 120 ms at the dilated link rate
    assert not evaluate(lagging)["trusted"]
    dilated = Thresholds().dilated(4)  # 30 ms in the scenario's time: within the 50 ms
    assert dilated.ingress_lag_max_s == pytest.approx(0.2) and evaluate(lagging, dilated)["trusted"]
    assert dilated.link_ratio_min == Thresholds().link_ratio_min  # ratios do not scale
