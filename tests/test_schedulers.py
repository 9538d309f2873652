"""Scheduler properties on random instances, every policy through ONE shared validator.

Feasible (no directed link over capacity), non-negative, work-conserving (every flow with bytes left
crosses a saturated link, so it could not go faster without overloading one), deterministic, ranks a
permutation; plus echelon's optimality on one link (Jackson's rule: preemptive EDF reaches
t* = max_j (C_j / B - (d_j - now))) and the paper's Fig. 2 worked table.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from echelonflow.errors import UserError
from echelonflow.schedulers import SCHEDULERS, get_scheduler
from echelonflow.schedulers.base import ActiveFlow, Decision, Snapshot
from echelonflow.schedulers.echelon import EchelonScheduler, EchelonVarysScheduler
from echelonflow.schedulers.varys import CoflowScheduler
from echelonflow.schedulers.view import decision_on_snapshot
from tests.instances import random_snapshot

REL = 1e-6


#: Schedulers that leave capacity unused by design: CoflowSim's FAIR gives each flow its smallest per-link
#: share and hands nothing that leaves over to anyone.
NOT_WORK_CONSERVING = {"port-fair"}
#: Schedulers that give every flow rank 0 (one shared class).
RANKS_ALL_ZERO = {"fair", "port-fair"}


def validate(snapshot: Snapshot, decision: Decision, work_conserving: bool = True) -> None:
    """The invariants every scheduler keeps (shared by all policies); work conservation when asked."""
    active = [f for f in snapshot.flows if f.remaining_bytes > 1e-9]
    assert set(decision.rate_bps) == {f.flow_id for f in snapshot.flows}
    assert set(decision.rank) == {f.flow_id for f in snapshot.flows}
    load: dict = {}
    for flow in snapshot.flows:
        rate = decision.rate_bps[flow.flow_id]
        assert rate >= 0.0, (flow.flow_id, rate)
        for link in flow.path:
            load[link] = load.get(link, 0.0) + rate
    for link, used in load.items():
        assert used <= snapshot.capacity_bps[link] * (1 + REL), (link, used)
    if not work_conserving:
        return
    for flow in active:  # work conservation: some link of the path is full
        slack = min(snapshot.capacity_bps[link] - load[link] for link in flow.path)
        full = min(snapshot.capacity_bps[link] for link in flow.path)
        assert slack <= full * REL, (flow.flow_id, slack)




@pytest.mark.parametrize("name", sorted(SCHEDULERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9), n_flows=st.integers(1, 25))
def test_every_scheduler_is_feasible_work_conserving_deterministic(
    name: str, seed: int, n_flows: int
) -> None:
    snapshot = random_snapshot(seed, n_flows)
    first = decision_on_snapshot(get_scheduler(name), snapshot)
    validate(snapshot, first, name not in NOT_WORK_CONSERVING)
    shuffled = Snapshot(snapshot.now_s, snapshot.capacity_bps, list(reversed(snapshot.flows)))
    again = decision_on_snapshot(get_scheduler(name), shuffled)
    assert again.rate_bps == first.rate_bps
    assert again.rank == first.rank
    assert sorted(first.rank.values()) == (
        [0] * len(first.rank) if name in RANKS_ALL_ZERO else list(range(len(first.rank)))
    )


NON_CLAIRVOYANT = sorted(n for n, cls in SCHEDULERS.items() if not cls.clairvoyant)


@pytest.mark.parametrize("name", NON_CLAIRVOYANT)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9), n_flows=st.integers(1, 25))
def test_non_clairvoyant_schedulers_ignore_sizes_and_ideal_finishes(
    name: str, seed: int, n_flows: int
) -> None:
    """Sizes and ideal finish times may change arbitrarily (a flow stays unfinished): same decision."""
    from dataclasses import replace

    snapshot = random_snapshot(seed, n_flows)
    rng = random.Random(seed + 1)
    blind = [
        replace(f, remaining_bytes=rng.uniform(1, 1e9) if f.remaining_bytes > 1e-9 else f.remaining_bytes,
                ideal_finish_s=rng.uniform(-5, 5), offset_s=rng.uniform(0, 5), reference_s=rng.uniform(-5, 5))
        for f in snapshot.flows
    ]
    first = decision_on_snapshot(get_scheduler(name), snapshot)
    second = decision_on_snapshot(get_scheduler(name), Snapshot(snapshot.now_s, snapshot.capacity_bps, blind))
    assert first.rank == second.rank and first.rate_bps == second.rate_bps


def _single_link_run(scheduler, flows, capacity_bps):
    """Fluid-simulate ``flows`` (no arrivals) on one link to completion; return finish times."""
    link = ("a", "b")
    now = max(f[3] for f in flows)  # all have started by now
    remaining = {fid: size for fid, size, _o, _r in flows}
    meta = {fid: (o, r) for fid, _s, o, r in flows}
    finish = {}
    for _ in range(10 * len(flows) + 10):
        live = [fid for fid in remaining if fid not in finish]
        if not live:
            break
        active = [
            ActiveFlow(fid, "g", (link,), remaining[fid], sum(meta[fid]), meta[fid][0], meta[fid][1])
            for fid in live
        ]
        snap = Snapshot(now, {link: capacity_bps}, active)
        decision = decision_on_snapshot(scheduler, snap)
        validate(snap, decision)
        dt = min(8 * remaining[f] / decision.rate_bps[f] for f in live if decision.rate_bps[f] > 0)
        now += dt
        for fid in live:
            left = remaining[fid] - decision.rate_bps[fid] * dt / 8
            if left <= 1e-9 * max(1.0, remaining[fid]):
                finish[fid] = now
                remaining[fid] = 0.0
            else:
                remaining[fid] = left
    assert len(finish) == len(flows)
    return finish


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 10**6), min_size=1, max_size=8),
    offsets=st.lists(st.floats(0, 5, allow_nan=False), min_size=8, max_size=8),
    ref=st.floats(0, 3, allow_nan=False),
)
def test_echelon_reaches_optimal_max_tardiness_on_one_link(sizes, offsets, ref) -> None:
    capacity_bps = 8e5
    flows = [(f"f{i}", float(s), offsets[i], ref) for i, s in enumerate(sizes)]
    now = ref
    # t* of the reference doc: sort by due date, cumulative bytes / B - (d_j - now)
    order = sorted(flows, key=lambda f: (f[3] + f[2], f[0]))
    cumulative, t_star = 0.0, float("-inf")
    for _fid, size, o, r in order:
        cumulative += size
        t_star = max(t_star, 8 * cumulative / capacity_bps - (r + o - now))
    finish = _single_link_run(EchelonScheduler(), flows, capacity_bps)
    achieved = max(finish[fid] - (r + o) for fid, _s, o, r in flows)
    assert achieved == pytest.approx(t_star, rel=1e-6, abs=1e-6)


def test_fig2_worked_table_at_t3() -> None:
    """docs/scheduler-design.md, Fig. 2 at t=3: remaining (1/2, 3/2, 2) of B=1.  The paper's sketch
    (``echelon-varys``) gives the just-in-time rates of the paper's table, 1/4, 1/2, 1/4; ``echelon``
    serves them earliest due first, as soon as possible: 1, 0, 0 (due 1, 2, 3; done at 3.5, 5 and 7:
    the least largest tardiness, 4, by Jackson's rule)."""
    link = ("h1", "s1")
    remaining = [0.5, 1.5, 2.0]
    flows = [ActiveFlow(f"f{i}", "g", (link,), rem, 1 + i, float(i), 1.0) for i, rem in enumerate(remaining)]
    sketch = decision_on_snapshot(EchelonVarysScheduler(), Snapshot(3.0, {link: 8.0}, flows))
    assert [sketch.rate_bps[f"f{i}"] / 8 for i in range(3)] == pytest.approx([0.25, 0.5, 0.25])
    decision = decision_on_snapshot(EchelonScheduler(), Snapshot(3.0, {link: 8.0}, flows))
    assert [decision.rate_bps[f"f{i}"] / 8 for i in range(3)] == pytest.approx([1.0, 0.0, 0.0])
    coflow = decision_on_snapshot(CoflowScheduler(), Snapshot(3.0, {link: 8.0}, flows))
    # Varys: MADD gives each flow remaining / Gamma with Gamma = 4 -> all finish together at 7
    assert [coflow.rate_bps[f"f{i}"] / 8 for i in range(3)] == pytest.approx([0.125, 0.375, 0.5])


@pytest.mark.parametrize("seed", range(20))
def test_coflow_alone_gets_varys_madd_rates_whatever_its_offsets(seed: int) -> None:
    """Varys's MADD, computed here from its definition: a Coflow alone finishes all flows together at
    Gamma = max over links (bits on the link / capacity), so flow j needs b_j / Gamma; back-fill may add
    to flows off the bottleneck, never to those on it.  Offsets (given here at random) do not matter."""
    instance = random_snapshot(seed, 12)
    r = instance.now_s - 1.0  # one group, one reference time
    flows = [ActiveFlow(f.flow_id, "coflow", f.path, f.remaining_bytes, r + f.offset_s, f.offset_s, r)
             for f in instance.flows if f.remaining_bytes > 1e-3]
    snapshot = Snapshot(instance.now_s, instance.capacity_bps, flows)
    load: dict = {}
    for f in flows:
        for link in f.path:
            load[link] = load.get(link, 0.0) + 8 * f.remaining_bytes
    gamma_s = max(bits / snapshot.capacity_bps[link] for link, bits in load.items())
    bottlenecks = {link for link, bits in load.items()
                   if bits / snapshot.capacity_bps[link] >= gamma_s * (1 - 1e-9)}
    decision = decision_on_snapshot(CoflowScheduler(), snapshot)
    validate(snapshot, decision)
    for f in flows:
        madd_bps = 8 * f.remaining_bytes / gamma_s
        assert decision.rate_bps[f.flow_id] >= madd_bps * (1 - 1e-9), f.flow_id
        if bottlenecks & set(f.path):
            assert decision.rate_bps[f.flow_id] == pytest.approx(madd_bps, rel=1e-9), f.flow_id


def test_coflows_go_smallest_effective_bottleneck_first() -> None:
    """Varys's SEBF on one link of 8 Mbit/s: a 1 MB Coflow (1 s alone) before a 2 x 2 MB one (4 s): the
    small one gets the whole link and finishes at 1 s, the large one waits (hand-computed)."""
    link = ("h1", "s1")
    flows = [ActiveFlow("big/a", "big", (link,), 2e6, 0.0, 0.0, 0.0),
             ActiveFlow("big/b", "big", (link,), 2e6, 0.0, 0.0, 0.0),
             ActiveFlow("small/a", "small", (link,), 1e6, 0.0, 0.0, 0.0)]
    decision = decision_on_snapshot(CoflowScheduler(), Snapshot(0.0, {link: 8e6}, flows))
    assert decision.rate_bps == pytest.approx({"small/a": 8e6, "big/a": 0.0, "big/b": 0.0})
    assert decision.rank["small/a"] < min(decision.rank["big/a"], decision.rank["big/b"])


def test_fair_shares_a_link_equally_and_gives_leftover_elsewhere() -> None:
    a, b = ("x", "y"), ("y", "z")
    flows = [ActiveFlow("long", "g1", (a, b), 10, 0, 0, 0), ActiveFlow("short", "g2", (b,), 10, 0, 0, 0),
             ActiveFlow("other", "g3", (a,), 10, 0, 0, 0)]
    decision = decision_on_snapshot(get_scheduler("fair"), Snapshot(0.0, {a: 10.0, b: 4.0}, flows))
    assert decision.rate_bps == pytest.approx({"long": 2.0, "short": 2.0, "other": 8.0})


def test_finished_and_tiny_flows_are_robust() -> None:
    link = ("a", "b")
    flows = [ActiveFlow("done", "g", (link,), 0.0, 1, 0, 1), ActiveFlow("dust", "g", (link,), 1e-12, 1, 0, 1),
             ActiveFlow("real", "g", (link,), 100.0, 2, 1, 1)]
    for name in SCHEDULERS:
        decision = decision_on_snapshot(get_scheduler(name), Snapshot(1.0, {link: 1e3}, flows))
        validate(Snapshot(1.0, {link: 1e3}, flows), decision, name not in NOT_WORK_CONSERVING)
        assert decision.rate_bps["done"] == 0.0


def test_unknown_scheduler_lists_valid_names() -> None:
    with pytest.raises(UserError, match="unknown scheduler 'varys'.*fair, coflow, echelon"):
        get_scheduler("varys")


def test_order_by_tardiness_option_is_validated_and_feasible() -> None:
    with pytest.raises(ValueError, match="order_by"):
        EchelonVarysScheduler(order_by="size")
    snapshot = random_snapshot(3, 15)
    validate(snapshot, decision_on_snapshot(EchelonVarysScheduler(order_by="tardiness"), snapshot))
    validate(snapshot, decision_on_snapshot(EchelonVarysScheduler(order_by="bottleneck"), snapshot))


def test_echelon_online_memory_is_bounded_over_many_jobs(monkeypatch) -> None:
    """A controller that runs for weeks hears of job after job: echelon-online keeps the newest group
    starts, open flow starts and learned templates only (a job still running relearns its templates every
    iteration, so it keeps them), what it learned of a live job is not lost, and its memo of flow ids
    forgets the flows that left once they outnumber the active ones (by PARTS_SLACK, 0 here)."""
    from echelonflow.schedulers import echelon_online
    from echelonflow.schedulers.base import FlowEvent
    from echelonflow.schedulers.echelon_online import EchelonOnlineScheduler

    for name in ("MAX_GROUPS", "MAX_OPEN_STARTS", "MAX_TEMPLATES"):
        monkeypatch.setattr(echelon_online, name, 50, raising=False)  # (absent: unbounded)
    online = EchelonOnlineScheduler()
    for job in range(400):
        for k in (0, 1):  # the long job "live" runs an iteration between every two jobs
            group = f"live/i{2 * job + k}.e" if k else f"j{job}/e"
            flow = f"live/i{2 * job + k}.f" if k else f"j{job}/f"
            online.observe(FlowEvent("start", flow, group, "h1", "h2", float(job)))
            online.observe(FlowEvent("finish", flow, group, "h1", "h2", job + 0.5, 1000.0 + job))
        online.observe(FlowEvent("start", f"j{job}/aborted", f"j{job}/e", "h1", "h2", float(job)))
    assert len(online.group_start_s) <= 50 and len(online.flow_start_s) <= 50 and len(online.learned) <= 50
    assert online.estimate_remaining_bytes("live/i9999.f", 0.0) == 1399.0  # the live job's last iteration
    assert online.estimate_remaining_bytes("j399/f", 0.0) == 1399.0 and "j0/f" not in online.learned
    link = ("a", "b")
    monkeypatch.setattr(echelon_online, "PARTS_SLACK", 0)
    remembered = []
    for job in range(3):  # two active flows a decision: the third forgets the first two's
        flows = [ActiveFlow(f"j{job}/i1.f{m}", f"j{job}/i1.e", (link,), 1.0, 0.0, 0.0, 0.0) for m in range(2)]
        decision_on_snapshot(online, Snapshot(1.0, {link: 8e6}, flows))
        remembered.append(len(online.parts))
    assert remembered == [2, 4, 2] and sorted(online.parts) == ["j2/i1.f0", "j2/i1.f1"]


def test_echelon_online_learns_sizes_and_offsets_from_the_previous_iteration() -> None:
    """Once iteration 0 was observed, iteration 1 is decided exactly as clairvoyant echelon decides it."""
    from echelonflow.schedulers.base import FlowEvent
    from echelonflow.schedulers.echelon_online import EchelonOnlineScheduler, template

    assert template("job/i12.a0.m3") == ("job/a0.m3", 12) and template("job/x.y") == ("job/x.y", None)
    link = ("a", "b")
    sizes, offsets = [3e6, 1e6, 2e6], [0.0, 1.0, 2.5]
    online = EchelonOnlineScheduler()
    for m, (size, offset) in enumerate(zip(sizes, offsets)):
        online.observe(FlowEvent("start", f"j/i0.a.m{m}", "j/i0.a", "h1", "h2", 10.0 + offset))
        online.observe(FlowEvent("finish", f"j/i0.a.m{m}", "j/i0.a", "h1", "h2", 20.0 + m, size))
    now, start = 31.0, 30.0
    truth = [ActiveFlow(f"j/i1.a.m{m}", "j/i1.a", (link,), sizes[m], start + offsets[m], offsets[m], start,
                        group_start_s=start) for m in range(3)]
    blind = [ActiveFlow(f.flow_id, f.echelon_id, f.path, 1.0 + m, 0.0, 0.0, 0.0, group_start_s=start)
             for m, f in enumerate(truth)]
    capacity = {link: 8e6}
    want = decision_on_snapshot(EchelonScheduler(), Snapshot(now, capacity, truth))
    got = decision_on_snapshot(online, Snapshot(now, capacity, blind))
    assert got.rank == want.rank and got.rate_bps == pytest.approx(want.rate_bps)
