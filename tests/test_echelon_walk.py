"""``echelon``'s one walk over the groups' members gives what its rule's three definitions give.

``echelon_kernels._walk_groups`` and ``_estimates_walked`` are how ``echelon_decide`` orders groups;
``_residual_bottleneck`` (Smith's key), ``_bssi_groups`` (BSSI's order) and ``_estimated_tardiness``
(the list-schedule estimates) are the rule written one reading at a time.  On random groups (bytes
left, finished and declared members, shared links, equal offsets and sizes, flows without a path) every
key, the BSSI order and both estimates for both orders must be equal bit for bit.  A uniform group (its
live members at one offset) is read off its links' exact totals, in the definitions as in the walk.
"""

from __future__ import annotations

import numpy as np
import pytest

from echelonflow.schedulers import echelon_kernels as ek
from echelonflow.schedulers.columns import TableArrays
from echelonflow.schedulers.kernels import floats, ints, stable_argsort
from tests.instances import random_groups


def _live(x: dict, table: TableArrays, sel, starts, g: int) -> list[int]:
    """Group g's live flows (bytes left and a path) as the walk lists them: members, or active flows."""
    whole = len(x["members_ptr"]) > 0
    if whole:
        slot = x["group"][sel[starts[g]]]
        flows = x["members"][x["members_ptr"][slot]:x["members_ptr"][slot + 1]]
    else:
        flows = sel[starts[g]:starts[g + 1]]
    return [f for f in flows if x["remaining"][f] > 1e-9 and x["path_ptr"][f + 1] > x["path_ptr"][f]]


def _live_offsets(x: dict, table: TableArrays, sel, starts, g: int) -> set:
    return {x["offset"][f] for f in _live(x, table, sel, starts, g)}


def _live_count(x: dict, table: TableArrays, sel, starts, g: int) -> int:
    return len(_live(x, table, sel, starts, g))


@pytest.mark.parametrize("exact_above", [0, ek.EXACT_ABOVE])  # uniform groups summed exactly, or in order
@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("seed", range(80))
def test_one_walk_gives_the_rule_s_keys_order_and_estimates(seed: int, whole: bool, exact_above: int) -> None:
    n_groups, draw = 0, seed
    while n_groups < 2:  # one group has nothing to order: draw again (deterministically)
        x = random_groups(draw)
        draw += 1000
        if not whole:  # a caller that knows only the active flows (a controller's snapshot)
            x["members_ptr"], x["members"] = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        n = len(x["active"])
        sel, due, starts = ints(n), floats(n), ints(n + 1)
        table = TableArrays(**{name: x[name] for name in TableArrays._fields})
        m, n_groups = ek._edf_groups(x["active"], table, True, floats(len(x["remaining"])), sel, due, starts)
    walk = ek._walk_groups(sel, starts, n_groups, table, None, exact_above)
    keys, w, other, uniform, m_flow, m_ptr, e_link, e_cum, g_mptr, g_lptr, gl_link, gl_cum = walk
    n_links = len(x["capacity"])
    cumulative, touched = floats(n_links), ints(n_links)
    for g in range(n_groups):
        a, b = starts[g], starts[g + 1]
        slot = x["group"][sel[a]]
        key = ek._residual_bottleneck(slot, sel, a, b, table, cumulative, touched, exact_above)
        expected = ek._per_weight(key, ek._group_weight(sel, a, b, x["idrank"], x["weight"]))
        assert keys[g] == expected or (np.isnan(keys[g]) and np.isnan(expected))
    bssi = ek._bssi_groups(sel, starts, n_groups, table, exact_above)
    assert other.tolist() == bssi.tolist()
    assert uniform.tolist() == [int(len(_live_offsets(x, table, sel, starts, g)) == 1)
                                for g in range(n_groups)]
    for group_order in (stable_argsort(keys, n_groups), other):
        defined = ek._estimated_tardiness(group_order, n_groups, sel, starts, due, table, x["now"],
                                          floats(n_links), floats(n_links), floats(n_links), floats(n_links),
                                          ints(n_links), exact_above)
        # staggered groups' members walked, uniform groups read off their links' totals
        zeros = [floats(n_links) for _ in range(3)]
        walked = ek._estimates_walked(group_order, n_groups, sel, starts, due, x["offset"], w, x["now"],
                                      m_flow, m_ptr, e_link, e_cum, g_mptr, g_lptr, gl_link, gl_cum, uniform,
                                      *zeros)
        assert walked == defined
        assert all(not z.any() for z in zeros)  # scratch handed back as zeros


def test_the_instances_have_uniform_groups_of_several_members_and_staggered_ones() -> None:
    """Uniform groups' totals are compared above only if the random groups include such groups with
    more than one live member, beside staggered ones."""
    kinds = set()
    for seed in range(80):
        x = random_groups(seed)
        n = len(x["active"])
        sel, due, starts = ints(n), floats(n), ints(n + 1)
        table = TableArrays(**{name: x[name] for name in TableArrays._fields})
        _, n_groups = ek._edf_groups(x["active"], table, True, floats(len(x["remaining"])), sel, due, starts)
        uniform = ek._walk_groups(sel, starts, n_groups, table, None, ek.EXACT_ABOVE)[3]
        kinds.update((int(u), _live_count(x, table, sel, starts, g) > 1) for g, u in enumerate(uniform))
    assert {(1, True), (0, True)} <= kinds


def _tied_coflows(seed: int, n_members: int = 6) -> dict:
    """Two Coflows of equal weight on one link, their members holding the same bytes in another order:
    summed exactly their totals tie, summed in member order they may differ in the last bit."""
    rng = np.random.default_rng(seed)
    sizes = np.round(rng.integers(1, 10**6, n_members) / 7.0 * 2048) / 2048  # whole exact units
    n = 2 * n_members
    group = np.repeat([0, 1], n_members).astype(np.int64)
    flows = np.arange(n, dtype=np.int64)
    return dict(active=flows, remaining=np.concatenate([sizes, rng.permutation(sizes)]), group=group,
                offset=np.zeros(n), reference=np.zeros(2), ref_slot=group.copy(), idrank=flows.copy(),
                weight=np.ones(n), path_ptr=np.arange(n + 1, dtype=np.int64), path_links=0 * flows,
                capacity=np.array([1e9]), members_ptr=np.array([0, n_members, n], dtype=np.int64),
                members=flows.copy())


def test_bssi_s_definition_sums_a_uniform_group_s_demands_as_the_walk_does() -> None:
    """The BSSI order above depends on how demands are summed only at a tie; here, on exact ties, the
    definition must break them as the walk does with every uniform group summed exactly, and summing in
    member order must break some of them the other way (else this test could not tell the two apart)."""
    broken_otherwise = 0
    for seed in range(60):
        x = _tied_coflows(seed)
        n = len(x["active"])
        sel, due, starts = ints(n), floats(n), ints(n + 1)
        table = TableArrays(**{name: x[name] for name in TableArrays._fields})
        _, n_groups = ek._edf_groups(x["active"], table, True, floats(n), sel, due, starts)
        exact = ek._bssi_groups(sel, starts, n_groups, table, 0).tolist()
        assert ek._walk_groups(sel, starts, n_groups, table, None, 0)[2].tolist() == exact
        in_order = ek._bssi_groups(sel, starts, n_groups, table, ek.EXACT_ABOVE).tolist()
        assert ek._walk_groups(sel, starts, n_groups, table, None, ek.EXACT_ABOVE)[2].tolist() == in_order
        broken_otherwise += in_order != exact
    assert broken_otherwise >= 5


@pytest.mark.parametrize("use_offsets", [True, False])
@pytest.mark.parametrize("seed", range(40))
def test_edf_groups_lists_each_group_earliest_due_first(seed: int, use_offsets: bool) -> None:
    """``_edf_groups`` on active flows listed group by group but in any order inside a group (as
    echelon-varys without offsets, or a group whose flows hold other reference slots, list them): the
    covered flows (bytes left and a path), each group's run by (due, id rank), every active rate 0."""
    from echelonflow.schedulers.kernels import EPS_BYTES

    x = random_groups(seed)
    rng = np.random.default_rng(seed + 7)
    # reference slots drawn per flow: due times within a group in any order
    x["ref_slot"] = rng.integers(0, len(x["reference"]), len(x["remaining"]))
    active = x["active"]
    shuffled = np.concatenate([rng.permutation(active[x["group"][active] == g])
                               for g in np.unique(x["group"][active])] or [active]).astype(np.int64)
    table = TableArrays(**{name: x[name] for name in TableArrays._fields})
    n = len(shuffled)
    sel, due, starts, rate = ints(n), floats(n), ints(n + 1), np.ones(len(x["remaining"]))
    m, n_groups = ek._edf_groups(shuffled, table, use_offsets, rate, sel, due, starts)
    path_ptr = x["path_ptr"]
    covered = [f for f in shuffled if x["remaining"][f] > EPS_BYTES and path_ptr[f + 1] > path_ptr[f]]

    def due_of(f):
        return x["reference"][x["ref_slot"][f]] + (x["offset"][f] if use_offsets else 0.0)

    expected = sorted(covered, key=lambda f: (x["group"][f], due_of(f), x["idrank"][f]))
    assert sel[:m].tolist() == expected
    assert due[:m].tolist() == [due_of(f) for f in expected]
    groups = [x["group"][f] for f in expected]
    runs = [k for k in range(m) if k == 0 or groups[k] != groups[k - 1]]
    assert starts[:n_groups + 1].tolist() == runs + [m]
    assert not rate[shuffled].any()
