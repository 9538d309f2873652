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
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from echelonflow.echelon import KINDS, check_job
from echelonflow.errors import TraceError
from echelonflow.fields import (
    Field,
    FieldError,
    array,
    identifier,
    mapping,
    nullable,
    one_of,
    ranged,
    read,
    show,
    text,
)
from echelonflow.fileio import read_json
from echelonflow.limits import SECONDS, SIZE_BYTES, WEIGHT
from echelonflow.model import (
    ComputeTask,
    FlowTask,
    Job,
    Task,
    echelon_members,
)

#: Job, task and EchelonFlow ids (and host names) follow the controller's id rule: an emulated trace
#: becomes registry records with these ids, so a trace the API would refuse is refused here.
_ID = identifier()
_SECONDS = ranged(SECONDS, "a number of seconds")
_DEPS = Field("deps", array(_ID, of="of task ids"), default=[])
_LABEL = Field("label", text(nonempty=False), default="")
TOP_FIELDS = (Field("jobs", array(nonempty=True, of="of jobs"), required=True),
              Field("description", text(nonempty=False)))
JOB_FIELDS = (Field("id", _ID, required=True),
              Field("tasks", array(nonempty=True, of="of tasks"), required=True),
              Field("echelons", mapping(what="an object (echelon id -> settings)"), default={}),
              Field("description", text(nonempty=False)),
              Field("arrival_s", _SECONDS, default=0.0),
              Field("weight", ranged(WEIGHT), default=1.0))
COMPUTE_FIELDS = (Field("id", _ID, required=True), Field("type", required=True),
                  Field("host", _ID, required=True), Field("duration_s", _SECONDS, required=True),
                  _DEPS, _LABEL)
FLOW_FIELDS = (Field("id", _ID, required=True), Field("type", required=True),
               Field("src", _ID, required=True), Field("dst", _ID, required=True),
               Field("size_bytes", ranged(SIZE_BYTES, "a whole number of bytes"), required=True),
               _DEPS, Field("echelon", _ID, default=""), _LABEL)
ECHELON_FIELDS = (Field("kind", nullable(one_of(*KINDS))),
                  Field("offsets_s", mapping(item=_SECONDS, what="an object (flow id -> seconds)"),
                        default={}))
TASK_TYPES = {"compute": COMPUTE_FIELDS, "flow": FLOW_FIELDS}


def load_trace(path: str | Path, known_hosts: Collection[str] | None = None) -> list[Job]:
    """Read and check a trace file; ``known_hosts`` (if given) is every host name the topology has."""
    return parse_trace(read_json(path, "trace", TraceError), str(path), known_hosts)


def parse_trace(data: Any, source: str, known_hosts: Collection[str] | None = None) -> list[Job]:
    """Check already-decoded trace data; ``source`` names it in messages (a path, or e.g. '<scenario>')."""
    top = _read(data, TOP_FIELDS, source, "an object with a 'jobs' list")
    hosts = set(known_hosts) if known_hosts is not None else None
    jobs: list[Job] = []
    seen: set[str] = set()
    for index, job_data in enumerate(top["jobs"]):
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
    if isinstance(data, Mapping) and "id" in data:
        _value(_ID, "id", data["id"], where)
        where = f"{source}: job {data['id']!r}"
    fields = _read(data, JOB_FIELDS, where, "a job object")
    job = Job(fields["id"])
    job.arrival_s, job.weight = fields["arrival_s"], fields["weight"]
    for index, task_data in enumerate(fields["tasks"]):
        task = _parse_task(task_data, where, index, hosts)
        if task.task_id in job.tasks:
            raise TraceError(f"{where}: task {task.task_id!r}: duplicate task id")
        job.add(task)
    check_job(job, where, TraceError)
    _parse_echelons(fields["echelons"], job, where)
    return job


def _parse_task(data: Any, where: str, index: int, hosts: set[str] | None) -> Task:
    at = f"{where}: tasks[{index}]"
    if isinstance(data, Mapping) and "id" in data:
        at = f"{where}: task {_value(_ID, 'id', data['id'], at)!r}"
    if not isinstance(data, Mapping):
        raise TraceError(f"{at}: must be a task object, got {show(data)}")
    if "type" not in data:
        raise TraceError(f"{at}: type: missing (one of: {', '.join(TASK_TYPES)})")
    _value(one_of(*TASK_TYPES), "type", data["type"], at)
    fields = _read(data, TASK_TYPES[data["type"]], at, "a task object")
    deps = fields["deps"]
    twice = [dep for dep in deps if deps.count(dep) > 1]
    if twice:
        raise TraceError(f"{at}: deps: lists {twice[0]!r} twice")
    if data["type"] == "compute":
        host = _host(fields["host"], "host", at, hosts)
        return ComputeTask(fields["id"], host, fields["duration_s"], tuple(deps), fields["label"])
    src = _host(fields["src"], "src", at, hosts)
    dst = _host(fields["dst"], "dst", at, hosts)
    if src == dst:
        raise TraceError(f"{at}: src and dst are both {src!r} (a flow must cross the network)")
    return FlowTask(fields["id"], src, dst, fields["size_bytes"], tuple(deps), fields["echelon"],
                    fields["label"])


def _parse_echelons(data: Mapping[str, Any], job: Job, where: str) -> None:
    members = echelon_members(job)
    for echelon_id, settings in data.items():
        at = f"{where}: echelon {echelon_id!r}"
        if echelon_id not in members:
            raise TraceError(f"{at}: no flow belongs to it (flows name it with 'echelon')")
        fields = _read(settings, ECHELON_FIELDS, at, "a settings object")
        kind, offsets = fields["kind"], fields["offsets_s"]
        for flow_id, seconds in offsets.items():
            if flow_id not in members[echelon_id]:
                raise TraceError(f"{at}: offsets_s names {flow_id!r}, which is not a flow of this echelon")
            if kind == "coflow" and seconds != 0:
                raise TraceError(
                    f"{at}: a coflow's offsets are all 0, but offsets_s[{flow_id!r}] is {seconds!r}"
                )
            job.explicit_offsets_s[flow_id] = seconds
        missing = [fid for fid in members[echelon_id] if offsets and fid not in offsets]
        if missing:
            raise TraceError(f"{at}: offsets_s must give every flow of the echelon; missing {missing[0]!r}")
        if kind is not None:
            job.echelon_kinds[echelon_id] = kind


# -------------------------------------------------------------------------------------------- values


def _read(data: Any, declared: Any, where: str, what: str) -> dict[str, Any]:
    """``read`` (the one field checker) with ``where`` (file, job, task) in front of its error."""
    try:
        return read(data, declared, what=what)
    except FieldError as err:
        raise TraceError(f"{where}: {err}") from None


def _value(check: Any, field: str, value: Any, where: str) -> Any:
    try:
        return check(field, value)
    except FieldError as err:
        raise TraceError(f"{where}: {err}") from None


def _host(name: str, field: str, where: str, hosts: set[str] | None) -> str:
    if hosts is not None and name not in hosts:
        raise TraceError(f"{where}: {field}: unknown host {name!r} (the topology has {_few(sorted(hosts))})")
    return name


def _few(names: list[str], limit: int = 8) -> str:
    return ", ".join(names[:limit]) + (f", ... ({len(names)} in all)" if len(names) > limit else "")
