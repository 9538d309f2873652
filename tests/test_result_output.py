"""What ``echelon simulate`` writes: a document without per-flow records by default, every record on
request (``--per-flow``, streamed; ``--flows FILE``, JSON lines), and ``echelon report`` on either."""

from __future__ import annotations

import io
import json
import os
import tracemalloc

import pytest

from cli.main import main
from echelonflow.results import Results, RunResult
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from simulator.engine import simulate


@pytest.fixture(scope="module")
def ring() -> Results:
    """fattree-gpipe-ring under two schedulers, with every optional top-level key set."""
    scenario = load_scenario("fattree-gpipe-ring")
    results = Results(scenario.name, "simulate", rescheduling="coflow",
                      timing_noise={"jitter_s": 0.001, "samples": 1, "schedulers": {}})
    for name in ("fair", "echelon"):
        results.runs.append(simulate(scenario.topology, scenario.jobs, get_scheduler(name),
                                     rescheduling="coflow"))
    return results


def _cli_json(capsys, *args: str) -> dict:
    names = ["--scheduler", "fair", "--scheduler", "echelon"]
    assert main(["simulate", "fattree-gpipe-ring", *names, *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_default_document_has_jobs_echelonflows_and_a_summary_but_no_flow(capsys) -> None:
    compact = _cli_json(capsys, "--json")
    full = _cli_json(capsys, "--json", "--per-flow")
    text = json.dumps(compact)
    for run, whole in zip(compact["runs"], full["runs"]):
        assert set(run) == {"scheduler", "jobs", "echelonflows", "summary", "objective_s", "jct_mean_s",
                            "jct_p95_s", "gpu_busy_fraction"}
        assert run["jobs"] == whole["jobs"] and run["objective_s"] == whole["objective_s"]
        for key in ("jct_mean_s", "jct_p95_s", "gpu_busy_fraction"):  # kept, though no task is
            assert run[key] == whole[key]
        for eqid, echelon in run["echelonflows"].items():
            assert echelon == {"tardiness_s": whole["echelonflows"][eqid]["tardiness_s"],
                               "kind": whole["echelonflows"][eqid]["kind"],
                               "flow_count": len(whole["echelonflows"][eqid]["flows"])}
        summary = run["summary"]
        assert summary["flows"] == len(whole["flows"]) and summary["jobs"] == len(whole["jobs"])
        completion = sorted(job["completion_s"] for job in whole["jobs"].values())
        assert summary["completion_s"]["max"] == completion[-1]
        assert summary["completion_s"]["mean"] == pytest.approx(sum(completion) / len(completion), rel=1e-12)
        assert summary["tardiness_s"]["max"] == max(e["tardiness_s"] for e in whole["echelonflows"].values())
        assert not any(qid in text for qid in whole["tasks"])  # its size does not grow with the flows
    # read back and written again, it is the same document
    assert Results.from_json_dict(compact).to_json_dict(per_flow=False) == compact


def test_the_streamed_per_flow_document_is_the_whole_document(ring) -> None:
    out = io.StringIO()
    ring.write_json(out, per_flow=True)
    assert json.loads(out.getvalue()) == ring.to_json_dict()
    assert out.getvalue().startswith('{\n "scenario": ')
    out = io.StringIO()
    ring.write_json(out)
    assert json.loads(out.getvalue()) == ring.to_json_dict(per_flow=False)


def test_writing_every_record_holds_no_second_copy_of_them(ring, tmp_path) -> None:
    """Streamed, the per-flow document costs a few records' memory, not a dictionary of all of them."""
    run = ring.runs[0]
    many = Results(ring.scenario, ring.mode, [RunResult(
        run.scheduler, run.jobs, run.echelonflows, objective_s=run.objective_s,
        flows={f"{qid}.{k}": flow for k in range(100) for qid, flow in run.flows.items()},
        tasks={f"{qid}.{k}": task for k in range(100) for qid, task in run.tasks.items()})])
    tracemalloc.start()
    try:
        many.to_json_dict()
        _, whole = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        with open(tmp_path / "doc.json", "w") as sink:
            many.write_json(sink, per_flow=True)
        _, streamed = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert streamed * 10 < whole, (streamed, whole)


def test_flows_file_has_one_line_per_task_and_scheduler(capsys, tmp_path) -> None:
    path = tmp_path / "flows.jsonl"
    full = _cli_json(capsys, "--json", "--per-flow", "--flows", str(path))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == sum(len(run["tasks"]) for run in full["runs"])
    runs = {run["scheduler"]: run for run in full["runs"]}
    for line in lines:
        run = runs[line.pop("scheduler")]
        qid = line.pop("task")
        flow = run["flows"].get(qid)
        expected = dict(run["tasks"][qid])
        if flow is not None:
            expected.update(ideal_finish_s=flow["ideal_finish_s"], size_bytes=flow["size_bytes"],
                            echelon=flow["echelon"])
        assert line == expected
    # without --json: the table on stdout, the records in the file
    assert main(["simulate", "fig2", "--scheduler", "echelon", "--flows", str(path)]) == 0
    assert "echelon" in capsys.readouterr().out
    assert len(path.read_text().splitlines()) == len(load_scenario("fig2").jobs[0].tasks)


def test_report_renders_a_folder_without_per_flow_records(capsys, tmp_path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(_cli_json(capsys, "--json")))
    assert main(["report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "gpipe" in out and "results.csv" in out and "jct.png" in out and "timeline" not in out
    assert os.path.getsize(folder / "results.csv") > 0
