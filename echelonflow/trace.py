"""JSON job traces: load (strictly checked) and save; the format is documented in docs/trace-format.md.

A trace is the hand-written or saved form of one or more :class:`~echelonflow.model.Job` DAGs.  Loading
checks everything before returning anything, and every problem is a
:class:`~echelonflow.errors.TraceError` whose one-line message names the file, the job, the task and
what is wrong, so a user can fix the file without reading code.  ``job_to_trace`` writes the same
format, so generated jobs can be saved and loaded back unchanged.

Pure and Python 3.9 compatible.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from echelonflow.echelon import KINDS, check_job
from echelonflow.errors import TraceError
from echelonflow.fileio import read_json
from echelonflow.model import (
    ComputeTask,
    FlowTask,
    Job,
    Task,
    echelon_members,
)

TOP_FIELDS = {"jobs": True, "description": False}  # field -> required
JOB_FIELDS = {"id": True, "tasks": True, "echelons": False, "description": False, "arrival_s": False,
              "weight": False}
COMPUTE_FIELDS = {"id": True, "type": True, "host": True, "duration_s": True, "deps": False, "label": False}
FLOW_FIELDS = {
    "id": True,
    "type": True,
    "src": True,
    "dst": True,
    "size_bytes": True,
    "deps": False,
    "echelon": False,
    "label": False,
}
ECHELON_FIELDS = {"kind": False, "offsets_s": False}
TASK_TYPES = {"compute": COMPUTE_FIELDS, "flow": FLOW_FIELDS}


def load_trace(path: str | Path, known_hosts: Collection[str] | None = None) -> list[Job]:
    """Read and check a trace file; ``known_hosts`` (if given) is every host name the topology has."""
    return parse_trace(read_json(path, "trace", TraceError), str(path), known_hosts)


def parse_trace(data: Any, source: str, known_hosts: Collection[str] | None = None) -> list[Job]:
    """Check already-decoded trace data; ``source`` names it in messages (a path, or e.g. '<scenario>')."""
    if not isinstance(data, Mapping):
        raise TraceError(f"{source}: a trace must be a JSON object with a 'jobs' list, got {_kind(data)}")
    _check_fields(data, TOP_FIELDS, f"{source}: trace")
    jobs_data = data["jobs"]
    if not isinstance(jobs_data, list) or not jobs_data:
        raise TraceError(f"{source}: 'jobs' must be a non-empty list, got {_kind(jobs_data)}")
    hosts = set(known_hosts) if known_hosts is not None else None
    jobs: list[Job] = []
    seen: set[str] = set()
    for index, job_data in enumerate(jobs_data):
        job = _parse_job(job_data, f"{source}: jobs[{index}]", source, hosts)
        if job.job_id in seen:
            raise TraceError(f"{source}: job {job.job_id!r}: duplicate job id")
        seen.add(job.job_id)
        jobs.append(job)
    return jobs


def job_to_trace(job: Job) -> dict[str, Any]:
    """One job in the trace format (``{"jobs": [job_to_trace(j), ...]}`` is a whole trace)."""
    tasks: list[dict[str, Any]] = []
    for task in job.tasks.values():
        if isinstance(task, ComputeTask):
            entry: dict[str, Any] = {"id": task.task_id, "type": "compute", "host": task.host}
            entry["duration_s"] = task.duration_s
        else:
            entry = {"id": task.task_id, "type": "flow", "src": task.src, "dst": task.dst}
            entry["size_bytes"] = task.size_bytes
            if task.echelon_id:
                entry["echelon"] = task.echelon_id
        entry["deps"] = list(task.deps)
        if task.label:
            entry["label"] = task.label
        tasks.append(entry)
    echelons: dict[str, dict[str, Any]] = {}
    for echelon_id, kind in job.echelon_kinds.items():
        echelons.setdefault(echelon_id, {})["kind"] = kind
    for flow in job.flows:
        if flow.task_id in job.explicit_offsets_s:
            group = echelons.setdefault(flow.echelon_id or flow.task_id, {})
            group.setdefault("offsets_s", {})[flow.task_id] = job.explicit_offsets_s[flow.task_id]
    out: dict[str, Any] = {"id": job.job_id, "tasks": tasks}
    if job.arrival_s:
        out["arrival_s"] = job.arrival_s
    if job.weight != 1.0:
        out["weight"] = job.weight
    if echelons:
        out["echelons"] = echelons
    return out


def jobs_to_trace(jobs: Iterable[Job]) -> dict[str, Any]:
    """A whole trace document for ``jobs``."""
    return {"jobs": [job_to_trace(job) for job in jobs]}


def save_trace(path: str | Path, jobs: Iterable[Job]) -> None:
    """Write ``jobs`` as a trace file (indented JSON, loadable by :func:`load_trace`)."""
    Path(path).write_text(json.dumps(jobs_to_trace(jobs), indent=1) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------- jobs


def _parse_job(data: Any, where: str, source: str, hosts: set[str] | None) -> Job:
    if not isinstance(data, Mapping):
        raise TraceError(f"{where}: a job must be an object, got {_kind(data)}")
    if "id" not in data:
        raise TraceError(f"{where}: missing field 'id'")
    job_id = _identifier(data["id"], f"{where}: field 'id'")
    if "/" in job_id:
        raise TraceError(f"{where}: job id {job_id!r} must not contain '/' (it separates job and task ids)")
    where = f"{source}: job {job_id!r}"
    _check_fields(data, JOB_FIELDS, where)
    tasks_data = data["tasks"]
    if not isinstance(tasks_data, list) or not tasks_data:
        raise TraceError(f"{where}: 'tasks' must be a non-empty list, got {_kind(tasks_data)}")
    job = Job(job_id)
    if "arrival_s" in data:
        job.arrival_s = _number(data["arrival_s"], f"{where}: field 'arrival_s'")
    if "weight" in data:
        job.weight = _weight(data["weight"], f"{where}: field 'weight'")
    for index, task_data in enumerate(tasks_data):
        task = _parse_task(task_data, where, index, hosts)
        if task.task_id in job.tasks:
            raise TraceError(f"{where}: task {task.task_id!r}: duplicate task id")
        job.add(task)
    check_job(job, where, TraceError)
    _parse_echelons(data.get("echelons", {}), job, where)
    return job


def _parse_task(data: Any, where: str, index: int, hosts: set[str] | None) -> Task:
    at = f"{where}: tasks[{index}]"
    if not isinstance(data, Mapping):
        raise TraceError(f"{at}: a task must be an object, got {_kind(data)}")
    if "id" not in data:
        raise TraceError(f"{at}: missing field 'id'")
    task_id = _identifier(data["id"], f"{at}: field 'id'")
    at = f"{where}: task {task_id!r}"
    if "type" not in data:
        raise TraceError(f"{at}: missing field 'type' (one of: {', '.join(TASK_TYPES)})")
    kind = data["type"]
    if not isinstance(kind, str) or kind not in TASK_TYPES:
        raise TraceError(f"{at}: unknown task type {kind!r} (valid: {', '.join(TASK_TYPES)})")
    _check_fields(data, TASK_TYPES[kind], at)
    deps = _deps(data.get("deps", []), at)
    label = data.get("label", "")
    if not isinstance(label, str):
        raise TraceError(f"{at}: field 'label' must be a string, got {_kind(label)}")
    if kind == "compute":
        host = _host(data["host"], f"{at}: field 'host'", hosts)
        duration_s = _number(data["duration_s"], f"{at}: field 'duration_s'")
        return ComputeTask(task_id, host, duration_s, deps, label)
    src = _host(data["src"], f"{at}: field 'src'", hosts)
    dst = _host(data["dst"], f"{at}: field 'dst'", hosts)
    if src == dst:
        raise TraceError(f"{at}: src and dst are both {src!r} (a flow must cross the network)")
    size_bytes = _size(data["size_bytes"], f"{at}: field 'size_bytes'")
    echelon = data.get("echelon", "")
    if "echelon" in data:
        echelon = _identifier(echelon, f"{at}: field 'echelon'")
    return FlowTask(task_id, src, dst, size_bytes, deps, echelon, label)


def _parse_echelons(data: Any, job: Job, where: str) -> None:
    if not isinstance(data, Mapping):
        raise TraceError(f"{where}: 'echelons' must be an object (echelon id -> settings), got {_kind(data)}")
    members = echelon_members(job)
    for echelon_id, settings in data.items():
        at = f"{where}: echelon {echelon_id!r}"
        if echelon_id not in members:
            raise TraceError(f"{at}: no flow belongs to it (flows name it with 'echelon')")
        if not isinstance(settings, Mapping):
            raise TraceError(f"{at}: settings must be an object, got {_kind(settings)}")
        _check_fields(settings, ECHELON_FIELDS, at)
        kind = settings.get("kind")
        if kind is not None and kind not in KINDS:
            raise TraceError(f"{at}: unknown kind {kind!r} (valid: {', '.join(KINDS)})")
        offsets = settings.get("offsets_s", {})
        if not isinstance(offsets, Mapping):
            raise TraceError(
                f"{at}: 'offsets_s' must be an object (flow id -> seconds), got {_kind(offsets)}"
            )
        for flow_id, value in offsets.items():
            if flow_id not in members[echelon_id]:
                raise TraceError(f"{at}: offsets_s names {flow_id!r}, which is not a flow of this echelon")
            seconds = _number(value, f"{at}: offsets_s[{flow_id!r}]")
            if kind == "coflow" and seconds != 0:
                raise TraceError(
                    f"{at}: a coflow's offsets are all 0, but offsets_s[{flow_id!r}] is {value!r}"
                )
            job.explicit_offsets_s[flow_id] = seconds
        missing = [fid for fid in members[echelon_id] if offsets and fid not in offsets]
        if missing:
            raise TraceError(f"{at}: offsets_s must give every flow of the echelon; missing {missing[0]!r}")
        if kind is not None:
            job.echelon_kinds[echelon_id] = kind


# -------------------------------------------------------------------------------------------- values


def _check_fields(data: Mapping, fields: Mapping[str, bool], where: str) -> None:
    for name in data:
        if name not in fields:
            raise TraceError(f"{where}: unknown field {name!r} (valid: {', '.join(fields)})")
    for name, required in fields.items():
        if required and name not in data:
            raise TraceError(f"{where}: missing field {name!r}")


def _identifier(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TraceError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _host(value: Any, where: str, hosts: set[str] | None) -> str:
    name = _identifier(value, where)
    if hosts is not None and name not in hosts:
        raise TraceError(f"{where}: unknown host {name!r} (the topology has {_few(sorted(hosts))})")
    return name


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceError(f"{where} must be a number of seconds, got {value!r}")
    if not math.isfinite(value):
        raise TraceError(f"{where} must be finite, got {value!r}")
    if value < 0:
        raise TraceError(f"{where} must not be negative, got {value!r}")
    return float(value)


def _weight(value: Any, where: str) -> float:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise TraceError(f"{where} must be a finite number > 0, got {value!r}")
    return float(value)


def _size(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceError(f"{where} must be a whole number of bytes, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise TraceError(f"{where} must be finite, got {value!r}")
    if value < 0:
        raise TraceError(f"{where} must not be negative, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise TraceError(f"{where} must be a whole number of bytes, got {value!r}")
    if value == 0:
        raise TraceError(f"{where} must be at least 1 byte, got {value!r}")
    return int(value)


def _deps(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TraceError(f"{where}: field 'deps' must be a list of task ids, got {_kind(value)}")
    deps = [_identifier(dep, f"{where}: field 'deps' entry") for dep in value]
    for dep in deps:
        if deps.count(dep) > 1:
            raise TraceError(f"{where}: field 'deps' lists {dep!r} twice")
    return tuple(deps)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    for cls, name in names.items():
        if isinstance(value, cls):
            return name
    return "a number" if isinstance(value, (int, float)) else type(value).__name__


def _few(names: list[str], limit: int = 8) -> str:
    return ", ".join(names[:limit]) + (f", ... ({len(names)} in all)" if len(names) > limit else "")
