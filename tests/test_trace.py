"""JSON traces: the documented example loads, generated jobs round-trip, every bad input is a TraceError."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from echelonflow.echelon import echelons_of
from echelonflow.errors import TraceError, UserError
from echelonflow.model import ComputeTask, FlowTask
from echelonflow.trace import job_to_trace, jobs_to_trace, load_trace, parse_trace, save_trace
from echelonflow.workloads import GENERATORS, generate

DOC = Path(__file__).resolve().parent.parent / "docs" / "trace-format.md"

VALID = {
    "jobs": [
        {
            "id": "j1",
            "tasks": [
                {"id": "c1", "type": "compute", "host": "h1", "duration_s": 1.0, "deps": []},
                {"id": "c2", "type": "compute", "host": "h1", "duration_s": 1, "deps": ["c1"]},
                {
                    "id": "f1",
                    "type": "flow",
                    "src": "h1",
                    "dst": "h2",
                    "size_bytes": 2000,
                    "deps": ["c1"],
                    "echelon": "e1",
                },
                {
                    "id": "f2",
                    "type": "flow",
                    "src": "h1",
                    "dst": "h2",
                    "size_bytes": 2000,
                    "deps": ["c2"],
                    "echelon": "e1",
                    "label": "second",
                },
                {"id": "r1", "type": "compute", "host": "h2", "duration_s": 0.5, "deps": ["f1"]},
                {"id": "r2", "type": "compute", "host": "h2", "duration_s": 0.5, "deps": ["f2", "r1"]},
            ],
            "echelons": {"e1": {"kind": "staggered"}},
        }
    ]
}


def write(tmp_path: Path, data, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_valid_trace_loads(tmp_path: Path) -> None:
    (job,) = load_trace(write(tmp_path, VALID), known_hosts={"h1", "h2", "h3"})
    assert job.job_id == "j1"
    assert job.tasks["c2"] == ComputeTask("c2", "h1", 1.0, ("c1",))
    assert job.tasks["f2"] == FlowTask("f2", "h1", "h2", 2000, ("c2",), "e1", "second")
    assert job.echelon_kinds == {"e1": "staggered"}
    spec = echelons_of(job)["e1"]
    assert spec.offsets_s == {"f1": 0.0, "f2": 1.0}


def test_explicit_offsets_are_used(tmp_path: Path) -> None:
    data = copy.deepcopy(VALID)
    data["jobs"][0]["echelons"]["e1"]["offsets_s"] = {"f1": 0, "f2": 0.25}
    (job,) = load_trace(write(tmp_path, data))
    assert job.explicit_offsets_s == {"f1": 0.0, "f2": 0.25}
    assert echelons_of(job)["e1"].offsets_s == {"f1": 0.0, "f2": 0.25}


def test_example_in_the_doc_loads() -> None:
    text = DOC.read_text()
    block = text.split("```json", 1)[1].split("```", 1)[0]
    jobs = parse_trace(json.loads(block), str(DOC))
    assert [j.job_id for j in jobs] == ["fig2"]
    spec = echelons_of(jobs[0])["act"]
    assert [spec.offsets_s[f] for f in spec.flow_ids] == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generated_jobs_round_trip_through_a_file(tmp_path: Path, name: str) -> None:
    hosts = ["h1", "h2"] if name == "fig2" else ["h1", "h2", "h3"]
    params = {p.name: 3000 for p in GENERATORS[name].params if p.name.endswith("_bytes") or p.name == "bytes"}
    params.pop("link_bytes_per_s", None)
    job = generate(name, "gen", hosts, params)
    job.explicit_offsets_s[job.flows[-1].task_id] = 0.0  # offsets survive too (0 is valid for any kind)
    if job.echelon_kinds[job.flows[-1].echelon_id] == "staggered":
        for flow in job.flows:
            if flow.echelon_id == job.flows[-1].echelon_id:
                job.explicit_offsets_s[flow.task_id] = 0.5
    else:
        group = [f.task_id for f in job.flows if f.echelon_id == job.flows[-1].echelon_id]
        job.explicit_offsets_s.update(dict.fromkeys(group, 0.0))
    path = tmp_path / "saved.json"
    save_trace(path, [job])
    (loaded,) = load_trace(path, known_hosts=hosts)
    assert loaded == job
    assert job_to_trace(loaded) == job_to_trace(job)


def test_several_jobs(tmp_path: Path) -> None:
    other = copy.deepcopy(VALID["jobs"][0])
    other["id"] = "j2"
    jobs = load_trace(write(tmp_path, {"jobs": [VALID["jobs"][0], other]}))
    assert [j.job_id for j in jobs] == ["j1", "j2"]
    assert jobs_to_trace(jobs)["jobs"][1]["id"] == "j2"


def task(data, index):
    return data["jobs"][0]["tasks"][index]


def mutate(fn):
    data = copy.deepcopy(VALID)
    fn(data)
    return data


BAD = [
    ("not an object", [1, 2], "must be an object with a 'jobs' list, got [1, 2]"),
    ("no jobs", {"jobs": []}, "jobs: must be a non-empty array of jobs, got []"),
    ("top-level unknown field", mutate(lambda d: d.update(version=1)),
     "version: unknown field (allowed: jobs, description)"),
    ("job not object", {"jobs": ["j1"]}, "jobs[0]: must be a job object, got 'j1'"),
    ("job without id", mutate(lambda d: d["jobs"][0].pop("id")), "jobs[0]: id: missing"),
    ("job id with slash", mutate(lambda d: d["jobs"][0].update(id="a/b")),
     "id: must be an id (1-128 of A-Z a-z 0-9 . _ : -, starting with a letter or digit), got 'a/b'"),
    (
        "job unknown field",
        mutate(lambda d: d["jobs"][0].update(priority=2)),
        "job 'j1': priority: unknown field (allowed: id, tasks, echelons, description, arrival_s, weight)",
    ),
    ("job missing tasks", mutate(lambda d: d["jobs"][0].pop("tasks")), "job 'j1': tasks: missing"),
    (
        "duplicate job",
        mutate(lambda d: d["jobs"].append(copy.deepcopy(d["jobs"][0]))),
        "job 'j1': duplicate job id",
    ),
    (
        "duplicate task",
        mutate(lambda d: task(d, 1).update(id="c1")),
        "job 'j1': task 'c1': duplicate task id",
    ),
    (
        "missing field",
        mutate(lambda d: task(d, 0).pop("duration_s")),
        "job 'j1': task 'c1': duration_s: missing",
    ),
    ("missing type", mutate(lambda d: task(d, 0).pop("type")),
     "job 'j1': task 'c1': type: missing (one of: compute, flow)"),
    ("task unknown field", mutate(lambda d: task(d, 0).update(gpu=1)),
     "job 'j1': task 'c1': gpu: unknown field (allowed: id, type, host, duration_s, deps, label)"),
    (
        "flow field on compute",
        mutate(lambda d: task(d, 0).update(echelon="e1")),
        "job 'j1': task 'c1': echelon: unknown field (allowed: id, type, host, duration_s, deps, label)",
    ),
    (
        "unknown type",
        mutate(lambda d: task(d, 0).update(type="sleep")),
        "job 'j1': task 'c1': type: must be one of compute, flow, got 'sleep'",
    ),
    ("task id missing", mutate(lambda d: task(d, 0).pop("id")), "job 'j1': tasks[0]: id: missing"),
    (
        "empty id",
        mutate(lambda d: task(d, 0).update(id="")),
        "job 'j1': tasks[0]: id: must be an id (1-128 of A-Z a-z 0-9 . _ : -, starting with a letter or "
        "digit), got ''",
    ),
    ("unknown dep", mutate(lambda d: task(d, 1).update(deps=["c0"])), "task 'c2': unknown dependency 'c0'"),
    (
        "deps not list",
        mutate(lambda d: task(d, 1).update(deps="c1")),
        "job 'j1': task 'c2': deps: must be an array of task ids, got 'c1'",
    ),
    (
        "dep twice",
        mutate(lambda d: task(d, 1).update(deps=["c1", "c1"])),
        "job 'j1': task 'c2': deps: lists 'c1' twice",
    ),
    ("cycle", mutate(lambda d: task(d, 0).update(deps=["r2"])), "dependency cycle"),
    (
        "self cycle",
        mutate(lambda d: task(d, 0).update(deps=["c1"])),
        "task 'c1': dependency cycle (c1 -> c1)",
    ),
    (
        "negative size",
        mutate(lambda d: task(d, 2).update(size_bytes=-5)),
        "job 'j1': task 'f1': size_bytes: must be a whole number of bytes between 1 and 1e+15, got -5",
    ),
    (
        "zero size",
        mutate(lambda d: task(d, 2).update(size_bytes=0)),
        "job 'j1': task 'f1': size_bytes: must be a whole number of bytes between 1 and 1e+15, got 0",
    ),
    (
        "string size",
        mutate(lambda d: task(d, 2).update(size_bytes="2kB")),
        "job 'j1': task 'f1': size_bytes: must be a whole number of bytes between 1 and 1e+15, got '2kB'",
    ),
    (
        "bool size",
        mutate(lambda d: task(d, 2).update(size_bytes=True)),
        "job 'j1': task 'f1': size_bytes: must be a whole number of bytes between 1 and 1e+15, got true",
    ),
    (
        "fractional size",
        mutate(lambda d: task(d, 2).update(size_bytes=2.5)),
        "job 'j1': task 'f1': size_bytes: must be a whole number of bytes between 1 and 1e+15, got 2.5",
    ),
    ("inf size", mutate(lambda d: task(d, 2).update(size_bytes=math.inf)),
     "job 'j1': task 'f1': size_bytes: must be a whole number of bytes between 1 and 1e+15, got inf"),
    (
        "negative duration",
        mutate(lambda d: task(d, 0).update(duration_s=-1)),
        "job 'j1': task 'c1': duration_s: must be a number of seconds between 0 and 604800, got -1",
    ),
    ("nan duration", mutate(lambda d: task(d, 0).update(duration_s=math.nan)),
     "job 'j1': task 'c1': duration_s: must be a number of seconds between 0 and 604800, got nan"),
    ("null duration", mutate(lambda d: task(d, 0).update(duration_s=None)),
     "job 'j1': task 'c1': duration_s: must be a number of seconds between 0 and 604800, got null"),
    ("bool duration", mutate(lambda d: task(d, 0).update(duration_s=False)),
     "job 'j1': task 'c1': duration_s: must be a number of seconds between 0 and 604800, got false"),
    ("src is dst", mutate(lambda d: task(d, 2).update(dst="h1")), "task 'f1': src and dst are both 'h1'"),
    ("label type", mutate(lambda d: task(d, 2).update(label=3)),
     "job 'j1': task 'f1': label: must be a string, got 3"),
    ("echelons type", mutate(lambda d: d["jobs"][0].update(echelons=[])),
     "job 'j1': echelons: must be an object (echelon id -> settings), got []"),
    (
        "unknown echelon",
        mutate(lambda d: d["jobs"][0]["echelons"].update(e9={})),
        "echelon 'e9': no flow belongs",
    ),
    ("bad kind", mutate(lambda d: d["jobs"][0]["echelons"]["e1"].update(kind="flat")),
     "job 'j1': echelon 'e1': kind: must be one of coflow, staggered, got 'flat'"),
    (
        "echelon field",
        mutate(lambda d: d["jobs"][0]["echelons"]["e1"].update(rate=1)),
        "job 'j1': echelon 'e1': rate: unknown field (allowed: kind, offsets_s)",
    ),
    (
        "offset unknown flow",
        mutate(lambda d: d["jobs"][0]["echelons"]["e1"].update(offsets_s={"f1": 0, "f2": 1, "f9": 2})),
        "echelon 'e1': offsets_s names 'f9', which is not a flow of this echelon",
    ),
    (
        "offset of a compute",
        mutate(lambda d: d["jobs"][0]["echelons"]["e1"].update(offsets_s={"c1": 0})),
        "offsets_s names 'c1'",
    ),
    (
        "partial offsets",
        mutate(lambda d: d["jobs"][0]["echelons"]["e1"].update(offsets_s={"f1": 0})),
        "offsets_s must give every flow of the echelon; missing 'f2'",
    ),
    (
        "negative offset",
        mutate(lambda d: d["jobs"][0]["echelons"]["e1"].update(offsets_s={"f1": 0, "f2": -1})),
        "job 'j1': echelon 'e1': offsets_s['f2']: must be a number of seconds between 0 and 604800, got -1",
    ),
    (
        "coflow with offsets",
        mutate(lambda d: d["jobs"][0]["echelons"]["e1"].update(kind="coflow", offsets_s={"f1": 0, "f2": 1})),
        "a coflow's offsets are all 0",
    ),
    (
        "echelon id clash",
        mutate(
            lambda d: d["jobs"][0]["tasks"].append(
                {"id": "e1", "type": "flow", "src": "h2", "dst": "h1", "size_bytes": 1, "deps": ["r2"]}
            )
        ),
        "task 'e1': flow without an echelon has the same id as echelon 'e1'",
    ),
]


@pytest.mark.parametrize("case, data, fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_trace_is_a_trace_error_naming_file_job_task(
    tmp_path: Path, case: str, data, fragment: str
) -> None:
    path = write(tmp_path, data, "bad-trace.json") if not any(_has_nonjson(data)) else None
    with pytest.raises(TraceError) as err:
        if path is not None:
            load_trace(path)
        else:
            parse_trace(data, str(tmp_path / "bad-trace.json"))
    message = str(err.value)
    assert isinstance(err.value, UserError)
    assert message.startswith(str(tmp_path / "bad-trace.json") + ": ")
    assert fragment in message
    assert "\n" not in message


def _has_nonjson(data):
    """Yield True for float values JSON cannot carry (those cases go through parse_trace directly)."""
    if isinstance(data, float) and not math.isfinite(data):
        yield True
    elif isinstance(data, dict):
        for value in data.values():
            yield from _has_nonjson(value)
    elif isinstance(data, list):
        for value in data:
            yield from _has_nonjson(value)


def test_unknown_host_when_topology_is_known(tmp_path: Path) -> None:
    with pytest.raises(
        TraceError, match=r"task 'f1': dst: unknown host 'h2' \(the topology has h1, h3\)"
    ):
        load_trace(write(tmp_path, VALID), known_hosts=["h1", "h3"])


def test_invalid_json_reports_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '{"jobs": [\n  {"id": "j1",,}\n]}')
    with pytest.raises(TraceError, match=r"t\.json: not valid JSON \(line 2 column 15"):
        load_trace(path)


def test_json_nan_literal_and_duplicate_keys_are_rejected(tmp_path: Path) -> None:
    text = json.dumps(VALID).replace('"duration_s": 0.5', '"duration_s": NaN', 1)
    with pytest.raises(TraceError, match="NaN is not a number JSON allows"):
        load_trace(write(tmp_path, text))
    text = json.dumps(VALID).replace('"host": "h1",', '"host": "h1", "host": "h3",', 1)
    with pytest.raises(TraceError, match="key 'host' appears twice"):
        load_trace(write(tmp_path, text))


def test_missing_file_and_non_utf8(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="nope.json: cannot read: No such file or directory"):
        load_trace(tmp_path / "nope.json")
    path = tmp_path / "bin.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(TraceError, match="bin.json: not UTF-8 text"):
        load_trace(path)


@pytest.mark.parametrize("where, bad", [("job id", "a/b"), ("task id", "c\x00"), ("task id", "c\nd"),
                                        ("dep", "c1/x"), ("echelon", "e/1")])
def test_trace_ids_follow_the_api_id_rule(where: str, bad: str) -> None:
    """Ids become the controller's registry ids when the trace is emulated: a '/', NUL or newline the
    API refuses is refused on loading (issue 35: such a trace failed only when emulated)."""
    data = copy.deepcopy(VALID)
    if where == "job id":
        data["jobs"][0]["id"] = bad
    elif where == "task id":
        task(data, 0)["id"] = bad
    elif where == "dep":
        task(data, 1)["deps"] = [bad]
    else:
        next(t for t in data["jobs"][0]["tasks"] if t["type"] == "flow")["echelon"] = bad
    with pytest.raises(TraceError, match="must be an id"):
        parse_trace(data, "t.json")
