"""Wire capture and its checks: decoding, flow windows on shared 5-tuples, marks against allocations,
times against the agents' (on frames built with scapy), and on a real fabric: an enforced flow's DSCP
marks as the switches rewrite them, before and after its queue is changed."""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.utils import RawPcapWriter

from emulation.capture import (
    MARK_TOLERANCE_S,
    TIME_TOLERANCE_S,
    FlowWindow,
    SideCheck,
    WirePacket,
    assign,
    bpf_ipv4_tcp,
    check_flows,
    check_phase,
    decode,
    flow_windows,
    read_pcap,
)
from traffic.result import AgentResult

H1, H2 = "10.0.0.1", "10.0.0.2"
T0 = 1_700_000_000.0


def frame(src=H1, sport=40000, dst=H2, dport=46000, dscp=0, payload=1000, flags="A") -> bytes:
    packet = Ether() / IP(src=src, dst=dst, tos=dscp << 2) / TCP(sport=sport, dport=dport, flags=flags)
    return bytes(packet / (b"x" * payload))


def packet(t, dscp=0, payload=1000, sport=40000) -> WirePacket:
    return WirePacket(T0 + t, H1, sport, H2, 46000, dscp, payload)


# ------------------------------------------------------------------------------------------ decoding
def test_decode_reads_addresses_ports_dscp_and_payload_even_when_cut():
    data = frame(dscp=24, payload=1448)
    decoded = decode(data, 5.0)
    assert decoded == WirePacket(5.0, H1, 40000, H2, 46000, 24, 1448)
    assert decode(data[:96], 5.0).payload_bytes == 1448  # the capture keeps 96 bytes: lengths from headers
    assert decode(frame(payload=0), 1.0).payload_bytes == 0
    assert decode(bytes(Ether() / IP(src=H1, dst=H2, proto=17) / (b"u" * 40)), 1.0) is None  # UDP
    assert decode(bytes(Ether(type=0x0806) / (b"a" * 40)), 1.0) is None  # ARP
    assert decode(data[:30], 1.0) is None


def test_pcap_round_trip_keeps_nanoseconds(tmp_path):
    path = str(tmp_path / "p.pcap")
    writer = RawPcapWriter(path, linktype=1, nano=True, snaplen=96)
    writer.write_header(None)
    for i, dscp in enumerate((0, 8, 24)):
        data = frame(dscp=dscp)[:96]
        writer.write_packet(data, sec=1_700_000_000, usec=123_456_789 + i, caplen=len(data), wirelen=1054)
    writer.close()
    packets = read_pcap(path)
    assert [p.dscp for p in packets] == [0, 8, 24]
    assert packets[2].time_s == pytest.approx(1_700_000_000.123456791, abs=1e-6)
    assert all(p.payload_bytes == 1000 for p in packets)


def test_bpf_program_keeps_tcp_over_ipv4_cut_to_the_snap_length():
    program = bpf_ipv4_tcp(96)
    assert program[-2] == (0x06, 0, 0, 96) and program[-1] == (0x06, 0, 0, 0)
    # both conditional jumps land on the drop instruction when they fail
    for index, (code, _jt, jf, _k) in enumerate(program):
        if code == 0x15:
            assert index + 1 + jf == len(program) - 1


# ------------------------------------------------------------------------------------------ matching
def window(qid, start, finish, allocations=None, sport=40000, unmarked=False):
    allocs = None if allocations is None else [(T0 + t, d) for t, d in allocations]
    return FlowWindow(qid, H1, sport, H2, 46000, T0 + start, T0 + finish, allocs, unmarked)


def test_packets_of_one_connection_go_to_the_flow_whose_window_holds_them():
    first, second = window("j/a", 0.0, 1.0), window("j/b", 1.0, 2.0)
    other_port = window("j/c", 0.0, 2.0, sport=40001)
    packets = [packet(0.1), packet(0.99), packet(1.005), packet(1.5), packet(2.0 + TIME_TOLERANCE_S / 2),
               packet(2.5), packet(0.5, payload=0), packet(0.5, sport=40001)]
    got = assign(packets, [first, second, other_port])
    assert [p.time_s - T0 for p in got["j/a"]] == pytest.approx([0.1, 0.99])
    assert [p.time_s - T0 for p in got["j/b"]] == pytest.approx([1.005, 1.5, 2.0 + TIME_TOLERANCE_S / 2])
    assert len(got["j/c"]) == 1  # the pure ACK (no payload) and the packet after every window are nobody's


def test_expected_marks_follow_allocations_with_a_tolerance_after_each_change():
    flow = window("j/a", 0.0, 3.0, allocations=[(0.0, 8), (1.0, 24), (2.0, None)])
    assert flow.expected(T0 + 0.5) == {8}
    assert flow.expected(T0 + 1.0 + MARK_TOLERANCE_S / 2) == {8, 24}  # the old mark may still be queued
    assert flow.expected(T0 + 1.0 + 2 * MARK_TOLERANCE_S) == {24}
    assert flow.expected(T0 + 2.5) is None  # no class assigned: not judged
    assert flow.expected(T0 - 0.01) is None  # before the first allocation
    assert window("j/f", 0.0, 1.0, unmarked=True).expected(T0 + 0.5) == {0}
    assert window("j/n", 0.0, 1.0).expected(T0 + 0.5) is None  # nothing recorded


def test_side_check_counts_marks_and_mismatches():
    flow = window("j/a", 0.0, 2.0, allocations=[(0.0, 8), (1.0, 24)])
    check = SideCheck()
    for t, dscp in ((0.1, 8), (0.5, 8), (1.01, 8), (1.5, 24), (1.6, 8)):
        check.add(packet(t, dscp), flow)
    assert check.packets == 5 and check.marks == {8: 4, 24: 1}
    assert check.mismatched == 1 and "DSCP 8 where [24] was assigned" in check.example
    assert check.first_s == pytest.approx(T0 + 0.1) and check.last_s == pytest.approx(T0 + 1.6)


def test_check_flows_lists_late_first_packets_finish_gaps_and_missing_sides():
    good = window("j/good", 0.0, 1.0, allocations=[(0.0, 8)])
    late = window("j/late", 2.0, 3.0, allocations=[(2.0, 8)], sport=40001)
    lost = window("j/lost", 4.0, 5.0, allocations=[(4.0, 8)], sport=40002)
    sender = {"j/good": [packet(0.005, 8), packet(0.9, 8)],
              "j/late": [packet(2.2, 8, sport=40001), packet(2.9, 16, sport=40001)],
              "j/lost": [packet(4.01, 8, sport=40002)]}
    receiver = {"j/good": [packet(0.01, 8), packet(0.999, 8)],
                "j/late": [packet(2.21, 8, sport=40001), packet(2.95, 8, sport=40001)]}
    doc = check_flows([good, late, lost], sender, receiver, T0)
    assert doc["flows"] == 3 and doc["flows_with_problems"] == 2
    assert doc["per_flow"]["j/good"]["problems"] == []
    assert doc["per_flow"]["j/good"]["first_packet_after_start_s"] == pytest.approx(0.005)
    assert doc["per_flow"]["j/good"]["finish_after_last_packet_s"] == pytest.approx(0.001)
    late_problems = doc["per_flow"]["j/late"]["problems"]
    assert any("1 of 2 packets at the sender with a mark other than assigned" in p for p in late_problems)
    assert any("first packet +200.0 ms" in p for p in late_problems)
    assert any("receiver's finish +50.0 ms" in p for p in late_problems)
    assert doc["per_flow"]["j/lost"]["problems"] == ["no data packets seen at the receiver"]
    assert doc["packets_mismatched"] == 1 and doc["packets_judged"] == 9
    assert doc["mismatches"][0].startswith("j/late: ")


def agent_documents(allocations):
    """Two agents' result documents for one flow h1 -> h2 (relative times, as the agents write them)."""
    sent = {"dst": "h2", "size_bytes": 2000, "start": 1.0, "src_port": 40000, "dst_port": 46000,
            "confirmed_bytes": 2000}
    if allocations is not None:
        sent["allocations"] = allocations
    received = {"src": "h1", "finish": 2.0, "received_bytes": 2000}
    return {"h1": AgentResult("h1", T0, sent={"j/a": sent}),
            "h2": AgentResult("h2", T0, received={"j/a": received})}


def test_flow_windows_from_agent_documents():
    hosts_ip = {"h1": H1, "h2": H2}
    flows, problems = flow_windows(agent_documents([{"t_s": 1.0, "dscp": 8, "pacing_bytes_per_s": None}]),
                                   hosts_ip, T0, enforces=True)
    assert problems == [] and len(flows) == 1
    flow = flows[0]
    assert (flow.src_ip, flow.src_port, flow.dst_ip, flow.dst_port) == (H1, 40000, H2, 46000)
    assert (flow.start_s, flow.finish_s) == (T0 + 1.0, T0 + 2.0) and flow.allocations == [(T0 + 1.0, 8)]
    unmarked, _ = flow_windows(agent_documents(None), hosts_ip, T0, enforces=False)
    assert unmarked[0].must_be_unmarked
    docs = agent_documents(None)
    del docs["h1"].sent["j/a"]["src_port"]
    problems = flow_windows(docs, hosts_ip, T0, enforces=True)[1]
    assert problems == ["j/a: no 5-tuple or finish recorded by the agents"]


def test_check_phase_reads_pcaps_of_both_first_hop_ports(tmp_path):
    def write(name, entries):
        writer = RawPcapWriter(str(tmp_path / name), linktype=1, nano=True, snaplen=96)
        writer.write_header(None)
        for t, data in entries:
            stamp = round((T0 + t) * 1e9)
            writer.write_packet(data[:96], sec=stamp // 10**9, usec=stamp % 10**9, caplen=min(96, len(data)),
                                wirelen=len(data))
        writer.close()

    # sender port: marked 8 then 24 after the change at 1.5 s; a retransmission at 1.6 still 8 (wrong)
    write("s1-eth1.pcap", [(1.001, frame(dscp=8)), (1.4, frame(dscp=8)), (1.52, frame(dscp=8)),
                           (1.6, frame(dscp=24)), (1.65, frame(dscp=8)), (1.7, frame(dscp=0, payload=0))])
    write("s1-eth2.pcap", [(1.003, frame(dscp=8)), (1.999, frame(dscp=24)),
                           (1.0, frame(src=H2, dst=H1, sport=46000, dport=40000, payload=0))])
    allocations = [{"t_s": 1.0, "dscp": 8, "pacing_bytes_per_s": 1000}, {"t_s": 1.5, "dscp": 24,
                                                                         "pacing_bytes_per_s": None}]
    doc = check_phase(str(tmp_path), agent_documents(allocations), {"h1": H1, "h2": H2},
                      {"h1": "s1-eth1", "h2": "s1-eth2"}, T0, enforces=True)
    flow = doc["per_flow"]["j/a"]
    assert flow["sender"]["packets"] == 5 and flow["sender"]["marks"] == {"8": 4, "24": 1}
    assert flow["sender"]["mismatched"] == 1 and flow["receiver"]["mismatched"] == 0
    assert flow["receiver"]["packets"] == 2 and flow["finish_after_last_packet_s"] == pytest.approx(0.001)
    assert doc["mismatches"] == ["j/a: 1 of 5 packets at the sender with a mark other than assigned "
                                 "(e.g. DSCP 8 where [24] was assigned)"]
    assert doc["capture"] is None  # no capture.json next to hand-written pcaps


# ------------------------------------------------------------------------------------------ fabric
@pytest.mark.fabric
def test_enforced_flow_carries_its_queue_mark_on_the_wire(require_fabric, tmp_path):
    """The controller enforces a flow in queue 1, then moves it to queue 3; at the receiver's first-hop
    port its packets carry DSCP 8, then 24 (the switch rewrites them); an unenforced flow stays 0."""
    from controller.launcher import ControllerProcess, free_tcp_port
    from echelonflow.queues import dscp_for_queue
    from echelonflow.topology import two_hosts
    from emulation.capture import WireCapture
    from emulation.phase import first_hop_port
    from tests.fabric_helpers import controller_and_fabric, iperf3_flows

    topo = two_hosts(10e6)
    port = free_tcp_port()
    state = SimpleNamespace(topo=topo, port=port, ctl=ControllerProcess(topo, ofp_port=port))
    ips = {h: topo.graph.nodes[h]["ip"] for h in ("h1", "h2")}
    ports = {h: first_hop_port(topo, h) for h in ("h1", "h2")}
    enforced = {"src_ip": ips["h1"], "dst_ip": ips["h2"], "src_port": 43101, "dst_port": 5311}
    requested_s: list[float] = []
    changed_s: list[float] = []
    with controller_and_fabric(state):
        with state.ctl.client() as api:
            reply = api.enforce_install("wire", enforced, 1, wait_s=5)
        assert reply["enforcement"]["in_force"], reply
        installed_s = time.time()
        capture = WireCapture(str(tmp_path / "cap"), sorted(ports.values()))
        with capture:

            def move_to_queue_3() -> None:
                time.sleep(2.0)
                with state.ctl.client() as api:
                    requested_s.append(time.time())
                    assert api.enforce_update("wire", queue=3, wait_s=5)["enforcement"]["in_force"]
                changed_s.append(time.time())

            mover = threading.Thread(target=move_to_queue_3)
            mover.start()
            iperf3_flows(state.fabric, [("h1", "h2", None), ("h1", "h2", None)], seconds=4.0, omit_s=0,
                         ports=[(43101, 5311), (43102, 5312)])
            mover.join()
            finished_s = time.time()
    assert changed_s, "the queue change did not happen"
    packets = read_pcap(os.path.join(capture.out_dir, f"{ports['h2']}.pcap"))
    at_receiver = [p for p in packets if p.dst_ip == ips["h2"]]
    # the switch takes the new rule somewhere between the request and the reply: packets in between
    # (and for the mark tolerance after) may carry either mark and are not judged
    flow = FlowWindow("wire", ips["h1"], 43101, ips["h2"], 5311, installed_s, finished_s,
                      [(installed_s, dscp_for_queue(1)), (requested_s[0], None),
                       (changed_s[0], dscp_for_queue(3))])
    mine = assign(at_receiver, [flow])["wire"]
    check = SideCheck()
    for p in mine:
        check.add(p, flow)
    by_mark = {dscp: sum(p.payload_bytes for p in mine if p.dscp == dscp) for dscp in check.marks}
    assert sum(by_mark.values()) > 1_000_000, by_mark  # ~2.5 MB in 4 s beside the other flow at 10 Mbit/s
    assert by_mark.get(8, 0) > 300_000 and by_mark.get(24, 0) > 300_000, by_mark
    assert check.mismatched == 0, (check.example, check.marks)
    assert check.unjudged < check.packets / 4, check  # the window between request and reply is short
    plain = FlowWindow("plain", ips["h1"], 43102, ips["h2"], 5312, installed_s, finished_s, None, True)
    plain_packets = assign(at_receiver, [plain])["plain"]
    assert sum(p.payload_bytes for p in plain_packets) > 300_000 and {p.dscp for p in plain_packets} == {0}
    sent = [p for p in read_pcap(os.path.join(capture.out_dir, f"{ports['h1']}.pcap"))
            if p.src_ip == ips["h1"] and p.src_port == 43101 and p.payload_bytes]
    assert sent and {p.dscp for p in sent} == {0}  # iperf3 sets no TOS: the mark is the switch's
