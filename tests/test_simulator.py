"""The fluid simulator on hand-built jobs: the paper's Fig. 2 numbers, sharing, tie rule, guards."""

from __future__ import annotations

import gc
import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from echelonflow.bounds import lower_bound_s
from echelonflow.echelon import echelons_of
from echelonflow.errors import UserError
from echelonflow.model import ComputeTask, FlowTask, Job
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import SCHEDULERS, get_scheduler
from echelonflow.schedulers.aalo import AaloScheduler
from echelonflow.schedulers.base import Decision, Scheduler, Snapshot
from echelonflow.schedulers.echelon_online import EchelonOnlineScheduler
from echelonflow.schedulers.view import Allocation, FlowView, snapshot_view
from echelonflow.topology import TopologyError, build
from simulator import engine
from simulator.engine import SimulationError, simulate

B_BYTES_PER_S = 1.25e6  # 10 Mbit/s


def fig2_job(job_id: str = "fig2", src: str = "h1", dst: str = "h2") -> Job:
    """Paper Fig. 2: worker 1 computes 3 micro-batches, sends 2B bytes after each; worker 2 consumes."""
    job = Job(job_id)
    for i in range(3):
        job.add(ComputeTask(f"w1_mb{i}", src, 1.0, (f"w1_mb{i - 1}",) if i else ()))
        job.add(FlowTask(f"act{i}", src, dst, int(2 * B_BYTES_PER_S), (f"w1_mb{i}",), echelon_id="act"))
    for i in range(3):
        job.add(ComputeTask(f"w2_mb{i}", dst, 1.0, (f"act{i}",) + ((f"w2_mb{i - 1}",) if i else ())))
    return job


@pytest.mark.parametrize(
    "name, completion, finishes, tardiness",
    [
        ("fair", 8.5, [4.5, 6.5, 7.0], 4.5),
        ("coflow", 10.0, [7.0, 7.0, 7.0], 6.0),
        ("echelon", 8.0, [3.0, 5.0, 7.0], 4.0),  # earliest due first, as soon as possible
        ("echelon-varys", 8.0, [5.0, 6.0, 7.0], 4.0),  # just in time: the paper's Fig. 2c
    ],
)
def test_fig2_reproduces_the_paper(name, completion, finishes, tardiness) -> None:
    result = simulate(build("two_hosts", 10e6, mtu_bytes=None), [fig2_job()], get_scheduler(name))
    assert result.jobs["fig2"].completion_s == pytest.approx(completion, abs=1e-6)
    assert result.jobs["fig2"].slowdown == pytest.approx(1.0)
    assert [result.flows[f"fig2/act{i}"].finish_s for i in range(3)] == pytest.approx(finishes, abs=1e-6)
    assert [result.flows[f"fig2/act{i}"].ideal_finish_s for i in range(3)] == pytest.approx([1, 2, 3])
    assert result.echelonflows["fig2/act"].tardiness_s == pytest.approx(tardiness, abs=1e-6)
    assert result.echelonflows["fig2/act"].kind == "staggered"
    assert result.objective_s == pytest.approx(tardiness, abs=1e-6)
    assert result.tasks["fig2/w2_mb2"].finish_s == pytest.approx(completion, abs=1e-6)
    assert result.tasks["fig2/act0"].start_s == pytest.approx(1.0)


#: docs/scheduler-design.md's worked Fig. 2 trace, by hand: at each decision, per flow (act0, act1,
#: act2) the remaining size in link-seconds and the rate as a fraction of the link (None: not active).
FIG2_TRACE = {
    "echelon": [
        (1, (2, None, None), (1, None, None)),
        (2, (1, 2, None), (1, 0, None)),
        (3, (None, 2, 2), (None, 1, 0)),
        (5, (None, None, 2), (None, None, 1)),
    ],
    "echelon-varys": [
        (1, (2, None, None), (1, None, None)),
        (2, (1, 2, None), (1 / 2, 1 / 2, None)),
        (3, (1 / 2, 3 / 2, 2), (1 / 4, 1 / 2, 1 / 4)),
        (5, (None, 1 / 2, 3 / 2), (None, 1 / 2, 1 / 2)),
        (6, (None, None, 1), (None, None, 1)),
    ],
    "coflow": [
        (1, (2, None, None), (1, None, None)),
        (2, (1, 2, None), (1 / 3, 2 / 3, None)),
        (3, (2 / 3, 4 / 3, 2), (1 / 6, 1 / 3, 1 / 2)),
    ],
    "fair": [
        (1, (2, None, None), (1, None, None)),
        (2, (1, 2, None), (1 / 2, 1 / 2, None)),
        (3, (1 / 2, 3 / 2, 2), (1 / 3, 1 / 3, 1 / 3)),
        (4.5, (None, 1, 3 / 2), (None, 1 / 2, 1 / 2)),
        (6.5, (None, None, 1 / 2), (None, None, 1)),
    ],
}


@pytest.mark.parametrize("name", sorted(FIG2_TRACE))
def test_fig2_decisions_follow_the_worked_trace(name) -> None:
    link_bps = 10e6
    seen = []
    scheduler = get_scheduler(name)
    decide = scheduler.decide

    def recording(view):
        allocation = decide(view)
        decision = view.decision_of(allocation)
        by_flow = {f.flow_id: f for f in view.snapshot().flows}
        remaining = tuple(by_flow[f"fig2/act{i}"].remaining_bytes * 8 / link_bps
                          if f"fig2/act{i}" in by_flow else None for i in range(3))
        rates = tuple(decision.rate_bps[f"fig2/act{i}"] / link_bps if f"fig2/act{i}" in by_flow else None
                      for i in range(3))
        seen.append((view.now_s, remaining, rates))
        return allocation

    scheduler.decide = recording
    simulate(build("two_hosts", link_bps, mtu_bytes=None), [fig2_job()], scheduler)
    assert len(seen) == len(FIG2_TRACE[name])
    for (now, remaining, rates), (want_now, want_remaining, want_rates) in zip(seen, FIG2_TRACE[name]):
        assert now == pytest.approx(want_now)
        for got, want in zip(remaining + rates, want_remaining + want_rates):
            assert (got is None) == (want is None), (now, name)
            assert want is None or got == pytest.approx(want), (now, name)


def _one_flow_job(job_id: str, src: str, dst: str, size: int) -> Job:
    job = Job(job_id)
    job.add(FlowTask("f", src, dst, size, echelon_id="e"))
    return job


def test_jobs_share_a_bottleneck_and_slowdowns_follow() -> None:
    topo = build("dumbbell", 8e6, mtu_bytes=None, hosts_per_side=2)  # h1,h2 | h3,h4; 1e6 B/s, no framing
    jobs = [_one_flow_job("a", "h1", "h3", 10**6), _one_flow_job("b", "h2", "h4", 10**6)]
    fair = simulate(topo, jobs, get_scheduler("fair"))
    assert [fair.jobs[j].completion_s for j in "ab"] == pytest.approx([2.0, 2.0])
    assert [fair.jobs[j].slowdown for j in "ab"] == pytest.approx([2.0, 2.0])
    echelon = simulate(topo, jobs, get_scheduler("echelon"))  # equal bottlenecks: group id breaks the tie
    assert [echelon.jobs[j].completion_s for j in "ab"] == pytest.approx([1.0, 2.0])
    assert [echelon.jobs[j].slowdown for j in "ab"] == pytest.approx([1.0, 2.0])
    assert echelon.objective_s == pytest.approx(1.0 + 2.0)  # ideal finish = start = 0 for both


def test_smaller_coflow_goes_first_under_varys() -> None:
    topo = build("dumbbell", 8e6, hosts_per_side=2)  # default MTU 9000: links carry frames
    jobs = [_one_flow_job("big", "h1", "h3", 3 * 10**6), _one_flow_job("small", "h2", "h4", 10**6)]
    result = simulate(topo, jobs, get_scheduler("coflow"))
    # 8948 payload bytes in every 9014-byte frame (IP/TCP/timestamps 52, Ethernet 14), 1e6 wire bytes/s
    frames = 9014 / 8948
    assert result.jobs["small"].completion_s == pytest.approx(1.0 * frames)
    assert result.jobs["big"].completion_s == pytest.approx(4.0 * frames)


def test_framing_follows_the_mtu_and_idealised_links_carry_payload_only() -> None:
    job = [_one_flow_job("j", "h1", "h2", 10**6)]
    for mtu, frame_over_payload in ((1500, 1514 / 1448), (9000, 9014 / 8948), (None, 1.0)):
        topo = build("two_hosts", 8e6, mtu_bytes=mtu)
        assert topo.payload_fraction == pytest.approx(1 / frame_over_payload)
        result = simulate(topo, job, get_scheduler("fair"))
        assert result.jobs["j"].completion_s == pytest.approx(frame_over_payload)
    for bad in (0, 575, 65001, 1500.0, True, "9000"):
        with pytest.raises(TopologyError, match="mtu_bytes must be an integer from 576 to 65000"):
            build("two_hosts", 8e6, mtu_bytes=bad)


def test_compute_tie_rule_declaration_order_one_at_a_time() -> None:
    job = Job("j")
    job.add(ComputeTask("second_declared_first", "h1", 2.0))
    job.add(ComputeTask("x", "h1", 1.0))
    job.add(ComputeTask("other_host", "h2", 1.0))
    result = simulate(build("two_hosts", 1e6), [job], get_scheduler("fair"))
    assert (result.tasks["j/second_declared_first"].start_s, result.tasks["j/x"].start_s) == (0.0, 2.0)
    assert result.tasks["j/other_host"].start_s == 0.0
    assert result.jobs["j"].completion_s == pytest.approx(3.0)


def test_zero_size_flow_and_zero_duration_compute_complete_instantly() -> None:
    job = Job("z")
    job.add(ComputeTask("c0", "h1", 0.0))
    job.add(FlowTask("f0", "h1", "h2", 0, ("c0",)))
    job.add(ComputeTask("c1", "h2", 0.5, ("f0",)))
    result = simulate(build("two_hosts", 1e6), [job], get_scheduler("echelon"))
    assert result.flows["z/f0"].finish_s == 0.0
    assert result.jobs["z"].completion_s == pytest.approx(0.5)


class _Starver(Scheduler):
    name = "starver"

    def decide_snapshot(self, snapshot: Snapshot) -> Decision:
        return Decision({f.flow_id: 0.0 for f in snapshot.flows}, {f.flow_id: 0 for f in snapshot.flows})


class _Greedy(Scheduler):
    name = "greedy"

    def decide_snapshot(self, snapshot: Snapshot) -> Decision:
        return Decision({f.flow_id: 2 * snapshot.capacity_bps[f.path[0]] for f in snapshot.flows}, {})


def test_starvation_raises_instead_of_looping() -> None:
    with pytest.raises(SimulationError, match="starve"):
        simulate(build("two_hosts", 1e6), [fig2_job()], _Starver())


def test_overcommitting_scheduler_trips_the_capacity_invariant() -> None:
    with pytest.raises(AssertionError, match="over capacity"):
        simulate(build("two_hosts", 1e6), [fig2_job()], _Greedy())
    with pytest.raises(AssertionError, match="ranks one that is not active"):
        simulate(build("two_hosts", 1e6), [fig2_job()], _RanksTheFinished())


def test_a_flow_finished_with_bytes_left_fails_the_delivery_check() -> None:
    """The step hands each finished flow's leftover to the run beside it (``fluid.advance``); the run
    keeps those beyond dust and its check names the flow."""
    scenario = load_scenario("fig2")
    specs = {job.job_id: engine.echelon_mod.echelons_of(job) for job in scenario.jobs}
    run = engine._Run(scenario.topology, list(scenario.jobs), get_scheduler("echelon"), True, specs)
    run.run()  # delivers everything, checked
    assert run.undelivered == {}
    first = np.zeros(1, dtype=run.finished_buf.dtype)
    run._note_leftovers(first, np.array([engine.BYTES_ATOL / 2]))  # dust
    run._check_delivered()
    size = run.task(run.flow_task[0]).size_bytes
    run._note_leftovers(first, np.array([0.01 * size]))
    with pytest.raises(AssertionError, match=f"flow {run.flow_qid(0)}: .* undelivered at its finish"):
        run._check_delivered()


class _RanksTheFinished(Scheduler):
    """Ranks a flow that is not active (the first flow it ever saw): a broken ranking."""

    first = None

    def decide(self, view: FlowView) -> Allocation:
        active = view.active.tolist()
        self.first = active[0] if self.first is None else self.first
        for f in active:
            view.rate[f] = 0.0
        view.rate[active[0]] = 1e3
        return Allocation(view.rate, np.array([self.first, *active]), 1 + len(active))


class _CollectorWatcher(Scheduler):
    """Fair share of one link, noting whether the cyclic garbage collector was on at each decision."""

    name = "watcher"

    def __init__(self) -> None:
        self.enabled: list[bool] = []

    def decide_snapshot(self, snapshot: Snapshot) -> Decision:
        self.enabled.append(gc.isenabled())
        share = 1e6 / max(1, len(snapshot.flows))
        return Decision({f.flow_id: share for f in snapshot.flows}, {f.flow_id: 0 for f in snapshot.flows})


@pytest.mark.parametrize("enabled_before", [True, False])
def test_the_garbage_collector_is_paused_during_simulate_and_restored(enabled_before: bool) -> None:
    watcher = _CollectorWatcher()
    (gc.enable if enabled_before else gc.disable)()
    try:
        simulate(build("two_hosts", 1e6), [fig2_job()], watcher)
        assert gc.isenabled() is enabled_before
    finally:
        gc.enable()
    assert watcher.enabled and not any(watcher.enabled)
    with pytest.raises(SimulationError):  # restored on the way out of an error too
        simulate(build("two_hosts", 1e6), [fig2_job()], _Starver())
    assert gc.isenabled()


def _active(fid):
    from echelonflow.schedulers.base import ActiveFlow

    return ActiveFlow(fid, "g", (), 1.0, 0.0, 0.0, 0.0)


def test_bad_placement_is_a_user_error() -> None:
    with pytest.raises(UserError, match="host 'h9' is not in topology"):
        simulate(build("two_hosts", 1e6), [fig2_job(dst="h9")], get_scheduler("fair"))
    with pytest.raises(UserError, match="duplicate job id 'fig2'"):
        simulate(build("two_hosts", 1e6), [fig2_job(), fig2_job()], get_scheduler("fair"))


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_many_jobs_on_a_fattree_deliver_everything(name: str) -> None:
    topo = build("fattree", 10e6, k=4)
    jobs = [fig2_job(f"p{i}", f"h{i + 1}", f"h{16 - i}") for i in range(6)]
    result = simulate(topo, jobs, get_scheduler(name))  # invariants checked on every decision
    assert len(result.flows) == 18
    for flow in result.flows.values():
        assert flow.finish_s >= flow.start_s + flow.size_bytes / B_BYTES_PER_S - 1e-9  # never beats line rate
    for job_id, job in result.jobs.items():
        assert job.completion_s >= 6.0 - 1e-9  # 3 s compute + 2 s transfer + 1 s compute, at best
        assert job.slowdown >= 1.0 - 1e-9 or name != "fair", job_id


# ---------------------------------------------------------------------- arrivals, weights, wake-ups
def _coflow_job(job_id: str, pairs, size: int, arrival_s: float = 0.0, weight: float = 1.0) -> Job:
    job = Job(job_id, arrival_s=arrival_s, weight=weight)
    for i, (src, dst) in enumerate(pairs):
        job.add(FlowTask(f"f{i}", src, dst, size, echelon_id="c"))
    return job


def test_a_job_starts_at_its_arrival_and_completes_from_it() -> None:
    topo = build("two_hosts", 8e6, mtu_bytes=None)  # 1e6 payload bytes/s
    early = _one_flow_job("early", "h1", "h2", 10**6)
    late = Job("late", arrival_s=5.0)
    late.add(ComputeTask("think", "h1", 0.5))
    late.add(FlowTask("f", "h1", "h2", 10**6, ("think",), echelon_id="e"))
    for name in sorted(SCHEDULERS):
        result = simulate(topo, [early, late], get_scheduler(name))
        assert result.tasks["late/think"].start_s == pytest.approx(5.0), name
        assert result.flows["late/f"].finish_s == pytest.approx(6.5), name
        assert result.jobs["late"].completion_s == pytest.approx(1.5), name  # from its arrival
        assert result.jobs["late"].slowdown == pytest.approx(1.0), name


def test_overlapping_arrivals_share_and_fifo_keeps_arrival_order() -> None:
    topo = build("two_hosts", 8e6, mtu_bytes=None)
    first = _coflow_job("first", [("h1", "h2")], 2 * 10**6)
    second = _coflow_job("second", [("h1", "h2")], 5 * 10**5, arrival_s=1.0)
    fifo = simulate(topo, [first, second], get_scheduler("fifo"))
    assert fifo.flows["first/f0"].finish_s == pytest.approx(2.0)
    assert fifo.jobs["second"].completion_s == pytest.approx(1.5)  # waits 1 s, sends 0.5 s
    varys = simulate(topo, [first, second], get_scheduler("coflow"))  # smaller remaining first
    assert varys.flows["second/f0"].finish_s == pytest.approx(1.5)
    assert varys.flows["first/f0"].finish_s == pytest.approx(2.5)


@pytest.mark.parametrize("name", ["coflow", "echelon", "sincronia"])
def test_weight_lets_the_heavier_of_two_equal_coflows_go_first(name: str) -> None:
    topo = build("two_hosts", 8e6, mtu_bytes=None)
    for heavy in ("a", "b"):
        jobs = [_coflow_job(j, [("h1", "h2")], 10**6, weight=3.0 if j == heavy else 1.0) for j in "ab"]
        result = simulate(topo, jobs, get_scheduler(name))
        light = "b" if heavy == "a" else "a"
        assert result.jobs[heavy].completion_s == pytest.approx(1.0), (name, heavy)
        assert result.jobs[light].completion_s == pytest.approx(2.0), (name, heavy)


def test_sincronia_orders_by_bottleneck_not_by_total_size() -> None:
    # On a big switch: "wide" sends 1 MB from each of 3 hosts to 3 others (3 MB in all, 1 MB per port);
    # "narrow" sends 2 MB over one port pair.  Smallest bottleneck first: wide (1 s) before narrow (2 s).
    topo = build("bigswitch", 8e6, mtu_bytes=None, hosts=8)
    wide = _coflow_job("wide", [("h1", "h4"), ("h2", "h5"), ("h3", "h6")], 10**6)
    narrow = _coflow_job("narrow", [("h1", "h4")], 2 * 10**6)
    result = simulate(topo, [narrow, wide], get_scheduler("sincronia"))
    assert result.jobs["wide"].completion_s == pytest.approx(1.0)
    assert result.jobs["narrow"].completion_s == pytest.approx(3.0)


def test_aalo_demotes_a_coflow_when_it_crosses_its_queue_threshold() -> None:
    # 1 Gbit/s (2^30 bit/s) link: Aalo's first queue ends at 10 MiB attained.  "big" (40 MiB) starts at 0,
    # "small" (5 MiB) arrives while big is still in queue 0 and waits behind it (FIFO within a queue)
    # until big crosses 10 MiB; then small, still in queue 0, goes first.  The simulator must wake up at
    # that crossing (Decision.valid_until_s) although no flow arrives or leaves then.
    mib, rate = 2**20, 2**30
    topo = build("two_hosts", rate, mtu_bytes=None)
    big = _coflow_job("big", [("h1", "h2")], 40 * mib)
    small = _coflow_job("small", [("h1", "h2")], 5 * mib, arrival_s=0.01)
    result = simulate(topo, [big, small], get_scheduler("aalo"))
    crossing_s = 10 * mib * 8 / rate
    assert result.flows["small/f0"].finish_s == pytest.approx(crossing_s + 5 * mib * 8 / rate)
    assert result.flows["big/f0"].finish_s == pytest.approx(45 * mib * 8 / rate)
    fifo = simulate(topo, [big, small], get_scheduler("fifo"))
    assert fifo.flows["small/f0"].finish_s == pytest.approx(45 * mib * 8 / rate)



def test_every_run_starts_with_a_scheduler_that_has_learned_nothing() -> None:
    """Alone runs (for slowdowns) must not profit from what echelon-online learned running together."""
    from echelonflow.workloads import generate

    topo = build("fattree", 10e6, k=4)
    jobs = [generate("gpipe", "p", ["h1", "h5", "h9", "h13"], {"iterations": 2, "micro_batches": 3,
                                                                "activation_bytes": 300000}),
            generate("ring_allreduce", "r", ["h2", "h6", "h10", "h14"], {"iterations": 2, "bytes": 2000000})]
    together = simulate(topo, jobs, get_scheduler("echelon-online"))
    for job in jobs:
        alone = simulate(topo, [job], get_scheduler("echelon-online")).jobs[job.job_id].completion_s
        result = together.jobs[job.job_id]
        assert result.slowdown == pytest.approx(result.completion_s / alone)


def _through_snapshot(decide, scheduler: Scheduler, view: FlowView) -> Allocation:
    """``decide`` (a policy's own) run on the view's snapshot instead of its arrays: the path a policy
    that decides on snapshots takes."""
    on_snapshot = snapshot_view(view.snapshot(), scheduler.active_order, scheduler.links())
    return view.allocation_of(on_snapshot.decision_of(decide(scheduler, on_snapshot)))


class _SnapshotOnline(EchelonOnlineScheduler):
    """echelon-online forced onto snapshots: a snapshot per decision."""

    def decide(self, view):
        return _through_snapshot(EchelonOnlineScheduler.decide, self, view)


# fb2010[:12] (minutes of snapshots) is in the reference tier; fb2010's 10-coflow reference pins
# echelon-online in the default suite.
@pytest.mark.parametrize("scenario_name, first", [("fattree-gpipe-ring", None),
                                                  pytest.param("fb2010", 12, marks=pytest.mark.reference)])
def test_echelon_online_on_the_flow_table_decides_as_on_snapshots(scenario_name: str, first) -> None:
    """The simulator gives echelon-online what a snapshot would tell it as arrays (its ``groups``) and
    lets it write its estimates into a copy of the flow table; every flow must finish at the same time
    to the last bit as when it decides on snapshots, and with learned parts (gpipe-ring repeats
    iterations)."""
    scenario = load_scenario(scenario_name)
    jobs = scenario.jobs[:first] if first else scenario.jobs
    learner = EchelonOnlineScheduler()
    fast = simulate(scenario.topology, jobs, learner, alone_runs=False)
    slow = simulate(scenario.topology, jobs, _SnapshotOnline(), alone_runs=False)
    assert learner.learned
    for qid, task in slow.tasks.items():
        assert fast.tasks[qid].finish_s == task.finish_s, qid


def test_echelon_online_renumbering_its_templates_changes_no_decision(monkeypatch) -> None:
    """What echelon-online keeps per flow number (each flow's template number) is dropped and rebuilt
    whenever it holds more templates than the active flows need (``PARTS_SLACK`` 0: at nearly every
    decision with a new flow); every flow must still finish at the same time to the last bit."""
    from echelonflow.schedulers import echelon_online

    scenario = load_scenario("fattree-gpipe-ring")
    kept = simulate(scenario.topology, scenario.jobs, EchelonOnlineScheduler(), alone_runs=False)
    made = []
    init = echelon_online._TemplateNumbers.__init__

    def counted(numbers) -> None:
        made.append(1)
        init(numbers)

    monkeypatch.setattr(echelon_online, "PARTS_SLACK", 0)
    monkeypatch.setattr(echelon_online._TemplateNumbers, "__init__", counted)
    renumbered = simulate(scenario.topology, scenario.jobs, EchelonOnlineScheduler(), alone_runs=False)
    assert len(made) > 3, len(made)  # renumbered again and again, not once at the start
    for qid, task in kept.tasks.items():
        assert renumbered.tasks[qid].finish_s == task.finish_s, qid


class _SnapshotAalo(AaloScheduler):
    """Aalo forced onto snapshots: a snapshot per decision."""

    def decide(self, view):
        return _through_snapshot(AaloScheduler.decide, self, view)


@pytest.mark.parametrize("scenario_name, first", [("fattree-gpipe-ring", None), ("fattree-fsdp-ps", None),
                                                  ("fb2010", 10)])
def test_aalo_on_the_flow_tables_arrays_decides_as_on_snapshots(scenario_name: str, first) -> None:
    """The simulator gives Aalo its flow table's arrays (attained bytes per group, slowest link per
    flow) instead of a snapshot per decision; queues, order and queue-change expiries stay the same."""
    scenario = load_scenario(scenario_name)
    jobs = scenario.jobs[:first] if first else scenario.jobs
    fast = simulate(scenario.topology, jobs, AaloScheduler(), alone_runs=False)
    slow = simulate(scenario.topology, jobs, _SnapshotAalo(), alone_runs=False)
    for qid, task in slow.tasks.items():
        assert fast.tasks[qid].finish_s == pytest.approx(task.finish_s, rel=1e-9, abs=1e-9), qid


# ------------------------------------------------------------------ never faster than physics
def _random_jobs(rng: random.Random, hosts: list[str], arrival_s: float, size_top: float,
                 duration_top: float) -> list[Job]:
    """One to three small random DAGs (computes and flows, some grouped in EchelonFlows), arriving at or
    after ``arrival_s``, flows of 1 byte up to ``size_top`` and computes of 0 up to ``duration_top``."""
    jobs = []
    for j in range(rng.randint(1, 3)):
        job = Job(f"j{j}", arrival_s=arrival_s + rng.choice([0.0, rng.uniform(0, duration_top)]),
                  weight=rng.choice([1.0, rng.uniform(1e-3, 1e3)]))
        for k in range(rng.randint(1, 6)):
            deps = tuple(sorted(set(rng.sample(list(job.tasks), rng.randint(0, min(2, len(job.tasks)))))))
            if rng.random() < 0.6:
                src, dst = rng.sample(hosts, 2)
                size = max(1, int(10 ** rng.uniform(0, math.log10(size_top))))
                job.add(FlowTask(f"f{k}", src, dst, size, deps, echelon_id=rng.choice(["", "e0", "e1"])))
            else:
                duration_s = rng.choice([0.0, rng.uniform(0, duration_top)])
                job.add(ComputeTask(f"c{k}", rng.choice(hosts), duration_s, deps))
        jobs.append(job)
    return jobs


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9), rate_bps=st.sampled_from([1e3, 1e6, 1e9, 1e12]),
       arrival_s=st.sampled_from([0.0, 3.0, 604800.0, 1e11]), size_top=st.sampled_from([1e3, 1e9, 1e15]),
       duration_top=st.sampled_from([1e-6, 1.0, 604800.0]))
@example(seed=0, rate_bps=1e7, arrival_s=1e11, size_top=1e8, duration_top=1.0)
@example(seed=3, rate_bps=1e3, arrival_s=0.0, size_top=1e15, duration_top=1.0)
def test_no_completion_beats_the_job_alone_on_an_empty_fabric(
    name: str, seed: int, rate_bps: float, arrival_s: float, size_top: float, duration_top: float
) -> None:
    """Every scheduler, random small jobs at large and small times, rates and sizes: the run ends (no
    scheduler decides for ever without anything moving) and no job finishes sooner after its arrival
    than its lower bound (echelonflow.bounds) allows, up to the clock's own rounding."""
    rng = random.Random(seed)
    topology = rng.choice([lambda: build("two_hosts", rate_bps),
                           lambda: build("bigswitch", rate_bps, hosts=4),
                           lambda: build("dumbbell", rate_bps, hosts_per_side=2)])()
    jobs = _random_jobs(rng, topology.hosts, arrival_s, size_top, duration_top)
    result = simulate(topology, jobs, get_scheduler(name), alone_runs=False)
    for job in jobs:
        bound_s = lower_bound_s(job, topology)
        done_s = result.jobs[job.job_id].completion_s
        slack_s = 1e-6 * bound_s + 1024 * math.ulp(job.arrival_s + bound_s)
        assert done_s >= bound_s - slack_s, (job.job_id, done_s, bound_s)


def test_a_tiny_rate_under_aalo_ends(scheduler_name: str = "aalo") -> None:
    """The slowest rate allowed (1 kbit/s) under a flow of 1 PB: Aalo's first queue threshold (0.01
    bytes at that rate) is closer than the flow's remaining bytes can count (0.125 bytes at 1e15), so
    its wake-ups moved nothing and it decided for ever; now each step moves bytes and the run ends."""
    job = Job("j")
    job.add(FlowTask("f", "h1", "h2", 10**15))
    result = simulate(build("two_hosts", 1e3, mtu_bytes=None), [job], get_scheduler(scheduler_name))
    assert result.jobs["j"].completion_s == pytest.approx(8e15 / 1e3, rel=1e-9)


@pytest.mark.parametrize("name", ["echelon", "fair"])
def test_every_flow_is_pinned_where_the_topology_pins_it(name: str) -> None:
    """A host pair with one shortest path has its links looked up once per run (``_Run._paths``): every
    flow still gets the path its id pins (``path_for``; ``pair_path`` for a scheduler that enforces
    nothing), on a fat-tree whose pairs have one path (one edge switch) or several."""
    scenario = load_scenario("fattree-gpipe-ring")
    topology = scenario.topology
    pairs = Job("pairs")  # every ordered pair of six hosts, twice: one edge switch, one pod, across pods
    for n, (src, dst) in enumerate((a, b) for a in topology.hosts[:6] for b in topology.hosts[:6] if a != b):
        pairs.add(FlowTask(f"f{n}", src, dst, 1_000 + n, (), "all"))
        pairs.add(FlowTask(f"g{n}", src, dst, 2_000 + n, (), "all"))
    jobs = [*scenario.jobs, pairs]
    specs = {job.job_id: echelons_of(job) for job in jobs}
    run = engine._Run(topology, jobs, get_scheduler(name), False, specs)
    table, counts = run.table, {1: 0, 2: 0}
    for f, t in enumerate(run.flow_task):
        task, qid = run.task(t), run.qid(t)
        pinned = (topology.path_for(task.src, task.dst, qid) if run.scheduler.enforces
                  else topology.pair_path(task.src, task.dst))
        want = [run.link_index[link] for link in topology.links_of(pinned)]
        assert table.path_links[table.path_ptr[f]:table.path_ptr[f + 1]].tolist() == want, qid
        counts[min(2, len(topology.equal_cost_paths(task.src, task.dst)))] += 1
    assert counts[1] > 0 and counts[2] > 0
