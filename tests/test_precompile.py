"""Set-up compiles every scheduling kernel, so no decision pays numba's compiler on a clock.

``bootstrap.sh`` runs ``python -m simulator.precompile``; a kernel it does not reach would be compiled
inside the controller's first API request (13 s for echelon's, over the 10 s request limit) or inside
an emulated run.  Here the module runs in a child with an empty numba cache, and every compiled
function of the kernel modules must have left its cache index there.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from echelonflow.schedulers import kernels

ROOT = Path(__file__).resolve().parent.parent
KERNEL_MODULES = ("kernels", "echelon_kernels", "echelon_totals", "varys_kernels")


@pytest.mark.slow
@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_precompile_reaches_every_kernel(tmp_path):
    from numba.core.registry import CPUDispatcher

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    subprocess.run([sys.executable, "-m", "simulator.precompile"], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=600)
    indexed = {path.name for path in tmp_path.rglob("*.nbi")}
    missing = []
    for short in KERNEL_MODULES:
        module = importlib.import_module(f"echelonflow.schedulers.{short}")
        for name, value in vars(module).items():
            own = isinstance(value, CPUDispatcher) and value.__module__ == module.__name__
            if own and not any(entry.startswith(f"{short}.{name}-") for entry in indexed):
                missing.append(f"{short}.{name}")
    assert not missing, f"not compiled by simulator.precompile: {missing}"
