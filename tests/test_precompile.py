"""Set-up compiles every scheduling kernel, so no decision pays numba's compiler on a clock.

``bootstrap.sh`` runs ``python -m simulator.precompile``; a kernel it does not reach would be compiled
inside the controller's first API request (13 s for echelon's, over the 10 s request limit) or inside
an emulated run.  Here the module runs in a child with an empty numba cache, and every compiled
function of the kernel modules must have left its cache index there.  The same child, having compiled
everything afresh, reports what the helpers that borrow their callers' arrays return
(``kernels.jit_borrowing``): a helper found in the cache holds no signatures, so only a fresh
compilation can tell.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from echelonflow.schedulers import kernels

ROOT = Path(__file__).resolve().parent.parent
KERNEL_MODULES = ("kernels", "echelon_kernels", "echelon_totals", "varys_kernels")

#: Run in the child: ``python -m simulator.precompile``'s main, then, per borrowing helper, the return
#: types it was compiled with.
CHILD = """
import json
from simulator.precompile import main
from echelonflow.schedulers.kernels import BORROWING
main()
print(json.dumps({d.__module__ + "." + d.__name__: [str(s.return_type) for s in d.nopython_signatures]
                  for d in BORROWING}))
"""


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory) -> tuple[Path, dict]:
    """(the child's numba cache, borrowing helper -> return types), set-up's compilation done afresh."""
    cache = tmp_path_factory.mktemp("numba-cache")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True, timeout=600)
    return cache, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_precompile_reaches_every_kernel(fresh_cache):
    from numba.core.registry import CPUDispatcher

    indexed = {path.name for path in fresh_cache[0].rglob("*.nbi")}
    missing = []
    for short in KERNEL_MODULES:
        module = importlib.import_module(f"echelonflow.schedulers.{short}")
        for name, value in vars(module).items():
            own = isinstance(value, CPUDispatcher) and value.__module__ == module.__name__
            if own and not any(entry.startswith(f"{short}.{name}-") for entry in indexed):
                missing.append(f"{short}.{name}")
    assert not missing, f"not compiled by simulator.precompile: {missing}"


def holds_array(type_repr: str) -> bool:
    """Does a numba type, as ``str`` spells it, carry an array (itself, or in a tuple or Optional)?"""
    return "array(" in type_repr


@pytest.mark.slow
@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_helpers_that_borrow_their_callers_arrays_return_none(fresh_cache):
    """A helper compiled without reference counting (``kernels.jit_borrowing``) that returned an array,
    or a view of one in a tuple, would hand its caller a reference the caller later releases once too
    often: memory freed while in use (``_covered``, which returns a slice, corrupted the heap so).
    numba refuses allocation there, not such a return, so every such helper, compiled with the
    argument types the schedulers use, must return no array."""
    importlib.import_module("simulator.precompile")  # what the child imports: every module with a helper
    returns = fresh_cache[1]
    assert len(returns) == len(kernels.BORROWING) >= 30
    never_compiled = [name for name, types in returns.items() if not types]
    returning = [f"{name}: {t}" for name, types in returns.items() for t in types if holds_array(t)]
    assert not never_compiled, f"not reached by simulator.precompile: {never_compiled}"
    assert not returning, f"borrowing helpers returning an array: {returning}"
