"""Compile every scheduler's numba kernels into this machine's cache, once, at set-up time.

Why: numba compiles a kernel on its first call and ``cache=True`` keeps the machine code beside the
source (keyed on the source file's timestamp), so on a fresh checkout the first decision of each
scheduler pays the compilation: about 13 s for ``echelon`` alone, 20 s for all of them.  A controller
that pays it inside its first API request overruns the request's 10 s limit, and an emulation that
pays it on the clock measures the compiler.  ``bootstrap.sh`` runs this module after installing the
project, so the cost falls on set-up; with a warm cache it takes about a second.

Simulating the bundled fig2 scenario under each scheduler calls every kernel with the argument types
the controller uses too (the same flow table), which is what the cache is keyed on; a few small FB2010
coflows under ``echelon`` with every Coflow kept reach its kept totals (``echelon_totals.py``), which
serve only Coflows above ``echelon_kernels.EXACT_ABOVE`` flows.

When the compilation was fresh (nothing found in the cache: a new checkout, or sources just edited)
this module records what it compiled beside the virtualenv (:data:`RECORD`), keyed on a digest of the
sources: tests/test_precompile.py checks that record, which is what set-up did on these very sources,
instead of compiling everything once more in a child (about a minute of CPU in every clean-clone run).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from echelonflow.scenario import load_scenario
from echelonflow.schedulers import SCHEDULERS, get_scheduler
from echelonflow.schedulers.kernels import HAVE_NUMBA
from simulator.engine import simulate


def compile_all() -> float:
    """Run fig2 under every scheduler; returns the seconds it took (0 without numba)."""
    if not HAVE_NUMBA:
        return 0.0
    started = time.monotonic()
    scenario = load_scenario("fig2")
    for name in SCHEDULERS:
        simulate(scenario.topology, scenario.jobs, get_scheduler(name))
    trace = load_scenario("fb2010")
    coflows = [dataclasses.replace(job, arrival_s=0.0) for job in trace.jobs if 2 <= len(job.flows) <= 8][:4]
    echelon = get_scheduler("echelon")
    echelon.exact_above = 0
    simulate(trace.topology, coflows, echelon, alone_runs=False)
    return time.monotonic() - started


ROOT = Path(__file__).resolve().parent.parent
#: the modules whose compiled functions set-up must reach (``echelonflow.schedulers.<name>``)
KERNEL_MODULES = ("kernels", "echelon_kernels", "echelon_totals", "varys_kernels")
#: what the last fresh compilation reached, in the virtualenv's folder (``sys.prefix``)
RECORD = ".echelon-precompiled.json"
#: what the compilation depends on: the kernels, the code that calls them, the scenarios it runs
_SOURCES = ("echelonflow", "simulator", "topologies", "data")


def sources_digest() -> str:
    """A digest of every file a compilation depends on (:data:`_SOURCES`) and of the compiler's versions."""
    import numba

    digest = hashlib.sha256(f"{sys.version} numba {numba.__version__}".encode())
    for top in _SOURCES:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(ROOT)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def kernel_dispatchers() -> dict[str, Any]:
    """``"module.function"`` -> numba dispatcher, for every compiled function of :data:`KERNEL_MODULES`."""
    from numba.core.registry import CPUDispatcher

    out = {}
    for short in KERNEL_MODULES:
        module = importlib.import_module(f"echelonflow.schedulers.{short}")
        for name, value in vars(module).items():
            if isinstance(value, CPUDispatcher) and value.__module__ == module.__name__:
                out[f"{short}.{name}"] = value
    return out


def compiled_fresh() -> bool:
    """Whether this process found none of the kernels in numba's cache (a new checkout, or every kernel
    module's source changed): only then does :func:`report` tell what set-up reaches."""
    return not any(sum(d.stats.cache_hits.values()) for d in kernel_dispatchers().values())


def report() -> dict[str, Any]:
    """What this process compiled: ``fresh`` (:func:`compiled_fresh`), ``indexed`` (the functions with
    a cache index: compiled and kept) and ``returns`` (each helper borrowing its callers' arrays,
    ``kernels.jit_borrowing``, with the return types it was compiled for; a helper found in the cache
    holds none, so only a fresh compilation tells)."""
    from echelonflow.schedulers.kernels import BORROWING

    dispatchers = kernel_dispatchers()
    indexed = sorted(name for name, d in dispatchers.items()
                     if any(Path(d.stats.cache_path).glob(f"{name}-*.nbi")))
    returns = {d.__module__ + "." + d.__name__: [str(s.return_type) for s in d.nopython_signatures]
               for d in BORROWING}
    return {"digest": sources_digest(), "fresh": compiled_fresh(), "indexed": indexed, "returns": returns}


def recorded(prefix: str | None = None) -> dict[str, Any] | None:
    """The record of set-up's last fresh compilation if it was made on these sources, else None."""
    path = Path(prefix or sys.prefix) / RECORD
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("digest") == sources_digest() else None


def main() -> int:
    seconds = compile_all()
    if HAVE_NUMBA:
        print(f"schedulers' kernels compiled or found in the cache in {seconds:.1f} s", file=sys.stderr)
        if compiled_fresh():  # else the cache says nothing of what set-up reaches: record nothing
            (Path(sys.prefix) / RECORD).write_text(json.dumps(report()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
