"""Hostile input through the real command line: one line, exit status 2, nothing half-written or lost.

Each table is a kind of input a user can get wrong (a path, an output folder, a result document), each
row one attack with the fragment its one-line message must hold.  ``cli.main.main`` runs in this process
(as ``echelon`` would), so a Python traceback is an exception escaping here and fails the row.  Nothing
here brings up a fabric: the emulate rows fail before one would start, and a guard makes sure of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import main

ROOT = Path(__file__).resolve().parent.parent
TOO_LONG = "x" * 5000  # longer than any file name or path Linux takes (ENAMETOOLONG)
TWO_HOSTS = {"kind": "two_hosts", "rate_mbps": 10}


def _one_line(capsys, argv: list[str]) -> str:
    """Run ``echelon ARGV``; its one stderr line after asserting exit status 2."""
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, (status, err)
    assert err.startswith("echelon: error: ") and err.count("\n") == 1, err
    return err


def _scenario(tmp_path: Path, jobs: list) -> str:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"topology": TWO_HOSTS, "jobs": jobs}))
    return str(path)


# ------------------------------------------------------------------ paths that cannot even be looked up
@pytest.mark.parametrize("argv, fragment", [
    # each of these raised OSError (File name too long) with a traceback from Path.is_file() or .exists()
    (lambda t: ["simulate", TOO_LONG], "scenario file xxxxxxxx"),
    (lambda t: ["simulate", f"/tmp/{TOO_LONG}.json"], "(5,010 characters): cannot use this path (File name"),
    (lambda t: ["simulate", _scenario(t, [{"trace": TOO_LONG}])], "jobs[0].trace: trace file "),
    (lambda t: ["simulate", _scenario(t, [{"trace": f"data:{TOO_LONG}"}])], "jobs[0].trace: data "),
    (lambda t: ["simulate", _scenario(t, [{"id": "c", "chakra": TOO_LONG, "hosts": ["h1", "h2"]}])],
     "jobs[0].chakra: Chakra trace "),
    (lambda t: ["simulate", _scenario(t, [{"trace": str(t / "loop")}])], "(Too many levels of symbolic"),
    (lambda t: ["simulate", str(t / "loop.json")], "loop.json: cannot use this path (Too many levels"),
    (lambda t: ["sweep", str(_grid(t, [TOO_LONG])), "--out", str(t / "out")],
     "scenarios[0]: scenario file "),
    # a folder where a trace belongs was said not to exist
    (lambda t: ["simulate", _scenario(t, [{"trace": str(t)}])], "is a folder, not a trace file"),
], ids=["scenario-name", "scenario-path", "trace", "data", "chakra", "trace-loop", "scenario-loop",
        "grid-scenario", "trace-folder"])
def test_paths_that_cannot_be_looked_up_are_one_line(tmp_path: Path, capsys, argv, fragment: str) -> None:
    os.symlink("loop", tmp_path / "loop")
    os.symlink("loop.json", tmp_path / "loop.json")
    err = _one_line(capsys, argv(tmp_path))
    assert fragment in err and len(err) < 600, err


def _grid(tmp_path: Path, scenarios: list[str], **fields) -> Path:
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"scenarios": scenarios, "schedulers": ["fair"], **fields}))
    return path


# ------------------------------------------------------------------ output folders: checked, never clobbered
@pytest.fixture
def no_fabric(monkeypatch):
    """Whatever a row gets past, no calibration, fabric or run starts: it fails the row instead."""
    import emulation.experiment

    def refuse(*_args, **_kwargs):
        raise AssertionError("the emulation went on to its runs")

    monkeypatch.setattr(emulation.experiment, "choose_dilation", refuse)
    monkeypatch.setattr(emulation.experiment, "ExperimentRuns", refuse)


def _earlier_run(folder: Path, *names: str) -> dict[str, str]:
    """A folder an earlier command filled: each file with its own content, returned to compare with."""
    folder.mkdir()
    kept = {name: f"the earlier run's {name}\n" for name in names}
    for name, text in kept.items():
        (folder / name).write_text(text)
    return kept


@pytest.mark.parametrize("argv, earlier, fragment", [
    # the first checkpoint of the emulation overwrote the earlier run's results.json at once
    (lambda t, out: ["emulate", "fig2", "--scheduler", "fair", "--out", out], ("results.json", "results.csv"),
     "already holds results.json of an earlier run"),
    (lambda t, out: ["emulate", "fig2", "--out", out], ("results.csv",), "already holds results.csv"),
    # a sweep rewrote the results.csv of a run folder (or of anything else) that was not a sweep's
    (lambda t, out: ["sweep", str(_grid(t, ["fig2"])), "--out", out, "--workers", "1"],
     ("results.json", "results.csv"), "already holds results.json of an earlier run"),
    (lambda t, out: ["sweep", str(_grid(t, ["fig2"])), "--out", out, "--workers", "1"], ("results.csv",),
     "already holds results.csv of an earlier run"),
], ids=["emulate-over-run", "emulate-over-csv", "sweep-over-run", "sweep-over-csv"])
def test_a_folder_holding_an_earlier_run_is_refused_and_kept(tmp_path: Path, capsys, no_fabric, argv,
                                                            earlier, fragment: str) -> None:
    out = tmp_path / "earlier"
    kept = _earlier_run(out, *earlier)
    err = _one_line(capsys, argv(tmp_path, str(out)))
    assert fragment in err and str(out) in err, err
    assert {p.name: p.read_text() for p in out.iterdir()} == kept


@pytest.mark.parametrize("argv, fragment", [
    # each failed with an OSError traceback from os.makedirs once the grid was loaded (or the scenario
    # simulated, for emulate)
    (lambda t: ["sweep", str(_grid(t, ["fig2"])), "--out", str(t / TOO_LONG)],
     "sweep folder /"),
    (lambda t: ["sweep", str(_grid(t, ["fig2"], name="n" * 300))], "sweep folder "),
    (lambda t: ["emulate", "fig2", "--out", str(t / TOO_LONG)], "run folder /"),
    # a folder that cannot be made where the checks saw a writable parent (root may write anywhere else)
    (lambda t: ["sweep", str(_grid(t, ["fig2"])), "--out", "/proc/echelon-sweep", "--workers", "1"],
     "sweep folder /proc/echelon-sweep: cannot create it"),
], ids=["sweep-out", "sweep-grid-name", "emulate-out", "sweep-uncreatable"])
def test_output_folders_that_cannot_be_made_are_one_line(tmp_path: Path, capsys, no_fabric, monkeypatch,
                                                          argv, fragment: str) -> None:
    monkeypatch.chdir(tmp_path)
    err = _one_line(capsys, argv(tmp_path))
    assert fragment in err and len(err) < 600, err


def test_a_sweep_folder_is_still_resumed(tmp_path: Path) -> None:
    """The refusal above spares a sweep's own folder: its cells.jsonl says it is one."""
    grid, out = _grid(tmp_path, ["fig2"]), str(tmp_path / "sweep")
    argv = [sys.executable, "-m", "cli", "sweep", str(grid), "--out", out, "--workers", "1", "--no-plots"]
    for _ in range(2):
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "1 of 1 cells ok" in proc.stdout, proc.stderr[-2000:]
    assert "1 cells, 1 already done, 0 to run" in proc.stderr


# ------------------------------------------------------------------ result documents: echelon report
@pytest.fixture(scope="module")
def fig2_document() -> dict:
    """fig2 as ``echelon simulate --json --per-flow`` writes it (every scheduler, every flow)."""
    proc = subprocess.run([sys.executable, "-m", "cli", "simulate", "fig2", "--json", "--per-flow"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _set(path: list, value) -> object:
    def change(doc: dict) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


RUN = ["runs", 0]


@pytest.mark.parametrize("emulated, simulated, fragment", [
    # each of these ended in a traceback (KeyError, IndexError, TypeError, OSError) after results.json
    # and results.csv had been rewritten
    (_set(RUN + ["faults"], [{"x": 1}]), None, "runs[0].faults[0].x: unknown field (allowed: kind, target"),
    (_set(["dilation"], {"x": 1}), None, "dilation.factor: must be a dilation factor between 1 and 64"),
    (_set(RUN + ["tasks"], {"noslash": {"type": "compute", "host": "h1", "start_s": 0, "finish_s": 1}}), None,
     "runs[0].tasks['noslash']: must be a task id like 'job/task'"),
    (lambda d: d["runs"].append(dict(d["runs"][0])), None, "runs[3]: a second run of scheduler 'fair' with "
                                                          "repeat null"),
    (_set(RUN + ["scheduler"], "s" * 1000), None, "runs[0].scheduler: must be an id"),
    (_set(RUN + ["scheduler"], "../../x"), None, "runs[0].scheduler: must be an id"),
    # the emulation's own measurement records, read by the fidelity section and the table
    (_set(RUN + ["fidelity_monitor"], {"rounds": "x"}), None, "cannot read (AttributeError"),
    (_set(RUN + ["wire_check"], {"rounds": {"a": {"mismatches": 5}}}), None, "cannot read (TypeError"),
    (_set(["dilation"], {"factor": 2, "chosen_by": "calibration", "calibration": {"trials": [{}]}}), None,
     "cannot read (KeyError: 'factor')"),
    (None, _set(["timing_noise"], {"jitter_s": 0.001, "samples": 2, "schedulers": 5}),
     "cannot read (AttributeError"),
], ids=["faults", "dilation", "task-id", "same-run-twice", "scheduler-long", "scheduler-path",
        "monitor", "wire-check", "calibration", "timing-noise"])
def test_a_result_document_report_cannot_read_is_one_line_and_the_folder_kept(
        tmp_path: Path, capsys, fig2_document: dict, emulated, simulated, fragment: str) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    documents = {"results.json": dict(json.loads(json.dumps(fig2_document)), mode="emulate"),
                 "results-simulate.json": json.loads(json.dumps(fig2_document))}
    for change, name in ((emulated, "results.json"), (simulated, "results-simulate.json")):
        if change is not None:
            change(documents[name])
    for name, doc in documents.items():
        (run_dir / name).write_text(json.dumps(doc))
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    err = _one_line(capsys, ["report", str(run_dir)])
    assert fragment in err, err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


def test_report_on_a_file_says_so(tmp_path: Path, capsys) -> None:
    (tmp_path / "results.json").write_text("{}")
    err = _one_line(capsys, ["report", str(tmp_path / "results.json")])
    assert "results.json' is not a folder" in err, err


# ------------------------------------------------------------------ simulate --flows: all or nothing
def test_an_interrupted_flows_write_keeps_the_earlier_file(tmp_path: Path, capsys, monkeypatch) -> None:
    """Ctrl-C while the records are being written (FB2010's are 2 million lines): the file given to
    --flows was opened for writing first, so the earlier file was already truncated; now it is kept, and
    no temporary file is left beside it."""
    from echelonflow.results import Results

    flows = tmp_path / "flows.jsonl"
    flows.write_text("the earlier run's records\n")
    write = Results.write_task_records

    def interrupted(self, stream):
        write(self, stream)  # every record written, then Ctrl-C before the file is complete
        raise KeyboardInterrupt

    monkeypatch.setattr(Results, "write_task_records", interrupted)
    assert main(["simulate", "fig2", "--flows", str(flows)]) == 130
    assert capsys.readouterr().err == "echelon: interrupted\n"
    assert flows.read_text() == "the earlier run's records\n" and os.listdir(tmp_path) == ["flows.jsonl"]
    monkeypatch.setattr(Results, "write_task_records", write)
    assert main(["simulate", "fig2", "--flows", str(flows)]) == 0
    assert flows.read_text().count("\n") > 1 and (flows.stat().st_mode & 0o777) == 0o666 & ~_umask()
    # a symbolic link (/dev/stdout into a file) is written through, not replaced by a rename
    os.symlink(flows, tmp_path / "link.jsonl")
    flows.write_text("")
    assert main(["simulate", "fig2", "--flows", str(tmp_path / "link.jsonl")]) == 0
    assert os.path.islink(tmp_path / "link.jsonl") and flows.read_text().count("\n") > 1


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------ the benchmarks users run by hand
@pytest.mark.parametrize("script, argv, fragment", [
    # each was a traceback, or (focus) judged a scheduler that ran nowhere and rewrote the kept
    # matrix.md, or (max-coflows -5) silently dropped the last five coflows
    ("exact_rule_scaling.py", ["--scheduler", "nope"], "unknown scheduler 'nope'"),
    ("exact_rule_scaling.py", ["--progress-s", "inf"], "--progress-s takes 0"),
    ("exact_rule_scaling.py", ["--interval-ms", "inf"], "--interval-ms takes 0 (the exact rule) or more"),
    ("scheduler_matrix.py", ["--summary-only", "--focus", "nope", "--out", "{tmp}"],
     "unknown scheduler 'nope'"),
    ("scheduler_matrix.py", ["--grid", "smoke", "--workers", "-1", "--out", "{tmp}"],
     "--workers must be at least 1, got -1"),
    ("scheduler_matrix.py", ["--grid", "smoke", "--out", "{tmp}/file"],
     "matrix folder {tmp}/file: exists and is not a folder"),
    ("fb2010.py", ["--max-coflows", "-5", "--out", "{tmp}"], "--max-coflows must be at least 1, got -5"),
    ("fb2010.py", ["--out", "{tmp}/file"], "--out {tmp}/file: exists and is not a folder"),
    ("fb2010.py", ["--out", "{tmp}"], "results {tmp}/results.json: not the results this script writes"),
], ids=["exact-scheduler", "exact-progress", "exact-interval", "matrix-focus", "matrix-workers", "matrix-out",
        "fb2010-max-coflows", "fb2010-out", "fb2010-results"])
def test_benchmark_arguments_are_one_line_before_any_run(tmp_path: Path, script: str, argv: list[str],
                                                         fragment: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "results.json").write_text("[1, 2]")  # not what fb2010.py keeps there
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert fragment.replace("{tmp}", str(tmp_path)) in lines[-1], proc.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["file", "results.json"]
