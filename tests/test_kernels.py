"""The compiled scheduling kernels give bit-identical decisions to the same code run as plain Python.

``echelonflow/schedulers/kernels.py`` runs compiled by numba in the simulator and interpreted on lists
where numba is absent (the Python 3.9 controller venv).  Both must agree exactly, on random snapshots
of every topology kind, for every scheduler with a kernel and every ordering; and so must the kernels'
shortcuts (scan or heap, flows on full links skipped or listed) against the plain loops they replace.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from echelonflow.schedulers import kernels
from echelonflow.schedulers.aalo import AaloScheduler
from echelonflow.schedulers.echelon import ORDERINGS, EchelonScheduler, EchelonVarysScheduler
from echelonflow.schedulers.echelon_online import EchelonOnlineScheduler
from echelonflow.schedulers.fair import FairScheduler
from echelonflow.schedulers.fifo import FifoPriorityScheduler
from echelonflow.schedulers.sincronia import SincroniaScheduler
from echelonflow.schedulers.varys import CoflowScheduler, FifoScheduler, PortFairScheduler
from echelonflow.schedulers.view import decision_on_snapshot
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
