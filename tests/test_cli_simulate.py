"""``echelon simulate`` end to end: the installed console script and ``cli.main.main``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import main
from echelonflow.results import Results, format_table

ECHELON = str(Path(sys.executable).parent / "echelon")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ECHELON, *args], capture_output=True, text=True, timeout=120)


def test_fig2_json_reproduces_the_paper_via_console_script() -> None:
    proc = run_cli("simulate", "fig2", "--json", "--per-flow")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["scenario"] == "fig2" and doc["mode"] == "simulate"
    completion = {run["scheduler"]: run["jobs"]["fig2"]["completion_s"] for run in doc["runs"]}
    assert completion == pytest.approx({"fair": 8.5, "coflow": 10.0, "echelon": 8.0}, abs=1e-6)
    echelon = next(run for run in doc["runs"] if run["scheduler"] == "echelon")
    assert echelon["objective_s"] == pytest.approx(4.0, abs=1e-6)
    flow = echelon["flows"]["fig2/" + sorted(k.split("/")[1] for k in echelon["flows"])[0]]
    assert set(flow) == {"start_s", "finish_s", "ideal_finish_s", "src", "dst", "size_bytes", "echelon"}
    assert flow["size_bytes"] == 2_500_000
    tasks = echelon["tasks"]
    assert {t["type"] for t in tasks.values()} == {"compute", "flow"}
    # the document round-trips through the shared result dataclasses
    assert Results.from_json_dict(doc).to_json_dict() == doc


def test_human_table_and_scheduler_selection(capsys) -> None:
    assert main(["simulate", "fig2", "--scheduler", "echelon", "--scheduler", "fair"]) == 0
    out = capsys.readouterr().out
    assert "fair" in out and "echelon" in out and "coflow" not in out
    assert "8.000" in out and "8.500" in out


def test_multi_job_fattree_scenario_json(capsys) -> None:
    assert main(["simulate", "fattree-gpipe-ring", "--json", "--per-flow"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [run["scheduler"] for run in doc["runs"]] == ["fair", "coflow", "echelon"]
    for run in doc["runs"]:
        assert set(run["jobs"]) == {"gpipe", "ring"}
        for job in run["jobs"].values():
            assert job["completion_s"] > 0 and job["slowdown"] > 0
        # Eq. 2 and 4 recomputed from the flows' own times; Eq. 5: a Coflow's flows are due together
        objective_s = 0.0
        for echelon in run["echelonflows"].values():
            flows = [run["flows"][fid] for fid in echelon["flows"]]
            worst_s = max(f["finish_s"] - f["ideal_finish_s"] for f in flows)
            assert echelon["tardiness_s"] == pytest.approx(worst_s, abs=1e-9)
            objective_s += worst_s
            due_s = {round(f["ideal_finish_s"], 9) for f in flows}
            assert (len(due_s) == 1) == (echelon["kind"] == "coflow") or len(flows) == 1
        assert run["objective_s"] == pytest.approx(objective_s)
    assert "gpipe" in format_table(Results.from_json_dict(doc))


@pytest.mark.parametrize(
    "args, message",
    [
        (["simulate", "nope"], "no scenario named 'nope'"),
        (["simulate", "fig2", "--scheduler", "varys"], "unknown scheduler 'varys'"),
        (["simulate", "/no/such.json"], "does not exist"),
        (["simulate", "fig2", "--rescheduling", "sometimes"], "--rescheduling: invalid choice: 'sometimes'"),
        (["simulate", "fig2", "--per-flow"], "--per-flow needs --json"),
        (["simulate", "fig2", "--flows", "/"], "--flows /: is a directory"),
        (["simulate", "fig2", "--flows", "/no/such/f.jsonl"], "--flows /no/such/f.jsonl: cannot write"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert message in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_bad_scenario_file_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"topology": {"kind": "two_hosts", "rate_mbps": 10}, "jobs": [{"trace": 3}]}))
    proc = run_cli("simulate", str(path))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"echelon: error: scenario {path}: jobs[0].trace")


def test_a_reader_that_goes_away_stops_it_quietly() -> None:
    """``echelon simulate ... --json --per-flow | head -c 10``: no traceback when the pipe closes early."""
    proc = subprocess.Popen([ECHELON, "simulate", "fattree-fsdp-ps", "--json", "--per-flow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.read(10) == b'{\n "scenar'
    proc.stdout.close()  # the reader is gone before the document is written out
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141 and b"Traceback" not in err, err.decode()


def test_no_checks_leaves_out_the_decision_checks_and_nothing_else(monkeypatch, capsys) -> None:
    """``--no-checks``: a policy that gives a link twice its capacity fails the checked run and runs
    unchecked (fig2 then ends before the 8 s a real link allows); a sound policy's document is the same
    with and without the checks, timing noise samples included."""
    from echelonflow.schedulers import SCHEDULERS
    from tests.helpers import overcommit_class

    monkeypatch.setitem(SCHEDULERS, "overcommit", overcommit_class())
    with pytest.raises(AssertionError, match="over capacity"):
        main(["simulate", "fig2", "--scheduler", "overcommit"])
    capsys.readouterr()
    assert main(["simulate", "fig2", "--scheduler", "overcommit", "--no-checks", "--json",
                 "--timing-noise-ms", "1", "--samples", "2"]) == 0  # the noise samples unchecked too
    unchecked = json.loads(capsys.readouterr().out)
    assert unchecked["runs"][0]["jobs"]["fig2"]["completion_s"] < 8.0 - 0.5
    documents = []
    for extra in ([], ["--no-checks"]):
        args = ["simulate", "fig2", "--json", "--timing-noise-ms", "1", "--samples", "3", *extra]
        assert main(args) == 0
        documents.append(json.loads(capsys.readouterr().out))
    assert documents[0] == documents[1]
