"""Scenario loading: bundled examples load; every kind of mistake is one clear ScenarioError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from echelonflow.errors import ScenarioError
from echelonflow.scenario import bundled_names, load_scenario

GOOD_JOB = {"id": "p", "generator": "fig2", "hosts": ["h1", "h2"], "params": {"micro_batches": 2}}
FB2010 = "data:coflow-benchmark/FB2010-1Hr-150-0.txt"


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
        assert scenario.jobs and scenario.schedulers[:1] == ["fair"]
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
    fluid = {"kind": "two_hosts", "rate_mbps": 10, "mtu_bytes": None}  # the paper's idealised link
    scenario = load_scenario(write(tmp_path, base(topology=fluid, jobs=[{"trace": "sub/fig2-trace.json"}])))
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
        (base(colour="red"), r"colour: unknown field \(allowed: name, "),
        ({"jobs": [GOOD_JOB]}, r"json: topology: missing"),
        (base(topology={"kind": "torus", "rate_mbps": 10}), r"topology: unknown topology 'torus'"),
        (base(topology={"kind": "fattree", "k": 3, "rate_mbps": 10}), r"topology: fat-tree k must be"),
        (base(topology={"kind": "two_hosts"}), r"topology.rate_mbps: give exactly one"),
        (base(topology={"kind": "two_hosts", "rate_mbps": "fast"}),
         r"topology\.rate_mbps: must be a number between 0\.001 and 1e\+06, got 'fast'"),
        (base(jobs=[]), r"jobs: must be a non-empty array of job entries, got \[\]"),
        (base(jobs=[{**GOOD_JOB, "generator": "magic"}]),
         r"jobs\[0\]\.generator: must be one of ring_allreduce, .*got 'magic'"),
        (base(jobs=[{**GOOD_JOB, "hosts": ["h1", "h7"]}]), r"jobs\[0\]\.hosts: host 'h7' is not in the"),
        (base(jobs=[{**GOOD_JOB, "hosts": "h1"}]),
         r"jobs\[0\]\.hosts: must be a non-empty array of host names"),
        (base(jobs=[{k: v for k, v in GOOD_JOB.items() if k != "id"}]), r"jobs\[0\]\.id: missing"),
        (base(jobs=[{**GOOD_JOB, "speed": 1}]), r"jobs\[0\]\.speed: unknown field"),
        (base(jobs=[GOOD_JOB, GOOD_JOB]), r"jobs: duplicate job id 'p'"),
        (base(jobs=[{**GOOD_JOB, "params": {"micro_batches": "x"}}]), r"jobs\[0\]\.params: .*micro_batches"),
        (base(jobs=[{**GOOD_JOB, "params": {"warp": 1}}]), r"jobs\[0\]\.params: .*warp"),
        (base(schedulers=["fair", "pfabric"]), r"schedulers: unknown scheduler 'pfabric'"),
        (base(jobs=[{**GOOD_JOB, "arrival_s": -1}]),
         r"jobs\[0\]\.arrival_s: must be a number of seconds between 0 and 604800, got -1"),
        (base(jobs=[{**GOOD_JOB, "weight": 0}]),
         r"jobs\[0\]\.weight: must be a number > 0 and <= 1e\+06, got 0"),
        (base(jobs=[{**GOOD_JOB, "weight": True}]),
         r"jobs\[0\]\.weight: must be a number > 0 and <= 1e\+06, got true"),
        (base(jobs=[{"coflow_benchmark": "nope.txt"}]), r"jobs\[0\]\.coflow_benchmark: .*cannot read"),
        (base(jobs=[{"coflow_benchmark": "data:no-such.txt"}]),
         r"jobs\[0\]\.coflow_benchmark: data 'no-such.txt' is missing"),
        (base(jobs=[{"coflow_benchmark": "x.txt", "arrival_s": 3}]), r"jobs\[0\]\.arrival_s: unknown field"),
        (base(jobs=[{"coflow_benchmark": FB2010, "max_coflows": 0}]), r"jobs\[0\]\.max_coflows: must be a"),
        (base(jobs=[{"coflow_benchmark": FB2010, "max_coflows": 3}]), r"task .* uses host 'h2\d', not in"),
        (base(schedulers="fair"), r"schedulers: must be a non-empty array of scheduler names"),
        # the name heads tables and one-line messages: a newline in it split them
        (base(name="two\nlines"), r"name: must not contain '\\n', got 'two\\nlines'"),
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


def test_arrival_and_weight_of_generated_jobs(tmp_path: Path) -> None:
    late = {**GOOD_JOB, "id": "late", "arrival_s": 2.5, "weight": 4}
    scenario = load_scenario(write(tmp_path, base(jobs=[GOOD_JOB, late])))
    assert [(j.arrival_s, j.weight) for j in scenario.jobs] == [(0.0, 1.0), (2.5, 4.0)]


def test_trace_files_carry_arrival_and_weight(tmp_path: Path) -> None:
    from echelonflow.trace import load_trace, save_trace
    from echelonflow.workloads import generate

    job = generate("fig2", "t", ["h1", "h2"], {})
    job.arrival_s, job.weight = 7.25, 0.5
    save_trace(tmp_path / "t.json", [job])
    (again,) = load_trace(tmp_path / "t.json")
    assert (again.arrival_s, again.weight) == (7.25, 0.5)
    text = (tmp_path / "t.json").read_text()
    (tmp_path / "bad.json").write_text(text.replace('"weight": 0.5', '"weight": -1'))
    from echelonflow.errors import TraceError

    with pytest.raises(TraceError, match="job 't': weight: must be a number > 0 and <= 1e\\+06, got -1"):
        load_trace(tmp_path / "bad.json")


def test_coflow_benchmark_entries_expand_to_one_job_per_coflow(tmp_path: Path) -> None:
    topology = {"kind": "bigswitch", "hosts": 150, "rate_bps": 2**30}
    doc = {"topology": topology, "jobs": [{"coflow_benchmark": FB2010, "max_coflows": 5, "weight": 2}]}
    scenario = load_scenario(write(tmp_path, doc))
    assert [j.job_id for j in scenario.jobs] == ["1", "2", "3", "4", "5"]
    assert {j.weight for j in scenario.jobs} == {2.0}
    assert scenario.jobs[1].arrival_s == pytest.approx(10.833)
    fb = load_scenario("fb2010")
    assert len(fb.jobs) == 526 and fb.topology.name == "bigswitch150" and fb.topology.rate_bps == 2**30
    assert fb.schedulers == ["fair", "fifo", "coflow", "sincronia", "aalo", "echelon"]


def _coflow_file(tmp_path: Path, line: str) -> str:
    (tmp_path / "cf.txt").write_text(f"4 1\n{line}\n")
    return str(tmp_path / "cf.txt")


@pytest.mark.parametrize("doc, message", [
    (base(topology={"kind": "two_hosts", "rate_bps": 1e-3}),
     r"topology\.rate_bps: must be a number between 1000 and 1e\+12, got 0\.001"),
    (base(topology={"kind": "two_hosts", "rate_bps": 1e300}), r"topology\.rate_bps: .* got 1e\+300"),
    (base(topology={"kind": "fattree", "k": 4, "rate_mbps": 10, "oversubscription": 1e308}),
     r"topology: oversubscription must be a number from 1 to 1000"),
    (base(topology={"kind": "fattree", "k": 4, "rate_bps": 1e5, "oversubscription": 1000}),
     r"topology: topology 'fattree': its slowest links would run at 100 bit/s"),
    (base(jobs=[{**GOOD_JOB, "arrival_s": 1e308}]), r"jobs\[0\]\.arrival_s: .* got 1e\+308"),
    (base(jobs=[{**GOOD_JOB, "weight": 1e308}]), r"jobs\[0\]\.weight: .* got 1e\+308"),
    (base(jobs=[{**GOOD_JOB, "params": {"compute_s": 1e308}}]),
     r"jobs\[0\]: job 'p': task 'i0\.s0\.f0': duration_s: must be a number of seconds between 0 and 604800"),
    (base(jobs=[{**GOOD_JOB, "params": {"link_bytes_per_s": 10**18}}]),
     r"jobs\[0\]: job 'p': task 'i0\.a0\.m0': size_bytes: must be a whole number of bytes between 1 and "
     r"1e\+15"),
    (base(events=[{"at_s": 1e308, "link_down": ["h1", "s1"]}]), r"events\[0\]\.at_s: .* got 1e\+308"),
])
def test_numbers_beyond_the_table_of_ranges_are_one_line(tmp_path: Path, doc, message: str) -> None:
    """Every number a scenario holds or makes falls in echelonflow/limits.py's ranges (issue 35: a rate
    of 1e-3 bit/s hung aalo, a weight of 1e308 printed Infinity)."""
    with pytest.raises(ScenarioError, match=message):
        load_scenario(write(tmp_path, doc))


@pytest.mark.parametrize("line, ms_per_second, message", [
    ("c1 0 1 0 1 1:1e300", 1000.0, r"task 'm0\.r1': size_bytes: .*between 1 and 1e\+15"),
    ("c1 1e12 1 0 1 1:1", 1000.0, r"job 'c1': arrival_s: .*between 0 and 604800, got 1000000000\.0"),
    ("c1 5 1 0 1 1:1", 1e-300, r"job 'c1': arrival_s: .*between 0 and 604800"),
])
def test_coflow_benchmark_numbers_are_checked_after_scaling(tmp_path: Path, line: str, ms_per_second: float,
                                                           message: str) -> None:
    topology = {"kind": "bigswitch", "hosts": 4, "rate_mbps": 10}
    doc = {"topology": topology, "jobs": [{"coflow_benchmark": _coflow_file(tmp_path, line),
                                           "ms_per_second": ms_per_second}]}
    with pytest.raises(ScenarioError, match=message):
        load_scenario(write(tmp_path, doc))


def test_ids_follow_the_api_id_rule(tmp_path: Path) -> None:
    """A job or trace id the controller's API would refuse ('/', NUL, a newline) is refused on loading,
    not when the emulation registers it."""
    for bad in ("a/b", "a\x00b", "a\nb", "-a"):
        with pytest.raises(ScenarioError, match=r"jobs\[0\]\.id: must be an id"):
            load_scenario(write(tmp_path, base(jobs=[{**GOOD_JOB, "id": bad}])))
