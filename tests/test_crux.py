"""``crux`` (Cao et al., SIGCOMM '24): strict priority across jobs by GPU intensity I_j = W_j / t_j,
compressed to 8 levels, max-min inside a level (``echelonflow/schedulers/crux.py``), in the simulator
and in the controller's scheduling service."""

from __future__ import annotations

import sqlite3

import pytest

from controller.config import ControllerConfig
from controller.registry import Registry
from controller.service import SchedulingService
from controller.store import Store, open_registry
from echelonflow.errors import UserError
from echelonflow.model import ComputeTask, FlowTask, Job
from echelonflow.schedulers import get_scheduler
from echelonflow.schedulers.crux import (
    LEVELS,
    compress,
    contention_edges,
    gpu_intensity,
    job_compute_s,
    job_profile,
)
from echelonflow.topology import build
from simulator.engine import simulate
from tests.api_helpers import ServedApi
from tests.helpers import RecordingSink

MB = 1_000_000
B_BPS = 8 * MB  # 1 MB/s, links without framing: a 1 MB flow alone takes 1 s


def _sender_job(job_id: str, flows: dict[str, str], compute_s: float) -> Job:
    """1 MB from h1 to each host of ``flows`` (flow id -> host), then ``compute_s`` on the first one."""
    job = Job(job_id)
    for fid, dst in flows.items():
        job.add(FlowTask(fid, "h1", dst, MB, echelon_id="push"))
    job.add(ComputeTask("step", next(iter(flows.values())), compute_s, deps=tuple(flows)))
    return job


def _finishes(compute_a: float, compute_b: float, scheduler: str = "crux") -> dict[str, float]:
    """Jobs a (h1 -> h2) and b (h1 -> h3) share h1's uplink on a k=4 fat-tree; same bytes, so the one
    with more compute is the more GPU-intensive."""
    topology = build("fattree", B_BPS, k=4, mtu_bytes=None)
    jobs = [_sender_job("a", {"f": "h2"}, compute_a), _sender_job("b", {"f": "h3"}, compute_b)]
    run = simulate(topology, jobs, get_scheduler(scheduler), alone_runs=False)  # invariants checked
    return {qid: flow.finish_s for qid, flow in run.flows.items()}


def test_the_more_gpu_intensive_job_sends_first() -> None:
    finish = _finishes(compute_a=4.0, compute_b=1.0)
    assert finish["a/f"] == pytest.approx(1.0)  # the whole uplink, alone
    assert finish["b/f"] == pytest.approx(2.0)  # what a leaves, after it


def test_reversing_the_intensities_reverses_the_order() -> None:
    finish = _finishes(compute_a=1.0, compute_b=4.0)
    assert finish["b/f"] == pytest.approx(1.0)
    assert finish["a/f"] == pytest.approx(2.0)


def test_without_job_priority_the_two_share_the_uplink() -> None:
    """The same jobs under fair sharing: both flows end at 2 s, so the order above is crux's doing."""
    finish = _finishes(compute_a=4.0, compute_b=1.0, scheduler="fair")
    assert finish["a/f"] == pytest.approx(2.0) and finish["b/f"] == pytest.approx(2.0)


def test_flows_of_one_job_share_max_min_fairly() -> None:
    """Job a sends to h2 and h3 over h1's uplink (W 4 s), job b to h4 (W 1 s): a's two flows split the
    uplink and end together at 2 s (not one after the other), b's flow gets the link after them."""
    topology = build("fattree", B_BPS, k=4, mtu_bytes=None)
    jobs = [_sender_job("a", {"f1": "h2", "f2": "h3"}, 4.0), _sender_job("b", {"f": "h4"}, 1.0)]
    run = simulate(topology, jobs, get_scheduler("crux"), alone_runs=False)
    assert run.flows["a/f1"].finish_s == pytest.approx(2.0)
    assert run.flows["a/f2"].finish_s == pytest.approx(2.0)
    assert run.flows["b/f"].finish_s == pytest.approx(3.0)


def test_intensity_is_compute_over_the_most_loaded_link() -> None:
    job = _sender_job("a", {"f1": "h2", "f2": "h3"}, 4.0)
    assert job_compute_s(job) == 4.0
    # 1 MB on each of two links, 2 MB on the shared one, at 1 MB/s: t = 2 s, I = 4 / 2
    flows = [(("up", "x"), MB), (("up", "y"), MB)]
    profile = job_profile("a", 4.0, flows, {"up": B_BPS, "x": B_BPS, "y": B_BPS})
    assert profile.intensity == pytest.approx(2.0)
    assert profile.links == {"up", "x", "y"}
    assert gpu_intensity(4.0, 2.0) == 2.0
    assert gpu_intensity(0.0, 2.0) == 0.0  # no compute: nothing to keep busy
    assert gpu_intensity(4.0, 0.0) == float("inf")  # no traffic: never waits on the network


def test_jobs_contend_where_their_links_meet() -> None:
    links = [frozenset({1, 2}), frozenset({3}), frozenset({2, 3})]
    assert contention_edges(links) == [(0, 2), (1, 2)]


def test_up_to_eight_jobs_each_get_a_level() -> None:
    assert compress([5.0, 4.0, 3.0], [(0, 1), (1, 2)]) == [0, 1, 2]
    assert compress([1.0] * LEVELS, [(0, 1)]) == list(range(LEVELS))


def test_compression_separates_the_jobs_that_contend() -> None:
    """The paper's Fig. 13: four jobs in decreasing priority onto two levels, jobs 1-2 sharing one link
    and 3-4 another: the best compression puts 1 and 3 high, 2 and 4 low (every contention cut);
    Sincronia's (1 high) and Varys's (1, 2 high) each leave one pair in a level."""
    assert compress([4.0, 3.0, 2.0, 1.0], [(0, 1), (2, 3)], levels=2) == [0, 1, 0, 1]


def test_compression_keeps_contending_jobs_in_priority_order() -> None:
    """Nine jobs on eight levels, every one contending with every other: a valid compression never puts
    a lower-priority job above a higher one it contends with."""
    n = LEVELS + 1
    edges = [(a, b) for a in range(n) for b in range(a + 1, n)]
    levels = compress([float(n - i) for i in range(n)], edges)
    assert levels == sorted(levels) and len(set(levels)) == LEVELS


def test_without_compute_the_jobs_go_in_id_order_with_the_rest_in_the_last_level() -> None:
    assert compress([0.0] * 10, [(0, 1)]) == [0, 1, 2, 3, 4, 5, 6, 7, 7, 7]


# ------------------------------------------------------------------------------- the controller
def _controller(compute_hi: float, compute_lo: float, store: Store | None = None):
    registry = Registry(build("two_hosts", B_BPS, mtu_bytes=None), store)
    port = RecordingSink()
    service = SchedulingService(registry, port, ControllerConfig(check_decisions=True), now=lambda: 1.0)
    registry.add_job("hi", compute_s=compute_hi)
    registry.add_job("lo", compute_s=compute_lo)
    for job in ("hi", "lo"):
        registry.add_echelon(job, "e", flows=[{"flow_id": "f", "src": "h1", "dst": "h2", "size_bytes": MB}])
    return registry, port, service


@pytest.mark.parametrize("compute_hi,compute_lo", [(4.0, 1.0), (1.0, 4.0)])
def test_the_controller_runs_crux_by_the_declared_compute(compute_hi: float, compute_lo: float) -> None:
    """Two jobs' 1 MB flows on the one link: the job declared with more compute gets the link and the
    more urgent class, the other waits (and the order follows the declaration, not the job id)."""
    registry, port, service = _controller(compute_hi, compute_lo)
    service.set_scheduler("crux")
    for port_number, job in ((5001, "hi"), (5002, "lo")):
        registry.flow_started(job, "f", port_number, 80, 1.0)
    report = service.reschedule("test")
    assert report.error == "" and report.installs == 2
    first, second = ("hi", "lo") if compute_hi > compute_lo else ("lo", "hi")
    rate = service.state.decision.rate_bps
    assert rate[f"{first}/f"] == pytest.approx(B_BPS) and rate[f"{second}/f"] == 0.0
    installs = {call[1]: call for call in port.take() if call[0] == "install"}
    assert installs[f"{first}/f"][4] < installs[f"{second}/f"][4]
    assert registry.job_profile(first).intensity == pytest.approx(max(compute_hi, compute_lo) / 1.0)


def test_the_declared_compute_survives_a_restart(tmp_path) -> None:
    path = str(tmp_path / "registry.sqlite")
    _controller(4.0, 1.0, Store(path))
    registry = open_registry(build("two_hosts", B_BPS, mtu_bytes=None), path)
    assert registry.jobs["hi"].compute_s == 4.0 and registry.jobs["lo"].compute_s == 1.0
    assert registry.job_profile("hi").intensity == pytest.approx(4.0)


def test_a_store_from_before_compute_s_opens_and_reads_none(tmp_path) -> None:
    path = str(tmp_path / "old.sqlite")
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE jobs (job_id TEXT PRIMARY KEY, weight REAL NOT NULL)")
    db.execute("INSERT INTO jobs VALUES ('old', 2.0)")
    db.commit()
    db.close()
    registry = open_registry(build("two_hosts", B_BPS, mtu_bytes=None), path)
    assert registry.jobs["old"].compute_s is None and registry.jobs["old"].weight == 2.0
    assert registry.job_profile("old").intensity == 0.0


def test_a_bad_compute_is_refused_with_the_field_named() -> None:
    registry = Registry(build("two_hosts", B_BPS, mtu_bytes=None))
    with pytest.raises(UserError, match="compute_s"):
        registry.add_job("j", compute_s=-1.0)
    assert "j" not in registry.jobs


def test_the_api_takes_compute_s_with_the_job_and_shows_it(tmp_path) -> None:
    """``POST /v1/jobs`` with ``compute_s`` (what the traffic agents send), through the real client and
    server; a bad one is refused with the field named and nothing registered."""
    from controller.client import ApiClientError

    served = ServedApi(tmp_path)
    try:
        client = served.unix
        assert client.register_job("gpt", 1.0, compute_s=12.5)["compute_s"] == 12.5
        assert served.registry.jobs["gpt"].compute_s == 12.5
        assert "compute_s" not in client.register_job("plain")  # not declared: not shown
        with pytest.raises(ApiClientError, match="compute_s") as refused:
            client.register_job("bad", compute_s=-1.0)
        assert refused.value.status == 400 and "bad" not in served.registry.jobs
    finally:
        served.stop()
