"""The compiled scheduling kernels give bit-identical decisions to the same code run as plain Python.

``echelonflow/schedulers/kernels.py`` runs compiled by numba in the simulator and interpreted on lists
where numba is absent (the Python 3.9 controller venv).  Both must agree exactly, on random snapshots
of every topology kind, for every scheduler with a kernel and every ordering.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from echelonflow.schedulers import kernels
from echelonflow.schedulers.aalo import AaloScheduler
from echelonflow.schedulers.echelon import ORDERINGS, CoflowScheduler, EchelonScheduler
from echelonflow.schedulers.fair import FairScheduler
from echelonflow.schedulers.fifo import FifoScheduler
from echelonflow.schedulers.sincronia import SincroniaScheduler
from tests.test_schedulers import _random_instance

ROOT = Path(__file__).resolve().parent.parent
SEEDS = range(40)

# Runs in a child process with numba made unimportable: the kernels fall back to Python lists.
_INTERPRETED = """
import json, sys
sys.modules["numba"] = None
sys.path.insert(0, {root!r})
from echelonflow.schedulers import kernels
assert not kernels.HAVE_NUMBA
from tests.test_kernels import SEEDS, schedulers
from tests.test_schedulers import _random_instance
out = {{}}
for seed in SEEDS:
    snap = _random_instance(seed, 1 + seed % 25)
    for key, sched in schedulers():
        d = sched.decide(snap)
        out[f"{{seed}}/{{key}}"] = [d.rate_bps, d.rank]
print(json.dumps(out))
"""


def schedulers() -> list[tuple[str, object]]:
    out = [("fair", FairScheduler()), ("coflow", CoflowScheduler())]
    out += [(f"echelon-{o}", EchelonScheduler(order_by=o)) for o in ORDERINGS]
    # group-by-group policies: kernels.priority_decide (all three), kernels.bssi_order (sincronia)
    out += [("fifo", FifoScheduler()), ("sincronia", SincroniaScheduler()), ("aalo", AaloScheduler())]
    return out


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_compiled_and_interpreted_kernels_agree_bit_for_bit() -> None:
    code = _INTERPRETED.format(root=str(ROOT))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                           cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert child.returncode == 0, child.stderr[-3000:]
    interpreted = json.loads(child.stdout)
    compared = 0
    for seed in SEEDS:
        snap = _random_instance(seed, 1 + seed % 25)
        for key, sched in schedulers():
            decision = sched.decide(snap)
            rates, ranks = interpreted[f"{seed}/{key}"]
            assert decision.rate_bps == rates, (seed, key)  # exact: same floats, not approximately
            assert decision.rank == ranks, (seed, key)
            compared += 1
    assert compared == len(SEEDS) * len(schedulers())


# The same interpreted kernels with each shortcut switched off or forced: the heap of fair shares
# against the scan of the links (kernels.SCAN_FACTOR), and the bottleneck of a group with one slack
# against the per-flow loop (kernels._uniform).  Each must give the very same decisions.
_VARIANTS = """
import json, sys
sys.modules["numba"] = None
sys.path.insert(0, {root!r})
from echelonflow.schedulers import kernels
assert not kernels.HAVE_NUMBA
from tests.test_kernels import SEEDS, schedulers
from tests.test_schedulers import _random_instance
uniform = kernels._uniform
variants = {{"heap": (0, uniform), "scan": (10**9, uniform), "per-flow": (0, lambda *args: False)}}
out = {{}}
for variant, (scan_factor, uniform_test) in variants.items():
    kernels.SCAN_FACTOR, kernels._uniform = scan_factor, uniform_test
    for seed in SEEDS:
        snap = _random_instance(seed, 1 + seed % 25)
        for key, sched in schedulers():
            d = sched.decide(snap)
            out[f"{{variant}}/{{seed}}/{{key}}"] = [d.rate_bps, d.rank]
print(json.dumps(out))
"""


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_shortcuts_give_the_same_decisions_as_the_plain_loops() -> None:
    code = _VARIANTS.format(root=str(ROOT))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                           cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert child.returncode == 0, child.stderr[-3000:]
    variants = json.loads(child.stdout)
    compared = 0
    for seed in SEEDS:
        snap = _random_instance(seed, 1 + seed % 25)
        for key, sched in schedulers():
            decision = sched.decide(snap)
            for variant in ("heap", "scan", "per-flow"):
                rates, ranks = variants[f"{variant}/{seed}/{key}"]
                assert decision.rate_bps == rates, (variant, seed, key)
                assert decision.rank == ranks, (variant, seed, key)
                compared += 1
    assert compared == 3 * len(SEEDS) * len(schedulers())
