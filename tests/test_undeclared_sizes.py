"""Flows registered without ``size_bytes``: ``echelon-online`` in the controller, which learns
them from the starts, progress and finishes it hears.

The registry keeps such flows with an undeclared size, the scheduling service feeds the selected
scheduler every start, progress report and finish, and the snapshot's remaining bytes come from the
scheduler's estimate.  Real registry, store, service, API server and agents throughout (no fabric here:
tests/test_emulate.py::test_an_echelon_online_run_completes_and_the_controller_learned_every_flow runs the
same over Mininet/OVS).
"""

from __future__ import annotations

import copy
import sqlite3

import pytest

from controller import views
from controller.client import ApiClientError, EchelonClient
from controller.launcher import free_tcp_port
from controller.registry import MAX_SIZE_BYTES, UNDECLARED_LEFT_BYTES, Registry, RegistryError
from controller.service import SchedulingService
from controller.store import open_registry
from echelonflow.fields import FieldError
from echelonflow.model import qualified
from echelonflow.schedulers.echelon_online import EchelonOnlineScheduler
from echelonflow.topology import build, fattree
from echelonflow.workloads import generate
from tests.api_helpers import ServedApi
from tests.helpers import Clock, RecordingSink, run_local_agents

MB = 1_000_000
RATE_BPS = 8 * MB
SIZES = {"a": 3 * MB, "b": MB}  # the two flows of each iteration's coflow


def idealised() -> Registry:
    """Two hosts on one 1 MB/s link without framing (wire bytes = payload bytes)."""
    return Registry(build("two_hosts", RATE_BPS, mtu_bytes=None))


def add_iteration(reg: Registry, k: int, declared: bool = False) -> None:
    reg.add_echelon("j", f"i{k}.c", flows=[
        {"flow_id": f"i{k}.{name}", "src": "h1", "dst": "h2", **({"size_bytes": size} if declared else {})}
        for name, size in SIZES.items()])


def run_iteration(reg: Registry, svc: SchedulingService, clock: Clock, k: int, start_s: float) -> None:
    """Both flows start at ``start_s``, report progress, and finish (b first) moving their sizes."""
    clock.now = start_s
    for port, name in enumerate(SIZES):
        reg.flow_started("j", f"i{k}.{name}", 1000 + port, 2000 + 10 * k, start_s)
        svc.on_arrival(f"j/i{k}.{name}")
    for name, size in SIZES.items():
        reg.flow_progress("j", f"i{k}.{name}", size // 2)
        svc.on_progress(f"j/i{k}.{name}")
    for name in ("b", "a"):
        clock.now += 1.0
        reg.flow_finished("j", f"i{k}.{name}", clock.now, bytes_sent=SIZES[name])
        svc.on_departure(f"j/i{k}.{name}")


# --------------------------------------------------------------------------- registry and store
def test_flows_without_a_size_are_registered_undeclared_next_to_declared_ones():
    reg = Registry(fattree(20e6, 4))
    reg.add_job("j")
    _, flows = reg.add_echelon("j", "e", flows=[
        {"flow_id": "u1", "src": "h1", "dst": "h5"},
        {"flow_id": "u2", "src": "h2", "dst": "h5", "size_bytes": None},
        {"flow_id": "d", "src": "h3", "dst": "h5", "size_bytes": 4096, "offset_s": 0.0}])
    assert [f.size_bytes for f in flows] == [None, None, 4096]
    view = views.flow_view(reg, reg.flows["j/u1"])
    assert view["size_bytes"] is None and view["expected_size_bytes"] is None  # no estimator yet
    assert views.flow_view(reg, reg.flows["j/d"])["expected_size_bytes"] == 4096
    reg.flow_started("j", "u1", 1000, 2000, 5.0)
    assert reg.snapshot(6.0).flows[0].remaining_bytes == reg.topology.wire_bytes(UNDECLARED_LEFT_BYTES)
    reg.flow_progress("j", "u1", 5 * MB)  # no size to exceed: as much left as sent
    assert reg.snapshot(6.0).flows[0].remaining_bytes == reg.topology.wire_bytes(5 * MB)
    reg.flow_progress("j", "u1", MAX_SIZE_BYTES)  # the largest size accepted, as for declared flows
    with pytest.raises(FieldError) as info:
        reg.flow_progress("j", "u1", MAX_SIZE_BYTES + 1)
    assert info.value.field == "bytes_sent"


def test_an_undeclared_finish_must_say_its_bytes_and_a_refusal_changes_nothing():
    reg = idealised()
    reg.add_job("j")
    add_iteration(reg, 0)
    reg.flow_started("j", "i0.a", 1000, 2000, 1.0)
    before, version = copy.deepcopy(views.dump(reg)), reg.version
    with pytest.raises(RegistryError) as info:
        reg.flow_finished("j", "i0.a", 2.0)
    assert info.value.field == "bytes_sent" and info.value.status == 400
    assert "registered without size_bytes" in info.value.problem and "\n" not in str(info.value)
    assert views.dump(reg) == before and reg.version == version
    done = reg.flow_finished("j", "i0.a", 2.0, bytes_sent=3 * MB)
    assert (done.state, done.bytes_sent, done.size_bytes) == ("finished", 3 * MB, None)


def test_the_store_keeps_an_undeclared_size_undeclared(tmp_path):
    path = str(tmp_path / "r.sqlite")
    reg = open_registry(idealised().topology, path)
    reg.add_job("j")
    add_iteration(reg, 0)
    reg.add_echelon("j", "declared", flows=[{"flow_id": "d", "src": "h1", "dst": "h2", "size_bytes": 7}])
    reg.flow_started("j", "i0.a", 1000, 2000, 1.0)
    reg.flow_finished("j", "i0.a", 2.0, bytes_sent=3 * MB)
    reloaded = open_registry(reg.topology, path)
    assert views.dump(reloaded) == views.dump(reg)
    assert {k: f.size_bytes for k, f in reloaded.flows.items()} == {"j/i0.a": None, "j/i0.b": None, "j/d": 7}
    with sqlite3.connect(path) as db:  # undeclared is 0 on disk, a size no declared flow has
        assert dict(db.execute("SELECT flow_id, size_bytes FROM flows")) == {"i0.a": 0, "i0.b": 0, "d": 7}


# --------------------------------------------------------------------------- the service
def test_echelon_online_hears_every_event_and_decides_iteration_1_as_clairvoyant_echelon():
    reg, clock = idealised(), Clock(0.0)
    reg.add_job("j")
    add_iteration(reg, 0)
    add_iteration(reg, 1)
    reg.set_setting("scheduler", "echelon-online")
    svc = SchedulingService(reg, RecordingSink(), now=clock)
    assert isinstance(svc.scheduler, EchelonOnlineScheduler) and reg.estimator is svc.scheduler
    assert reg.expected_size_bytes(reg.flows["j/i1.a"]) is None  # nothing seen yet
    run_iteration(reg, svc, clock, 0, 10.0)
    assert svc.observed == {"start": 2, "progress": 2, "finish": 2}
    # iteration 1 has never run: its sizes are the ones iteration 0 moved
    assert {n: reg.expected_size_bytes(reg.flows[f"j/i1.{n}"]) for n in SIZES} == SIZES
    clock.now = 20.0
    for port, name in enumerate(SIZES):
        reg.flow_started("j", f"i1.{name}", 1000 + port, 2010, 20.0)
        svc.on_arrival(f"j/i1.{name}")
    reg.flow_progress("j", "i1.a", MB)
    svc.on_progress("j/i1.a")
    clock.now = 20.25
    svc.reschedule("interval")
    snapshot = reg.snapshot(clock.now)
    assert {f.flow_id: f.remaining_bytes for f in snapshot.flows} == {"j/i1.a": 2 * MB, "j/i1.b": MB}
    # the same iteration declared, under clairvoyant echelon: the same decision
    twin, twin_clock = idealised(), Clock(20.0)
    twin.add_job("j")
    add_iteration(twin, 1, declared=True)
    twin_svc = SchedulingService(twin, RecordingSink(), now=twin_clock)
    for port, name in enumerate(SIZES):
        twin.flow_started("j", f"i1.{name}", 1000 + port, 2010, 20.0)
    twin.flow_progress("j", "i1.a", MB)
    twin_clock.now = 20.25
    twin_svc.reschedule("interval")
    assert twin_svc.scheduler.name == "echelon"
    assert svc.state.decision.rank == twin_svc.state.decision.rank
    assert svc.state.decision.rate_bps == pytest.approx(twin_svc.state.decision.rate_bps)
    assert svc.state.queue == twin_svc.state.queue


def test_a_restarted_or_newly_selected_scheduler_learns_from_the_registry_history(tmp_path):
    path, clock = str(tmp_path / "r.sqlite"), Clock(0.0)
    reg = open_registry(idealised().topology, path)
    reg.add_job("j")
    add_iteration(reg, 0)
    add_iteration(reg, 1)
    svc = SchedulingService(reg, RecordingSink(), now=clock)  # echelon: learns nothing, estimates nothing
    run_iteration(reg, svc, clock, 0, 10.0)
    assert reg.expected_size_bytes(reg.flows["j/i1.a"]) is None
    svc.set_scheduler("echelon-online")  # hears iteration 0 from the registry at once
    assert {n: reg.expected_size_bytes(reg.flows[f"j/i1.{n}"]) for n in SIZES} == SIZES
    restarted = open_registry(reg.topology, path)  # a controller restart over the same store
    again = SchedulingService(restarted, RecordingSink(), now=clock)
    assert again.scheduler.name == "echelon-online"
    assert {n: restarted.expected_size_bytes(restarted.flows[f"j/i1.{n}"]) for n in SIZES} == SIZES
    assert again.observed == {"start": 0, "progress": 0, "finish": 0}  # history is not counted as heard


# --------------------------------------------------------------------------- the API
def test_the_api_takes_undeclared_flows_and_reports_what_the_scheduler_heard(tmp_path):
    served = ServedApi(tmp_path)
    try:
        c = served.unix
        answer = c.set_scheduler("echelon-online")
        assert (answer["scheduler"], answer["clairvoyant"]) == ("echelon-online", False)
        c.register_job("j")
        c.register_echelon("j", "i0.c", [{"flow_id": "i0.a", "src": "h1", "dst": "h5"}])
        c.register_echelon("j", "i1.c", [{"flow_id": "i1.a", "src": "h1", "dst": "h5", "size_bytes": None}])
        assert c.flow("j", "i0.a")["size_bytes"] is None
        c.flow_started("j", "i0.a", 1000, 2000)
        c.flow_progress("j", "i0.a", 123_456)
        with pytest.raises(ApiClientError) as info:
            c.flow_finished("j", "i0.a")
        assert (info.value.status, info.value.field) == (400, "bytes_sent")
        assert c.flow("j", "i0.a")["state"] == "active"
        c.flow_finished("j", "i0.a", bytes_sent=250_000)
        assert c.scheduler()["observed"] == {"start": 1, "progress": 1, "finish": 1}
        assert c.flow("j", "i1.a")["expected_size_bytes"] == 250_000  # learned from iteration 0
        with pytest.raises(ApiClientError) as info:  # declared sizes keep their checks
            c.register_echelon("j", "x", [{"flow_id": "x", "src": "h1", "dst": "h5", "size_bytes": 0}])
        assert (info.value.status, info.value.field) == (400, "flows[0].size_bytes")
        assert c.set_scheduler("echelon")["clairvoyant"] is True
    finally:
        served.stop()


# --------------------------------------------------------------------------- real agents (loopback)
def test_agents_declare_no_sizes_under_echelon_online_and_the_scheduler_learns(tmp_path, registry_server):
    from traffic.runspec import RegistrySettings

    sock_path, token = registry_server
    client = EchelonClient(socket_path=sock_path, token_file=token)
    client.set_scheduler("echelon-online")
    job = generate("ring_allreduce", "ring", ["h1", "h2", "h3"], {"iterations": 2, "bytes": 600_000})
    work = tmp_path / "w"
    work.mkdir()
    outcome = run_local_agents([job], work, registry=RegistrySettings(sock_path, token, 0.05, "u-"),
                  data_port=free_tcp_port())  # not test_agent's fixed ports: other runs may hold them
    flows = {f["flow_id"]: f for f in client.flows("u-ring")}
    assert sorted(flows) == sorted(f.task_id for f in job.flows)
    for flow in job.flows:
        record = flows[flow.task_id]
        assert record["size_bytes"] is None and record["offset_s"] == 0.0  # nothing declared
        assert (record["state"], record["bytes_sent"]) == ("finished", flow.size_bytes)
        assert record["expected_size_bytes"] == flow.size_bytes  # learned from the finishes
        sent = outcome.documents[flow.src].sent[qualified(job.job_id, flow.task_id)]
        assert record["start_s"] == pytest.approx(outcome.t0_s + sent["start"], abs=1e-3)
    observed = client.scheduler()["observed"]
    assert observed["start"] == observed["finish"] == len(job.flows)
    client.close()
