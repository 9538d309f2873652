"""Scenario loading: bundled examples load; every kind of mistake is one clear ScenarioError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from echelonflow.errors import ScenarioError
from echelonflow.scenario import bundled_names, load_scenario

GOOD_JOB = {"id": "p", "generator": "fig2", "hosts": ["h1", "h2"], "params": {"micro_batches": 2}}


def write(tmp_path: Path, doc, name: str = "s.json") -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def base(**changes):
    doc = {"topology": {"kind": "two_hosts", "rate_mbps": 10}, "jobs": [dict(GOOD_JOB)]}
    doc.update(changes)
    return doc


def test_bundled_scenarios_load() -> None:
    assert {"fig2", "fattree-gpipe-ring", "fattree-fsdp-ps", "bench-k8"} <= set(bundled_names())
    for name in bundled_names():
        scenario = load_scenario(name)
        assert scenario.name == name
        assert scenario.jobs and scenario.schedulers == ["fair", "coflow", "echelon"]
        assert scenario.source.endswith(f"{name}.json")
    fig2 = load_scenario("fig2")
    assert fig2.topology.rate_bps == 10e6
    assert [f.size_bytes for f in fig2.jobs[0].flows] == [2_500_000] * 3


def test_file_scenario_defaults(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, base(), "mine.json"))
    assert scenario.name == "mine"
    assert scenario.schedulers == ["fair", "coflow", "echelon"]
    assert scenario.topology.kind == "two_hosts"
    assert [j.job_id for j in scenario.jobs] == ["p"]


def test_trace_jobs_load_relative_to_the_scenario_and_simulate(tmp_path: Path) -> None:
    from echelonflow.schedulers import get_scheduler
    from echelonflow.trace import save_trace
    from echelonflow.workloads import generate
    from simulator.engine import simulate

    (tmp_path / "sub").mkdir()
    save_trace(tmp_path / "sub" / "fig2-trace.json", [generate("fig2", "t", ["h1", "h2"], {})])
    scenario = load_scenario(write(tmp_path, base(jobs=[{"trace": "sub/fig2-trace.json"}])))
    assert [j.job_id for j in scenario.jobs] == ["t"]
    result = simulate(scenario.topology, scenario.jobs, get_scheduler("echelon"))
    assert result.jobs["t"].completion_s == pytest.approx(8.0, abs=1e-6)
    save_trace(tmp_path / "far.json", [generate("fig2", "t", ["h1", "h2"], {})])
    dumbbell = {"kind": "dumbbell", "hosts_per_side": 1, "rate_mbps": 10}
    far = base(topology=dumbbell, jobs=[{"trace": "far.json"}])
    assert load_scenario(write(tmp_path, far)).jobs[0].job_id == "t"
    doc = base(jobs=[{"trace": "sub/missing.json"}])
    expected = r"jobs\[0\]\.trace: trace file .*sub/missing.json.* does not exist"
    with pytest.raises(ScenarioError, match=expected):
        load_scenario(write(tmp_path, doc))


@pytest.mark.parametrize(
    "doc, message",
    [
        ("{not json", r"not valid JSON"),
        ([1, 2], r"must be a JSON object"),
        (base(colour="red"), r"field \(top level\): unknown field 'colour'"),
        ({"jobs": [GOOD_JOB]}, r"field topology: missing"),
        (base(topology={"kind": "torus", "rate_mbps": 10}), r"field topology: unknown topology 'torus'"),
        (base(topology={"kind": "fattree", "k": 3, "rate_mbps": 10}), r"field topology: fat-tree k must be"),
        (base(topology={"kind": "two_hosts"}), r"topology.rate_mbps: give exactly one"),
        (base(topology={"kind": "two_hosts", "rate_mbps": "fast"}), r"rate_mbps: must be a positive"),
        (base(jobs=[]), r"field jobs: must be a non-empty list"),
        (base(jobs=[{**GOOD_JOB, "generator": "magic"}]), r"jobs\[0\]\.generator: unknown generator"),
        (base(jobs=[{**GOOD_JOB, "hosts": ["h1", "h7"]}]), r"jobs\[0\]\.hosts: host 'h7' is not in the"),
        (base(jobs=[{**GOOD_JOB, "hosts": "h1"}]), r"jobs\[0\]\.hosts: must be a non-empty list"),
        (base(jobs=[{k: v for k, v in GOOD_JOB.items() if k != "id"}]), r"jobs\[0\]\.id: missing"),
        (base(jobs=[{**GOOD_JOB, "speed": 1}]), r"jobs\[0\]: unknown field 'speed'"),
        (base(jobs=[GOOD_JOB, GOOD_JOB]), r"field jobs: duplicate job id 'p'"),
        (base(jobs=[{**GOOD_JOB, "params": {"micro_batches": "x"}}]), r"jobs\[0\]\.params: .*micro_batches"),
        (base(jobs=[{**GOOD_JOB, "params": {"warp": 1}}]), r"jobs\[0\]\.params: .*warp"),
        (base(schedulers=["fair", "sincronia"]), r"field schedulers: unknown scheduler 'sincronia'"),
        (base(schedulers="fair"), r"field schedulers: must be a non-empty list"),
    ],
)
def test_bad_scenarios_name_file_field_and_problem(tmp_path: Path, doc, message: str) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(ScenarioError, match=message) as info:
        load_scenario(path)
    assert str(info.value).startswith(f"scenario {path}")
    assert "\n" not in str(info.value)


def test_unknown_name_and_missing_file() -> None:
    with pytest.raises(ScenarioError, match="no scenario named 'nope'.*bundled: .*fig2"):
        load_scenario("nope")
    with pytest.raises(ScenarioError, match="scenario file '/no/such.json' does not exist"):
        load_scenario("/no/such.json")
