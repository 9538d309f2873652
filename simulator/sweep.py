"""Running a sweep: a grid's cells on worker processes (or a Ray cluster), resumable, one tidy CSV.

A sweep folder holds ``cells.jsonl``, one JSON line per finished cell appended as soon as the cell ends
(its key, status, wall time, and per job completion, slowdown, lower bound and EchelonFlow tardiness), and
``results.csv``, rewritten from it at the end: one row per cell x job.  Starting the same grid again on the
same folder skips every cell already there with status ``ok`` (a cell that failed runs again); a line cut
short by a killed run is ignored.  A cell that fails (its simulation raised) is recorded with its error
and the others go on.

Backends: ``local`` runs the cells in a pool of forked worker processes (one per core by default);
``ray`` submits the same cell function as Ray tasks, to a running cluster (``address``) or to a Ray
instance started here on this machine.  Each cell is one whole ``simulate`` (together and alone runs) in
one process: parallelism is across cells.
"""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import os
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, TextIO

from echelonflow.errors import UserError
from echelonflow.fileio import dumps_strict, loads_strict, write_text_atomic
from simulator.grid import Cell, Grid

BACKENDS = ("local", "ray")
CELLS_FILE = "cells.jsonl"
CSV_FILE = "results.csv"
CSV_COLUMNS = ("scenario", "scheduler", "noise_ms", "sample", "job", "completion_s", "slowdown",
               "lower_bound_s", "tardiness_s", "objective_s", "cell_wall_s")


def run_cell(cell: Cell) -> dict[str, Any]:
    """Simulate one cell; the record ``cells.jsonl`` keeps (never raises: a failure is a record too)."""
    from pathlib import Path

    from echelonflow.bounds import attach_lower_bounds
    from echelonflow.scenario import parse_scenario
    from echelonflow.schedulers import get_scheduler
    from simulator.engine import simulate
    from simulator.noise import jittered

    started = time.perf_counter()
    record: dict[str, Any] = {"key": cell.key, "scenario": cell.scenario, "scheduler": cell.scheduler,
                              "parameters": cell.parameters, "noise_ms": cell.noise_ms, "sample": cell.sample,
                              "rescheduling": cell.rescheduling}
    try:
        scenario = parse_scenario(cell.document, Path(cell.source))
        jobs = jittered(scenario.jobs, cell.noise_ms / 1e3, cell.sample) if cell.noise_ms else scenario.jobs
        run = simulate(scenario.topology, jobs, get_scheduler(cell.scheduler), alone_runs=cell.alone_runs,
                       events=scenario.events, rescheduling=cell.rescheduling)
        attach_lower_bounds([run], scenario.jobs, scenario.topology)
    except Exception as exc:  # a cell's failure is reported in its record; the sweep goes on
        message = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
        record.update(status="failed", error=message)
    else:
        record.update(status="ok", objective_s=float(run.objective_s), jct_mean_s=run.jct_mean_s,
                      jct_p95_s=run.jct_p95_s, gpu_busy_fraction=run.gpu_busy_fraction, jobs={
            job_id: {"completion_s": float(result.completion_s), "slowdown": float(result.slowdown),
                     "lower_bound_s": result.lower_bound_s,
                     "tardiness_s": float(sum(run.job_tardiness_s(job_id)))}
            for job_id, result in run.jobs.items()})
    record["wall_s"] = round(time.perf_counter() - started, 6)
    return record


def read_records(out_dir: str) -> dict[str, dict[str, Any]]:
    """The last record of each cell in ``out_dir``'s log (lines a killed run cut short are skipped)."""
    path = os.path.join(out_dir, CELLS_FILE)
    records: dict[str, dict[str, Any]] = {}
    if not os.path.exists(path):
        return records
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                record = loads_strict(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                records[record["key"]] = record
    return records


def run_sweep(grid: Grid, out_dir: str, backend: str = "local", workers: int | None = None,
              ray_address: str | None = None, progress: TextIO | None = sys.stderr) -> list[dict[str, Any]]:
    """Run ``grid``'s unfinished cells into ``out_dir``; return all its cells' records, in grid order."""
    if backend not in BACKENDS:
        raise UserError(f"unknown sweep backend {backend!r} (known: {', '.join(BACKENDS)})")
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:  # the command checked the folder; what changed since, or a disk that is full
        raise UserError(f"sweep folder {out_dir}: cannot create it ({exc.strerror or exc})") from None
    done = read_records(out_dir)
    pending = [cell for cell in grid.cells if done.get(cell.key, {}).get("status") != "ok"]
    workers = workers or os.cpu_count() or 1
    meter = _Progress(len(grid.cells), len(grid.cells) - len(pending), progress)
    with open(os.path.join(out_dir, CELLS_FILE), "a", encoding="utf-8") as log:
        runner = _ray_records if backend == "ray" else _local_records
        for cell, record in runner(pending, workers, ray_address):
            record = _loggable(record)
            log.write(dumps_strict(record, sort_keys=True) + "\n")
            log.flush()
            done[cell.key] = record
            meter.finished(cell, record)
    records = [done[cell.key] for cell in grid.cells]
    write_text_atomic(os.path.join(out_dir, CSV_FILE), tidy_csv(grid, records), mode=0o644)
    return records


def _loggable(record: dict[str, Any]) -> dict[str, Any]:
    """``record``, or when one of its numbers is not finite the cell's record as failed saying which:
    ``Infinity`` in the log is a line the strict reader skips, so the finished cell would run again on
    every resume and append a duplicate."""
    try:
        dumps_strict(record, f"cell {record['scenario']} {record['scheduler']}")
    except UserError as exc:
        kept = {key: value for key, value in record.items() if key not in ("objective_s", "jobs")}
        return {**kept, "status": "failed", "error": str(exc)}
    return record


def _local_records(cells: list[Cell], workers: int, _address: str | None) -> Iterator[tuple[Cell, dict]]:
    """Cells run in ``workers`` forked processes (in this process when one worker is asked for)."""
    if workers == 1 or len(cells) <= 1:
        for cell in cells:
            yield cell, run_cell(cell)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(min(workers, len(cells)), mp_context=context) as pool:
        futures = {pool.submit(run_cell, cell): cell for cell in cells}
        remaining = set(futures)
        while remaining:
            finished, remaining = wait(remaining, return_when=FIRST_COMPLETED)
            for future in finished:
                yield futures[future], future.result()


def _ray_records(cells: list[Cell], workers: int, address: str | None) -> Iterator[tuple[Cell, dict]]:
    """Cells as Ray tasks: on the cluster at ``address``, or on a Ray instance started here."""
    try:
        import ray
    except ImportError:
        raise UserError("the ray backend needs the 'ray' package (bash bootstrap.sh installs it)") from None
    started_here = not ray.is_initialized()
    if started_here:
        options: dict[str, Any] = {"include_dashboard": False, "logging_level": "warning",
                                   "log_to_driver": False}
        if address:
            _check_reachable(address)
        try:
            if address:
                ray.init(address=address, **options)
            else:
                ray.init(num_cpus=workers, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"at {address}" if address else "on this machine"
            raise UserError(f"cannot reach a Ray cluster {where}: {str(exc).splitlines()[0]}") from None
    try:
        remote = ray.remote(num_cpus=1)(run_cell)
        refs = {remote.remote(cell): cell for cell in cells}
        remaining = list(refs)
        while remaining:
            finished, remaining = ray.wait(remaining, num_returns=1)
            for ref in finished:
                yield refs[ref], ray.get(ref)
    finally:
        if started_here:
            ray.shutdown()


def _check_reachable(address: str) -> None:
    """Fail in a second, not after Ray's long connection retries, when ``host:port`` answers nothing."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and other forms Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise UserError(f"cannot reach a Ray cluster at {address}: {exc.strerror or exc}") from None


def tidy_csv(grid: Grid, records: Iterable[dict[str, Any]]) -> str:
    """One row per finished cell x job: scenario, scheduler, one column per grid parameter, the numbers."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS[:4] + tuple(grid.parameter_paths) + CSV_COLUMNS[4:])
    for record in records:
        if record.get("status") != "ok":
            continue
        values = [_cell_value(record["parameters"][path]) for path in grid.parameter_paths]
        for job_id, job in record["jobs"].items():
            writer.writerow([record["scenario"], record["scheduler"], record.get("noise_ms", 0.0),
                             record.get("sample", 0), *values, job_id, job["completion_s"],
                             job["slowdown"], "" if job["lower_bound_s"] is None else job["lower_bound_s"],
                             job["tardiness_s"], record["objective_s"], record["wall_s"]])
    return out.getvalue()


def _cell_value(value: Any) -> Any:
    """A parameter value in a CSV cell: lists and objects as JSON, anything else as it is."""
    return json.dumps(value) if isinstance(value, (dict, list)) else value


class _Progress:
    """A line per finished cell on ``stream``: a bar, counts, the cell, its time, an estimate of the rest."""

    WIDTH = 24

    def __init__(self, total: int, skipped: int, stream: TextIO | None) -> None:
        self.total, self.done, self.failed = total, skipped, 0
        self.stream = stream
        self.started = time.perf_counter()
        self.ran = 0
        self._say(f"sweep: {total} cells, {skipped} already done, {total - skipped} to run")

    def finished(self, cell: Cell, record: dict[str, Any]) -> None:
        self.done += 1
        self.ran += 1
        self.failed += record["status"] != "ok"
        elapsed = time.perf_counter() - self.started
        left = (self.total - self.done) * elapsed / self.ran
        filled = self.WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        status = "ok" if record["status"] == "ok" else f"FAILED ({record['error']})"
        self._say(f"[{bar}] {self.done}/{self.total} {cell.label()}: {status} in {record['wall_s']:.1f} s;"
                  f" {elapsed:.0f} s elapsed, about {left:.0f} s left")

    def _say(self, line: str) -> None:
        if self.stream is not None:
            print(line, file=self.stream, flush=True)

