"""The compiled scheduling kernels give bit-identical decisions to the same code run as plain Python.

``echelonflow/schedulers/kernels.py`` runs compiled by numba in the simulator and interpreted on lists
where numba is absent (the Python 3.9 controller venv).  Both must agree exactly, on random snapshots
of every topology kind, for every scheduler with a kernel and every ordering.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

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
# as they are, both forced to their heaps, both forced to their scans of the links.
_INTERPRETED = """
import json, sys
sys.modules["numba"] = None
sys.path.insert(0, {root!r})
from echelonflow.schedulers import kernels
from echelonflow.schedulers.view import decision_on_snapshot
assert not kernels.HAVE_NUMBA
from tests.test_kernels import SEEDS, schedulers
from tests.instances import random_snapshot
variants = {{"as-is": (kernels.SCAN_FACTOR, kernels.BSSI_SCAN_FACTOR), "heap": (0, 0),
            "scan": (10**9, 10**9)}}
out = {{}}
for variant, (scan_factor, bssi_factor) in variants.items():
    kernels.SCAN_FACTOR, kernels.BSSI_SCAN_FACTOR = scan_factor, bssi_factor
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

