"""Nothing lost, no traceback: the emulation survives a failed fabric start, keeps finished scheduler runs
when it dies or is interrupted, and the controller-reachability check cannot crash on odd bytes."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from tests.helpers import ROOT, echelon_argv, echelon_env
from tests.waiting import wait_until

# The first bytes an OpenFlow 1.3 controller sends (HELLO) plus bytes that are not UTF-8 at all:
# Mininet's telnet-based check decoded them as text and raised UnicodeDecodeError.
ODD_BYTES = bytes([0x04, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x01,
                   0xFF, 0xFE, 0x80, 0xC3, 0x28, 0xA0, 0xA1, 0xE2])


class _OddListener:
    """A TCP listener on loopback that greets every connection with ``ODD_BYTES`` and closes it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.sendall(ODD_BYTES * 64)

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() above
        self.sock.close()
        self._thread.join(timeout=5)


@pytest.mark.fabric
def test_controller_reachability_check_survives_binary_greetings(require_fabric):
    from mininet.node import Node

    from topologies.fabric import _controller_class, controller_listening

    listener = _OddListener()
    try:
        assert controller_listening("127.0.0.1", listener.port)
        for i in range(10):
            node = _controller_class()(f"c{i}", ip="127.0.0.1", port=listener.port)  # checks on creation
            Node.terminate(node)
        # every construction really connected; the listener's thread counts an accepted connection a
        # moment after the connecting side returned, so wait for the count, do not read it once
        wait_until(lambda: listener.accepted >= 11, 5, "the listener counted 11 connections")
    finally:
        listener.close()
    with socket.socket() as unused:  # bound, never listening: connections are refused
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]
        assert not controller_listening("127.0.0.1", closed)
        node = _controller_class()("c-absent", ip="127.0.0.1", port=closed)  # warns, does not raise
        Node.terminate(node)


# ------------------------------------------------------------------------------------------ emulation
def _nothing_left_of(tag: str) -> None:
    from topologies import ovs

    assert not ovs.bridges_owned(tag) and not ovs.rows_owned("QoS", tag) and not ovs.rows_owned("Queue", tag)


def _fingerprint(scenario) -> str:
    """Everything a scenario says, as text: its topology (links with their rates and ports), its jobs
    (as traces), its events and schedulers."""
    from echelonflow.trace import job_to_trace

    topology = scenario.topology
    return json.dumps({
        "topology": [topology.name, topology.kind, topology.params, topology.rate_bps, topology.mtu_bytes,
                     sorted((a, b, data["rate_bps"], sorted(data["ports"].items()))
                            for a, b, data in topology.graph.edges(data=True))],
        "jobs": [job_to_trace(job) for job in scenario.jobs], "schedulers": scenario.schedulers,
        "events": [event.to_json() for event in scenario.events], "name": scenario.name,
    }, sort_keys=True)


#: A job of about 3 s on two hosts at 10 Mbit/s (compute, one 3 MB flow, compute): for the tests of what
#: survives a failure, where the run's length proves nothing and fig2's 8 s would only add time.
SHORT_JOB = {"jobs": [{"id": "short", "tasks": [
    {"id": "c0", "type": "compute", "host": "h1", "duration_s": 0.5},
    {"id": "f", "type": "flow", "src": "h1", "dst": "h2", "size_bytes": 3_000_000, "deps": ["c0"]},
    {"id": "c1", "type": "compute", "host": "h2", "duration_s": 0.3, "deps": ["f"]}]}]}


def _short_scenario(tmp_path) -> str:
    """The path of a scenario running ``SHORT_JOB`` under fair and echelon."""
    (tmp_path / "short-jobs.json").write_text(json.dumps(SHORT_JOB))
    scenario = {"name": "short", "topology": {"kind": "two_hosts", "rate_mbps": 10},
                "jobs": [{"trace": "short-jobs.json"}], "schedulers": ["fair", "echelon"]}
    (tmp_path / "short.json").write_text(json.dumps(scenario))
    return str(tmp_path / "short.json")


def _pids_in(text: str) -> list[int]:
    return [int(p) for p in re.findall(r"\d+", text.split("pids", 1)[1])]


@pytest.mark.fabric
def test_a_fabric_start_that_fails_is_retried_once(require_fabric, tmp_path):
    """The controller dies while the fabric comes up (killed by pid here): the switches never connect,
    the start fails with one line, everything is torn down, and the second attempt runs the job."""
    from echelonflow.scenario import load_scenario
    from echelonflow.schedulers import get_scheduler
    from emulation.phase import Simulated
    from emulation.run import emulate_scheduler
    from emulation.settings import EmulationSettings
    from simulator.engine import simulate

    scenario = load_scenario(_short_scenario(tmp_path))
    simulated_s = simulate(scenario.topology, scenario.jobs, get_scheduler("fair")).jobs["short"].completion_s
    lines: list[str] = []
    controller_pids: list[int] = []

    def progress(text: str) -> None:
        lines.append(text)
        if "controller up (pid" in text:
            controller_pids.append(int(re.search(r"pid (\d+)", text).group(1)))
        if "starting fabric" in text and sum("starting fabric" in line for line in lines) == 1:
            os.kill(controller_pids[-1], signal.SIGKILL)

    settings = EmulationSettings(fabric_connect_timeout_s=5.0, logs_dir=str(tmp_path))
    result, _failures = emulate_scheduler(scenario.topology, scenario.jobs, "fair",
                                          Simulated({"short": simulated_s}), settings, progress)
    retried = [line for line in lines if "retrying once" in line]
    assert len(retried) == 1 and "fabric start failed (" in retried[0], lines
    assert "did not connect to the controller" in retried[0] and "\n" not in retried[0]
    assert sum("starting fabric" in line for line in lines) == 2 and len(controller_pids) == 2
    assert 0.9 * simulated_s < result.jobs["short"].completion_s < 1.5 * simulated_s, simulated_s
    assert result.trusted is not None and "together" in result.fidelity_monitor["rounds"]
    _nothing_left_of(f"emu{os.getpid()}-fair")


@pytest.mark.fabric
def test_a_run_that_dies_leaves_its_finished_runs_marked_partial(require_fabric, tmp_path, capsys):
    """fair finishes; under echelon an agent is killed mid-run: one error line, no traceback, and the run
    folder holds fair's run with a status saying the folder is partial and why.  fig2 here, not a
    shorter job: fair's run, played to the end, is also the suite's check that plain TCP on the fabric
    lands within 10 % of its simulation."""
    from echelonflow.scenario import load_scenario
    from emulation.errors import EmulationError
    from emulation.experiment import EmulationRequest, emulate_and_report
    from reports.runfolder import load_run_folder, read_status

    killed: list[int] = []

    def progress(text: str) -> None:
        if text.startswith("[echelon] together:") and "agents started" in text and not killed:
            killed.append(_pids_in(text)[0])
        if text.startswith("[echelon] together: agents ready") and killed:
            time.sleep(1.0)
            os.kill(killed[0], signal.SIGKILL)

    run_dir = tmp_path / "run"
    scenario = load_scenario("fig2")
    before = _fingerprint(scenario)
    request = EmulationRequest(["fair", "echelon"], out=str(run_dir), plots=False)
    with pytest.raises(EmulationError) as failed:  # raised, for the command line to print and exit 1
        emulate_and_report(scenario, request, progress=progress)
    # the caller's scenario is never changed: fig2's idealised links (no MTU) are given real frames in
    # the emulation's own copy, not in this one
    assert scenario.topology.mtu_bytes is None and _fingerprint(scenario) == before
    message = str(failed.value)
    assert "\n" not in message and "under echelon failed" in message and "marked partial" in message
    assert "error" not in capsys.readouterr().err  # the library prints no error line of its own
    status = read_status(str(run_dir))
    assert status["complete"] is False and (status["runs_done"], status["runs_planned"]) == (1, 2)
    # the killed agent's job is the only job: the run fails, naming the agent and how it died
    assert "under echelon failed: every job failed: job fig2 failed: agent h" in status["reason"]
    assert "died (killed by SIGKILL)" in status["reason"]
    primary, _others = load_run_folder(str(run_dir))
    assert [run.scheduler for run in primary.runs] == ["fair"]
    # plain TCP on the fabric near its simulation: the fidelity check of fair's fig2 (tests/test_emulate.py
    # judges coflow and echelon; docs/testing.md)
    simulated = json.loads((run_dir / "results-simulate.json").read_text())["runs"]
    (fair_s,) = [run["jobs"]["fig2"]["completion_s"] for run in simulated if run["scheduler"] == "fair"]
    emulated_s = primary.runs[0].jobs["fig2"].completion_s
    assert abs(emulated_s / fair_s - 1) <= 0.10, f"fair: emulated {emulated_s:.2f} s, simulated {fair_s:.2f}"
    assert (run_dir / "results.csv").exists() and (run_dir / "fidelity.md").exists()
    for scheduler in ("fair", "echelon"):
        _nothing_left_of(f"emu{os.getpid()}-{scheduler}")


@pytest.mark.fabric
def test_ctrl_c_keeps_the_finished_runs_and_says_partial(require_fabric, tmp_path):
    """``echelon emulate`` interrupted (SIGINT) under the second scheduler: exit 130 without a
    traceback, everything torn down, and the first scheduler's run in the folder, marked partial."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(echelon_argv("emulate", _short_scenario(tmp_path), "--no-plots", "--out",
                                         str(run_dir)),
                            cwd=ROOT, env=echelon_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "[echelon] together: agents ready" in line:
                time.sleep(1.0)
                proc.send_signal(signal.SIGINT)
                break
        rest = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(seen) + (rest or "")
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "interrupted" in err
    from reports.runfolder import load_run_folder, read_status

    status = read_status(str(run_dir))
    assert status["complete"] is False and status["reason"] == "interrupted (Ctrl-C)"
    assert status["runs_done"] == 1
    assert [run.scheduler for run in load_run_folder(str(run_dir))[0].runs] == ["fair"]
    for scheduler in ("fair", "echelon"):
        _nothing_left_of(f"emu{proc.pid}-{scheduler}")
