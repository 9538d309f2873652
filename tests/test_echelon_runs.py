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


def coflow_table(seed: int, mixed_weight: bool = False, ports: tuple[int, int] = (3, 12),
                 shuffled: bool = False) -> tuple[np.ndarray, TableArrays]:
    """(active flows, table) of a few Coflows on a big switch of P ports (ingress links 0..P-1, egress
    P..2P-1; P drawn from ``ports``), each listed mapper by mapper or reducer by reducer, numbered in
    member order (as the simulator numbers them: offset, then flow id); with ``mixed_weight`` one member
    of the first Coflow carries another weight (which must cost it the vouching); ``shuffled``: each
    mapper (or reducer) lists its peers in its own order, so the runs may disagree on an order of their
    other ends."""
    rng = np.random.default_rng(seed)
    ports = int(rng.integers(*ports))
    n_groups = int(rng.integers(1, 5))
    group, paths, sizes = [], [], []
    for g in range(n_groups):
        mappers = rng.choice(ports, int(rng.integers(1, ports + 1)), replace=False)
        reducers = rng.choice(ports, int(rng.integers(1, ports + 1)), replace=False)

        def peers(listed: np.ndarray) -> np.ndarray:
            return rng.permutation(listed) if shuffled else listed

        pairs = [(m, r) for m in mappers for r in peers(reducers)] if rng.random() < 0.5 else \
            [(m, r) for r in reducers for m in peers(mappers)]
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
    """Each member's run stop (one past the flow number of its run's last member), by looking ahead
    member by member."""
    lo, hi = table.members_ptr[slot], table.members_ptr[slot + 1]
    members = list(table.members[lo:hi])
    link = [table.path_links[table.path_ptr[f + 1] - 1] if side else table.path_links[table.path_ptr[f]]
            for f in members]
    ends = {}
    for i, f in enumerate(members):
        j = i
        while j + 1 < len(members) and link[j + 1] == link[i]:
            j += 1
        ends[int(f)] = int(members[j]) + 1
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
            assert {f: int(totals.run_stop[totals.run_of[f]]) for f in ends} == ends
            other = _runs_brute(table, slot, 1 - side)  # the side kept has the fewer runs
            assert len(set(ends.values())) <= len(set(other.values()))
    decide_with_and_without_totals(active, table, totals, 0, stale_rate=7.0)
    decide_with_and_without_totals(active, table, totals, 0, every_flow=False, stale_rate=7.0)


def _serve_both(seed: int, **drawn) -> int:
    """``_serve_runs`` on a residual with some links already full against the plain loop, for every
    Coflow of table ``seed`` (``drawn``: :func:`coflow_table`'s options); returns how many live flows
    follow one of their run on a full link."""
    active, table = coflow_table(seed, **drawn)
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
        place = np.full(len(table.capacity), -1, dtype=np.int64)
        stale_words = np.full((len(place) + 63) >> 6, -1, dtype=np.int64)  # left by an earlier slot
        n_served = ek._serve_runs(sel, 0, len(sel), totals, slot, table, left, rates, served, 0, place,
                                  stale_words)
        assert sorted(served[:n_served]) == [f for f in sel if rates[f] > 0]
        assert (place == -1).all()
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


@pytest.mark.parametrize("shuffled", [False, True])
def test_serving_through_open_ends_gives_the_flow_by_flow_rates(shuffled: bool) -> None:
    """The same with up to 90 ports (other-end sets of two words) and, shuffled, runs that disagree on
    the order of their other ends (those slots are served flow by flow): both ways are exercised."""
    ways = {True: 0, False: 0}
    for seed in range(40):
        active, table = coflow_table(seed, ports=(40, 90), shuffled=shuffled)
        totals = et.coflow_totals(table, 0)
        for slot in range(len(table.members_ptr) - 1):
            first = table.members[table.members_ptr[slot]]
            ways[bool(totals.bits_at[totals.run_of[first]] >= 0)] += 1
        _serve_both(seed, ports=(40, 90), shuffled=shuffled)
        decide_with_and_without_totals(active, table, totals, 0, stale_rate=7.0)
    assert ways[False] > 20 if shuffled else (ways[True] > 20 and ways[False] == 0)


@pytest.mark.parametrize("seed", range(30))
def test_open_end_bits_list_each_runs_other_ends_in_an_order_every_run_keeps(seed: int) -> None:
    """Each slot's other ends are in an order every run keeps exactly when one exists (a brute force
    with ``graphlib``), each member knows its place, and each run's bits are its live members'."""
    _, table = coflow_table(seed, ports=(3, 80), shuffled=seed % 2 == 1)
    totals = et.coflow_totals(table, 0)
    for slot in range(len(table.members_ptr) - 1):
        side = int(totals.run_last[slot])
        members = table.members[table.members_ptr[slot]:table.members_ptr[slot + 1]]
        other = [int(table.path_links[table.path_ptr[f + 1] - 1 if side == 0 else table.path_ptr[f]])
                 for f in members]
        ends = list(totals.ends[totals.ends_ptr[slot]:totals.ends_ptr[slot + 1]])
        by_run: dict[int, list[int]] = {}
        live: dict[int, set[int]] = {}
        for f, link in zip(members, other):
            by_run.setdefault(int(totals.run_of[f]), []).append(link)
            if table.remaining[f] > EPS_BYTES:
                live.setdefault(int(totals.run_of[f]), set()).add(link)
        agree = all(len(set(links)) == len(links) for links in by_run.values())
        if agree:  # a brute force: is there an order of the links that every run keeps?
            import graphlib
            sorter = graphlib.TopologicalSorter({link: set() for link in other})
            for links in by_run.values():
                for before, after in zip(links, links[1:]):
                    sorter.add(after, before)
            try:
                tuple(sorter.static_order())
            except graphlib.CycleError:
                agree = False
        assert (len(ends) > 0) == agree
        for run, links in by_run.items():
            assert (totals.bits_at[run] >= 0) == agree
            if not agree:
                continue
            places = [ends.index(link) for link in links]
            assert places == sorted(places) and sorted(ends) == sorted(set(other))
            words = (len(ends) + 63) // 64
            bits = totals.bits[totals.bits_at[run]:totals.bits_at[run] + words]
            set_bits = {w * 64 + b for w in range(words) for b in range(64) if int(bits[w]) >> b & 1}
            assert set_bits == {ends.index(link) for link in live.get(run, ())}  # the live members'
        if agree:
            assert [ends[int(totals.end_place[f])] for f in members] == other


@pytest.mark.parametrize("seed", range(40))
def test_next_open_is_the_first_place_open_in_both_sets(seed: int) -> None:
    rng = np.random.default_rng(seed)
    words = int(rng.integers(1, 4))
    places = words * 64
    run = rng.random(places) < rng.random()
    opened = rng.random(places) < rng.random()
    run[63] = opened[63] = bool(seed % 2)  # the sign bit of a word

    def packed(flags: np.ndarray) -> np.ndarray:
        return np.array([sum(1 << b for b in range(64) if flags[w * 64 + b]) - (1 << 64 if flags[w * 64 + 63]
                         else 0) for w in range(words)], dtype=np.int64)

    bits = np.concatenate([np.zeros(2, np.int64), packed(run)])
    for c in range(places + 1):
        both = [p for p in range(c, places) if run[p] and opened[p]]
        assert ek._next_open(bits, 2, packed(opened), c) == (both[0] if both else -1)


@pytest.mark.parametrize("seed", range(40))
def test_past_run_is_the_first_position_at_or_past_the_end(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sel = np.sort(rng.choice(500, int(rng.integers(1, 120)), replace=False)).astype(np.int64)
    for _ in range(30):
        k = int(rng.integers(0, len(sel) + 1))
        end = int(rng.integers(0, 520))
        expected = max(k, int(np.searchsorted(sel, end)))
        assert ek._past_run(sel, k, len(sel), end) == expected


@pytest.mark.parametrize("seed", range(40))
def test_first_at_is_the_first_position_at_or_past_a_run_and_place(seed: int) -> None:
    """Flows listed run by run and, along each run, place by place (some missing: finished or not
    started): the search finds the first at (run, place) or later, from any start."""
    rng = np.random.default_rng(seed)
    n_runs, n_places = int(rng.integers(1, 6)), int(rng.integers(1, 70))
    keys = [(r, c) for r in range(n_runs) for c in range(n_places) if rng.random() < 0.6]
    n_flows = len(keys) + 3
    run_of = np.zeros(n_flows, np.int32)
    end_place = np.zeros(n_flows, np.int32)
    sel = np.arange(3, n_flows, dtype=np.int64)  # flow numbers from 3: not positions
    for f, (r, c) in zip(sel.tolist(), keys):
        run_of[f], end_place[f] = r, c
    for _ in range(30):
        k = int(rng.integers(0, len(sel) + 1))
        r, c = int(rng.integers(0, n_runs + 1)), int(rng.integers(0, n_places + 1))
        expected = next((i for i in range(k, len(sel)) if keys[i] >= (r, c)), len(sel))
        assert ek._first_at(sel, k, len(sel), run_of, end_place, r, c) == expected


def _live_bits(table: TableArrays, totals: et.CoflowTotals, run: int, words: int) -> set[int]:
    bits = totals.bits[totals.bits_at[run]:totals.bits_at[run] + words]
    return {w * 64 + b for w in range(words) for b in range(64) if int(bits[w]) >> b & 1}


def _bits_after_changes(seed: int) -> int:
    """Members served, finished, left a sliver or given bytes again, then the slot refreshed (as a
    decision does before serving it): every run's bits are its live members' places.  Returns how many
    members changed liveness."""
    _, table = coflow_table(seed, ports=(3, 80))
    totals = et.coflow_totals(table, 0)
    rng = np.random.default_rng(seed + 3)
    remaining = table.remaining
    changed = 0
    for _ in range(6):
        for slot in range(len(table.members_ptr) - 1):
            span = table.members[table.members_ptr[slot]:table.members_ptr[slot + 1]]
            for f in rng.choice(span, size=max(1, len(span) // 3), replace=False):
                before = remaining[f] > EPS_BYTES
                choices = (remaining[f] * rng.random(), 0.0, EPS_BYTES * rng.random(), 2e6)
                remaining[f] = choices[rng.integers(4)]
                changed += before != (remaining[f] > EPS_BYTES)
                et.mark_moved(totals, slot, f)
            et.refresh(totals, slot, table.members, remaining, table.path_ptr, table.path_links)
            words = (totals.ends_ptr[slot + 1] - totals.ends_ptr[slot] + 63) // 64
            for run in {int(totals.run_of[f]) for f in span}:
                live = {int(totals.end_place[f]) for f in span
                        if totals.run_of[f] == run and remaining[f] > EPS_BYTES}
                assert _live_bits(table, totals, run, words) == live
    return changed


def test_a_runs_bits_follow_its_members_liveness_through_refreshes() -> None:
    assert sum(_bits_after_changes(seed) for seed in range(30)) > 1000
