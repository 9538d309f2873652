"""Emulation on the real fabric: Mininet hosts, Open vSwitch switches, the controller, TCP agents
(under the clairvoyant schedulers and under ``echelon-online``, which learns the flows' sizes).

Everything here is real: agents run inside Mininet hosts' namespaces and move bytes through shaped OVS
ports; the controller routes them.  Needs root, Open vSwitch and Mininet (``require_fabric``).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import threading
import time

import pytest

from echelonflow.model import ComputeTask, FlowTask, Job, qualified
from echelonflow.results import EMULATION_RUN_KEYS
from emulation.agents import fabric_popen, run_agents
from emulation.assemble import assemble_run
from emulation.errors import EmulationError
from reports.runfolder import EXTRA_KEYS
from tests.fabric_helpers import dumbbell_with_controller
from tests.helpers import run_echelon
from traffic.runspec import RunSpec

pytestmark = pytest.mark.fabric
RATE_BPS = 20e6


@pytest.fixture(scope="module")
def fabric(require_fabric):
    """A dumbbell (h1 h2 | h3 h4) at 20 Mbit/s with the project's controller, shared by this module's
    tests that need a fabric up (``state.topo``, ``state.fabric``, ``state.ctl``); a test that changes the
    controller's scheduler puts it back."""
    with dumbbell_with_controller(RATE_BPS) as state:
        yield state


def host_ips(state) -> dict[str, str]:
    return {h: state.topo.graph.nodes[h]["ip"] for h in state.topo.hosts}


def cross_jobs():
    """Flows across the bottleneck and within a side, concurrent, with cross-host dependencies."""
    a = Job("a")
    a.add(ComputeTask("c1", "h1", 0.2))
    a.add(FlowTask("f1", "h1", "h3", 1_000_003, ("c1",), "e1"))
    a.add(FlowTask("f2", "h1", "h2", 750_000, ("c1",), "e1"))
    a.add(ComputeTask("c2", "h4", 0.1, ("f1", "f2")))  # h4 hears about flows it does not touch
    a.add(FlowTask("f3", "h4", "h2", 500_001, ("c2",)))
    a.add(ComputeTask("c3", "h2", 0.1, ("f3",)))
    b = Job("b")
    b.add(ComputeTask("x1", "h3", 0.1))
    b.add(FlowTask("g1", "h3", "h1", 600_000, ("x1",)))
    b.add(ComputeTask("x2", "h1", 0.1, ("g1",)))
    return [a, b]


# Runs first: it starts its own fabric in a subprocess, which needs the fabric lock that the module
# fixture below holds from its first use until the end of the module.
def test_emulate_fig2_reproduces_the_paper_within_10_percent(require_fabric, tmp_path):
    """Fig. 2 under coflow and echelon, each within 10 % of its simulation and echelon first, on a fabric
    built by Mininet's cluster mode on a cluster of localhost (``MininetCluster``, its remote-capable node
    and link classes): the whole system (controller, agents, real TCP) lands there as it does on the plain
    fabric (docs/emulation.md, "Beyond one machine"), so one emulation checks both.  The plain fabric's
    fidelity is judged by the fsdp-ps sibling below (echelon, k=4) and by fair's fig2 in
    test_emulate_robust.py; a server other than localhost is refused with one line."""
    out_dir = tmp_path / "run"
    emu = run_echelon("emulate", "fig2", "--scheduler", "coflow", "--scheduler", "echelon", "--json",
                      "--cluster", "localhost", "--out", str(out_dir), timeout_s=900)
    assert emu.returncode == 0, emu.stderr[-2000:]
    # the emulation's document keeps its per-flow records; the simulator's has them on request
    sim = run_echelon("simulate", "fig2", "--scheduler", "coflow", "--scheduler", "echelon", "--json",
                      "--per-flow", timeout_s=120)
    emulated, simulated = json.loads(emu.stdout), json.loads(sim.stdout)
    assert emulated["mode"] == "emulate" and simulated["mode"] == "simulate"
    # same keys, same ids; an emulation adds its own keys (docs/results-format.md)
    shared = {k: v for k, v in emulated.items() if k not in EXTRA_KEYS}
    shared["runs"] = [{k: v for k, v in run.items() if k not in EMULATION_RUN_KEYS}
                      for run in emulated["runs"]]
    assert _shape({**shared, "mode": 0}) == _shape({**simulated, "mode": 0})
    assert emulated["status"]["complete"] and all(isinstance(r["trusted"], bool) for r in emulated["runs"])
    assert set(emulated["summary"]) == {"coflow", "echelon"} and emulated["fidelity"]["gains"]
    emu_s = {r["scheduler"]: r["jobs"]["fig2"]["completion_s"] for r in emulated["runs"]}
    sim_s = {r["scheduler"]: r["jobs"]["fig2"]["completion_s"] for r in simulated["runs"]}
    for name, value in emu_s.items():
        gap = value / sim_s[name] - 1
        assert abs(gap) <= 0.10, f"{name}: emulated {value:.2f} s vs simulated {sim_s[name]:.2f} s"
    # The paper's order for the schedulers the controller enforces.  Plain TCP ("fair") is not ordered:
    # in this kernel's FIFO queues (no fair-queueing qdisc) it serialises Fig. 2's flows rather than
    # sharing max-min, landing near echelon's 8 s (docs/emulation.md, "What plain TCP does").  Its run
    # on the fabric, held within 10 % of its simulation, is test_emulate_robust.py's
    # test_a_run_that_dies_leaves_its_finished_runs_marked_partial, which runs fig2 under fair to the end.
    assert emu_s["echelon"] < emu_s["coflow"] and emu_s["echelon"] <= 8.0 * 1.10, emu_s
    for name in ("results.json", "results-simulate.json", "results.csv", "jct.png", "fidelity.md",
                 "fidelity.png", "timeline-emulate-echelon.png", "timeline-simulate-echelon.png"):
        assert (out_dir / name).exists(), name
    assert json.loads((out_dir / "results.json").read_text()) == emulated
    assert "emulated vs simulated" in emu.stderr or "scheduler echelon" in emu.stderr  # progress shown
    bad = run_echelon("emulate", "fig2", "--cluster", "localhost,server2", timeout_s=120)
    assert bad.returncode == 2 and "only localhost is supported, not server2" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


# Also before the module fixture (its own fabric in a subprocess).
def test_emulate_fattree_fsdp_ps_echelon_lands_near_its_simulation(require_fabric, tmp_path):
    """Echelon on the k=4 fat-tree scenario, judged as every emulation number here on the median of three
    runs: each job and the objective within 12 % of the simulation (17.55 s simulated; three runs on an
    idle machine 2026-12-05: 17.95, 18.06, 19.47 s; one run in a CI clone took 20.23 s, so one run is
    not a measurement).  The default suite's share of the reference test below, which also runs coflow
    three times to judge the gain; that echelon beats coflow on the fabric is checked here on fig2."""
    emu = run_echelon("emulate", "fattree-fsdp-ps", "--scheduler", "echelon",
                      "--repeat", "3", "--no-alone", "--no-plots", "--timing-noise-ms", "0", "--json",
                      "--out", str(tmp_path / "run"), timeout_s=1200)
    assert emu.returncode == 0, emu.stderr[-2000:]
    runs = json.loads(emu.stdout)["runs"]
    # the emulation's own simulation of the scenario: `echelon simulate`'s numbers (no timing noise asked)
    simulate_doc = json.loads((tmp_path / "run" / "results-simulate.json").read_text())
    (simulated,) = simulate_doc["runs"]
    assert simulated["scheduler"] == "echelon" and "timing_noise" not in simulate_doc, sorted(simulate_doc)
    assert len(runs) == 3 and all(sorted(r["jobs"]) == ["fsdp", "ps"] for r in runs), runs
    pairs = [(job, statistics.median(r["jobs"][job]["completion_s"] for r in runs),
              simulated["jobs"][job]["completion_s"]) for job in simulated["jobs"]]
    pairs.append(("objective", statistics.median(r["objective_s"] for r in runs), simulated["objective_s"]))
    for what, got, expected in pairs:
        assert abs(got / expected - 1) <= 0.12, f"echelon {what}: median {got:.2f} s vs {expected:.2f} s"


# Also before the module fixture (its own fabric in a subprocess).
@pytest.mark.reference
def test_emulate_fattree_fsdp_ps_keeps_echelons_gain_over_coflow(require_fabric, tmp_path):
    """The central claim on the k=4 fat-tree, judged like every emulation number here on the median of
    three runs per scheduler: echelon's objective (sum of EchelonFlow tardiness) and FSDP job beat
    coflow's on the fabric as in the simulator (objective 17.55 against 18.75 s, FSDP 9.97 against
    10.68 s); echelon's jobs and objective, and coflow's PS job, land within 12 % of their simulation.
    Coflow's FSDP is bimodal on the wire: 11.0-11.2 s (near its simulation) or 11.7-12.3 s, when a PS
    push a few milliseconds off its fluid self meets the FSDP step that Varys's spare-capacity split
    re-rates every 0.5 s; 4 of 8 runs here took the slow branch (11.04-12.30 s in all, +3 % to +15 %),
    which the simulation does not take even under 50 ms of timing noise (docs/results.md, "The
    scheduler on the fabric").  So coflow's FSDP median is held within 18 % of its simulation, an open
    fidelity gap of the baseline, not of echelon."""
    emu = run_echelon("emulate", "fattree-fsdp-ps", "--scheduler", "coflow",
                      "--scheduler", "echelon", "--repeat", "3", "--no-alone", "--no-plots",
                      "--timing-noise-ms", "0", "--json", "--out", str(tmp_path / "run"), timeout_s=1800)
    assert emu.returncode == 0, emu.stderr[-2000:]
    sim = run_echelon("simulate", "fattree-fsdp-ps", "--scheduler", "coflow",
                      "--scheduler", "echelon", "--json", timeout_s=120)
    assert sim.returncode == 0, sim.stderr[-2000:]
    simulated = {r["scheduler"]: r for r in json.loads(sim.stdout)["runs"]}
    repeats: dict[str, list[dict]] = {}
    for run in json.loads(emu.stdout)["runs"]:
        repeats.setdefault(run["scheduler"], []).append(run)
    assert sorted(repeats) == ["coflow", "echelon"] and all(len(r) == 3 for r in repeats.values()), repeats
    median_s: dict[str, dict[str, float]] = {}
    for name, runs in repeats.items():
        median_s[name] = {job: statistics.median(r["jobs"][job]["completion_s"] for r in runs)
                          for job in runs[0]["jobs"]}
        median_s[name]["objective"] = statistics.median(r["objective_s"] for r in runs)
    expected_s = {name: {job: r["completion_s"] for job, r in run["jobs"].items()}
                  | {"objective": run["objective_s"]} for name, run in simulated.items()}
    for name, job in [("echelon", "fsdp"), ("echelon", "ps"), ("echelon", "objective"), ("coflow", "ps")]:
        got, expected = median_s[name][job], expected_s[name][job]
        assert abs(got / expected - 1) <= 0.12, f"{name} {job}: median {got:.2f} s vs {expected:.2f} s"
    got, expected = median_s["coflow"]["fsdp"], expected_s["coflow"]["fsdp"]
    assert abs(got / expected - 1) <= 0.18, f"coflow fsdp: median {got:.2f} s vs {expected:.2f} s"
    echelon, coflow = median_s["echelon"], median_s["coflow"]
    assert echelon["objective"] < coflow["objective"], median_s
    assert echelon["fsdp"] < coflow["fsdp"], median_s


def test_agents_on_the_fabric_deliver_exact_bytes_and_respect_dependencies(fabric, tmp_path):
    fab, hosts_ip = fabric.fabric, host_ips(fabric)
    jobs = cross_jobs()
    outcome = run_agents(RunSpec(hosts_ip=hosts_ip, jobs=jobs, data_port=46100, run_timeout_s=60),
                         str(tmp_path), fabric_popen(fab))
    result = assemble_run(jobs, outcome.documents, "fair")  # raises unless every byte count is exact
    for job in jobs:
        for task in job.tasks.values():
            mine = result.tasks[qualified(job.job_id, task.task_id)]
            for dep in task.deps:
                assert mine.start_s >= result.tasks[qualified(job.job_id, dep)].finish_s, (task.task_id, dep)
            if isinstance(task, FlowTask):
                received = outcome.documents[task.dst].received[qualified(job.job_id, task.task_id)]
                assert received["received_bytes"] == task.size_bytes
                # the bytes really crossed a 20 Mbit/s shaped link: no faster than the link rate
                assert mine.finish_s - mine.start_s >= task.size_bytes * 8 / RATE_BPS * 0.97, task.task_id


def test_ovs_transmit_socket_gets_the_large_send_buffer(fabric):
    """The userspace datapath's one tx socket is enlarged (else every port drops once queues back up)."""
    from topologies import ovs

    if ovs.kernel_datapath_available():
        pytest.skip("kernel datapath: no shared userspace packet socket")
    fab, hosts_ip = fabric.fabric, host_ips(fabric)
    fab.host("h1").cmd(f"ping -c 1 -W 2 {hosts_ip['h3']}")  # the socket exists once a packet was sent
    pid = int(ovs.run(["pidof", "ovs-vswitchd"]).split()[0])
    assert ovs._packet_tx_inodes(pid), "ovs-vswitchd has no unbound AF_PACKET socket"
    size = ovs.ensure_tx_buffer()
    assert size is not None and size >= 2 * ovs.TX_BUFFER_BYTES  # the kernel reports twice the value set
    assert ovs.ensure_tx_buffer(1024) == size  # never shrinks a larger buffer


def test_a_killed_agent_on_the_fabric_fails_the_run_cleanly(fabric, tmp_path):
    fab, hosts_ip = fabric.fabric, host_ips(fabric)
    job = Job("s")
    job.add(ComputeTask("c1", "h1", 0.2))
    job.add(FlowTask("f1", "h1", "h3", 100_000, ("c1",)))
    job.add(ComputeTask("long", "h3", 30.0, ("f1",)))
    job.add(FlowTask("f2", "h3", "h1", 100_000, ("long",)))
    started = {}
    popen = fabric_popen(fab)

    def recording_popen(host, argv, log_file):
        started[host] = popen(host, argv, log_file)
        return started[host]

    def killer():
        deadline = time.time() + 30
        while time.time() < deadline:
            if (tmp_path / "ctl" / "h3.sock").exists():
                time.sleep(2.0)
                os.kill(started["h3"].pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    threading.Thread(target=killer, daemon=True).start()
    t = time.monotonic()
    with pytest.raises(EmulationError, match="agent h3"):
        run_agents(RunSpec(hosts_ip=hosts_ip, jobs=[job], data_port=46200, run_timeout_s=60), str(tmp_path),
                   recording_popen)
    assert time.monotonic() - t < 15
    assert all(proc.poll() is not None for proc in started.values())


# ``echelon-online`` on the fabric: agents declare no sizes, the controller's scheduler learns them.  The
# agents register only which flows make up which EchelonFlow (no size, no offset), report starts, progress
# and finishes, and the controller's ``echelon-online`` hears every one of them and schedules later
# iterations on what it learned.
ONLINE_ITERATIONS = 3


def test_an_echelon_online_run_completes_and_the_controller_learned_every_flow(fabric, tmp_path):
    from controller.client import EchelonClient
    from controller.launcher import free_tcp_port
    from echelonflow.topology_spec import TopologySpec
    from echelonflow.workloads import generate
    from traffic.runspec import RegistrySettings

    topo, fab, ctl = fabric.topo, fabric.fabric, fabric.ctl
    client = EchelonClient(socket_path=ctl.api_socket_path, token_file=ctl.token_file)
    before = client.scheduler()["scheduler"]
    try:
        answer = client.set_scheduler("echelon-online", wait_s=10)
        assert (answer["clairvoyant"], answer["enforces"]) == (False, True)
        # a ring all-reduce across the bottleneck, repeated: the iterations are what echelon-online learns
        job = generate("ring_allreduce", "ring", ["h1", "h2", "h3", "h4"],
                       {"iterations": ONLINE_ITERATIONS, "bytes": 1_200_000})
        spec = RunSpec(hosts_ip=host_ips(fabric), jobs=[job], data_port=free_tcp_port(),
                       registry=RegistrySettings(ctl.api_socket_path, ctl.token_file, 0.05),
                       scheduler="echelon-online", run_timeout_s=120,
                       topology_spec=TopologySpec.of(topo).to_json())
        outcome = run_agents(spec, str(tmp_path), fabric_popen(fab))
        result = assemble_run([job], outcome.documents, "echelon-online")  # raises unless every byte arrived
        assert result.jobs["ring"].completion_s > 0
        records = {f["flow_id"]: f for f in client.flows("ring")}
        assert sorted(records) == sorted(f.task_id for f in job.flows)
        for flow in job.flows:
            record = records[flow.task_id]
            assert record["size_bytes"] is None and record["offset_s"] == 0.0, record  # nothing was declared
            assert (record["state"], record["bytes_sent"]) == ("finished", flow.size_bytes), record
            assert record["expected_size_bytes"] == flow.size_bytes, record  # learned from the reports
            received = outcome.documents[flow.dst].received[qualified(job.job_id, flow.task_id)]
            assert received["received_bytes"] == flow.size_bytes
        observed = client.scheduler()["observed"]
        assert observed["start"] == observed["finish"] == len(job.flows), observed
        assert observed["progress"] > 0, observed  # the agents' polls of the longer flows reached it
        # the controller enforced its decisions on these flows: the agents were given scheduled classes
        traces = [outcome.documents[f.src].sent[qualified(job.job_id, f.task_id)].get("allocations") or []
                  for f in job.flows]
        assert any(entry["rate_bps"] is not None for trace in traces for entry in trace), traces[:3]
        health = client.health()
        assert health["scheduler"] == "echelon-online" and not health["last_round"]["error"], health
    finally:
        client.set_scheduler(before, wait_s=10)  # the module's fabric is left as it was found
        client.close()


def _shape(value):
    """Key structure of a result document (dict keys, recursively; lists by their first element)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value and isinstance(value[0], (dict, list)) else "list"
    return "value"
