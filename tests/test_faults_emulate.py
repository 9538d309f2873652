"""``echelon emulate --fault``: the process faults end to end on the real fabric.

Each test runs the CLI as a user would (its own Mininet/OVS fat-tree, controller and traffic agents,
real TCP) on a scenario of two jobs on disjoint hosts, and checks results.json, the one-line report and
the logs.  The lower-level checks of the same faults are in tests/test_faults.py; a link fault under
``echelon emulate`` (and how the table, results.csv and fidelity.md mark it) is in
tests/test_reroute_fabric.py, a controller killed and restarted on its store in
tests/test_controller_restart.py.
"""

from __future__ import annotations

import json

import pytest

from tests.fabric_helpers import two_jobs
from tests.helpers import run_echelon

pytestmark = [pytest.mark.fabric, pytest.mark.slow]


def _two_job_scenario(tmp_path) -> str:
    """Two jobs on disjoint hosts of a k=4 fat-tree at 10 Mbit/s, each with a flow of several seconds."""
    from echelonflow.trace import save_trace

    save_trace(str(tmp_path / "jobs.json"), two_jobs(8_000_000))  # a's flow ~6.5 s at 10 Mbit/s
    scenario = {"name": "two-jobs", "topology": {"kind": "fattree", "k": 4, "rate_mbps": 10},
                "jobs": [{"trace": "jobs.json"}], "schedulers": ["echelon"]}
    path = tmp_path / "two-jobs.json"
    path.write_text(json.dumps(scenario))
    return str(path)


def _emulate(tmp_path, *fault_args):
    out = tmp_path / "run"
    proc = run_echelon("emulate", _two_job_scenario(tmp_path), "--no-alone",
                       "--no-plots", "--out", str(out), *fault_args, timeout_s=600)
    print(proc.stderr[-3000:])
    print(proc.stdout)
    return proc, json.loads((out / "results.json").read_text())["runs"][0], out


def test_emulate_fault_agent_fails_its_job_in_one_line_and_the_other_completes(require_fabric, tmp_path):
    proc, run, _out = _emulate(tmp_path, "--fault", "agent:h1@1.5s")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list(run["jobs"]) == ["b"] and list(run["failed_jobs"]) == ["a"]
    assert run["failed_jobs"]["a"].startswith("agent h1 died (killed by SIGKILL) 1.")
    assert run["faults"] == [{"kind": "agent", "target": ["h1"], "at_s": 1.5, "up": False}]
    failed = [line for line in proc.stdout.splitlines() if "FAILED" in line]
    assert failed == [f"job a FAILED under echelon: {run['failed_jobs']['a']}"]
    assert "registry: released" in proc.stderr
