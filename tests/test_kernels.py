"""The compiled scheduling kernels give bit-identical decisions to the same code run as plain Python.

``echelonflow/schedulers/kernels.py`` runs compiled by numba in the simulator and interpreted on lists
where numba is absent (the Python 3.9 controller venv).  Both must agree exactly, on random snapshots
of every topology kind, for every scheduler with a kernel and every ordering; and so must the kernels'
shortcuts (scan or heap, flows on full links skipped or listed) against the plain loops they replace.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from echelonflow.schedulers import kernels, varys_kernels
from echelonflow.schedulers.aalo import AaloScheduler
from echelonflow.schedulers.echelon import ORDERINGS, EchelonScheduler, EchelonVarysScheduler
from echelonflow.schedulers.echelon_online import EchelonOnlineScheduler
from echelonflow.schedulers.fair import FairScheduler
from echelonflow.schedulers.fifo import FifoPriorityScheduler
from echelonflow.schedulers.sincronia import SincroniaScheduler
from echelonflow.schedulers.varys import CoflowScheduler, FifoScheduler, PortFairScheduler
from echelonflow.schedulers.view import decision_on_snapshot, snapshot_view
from tests.instances import random_snapshot

ROOT = Path(__file__).resolve().parent.parent
SEEDS = range(40)

# Runs in a child process with numba made unimportable: the kernels fall back to Python lists.  Each
# variant sets the shortcuts of fair's filling (kernels.SCAN_FACTOR) and of BSSI (kernels.BSSI_SCAN_FACTOR):
# as they are, both forced to their heaps, both forced to their scans of the links; and filling with the
# flows that cross a full link listed (kernels.SKIP_BLOCKED off), with the scan and with the heap.
_INTERPRETED = """
import json, sys
sys.modules["numba"] = None
sys.path.insert(0, {root!r})
from echelonflow.schedulers import kernels
from echelonflow.schedulers.view import decision_on_snapshot
assert not kernels.HAVE_NUMBA
from tests.test_kernels import SEEDS, schedulers
from tests.instances import random_snapshot
as_is = (kernels.SCAN_FACTOR, kernels.BSSI_SCAN_FACTOR)
variants = {{"as-is": (*as_is, True), "heap": (0, 0, True), "scan": (10**9, 10**9, True),
            "blocked-listed": (*as_is, False), "blocked-listed-heap": (0, 0, False)}}
out = {{}}
for variant, (scan_factor, bssi_factor, skip_blocked) in variants.items():
    kernels.SCAN_FACTOR, kernels.BSSI_SCAN_FACTOR = scan_factor, bssi_factor
    kernels.SKIP_BLOCKED = skip_blocked
    kernels.BSSI_ONE_USER_FIRST = variant == "as-is"  # the plain search over every link otherwise
    for seed in SEEDS:
        snap = random_snapshot(seed, 1 + seed % 25)
        for key, sched in schedulers():
            d = decision_on_snapshot(sched, snap)
            out[f"{{variant}}/{{seed}}/{{key}}"] = [d.rate_bps, d.rank]
print(json.dumps(out))
"""


@functools.lru_cache(maxsize=1)
def interpreted_decisions() -> dict:
    """variant/seed/scheduler -> [rates, ranks] from the interpreted kernels (one child for both tests)."""
    code = _INTERPRETED.format(root=str(ROOT))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900,
                           cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout)


def assert_compiled_equal_interpreted(variants: tuple[str, ...]) -> None:
    interpreted = interpreted_decisions()
    compared = 0
    for seed in SEEDS:
        snap = random_snapshot(seed, 1 + seed % 25)
        for key, sched in schedulers():
            decision = decision_on_snapshot(sched, snap)
            for variant in variants:
                rates, ranks = interpreted[f"{variant}/{seed}/{key}"]
                assert decision.rate_bps == rates, (variant, seed, key)  # exact: same floats
                assert decision.rank == ranks, (variant, seed, key)
                compared += 1
    assert compared == len(variants) * len(SEEDS) * len(schedulers())


def schedulers() -> list[tuple[str, object]]:
    out = [("fair", FairScheduler()), ("coflow", CoflowScheduler())]
    # varys_kernels: MADD in arrival order, CoflowSim's FAIR
    out += [("fifo", FifoScheduler()), ("port-fair", PortFairScheduler())]
    out += [("echelon", EchelonScheduler())]
    out += [(f"echelon-varys-{o}", EchelonVarysScheduler(order_by=o)) for o in ORDERINGS]
    # group-by-group policies: kernels.priority_decide (all three), kernels.bssi_order (sincronia)
    out += [("fifo-priority", FifoPriorityScheduler()), ("sincronia", SincroniaScheduler()),
            ("aalo", AaloScheduler())]
    # kernels.online_estimate, both branches: some parts learned (sizes below and above what was sent)
    learning = EchelonOnlineScheduler()
    learning.learned = {f"f{i}": (2e4 * (i + 1), 0.1 * i) for i in range(0, 25, 3)}
    out += [("echelon-online", EchelonOnlineScheduler()), ("echelon-online-learned", learning)]
    return out


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_compiled_and_interpreted_kernels_agree_bit_for_bit() -> None:
    assert_compiled_equal_interpreted(("as-is",))


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_shortcuts_give_the_same_decisions_as_the_plain_loops() -> None:
    """Fair's filling and BSSI with their heaps forced and with their scans forced: the very same
    decisions."""
    assert_compiled_equal_interpreted(("heap", "scan"))


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_flows_on_full_links_skipped_give_the_plain_filling_s_rates() -> None:
    """Filling that gives a flow crossing a full link rate 0 without listing it (the groups served
    before a group took the link): the very same rates and ranks as filling that lists it."""
    assert_compiled_equal_interpreted(("blocked-listed", "blocked-listed-heap"))


def _tied_fill_instance(seed: int):
    """Flows of one to three links among a few links of equal capacity (exact ties between fair shares,
    where the link frozen first sets the last bit), some links full: (sel, m, path_ptr, path_links,
    capacity)."""
    rng = np.random.default_rng(seed)
    n_links, n_flows = int(rng.integers(3, 9)), int(rng.integers(2, 30))
    capacity = np.where(rng.random(n_links) < 0.3, 0.0, 1e9)
    lengths = np.minimum(rng.integers(1, 4, n_flows), n_links)
    path_ptr = np.zeros(n_flows + 1, dtype=np.int64)
    np.cumsum(lengths, out=path_ptr[1:])
    path_links = np.concatenate([rng.choice(n_links, int(k), replace=False) for k in lengths])
    return np.arange(n_flows, dtype=np.int64), n_flows, path_ptr, path_links.astype(np.int64), capacity


def _first_used_by_a_blocked_flow(path_ptr, path_links, capacity) -> bool:
    """Whether a link with capacity left is first used by a flow that crosses a full link: where
    skipping the blocked flows' links when numbering would move a tie."""
    seen = set()
    for f in range(len(path_ptr) - 1):
        links = path_links[path_ptr[f]:path_ptr[f + 1]].tolist()
        fresh = [li for li in links if li not in seen and capacity[li] > 0.0]
        if fresh and any(capacity[li] <= 0.0 for li in links):
            return True
        seen.update(links)
    return False


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_filling_skips_flows_on_full_links_without_moving_a_tie(monkeypatch) -> None:
    """On exact ties between links' fair shares the link frozen first decides the last bit, so the
    blocked flows must keep their links' numbers (the tie order): the compiled filling with them
    skipped equals, bit for bit, the plain Python filling that lists them."""
    tie_cases = 0
    for seed in range(2000):
        sel, m, path_ptr, path_links, capacity = _tied_fill_instance(seed)
        skipped, listed = np.zeros(m), np.zeros(m)
        kernels._fill(sel, m, path_ptr, path_links, capacity, skipped, kernels._unnumbered(len(capacity)))
        with monkeypatch.context() as patch:
            patch.setattr(kernels, "SKIP_BLOCKED", False)
            kernels._fill.py_func(sel, m, path_ptr, path_links, capacity, listed,
                                  kernels._unnumbered(len(capacity)))
        assert skipped.tolist() == listed.tolist(), seed
        tie_cases += _first_used_by_a_blocked_flow(path_ptr, path_links, capacity)
    assert tie_cases >= 100


def _bssi_instance(seed: int) -> tuple:
    """Demands for BSSI on a few links, most with one user, seconds from a few values (exact ties
    between a group's one-user links, and between links of different groups): (dem_ptr, dem_link,
    dem_time, n_local, weights)."""
    rng = np.random.default_rng(seed)
    n_groups, n_local = int(rng.integers(1, 10)), int(rng.integers(1, 40))
    ptr, links, times = [0], [], []
    for _ in range(n_groups):
        chosen = rng.choice(n_local, int(rng.integers(0, min(n_local, 8) + 1)), replace=False)
        links += sorted(int(li) for li in chosen)
        times += [float(rng.choice([0.25, 1.0, 1.0, 2.0, 3.5])) for _ in chosen]
        ptr.append(len(links))
    weights = rng.choice([0.5, 1.0, 2.0], n_groups).astype(float)
    return (np.array(ptr, np.int64), np.array(links, np.int64), np.array(times), n_local, weights)


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_bssi_leaves_out_one_user_links_without_changing_the_order(monkeypatch) -> None:
    """BSSI's order with the one-user links that cannot be the bottleneck left out of its search
    (compiled, as it runs) against the plain search over every link, with the heap and with the scan,
    on random demands full of exact ties."""
    pruned = 0
    for seed in range(400):
        instance = _bssi_instance(seed)
        got = kernels.bssi_from_demands(*instance).tolist()
        ptr, links, _, n_local, _ = instance
        users = np.bincount(links, minlength=n_local)
        pruned += int(np.sum(users == 1)) - sum(1 for g in range(len(ptr) - 1)
                                                 if np.any(users[links[ptr[g]:ptr[g + 1]]] == 1))
        for factor in (0, 10**9):  # the heap, the scan
            with monkeypatch.context() as patch:
                patch.setattr(kernels, "BSSI_ONE_USER_FIRST", False)
                patch.setattr(kernels, "BSSI_SCAN_FACTOR", factor)
                patch.setattr(kernels, "_bssi_candidates", kernels._bssi_candidates.py_func)
                assert kernels.bssi_from_demands.py_func(*instance).tolist() == got, (seed, factor)
    assert pruned > 500  # links were left out


# --------------------------------------------------------------------------- Varys's shortcuts
def _plain_varys(active, t, order_by, rate, order) -> int:
    """``varys_kernels.varys_decide`` as its docstring defines it, with none of its shortcuts: every
    group's bottleneck over every prefix of its flows (``kernels._bottleneck``, a division per flow and
    link), the first group's recomputed on the untouched residual, the largest flow id looked up for
    the weight, and the skipped groups' even shares divided per flow (plain Python throughout)."""
    k = kernels
    sel = [f for f in active if t.remaining[f] > k.EPS_BYTES and t.path_ptr[f + 1] > t.path_ptr[f]]
    for f in active:
        rate[f] = 0.0
    runs = [[f] for f in sel[:1]]
    for f in sel[1:]:
        if t.group[f] == t.group[runs[-1][-1]]:
            runs[-1].append(f)
        else:
            runs.append([f])
    bits = {f: 8.0 * t.remaining[f] for f in sel}
    n_links = len(t.capacity)

    def bottleneck(flows, cap) -> float:
        flat = np.array(flows, dtype=np.int64)
        return k._bottleneck.py_func(flat, np.array([bits[f] for f in flows]), np.zeros(len(flows)), 0.0, 0,
                                     len(flows), t.path_ptr, t.path_links, cap, np.zeros(n_links),
                                     np.zeros(n_links, dtype=np.int64))

    keys = []
    for flows in runs:
        if order_by == varys_kernels.ORDER_ARRIVAL:
            keys.append(t.reference[t.ref_slot[flows[0]]])
        else:
            last = max(flows, key=lambda f: t.idrank[f])
            keys.append(bottleneck(flows, t.capacity) / t.weight[last])
    residual = np.array(t.capacity, dtype=np.float64)
    skipped, pos = [], 0
    for g in sorted(range(len(runs)), key=keys.__getitem__):
        for f in runs[g]:
            order[pos] = f
            pos += 1
        gamma = bottleneck(runs[g], residual)
        if gamma == math.inf:
            skipped.append(g)
            continue
        for f in runs[g]:
            want = bits[f] / gamma if gamma > 0 else math.inf
            give = min(want, k._path_min.py_func(f, t.path_ptr, t.path_links, residual))
            if give > 0:
                rate[f] = give
                k._consume.py_func(f, give, t.path_ptr, t.path_links, residual, t.capacity)
    eligible = [f for g in skipped for f in runs[g]
                if k._path_min.py_func(f, t.path_ptr, t.path_links, residual) > 0]
    count = np.zeros(n_links, dtype=np.int64)
    for f in eligible:
        count[t.path_links[t.path_ptr[f]:t.path_ptr[f + 1]]] += 1
    for f in eligible:
        rate[f] = min(residual[li] / count[li] for li in t.path_links[t.path_ptr[f]:t.path_ptr[f + 1]])
    for f in eligible:
        if rate[f] > 0:
            k._consume.py_func(f, rate[f], t.path_ptr, t.path_links, residual, t.capacity)
    k._backfill.py_func(order, len(sel), t.path_ptr, t.path_links, residual, t.capacity, rate)
    return len(sel)


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_varys_kernel_s_shortcuts_give_the_plain_definition_s_rates() -> None:
    """Varys's kernel divides once per link (a link's running sum only grows), reuses the first group's
    key as its MADD bottleneck, reads the weight off the group's last flow and divides the skipped
    groups' shares once per link: the same rates and ranks, bit for bit, as the definition without
    them, in SEBF and arrival order, on random snapshots with some links down (capacity 0).  Given a
    clean ``active`` (``whole``: every flow with bytes and a path), it writes every active flow's rate
    without zeroing them first: rates left at -1 from before would show."""
    compared = zero_rates = 0
    for seed in range(300):
        view = snapshot_view(random_snapshot(seed, 2 + seed % 40), "group")
        table = view.table.arrays()
        capacity = np.array(table.capacity, dtype=np.float64)
        if seed % 3 == 0:
            capacity[np.random.default_rng(seed).random(len(capacity)) < 0.15] = 0.0
        table = table._replace(capacity=capacity)
        everyone = np.asarray(view.active, dtype=np.int64)
        clean = np.array([f for f in everyone.tolist() if table.remaining[f] > kernels.EPS_BYTES
                          and table.path_ptr[f + 1] > table.path_ptr[f]], dtype=np.int64)
        orders = (varys_kernels.ORDER_SEBF, varys_kernels.ORDER_ARRIVAL)
        for (whole, active), order_by in itertools.product(((False, everyone), (True, clean)), orders):
            n = len(table.remaining)
            rate, order = np.full(n, -1.0), np.full(n, -1, dtype=np.int64)
            plain_rate, plain_order = np.full(n, -1.0), np.full(n, -1, dtype=np.int64)
            admission = np.full(len(table.reference), -1.0)
            m = varys_kernels.varys_decide(active, table, order_by, rate, order, admission, whole)
            assert _plain_varys(active, table, order_by, plain_rate, plain_order) == m
            assert rate.tolist() == plain_rate.tolist(), (seed, order_by, whole)
            assert order[:m].tolist() == plain_order[:m].tolist(), (seed, order_by, whole)
            compared += 1
            zero_rates += any(r == 0.0 for r in rate[active].tolist())
    assert compared == 1200 and zero_rates >= 100


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_varys_kernel_on_a_clean_view_writes_a_rate_madd_cannot_give() -> None:
    """A MADD group's last flow can find its link emptied by the flows before it (their shares sum to
    the link's capacity up to rounding, and the dust left is taken to 0): its rate is 0, and on a clean
    view, where nothing was zeroed first, the kernel must write that 0 itself."""
    from echelonflow.schedulers.base import ActiveFlow, Snapshot
    from echelonflow.topology import Topology, build

    topo = build("bigswitch", 1e6, hosts=2)
    path = Topology.links_of(topo.path_for("h1", "h2", "f"))
    sizes = [1e9, 1e9, 1e-4]  # the last one's MADD share is below the dust left on the link
    flows = [ActiveFlow(f"f{i}", "g", path, size, 1.0, 0.0, 1.0) for i, size in enumerate(sizes)]
    view = snapshot_view(Snapshot(0.0, topo.capacity_bps(), flows), "group")
    table = view.table.arrays()
    active = np.asarray(view.active, dtype=np.int64)
    rate = np.full(len(table.remaining), -1.0)
    order = kernels.unset_ints(len(active))
    admission = np.full(len(table.reference), -1.0)
    sebf = varys_kernels.ORDER_SEBF
    assert varys_kernels.varys_decide(active, table, sebf, rate, order, admission, True) == 3
    tiny = int(np.argmin(table.remaining))
    assert rate[tiny] == 0.0 and all(abs(r - 5e5) < 1e-3 for r in sorted(rate.tolist())[1:])


@pytest.mark.parametrize("seed", range(10))
def test_a_groups_rate_is_its_flows_rates_summed_in_order(seed: int) -> None:
    """``kernels.group_rate_sums`` (Aalo's queue-change expiry reads it) is the Python sum of each
    group's flows' rates in ``active`` order, to the last bit."""
    rng = np.random.default_rng(seed)
    rate = rng.random(60) * 1e9
    active = np.sort(rng.choice(60, 40, replace=False)).astype(np.int64)
    cuts = sorted(set(rng.integers(1, 40, 6).tolist()))
    ptr = np.array([0, *cuts, 40], dtype=np.int64)
    sums = np.zeros(len(ptr) - 1)
    kernels.group_rate_sums(active, ptr, rate, sums)
    want = [sum(float(rate[f]) for f in active[ptr[g]:ptr[g + 1]]) for g in range(len(ptr) - 1)]
    assert sums.tolist() == want


def _blocked_groups_instance(seed: int):
    """Strict priority on a small big switch (two links a flow, some ports shared by every group), so
    that the first groups fill links and later groups find some or all of their flows blocked, the
    first flow of a group blocked while a later one is not among them: (active, group_ptr, remaining,
    path_ptr, path_links, capacity)."""
    rng = np.random.default_rng(seed)
    n_ports, n_groups = int(rng.integers(2, 6)), int(rng.integers(2, 8))
    sizes = rng.integers(1, 6, n_groups)
    n_flows = int(sizes.sum())
    ingress = rng.integers(0, n_ports, n_flows)
    egress = n_ports + rng.integers(0, n_ports, n_flows)
    path_links = np.stack([ingress, egress], axis=1).reshape(-1).astype(np.int64)
    path_ptr = np.arange(0, 2 * n_flows + 1, 2, dtype=np.int64)
    group_ptr = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(sizes, out=group_ptr[1:])
    capacity = rng.choice([1e9, 2e9], 2 * n_ports)
    remaining = rng.choice([0.0, 1e6, 3e6], n_flows, p=[0.1, 0.45, 0.45])
    return np.arange(n_flows, dtype=np.int64), group_ptr, remaining, path_ptr, path_links, capacity


def _groups_blocked(active, group_ptr, path_ptr, path_links, capacity, rate) -> tuple[int, int]:
    """(groups whose every flow crossed a full link when served, groups whose first flow did but not
    every flow), replaying strict priority's residuals from the rates given."""
    residual = capacity.copy()
    whole = first_only = 0
    for g in range(len(group_ptr) - 1):
        flows = active[group_ptr[g]:group_ptr[g + 1]]
        blocked = [min(residual[path_links[path_ptr[f]:path_ptr[f + 1]]]) <= 0.0 for f in flows]
        whole += all(blocked)
        first_only += blocked[0] and not all(blocked)
        for f in flows:
            residual[path_links[path_ptr[f]:path_ptr[f + 1]]] -= rate[f]
        np.maximum(residual, 0.0, out=residual)
    return whole, first_only


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_groups_whose_every_flow_is_blocked_are_passed_over_with_the_plain_rates(monkeypatch) -> None:
    """Strict priority passing over a group whose every flow crosses a full link (rate 0 for each,
    nothing taken off) gives, bit for bit, the rates of the plain Python loop that fills every group;
    the instances hold such groups and groups whose first flow alone is blocked."""
    whole = first_only = 0
    for seed in range(300):
        active, group_ptr, remaining, path_ptr, path_links, capacity = _blocked_groups_instance(seed)
        passed, plain = np.full(len(active), -1.0), np.full(len(active), -1.0)
        kernels.priority_decide(active, group_ptr, remaining, path_ptr, path_links, capacity, passed,
                                False, 0)
        with monkeypatch.context() as patch:
            patch.setattr(kernels, "SKIP_BLOCKED", False)
            kernels.priority_decide.py_func(active, group_ptr, remaining, path_ptr, path_links, capacity,
                                            plain, False, 0)
        assert passed.tolist() == plain.tolist(), seed
        counts = _groups_blocked(active, group_ptr, path_ptr, path_links, capacity, plain)
        whole, first_only = whole + counts[0], first_only + counts[1]
    assert whole >= 100 and first_only >= 20, (whole, first_only)
