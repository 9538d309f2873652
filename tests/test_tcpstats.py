"""traffic.tcpstats: the namespace's TCP counters, parsed from the kernel's tables."""

from __future__ import annotations

import socket
import threading

from traffic import tcpstats

SNMP = """Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm RtoMin OutSegs RetransSegs
Tcp: 1 200 1000 7
"""
NETSTAT = """TcpExt: TCPTimeouts TCPSpuriousRTOs TCPFastRetrans TCPLossProbes TCPSlowStartRetrans
TcpExt: 3 1 4 2 0
IpExt: InOctets
IpExt: 99
"""


def test_counters_are_read_from_both_tables(tmp_path):
    (tmp_path / "snmp").write_text(SNMP)
    (tmp_path / "netstat").write_text(NETSTAT)
    assert tcpstats.read_counters(str(tmp_path)) == {
        "OutSegs": 1000, "RetransSegs": 7, "TCPTimeouts": 3, "TCPSpuriousRTOs": 1, "TCPFastRetrans": 4,
        "TCPLossProbes": 2, "TCPSlowStartRetrans": 0}


def test_missing_tables_or_counters_are_left_out(tmp_path):
    (tmp_path / "snmp").write_text("Tcp: OutSegs\nTcp: 5\n")
    assert tcpstats.read_counters(str(tmp_path)) == {"OutSegs": 5}
    assert tcpstats.parse_proc_table("Tcp: A B\nUdp: 1 2\n") == {}  # mismatched pair: ignored


def test_the_live_namespace_counts_segments_sent():
    """The real /proc/net of this namespace: a loopback transfer adds to OutSegs."""
    before = tcpstats.read_counters()
    server = socket.create_server(("127.0.0.1", 0))
    received = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while chunk := conn.recv(65536):
                received.append(len(chunk))

    thread = threading.Thread(target=serve)
    thread.start()
    with socket.create_connection(server.getsockname()) as client:
        client.sendall(bytes(1_000_000))
    thread.join(10)
    server.close()
    delta = tcpstats.difference(before, tcpstats.read_counters())
    assert sum(received) == 1_000_000
    assert delta["OutSegs"] > 0 and set(delta) == {c for _, _, c in tcpstats.COUNTERS}
