"""``echelon``'s kept totals (``echelon_totals.py``) give what walking the groups afresh gives, bit for bit.

A uniform group's per-link totals are sums of integers, so keeping them by adding each member's change
must give exactly the walked totals: on random groups under random sequences of changes (flows served,
finished, left with a sliver, restarted), in the kernel; and through whole simulations (a coflow trace,
a training scenario, a link fault that moves paths), where a scheduler checks every decision.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from echelonflow.faults import FaultEvent
from echelonflow.model import FlowTask, Job
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import echelon_kernels as ek
from echelonflow.schedulers import echelon_totals as et
from echelonflow.schedulers.columns import TableArrays
from echelonflow.schedulers.echelon import EchelonScheduler
from echelonflow.schedulers.kernels import EPS_BYTES, floats, ints
from echelonflow.topology import Topology, fattree
from simulator.engine import simulate
from tests.instances import decide_with_and_without_totals, random_groups


def _walks(active, table: TableArrays, totals: et.CoflowTotals, exact_above: int) -> tuple:
    """The walk of ``active``'s groups with ``totals`` and without any: (kept, walked)."""
    n = len(active)
    sel, due, starts = ints(n), floats(n), ints(n + 1)
    _, n_groups = ek._edf_groups(active, table, True, floats(len(table.remaining)), sel, due, starts)
    return (ek._walk_groups(sel, starts, n_groups, table, totals, exact_above),
            ek._walk_groups(sel, starts, n_groups, table, None, exact_above))


def _used(walk: tuple) -> list:
    """A walk's outputs cut to what they hold (its arrays are sized for the most they could)."""
    keys, w, order, uniform, m_flow, m_ptr, e_link, e_cum, g_mptr, g_lptr, gl_link, gl_cum = walk
    n_m = g_mptr[-1] if len(g_mptr) else 0
    n_e, n_gl = m_ptr[n_m], (g_lptr[-1] if len(g_lptr) else 0)
    return [keys, w, order, uniform, m_flow[:n_m], m_ptr[:n_m + 1], e_link[:n_e], e_cum[:n_e], g_mptr, g_lptr,
            gl_link[:n_gl], gl_cum[:n_gl]]


def _assert_same(kept: tuple, walked: tuple) -> None:
    for mine, theirs in zip(_used(kept), _used(walked)):
        assert np.array_equal(np.asarray(mine), np.asarray(theirs), equal_nan=True)


def _active(x: dict) -> np.ndarray:
    started = x["started"]
    return np.flatnonzero(started & (x["remaining"] > EPS_BYTES)).astype(np.int64)


@pytest.mark.parametrize("exact_above", [0, 20])  # every uniform group kept, or the larger ones
@pytest.mark.parametrize("seed", range(40))
def test_kept_totals_are_the_walked_ones_after_every_change(seed: int, exact_above: int) -> None:
    x = random_groups(seed)
    rng = np.random.default_rng(seed + 99)
    flows = len(x["remaining"])
    x["started"] = np.isin(np.arange(flows), x["active"]) | (rng.random(flows) < 0.3)
    table = TableArrays(**{name: x[name] for name in TableArrays._fields})
    totals = et.coflow_totals(table, exact_above)
    remaining = x["remaining"]
    for _ in range(12):
        _assert_same(*_walks(_active(x), table, totals, exact_above))
        rates = decide_with_and_without_totals(_active(x), table, totals, exact_above)
        # what moves between decisions: bytes of flows the decision gave a rate (the only ones whose
        # bytes change in a simulation; the kernel lists them for the next refresh): some served, some
        # done, a sliver left, a restart; and some flows start
        served = np.flatnonzero(rates > 0)
        if len(served):
            for f in rng.choice(served, size=max(1, len(served) // 2), replace=False):
                what = rng.random()
                if what < 0.5:
                    remaining[f] *= rng.random()
                elif what < 0.75:
                    remaining[f] = 0.0
                elif what < 0.85:
                    remaining[f] = EPS_BYTES * rng.random()
                else:
                    remaining[f] = rng.choice([1e5, 3.3e6]) * (1 + rng.random())
        x["started"][rng.choice(flows, size=max(1, flows // 5), replace=False)] = True


def _listed_after_changes(seed: int) -> int:
    """``live_members`` after random changes (members served, finished, left a sliver, and dead ones
    given bytes again) is the kept group's members with bytes left and a path, in member order, and
    ``live_links`` gives the links it sorted afresh; returns how many dead members came back."""
    x = random_groups(seed)
    table = TableArrays(**{name: x[name] for name in TableArrays._fields})
    totals = et.coflow_totals(table, 0)
    kept = [] if totals is None else [s for s in range(len(x["members_ptr"]) - 1) if totals.kept[s] == 1]
    rng = np.random.default_rng(seed + 5)
    remaining, members_ptr, members, path_ptr = x["remaining"], x["members_ptr"], x["members"], x["path_ptr"]
    revived = 0
    for _ in range(10):
        for slot in kept:
            span = members[members_ptr[slot]:members_ptr[slot + 1]]
            for f in rng.choice(span, size=max(1, len(span) // 3), replace=False):
                dead = remaining[f] <= EPS_BYTES
                choices = (remaining[f] * rng.random(), 0.0, EPS_BYTES * rng.random(), 2e6)
                remaining[f] = choices[int(rng.integers(4))]
                revived += dead and remaining[f] > EPS_BYTES and path_ptr[f + 1] > path_ptr[f]
                et.mark_moved(totals, slot, f)
            et.kept_and_live(totals, slot, table, 0)
            lo, hi = et.live_members(totals, slot, members_ptr, members)
            live = [int(f) for f in span if remaining[f] > EPS_BYTES and path_ptr[f + 1] > path_ptr[f]]
            assert [int(f) for f in totals.live_flows[lo:hi]] == live
            # the links in the order last sorted are those sorted afresh (``live_links``)
            kept_order, fresh = (_live_links(totals, slot, table, afresh) for afresh in (False, True))
            assert kept_order == fresh
    return revived


def _live_links(totals: et.CoflowTotals, slot: int, table: TableArrays, afresh: bool) -> tuple:
    """``live_links`` of ``slot`` (links, totals, first live member), its kept order forgotten first if
    ``afresh``."""
    if afresh:
        totals.link_count[slot] = -1
    n = int(totals.ent_ptr[slot + 1] - totals.ent_ptr[slot])
    links, hi, lo = ints(n), ints(n), ints(n)
    et.sort_live_links(totals, slot, table)
    end, first = et.live_links(totals, slot, table, links, hi, lo, 0)
    return list(links[:end]), list(hi[:end]), list(lo[:end]), first


@pytest.mark.parametrize("seed", range(30))
def test_a_kept_group_lists_exactly_its_live_members(seed: int) -> None:
    _listed_after_changes(seed)


def test_the_listing_tables_bring_members_back() -> None:
    """The listing test covers members coming back to life (a listing and a link order afresh), not only
    finishing."""
    assert sum(_listed_after_changes(seed) for seed in range(30)) > 30


def test_the_random_groups_keep_uniform_groups_and_walk_staggered_ones() -> None:
    """The comparison above means something only if the instances have kept groups of several
    members and groups that are walked."""
    kept = walked = 0
    for seed in range(60):
        x = random_groups(seed)
        totals = et.coflow_totals(TableArrays(**{name: x[name] for name in TableArrays._fields}), 0)
        flags = np.zeros(len(x["members_ptr"]) - 1) if totals is None else np.asarray(totals.kept)
        kept += int(np.sum((flags == 1) & (np.diff(x["members_ptr"]) > 1)))
        walked += int(np.sum(flags == 0))
    assert kept > 20 and walked > 20


@pytest.mark.parametrize("seed", range(60))
def test_kept_coflows_copied_as_they_come_select_what_the_flow_by_flow_pass_selects(seed: int) -> None:
    """Deciding at every flow event, a kept Coflow's run is copied reading its bytes left only
    (``echelon_kernels._edf_core``): the same flows, group starts, first due times and zeroed rates as
    the pass that reads every column, and the same decision.  Here active flows may have no bytes left
    and a Coflow's run may come out of flow-number order (then it is taken flow by flow).  Where the
    caller vouches the rates cleared (``cleared``; every third seed keeps every active flow's bytes and
    the flow-number order), the runs are not read at all and the same flows come out, in ``active``
    itself when none is left out."""
    x = random_groups(seed)
    rng = np.random.default_rng(seed + 7)
    group, remaining = x["group"], x["remaining"]
    active = np.flatnonzero(rng.random(len(remaining)) < 0.7).astype(np.int64)  # some with 0 bytes left
    clean = seed % 3 == 1
    if clean:
        remaining[active] = np.maximum(remaining[active], 1.0)
    else:
        remaining[active[rng.random(len(active)) < 0.1]] = EPS_BYTES * rng.random()
    table = TableArrays(**{name: x[name] for name in TableArrays._fields})
    totals = et.coflow_totals(table, 0)
    if totals is None or not np.any(totals.in_order):
        return
    if seed % 3 == 0:  # one vouched Coflow's run out of flow-number order
        slot = int(rng.choice(np.flatnonzero(np.asarray(totals.in_order))))
        run = np.flatnonzero(group[active] == slot)
        active[run] = active[run][::-1]
    n = len(active)
    outputs = []
    for in_order, cleared in ((totals.in_order, False), (ints(0), False), (totals.in_order, True)):
        if cleared and not clean:
            continue
        rate = np.ones(len(remaining))
        if cleared:
            rate[active] = 0.0
        sel, due, starts = ints(n), np.full(n, np.nan), ints(n + 1)
        m, n_groups, as_active = ek._edf_core(active, table, True, rate, sel, due, starts, in_order, cleared)
        if as_active:
            assert cleared and m == n
            sel = active
        heads = np.asarray(starts[:n_groups], dtype=np.int64)
        outputs.append((m, n_groups, list(sel[:m]), list(starts[:n_groups + 1]), list(due[heads]),
                        list(rate[active])))
    assert all(output == outputs[0] for output in outputs)
    assert all(r == 0.0 for r in outputs[0][5])
    decide_with_and_without_totals(active, table, totals, 0)


def test_exact_totals_carry_between_their_two_words() -> None:
    """A total is ``hi * 2**62 + lo``: adding and taking away across the carry gives the integer's own
    split, and its bits depend on the integer alone."""
    rng = np.random.default_rng(5)
    hi, lo, exact = 0, 0, 0
    for _ in range(2000):
        units = int(rng.integers(0, et.BASE))
        units = units if rng.random() < 0.6 or exact < units else -units
        hi, lo = et._added(hi, lo, units)
        exact += units
        assert (hi, lo) == divmod(exact, et.BASE)
        assert et.bits_of(hi, lo) == et.bits_of(*divmod(exact, et.BASE))
    assert et._units(1e6) == 8e6 * et.UNITS_PER_BIT
    with pytest.raises(ValueError, match="2\\*\\*54 bits"):
        et._units(2.0**51)


class _Checked(EchelonScheduler):
    """``echelon`` that compares, at every decision, the walk on its kept totals with a fresh walk
    (by default groups above 64 flows kept: kept and walked groups side by side)."""

    checked = 0

    def __init__(self, exact_above: int = 64) -> None:
        self.exact_above = exact_above

    def decide(self, view):
        arrays = view.table.arrays()
        totals = self._totals_for(view.table.layout, arrays)
        if totals is not None:
            _assert_same(*_walks(view.active, arrays, totals, self.exact_above))
            self.checked += 1
        return super().decide(view)


class _Walked(EchelonScheduler):
    """``echelon`` walking every group at every decision (nothing kept)."""

    def __init__(self, exact_above: int = 64) -> None:
        self.exact_above = exact_above

    def _totals_for(self, layout, arrays):
        return None


def _same_runs(topology, jobs, exact_above: int = 64, **kwargs) -> int:
    checked = _Checked(exact_above)
    kept = simulate(topology, jobs, checked, alone_runs=False, **kwargs)
    walked = simulate(topology, jobs, _Walked(exact_above), alone_runs=False, **kwargs)
    assert kept.flows == walked.flows and kept.jobs == walked.jobs
    assert kept.objective_s == walked.objective_s
    return checked.checked


def test_a_coflow_trace_runs_the_same_with_kept_totals() -> None:
    fb = load_scenario("fb2010")  # 60 of its mid-sized coflows (10 to 400 flows), all at once
    jobs = [dataclasses.replace(job, arrival_s=0.0) for job in fb.jobs if 10 <= len(job.flows) <= 400][:60]
    assert _same_runs(fb.topology, jobs) > 500


def test_a_training_scenario_runs_the_same_with_kept_totals() -> None:
    scenario = load_scenario("fattree-fsdp-ps")
    assert _same_runs(scenario.topology, scenario.jobs, exact_above=8) > 10


def test_a_fault_that_moves_paths_renews_the_kept_totals() -> None:
    """The fault moves flow a onto other links: totals kept on its old links would be stale."""
    topo = fattree(10e6, 4)
    jobs = [Job(name, {"f": FlowTask("f", src, dst, 2_500_000)})
            for name, src, dst in (("a", "h1", "h5"), ("b", "h2", "h6"), ("c", "h1", "h6"))]
    link = [hop for hop in Topology.links_of(topo.pair_path("h1", "h5")) if not hop[0].startswith("h")
            and not hop[1].startswith("h")][1]  # an aggregation-core link of a's
    events = [FaultEvent(0.5, "link", link), FaultEvent(1.5, "link", link, up=True)]
    scheduler = _Checked(exact_above=0)
    layouts = []
    inner = scheduler._totals_for

    def seen(layout, arrays):
        layouts.append(layout)
        return inner(layout, arrays)

    scheduler._totals_for = seen
    simulate(topo, jobs, scheduler, alone_runs=False, events=events)
    assert len({id(layout) for layout in layouts}) == 3  # the start, the fault, the repair
    assert _same_runs(topo, jobs, exact_above=0, events=events) > 2


_WITHOUT_NUMBA = """
import json, pickle, sys
sys.modules["numba"] = None
sys.path.insert(0, {root!r})
from echelonflow.schedulers import kernels
from echelonflow.schedulers.echelon import EchelonScheduler
assert not kernels.HAVE_NUMBA
from simulator.engine import simulate
scheduler = EchelonScheduler()
scheduler.exact_above = 0
topology, jobs = pickle.load(sys.stdin.buffer)
print(json.dumps(simulate(topology, jobs, scheduler, alone_runs=False).to_json_dict()))
"""


def test_kept_totals_interpreted_on_lists_give_the_compiled_run() -> None:
    """Without numba (the controller's Python 3.9 venv) the kept totals are Python lists and integers:
    the same run, to the last bit, as compiled."""
    root = Path(__file__).resolve().parent.parent
    fb = load_scenario("fb2010")
    jobs = [dataclasses.replace(job, arrival_s=0.0) for job in fb.jobs if 10 <= len(job.flows) <= 60][:8]
    # the jobs go to the child whole (loading the trace costs seconds in each process)
    child = subprocess.run([sys.executable, "-c", _WITHOUT_NUMBA.format(root=str(root))],
                           input=pickle.dumps((fb.topology, jobs)), capture_output=True, timeout=600,
                           cwd=root, env=dict(os.environ, PYTHONPATH=str(root)))
    assert child.returncode == 0, child.stderr.decode()[-3000:]
    scheduler = _Checked(exact_above=0)
    compiled = simulate(fb.topology, jobs, scheduler, alone_runs=False).to_json_dict()
    assert scheduler.checked > 50
    assert json.loads(child.stdout) == json.loads(json.dumps(compiled))
