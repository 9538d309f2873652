"""Run folders: where one ``echelon emulate`` (or a report) leaves everything a reader needs.

Layout of ``runs/<YYYYmmdd-HHMMSS>-<scenario>/``::

    results.json             the run's result document (echelonflow.results shape; mode emulate or simulate)
    results-simulate.json    for an emulation: the simulator's document for the same scenario and schedulers
    results.csv              one row per job x scheduler x mode (both modes when both exist)
    timeline-<mode>-<scheduler>.png   per host: compute, outgoing and incoming flows over time (paper Fig. 2)
    jct.png                  job completion time and slowdown per scheduler (emulated and simulated
                             side by side)

Everything is derived from the JSON documents, so ``echelon report RUN_DIR`` can re-render CSV and plots
at any time; JSON and CSV are written atomically (temp file + rename).
"""

from __future__ import annotations

import csv
import io
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from echelonflow.errors import UserError
from echelonflow.fileio import read_json, write_json_atomic, write_text_atomic
from echelonflow.results import Results

RESULTS_FILE = "results.json"
CSV_FILE = "results.csv"
JCT_PLOT = "jct.png"
CSV_COLUMNS = ("scenario", "mode", "scheduler", "job", "completion_s", "slowdown", "tardiness_sum_s",
               "tardiness_max_s", "objective_s")


def companion_file(mode: str) -> str:
    """File name of a secondary document (e.g. the simulator's next to an emulation)."""
    return f"results-{mode}.json"


def timeline_file(mode: str, scheduler: str) -> str:
    return f"timeline-{mode}-{_safe(scheduler)}.png"


@dataclass
class RunFolder:
    """The files of one run folder (absolute paths)."""

    path: str
    results: str
    csv: str
    companions: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)


def default_run_dir(scenario: str, base: str = "runs", now: float | None = None) -> str:
    """``<base>/<YYYYmmdd-HHMMSS>-<scenario>``; a suffix keeps it unique if that folder exists."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    candidate = os.path.join(base, f"{stamp}-{_safe(scenario)}")
    path, n = candidate, 1
    while os.path.exists(path):
        n += 1
        path = f"{candidate}-{n}"
    return path


def write_run_folder(run_dir: str, primary: Results, others: Sequence[Results] = (),
                     plots: bool = True) -> RunFolder:
    """Write the documents, the CSV and (unless ``plots`` is false) the PNGs; returns the paths."""
    _check_consistent(primary, others)
    os.makedirs(run_dir, exist_ok=True)
    folder = _folder(run_dir, others)
    write_json_atomic(folder.results, primary.to_json_dict())
    for other, path in zip(others, folder.companions):
        write_json_atomic(path, other.to_json_dict())
    _render(folder, [primary, *others], plots)
    return folder


def load_run_folder(run_dir: str) -> tuple[Results, list[Results]]:
    """The primary document and its companions; UserError naming the file when one is missing or bad."""
    if not os.path.isdir(run_dir):
        raise UserError(f"run folder {run_dir!r} does not exist")
    primary = _load(os.path.join(run_dir, RESULTS_FILE))
    others = []
    for name in sorted(os.listdir(run_dir)):
        if re.fullmatch(r"results-[a-z]+\.json", name):
            other = _load(os.path.join(run_dir, name))
            if other.mode != primary.mode:
                others.append(other)
    _check_consistent(primary, others)
    return primary, others


def rerender(run_dir: str, plots: bool = True) -> RunFolder:
    """Re-create CSV and plots from the JSON documents already in ``run_dir``."""
    primary, others = load_run_folder(run_dir)
    folder = _folder(run_dir, others)
    _render(folder, [primary, *others], plots)
    return folder


def csv_rows(documents: Sequence[Results]) -> list[dict[str, str]]:
    """One row per job x scheduler x mode (numbers with microsecond resolution)."""
    rows = []
    for doc in documents:
        for run in doc.runs:
            for job_id, job in run.jobs.items():
                tard = run.job_tardiness_s(job_id)
                rows.append({
                    "scenario": doc.scenario, "mode": doc.mode, "scheduler": run.scheduler, "job": job_id,
                    "completion_s": f"{job.completion_s:.6f}", "slowdown": f"{job.slowdown:.6f}",
                    "tardiness_sum_s": f"{sum(tard):.6f}" if tard else "",
                    "tardiness_max_s": f"{max(tard):.6f}" if tard else "",
                    "objective_s": f"{run.objective_s:.6f}",
                })
    return rows


def write_csv(path: str, documents: Sequence[Results]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(csv_rows(documents))
    write_text_atomic(path, buffer.getvalue())


def _folder(run_dir: str, others: Sequence[Results]) -> RunFolder:
    """The absolute paths of ``run_dir``'s documents and CSV (plots are added as they are drawn)."""
    path = os.path.abspath(run_dir)
    return RunFolder(path, os.path.join(path, RESULTS_FILE), os.path.join(path, CSV_FILE),
                     [os.path.join(path, companion_file(other.mode)) for other in others])


def _render(folder: RunFolder, documents: Sequence[Results], plots: bool) -> None:
    write_csv(folder.csv, documents)
    if not plots:
        return
    from reports import plots as plot_mod  # matplotlib only when plots are wanted

    for doc in documents:
        for run in doc.runs:
            path = os.path.join(folder.path, timeline_file(doc.mode, run.scheduler))
            plot_mod.plot_timeline(run, path, title=f"{doc.scenario}: {run.scheduler} ({doc.mode})")
            folder.plots.append(path)
    path = os.path.join(folder.path, JCT_PLOT)
    plot_mod.plot_jct(documents, path)
    folder.plots.append(path)


def _load(path: str) -> Results:
    data = read_json(path, "result document")
    try:
        return Results.from_json_dict(data)
    except UserError as exc:
        raise UserError(f"result document {path}: {exc}") from None


def _check_consistent(primary: Results, others: Sequence[Results]) -> None:
    for other in others:
        if other.scenario != primary.scenario:
            raise UserError(
                f"cannot combine results of scenario {other.scenario!r} with {primary.scenario!r}"
            )
        if other.mode == primary.mode:
            raise UserError(f"two result documents with mode {other.mode!r}")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "unnamed"
