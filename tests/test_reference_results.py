"""The simulator's results on every bundled scenario equal the recorded reference (relative 1e-9).

The references (``tests/reference/*.json.gz``, made by ``tests/reference/make_reference.py`` before the
simulator was optimised) pin every number of every run: job completions and slowdowns, each task's
and flow's start and finish, each EchelonFlow's tardiness, the objective.  A faster simulator must give
the same answers; invariant checks stay on while these run.  The training metrics (mean and p95 job
completion, GPU-busy fraction) came later: they are expected as the reference's own jobs and tasks give
them (:func:`expected_run`).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from echelonflow.results import RunResult
from echelonflow.scenario import bundled_names, load_scenario
from echelonflow.schedulers import get_scheduler
from simulator.engine import simulate
from tests.reference.make_reference import (
    PREFIX_JOBS,
    TOO_BIG,
    prefix_file,
    reference_names,
)

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_DIR = ROOT / "tests" / "reference"
REL = 1e-9
ABS = 1e-9  # seconds; for values that are (nearly) zero


def _load(name: str) -> dict[str, Any]:
    with gzip.open(REFERENCE_DIR / f"{name}.json.gz", "rt") as handle:
        return json.load(handle)


def expected_run(reference_run: dict[str, Any]) -> dict[str, Any]:
    """A reference run as the current format writes it: read back, which derives the keys it predates
    (``echelonflow.results.TRAINING_KEYS``) from its own jobs and tasks."""
    return json.loads(json.dumps(RunResult.from_json_dict(reference_run).to_json_dict()))


def differences(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Every place where ``actual`` departs from ``expected`` (numbers: relative REL or absolute ABS)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        if set(expected) != set(actual):
            missing, extra = sorted(set(expected) - set(actual)), sorted(set(actual) - set(expected))
            out.append(f"{where}: keys differ (missing {missing[:3]}, extra {extra[:3]})")
        for key in sorted(set(expected) & set(actual)):
            out.extend(differences(expected[key], actual[key], f"{where}/{key}"))
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: {len(expected)} items expected, got {len(actual)}"]
        out = []
        for index, (e, a) in enumerate(zip(expected, actual)):
            out.extend(differences(e, a, f"{where}[{index}]"))
        return out
    numbers = (int, float)
    if isinstance(expected, numbers) and isinstance(actual, numbers) and not isinstance(expected, bool):
        if math.isclose(expected, actual, rel_tol=REL, abs_tol=ABS):
            return []
        return [f"{where}: expected {expected!r}, got {actual!r}"]
    return [] if expected == actual else [f"{where}: expected {expected!r}, got {actual!r}"]


def test_every_bundled_scenario_has_a_reference_or_a_reason() -> None:
    for name in bundled_names():
        assert (REFERENCE_DIR / f"{name}.json.gz").is_file() or name in TOO_BIG, name


#: Scenarios whose full reference runs only in the reference tier (tests/run --full): bench-k8's 13,280
#: flows under every scheduler take longer than all the others together.  The k=8 fat-tree's paths stay
#: pinned in the default suite by fattree8-gpipe-fsdp-ring and multitenant-k8.
FULL_SIZE = {"bench-k8"}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.reference) if name in FULL_SIZE
                                  else name for name in reference_names()])
def test_bundled_scenario_results_match_the_reference(name: str) -> None:
    reference = _load(name)
    scenario = load_scenario(name)
    for run in reference["runs"]:
        result = simulate(scenario.topology, scenario.jobs, get_scheduler(run["scheduler"]))
        found = differences(expected_run(run), json.loads(json.dumps(result.to_json_dict())),
                            run["scheduler"])
        assert not found, f"{name}: {len(found)} differences, e.g. " + "; ".join(found[:5])


@pytest.mark.slow
@pytest.mark.parametrize("name,first", sorted(PREFIX_JOBS.items()))
def test_first_jobs_of_a_big_scenario_match_the_reference(name: str, first: int) -> None:
    """fb2010 is too big to re-simulate here; its first coflows (every scheduler, alone runs and
    invariant checks on) pin the big-switch paths: many flows per port, groups of thousands."""
    reference = _load(prefix_file(name, first))
    jobs = load_scenario(name).jobs[:first]
    topology = load_scenario(name).topology
    for run in reference["runs"]:
        result = simulate(topology, jobs, get_scheduler(run["scheduler"]))
        found = differences(expected_run(run), json.loads(json.dumps(result.to_json_dict())),
                            run["scheduler"])
        assert not found, f"{name}[:{first}]: {len(found)} differences, e.g. " + "; ".join(found[:5])


# Runs in a child process with numba made unimportable: kernels and fluid steps run as Python on lists.
_WITHOUT_NUMBA = """
import json, sys
sys.modules["numba"] = None
sys.path.insert(0, {root!r})
from echelonflow.schedulers import get_scheduler, kernels
assert not kernels.HAVE_NUMBA
from echelonflow.scenario import load_scenario
from simulator.engine import simulate
out = []
for name in {names!r}:
    scenario = load_scenario(name)
    for sched in {schedulers!r}:
        result = simulate(scenario.topology, scenario.jobs, get_scheduler(sched))
        out.append([name, sched, result.to_json_dict()])
print(json.dumps(out))
"""


def test_the_simulator_without_numba_matches_the_reference() -> None:
    """Without numba (a venv that lacks it) the same kernels run interpreted and give the same results."""
    names, schedulers = ["fig2", "fattree-gpipe-ring"], ["fair", "coflow", "echelon", "aalo"]
    code = _WITHOUT_NUMBA.format(root=str(ROOT), names=names, schedulers=schedulers)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                           cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert child.returncode == 0, child.stderr[-3000:]
    runs = json.loads(child.stdout)
    assert len(runs) == len(names) * len(schedulers)
    for name, sched, result in runs:
        reference = next(run for run in _load(name)["runs"] if run["scheduler"] == sched)
        found = differences(expected_run(reference), result, f"{name}/{sched}")
        assert not found, f"{len(found)} differences, e.g. " + "; ".join(found[:5])


def test_the_comparison_can_fail() -> None:
    assert differences({"a": [1.0, "x"]}, {"a": [1.0 + 1e-6, "x"]})
    assert differences({"a": 1}, {"b": 1})
    assert not differences({"a": [0.0, 2.0]}, {"a": [1e-12, 2.0 * (1 + 1e-12)]})
