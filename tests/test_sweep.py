"""``echelon sweep``: grid files, cells on worker processes and on Ray, resuming, failures, the CSV."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from simulator.engine import simulate
from simulator.grid import GridError, load_grid
from simulator.sweep import CELLS_FILE, CSV_FILE, read_records, run_sweep

ECHELON = str(Path(sys.executable).parent / "echelon")
GRID = {"name": "rates", "scenarios": ["fig2", "fattree-gpipe-ring"], "schedulers": ["fair", "echelon"],
        "parameters": {"topology.rate_mbps": [10, 25]}}


def write(tmp_path: Path, doc: object, name: str = "grid.json") -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def csv_rows(out_dir: Path) -> list[dict[str, str]]:
    with open(out_dir / CSV_FILE, newline="") as fh:
        return list(csv.DictReader(fh))


def test_grid_expands_into_every_combination_with_the_values_put_in(tmp_path: Path) -> None:
    grid = load_grid(write(tmp_path, {**GRID, "parameters": {"topology.rate_mbps": [10, 25],
                                                              "jobs.0.arrival_s": [0, 1.5]}}))
    assert len(grid.cells) == 2 * 2 * 2 * 2
    assert grid.parameter_paths == ["topology.rate_mbps", "jobs.0.arrival_s"]
    cell = next(c for c in grid.cells if c.scenario == "fattree-gpipe-ring"
                and c.parameters == {"topology.rate_mbps": 25, "jobs.0.arrival_s": 1.5})
    assert cell.document["topology"]["rate_mbps"] == 25 and cell.document["jobs"][0]["arrival_s"] == 1.5
    assert len({c.key for c in grid.cells}) == len(grid.cells)


def test_grid_without_schedulers_takes_each_scenarios_list_and_finds_files_beside_it(tmp_path: Path) -> None:
    scenario = json.loads((Path(load_scenario("fig2").source)).read_text())
    scenario["schedulers"] = ["fifo", "aalo"]
    write(tmp_path, scenario, "mine.json")
    grid = load_grid(write(tmp_path, {"scenarios": ["mine.json", "fig2"]}))
    assert [(c.scenario, c.scheduler) for c in grid.cells] == [
        ("fig2", "fifo"), ("fig2", "aalo"), ("fig2", "fair"), ("fig2", "coflow"), ("fig2", "echelon")]
    assert grid.name == "grid"


@pytest.mark.parametrize("doc, problem", [
    ("{not json", "not valid JSON"),
    ([], "must be a JSON object"),
    ({"scenarios": []}, "scenarios: must be a non-empty array"),
    ({"scenarios": ["fig2"], "speed": 1}, "speed: unknown field"),
    ({"scenarios": ["nope"]}, "no scenario named 'nope'"),
    ({"scenarios": ["fig2"], "schedulers": ["fair", "warp"]}, "unknown scheduler 'warp'"),
    ({"scenarios": ["fig2"], "schedulers": ["fair", "fair"]}, "names a scheduler twice"),
    ({"scenarios": ["fig2", "fig2"]}, "names a scenario twice"),
    ({"scenarios": ["fig2"], "parameters": {"topology.rate_mbps": 10}}, "must be a non-empty array"),
    ({"scenarios": ["fig2"], "parameters": {"topology..k": [1]}}, "must be a dotted path"),
    ({"scenarios": ["fig2"], "parameters": {"jobs.7.arrival_s": [1]}}, "the scenario has no jobs.7"),
    ({"scenarios": ["fig2"], "parameters": {"topology.rate_mbps": [10, -1]}},
     "with topology.rate_mbps=-1: scenario"),
    ({"scenarios": ["fig2"], "alone_runs": "yes"}, "alone_runs: must be true or false"),
    ({"scenarios": ["fig2"], "timing_noise_ms": [1, -5]}, "timing_noise_ms[1]: must be a number"),
    ({"scenarios": ["fig2"], "timing_noise_ms": []}, "timing_noise_ms: must be a non-empty array"),
    ({"scenarios": ["fig2"], "samples": 0}, "samples: must be an integer between 1 and 1000"),
    ({"scenarios": ["fig2"], "rescheduling": "sometimes"}, "rescheduling: must be one of"),
    ({"scenarios": ["fig2"], "timing_noise_ms": [1e308]}, "timing_noise_ms[0]: must be a number of millis"),
    ({"scenarios": ["fig2"], "name": "../../../esc"}, "name: must not contain '/', got '../../../esc'"),
    ({"scenarios": ["fig2"], "name": "/tmp/abs"}, "name: must not contain '/'"),
    ({"scenarios": ["fig2"], "name": ".."}, "name: must be a plain file name, got '..'"),
    ({"scenarios": ["fig2"], "name": "a\nb"}, "name: must not contain '\\n'"),
])
def test_a_bad_grid_is_one_line_naming_the_problem_and_exit_status_2(tmp_path: Path, doc: object,
                                                                     problem: str) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(GridError, match=None) as err:
        load_grid(path)
    assert problem in str(err.value) and "\n" not in str(err.value)
    proc = subprocess.run([ECHELON, "sweep", path, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and problem in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_cli_arguments_are_checked(tmp_path: Path) -> None:
    path = write(tmp_path, GRID)
    for args in (["--workers", "0"], ["--backend", "spark"]):
        proc = subprocess.run([ECHELON, "sweep", path, *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


def _expected(cell) -> dict:
    """The cell's numbers from a plain simulate of the same scenario with the same value."""
    scenario = load_scenario("fattree-gpipe-ring")
    scenario.topology = load_scenario_with_rate(cell.parameters["topology.rate_mbps"]).topology
    run = simulate(scenario.topology, scenario.jobs, get_scheduler(cell.scheduler))
    return {job_id: (r.completion_s, r.slowdown) for job_id, r in run.jobs.items()}


def load_scenario_with_rate(rate_mbps: float):
    from echelonflow.topology import build

    return dataclasses.make_dataclass("T", ["topology"])(build("fattree", rate_mbps * 1e6, k=4))


def test_sweep_on_two_workers_writes_the_simulators_numbers_and_resumes(tmp_path: Path) -> None:
    grid = load_grid(write(tmp_path, GRID))
    out = tmp_path / "out"
    lines: list[str] = []
    records = run_sweep(grid, str(out), workers=2, progress=_Lines(lines))
    assert [r["status"] for r in records] == ["ok"] * 8
    assert "8 cells, 0 already done, 8 to run" in lines[0] and "8/8" in lines[-1]
    for cell, record in zip(grid.cells, records):
        if cell.scenario == "fattree-gpipe-ring":
            got = {j: (v["completion_s"], v["slowdown"]) for j, v in record["jobs"].items()}
            assert got == _expected(cell)
    rows = csv_rows(out)
    assert len(rows) == 2 * 2 * (1 + 2)  # fig2 has one job, fattree-gpipe-ring two
    assert set(rows[0]) >= {"scenario", "scheduler", "topology.rate_mbps", "job", "completion_s", "slowdown",
                            "lower_bound_s", "tardiness_s", "objective_s"}
    fig2 = {(r["scheduler"], r["topology.rate_mbps"]): float(r["completion_s"]) for r in rows
            if r["scenario"] == "fig2"}
    assert fig2[("fair", "10")] == pytest.approx(8.5) and fig2[("echelon", "10")] == pytest.approx(8.0)

    # resumed: nothing runs again, the CSV is the same
    before = (out / CSV_FILE).read_text()
    before_rows = csv_rows(out)
    lines.clear()
    run_sweep(grid, str(out), workers=2, progress=_Lines(lines))
    assert "8 already done, 0 to run" in lines[0] and len(lines) == 1
    assert (out / CSV_FILE).read_text() == before

    # a run killed while writing: its last line cut short; only that cell runs again
    log = (out / CELLS_FILE).read_text().splitlines(keepends=True)
    (out / CELLS_FILE).write_text("".join(log[:-1]) + log[-1][: len(log[-1]) // 2])
    lines.clear()
    run_sweep(grid, str(out), workers=1, progress=_Lines(lines))
    assert "7 already done, 1 to run" in lines[0]
    assert _without_wall_time(csv_rows(out)) == _without_wall_time(before_rows)


def test_noise_cells_are_the_noisy_simulations_and_exact_keys_stay_as_they_were(tmp_path: Path) -> None:
    """``timing_noise_ms`` x ``samples``: sample k of a noisy cell is ``simulator.noise``'s seed k, the
    exact cells keep the keys a grid without noise gave them (so an old sweep folder resumes), and the
    CSV says which noise and sample each row is."""
    from simulator.noise import jittered

    doc = {"scenarios": ["fattree-gpipe-ring"], "schedulers": ["echelon"], "alone_runs": False}
    exact_keys = [cell.key for cell in load_grid(write(tmp_path, doc)).cells]
    grid = load_grid(write(tmp_path, {**doc, "timing_noise_ms": [0, 1], "samples": 2}, "noisy.json"))
    assert [(c.noise_ms, c.sample) for c in grid.cells] == [(0.0, 0), (1.0, 1), (1.0, 2)]
    assert grid.cells[0].key == exact_keys[0] and len({c.key for c in grid.cells}) == 3
    records = run_sweep(grid, str(tmp_path / "out"), workers=1, progress=None)
    scenario = load_scenario("fattree-gpipe-ring")
    for cell, record in zip(grid.cells, records):
        jobs = jittered(scenario.jobs, cell.noise_ms / 1e3, cell.sample) if cell.noise_ms else scenario.jobs
        want = simulate(scenario.topology, jobs, get_scheduler("echelon"), alone_runs=False)
        assert record["objective_s"] == want.objective_s and record["noise_ms"] == cell.noise_ms
    assert records[1]["objective_s"] != records[0]["objective_s"]  # the noise changed something
    rows = csv_rows(tmp_path / "out")
    assert {(r["noise_ms"], r["sample"]) for r in rows} == {("0.0", "0"), ("1.0", "1"), ("1.0", "2")}


def test_a_grid_under_the_coflow_rule_runs_every_cell_under_it(tmp_path: Path) -> None:
    grid = load_grid(write(tmp_path, {"scenarios": ["fig2"], "schedulers": ["echelon"], "alone_runs": False,
                                      "rescheduling": "coflow"}))
    record = run_sweep(grid, str(tmp_path / "out"), workers=1, progress=None)[0]
    want = simulate(load_scenario("fig2").topology, load_scenario("fig2").jobs, get_scheduler("echelon"),
                    alone_runs=False, rescheduling="coflow")
    assert record["rescheduling"] == "coflow" and record["objective_s"] == want.objective_s


def test_a_failing_cell_is_recorded_the_others_go_on_and_it_runs_again_next_time(tmp_path: Path) -> None:
    grid = load_grid(write(tmp_path, {"scenarios": ["fig2"], "schedulers": ["fair", "echelon"]}))
    broken = dataclasses.replace(grid.cells[0], document={**grid.cells[0].document, "jobs": "none"})
    grid.cells[0] = broken
    records = run_sweep(grid, str(tmp_path / "out"), workers=2, progress=None)
    assert records[0]["status"] == "failed" and "jobs: must be a non-empty array" in records[0]["error"]
    assert records[1]["status"] == "ok"
    assert [r["scheduler"] for r in csv_rows(tmp_path / "out")] == ["echelon"]
    lines: list[str] = []
    run_sweep(grid, str(tmp_path / "out"), workers=2, progress=_Lines(lines))
    assert "1 already done, 1 to run" in lines[0] and "FAILED" in lines[1]
    assert len(read_records(str(tmp_path / "out"))) == 2


def test_cli_sweep_writes_csv_plots_and_exit_status(tmp_path: Path) -> None:
    path = write(tmp_path, {"scenarios": ["fig2"], "schedulers": ["fair", "coflow"],
                            "parameters": {"topology.rate_mbps": [10, 20]}})
    proc = subprocess.run([ECHELON, "sweep", path, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "4 of 4 cells ok" in proc.stdout and "[########################] 4/4" in proc.stderr
    assert (tmp_path / "out" / "slowdown-fig2.png").stat().st_size > 1000
    assert len(csv_rows(tmp_path / "out")) == 4


def test_ray_backend_gives_the_same_rows_as_local_workers(tmp_path: Path) -> None:
    """A Ray instance started here (CI included: ray is installed by bootstrap.sh, so this never skips)."""
    import ray  # noqa: F401  (missing ray is a failure, not a skip)

    grid = load_grid(write(tmp_path, GRID))
    local = run_sweep(grid, str(tmp_path / "local"), workers=2, progress=None)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run([ECHELON, "sweep", write(tmp_path, GRID), "--backend", "ray", "--workers", "2",
                           "--out", str(tmp_path / "ray"), "--no-plots"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    on_ray = read_records(str(tmp_path / "ray"))
    assert {r["key"]: r["jobs"] for r in local} == {k: r["jobs"] for k, r in on_ray.items()}
    numbers = ("completion_s", "slowdown", "lower_bound_s", "tardiness_s")
    assert ([[r[k] for k in numbers] for r in csv_rows(tmp_path / "local")]
            == [[r[k] for k in numbers] for r in csv_rows(tmp_path / "ray")])


def test_ray_address_that_answers_nothing_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([ECHELON, "sweep", write(tmp_path, GRID), "--ray", "127.0.0.1:1",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "cannot reach a Ray cluster at 127.0.0.1:1" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def _without_wall_time(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in row.items() if k != "cell_wall_s"} for row in rows]


class _Lines:
    """A progress stream that keeps its lines."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def write(self, text: str) -> None:
        self.lines.extend(line for line in text.splitlines() if line)

    def flush(self) -> None:
        pass


def test_a_record_with_a_number_json_cannot_hold_is_logged_as_failed_and_read_back(tmp_path: Path) -> None:
    """A cell record holding Infinity was written as-is, the strict reader skipped its line, and every
    resume ran the finished cell again and appended a duplicate (issue 35, defect 2)."""
    from simulator.sweep import _loggable

    record = {"key": "k", "scenario": "s", "scheduler": "fair", "status": "ok", "objective_s": float("inf"),
              "jobs": {"j": {"completion_s": 1.0}}, "wall_s": 0.1}
    logged = _loggable(record)
    assert logged["status"] == "failed" and "objective_s is inf" in logged["error"]
    assert "objective_s" not in logged and "jobs" not in logged
    (tmp_path / CELLS_FILE).write_text(json.dumps(logged, allow_nan=False) + "\n")
    assert read_records(str(tmp_path))["k"]["status"] == "failed"
    fine = {**record, "objective_s": 2.0}
    assert _loggable(fine) is fine


def test_a_grid_past_the_cell_limit_is_refused_from_its_count_before_cells_are_built(tmp_path: Path) -> None:
    """Issue 35: 10^7 cells printed nothing for 25 s while memory reached 4.3 GB (every cell was built
    and checked first).  The count comes from the grid's lists alone, is printed, and past
    limits.MAX_SWEEP_CELLS the grid is one line."""
    from echelonflow.limits import MAX_SWEEP_CELLS

    ten = list(range(10))
    paths = ["jobs.0.arrival_s", "jobs.0.weight", "jobs.0.params.micro_batches", "jobs.0.params.compute_s",
             "topology.rate_mbps", "jobs.0.params.link_bytes_per_s", "topology.mtu_bytes"]
    path = write(tmp_path, {"scenarios": ["fig2"], "parameters": {p: [v + 1 for v in ten] for p in paths}})
    heard: list[str] = []
    with pytest.raises(GridError, match=r"30,000,000 cells, more than the 100,000 allowed"):
        load_grid(path, progress=_Lines(heard))
    assert heard == [f"grid {path}: 30,000,000 cells (1 scenarios x 10,000,000 parameter combinations x 1 "
                     "runs with their noise x the schedulers)"]
    assert MAX_SWEEP_CELLS == 100_000
    proc = subprocess.run([ECHELON, "sweep", path, "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "30,000,000 cells, more than the 100,000 allowed" in proc.stderr
    assert proc.stdout.startswith(f"grid {path}: 30,000,000 cells")
    assert not (tmp_path / "out").exists()


def test_a_value_listed_twice_is_one_cell(tmp_path: Path) -> None:
    """Issue 35: repeated parameter values ran duplicate cells under one key; they are merged (numbers by
    value, so 10 and 10.0 are one)."""
    grid = load_grid(write(tmp_path, {"scenarios": ["fig2"], "schedulers": ["fair"],
                                      "parameters": {"topology.rate_mbps": [10, 20, 10.0, 10],
                                                     "jobs.0.params": [{"compute_s": 1}, {"compute_s": 1}]}}))
    assert [c.parameters["topology.rate_mbps"] for c in grid.cells] == [10, 20]
    assert len({c.key for c in grid.cells}) == len(grid.cells) == 2
