"""Run folders, CSV, plots and ``echelon report``, fed with real simulator results."""

from __future__ import annotations

import copy
import csv
import json
import os

import matplotlib.image as mpimg
import pytest

from cli.main import main
from echelonflow.model import ComputeTask, FlowTask, Job
from echelonflow.results import Results, RunResult, build_run
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from echelonflow.topology import build
from emulation.monitor import IntervalStats, combine, evaluate, judge_tcp_timeouts
from reports.plots import _lanes
from reports.runfolder import (
    CSV_COLUMNS,
    default_run_dir,
    load_run_folder,
    read_status,
    status_line,
    timeline_file,
    write_run_folder,
)
from reports.table import format_comparison, format_failures, format_report, format_trust
from simulator.engine import simulate
from tests.helpers import agent_records


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
    names = {os.path.basename(p) for p in folder.plots}
    assert len(names) == 2 * len(fig2_sim.runs) + 2 and {"jct.png", "fidelity.png"} <= names
    with open(folder.results) as fh:
        data = json.load(fh)
    assert data["summary"]["fair"]["runs"] == 1 and "status" not in data  # status only when given


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


def _fig2_with(run_dir, change) -> None:
    """A run folder of fig2 simulated under fair, with ``change`` made to its run in results.json."""
    run_dir.mkdir()
    job = Job("fig2")
    job.add(ComputeTask("w1_mb0", "h1", 1.0))
    job.add(FlowTask("act0", "h1", "h2", 1000, ("w1_mb0",), echelon_id="act"))
    doc = Results("fig2", "simulate", [simulate(build("two_hosts", 1e6), [job], get_scheduler("fair"))])
    data = doc.to_json_dict()
    change(data["runs"][0])
    (run_dir / "results.json").write_text(json.dumps(data))


@pytest.mark.parametrize(
    "setup, needle",
    [
        (lambda d: None, "does not exist"),
        (lambda d: d.mkdir(), "results.json: cannot read: No such file"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text("{oops")), "results.json: not valid JSON"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text('{"scenario": "x", "mode": "emulate"}')),
         "results.json: runs: missing"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text(
            '{"scenario": "x", "mode": "emulate", "runs": [{"scheduler": "fair"}]}')),
         "results.json: runs[0].jobs: missing"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text(json.dumps(OLD_FORMAT))), "older format"),
        (lambda d: _fig2_with(d, lambda run: run["jobs"]["fig2"].update(completion_s="soon")),
         "results.json: runs[0].jobs['fig2'].completion_s: must be a number of seconds, got 'soon'"),
        (lambda d: _fig2_with(d, lambda run: run["flows"]["fig2/act0"].update(size_bytes=1e300)),
         "results.json: runs[0].flows['fig2/act0'].size_bytes: must be a whole number of bytes between 1"),
        (lambda d: _fig2_with(d, lambda run: run["tasks"]["fig2/w1_mb0"].update(type="gpu")),
         "results.json: runs[0].tasks['fig2/w1_mb0'].type: must be one of compute, flow, got 'gpu'"),
        (lambda d: _fig2_with(d, lambda run: run.update(objective_s=[4.5])),
         "results.json: runs[0].objective_s: must be a number of seconds, got [4.5]"),
        (lambda d: _fig2_with(d, lambda run: run.update(colour="red")),
         "results.json: runs[0].colour: unknown field (allowed: scheduler, jobs, "),
    ],
)
def test_report_on_a_bad_folder_is_one_line_exit_2(tmp_path, capsys, setup, needle):
    """A results.json that does not fit docs/results-format.md is one line naming the file and the field
    (issue 35: a string where a number belongs was a traceback)."""
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


# ------------------------------------------------------------------------------------------ repeats
def stretched_run(sim_run: RunResult, factor: float, repeat: int, trusted: bool | None = True) -> RunResult:
    """An 'emulated' repeat: every task of the simulated run ``factor`` times later and longer, with
    tardiness, objective and completion recomputed by the one result builder."""
    jobs = load_scenario("fig2").jobs
    start = {qid: t.start_s * factor for qid, t in sim_run.tasks.items()}
    finish = {qid: t.finish_s * factor for qid, t in sim_run.tasks.items()}
    run = build_run(sim_run.scheduler, jobs, start, finish)
    run.repeat, run.trusted = repeat, trusted
    return run


def repeated(sim: Results, factors: dict[str, list[float]], untrusted: dict[str, set[int]] | None = None
             ) -> Results:
    emu = Results(sim.scenario, "emulate")
    for run in sim.runs:
        for repeat, factor in enumerate(factors[run.scheduler]):
            trusted = repeat not in (untrusted or {}).get(run.scheduler, set())
            emu.runs.append(stretched_run(run, factor, repeat, trusted))
    return emu


def test_repeats_give_medians_spread_and_fidelity(tmp_path, fig2_sim):
    factors = {"fair": [1.02, 1.10, 1.05], "coflow": [1.0, 1.0, 1.0], "echelon": [1.08, 1.04, 1.06]}
    emu = repeated(fig2_sim, factors)
    folder = write_run_folder(str(tmp_path / "run"), emu, [fig2_sim], plots=True)
    with open(folder.results) as fh:
        data = json.load(fh)
    sim = {run.scheduler: run for run in fig2_sim.runs}
    fair = data["summary"]["fair"]["jobs"]["fig2"]["completion_s"]
    base = sim["fair"].jobs["fig2"].completion_s
    assert fair["n"] == 3 and fair["median"] == pytest.approx(1.05 * base)
    assert fair["min"] == pytest.approx(1.02 * base) and fair["max"] == pytest.approx(1.10 * base)
    assert fair["mean"] == pytest.approx(base * (1.02 + 1.10 + 1.05) / 3)
    assert fair["range_share"] == pytest.approx(0.08 / 1.05)
    assert [r["repeat"] for r in data["runs"]] == [0, 1, 2] * 3
    jobs = {(r["scheduler"], r["job"]): r for r in data["fidelity"]["jobs"]}
    assert jobs[("fair", "fig2")]["gap"] == pytest.approx(0.05)
    assert jobs[("coflow", "fig2")]["within_target"] and jobs[("coflow", "fig2")]["spread_ok"]
    assert not jobs[("fair", "fig2")]["spread_ok"]  # 7.6 % > 5 %
    gains = {(g["over"], g["metric"]): g for g in data["fidelity"]["gains"]}
    completion = gains[("coflow", "fig2 completion")]
    sim_gain = 1 - sim["echelon"].jobs["fig2"].completion_s / sim["coflow"].jobs["fig2"].completion_s
    assert completion["simulated_gain"] == pytest.approx(sim_gain)
    emu_gain = 1 - 1.06 * sim["echelon"].jobs["fig2"].completion_s / sim["coflow"].jobs["fig2"].completion_s
    assert completion["emulated_gain"] == pytest.approx(emu_gain)
    assert completion["kept"] == pytest.approx(emu_gain / sim_gain) and completion["runs"] == ["3", "3"]
    assert {("fair", "objective"), ("coflow", "objective")} <= set(gains)
    text = (tmp_path / "run" / "fidelity.md").read_text()
    assert "echelon over coflow" in text and "fig2 completion" in text and " 3 UNTRUSTED" not in text
    assert_png(str(tmp_path / "run" / "fidelity.png"))
    with open(folder.csv) as fh:
        rows = [r for r in csv.DictReader(fh) if r["mode"] == "emulate"]
    assert len(rows) == 9 and {r["repeat"] for r in rows} == {"0", "1", "2"} and rows[0]["trusted"] == "true"
    table = format_comparison(emu, fig2_sim)
    fair_line = next(line for line in table.splitlines() if line.startswith("fair") and "fig2" in line)
    assert " 3 " in fair_line and "+5.0%" in fair_line
    assert f"{1.02 * base:.2f}..{1.10 * base:.2f}" in fair_line
    assert any(line.startswith("echelon") and "(objective)" in line for line in table.splitlines())


def test_untrusted_runs_are_left_out_or_marked(tmp_path, fig2_sim):
    factors = {"fair": [1.0, 1.5, 1.0], "coflow": [2.0, 2.2], "echelon": [1.0]}
    emu = repeated(fig2_sim, factors, untrusted={"fair": {1}, "coflow": {0, 1}})
    write_run_folder(str(tmp_path / "run"), emu, [fig2_sim], plots=False)
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    fair = data["summary"]["fair"]
    assert (fair["runs"], fair["trusted_runs"], fair["numbers_trusted"]) == (3, 2, True)
    assert fair["jobs"]["fig2"]["completion_s"]["max"] == pytest.approx(
        fig2_sim.runs[0].jobs["fig2"].completion_s)  # the 1.5x untrusted repeat is not in the numbers
    coflow = data["summary"]["coflow"]
    assert (coflow["trusted_runs"], coflow["numbers_trusted"]) == (0, False)
    table = format_comparison(emu, fig2_sim)
    assert "2 of 3" in table and "2 UNTRUSTED" in table
    trust = format_trust(emu).splitlines()
    assert trust[0] == "fidelity monitor: 3 of 6 run(s) trusted" and len(trust) == 4
    assert trust[1].startswith("  NOT trusted: fair repeat 2")
    text = (tmp_path / "run" / "fidelity.md").read_text()
    assert "2 UNTRUSTED" in text and "1 vs 2 UNTRUSTED" in text and "2 of 3" in text
    gains = {(g["over"], g["metric"]): g for g in data["fidelity"]["gains"]}
    assert not gains[("coflow", "objective")]["trusted"] and gains[("fair", "objective")]["trusted"]


def test_partial_status_is_kept_and_reported(tmp_path, fig2_sim, capsys):
    run_dir = tmp_path / "run"
    emu = repeated(fig2_sim, {"fair": [1.0], "coflow": [], "echelon": []})
    status = {"complete": False, "reason": "emulation of fig2 under coflow failed: agent h1 died",
              "runs_done": 1, "runs_planned": 3}
    write_run_folder(str(run_dir), emu, [fig2_sim], plots=False, status=status)
    assert read_status(str(run_dir)) == status
    assert status_line(status).startswith("PARTIAL RUN: 1 of 3 runs finished; emulation of fig2")
    assert status_line({"complete": True}) == "" and status_line(None) == ""
    os.unlink(run_dir / "fidelity.md")
    assert main(["report", str(run_dir), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "PARTIAL RUN: 1 of 3" in out and "fair" in out
    assert read_status(str(run_dir)) == status  # re-rendering keeps the status
    assert (run_dir / "fidelity.md").exists()


def test_fidelity_section_lists_monitor_verdicts_and_wire_mismatches(tmp_path, fig2_sim):
    emu = repeated(fig2_sim, {"fair": [1.0, 1.2], "coflow": [1.0], "echelon": [1.0]}, untrusted={"fair": {1}})
    good = {"trusted": True, "reasons": [], "slow_link_share": 0.01, "cpu_idle": {"median": 0.8}}
    bad = {"trusted": False, "reasons": ["30% of busy port intervals below 90% of the configured rate"],
           "slow_link_share": 0.3, "cpu_idle": {"median": 0.2}}
    for run in emu.runs:
        run.fidelity_monitor = {"rounds": {"together": bad if run.trusted is False else good}}
    lines = [f"fig2/f{i}: first packet +{30 + i}.0 ms from the agent's start" for i in range(15)]
    wire = {"flows": 3, "flows_with_problems": 2, "packets_judged": 900, "packets_mismatched": 4,
            "mismatches": lines}
    emu.runs[0].wire_check = {"rounds": {"together": wire}}
    write_run_folder(str(tmp_path / "run"), emu, [fig2_sim], plots=False)
    text = (tmp_path / "run" / "fidelity.md").read_text()
    runs_table = text.split("## Runs: fidelity monitor and wire check", 1)[1]
    fair_rows = [line for line in runs_table.splitlines() if line.startswith("fair ")]
    assert fair_rows[0].split() == ["fair", "1", "yes", "1%", "80%", "-", "2", "of", "3", "4", "of", "900"]
    assert fair_rows[1].split()[:5] == ["fair", "2", "NO", "30%", "20%"]
    assert "Not trusted, fair repeat 2:\n- together: 30% of busy port intervals" in text
    assert "Wire mismatches, fair repeat 1 (15):" in text and "- together: fig2/f11: first packet" in text
    assert "fig2/f12" not in text and "- ... and 3 more (results.json wire_check)" in text
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    assert data["fidelity"]["runs"][0]["wire"]["packets_mismatched"] == 4


def test_a_run_with_tcp_timeouts_is_left_out_and_its_timeouts_shown(tmp_path, fig2_sim):
    """The crux k=8 outlier's shape (docs/results.md): the machine's numbers quiet in every repeat, one
    repeat 2.5x slow with timeouts on two hosts.  Its verdict made as ``emulation.run`` makes it, it is
    not counted as trusted, not in the medians, and the runs table says how many timeouts each run had."""
    emu = repeated(fig2_sim, {"fair": [1.0, 2.5, 1.02], "coflow": [1.0], "echelon": [1.0]})
    quiet = [IntervalStats(t * 0.5, t * 0.5 + 0.5, 0.9, 0.1, 0.1, 0.05, {}, 0.0) for t in range(20)]
    for run in emu.runs:
        stalled = (run.scheduler, run.repeat) == ("fair", 1)
        timeouts = {"h34": 5, "h50": 4} if stalled else {"h34": 0, "h50": 0}
        tcp = agent_records(tmp_path / f"{run.scheduler}-{run.repeat}", timeouts)
        run.fidelity_monitor = combine({"together": judge_tcp_timeouts(evaluate(quiet), tcp)})
        run.trusted = run.fidelity_monitor["trusted"]
    write_run_folder(str(tmp_path / "run"), emu, [fig2_sim], plots=False)
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    fair = data["summary"]["fair"]
    assert (fair["runs"], fair["trusted_runs"], fair["numbers_trusted"]) == (3, 2, True)
    assert fair["jobs"]["fig2"]["completion_s"]["max"] == pytest.approx(
        1.02 * fig2_sim.runs[0].jobs["fig2"].completion_s)  # the stalled repeat is not in the numbers
    assert [r["tcp_timeouts"] for r in data["fidelity"]["runs"][:3]] == [{}, {"h34": 5, "h50": 4}, {}]
    text = (tmp_path / "run" / "fidelity.md").read_text()
    runs_table = text.split("## Runs: fidelity monitor and wire check", 1)[1]
    fair_rows = [line.split() for line in runs_table.splitlines() if line.startswith("fair ")]
    assert [row[:3] + row[5:] for row in fair_rows] == [
        ["fair", "1", "yes", "0", "-", "-"], ["fair", "2", "NO", "9", "on", "2", "hosts", "-", "-"],
        ["fair", "3", "yes", "0", "-", "-"]]
    assert ("Not trusted, fair repeat 2:\n- together: TCP retransmission timeouts on h34 (5), h50 (4): flows "
            "stalled, the run's times are not the schedule's") in text
    assert "2 of 3" in format_comparison(emu, fig2_sim)
    assert format_trust(emu).splitlines()[1].startswith(
        "  NOT trusted: fair repeat 2: together: TCP retransmission timeouts on h34 (5), h50 (4)")


def test_a_failed_job_is_one_line_and_survives_the_results_round_trip(tmp_path, fig2_sim):
    """A run where an agent died: the job is absent from its timings, listed under failed_jobs with the
    reason and the injected faults, and the table's notes say it in one line."""
    emu = fake_emulation(fig2_sim, 1.0)
    assert format_failures(emu) == ""
    run = emu.runs[0]
    run.failed_jobs = {"fig2": "agent h1 died (killed by SIGKILL) 1.5 s after t0"}
    run.faults = [{"kind": "agent", "target": ["h1"], "at_s": 1.5}]
    run.jobs.pop("fig2")
    write_run_folder(str(tmp_path / "run"), emu, [fig2_sim], plots=False)
    again = Results.from_json_dict(json.loads((tmp_path / "run" / "results.json").read_text()))
    assert again.runs[0].failed_jobs == run.failed_jobs and again.runs[0].faults == run.faults
    assert format_failures(again) == (f"job fig2 FAILED under {run.scheduler}: agent h1 died (killed by "
                                      f"SIGKILL) 1.5 s after t0")


def test_the_table_the_csv_and_fidelity_md_say_which_runs_had_which_faults(tmp_path, fig2_sim):
    """Faults are marked in results.json; a reader of the printed table, results.csv or fidelity.md must
    see them too: each set of faults once, with the runs it hit."""
    emu = fake_emulation(fig2_sim, 1.0)
    second = copy.deepcopy(emu.runs[2])  # echelon twice: its runs are told apart by their repeat
    emu.runs[2].repeat, second.repeat = 0, 1
    emu.runs.append(second)
    link = [{"kind": "link", "target": ["s1", "h1"], "at_s": 3.0, "up": False},
            {"kind": "link", "target": ["s1", "h1"], "at_s": 6.5, "up": True}]
    for run in (emu.runs[0], emu.runs[2]):
        run.faults = copy.deepcopy(link)
    emu.runs[3].faults = [{"kind": "controller", "target": [], "at_s": 4.0, "up": False}]
    words = "link s1-h1 down at 3 s; link s1-h1 up at 6.5 s"
    assert format_report(emu, fig2_sim).splitlines()[-2:] == [
        f"faults injected: {words} (runs: fair, echelon repeat 1)",
        "faults injected: controller down at 4 s (runs: echelon repeat 2)"]
    folder = write_run_folder(str(tmp_path / "run"), emu, [fig2_sim], plots=False)
    with open(folder.csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    faults = {(r["mode"], r["scheduler"], r["repeat"]): r["faults"] for r in rows}
    assert faults[("emulate", "fair", "")] == words and faults[("emulate", "coflow", "")] == ""
    assert faults[("emulate", "echelon", "0")] == words
    assert faults[("emulate", "echelon", "1")] == "controller down at 4 s"
    assert {value for (mode, *_), value in faults.items() if mode == "simulate"} == {""}
    text = (tmp_path / "run" / "fidelity.md").read_text()
    assert "## Faults injected\n" in text and f"- {words}: fair, echelon repeat 1\n" in text
    assert "- controller down at 4 s: echelon repeat 2" in text
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    assert data["fidelity"]["faults"][0] == {"faults": words, "runs": ["fair", "echelon repeat 1"]}
    without = fake_emulation(fig2_sim, 1.0)
    assert "faults injected" not in format_report(without, fig2_sim)
    write_run_folder(str(tmp_path / "plain"), without, [fig2_sim], plots=False)
    assert "Faults injected" not in (tmp_path / "plain" / "fidelity.md").read_text()
