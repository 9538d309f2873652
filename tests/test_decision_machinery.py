"""The decision machinery's shortcuts change no result (docs/performance.md, "The decision machinery
at trace scale"): each is checked against the plain computation it replaces, which fails when the
shortcut is wrong.

* the simulator finds a decision's groups from its per-group counts, not by walking the active flows,
  visits only the hosts whose computes changed, and vouches what a decision may take as given
  (``FlowView.clean``): on random DAG workloads, every scheduler, every task's start and finish equal
  to the run that walks the flows, visits every host and vouches nothing (1e-9 relative);
* ``priority.serve_classes`` gathers the served flows in one numpy step: equal to slicing group by group;
* Varys's spare split (``varys_kernels._split_spare``) walks only the flows it found eligible: rates and
  residual equal bit for bit to the three walks over every skipped flow;
* ``echelon`` deciding at every flow event skips its back-fill: every ranked flow with bytes left
  already crosses a full link, so back-filling would give nothing; and it ranks and serves each group's
  flows in one walk: the rates are those of serving the ranking greedily;
* the simulator vouches what a decision starts from (``FlowView.clean``, ``rated_before``): ``active`` is
  in flow-number order, no active flow is dust or pathless, and only the flows the last decision listed
  have a rate; ``echelon`` then clears just those rates and does not read its kept Coflows' runs: the
  same times as without.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from echelonflow import echelon as echelon_mod
from echelonflow.model import FlowTask, Job
from echelonflow.schedulers import SCHEDULERS, get_scheduler, kernels, priority, varys_kernels
from echelonflow.schedulers.base import EPS_BYTES
from echelonflow.schedulers.echelon import EchelonScheduler
from echelonflow.schedulers.view import snapshot_view
from simulator import engine
from tests.instances import TOPOLOGIES, assert_same_times, placeable, random_snapshot, workloads

pytestmark = pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")


class _PlainRun(engine._Run):
    """The run without the shortcuts: groups found by walking the active flows' groups, every host that
    ever queued a compute visited at every step, in the order it first did, and nothing vouched to the
    scheduler (``FlowView.clean``: each policy checks every active flow's bytes and path, and clears
    every rate)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.group_first = None
        self.clean = False

    def _dispatch_computes(self) -> None:
        self.dispatch_due.clear()
        for host in list(self.host_ready):
            self._start_next(host)


def _built(run_type: type, kind: str, jobs: list, scheduler) -> engine._Run:
    """A run of ``jobs`` on topology ``kind`` with ``scheduler``, decisions checked, not yet run."""
    specs = {job.job_id: echelon_mod.echelons_of(job) for job in jobs}
    return run_type(TOPOLOGIES[kind](), jobs, scheduler, True, specs)


def _times(run_type: type, kind: str, jobs: list, name: str) -> tuple[list, list]:
    run = _built(run_type, kind, jobs, get_scheduler(name))
    run.run()
    return run.start_s, run.finish_s


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_every_scheduler_gives_the_same_times_as_the_plain_run(workload) -> None:
    kind, jobs = workload
    if not placeable(kind, jobs):
        return
    for name in SCHEDULERS:
        start, finish = _times(engine._Run, kind, jobs, name)
        plain_start, plain_finish = _times(_PlainRun, kind, jobs, name)
        assert_same_times(start, plain_start)
        assert_same_times(finish, plain_finish)


def test_the_plain_run_is_what_the_shortcut_replaces() -> None:
    """A run whose counts lie (a group marked empty while its flows are active) no longer equals the
    plain one: the comparison above can fail."""
    kind, jobs = "bigswitch", _two_group_job()
    specs = {job.job_id: echelon_mod.echelons_of(job) for job in jobs}
    run = engine._Run(TOPOLOGIES[kind](), jobs, get_scheduler("sincronia"), True, specs)
    run.run()
    broken = engine._Run(TOPOLOGIES[kind](), jobs, get_scheduler("sincronia"), False, specs)
    broken.group_first = np.zeros_like(broken.group_first)  # every group found at the first flow
    broken.run()
    assert broken.finish_s != run.finish_s


def _two_group_job() -> list:
    job = Job("j")
    job.add(FlowTask("a", "h1", "h2", 1_000_000, echelon_id="e0"))
    job.add(FlowTask("b", "h1", "h3", 3_000_000, echelon_id="e1"))
    job.add(FlowTask("c", "h4", "h2", 2_000_000, echelon_id="e1"))
    return [job]


@pytest.mark.parametrize("seed", range(30))
def test_serving_gathers_the_groups_as_slices_do(seed) -> None:
    rng = random.Random(seed)
    sizes = [rng.randint(0, 5) for _ in range(rng.randint(1, 8))]
    ptr = [0]
    for size in sizes:
        ptr.append(ptr[-1] + size)
    active = np.array(sorted(rng.sample(range(1000), ptr[-1])), dtype=np.int64)
    order = list(range(len(sizes)))
    rng.shuffle(order)
    classes, k = [], 0
    while k < len(order):
        step = rng.randint(1, 3)
        classes.append(order[k:k + step])
        k += step
    served, served_ptr = priority._gathered(active, ptr, order, [len(c) for c in classes])
    pieces = [active[ptr[g]:ptr[g + 1]] for g in order]
    assert served.tolist() == np.concatenate(pieces).tolist()
    expected_ptr = [0]
    for members in classes:
        expected_ptr.append(expected_ptr[-1] + sum(ptr[g + 1] - ptr[g] for g in members))
    assert served_ptr.tolist() == expected_ptr


def _split_spare_plain(sel, starts, skipped, path_ptr, path_links, residual, capacity, rate) -> None:
    """Step 3 of Varys's decision as first written: three walks over every skipped flow."""
    count = [0] * len(residual)

    def path_min(f):
        return min((residual[path_links[p]] for p in range(path_ptr[f], path_ptr[f + 1])), default=np.inf)

    for g in skipped:
        for k in range(starts[g], starts[g + 1]):
            f = sel[k]
            if path_min(f) <= 0:
                continue
            for p in range(path_ptr[f], path_ptr[f + 1]):
                count[path_links[p]] += 1
    for g in skipped:
        for k in range(starts[g], starts[g + 1]):
            f = sel[k]
            if path_min(f) <= 0:
                continue
            links = path_links[path_ptr[f]:path_ptr[f + 1]]
            rate[f] = min(residual[li] / count[li] for li in links)
    for g in skipped:
        for k in range(starts[g], starts[g + 1]):
            f = sel[k]
            if rate[f] > 0:
                for p in range(path_ptr[f], path_ptr[f + 1]):
                    li = path_links[p]
                    left = residual[li] - rate[f]
                    residual[li] = left if left > capacity[li] * kernels.EPS_RELATIVE else 0.0


@pytest.mark.parametrize("seed", range(60))
def test_the_spare_split_walks_only_eligible_flows_with_the_same_results(seed) -> None:
    rng = random.Random(seed)
    n_links = rng.randint(2, 12)
    capacity = np.array([rng.choice([1e6, 1e9, rng.uniform(1e5, 1e9)]) for _ in range(n_links)])
    residual = np.array([rng.choice([0.0, c, rng.uniform(0, c)]) for c in capacity])
    n_flows = rng.randint(1, 30)
    paths = [rng.sample(range(n_links), rng.randint(1, min(3, n_links))) for _ in range(n_flows)]
    path_ptr = np.cumsum([0] + [len(p) for p in paths]).astype(np.int64)
    path_links = np.array([li for p in paths for li in p], dtype=np.int64)
    sel = np.array(rng.sample(range(n_flows), n_flows), dtype=np.int64)
    cuts = sorted(rng.sample(range(1, n_flows), rng.randint(0, n_flows - 1))) if n_flows > 1 else []
    starts = np.array([0, *cuts, n_flows], dtype=np.int64)
    groups = list(range(len(starts) - 1))
    skipped = np.array(rng.sample(groups, rng.randint(1, len(groups))), dtype=np.int64)
    rate, expected_rate = np.zeros(n_flows), np.zeros(n_flows)
    got_residual, expected_residual = residual.copy(), residual.copy()
    varys_kernels._split_spare(sel, starts, skipped, len(skipped), path_ptr, path_links, got_residual,
                               capacity, rate)
    _split_spare_plain(sel, starts, skipped.tolist(), path_ptr, path_links, expected_residual, capacity,
                       expected_rate)
    assert rate.tolist() == expected_rate.tolist()
    assert got_residual.tolist() == expected_residual.tolist()


@pytest.mark.parametrize("seed", range(80))
def test_echelon_at_every_flow_event_leaves_no_flow_a_free_path(seed) -> None:
    """What makes skipping the back-fill exact: after serving, every ranked flow crosses a link loaded
    to its capacity (to rounding), so a back-fill would find no spare capacity for any of them."""
    snap = random_snapshot(seed, 1 + seed % 25)
    scheduler = EchelonScheduler()
    view = snapshot_view(snap, scheduler.active_order, scheduler.links())
    assert view.every_flow
    allocation = scheduler.decide(view)
    table = view.table
    load = np.zeros(len(table.capacity))
    for f in view.active.tolist():
        for p in range(table.path_ptr[f], table.path_ptr[f + 1]):
            load[table.path_links[p]] += view.rate[f]
    for f in allocation.ranked[:allocation.count].tolist():
        links = table.path_links[table.path_ptr[f]:table.path_ptr[f + 1]].tolist()
        assert any(load[li] >= table.capacity[li] * (1 - 1e-9) for li in links), (seed, f)


@pytest.mark.parametrize("seed", range(80))
def test_echelon_at_every_flow_event_serves_its_ranking_greedily(seed) -> None:
    """Deciding at every flow event, echelon ranks and serves each group's flows in one walk: every
    ranked flow, in rank order, takes the least residual on its path (plain Python from the full
    capacities), bit for bit, and every other flow gets nothing."""
    snap = random_snapshot(seed, 1 + seed % 25)
    scheduler = EchelonScheduler()
    view = snapshot_view(snap, scheduler.active_order, scheduler.links())
    allocation = scheduler.decide(view)
    table = view.table
    residual = np.array(table.capacity, dtype=np.float64)
    expected = dict.fromkeys(view.active.tolist(), 0.0)
    for f in allocation.ranked[:allocation.count].tolist():
        links = table.path_links[table.path_ptr[f]:table.path_ptr[f + 1]].tolist()
        spare = min(residual[li] for li in links)
        if spare > 0:
            expected[f] = spare
            for li in links:
                left = residual[li] - spare
                residual[li] = left if left > table.capacity[li] * kernels.EPS_RELATIVE else 0.0
    assert {f: view.rate[f] for f in expected} == expected


class _Vouched(EchelonScheduler):
    """``echelon`` with every Coflow kept (``exact_above`` 0) that checks, at each decision, what the
    simulator vouches (``clean``, ``rated_before``); with ``trusting`` False it ignores it (clears every
    rate, reads every run)."""

    def __init__(self, trusting: bool) -> None:
        self.exact_above = 0
        self.trusting = trusting
        self.vouched = 0

    def decide(self, view):
        if view.clean and view.rated_before is not None:
            self.vouched += 1
            active = np.asarray(view.active)
            listed = set(np.asarray(view.rated_before).tolist())
            assert np.all(np.diff(active) > 0)
            table = view.table
            assert np.all(np.asarray(table.remaining)[active] > EPS_BYTES)
            assert np.all(np.diff(np.asarray(table.path_ptr))[active] > 0)
            assert all(view.rate[f] == 0.0 for f in active.tolist() if f not in listed)
            if not self.trusting:
                view.clean = False
        return super().decide(view)


def _vouched_times(kind: str, jobs: list, trusting: bool) -> tuple[list, list, int]:
    scheduler = _Vouched(trusting)
    run = _built(engine._Run, kind, jobs, scheduler)
    run.run()
    assert scheduler.vouched == run.decisions  # every decision lists its rated flows: each next one vouched
    return run.start_s, run.finish_s, scheduler.vouched


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_what_the_simulator_vouches_holds_and_echelon_trusting_it_gives_the_same_times(workload) -> None:
    kind, jobs = workload
    if not placeable(kind, jobs):
        return
    start, finish, _ = _vouched_times(kind, jobs, trusting=True)
    plain_start, plain_finish, _ = _vouched_times(kind, jobs, trusting=False)
    assert_same_times(start, plain_start)
    assert_same_times(finish, plain_finish)


def test_a_flow_of_dust_from_the_start_leaves_nothing_vouched() -> None:
    """A flow smaller than dust (only the Python API can declare one: inputs hold whole bytes) would sit
    among the active flows without bytes to move: the simulator vouches nothing, so every decision
    clears every rate as before (the flow then starves, as it did)."""
    job = Job("j")
    job.add(FlowTask("a", "h1", "h2", 1_000_000, echelon_id="e0"))
    job.add(FlowTask("b", "h1", "h3", EPS_BYTES / 2, echelon_id="e0"))
    scheduler = _Vouched(trusting=True)
    run = _built(engine._Run, "bigswitch", [job], scheduler)
    with pytest.raises(engine.SimulationError, match="starve"):
        run.run()
    assert run.decisions > 0 and scheduler.vouched == 0
    job.tasks["b"] = FlowTask("b", "h1", "h3", 1, echelon_id="e0")
    _, _, vouched = _vouched_times("bigswitch", [job], trusting=True)
    assert vouched > 0
