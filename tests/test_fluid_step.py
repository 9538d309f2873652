"""The simulator's step (``simulator/fluid.py``) moves only the flows with a rate, as a walk over every
active flow would move them.

``next_finish`` lists the flows with a rate (a decision may list them instead, in its own order) and
``advance`` moves only those, then closes the gaps the finished ones leave.  Checked against the plain
definition (every active flow visited in order, the same arithmetic) on random steps, bit for bit: the
remaining bytes, the leftovers, the finished flows in order, the active flows left and the per-link user
counts, with the flows listed in active order and shuffled.  A decision that lists the flows it gave a
rate (``Allocation.rated``: ``echelon``) spares the step its walk: whole runs with and without the
listing are the same run.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from echelonflow.scenario import load_scenario
from echelonflow.schedulers.echelon import EchelonScheduler
from simulator import fluid
from simulator.engine import simulate


def _plain_step(active, remaining, rate, leftover, now, next_s, tol, bytes_atol):
    """Every active flow visited in order: (still active, finished), moving ``remaining`` and
    ``leftover`` in place."""
    dt = next_s - now
    kept, finished = [], []
    for f in active.tolist():
        r = rate[f]
        if r > 0:
            if now + 8.0 * remaining[f] / r <= next_s + tol:
                left = remaining[f] - r * dt / 8.0 - r * tol / 8.0
                leftover[f] = left if left > 0.0 else 0.0
                remaining[f] = 0.0
                finished.append(f)
                continue
            remaining[f] -= r * dt / 8.0
            if remaining[f] <= bytes_atol:
                left = remaining[f]
                leftover[f] = left if left > 0.0 else 0.0
                remaining[f] = 0.0
                finished.append(f)
                continue
        kept.append(f)
    return kept, finished


def _random_step(seed: int) -> dict:
    """A random step: flows on random paths, some active, a share of them with a rate, a step to their
    first finish, short of it or past several (every flow due by then finishes)."""
    rng = np.random.default_rng(seed)
    n_flows = int(rng.integers(1, 300))
    n_links = int(rng.integers(1, 12))
    lengths = rng.integers(1, 4, n_flows)
    path_ptr = np.zeros(n_flows + 1, dtype=np.int64)
    np.cumsum(lengths, out=path_ptr[1:])
    path_links = rng.integers(0, n_links, int(path_ptr[-1])).astype(np.int64)
    active = np.flatnonzero(rng.random(n_flows) < 0.7).astype(np.int64)
    remaining = rng.choice([1e3, 1e5, 2.5e6], n_flows) * rng.random(n_flows)
    rate = np.where(rng.random(n_flows) < rng.choice([0.01, 0.5, 1.0]), rng.choice([1e8, 1e9], n_flows), 0.0)
    now = float(rng.random())
    return dict(n_flows=n_flows, n_links=n_links, path_ptr=path_ptr, path_links=path_links, active=active,
                remaining=remaining, rate=rate, now=now, stretch=float(rng.choice([1.0, 0.5, 3.0])))


def _steps(x: dict) -> tuple:
    """The step both ways: (next finish, listed count, kernel's (kept, finished), plain (kept, finished),
    whether remaining bytes, leftovers and per-link users agree)."""
    n_flows, active, remaining, rate, now = x["n_flows"], x["active"], x["remaining"], x["rate"], x["now"]
    rated = np.empty(n_flows, dtype=np.int32)  # the run's buffers hold 32-bit numbers (engine.numbers_dtype)
    soonest, n_rated = fluid.next_finish(active, remaining, rate, now, rated)
    # a decision that lists its flows with a rate (``Allocation.rated``): the same time from the list
    assert fluid.soonest(rated, n_rated, remaining, rate, now) == soonest
    horizon = soonest if math.isfinite(soonest) else now + 1.0
    next_s = now + (horizon - now) * x["stretch"]
    tol, bytes_atol = 1e-9 * next_s, 1e-6
    users = np.zeros(x["n_links"], dtype=np.int64)
    fluid.count_links(active, len(active), x["path_ptr"], x["path_links"], users, 1)
    plain_remaining, plain_leftover = remaining.copy(), np.zeros(n_flows)
    plain = _plain_step(active, plain_remaining, rate, plain_leftover, now, next_s, tol, bytes_atol)
    path_ptr, path_links = x["path_ptr"], x["path_links"]
    still = np.zeros(x["n_links"], dtype=np.int64)
    fluid.count_links(np.asarray(plain[0], dtype=np.int64), len(plain[0]), path_ptr, path_links, still, 1)
    # as next_finish lists the flows (in active order), and as a decision may (in its own order)
    shuffled = rated.copy()
    shuffled[:n_rated] = np.random.default_rng(n_flows).permutation(rated[:n_rated])
    steps, same = [], True
    for listing in (rated, shuffled):
        leftover, finished = np.zeros(n_flows), np.zeros(n_flows, dtype=np.int32)
        moved, moving, counted = active.copy(), remaining.copy(), users.copy()
        first, end, done, _ = fluid.advance(moved, listing, n_rated, moving, rate, leftover, now, next_s, tol,
                                            bytes_atol, finished, True, path_ptr, path_links, counted)
        # the step writes each finished flow's leftover beside it, in active order
        per_flow = np.zeros(n_flows)
        per_flow[finished[:done]] = leftover[:done]
        same = (same and np.array_equal(moving, plain_remaining) and np.array_equal(per_flow, plain_leftover)
                and np.array_equal(counted, still))
        steps.append((moved[first:end].tolist(), finished[:done].tolist()))
    assert steps[0] == steps[1]
    return soonest, n_rated, steps[0], plain, same


@pytest.mark.parametrize("seed", range(200))
def test_a_step_over_the_flows_with_a_rate_is_the_walk_over_every_active_flow(seed: int) -> None:
    x = _random_step(seed)
    now, remaining, rate = x["now"], x["remaining"], x["rate"]
    rated_here = [f for f in x["active"].tolist() if rate[f] > 0]
    expected = min((now + 8.0 * remaining[f] / rate[f] for f in rated_here), default=math.inf)
    soonest, n_rated, mine, plain, same = _steps(x)
    assert n_rated == len(rated_here) and soonest == expected
    assert mine == plain and same


def test_the_random_steps_finish_several_flows_among_idle_ones() -> None:
    """The comparison above means something only if steps finish several flows with active flows kept
    after them, and keep flows without a rate."""
    several = idle = 0
    for seed in range(200):
        x = _random_step(seed)
        _, _, (kept, finished), _, _ = _steps(x)
        several += len(finished) >= 2 and bool(kept) and max(finished) < max(kept)
        idle += any(x["rate"][f] == 0 for f in kept)
    assert several > 30 and idle > 100


@pytest.mark.parametrize("seed", range(100))
def test_closing_the_gaps_keeps_the_order_and_moves_the_fewest(seed: int) -> None:
    """The gaps left by finished flows are closed from whichever side moves fewer flows (``first`` > 0
    when the head moved), and what is left is the other flows in their order."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    active = np.sort(rng.choice(10 * n, n, replace=False)).astype(np.int64)
    gaps = np.sort(rng.choice(n, int(rng.integers(1, min(n, 6) + 1)), replace=False)).astype(np.int32)
    expected = np.delete(active, gaps).tolist()
    first, end = fluid._closed_gaps(active, gaps, len(gaps))
    assert active[first:end].tolist() == expected
    # the head is moved exactly when that moves fewer flows (ties: the tail, as before)
    n_gaps = len(gaps)
    costs = [n - gaps[0]] + [gaps[s - 1] + (n - gaps[s] if s < n_gaps else 0) for s in range(1, n_gaps + 1)]
    assert (first > 0) == (min(costs[1:]) < costs[0])


def test_the_gaps_close_from_either_side() -> None:
    """A finish near the head moves the head, one near the tail the tail."""
    for gap, side in ((1, "head"), (8, "tail")):
        active = np.arange(10, dtype=np.int64)
        first, end = fluid._closed_gaps(active, np.array([gap], dtype=np.int32), 1)
        assert active[first:end].tolist() == [f for f in range(10) if f != gap]
        assert (first, end) == ((1, 10) if side == "head" else (0, 9))


class _Listing(EchelonScheduler):
    """``echelon``, counting its decisions that list the flows given a rate."""

    listed = 0

    def decide(self, view):
        allocation = super().decide(view)
        self.listed += allocation.rated is not None
        return allocation


class _Unlisted(EchelonScheduler):
    """``echelon`` without the listing: the step walks every active flow for them."""

    def decide(self, view):
        allocation = super().decide(view)
        allocation.rated = None
        return allocation


def _coflow_trace() -> tuple:
    fb = load_scenario("fb2010")  # 40 mid-sized coflows with their own arrivals, and 20 more all at once
    jobs = [job for job in fb.jobs if 10 <= len(job.flows) <= 400]
    return fb.topology, jobs[:40] + [dataclasses.replace(job, arrival_s=0.0) for job in jobs[40:60]]


def _training() -> tuple:
    scenario = load_scenario("fattree-fsdp-ps")
    return scenario.topology, scenario.jobs


@pytest.mark.parametrize(("instance", "decisions"), [(_coflow_trace, 100), (_training, 20)])
def test_a_run_with_the_rated_flows_listed_is_the_run_that_walks_for_them(instance, decisions: int) -> None:
    """Decision checks on (each listing checked against the rates), every time and flow equal."""
    topology, jobs = instance()
    listing = _Listing()
    listed = simulate(topology, jobs, listing, alone_runs=False)
    walked = simulate(topology, jobs, _Unlisted(), alone_runs=False)
    assert listed.flows == walked.flows and listed.jobs == walked.jobs
    assert listed.objective_s == walked.objective_s
    assert listing.listed > decisions


@pytest.mark.parametrize("seed", range(30))
def test_the_bytes_a_group_has_sent_are_summed_in_start_order(seed: int) -> None:
    """``fluid.group_sent`` (what a non-clairvoyant policy sees) against its definition over a few
    decisions: each active flow's wire bytes delivered, and per group their sum over its active flows
    sorted by when they started, bit for bit.  Flows are numbered in another order than they start,
    flows start and finish between decisions, and positions left over from an earlier call point at
    other flows."""
    rng = np.random.default_rng(seed)
    n_groups = int(rng.integers(1, 6))
    sizes = rng.integers(1, 12, n_groups)
    group = np.repeat(np.arange(n_groups), sizes)  # numbered group by group
    n = len(group)
    base = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    start_order = rng.permutation(n).tolist()  # the order they start: not their numbering
    start_seq = np.argsort(start_order)
    by_start = np.empty(n, dtype=np.int64)
    group_started = np.zeros(n_groups, dtype=np.int64)
    wire = rng.random(n) * 1e6
    remaining = wire * rng.random(n)  # 1e6 * a random fraction: sums whose order shows in the last bits
    position = rng.integers(0, n, n).astype(np.int64)  # stale: left by an earlier run
    active: list[int] = []
    for _ in range(4):
        starting, start_order = start_order[:n // 3 + 1], start_order[n // 3 + 1:]
        for f in starting:  # as the simulator lists them when they start
            by_start[base[group[f]] + group_started[group[f]]] = f
            group_started[group[f]] += 1
        active = sorted([f for f in active if rng.random() < 0.7] + starting)  # some finished
        flows = np.array(active, dtype=np.int64)
        heads = np.unique(group[flows]).astype(np.int64)
        sent, totals = np.empty(len(flows)), np.empty(len(heads))
        fluid.group_sent(flows, heads, (base, group_started, by_start), wire, remaining, position, sent,
                         totals)
        assert sent.tolist() == (wire[flows] - remaining[flows]).tolist()
        for g, h in enumerate(heads.tolist()):
            members = sorted((f for f in active if group[f] == h), key=lambda f: start_seq[f])
            assert totals[g] == sum(wire[f] - remaining[f] for f in members), (seed, h)
            listed = by_start[base[h]:base[h] + group_started[h]].tolist()
            assert listed == members  # the finished ones dropped, the order kept
