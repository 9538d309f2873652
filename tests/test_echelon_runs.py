"""Deciding at every flow event, ``echelon`` steps over each run of a kept Coflow's flows whose shared
link is full (``echelon_totals._runs``, ``echelon_kernels._serve_runs``): the same rates and ranks as
serving every flow, bit for bit.

Coflow traces list one flow per (mapper, reducer) pair, mapper by mapper or reducer by reducer, so the
tables here are Coflows on a big switch listed either way, some members finished, some left with a
sliver of bytes, some not started, behind other groups that take part of the capacity first.
"""

from __future__ import annotations

import numpy as np
import pytest

from echelonflow.schedulers import echelon_kernels as ek
from echelonflow.schedulers import echelon_totals as et
from echelonflow.schedulers.columns import TableArrays
from echelonflow.schedulers.kernels import EPS_BYTES
from tests.instances import decide_with_and_without_totals


def coflow_table(seed: int, mixed_weight: bool = False) -> tuple[np.ndarray, TableArrays]:
    """(active flows, table) of a few Coflows on a big switch of P ports (ingress links 0..P-1, egress
    P..2P-1), each listed mapper by mapper or reducer by reducer, numbered in member order (as the
    simulator numbers them: offset, then flow id); with ``mixed_weight`` one member of the first Coflow
    carries another weight (which must cost it the vouching)."""
    rng = np.random.default_rng(seed)
    ports = int(rng.integers(3, 12))
    n_groups = int(rng.integers(1, 5))
    group, paths, sizes = [], [], []
    for g in range(n_groups):
        mappers = rng.choice(ports, int(rng.integers(1, ports + 1)), replace=False)
        reducers = rng.choice(ports, int(rng.integers(1, ports + 1)), replace=False)
        pairs = [(m, r) for m in mappers for r in reducers] if rng.random() < 0.5 else \
            [(m, r) for r in reducers for m in mappers]
        for m, r in pairs:
            group.append(g)
            paths.append([int(m), ports + int(r)])
            sizes.append(float(rng.choice([1e5, 2.5e6, 1e6])) * float(rng.choice([1.0, rng.random()])))
    n_flows = len(group)
    remaining = np.array(sizes)
    remaining[rng.random(n_flows) < 0.15] = 0.0  # finished
    remaining[rng.random(n_flows) < 0.05] = EPS_BYTES * rng.random()  # a sliver: not live
    path_ptr = np.zeros(n_flows + 1, dtype=np.int64)
    np.cumsum([2] * n_flows, out=path_ptr[1:])
    group_a = np.array(group, dtype=np.int64)
    weight = np.array([1.0, 2.0, 0.5, 1.5])[group_a]
    if mixed_weight:
        weight[n_flows // 2 if group_a[n_flows // 2] == 0 else 0] = 3.0
    members_ptr = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(group_a, minlength=n_groups), out=members_ptr[1:])
    capacity = rng.choice([1e9, 2e9], 2 * ports) * rng.choice([1.0, 1.0, 0.7], 2 * ports)
    table = TableArrays(
        remaining=remaining, group=group_a, offset=np.zeros(n_flows), reference=rng.random(n_groups) * 3,
        ref_slot=group_a.copy(), idrank=np.arange(n_flows, dtype=np.int64), weight=weight,
        path_ptr=path_ptr, path_links=np.array(paths, dtype=np.int64).ravel(), capacity=capacity,
        members_ptr=members_ptr, members=np.arange(n_flows, dtype=np.int64))
    active = np.flatnonzero(rng.random(n_flows) < 0.8).astype(np.int64)  # the rest not started
    return active, table


def _runs_brute(table: TableArrays, slot: int, side: int) -> dict[int, int]:
    """Each member's run end, by looking ahead member by member."""
    lo, hi = table.members_ptr[slot], table.members_ptr[slot + 1]
    members = list(table.members[lo:hi])
    link = [table.path_links[table.path_ptr[f + 1] - 1] if side else table.path_links[table.path_ptr[f]]
            for f in members]
    ends = {}
    for i, f in enumerate(members):
        j = i
        while j + 1 < len(members) and link[j + 1] == link[i]:
            j += 1
        ends[int(f)] = int(members[j + 1]) if j + 1 < len(members) else int(members[-1]) + 1
    return ends


@pytest.mark.parametrize("seed", range(80))
def test_stepping_over_full_runs_decides_what_serving_every_flow_decides(seed: int) -> None:
    active, table = coflow_table(seed, mixed_weight=seed % 5 == 0)
    totals = et.coflow_totals(table, 0)
    assert totals is not None
    for slot in range(len(table.members_ptr) - 1):
        vouched = int(totals.in_order[slot])
        assert vouched == (0 if seed % 5 == 0 and slot == 0 else 1)
        if vouched:
            side = int(totals.run_last[slot])
            ends = _runs_brute(table, slot, side)
            assert {f: int(totals.run_end[f]) for f in ends} == ends
            other = _runs_brute(table, slot, 1 - side)  # the side kept has the fewer runs
            assert len(set(ends.values())) <= len(set(other.values()))
    decide_with_and_without_totals(active, table, totals, 0, stale_rate=7.0)
    decide_with_and_without_totals(active, table, totals, 0, every_flow=False, stale_rate=7.0)


def _serve_both(seed: int) -> int:
    """``_serve_runs`` on a residual with some links already full against the plain loop, for every
    Coflow of table ``seed``; returns how many live flows follow one of their run on a full link."""
    active, table = coflow_table(seed)
    totals = et.coflow_totals(table, 0)
    rng = np.random.default_rng(seed + 11)
    steps = 0
    for slot in range(len(table.members_ptr) - 1):
        sel = np.array([f for f in active if table.group[f] == slot and table.remaining[f] > EPS_BYTES],
                       dtype=np.int64)
        if len(sel) == 0:
            continue
        residual = table.capacity * (rng.random(len(table.capacity)) < 0.5)
        side = int(totals.run_last[slot])
        link = table.path_links[table.path_ptr[sel + side] - side]  # the first link, or the last
        steps += int(np.sum((link[1:] == link[:-1]) & (residual[link[1:]] == 0.0)))
        rates, left, served = np.zeros(len(table.remaining)), residual.copy(), np.zeros(len(sel), np.int64)
        n_served = ek._serve_runs(sel, 0, len(sel), totals, slot, table.path_ptr, table.path_links, left,
                                  table.capacity, rates, served, 0)
        assert sorted(served[:n_served]) == [f for f in sel if rates[f] > 0]
        plain, plain_left = np.zeros(len(table.remaining)), residual.copy()
        for f in sel:  # the definition: each flow the least residual on its path, one after another
            links = table.path_links[table.path_ptr[f]:table.path_ptr[f + 1]]
            spare = min(plain_left[links])
            if spare > 0:
                plain[f] = spare
                ek._consume(f, spare, table.path_ptr, table.path_links, plain_left, table.capacity)
        assert np.array_equal(rates, plain) and np.array_equal(left, plain_left)
    return steps


def test_serving_runs_on_full_links_gives_the_flow_by_flow_rates() -> None:
    """Each flow the least residual on its path, one after another, as the plain loop gives; the test
    is not trivial: over its 40 tables hundreds of live flows follow one of their run on a full link
    (each such flow is stepped over, not served)."""
    assert sum(_serve_both(seed) for seed in range(40)) > 200


@pytest.mark.parametrize("seed", range(40))
def test_past_run_is_the_first_position_at_or_past_the_end(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sel = np.sort(rng.choice(500, int(rng.integers(1, 120)), replace=False)).astype(np.int64)
    for _ in range(30):
        k = int(rng.integers(0, len(sel) + 1))
        end = int(rng.integers(0, 520))
        expected = max(k, int(np.searchsorted(sel, end)))
        assert ek._past_run(sel, k, len(sel), end) == expected
