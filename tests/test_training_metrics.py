"""What users train for: mean and p95 job completion and the GPU-busy fraction of a run
(``echelonflow.results.training_metrics``; docs/scheduler-design.md, "What users train for"), in the
result document, the tables and the scheduler matrix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from echelonflow.dilation import contract_run
from echelonflow.model import ComputeTask, FlowTask, Job
from echelonflow.results import Results, RunResult, build_run, format_table, percentile_nearest_rank
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from echelonflow.topology import build
from simulator.engine import simulate

ROOT = Path(__file__).resolve().parent.parent
MATRIX_SCRIPT = str(ROOT / "benchmarks" / "scheduler_matrix.py")
sys.path.insert(0, str(ROOT / "benchmarks"))
import scheduler_matrix  # noqa: E402


def _fig2(scheduler: str) -> RunResult:
    scenario = load_scenario("fig2")
    return simulate(scenario.topology, scenario.jobs, get_scheduler(scheduler))


def test_fig2_under_echelon_gives_the_hand_computed_numbers() -> None:
    """Two hosts, three 1 s computes each (C = 6 s); the job ends at 8 s: 6 / (2 x 8) = 0.375."""
    run = _fig2("echelon")
    assert run.jct_mean_s == pytest.approx(8.0)
    assert run.jct_p95_s == pytest.approx(8.0)
    assert run.gpu_busy_fraction == pytest.approx(6.0 / 16.0)
    doc = run.to_json_dict()
    assert doc["gpu_busy_fraction"] == pytest.approx(0.375)
    assert doc["jct_mean_s"] == pytest.approx(8.0)


def test_a_slower_schedule_has_a_lower_gpu_busy_fraction() -> None:
    """sincronia finishes fig2 at 8.5 s (docs): the same compute over more held time."""
    run = _fig2("sincronia")
    assert run.jct_mean_s == pytest.approx(8.5)
    assert run.gpu_busy_fraction == pytest.approx(6.0 / 17.0)


def test_p95_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]  # 20 jobs: the 19th value
    assert percentile_nearest_rank(values, 0.95) == 19.0
    assert percentile_nearest_rank([3.0], 0.95) == 3.0
    assert percentile_nearest_rank([5.0, 1.0], 0.95) == 5.0


def _two_jobs() -> list[Job]:
    """Job a computes 2 s on h1 and 1 s on h2 then sends; job b is a flow only (a coflow, no GPU)."""
    a = Job("a")
    a.add(ComputeTask("c1", "h1", 2.0))
    a.add(ComputeTask("c2", "h2", 1.0))
    a.add(FlowTask("f", "h1", "h2", 1000, deps=("c1", "c2")))
    b = Job("b")
    b.add(FlowTask("f", "h2", "h1", 1000))
    return [a, b]


def test_jobs_without_compute_are_left_out_of_the_fraction() -> None:
    jobs = _two_jobs()
    start = {"a/c1": 0.0, "a/c2": 0.0, "a/f": 2.0, "b/f": 0.0}
    finish = {"a/c1": 2.0, "a/c2": 1.0, "a/f": 4.0, "b/f": 1.0}
    run = build_run("x", jobs, start, finish)
    assert run.jct_mean_s == pytest.approx(2.5)
    assert run.jct_p95_s == pytest.approx(4.0)
    assert run.gpu_busy_fraction == pytest.approx(3.0 / (2 * 4.0))  # b holds no GPU


def test_a_run_without_compute_has_no_fraction_and_no_key() -> None:
    b = _two_jobs()[1]
    run = build_run("x", [b], {"b/f": 0.0}, {"b/f": 1.5})
    assert run.gpu_busy_fraction is None
    doc = run.to_json_dict()
    assert "gpu_busy_fraction" not in doc
    assert doc["jct_mean_s"] == pytest.approx(1.5)


def test_a_document_without_the_metrics_gets_them_when_read() -> None:
    doc = _fig2("echelon").to_json_dict()
    for key in ("jct_mean_s", "jct_p95_s", "gpu_busy_fraction"):
        del doc[key]
    again = RunResult.from_json_dict(doc)
    assert again.gpu_busy_fraction == pytest.approx(0.375)
    assert again.jct_mean_s == pytest.approx(8.0)


def test_contracting_a_dilated_run_divides_the_completions_not_the_fraction() -> None:
    run = contract_run(_fig2("echelon"), 4.0)
    assert run.jct_mean_s == pytest.approx(2.0)
    assert run.gpu_busy_fraction == pytest.approx(0.375)


def test_the_simulate_table_shows_mean_jct_beside_the_objective() -> None:
    results = Results("fig2", "simulate", [_fig2("echelon"), _fig2("sincronia")])
    rows = [line.split() for line in format_table(results).splitlines()]
    all_rows = {row[0]: row for row in rows if len(row) > 1 and row[1] == "(all)"}
    assert all_rows["echelon"][2:] == ["8.000", "4.000"]
    assert all_rows["sincronia"][2:] == ["8.500", "4.500"]


# ------------------------------------------------------------------------------------ the matrix
def _record(scheduler: str, objective: float, completions: list[float], gpu: float | None = None,
            with_metrics: bool = True, noise_ms: float = 0.0) -> dict:
    record = {"status": "ok", "scenario": "s", "parameters": {}, "noise_ms": noise_ms,
              "scheduler": scheduler, "objective_s": objective,
              "jobs": {f"j{k}": {"completion_s": c} for k, c in enumerate(completions)}}
    if with_metrics:
        record.update(jct_mean_s=sum(completions) / len(completions),
                      jct_p95_s=percentile_nearest_rank(completions, 0.95), gpu_busy_fraction=gpu)
    return record


def test_the_matrix_judges_mean_jct_and_gpu_busy_fraction() -> None:
    records = [_record("echelon", 10.0, [10.0, 12.0], gpu=0.50),
               _record("sincronia", 10.5, [10.0, 11.0], gpu=0.52),
               _record("coflow", 12.0, [11.0, 13.0], gpu=0.45)]
    summary = scheduler_matrix.summarise(records)
    echelon = summary["cells"][0]["schedulers"]["echelon"]
    assert echelon["objective_s_vs_best_other"] == pytest.approx(10.0 / 10.5)
    assert echelon["mean_completion_s_vs_best_other"] == pytest.approx(11.0 / 10.5)
    assert echelon["p95_completion_s_vs_best_other"] == pytest.approx(12.0 / 11.0)
    assert echelon["gpu_busy_fraction_vs_best_other"] == pytest.approx(0.50 / 0.52)
    verdict = scheduler_matrix.judge(summary, "echelon")
    assert verdict["above_target"] == []
    assert [r[1] for r in verdict["jct_above_target"]] == ["s"]
    assert [r[1] for r in verdict["gpu_below_other"]] == ["s"]
    text = scheduler_matrix.render(summary, verdict, ["coflow", "echelon", "sincronia"])
    assert "above 1.005: 1 cells" in text
    assert "below another scheduler's: 1 cells" in text


def test_the_matrix_names_the_schedulers_that_dominate_the_focus() -> None:
    """sincronia better on all three dominates; crux trades mean JCT for GPU-busy and does not; fifo equal
    to the focus but for summation noise (a hair below on the objective) does not either."""
    records = [_record("echelon", 10.0, [10.0, 12.0], gpu=0.50),
               _record("crux", 11.0, [12.0, 12.0], gpu=0.55),
               _record("fifo", 10.0 * (1 - 1e-12), [10.0, 12.0], gpu=0.50)]
    verdict = scheduler_matrix.judge(scheduler_matrix.summarise(records), "echelon")
    assert verdict["dominated"] == [] and verdict["dominance_cells"] == 1
    records.append(_record("sincronia", 9.5, [10.0, 11.0], gpu=0.52))
    summary = scheduler_matrix.summarise(records)
    verdict = scheduler_matrix.judge(summary, "echelon")
    assert verdict["dominated"] == [("s", 0.0, ["sincronia"])]
    text = scheduler_matrix.render(summary, verdict, ["crux", "echelon", "fifo", "sincronia"])
    assert "better on one) in 1 of 1 cells" in text and "- s, 0 ms: by sincronia" in text


def test_the_matrix_shows_old_records_metrics_as_missing() -> None:
    """Records written before the p95 and GPU-busy fields: p95 from their jobs, GPU-busy missing."""
    records = [_record("echelon", 10.0, [10.0, 12.0], with_metrics=False),
               _record("sincronia", 10.5, [10.0, 11.0], with_metrics=False)]
    summary = scheduler_matrix.summarise(records)
    echelon = summary["cells"][0]["schedulers"]["echelon"]
    assert echelon["p95_completion_s"] == 12.0
    assert echelon["gpu_busy_fraction"] is None
    assert echelon["gpu_busy_fraction_vs_best_other"] is None
    verdict = scheduler_matrix.judge(summary, "echelon")
    assert verdict["gpu_cells"] == 0 and verdict["gpu_below_other"] == []
    text = scheduler_matrix.render(summary, verdict, ["echelon", "sincronia"])
    assert "| s | 0 | 1 | - | - |" in text


@pytest.mark.slow  # a child that loads every grid of the matrix, FB2010's included
def test_summary_only_rejudges_the_kept_matrix_without_sweep_folders(tmp_path: Path) -> None:
    """The repository keeps matrix.json, not the sweep folders; its cells predate p95 and GPU-busy."""
    kept = ROOT / "benchmarks" / "results" / "scheduler-matrix" / "matrix.json"
    (tmp_path / "matrix.json").write_text(kept.read_text(encoding="utf-8"), encoding="utf-8")
    child = subprocess.run([sys.executable, MATRIX_SCRIPT, "--summary-only", "--out", str(tmp_path)],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "cells with mean JCT" in child.stdout
    cells = json.loads((tmp_path / "matrix.json").read_text(encoding="utf-8"))["summary"]["cells"]
    assert len(cells) == len(json.loads(kept.read_text(encoding="utf-8"))["summary"]["cells"])


@pytest.mark.slow
def test_summary_only_replaces_only_the_grids_it_has_folders_for(tmp_path: Path) -> None:
    """A sweep folder for the bundled grid with one cell: that grid's cells are that one; every other
    grid's cells are carried over from the kept matrix.json, and matrix.md says which."""
    from simulator.grid import load_grid
    from simulator.sweep import CELLS_FILE

    kept = ROOT / "benchmarks" / "results" / "scheduler-matrix" / "matrix.json"
    (tmp_path / "matrix.json").write_text(kept.read_text(encoding="utf-8"), encoding="utf-8")
    cell = load_grid(str(ROOT / "benchmarks" / "matrix" / "bundled.json")).cells[0]
    record = {**_record(cell.scheduler, 1.0, [1.0], gpu=0.5), "scenario": cell.scenario,
              "parameters": cell.parameters, "key": cell.key}
    (tmp_path / "bundled").mkdir()
    (tmp_path / "bundled" / CELLS_FILE).write_text(json.dumps(record) + "\n", encoding="utf-8")
    child = subprocess.run([sys.executable, MATRIX_SCRIPT, "--summary-only", "--out", str(tmp_path)],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    old = json.loads(kept.read_text(encoding="utf-8"))["summary"]["cells"]
    bundled = {scheduler_matrix.cell_label({"scenario": c.scenario, "parameters": c.parameters})
               for c in load_grid(str(ROOT / "benchmarks" / "matrix" / "bundled.json")).cells}
    cells = json.loads((tmp_path / "matrix.json").read_text(encoding="utf-8"))["summary"]["cells"]
    assert len(cells) == 1 + sum(c["cell"] not in bundled for c in old)
    assert [c["schedulers"] for c in cells if c["cell"] == cell.scenario][0].keys() == {cell.scheduler}
    assert "carried over" in (tmp_path / "matrix.md").read_text(encoding="utf-8")


@pytest.mark.slow  # a child that loads every grid of the matrix, FB2010's included
def test_summary_only_without_folders_or_matrix_is_one_line(tmp_path: Path) -> None:
    child = subprocess.run([sys.executable, MATRIX_SCRIPT, "--summary-only", "--out", str(tmp_path / "none")],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 2
    assert child.stderr.startswith("scheduler_matrix: no sweep folder") and child.stderr.count("\n") == 1


def test_the_emulate_table_shows_mean_jct_beside_the_objective() -> None:
    """``echelon emulate``'s, ``echelon demo``'s and ``echelon report``'s table: a ``(mean JCT)`` row per
    scheduler, the emulated median over its runs beside the simulated value; the summary has it too."""
    from reports.fidelity import summarize
    from reports.table import format_report

    simulated = Results("fig2", "simulate", [_fig2("echelon"), _fig2("sincronia")])
    slower = _fig2("coflow")  # as if sincronia had run as coflow does on the fabric: the job ends at 10 s
    slower.scheduler = "sincronia"
    emulated = Results("fig2", "emulate", [_fig2("echelon"), slower])
    rows = {(row[0], row[1]): row for row in (line.split() for line in format_report(emulated, simulated)
                                              .splitlines()) if len(row) > 2}
    assert rows[("echelon", "(mean")][3:5] == ["1", "8.000"]
    assert rows[("sincronia", "(mean")][3:5] == ["1", "10.000"]
    assert rows[("sincronia", "(mean")][7:9] == ["8.500", "+17.6%"]  # the simulated 8.5 s, the gap
    assert summarize(emulated)["sincronia"]["jct_mean_s"]["median"] == pytest.approx(10.0)
    assert summarize(emulated)["echelon"]["gpu_busy_fraction"]["median"] == pytest.approx(0.375)


def test_a_cell_with_the_focus_alone_has_no_ratio_and_no_crash() -> None:
    summary = scheduler_matrix.summarise([_record("echelon", 10.0, [10.0], gpu=0.5)])
    assert summary["cells"][0]["schedulers"]["echelon"]["objective_s_vs_best_other"] is None
    verdict = scheduler_matrix.judge(summary, "echelon")
    assert verdict["worst"] is None and verdict["above_target"] == []
    assert "| s | 0 | 1 | 10.00 (-) |" in scheduler_matrix.render(summary, verdict, ["echelon"])


def _small_job_and_wide_job() -> list[Job]:
    """The worked example of docs/scheduler-design.md, "Why no schedule wins all three": on one link of
    1 MB/s, job ``small`` computes 1 s on one host and then sends 1 MB; job ``wide`` computes 1 s on each
    of four hosts and then sends 2 MB.  Both flows cross the dumbbell's middle link from t = 1 s."""
    small = Job("small")
    small.add(ComputeTask("c", "h1", 1.0))
    small.add(FlowTask("f", "h1", "h6", 1_000_000, deps=("c",)))
    wide = Job("wide")
    for i, host in enumerate(("h2", "h3", "h4", "h5")):
        wide.add(ComputeTask(f"c{i}", host, 1.0))
    wide.add(FlowTask("f", "h2", "h7", 2_000_000, deps=("c0", "c1", "c2", "c3")))
    return [small, wide]


def test_mean_jct_and_gpu_busy_want_opposite_orders() -> None:
    """Serving ``small`` first (echelon: least bottleneck first) gives the least mean JCT (2 and 4 s:
    3 s) and objective; serving ``wide`` first (crux: GPU intensity 4 s / 2 s against 1 s / 1 s) gives
    the most GPU-busy (5 s of compute over 1 x 4 + 4 x 3 GPU-seconds held, against 1 x 2 + 4 x 4).  No
    schedule is at least as good as both on both, so issue 30's "JCT at most and GPU-busy at least every
    other scheduler's" cannot hold in every cell."""
    topology = build("dumbbell", 8e6, mtu_bytes=None, hosts_per_side=5)  # idealised: payload only
    runs = {name: simulate(topology, _small_job_and_wide_job(), get_scheduler(name))
            for name in ("echelon", "crux", "sincronia")}
    assert runs["echelon"].jct_mean_s == pytest.approx(3.0)
    assert runs["echelon"].gpu_busy_fraction == pytest.approx(5.0 / 18.0)
    assert runs["crux"].jct_mean_s == pytest.approx(3.5)
    assert runs["crux"].gpu_busy_fraction == pytest.approx(5.0 / 16.0)
    assert runs["sincronia"].jct_mean_s == pytest.approx(3.0)  # BSSI: the larger coflow last
    assert runs["echelon"].objective_s < runs["crux"].objective_s
