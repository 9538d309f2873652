"""Traffic agents as real processes on this machine, without the fabric.

Hosts are mapped to distinct 127.0.0.x loopback addresses; every flow is a real TCP transfer between
agent processes and every cross-host dependency travels over the agents' Unix control sockets.  The
fabric version of these checks is in tests/test_emulate.py.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from echelonflow.echelon import ideal_schedule
from echelonflow.model import ComputeTask, FlowTask, Job, qualified
from echelonflow.topology import BUILDERS
from echelonflow.workloads import generate
from emulation.agents import local_popen
from emulation.assemble import assemble_run
from emulation.errors import EmulationError
from tests.conftest import need, need_tool
from tests.helpers import ROOT, loopback, run_local_agents, xdist_worker_number
from tests.waiting import wait_until
from traffic.agent import Agent
from traffic.result import DIED, FAILED, load_result
from traffic.runspec import (
    RegistrySettings,
    RunSpec,
    SpecError,
    jobs_from_json,
    jobs_to_json,
    load_runspec,
    parse_runspec,
    save_runspec,
)
from traffic.transfer import REFRESH_S, Channel, ChannelRoute, FlowHeader, FlowReceiver, TransferError

_PORTS = itertools.count(52000 + 100 * xdist_worker_number())  # runs of agents take theirs from tests.helpers

#: ioctl: bytes in a TCP socket's send queue not yet sent (linux/sockios.h)
SIOCOUTQNSD = 0x894B

run = run_local_agents


def send_flow(header, ip, port, io_timeout_s=30.0, **sources):
    """One flow over a fresh channel (the agents keep theirs open; one-shot is enough here)."""
    channel = Channel("t", ChannelRoute(header.src, "peer", "127.0.0.1", ip, port), io_timeout_s=io_timeout_s)
    channel.connect(5.0)
    try:
        return channel.send_flow(header, **sources)
    finally:
        channel.close()


def mixed_jobs():
    """Two jobs on three hosts: concurrent flows, odd sizes, a one-byte flow, cross-host notifications."""
    a = Job("a")
    a.add(ComputeTask("c1", "h1", 0.2))
    a.add(FlowTask("f1", "h1", "h2", 1_000_003, ("c1",), "e1"))
    a.add(FlowTask("f2", "h1", "h3", 2_500_000, ("c1",), "e1"))  # in flight together with f1
    a.add(ComputeTask("c2", "h2", 0.1, ("f1",)))
    a.add(ComputeTask("c3", "h3", 0.15, ("f1", "f2")))  # depends on a flow it neither sends nor receives
    a.add(FlowTask("f3", "h3", "h1", 1, ("c3", "c2")))
    a.add(ComputeTask("c4", "h1", 0.05, ("f3",)))
    b = Job("b")
    b.add(ComputeTask("x1", "h2", 0.1))
    b.add(FlowTask("g1", "h2", "h1", 777_777, ("x1",)))
    b.add(ComputeTask("x2", "h1", 0.1, ("g1",)))
    return [a, b]


# ------------------------------------------------------------------------------------------ delivery
def test_every_flow_delivers_exactly_its_bytes(tmp_path):
    jobs = mixed_jobs()
    outcome = run(jobs, tmp_path)
    for job in jobs:
        for flow in job.flows:
            qid = qualified(job.job_id, flow.task_id)
            received = outcome.documents[flow.dst].received[qid]
            sent = outcome.documents[flow.src].sent[qid]
            assert received["received_bytes"] == flow.size_bytes, qid
            assert sent["confirmed_bytes"] == flow.size_bytes, qid
            assert sent["sent_bytes"] == flow.size_bytes, qid
            assert received["src"] == flow.src
    assert all(doc.ok and not doc.pending for doc in outcome.documents.values())


def test_dependencies_and_one_compute_at_a_time(tmp_path):
    jobs = mixed_jobs()
    result = assemble_run(jobs, run(jobs, tmp_path).documents, "none")
    for job in jobs:
        for task in job.tasks.values():
            mine = result.tasks[qualified(job.job_id, task.task_id)]
            assert mine.finish_s >= mine.start_s >= 0
            for dep in task.deps:
                assert mine.start_s >= result.tasks[qualified(job.job_id, dep)].finish_s, (task.task_id, dep)
            if isinstance(task, ComputeTask):
                assert mine.finish_s - mine.start_s == pytest.approx(task.duration_s, abs=0.02)
    by_host = {}
    for qid, task in result.tasks.items():
        if task.type == "compute":
            by_host.setdefault(task.host, []).append((task.start_s, task.finish_s, qid))
    for host, spans in by_host.items():
        spans.sort()
        for (_, end, q1), (start, _, q2) in zip(spans, spans[1:]):
            assert start >= end, f"{host} ran {q1} and {q2} at once"


def test_ready_computes_run_in_job_then_declaration_order(tmp_path):
    """Three computes become ready at once on h2 (one flow releases all): declared order wins."""
    job = Job("t")
    job.add(ComputeTask("go", "h1", 0.05))
    job.add(FlowTask("f", "h1", "h2", 1000, ("go",)))
    job.add(ComputeTask("late", "h2", 0.1, ("f",)))
    job.add(ComputeTask("early", "h2", 0.1, ("f",)))
    job.add(ComputeTask("mid", "h2", 0.1, ("f",)))
    result = assemble_run([job], run([job], tmp_path).documents, "none")
    order = sorted(("late", "early", "mid"), key=lambda t: result.tasks[f"t/{t}"].start_s)
    assert order == ["late", "early", "mid"]


def test_fig2_timing_matches_the_ideal_schedule_on_an_unshaped_network(tmp_path):
    """On loopback flows take milliseconds, so the run must follow the zero-communication schedule."""
    job = generate("fig2", "fig2", ["h1", "h2"], {"link_bytes_per_s": 125_000, "micro_batches": 3,
                                                    "compute_s": 0.3})
    result = assemble_run([job], run([job], tmp_path).documents, "none")
    ideal = ideal_schedule(job)
    for tid, (start, finish) in ideal.items():
        got = result.tasks[qualified("fig2", tid)]
        assert got.start_s == pytest.approx(start, abs=0.05), tid
        assert got.finish_s == pytest.approx(finish, abs=0.06), tid
    assert result.jobs["fig2"].completion_s == pytest.approx(max(f for _, f in ideal.values()), abs=0.06)
    assert all(abs(e.tardiness_s) < 0.05 for e in result.echelonflows.values())


def test_a_job_starts_at_its_arrival_and_completes_from_it(tmp_path):
    early = Job("early")
    early.add(ComputeTask("c", "h1", 0.1))
    late = Job("late", arrival_s=0.8)
    late.add(ComputeTask("c", "h1", 0.1))
    late.add(FlowTask("f", "h1", "h2", 10_000, ("c",)))
    late.add(ComputeTask("d", "h2", 0.1, ("f",)))
    result = assemble_run([early, late], run([early, late], tmp_path).documents, "none")
    assert result.tasks["early/c"].start_s == pytest.approx(0.0, abs=0.05)
    assert result.tasks["late/c"].start_s == pytest.approx(0.8, abs=0.05)
    assert result.jobs["late"].completion_s == pytest.approx(0.2, abs=0.06)  # counted from arrival


def test_an_agent_slow_to_start_delays_t0_instead_of_failing_the_run(tmp_path):
    """One interpreter comes up 4 s late (a loaded machine's start-up, well past what a fixed margin
    gave): the run waits for it, then every agent starts at the one t0 of the start word."""
    job = Job("j")
    job.add(ComputeTask("c", "h1", 0.1))
    job.add(FlowTask("f", "h1", "h2", 10_000, ("c",)))
    job.add(ComputeTask("d", "h2", 0.1, ("f",)))

    def popen(host, argv, log_file):
        delayed = ["sh", "-c", 'sleep 4; exec "$@"', "sh", *argv] if host == "h2" else argv
        return local_popen(host, delayed, log_file)

    started_s = time.time()
    outcome = run([job], tmp_path, popen=popen)
    assert outcome.t0_s > started_s + 4.0  # after the slow one was ready
    assert {doc.t0_s for doc in outcome.documents.values()} == {outcome.t0_s}
    assert all(doc.ok and not doc.pending for doc in outcome.documents.values())
    assert outcome.documents["h2"].tasks["j/d"]["start"] == pytest.approx(0.2, abs=0.1)


# ------------------------------------------------------------------------------------------ failures
def slow_job():
    job = Job("s")
    job.add(ComputeTask("c1", "h1", 0.2))
    job.add(FlowTask("f1", "h1", "h2", 10_000, ("c1",)))
    job.add(ComputeTask("long", "h2", 20.0, ("f1",)))
    job.add(FlowTask("f2", "h2", "h1", 10_000, ("long",)))
    return job


def test_a_killed_agent_fails_the_run_cleanly_and_quickly(tmp_path):
    started = {}

    def popen(host, argv, log_file):
        proc = local_popen(host, argv, log_file)
        started[host] = proc
        return proc

    killed_at = []

    def killer():
        deadline = time.time() + 20
        while time.time() < deadline:
            doc = tmp_path / "out-h2.json"
            if "h2" in started and os.path.exists(tmp_path / "ctl" / "h2.sock") and not doc.exists():
                time.sleep(2.0)  # h2 is inside its 20 s compute by now
                os.kill(started["h2"].pid, signal.SIGKILL)
                killed_at.append(time.monotonic())
                return
            time.sleep(0.05)

    threading.Thread(target=killer, daemon=True).start()
    with pytest.raises(EmulationError, match="agent h2"):
        run([slow_job()], tmp_path, popen=popen)
    # Noticed, not waited out: without the failure the run would go on for the rest of h2's 20 s compute.
    # (A bound of half that holds on a loaded machine and still tells the two apart.)
    assert killed_at and time.monotonic() - killed_at[0] < 10.0
    for proc in started.values():  # every agent it started is gone
        assert proc.poll() is not None


def test_a_peer_that_never_comes_up_fails_within_the_connect_timeout(tmp_path):
    job = slow_job()
    spec = RunSpec(host="h1", hosts_ip=loopback(["h1", "h2"]), jobs=[job], t0_s=time.time() + 0.2,
                   data_port=next(_PORTS), control_dir=str(tmp_path), output_path=str(tmp_path / "out.json"),
                   connect_timeout_s=1.0, confirm_timeout_s=2.0, run_timeout_s=30.0)
    t = time.monotonic()
    result = Agent(spec, log=lambda text: None).run()
    # The connect timeout (1 s) ended it, not the run timeout (30 s): half of that leaves room for a
    # loaded machine and still tells the two apart (the message below names the connect failure).
    assert time.monotonic() - t < spec.run_timeout_s / 2
    assert result.failure.cause == FAILED and result.failure.host == "h1"
    assert "cannot connect to h2" in result.failure.detail  # its channel, opened before t0
    written = json.loads((tmp_path / "out.json").read_text())
    assert written["status"] == "error" and written["failure"]["cause"] == FAILED
    assert load_result(str(tmp_path / "out.json")) == result
    assert not (tmp_path / "h1.sock").exists()  # the agent removed its control socket


def test_a_receiver_that_never_confirms_times_out():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held = []

    def swallow():
        conn, _ = listener.accept()
        held.append(conn)  # reads nothing, confirms nothing

    threading.Thread(target=swallow, daemon=True).start()
    t = time.monotonic()
    with pytest.raises(TransferError, match="stalled"):
        send_flow(FlowHeader("j", "f", "h1", 50_000_000), "127.0.0.1", listener.getsockname()[1],
                  io_timeout_s=1.0)
    assert time.monotonic() - t < 10.0  # without the stall check the send would block for ever
    listener.close()
    for conn in held:
        conn.close()


def test_a_receiver_that_reads_everything_but_never_confirms_times_out():
    """Every byte is taken, so the send completes; the wait for the confirmation line must still end."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held = []

    def drain():
        conn, _ = listener.accept()
        held.append(conn)
        while conn.recv(65536):  # reads until the sender gives up and closes; never replies
            pass

    threading.Thread(target=drain, daemon=True).start()
    t = time.monotonic()
    with pytest.raises(TransferError, match="did not confirm within 1 s"):
        send_flow(FlowHeader("j", "f", "h1", 200_000), "127.0.0.1", listener.getsockname()[1],
                  io_timeout_s=1.0)
    assert 0.9 <= time.monotonic() - t < 10.0  # waited its io_timeout_s, not for ever
    listener.close()
    for conn in held:
        conn.close()


def test_receiver_rejects_bytes_beyond_a_declared_flow():
    """A flow is exactly its declared bytes: whatever follows must be the next flow's header."""
    errors, arrivals = [], []
    receiver = FlowReceiver("127.0.0.1", 0, lambda h: None, arrivals.append, errors.append,
                            io_timeout_s=2.0).start()
    port = receiver.sock.getsockname()[1]
    try:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(FlowHeader("j", "f", "h1", 100).encode() + bytes(100))
            reply = json.loads(sock.makefile().readline())
            assert reply == {"flow": "j/f", "received_bytes": 100,
                             "finish_s": pytest.approx(time.time(), abs=5)}
            sock.sendall(bytes(50))  # not a header
            try:  # then the receiver ends the channel (a reset: it drops 50 unread stray bytes)
                tail = sock.recv(100)
            except ConnectionResetError:
                tail = b""
            assert tail == b""
        deadline = time.monotonic() + 5
        while not errors and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(arrivals) == 1 and errors and "bad magic" in errors[0]
        # and a correct flow right after, on a new channel, is confirmed with its exact count
        result = send_flow(FlowHeader("j", "g", "h1", 123_457), "127.0.0.1", port)
        assert result.received_bytes == 123_457 and arrivals[-1].received_bytes == 123_457
    finally:
        receiver.close()


_LOSSY_CHANNEL = """
import subprocess
from traffic.transfer import Channel, ChannelRoute, FlowHeader, FlowReceiver
subprocess.run(["ip", "link", "set", "lo", "up", "mtu", "1500"], check=True)
# a 20 Mbit/s shaper with a 15 kB queue: a 2 MB flow overflows it and TCP has to retransmit
subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "20mbit", "burst", "20k",
                "limit", "15k"], check=True)
receiver = FlowReceiver("127.0.0.1", 0, lambda h: None, lambda a: None, print).start()
channel = Channel("c1", ChannelRoute("h1", "h2", "127.0.0.1", "127.0.0.1", receiver.sock.getsockname()[1]))
channel.bind()
channel.connect(5.0)
# 64 KB writes: GSO packets larger than the shaper's queue, which it drops (with the default one-segment
# writes the sender's own qdisc refuses the excess locally, and local refusals are never retransmitted)
channel.piece_bytes = 64 * 1024
for name, size in (("lossy", 2_000_000), ("after", 1_000)):
    channel.send_flow(FlowHeader("j", name, "h1", size))
    print(name, *channel.progress())
channel.close()
receiver.close()
"""


def test_progress_counts_each_flows_own_retransmissions():
    """TCP_INFO's retransmissions per flow: the breakdown tells TCP recovering from a slow allocation."""
    need("a network namespace", "" if os.geteuid() == 0 else "needs root")
    unshare, _ = need_tool("unshare"), need_tool("tc")
    out = subprocess.run([unshare, "--net", sys.executable, "-c", _LOSSY_CHANNEL], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lossy, after = (line.split() for line in out.stdout.splitlines())
    assert lossy[:2] == ["lossy", "2000000"] and int(lossy[2]) > 0 and lossy[3:] == ["0", "2000000"]
    # the next flow on the channel starts its own counts (acknowledged, retransmitted, written)
    assert after == ["after", "1000", "0", "0", "1000"]


def test_one_channel_carries_flow_after_flow_with_exact_accounting():
    """Persistent connections: many flows, one handshake; each flow's bytes, times and acks are its own."""
    arrivals, errors = [], []
    receiver = FlowReceiver("127.0.0.1", 0, lambda h: None, arrivals.append, errors.append).start()
    route = ChannelRoute("h1", "h2", "127.0.0.1", "127.0.0.1", receiver.sock.getsockname()[1])
    channel = Channel("c1", route)
    sizes = [1, 65_536, 1_000_003, 0, 250_000]
    try:
        src_port = channel.bind()
        channel.connect(5.0)
        results = []
        for i, size in enumerate(sizes):
            results.append(channel.send_flow(FlowHeader("j", f"f{i}", "h1", size)))
            assert channel.acked_payload() == size  # confirmed: every payload byte was acknowledged
    finally:
        channel.close()
        receiver.close()
    assert not errors
    assert [a.received_bytes for a in arrivals] == sizes == [r.received_bytes for r in results]
    assert {a.src_addr[1] for a in arrivals} == {src_port}  # one connection, one source port
    for result, arrival in zip(results, arrivals):
        assert result.first_byte_s <= arrival.header_s <= arrival.finish_s <= result.confirmed_s
        assert result.finish_s == arrival.finish_s
    for earlier, later in zip(results, results[1:]):
        assert earlier.confirmed_s <= later.first_byte_s


def test_closing_the_receiver_right_after_an_arrival_still_confirms_it():
    """An agent whose last task was that arrival closes its receiver at once; the sender, still waiting
    for the confirmation line, must get it (a run used to fail here: 'closed without a confirmation')."""
    arrived = threading.Event()

    def on_arrival(arrival):
        arrived.set()
        time.sleep(0.2)  # the confirmation goes out only after close() has begun

    receiver = FlowReceiver("127.0.0.1", 0, lambda h: None, on_arrival, lambda e: None).start()
    outcome = {}
    port = receiver.sock.getsockname()[1]
    sender = threading.Thread(target=lambda: outcome.setdefault(
        "result", send_flow(FlowHeader("j", "last", "h1", 10_000), "127.0.0.1", port)))
    sender.start()
    assert arrived.wait(10)
    receiver.close()
    sender.join(10)
    assert outcome["result"].received_bytes == 10_000


def test_a_raised_pacing_rate_takes_effect_within_a_poll_not_after_the_blocked_chunk():
    """Real TCP on loopback: a flow paced at 12.5 KB/s, then unpaced after 0.3 s, must speed up at once.

    The sender used to re-read its pacing rate only between 64 KB chunks: a blocking send of one chunk at
    the floor rate (12.5 KB/s) takes ~5 s, and the tail left in the send buffer after the last chunk (here
    the whole 60 KB flow) kept the rate in force when it was queued until the receiver confirmed.
    """
    arrivals = []
    receiver = FlowReceiver("127.0.0.1", 0, lambda h: None, arrivals.append, lambda e: None).start()
    # Ethernet-sized segments as on the fabric: loopback's 64 KB MSS would make one packet at the floor
    # rate a 5 s pacing gap that no rate change can shorten (the kernel's pacing timer is already armed).
    receiver.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1448)
    started = time.monotonic()

    def pacing():  # the scheduler raises the rate (here: lifts the limit) 0.3 s into the flow
        return 12_500 if time.monotonic() - started < 0.3 else None

    try:
        result = send_flow(FlowHeader("j", "paced", "h1", 60_000), "127.0.0.1",
                           receiver.sock.getsockname()[1], pacing_source=pacing)
        elapsed_s = time.monotonic() - started
    finally:
        receiver.close()
    assert result.received_bytes == 60_000
    assert elapsed_s >= 0.3  # the slow rate really held the flow back (60 KB at 12.5 KB/s = 4.8 s)
    # Not applied while blocked, the slow rate would hold the whole flow: >= 4.8 s.  Kernel pacing took
    # 1.7 s (a departure time set at the slow rate outlives the raise); paced by the sender itself, a rate
    # this slow (under a segment per REFRESH_S) gives way at the next write: 0.31 s here.
    assert elapsed_s < 1.0, f"took {elapsed_s:.2f} s: the raised rate was not applied at once"


def test_rates_under_a_segment_per_refresh_are_paced_by_the_sender_itself():
    """20 KB/s with 1436-byte segments is one segment per 72 ms: the sender writes one each time the rate
    has earned it (the first at once) and leaves the socket's own pacing alone, so no departure time set
    at that rate can hold back a later raise."""
    receiver = FlowReceiver("127.0.0.1", 0, lambda h: None, lambda a: None, lambda e: None).start()
    receiver.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1448)
    route = ChannelRoute("h1", "peer", "127.0.0.1", "127.0.0.1", receiver.sock.getsockname()[1])
    channel = Channel("t", route)
    channel.connect(5.0)
    try:
        started = time.monotonic()
        result = channel.send_flow(FlowHeader("j", "slow", "h1", 30_000), pacing_source=lambda: 20_000)
        elapsed_s = time.monotonic() - started
        assert result.received_bytes == 30_000
        assert channel._refresh.own_rate == 20_000 and channel._refresh.pacing is None
    finally:
        channel.close()
        receiver.close()
    expected_s = (30_000 - channel.piece_bytes) / 20_000  # 1.43 s: every segment but the first waits
    assert expected_s * 0.95 < elapsed_s < expected_s + 0.5, elapsed_s


def test_a_channel_socket_never_holds_more_than_two_unsent_segments():
    """Bytes in a socket cannot be taken back, so the sender keeps at most about two segments unsent: a
    pause or a lowered rate then applies to everything else.  With 64 KB writes a paced flow had up to
    ~96 KB queued in its socket, which a pause could not stop (docs/emulation.md, item 7)."""
    receiver = FlowReceiver("127.0.0.1", 0, lambda h: None, lambda a: None, lambda e: None).start()
    receiver.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1448)  # Ethernet-sized segments
    route = ChannelRoute("h1", "peer", "127.0.0.1", "127.0.0.1", receiver.sock.getsockname()[1])
    channel = Channel("t", route)
    channel.connect(5.0)
    unsent_seen = []
    results = []
    sender = threading.Thread(target=lambda: results.append(channel.send_flow(
        FlowHeader("j", "paced", "h1", 200_000), pacing_source=lambda: 200_000)))
    try:
        sender.start()
        while sender.is_alive():
            unsent = bytearray(4)
            fcntl.ioctl(channel.sock.fileno(), SIOCOUTQNSD, unsent)
            unsent_seen.append(int.from_bytes(unsent, sys.byteorder))
            time.sleep(0.005)
        assert results and results[0].received_bytes == 200_000
    finally:
        channel.close()
        receiver.close()
    assert channel.piece_bytes <= 1448 and len(unsent_seen) > 50  # one segment (the MSS) per write
    assert 0 < max(unsent_seen) <= 2 * channel.piece_bytes, max(unsent_seen)


def test_receiver_refuses_a_flow_that_is_not_expected():
    errors = []
    receiver = FlowReceiver("127.0.0.1", 0, lambda h: "no such flow", lambda a: None, errors.append).start()
    try:
        with pytest.raises(TransferError, match="no such flow"):
            send_flow(FlowHeader("j", "x", "h1", 10), "127.0.0.1", receiver.sock.getsockname()[1])
    finally:
        receiver.close()
    assert errors


# ------------------------------------------------------------------------------------------ bad specs
def good_spec_dict(tmp_path):
    job = slow_job()
    return {"host": "h1", "hosts_ip": loopback(["h1", "h2"]), "jobs": jobs_to_json([job]),
            "t0_s": time.time(), "data_port": 47000, "control_dir": str(tmp_path),
            "output_path": str(tmp_path / "out.json")}


def _registry(**extra):
    return {"registry": dict({"socket_path": "/s", "token_file": "/t"}, **extra)}


def _channels(*entries):
    return {"channels": list(entries)}


_FATTREE_K2 = {"kind": "fattree", "params": {"k": 2}, "rate_bps": 1e7}
_TOP_FIELDS = ("host, hosts_ip, jobs, t0_s, data_port, control_dir, output_path, registry, "
               "connect_timeout_s, confirm_timeout_s, run_timeout_s, scheduler, topology, channels, "
               "congestion_control")


@pytest.mark.parametrize(
    "mutate, message",
    [
        # the spec's own fields, read by echelonflow.fields: one "<field>: <problem>" line each
        (lambda d: d.pop("host"), "host: missing"),
        (lambda d: d.update(host="h9"), "host: 'h9' is not in hosts_ip"),
        (lambda d: d.update(extra=1), f"extra: unknown field (allowed: {_TOP_FIELDS})"),
        (lambda d: d.update(hosts_ip=["h1"]), "hosts_ip: must be an object (host -> IP address), got ['h1']"),
        (lambda d: d["hosts_ip"].update(h2="10.0.0.300"),
         "hosts_ip['h2']: must be an IP address, got '10.0.0.300'"),
        (lambda d: d["hosts_ip"].update(h2=5), "hosts_ip['h2']: must be a non-empty string, got 5"),
        (lambda d: d.update(data_port=70000), "data_port: must be a TCP port between 1 and 65535, got 70000"),
        (lambda d: d.update(data_port=True), "data_port: must be a TCP port between 1 and 65535, got true"),
        (lambda d: d.update(t0_s="soon"), "t0_s: must be 0 or an epoch time in seconds >= 0, got 'soon'"),
        (lambda d: d.update(t0_s=-1), "t0_s: must be 0 or an epoch time in seconds >= 0, got -1"),
        (lambda d: d.update(run_timeout_s=0), "run_timeout_s: must be a number of seconds > 0, got 0"),
        (lambda d: d.update(scheduler=3), "scheduler: must be a string, got 3"),
        (lambda d: d.update(control_dir="/nonexistent/dir"),
         "control_dir: '/nonexistent/dir' is not a directory"),
        (lambda d: d.update(output_path="/nonexistent/out.json"),
         "output_path: the directory of '/nonexistent/out.json' does not exist"),
        # jobs: the trace format's checks
        (lambda d: d.update(jobs=[]), "jobs: must be a non-empty array of jobs in the trace format, got []"),
        (lambda d: d["hosts_ip"].pop("h2"),
         "jobs: job 's': task 'f1': dst: unknown host 'h2' (the topology has h1)"),
        (lambda d: d["jobs"][0]["tasks"][1].update(deps=["nope"]),
         "jobs: job 's': task 'f1': unknown dependency 'nope'"),
        (lambda d: d["jobs"][0]["tasks"][0].update(deps=["long"]),
         "jobs: job 's': task 'c1': dependency cycle (c1 -> long -> f1 -> c1)"),
        (lambda d: d["jobs"][0]["tasks"][1].update(size_bytes=-1),
         "jobs: job 's': task 'f1': size_bytes: must be a whole number of bytes between 1 and 1e+15, got -1"),
        (lambda d: d["jobs"][0]["tasks"][0].update(type="gpu"),
         "jobs: job 's': task 'c1': type: must be one of compute, flow, got 'gpu'"),
        (lambda d: d["jobs"].append(d["jobs"][0]), "jobs: job 's': duplicate job id"),
        (lambda d: d["jobs"][0].update(format="v0"),
         "jobs: job 's': format: unknown field "
         "(allowed: id, tasks, echelons, description, arrival_s, weight)"),
        # registry
        (lambda d: d.update(registry=[1]), "registry: must be an object, got [1]"),
        (lambda d: d.update(registry={"socket_path": "/s"}), "registry.token_file: missing"),
        (lambda d: d.update(_registry(poll=1)),
         "registry.poll: unknown field "
         "(allowed: socket_path, token_file, poll_interval_s, job_prefix, pace, install_wait_s)"),
        (lambda d: d.update(_registry(poll_interval_s=0)),
         "registry.poll_interval_s: must be a number of seconds > 0, got 0"),
        (lambda d: d.update(_registry(job_prefix="a/b")),
         "registry.job_prefix: must not contain '/', got 'a/b'"),
        (lambda d: d.update(_registry(pace="yes")), "registry.pace: must be true or false, got 'yes'"),
        (lambda d: d.update(_registry(install_wait_s=-1)),
         "registry.install_wait_s: must be a number of seconds between 0 and 60, got -1"),
        # topology
        (lambda d: d.update(topology={"kind": "ring", "rate_bps": 1e7}),
         f"topology: unknown topology 'ring'; choose one of {', '.join(sorted(BUILDERS))}"),
        (lambda d: d.update(topology={"kind": "dumbbell"}), "topology: rate_bps: missing"),
        (lambda d: (d["hosts_ip"].update(h9="127.0.0.99"), d.update(topology=_FATTREE_K2)),
         "hosts_ip['h9']: is not a host of the topology fattree2"),
        # channels
        (lambda d: d.update(channels={"dst": "h2"}),
         "channels: must be an array of {dst, path, count} objects, got {'dst': 'h2'}"),
        (lambda d: d.update(_channels({"dst": "h2", "path": None})), "channels[0].count: missing"),
        (lambda d: d.update(_channels({"dst": "h2", "path": None, "count": 65})),
         "channels[0].count: must be an integer between 1 and 64, got 65"),
        (lambda d: d.update(_channels({"dst": "h2", "path": ["h1", 3], "count": 1})),
         "channels[0].path[1]: must be a non-empty string, got 3"),
        (lambda d: d.update(_channels({"dst": "h2", "path": None, "count": 1},
                                      {"dst": "h1", "path": None, "count": 1})),
         "channels[1].dst: must be another host of hosts_ip, got 'h1'"),
    ],
)
def test_bad_spec_is_rejected_with_one_line_naming_the_field(tmp_path, mutate, message):
    data = good_spec_dict(tmp_path)
    mutate(data)
    with pytest.raises(SpecError) as refused:
        parse_runspec(data, "spec.json")
    assert str(refused.value) == f"spec.json: {message}"


def test_a_spec_that_is_not_an_object_or_whose_control_socket_path_is_too_long_is_rejected(tmp_path):
    with pytest.raises(SpecError, match=r"^spec.json: must be a JSON object, got \[1\]$"):
        parse_runspec([1], "spec.json")
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    data = dict(good_spec_dict(tmp_path), control_dir=str(deep))
    with pytest.raises(SpecError) as refused:
        parse_runspec(data, "spec.json")
    assert str(refused.value) == f"spec.json: control_dir: {str(deep)!r} is too long for a Unix socket path"


def test_a_full_spec_round_trips_through_its_file(tmp_path):
    """Every field the orchestrator writes is read back as it was (defaults filled in)."""
    data = dict(good_spec_dict(tmp_path), scheduler="echelon", topology=_FATTREE_K2, connect_timeout_s=3,
                congestion_control="cubic", **_registry(poll_interval_s=0.05, job_prefix="r1-"),
                **_channels({"dst": "h2", "path": ["h1", "e0", "h2"], "count": 2}))
    spec = parse_runspec(data, "spec.json")
    assert spec.registry == RegistrySettings("/s", "/t", 0.05, "r1-", True, 0.5)
    assert (spec.connect_timeout_s, spec.confirm_timeout_s, spec.scheduler) == (3.0, 30.0, "echelon")
    assert spec.congestion_control == "cubic"
    assert spec.topology().name == "fattree2" and spec.channels == data["channels"]
    save_runspec(spec, str(tmp_path / "spec.json"))
    again = load_runspec(str(tmp_path / "spec.json"))
    assert again.to_json_dict() == spec.to_json_dict()
    assert [jobs_to_json([job]) for job in again.jobs] == [jobs_to_json([job]) for job in spec.jobs]


def test_agent_process_with_bad_spec_exits_2_with_one_line(tmp_path):
    path = tmp_path / "spec.json"
    data = good_spec_dict(tmp_path)
    data["jobs"][0]["tasks"][1]["deps"] = ["nope"]
    path.write_text(json.dumps(data))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    for spec_path, needle in ((path, "unknown dependency 'nope'"), (garbage, "not valid JSON"),
                              (tmp_path / "missing.json", "missing.json: cannot read")):
        proc = subprocess.run([sys.executable, "-m", "traffic.agent", str(spec_path)], cwd=ROOT,
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2
        assert needle in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_job_serialisation_round_trips():
    gpipe = generate("gpipe", "g", ["h1", "h2", "h3"],
                     {"micro_batches": 3, "activation_bytes": 1000, "forward_s": 0.1, "backward_s": 0.2})
    for job in [*mixed_jobs(), gpipe]:
        (back,) = jobs_from_json(json.loads(json.dumps(jobs_to_json([job]))), "test", sorted(job.hosts))
        assert list(back.tasks) == list(job.tasks)
        assert back.echelon_kinds == job.echelon_kinds
        assert back.explicit_offsets_s == job.explicit_offsets_s
        for tid, task in job.tasks.items():
            copy = back.tasks[tid]
            assert type(copy) is type(task) and copy.deps == task.deps
            if isinstance(task, FlowTask):
                assert (copy.src, copy.dst, copy.size_bytes) == (task.src, task.dst, task.size_bytes)
                assert copy.echelon_id == task.echelon_id
            else:
                assert (copy.host, copy.duration_s) == (task.host, task.duration_s)


# ------------------------------------------------------------------------------------------ registry
def test_agents_declare_start_and_finish_every_flow_in_the_registry(tmp_path, registry_server):
    from controller.client import EchelonClient
    from echelonflow.echelon import echelons_of
    sock_path, token = registry_server
    client = EchelonClient(socket_path=sock_path, token_file=token)
    client.set_scheduler("echelon")
    jobs = mixed_jobs()
    jobs[1].weight = 2.5
    work = tmp_path / "w"
    work.mkdir()
    outcome = run(jobs, work, registry=RegistrySettings(sock_path, token, 0.05, "r1-"))
    assert {j["job_id"]: j["weight"] for j in client.jobs() if j["job_id"].startswith("r1-")} == {
        "r1-a": 1.0, "r1-b": 2.5}
    for job in jobs:
        flows = {f["flow_id"]: f for f in client.flows("r1-" + job.job_id)}
        nonzero = [f for f in job.flows if f.size_bytes > 0]
        assert sorted(flows) == sorted(f.task_id for f in nonzero)  # zero-byte flows are not declared
        for flow in nonzero:
            record = flows[flow.task_id]
            sent = outcome.documents[flow.src].sent[qualified(job.job_id, flow.task_id)]
            assert record["state"] == "finished" and record["bytes_sent"] == flow.size_bytes
            assert record["src_port"] == sent["src_port"] and record["dst_port"] == sent["dst_port"]
            assert record["start_s"] == pytest.approx(outcome.t0_s + sent["start"], abs=1e-3)
        for spec in echelons_of(job).values():
            for fid in spec.flow_ids:
                if job.tasks[fid].size_bytes > 0:
                    assert flows[fid]["offset_s"] == pytest.approx(spec.offsets_s[fid])
    # the same jobs again under another prefix: no clash with the finished first run
    work2 = tmp_path / "w2"
    work2.mkdir()
    run(jobs, work2, registry=RegistrySettings(sock_path, token, 0.05, "r2-"))
    assert {j["job_id"] for j in client.jobs()} >= {"r1-a", "r1-b", "r2-a", "r2-b"}
    client.close()


def _one_flow_on_a_registered_channel(registry_server, job_id: str, src_port: int,
                                      path_rate_bps: float | None = None):
    """A RegistryLink to the real registry (scheduler echelon) with job ``job_id`` declared (one 1 MB flow
    ``f`` h1 -> h16) and a channel for it registered, never connected (no fabric here).  The poll
    interval is far beyond the tests: whatever the link learns comes from the start answer."""
    from controller.client import EchelonClient
    from traffic.registry_link import RegistryLink
    sock_path, token = registry_server
    with EchelonClient(socket_path=sock_path, token_file=token) as client:
        client.set_scheduler("echelon")
    job = Job(job_id)
    job.add(FlowTask("f", "h1", "h16", 1_000_000))
    link = RegistryLink(RegistrySettings(sock_path, token, 600.0, f"{job_id}-", True, 0.5),
                        log=lambda text: None)
    link.declare_job(job)
    channel = Channel(f"{job_id}.1", ChannelRoute("h1", "h16", "127.0.0.1", "127.0.0.2", 47000,
                                                  path_rate_bps=path_rate_bps))
    channel.src_port = src_port
    link.register_channel(channel)
    return link, job, channel


def test_a_started_flow_gets_its_dscp_and_pacing_from_the_start_answer(tmp_path, registry_server):
    """No poll needed: the allocation the arrival's round decided comes back with the (background)
    start call."""
    link, job, channel = _one_flow_on_a_registered_channel(registry_server, "solo", 40001)
    try:
        idle = link.dscp("solo", "f")
        assert link.pacing_bytes_per_s("solo", "f") is None
        link.flow_started(job, job.tasks["f"], channel, time.time())  # reported in the background
        wait_until(lambda: link.dscp("solo", "f") != idle, 10, "the start answer's class applied")
        dscp, pacing = link.dscp("solo", "f"), link.pacing_bytes_per_s("solo", "f")
    finally:
        link.close()
    assert idle == 24  # an idle channel waits in the last of 4 classes (CS3)
    assert dscp == 8  # alone: the most urgent scheduled class, queue 1 (CS1)
    assert pacing == pytest.approx(1e7 / 8, rel=0.01)  # alone on a 10 Mbit/s path: the line rate


def test_until_its_first_allocation_a_started_flow_is_paced_at_its_path_rate(tmp_path, registry_server):
    """Between its start and the start answer a flow goes as it would alone on its path, never unpaced:
    unpaced, a new flow put its whole congestion window into the top class before the scheduler had
    placed it (docs/emulation.md, "The allocation delivered", item 10)."""
    link, job, channel = _one_flow_on_a_registered_channel(registry_server, "lone", 40002, path_rate_bps=4e6)
    try:
        with link.connection.lock:  # the background start report cannot reach the registry yet
            link.flow_started(job, job.tasks["f"], channel, time.time())
            time.sleep(0.1)
            before = link.pacing_bytes_per_s("lone", "f")
        wait_until(lambda: link.pacing_bytes_per_s("lone", "f") != before, 10,
                   "the start answer's rate applied")
        after = link.pacing_bytes_per_s("lone", "f")
    finally:
        link.close()
    assert before == 4e6 / 8
    assert after == pytest.approx(1e7 / 8, rel=0.01)  # the allocation: alone on a 10 Mbit/s path


def test_a_job_the_trace_format_cannot_carry_fails_before_any_agent_starts(tmp_path):
    """Run-specs carry jobs in the trace format, which has no zero-byte flows: refuse up front."""
    job = Job("z")
    job.add(ComputeTask("c", "h1", 0.01))
    job.add(FlowTask("f", "h1", "h2", 0, ("c",)))
    with pytest.raises(EmulationError,
                       match=r"size_bytes: must be a whole number of bytes between 1 and 1e\+15, got 0"):
        run([job], tmp_path)
    assert os.listdir(tmp_path) == []  # no spec written, no agent started


def test_an_unreachable_registry_fails_the_run_cleanly(tmp_path):
    (tmp_path / "token").write_text("x")
    t = time.monotonic()
    with pytest.raises(EmulationError, match="unreachable"):
        run([slow_job()], tmp_path,
            registry=RegistrySettings(str(tmp_path / "none.sock"), str(tmp_path / "token")))
    assert time.monotonic() - t < 20.0  # before slow_job's 20 s compute, let alone the run timeout


def test_a_dead_agent_fails_only_its_job_and_leaves_nothing_in_the_registry(tmp_path, registry_server):
    """kill -9 of one agent: its job fails with one line naming the death, the other job completes,
    and the registry holds no unfinished flow of the failed job and no channel of the dead agent."""
    from controller.client import EchelonClient
    from traffic.runspec import RegistrySettings

    sock_path, token = registry_server
    client = EchelonClient(socket_path=sock_path, token_file=token)
    client.set_scheduler("echelon")
    doomed = Job("a")
    doomed.add(ComputeTask("c1", "h1", 0.1))
    doomed.add(FlowTask("f1", "h1", "h2", 100_000, ("c1",)))
    doomed.add(ComputeTask("long", "h2", 20.0, ("f1",)))  # h2 is killed in here
    doomed.add(FlowTask("f2", "h2", "h1", 100_000, ("long",)))
    other = Job("b")
    for i in range(4):  # ~4 s of ping-pong between h3 and h4, on past the kill
        other.add(ComputeTask(f"c{i}", "h3" if i % 2 == 0 else "h4", 0.8, (f"g{i - 1}",) if i else ()))
        other.add(FlowTask(f"g{i}", "h3" if i % 2 == 0 else "h4", "h4" if i % 2 == 0 else "h3", 50_000,
                           (f"c{i}",)))
    started = time.monotonic()
    outcome = run([doomed, other], tmp_path, registry=RegistrySettings(sock_path, token, 0.05, "k-"),
                  kill_agents={"h2": 1.5})
    elapsed_s = time.monotonic() - started
    assert list(outcome.failed_jobs) == ["a"]
    death = outcome.failed_jobs["a"]
    assert (death.cause, death.host) == (DIED, "h2")
    assert re.fullmatch(r"agent h2 died \(killed by SIGKILL\) 1\.\d s after t0", death.line())
    assert elapsed_s < 15.0  # not waited out: h2's compute alone would take 20 s
    assert "h2" not in outcome.documents
    assert outcome.documents["h1"].ok and outcome.documents["h1"].failed_jobs == {"a": death.line()}
    result = assemble_run([doomed, other], outcome.documents, "echelon", failed_jobs=outcome.failed_jobs)
    assert list(result.jobs) == ["b"] and result.failed_jobs == {"a": death.line()}
    assert result.to_json_dict()["failed_jobs"] == {"a": death.line()}
    states = {f["flow_id"]: f["state"] for f in client.flows("k-a")}
    assert states == {"f1": "finished", "f2": "aborted"}
    assert {f["state"] for f in client.flows("k-b")} == {"finished"}
    assert client.flows(state="active") == []
    assert [c for c in client.channels() if c["src"] == "h2"] == []
    client.close()


def test_a_held_flow_writes_nothing_and_keeps_its_marking_until_released():
    """A paused flow under ``hold_paused``: its sender writes no payload and leaves IP_TOS as it was (its
    packets on the wire drain in the class they were sent in); once released it sends every byte."""
    receiver = FlowReceiver("127.0.0.1", 0, lambda h: None, lambda a: None, lambda e: None).start()
    held, tos = [True], [0x20]
    route = ChannelRoute("h1", "peer", "127.0.0.1", "127.0.0.1", receiver.sock.getsockname()[1])
    channel = Channel("t", route)
    channel.connect(5.0)
    channel.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x20)
    header = FlowHeader("j", "held", "h1", 3_000_000)
    results = []
    sender = threading.Thread(target=lambda: results.append(channel.send_flow(
        header, tos_source=lambda: tos[0], hold_source=lambda: held[0])))
    try:
        sender.start()
        tos[0] = 0x60  # the scheduler's class for it changes while it is held: not applied yet
        # the sender thread writes the header first (when it gets to run), then holds: wait for the
        # header, then watch the hold for many of its re-checks (every REFRESH_S) before judging it
        wait_until(lambda: channel._written == len(header.encode()), 10, "the header written")
        time.sleep(20 * REFRESH_S)
        assert channel._written == len(header.encode())  # the header only
        assert channel.sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == 0x20
        held[0] = False
        sender.join(10.0)
        assert results and results[0].received_bytes == 3_000_000
        assert channel.sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == 0x60
    finally:
        held[0] = False
        channel.close()
        receiver.close()
