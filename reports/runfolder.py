"""Run folders: where one ``echelon emulate`` (or a report) leaves everything a reader needs.

Layout of ``runs/<YYYYmmdd-HHMMSS>-<scenario>/``::

    results.json             the run's result document (echelonflow.results shape; mode emulate or simulate);
                             an emulation adds "status" (complete or partial, and why), "summary" (spread
                             over each scheduler's repeats) and "fidelity" (emulated vs simulated)
    results-simulate.json    for an emulation: the simulator's document for the same scenario and schedulers
    results.csv              one row per job x scheduler x repeat x mode (both modes when both exist); the
                             faults a run had, in words, in its rows' ``faults`` column
    fidelity.md, fidelity.png   emulated vs simulated per job, the objective, echelon's gains (from medians)
    timeline-<mode>-<scheduler>.png   per host: compute, outgoing and incoming flows over time (paper Fig. 2);
                             with repeats, the run with the median objective; none for a document without
                             per-task records (``echelon simulate --json`` without ``--per-flow``)
    jct.png                  job completion time and slowdown per scheduler (emulated medians with their
                             min..max, simulated side by side)
    logs/, captures/         agents' and controllers' logs, monitor samples; pcaps of ``--capture`` runs

An emulation rewrites results.json after every finished run with ``"status": {"complete": false}``, and
marks it complete at the end: a run that dies (or is interrupted) leaves the runs it finished and says
it is partial.  Everything else is derived from the JSON documents, so ``echelon report RUN_DIR`` can
re-render CSV, fidelity section and plots at any time; JSON and text are written atomically.
"""

from __future__ import annotations

import csv
import io
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from echelonflow.errors import UserError
from echelonflow.fileio import path_kind, read_json, write_json_atomic, write_text_atomic
from echelonflow.results import Results
from reports.fidelity import (
    describe_faults,
    fidelity,
    format_fidelity,
    representative,
    runs_by_scheduler,
    summarize,
)

RESULTS_FILE = "results.json"
CSV_FILE = "results.csv"
JCT_PLOT = "jct.png"
FIDELITY_TEXT = "fidelity.md"
FIDELITY_PLOT = "fidelity.png"
CSV_COLUMNS = ("scenario", "mode", "scheduler", "repeat", "trusted", "job", "completion_s", "slowdown",
               "tardiness_sum_s", "tardiness_max_s", "objective_s", "faults")
#: Top-level keys of an emulation's results.json besides the shared shape (derived or bookkeeping).
EXTRA_KEYS = ("status", "summary", "fidelity")


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
                     plots: bool = True, status: dict[str, Any] | None = None) -> RunFolder:
    """Write the documents, the CSV, the fidelity section and (unless ``plots`` is false) the PNGs.

    ``status`` (``{"complete": bool, ...}``) is recorded in results.json as is."""
    _check_consistent(primary, others)
    os.makedirs(run_dir, exist_ok=True)
    folder = _folder(run_dir, others)
    for other, path in zip(others, folder.companions):
        write_json_atomic(path, other.to_json_dict())
    _write_primary(folder, primary, others, status)
    _render(folder, [primary, *others], plots)
    return folder


def load_run_folder(run_dir: str) -> tuple[Results, list[Results]]:
    """The primary document and its companions; UserError naming the file when one is missing or bad."""
    kind = path_kind(run_dir, "run folder")
    if kind != "folder":
        problem = "does not exist" if kind is None else "is not a folder"
        raise UserError(f"run folder {run_dir!r} {problem}")
    primary = _load(os.path.join(run_dir, RESULTS_FILE))
    others = []
    for name in sorted(os.listdir(run_dir)):
        if re.fullmatch(r"results-[a-z]+\.json", name):
            other = _load(os.path.join(run_dir, name))
            if other.mode != primary.mode:
                others.append(other)
    _check_consistent(primary, others)
    return primary, others


def read_status(run_dir: str) -> dict[str, Any] | None:
    """The ``status`` an emulation recorded in results.json (None for documents without one)."""
    try:
        status = read_json(os.path.join(run_dir, RESULTS_FILE), "result document").get("status")
    except (UserError, AttributeError):
        return None
    return status if isinstance(status, dict) else None


def status_line(status: dict[str, Any] | None) -> str:
    """One line for a partial run ('' for a complete one or a document without status)."""
    if not status or status.get("complete", True):
        return ""
    return (f"PARTIAL RUN: {status.get('runs_done', '?')} of {status.get('runs_planned', '?')} runs "
            f"finished; {status.get('reason') or 'the emulation did not finish'}")


#: What reading an emulation's own objects (``fidelity_monitor``, ``wire_check``, ``timing_noise``,
#: the calibration) raises when a document holds them in another shape than this version writes:
#: the loader checks the fields the tables index, not the inside of every measurement record.
SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)


def unreadable(run_dir: str, exc: Exception) -> UserError:
    """The one line for a folder whose documents hold something of another shape (:data:`SHAPE_ERRORS`)."""
    return UserError(f"run folder {run_dir}: its documents hold a field this version cannot read "
                     f"({type(exc).__name__}: {exc}); nothing was rewritten")


def rerender(run_dir: str, plots: bool = True) -> RunFolder:
    """Re-create CSV, fidelity section and plots (and results.json's derived keys) from the documents.

    Everything written is computed first: a document this version cannot render is one line and
    leaves the folder as it was."""
    primary, others = load_run_folder(run_dir)
    folder = _folder(run_dir, others)
    documents = [primary, *others]
    try:
        data = (_primary_data(primary, others, read_status(run_dir))
                if _simulated(primary, others) is not None else None)
        csv_text, fidelity_doc = _csv_text(documents), _fidelity_doc(documents)
        fidelity_text = format_fidelity(fidelity_doc) if fidelity_doc is not None else None
    except SHAPE_ERRORS as exc:
        raise unreadable(run_dir, exc) from None
    if data is not None:
        write_json_atomic(folder.results, data)
    write_text_atomic(folder.csv, csv_text)
    if fidelity_text is not None:
        write_text_atomic(os.path.join(folder.path, FIDELITY_TEXT), fidelity_text)
    if plots:
        try:
            _plot(folder, documents, fidelity_doc)
        except SHAPE_ERRORS as exc:
            raise UserError(f"run folder {run_dir}: cannot draw its plots ({type(exc).__name__}: {exc}); "
                            "results.json, results.csv and fidelity.md are rewritten") from None
    return folder


def csv_rows(documents: Sequence[Results]) -> list[dict[str, str]]:
    """One row per job x scheduler x mode (numbers with microsecond resolution; ``faults``: the run's
    faults in words, empty without any)."""
    rows = []
    for doc in documents:
        for run in doc.runs:
            for job_id, job in run.jobs.items():
                tard = run.job_tardiness_s(job_id)
                rows.append({
                    "scenario": doc.scenario, "mode": doc.mode, "scheduler": run.scheduler,
                    "repeat": "" if run.repeat is None else str(run.repeat),
                    "trusted": "" if run.trusted is None else str(run.trusted).lower(), "job": job_id,
                    "completion_s": f"{job.completion_s:.6f}", "slowdown": f"{job.slowdown:.6f}",
                    "tardiness_sum_s": f"{sum(tard):.6f}" if tard else "",
                    "tardiness_max_s": f"{max(tard):.6f}" if tard else "",
                    "objective_s": f"{run.objective_s:.6f}", "faults": describe_faults(run.faults),
                })
    return rows


def write_csv(path: str, documents: Sequence[Results]) -> None:
    write_text_atomic(path, _csv_text(documents))


def _csv_text(documents: Sequence[Results]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(csv_rows(documents))
    return buffer.getvalue()


def _folder(run_dir: str, others: Sequence[Results]) -> RunFolder:
    """The absolute paths of ``run_dir``'s documents and CSV (plots are added as they are drawn)."""
    path = os.path.abspath(run_dir)
    return RunFolder(path, os.path.join(path, RESULTS_FILE), os.path.join(path, CSV_FILE),
                     [os.path.join(path, companion_file(other.mode)) for other in others])


def _simulated(primary: Results, others: Sequence[Results]) -> Results | None:
    """The simulator's document when ``primary`` is an emulation that has one."""
    if primary.mode != "emulate":
        return None
    return next((doc for doc in others if doc.mode == "simulate"), None)


def _write_primary(folder: RunFolder, primary: Results, others: Sequence[Results],
                   status: dict[str, Any] | None) -> None:
    write_json_atomic(folder.results, _primary_data(primary, others, status))


def _primary_data(primary: Results, others: Sequence[Results],
                  status: dict[str, Any] | None) -> dict[str, Any]:
    """results.json's content: the primary document with its summary, fidelity and status."""
    data = primary.to_json_dict()
    simulated = _simulated(primary, others)
    if simulated is not None and primary.runs:
        data["summary"] = summarize(primary)
        data["fidelity"] = fidelity(primary, simulated)
    if status is not None:
        data["status"] = status
    return data


def _fidelity_doc(documents: Sequence[Results]) -> dict[str, Any] | None:
    """The emulation against its simulation (None without both, or without an emulated run)."""
    simulated = _simulated(documents[0], documents[1:])
    return fidelity(documents[0], simulated) if simulated is not None and documents[0].runs else None


def _render(folder: RunFolder, documents: Sequence[Results], plots: bool) -> None:
    write_csv(folder.csv, documents)
    doc = _fidelity_doc(documents)
    if doc is not None:
        write_text_atomic(os.path.join(folder.path, FIDELITY_TEXT), format_fidelity(doc))
    if plots:
        _plot(folder, documents, doc)


def _plot(folder: RunFolder, documents: Sequence[Results], doc: dict[str, Any] | None) -> None:
    """The timelines, the JCT plot and (with a fidelity section ``doc``) the fidelity plot."""
    from reports import plots as plot_mod  # matplotlib only when plots are wanted

    for results in documents:
        for scheduler, runs in runs_by_scheduler(results).items():
            run = representative(runs)
            if not run.tasks:  # a document without per-flow records (``echelon simulate --json``'s default)
                continue
            path = os.path.join(folder.path, timeline_file(results.mode, scheduler))
            which = f", repeat {run.repeat + 1} of {len(runs)} (median objective)" if len(runs) > 1 else ""
            title = f"{results.scenario}: {scheduler} ({results.mode}{which})"
            plot_mod.plot_timeline(run, path, title=title)
            folder.plots.append(path)
    path = os.path.join(folder.path, JCT_PLOT)
    plot_mod.plot_jct(documents, path)
    folder.plots.append(path)
    if doc is not None:
        path = os.path.join(folder.path, FIDELITY_PLOT)
        plot_mod.plot_fidelity(doc, path)
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
