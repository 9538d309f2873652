"""Set-up compiles every scheduling kernel, so no decision pays numba's compiler on a clock.

``bootstrap.sh`` runs ``python -m simulator.precompile``; a kernel it does not reach would be compiled
inside the controller's first API request (13 s for echelon's, over the 10 s request limit) or inside
an emulated run.  What a fresh compilation reached is read from set-up's own record when set-up compiled
these very sources afresh (a new checkout: every clean-clone run), else from a child that runs the module
with an empty numba cache: every compiled function of the kernel modules must have left its cache index.
The same compilation reports what the helpers that borrow their callers' arrays return
(``kernels.jit_borrowing``): a helper found in the cache holds no signatures, so only a fresh
compilation can tell.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from echelonflow.schedulers import kernels
from simulator import precompile

ROOT = Path(__file__).resolve().parent.parent

#: Run in the child: ``python -m simulator.precompile``'s compilation, then its report.
CHILD = """
import json
from simulator.precompile import compile_all, report
compile_all()
print(json.dumps(report()))
"""


@pytest.fixture(scope="module")
def fresh_compilation(tmp_path_factory) -> dict:
    """``simulator.precompile.report()`` of a compilation from an empty cache: set-up's record of these
    sources, or a child's."""
    record = precompile.recorded()
    if record is not None:
        return record
    cache = tmp_path_factory.mktemp("numba-cache")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_precompile_reaches_every_kernel(fresh_compilation):
    assert fresh_compilation["fresh"]
    missing = sorted(set(precompile.kernel_dispatchers()) - set(fresh_compilation["indexed"]))
    assert not missing, f"not compiled by simulator.precompile: {missing}"


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_a_record_of_other_sources_is_not_read(tmp_path):
    """Set-up's record counts only for the sources it was made on: another digest, or no file, or a
    file that is not a record, and the test compiles afresh instead."""
    record = tmp_path / precompile.RECORD
    assert precompile.recorded(str(tmp_path)) is None
    record.write_text("not json")
    assert precompile.recorded(str(tmp_path)) is None
    record.write_text(json.dumps({"digest": "0" * 64, "fresh": True, "indexed": [], "returns": {}}))
    assert precompile.recorded(str(tmp_path)) is None
    mine = {"digest": precompile.sources_digest(), "fresh": True, "indexed": [], "returns": {}}
    record.write_text(json.dumps(mine))
    assert precompile.recorded(str(tmp_path)) == mine


def holds_array(type_repr: str) -> bool:
    """Does a numba type, as ``str`` spells it, carry an array (itself, or in a tuple or Optional)?"""
    return "array(" in type_repr


@pytest.mark.slow
@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="numba is not installed in this venv")
def test_helpers_that_borrow_their_callers_arrays_return_none(fresh_compilation):
    """A helper compiled without reference counting (``kernels.jit_borrowing``) that returned an array,
    or a view of one in a tuple, would hand its caller a reference the caller later releases once too
    often: memory freed while in use (``_covered``, which returns a slice, corrupted the heap so).
    numba refuses allocation there, not such a return, so every such helper, compiled with the
    argument types the schedulers use, must return no array."""
    returns = fresh_compilation["returns"]
    assert len(returns) == len(kernels.BORROWING) >= 30
    never_compiled = [name for name, types in returns.items() if not types]
    returning = [f"{name}: {t}" for name, types in returns.items() for t in types if holds_array(t)]
    assert not never_compiled, f"not reached by simulator.precompile: {never_compiled}"
    assert not returning, f"borrowing helpers returning an array: {returning}"
