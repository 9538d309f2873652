"""``echelon``'s one walk over the groups' members gives what its rule's three definitions give.

``echelon_kernels._walk_groups`` and ``_estimates_walked`` are how ``echelon_decide`` orders groups;
``_residual_bottleneck`` (Smith's key), ``_bssi_groups`` (BSSI's order) and ``_estimated_tardiness``
(the list-schedule estimates) are the rule written one reading at a time.  On random groups (bytes
left, finished and declared members, shared links, equal offsets and sizes, flows without a path) every
key, the BSSI order and both estimates for both orders must be equal bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from echelonflow.schedulers import echelon_kernels as ek
from echelonflow.schedulers.columns import TableArrays
from echelonflow.schedulers.kernels import floats, ints, stable_argsort


def _instance(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    n_links = int(rng.integers(3, 30))
    capacity = rng.choice([1e9, 2e9, 1e10], n_links) * rng.choice([1.0, 1.0, 0.7], n_links)
    n_groups = int(rng.integers(1, 9))
    n_flows = int(rng.integers(n_groups, 120))
    group = np.sort(rng.integers(0, n_groups, n_flows))
    offset = rng.choice([0.0, 0.5, 1.0, 2.5, rng.random() * 4], n_flows)
    staggered = rng.random(n_groups) < 0.6
    offset[~staggered[group]] = 0.0  # some Coflows
    idrank = rng.permutation(n_flows)
    order = np.lexsort((idrank, offset, group))  # flows numbered group, offset, id (the table's order)
    group, offset, idrank = group[order], offset[order], idrank[order]
    lengths = rng.integers(1, min(5, n_links + 1), n_flows)
    lengths[rng.random(n_flows) < 0.05] = 0  # a flow without a path
    path_ptr = np.zeros(n_flows + 1, dtype=np.int64)
    np.cumsum(lengths, out=path_ptr[1:])
    path_links = np.concatenate([rng.choice(n_links, int(k), replace=False) for k in lengths] or [[]])
    remaining = rng.choice([0.0, 1e5, 2.5e6, 1e6], n_flows) * rng.choice([1.0, 1.0, rng.random()], n_flows)
    weight = np.array([1.0, 2.0, 0.5])[group % 3]
    members_ptr = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(group, minlength=n_groups), out=members_ptr[1:])
    members = np.arange(n_flows, dtype=np.int64)
    started = rng.random(n_flows) < 0.5
    active = np.flatnonzero(started & (remaining > 0)).astype(np.int64)
    reference = rng.random(n_groups) * 3
    return dict(active=active, remaining=remaining, group=group.astype(np.int64), offset=offset,
                reference=reference, ref_slot=group.astype(np.int64), idrank=idrank.astype(np.int64),
                weight=weight, path_ptr=path_ptr, path_links=path_links.astype(np.int64),
                capacity=capacity, members_ptr=members_ptr, members=members, now=float(rng.random() * 2))


@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("seed", range(80))
def test_one_walk_gives_the_rule_s_keys_order_and_estimates(seed: int, whole: bool) -> None:
    n_groups, draw = 0, seed
    while n_groups < 2:  # one group has nothing to order: draw again (deterministically)
        x = _instance(draw)
        draw += 1000
        if not whole:  # a caller that knows only the active flows (a controller's snapshot)
            x["members_ptr"], x["members"] = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        n = len(x["active"])
        sel, due, starts = ints(n), floats(n), ints(n + 1)
        table = TableArrays(**{name: x[name] for name in TableArrays._fields})
        m, n_groups = ek._edf_groups(x["active"], table, True, floats(len(x["remaining"])), sel, due, starts)
    (keys, w, other, m_flow, m_ptr, e_link, e_cum, g_mptr, g_lptr, gl_link, gl_cum) = ek._walk_groups(
        sel, starts, n_groups, table)
    n_links = len(x["capacity"])
    cumulative, touched = floats(n_links), ints(n_links)
    for g in range(n_groups):
        a, b = starts[g], starts[g + 1]
        key = ek._residual_bottleneck(x["group"][sel[a]], sel, a, b, table, cumulative, touched)
        expected = ek._per_weight(key, ek._group_weight(sel, a, b, x["idrank"], x["weight"]))
        assert keys[g] == expected or (np.isnan(keys[g]) and np.isnan(expected))
    bssi = ek._bssi_groups(sel, starts, n_groups, table)
    assert other.tolist() == bssi.tolist()
    uniform = ek._uniform_groups(n_groups, g_mptr, m_flow, x["offset"])
    assert uniform.tolist() == [int(len({x["offset"][f] for f in m_flow[g_mptr[g]:g_mptr[g + 1]]}) <= 1)
                                for g in range(n_groups)]
    for group_order in (stable_argsort(keys, n_groups), other):
        defined = ek._estimated_tardiness(group_order, n_groups, sel, starts, due, table, x["now"],
                                          floats(n_links), floats(n_links), floats(n_links), floats(n_links),
                                          ints(n_links))
        # the members walked for every group, and uniform groups read off their links' totals
        for shortcut in (ints(n_groups), uniform):
            zeros = [floats(n_links) for _ in range(3)]
            walked = ek._estimates_walked(group_order, n_groups, sel, starts, due, x["offset"], w, x["now"],
                                          m_flow, m_ptr, e_link, e_cum, g_mptr, g_lptr, gl_link, gl_cum,
                                          shortcut, *zeros)
            assert walked == defined
            assert all(not z.any() for z in zeros)  # scratch handed back as zeros


def test_the_instances_have_uniform_groups_of_several_members_and_staggered_ones() -> None:
    """The shortcut for groups with one offset is compared above only if the random groups include
    such groups with more than one member walked, beside staggered ones."""
    kinds = set()
    for seed in range(80):
        x = _instance(seed)
        n = len(x["active"])
        sel, due, starts = ints(n), floats(n), ints(n + 1)
        table = TableArrays(**{name: x[name] for name in TableArrays._fields})
        _, n_groups = ek._edf_groups(x["active"], table, True, floats(len(x["remaining"])), sel, due, starts)
        walked = ek._walk_groups(sel, starts, n_groups, table)
        m_flow, g_mptr = walked[3], walked[7]
        uniform = ek._uniform_groups(n_groups, g_mptr, m_flow, x["offset"])
        kinds.update((int(u), g_mptr[g + 1] - g_mptr[g] > 1) for g, u in enumerate(uniform))
    assert {(1, True), (0, True)} <= kinds


@pytest.mark.parametrize("use_offsets", [True, False])
@pytest.mark.parametrize("seed", range(40))
def test_edf_groups_lists_each_group_earliest_due_first(seed: int, use_offsets: bool) -> None:
    """``_edf_groups`` on active flows listed group by group but in any order inside a group (as
    echelon-varys without offsets, or a group whose flows hold other reference slots, list them): the
    covered flows (bytes left and a path), each group's run by (due, id rank), every active rate 0."""
    from echelonflow.schedulers.kernels import EPS_BYTES

    x = _instance(seed)
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
