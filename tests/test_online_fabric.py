"""``echelon-online`` on the real fabric: agents declare no sizes, the controller's scheduler learns them.

Mininet hosts, Open vSwitch switches, the project's controller process and real TCP between agents: the
agents register only which flows make up which EchelonFlow (no size, no offset), report starts, progress
and finishes, and the controller's ``echelon-online`` hears every one of them and schedules later
iterations on what it learned.  Needs root, Open vSwitch and Mininet (``require_fabric``).
"""

from __future__ import annotations

import pytest

from controller.launcher import free_tcp_port
from echelonflow.model import qualified
from echelonflow.workloads import generate
from emulation.agents import fabric_popen, run_agents
from emulation.assemble import assemble_run
from tests.fabric_helpers import dumbbell_with_controller

pytestmark = pytest.mark.fabric
RATE_BPS = 20e6
ITERATIONS = 3


@pytest.fixture(scope="module")
def fabric(require_fabric):
    """A dumbbell (h1 h2 | h3 h4) at 20 Mbit/s with the project's controller, for this module."""
    with dumbbell_with_controller(RATE_BPS) as state:
        yield state.topo, state.fabric, state.ctl


def test_an_echelon_online_run_completes_and_the_controller_learned_every_flow(fabric, tmp_path):
    from controller.client import EchelonClient
    from echelonflow.topology_spec import TopologySpec
    from traffic.runspec import RegistrySettings, RunSpec

    topo, fab, ctl = fabric
    client = EchelonClient(socket_path=ctl.api_socket_path, token_file=ctl.token_file)
    answer = client.set_scheduler("echelon-online", wait_s=10)
    assert (answer["clairvoyant"], answer["enforces"]) == (False, True)
    # a ring all-reduce across the bottleneck, repeated: the iterations are what echelon-online learns from
    job = generate("ring_allreduce", "ring", ["h1", "h2", "h3", "h4"],
                   {"iterations": ITERATIONS, "bytes": 1_200_000})
    hosts_ip = {h: topo.graph.nodes[h]["ip"] for h in topo.hosts}
    spec = RunSpec(hosts_ip=hosts_ip, jobs=[job], data_port=free_tcp_port(),
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
    client.close()
