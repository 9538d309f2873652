"""Run folders, CSV, plots and ``echelon report``, fed with real simulator results."""

from __future__ import annotations

import copy
import csv
import json
import os

import matplotlib.image as mpimg
import pytest

from cli.main import main
from echelonflow.results import Results
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from reports.plots import _lanes
from reports.runfolder import (
    CSV_COLUMNS,
    default_run_dir,
    load_run_folder,
    timeline_file,
    write_run_folder,
)
from reports.table import format_comparison
from simulator.engine import simulate


@pytest.fixture(scope="module")
def fig2_sim() -> Results:
    scenario = load_scenario("fig2")
    results = Results(scenario.name, "simulate")
    for name in scenario.schedulers:
        results.runs.append(simulate(scenario.topology, scenario.jobs, get_scheduler(name)))
    return results


def fake_emulation(sim: Results, stretch: float) -> Results:
    """An 'emulated' document: the simulated one with every time stretched (stands in for a fabric run)."""
    data = copy.deepcopy(sim.to_json_dict())
    data["mode"] = "emulate"
    for run in data["runs"]:
        for job in run["jobs"].values():
            job["completion_s"] *= stretch
        for task in run["tasks"].values():
            task["start_s"] *= stretch
            task["finish_s"] *= stretch
    return Results.from_json_dict(data)


def assert_png(path: str) -> None:
    assert os.path.getsize(path) > 10_000
    image = mpimg.imread(path)
    assert image.shape[0] > 200 and image.shape[1] > 400
    assert image[..., :3].std() > 0.05  # not a blank canvas


def test_run_folder_has_documents_csv_and_plots(tmp_path, fig2_sim):
    folder = write_run_folder(str(tmp_path / "run"), fig2_sim)
    with open(folder.results) as fh:
        assert json.load(fh) == fig2_sim.to_json_dict()
    with open(folder.csv) as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == len(fig2_sim.runs)  # one job x three schedulers x one mode
    by_scheduler = {r["scheduler"]: r for r in rows}
    for run in fig2_sim.runs:
        row = by_scheduler[run.scheduler]
        assert float(row["completion_s"]) == pytest.approx(run.jobs["fig2"].completion_s, abs=1e-6)
        assert float(row["tardiness_max_s"]) == pytest.approx(
            max(e.tardiness_s for e in run.echelonflows.values()), abs=1e-6)
        assert row["mode"] == "simulate"
    expected = {timeline_file("simulate", r.scheduler) for r in fig2_sim.runs} | {"jct.png"}
    assert {os.path.basename(p) for p in folder.plots} == expected
    for path in folder.plots:
        assert_png(path)


def test_emulated_and_simulated_side_by_side(tmp_path, fig2_sim):
    emu = fake_emulation(fig2_sim, 1.05)
    folder = write_run_folder(str(tmp_path / "run"), emu, [fig2_sim])
    with open(folder.csv) as fh:
        rows = list(csv.DictReader(fh))
    assert sorted({r["mode"] for r in rows}) == ["emulate", "simulate"]
    assert len(rows) == 2 * len(fig2_sim.runs)
    primary, others = load_run_folder(folder.path)
    assert primary.mode == "emulate" and [o.mode for o in others] == ["simulate"]
    table = format_comparison(emu, fig2_sim)
    fair = next(line for line in table.splitlines() if line.startswith("fair"))
    assert "8.925" in fair and "8.500" in fair and "+5.0%" in fair
    assert len(folder.plots) == 2 * len(fig2_sim.runs) + 1


def test_report_command_rerenders_from_json(tmp_path, fig2_sim, capsys):
    run_dir = tmp_path / "run"
    folder = write_run_folder(str(run_dir), fake_emulation(fig2_sim, 1.0), [fig2_sim], plots=False)
    os.unlink(folder.csv)
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "emulated vs simulated" in out and "coflow" in out
    assert os.path.exists(folder.csv)
    for run in fig2_sim.runs:
        assert_png(str(run_dir / timeline_file("emulate", run.scheduler)))
    assert_png(str(run_dir / "jct.png"))


#: A results.json as written before the keys carried units.
OLD_FORMAT = {"scenario": "fig2", "mode": "emulate", "runs": [{
    "scheduler": "fair", "jobs": {"fig2": {"completion_time": 8.5, "slowdown": 1.0}},
    "echelonflows": {"fig2/act": {"tardiness": 4.5, "kind": "staggered", "flows": ["fig2/act0"]}},
    "flows": {"fig2/act0": {"start": 1.0, "finish": 3.0, "ideal_finish": 1.0, "src": "h1", "dst": "h2",
                            "size_bytes": 1, "echelon": "fig2/act"}},
    "tasks": {"fig2/act0": {"type": "flow", "src": "h1", "dst": "h2", "start": 1.0, "finish": 3.0}},
    "objective": 4.5}]}


@pytest.mark.parametrize(
    "setup, needle",
    [
        (lambda d: None, "does not exist"),
        (lambda d: d.mkdir(), "results.json: cannot read: No such file"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text("{oops")), "results.json: not valid JSON"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text('{"scenario": "x", "mode": "emulate"}')),
         "no 'runs' field"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text(
            '{"scenario": "x", "mode": "emulate", "runs": [{"scheduler": "fair"}]}')), "malformed"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text(json.dumps(OLD_FORMAT))), "older format"),
    ],
)
def test_report_on_a_bad_folder_is_one_line_exit_2(tmp_path, capsys, setup, needle):
    run_dir = tmp_path / "run"
    setup(run_dir)
    assert main(["report", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_default_run_dir_is_timestamped_and_unique(tmp_path):
    first = default_run_dir("fig 2", base=str(tmp_path), now=0)
    assert os.path.basename(first).endswith("-fig_2")
    os.makedirs(first)
    second = default_run_dir("fig 2", base=str(tmp_path), now=0)
    assert second != first and second.startswith(first)


def test_timeline_lanes_separate_overlapping_flows():
    spans = [(0.0, 2.0, "a", "j"), (1.0, 3.0, "b", "j"), (2.0, 4.0, "c", "j"), (3.0, 5.0, "d", "j"),
             (3.5, 4.0, "e", "j")]
    lanes = _lanes(spans, max_lanes=4)
    assert [[s[2] for s in lane] for lane in lanes] == [["a", "c"], ["b", "d"], ["e"]]
    for lane in lanes:
        for (_, end, _, _), (start, _, _, _) in zip(lane, lane[1:]):
            assert start >= end
    assert len(_lanes(spans, max_lanes=1)) == 1
