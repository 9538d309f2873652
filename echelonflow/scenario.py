"""Scenario files: one topology, some jobs, the schedulers to compare (``docs/scenario-format.md``).

A scenario is named either by a path to a JSON file or by the name of a bundled example
(``echelonflow/examples/<name>.json``).  Loading checks everything up front (types, missing and
unknown fields, topology kind and parameters, generators, hosts, duplicate job ids, scheduler names)
and fails with one :class:`~echelonflow.errors.ScenarioError` line naming the file, the field and the
problem, so a run never starts on a half-valid scenario.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echelonflow.errors import ScenarioError, UserError
from echelonflow.faults import FaultEvent, check_no_partition, flow_pairs, read_events
from echelonflow.fields import (
    Field,
    FieldError,
    array,
    identifier,
    integer,
    mapping,
    nullable,
    number,
    one_of,
    ranged,
    read,
    show,
    text,
)
from echelonflow.fileio import path_kind, read_json
from echelonflow.limits import MAX_TASKS_PER_SCENARIO, RATE_BPS, SECONDS, SIZE_BYTES, WEIGHT
from echelonflow.model import ComputeTask, FlowColumns, Job
from echelonflow.topology import Topology, TopologyError
from echelonflow.topology_spec import TopologySpec

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"
DEFAULT_SCHEDULERS = ("fair", "coflow", "echelon")

_TOP_FIELDS = (
    Field("name", text(without="\n\r\0")),  # it heads tables and one-line messages
    Field("description", text(nonempty=False), default=""),
    Field("topology", required=True),
    Field("jobs", array(nonempty=True, of="of job entries"), required=True),
    Field("schedulers", array(text(), nonempty=True, of="of scheduler names"),
          default=list(DEFAULT_SCHEDULERS)),
    Field("events", default=[]),
)
_JOB_ID = identifier()
_WEIGHT = Field("weight", ranged(WEIGHT))
_TIMING = (Field("arrival_s", ranged(SECONDS, "a number of seconds")), _WEIGHT)
_GENERATOR_JOB_FIELDS = (Field("id", _JOB_ID, required=True), Field("generator", text(), required=True),
                         Field("hosts", required=True), Field("params", mapping(), default={})) + _TIMING
_TRACE_JOB_FIELDS = (Field("trace", required=True),)
_COFLOW_JOB_FIELDS = (Field("coflow_benchmark", required=True), Field("max_coflows", nullable(integer(1))),
                      Field("ms_per_second", number(0.0, above=True), default=1000.0),
                      Field("admission_epoch_ms", nullable(number(0.0, above=True))), _WEIGHT)
_CHAKRA_JOB_FIELDS = (Field("id", _JOB_ID, required=True), Field("chakra", required=True),
                      Field("hosts", required=True)) + _TIMING
_MULTI_TENANT_FIELDS = (Field("multi_tenant", required=True),)


@dataclass
class Scenario:
    """A loaded, validated scenario."""

    name: str
    topology: Topology
    jobs: list[Job]
    schedulers: list[str] = field(default_factory=lambda: list(DEFAULT_SCHEDULERS))
    source: str = ""
    description: str = ""
    #: Faults replayed during the run (links and switches going down and up), in time order.
    events: list[FaultEvent] = field(default_factory=list)


def bundled_names() -> list[str]:
    """Names of the scenarios shipped in ``echelonflow/examples`` (traces excluded)."""
    return sorted(p.stem for p in EXAMPLES_DIR.glob("*.json") if not p.stem.endswith("-trace"))


def resolve(name_or_path: str) -> Path:
    """The scenario file for a path or a bundled example name."""
    candidate = Path(name_or_path)
    kind = path_kind(candidate, "scenario file", ScenarioError)
    if candidate.suffix == ".json" or os.sep in name_or_path or kind == "file":
        if kind == "folder":
            raise ScenarioError(f"scenario file {name_or_path!r} is a directory")
        if kind is None:  # a device or a pipe goes on to the reader, which bounds what it reads
            raise ScenarioError(f"scenario file {name_or_path!r} does not exist")
        return candidate
    bundled = EXAMPLES_DIR / f"{name_or_path}.json"
    if name_or_path not in bundled_names() or not bundled.is_file():
        raise ScenarioError(
            f"no scenario named {name_or_path!r} (not a file, not bundled); "
            f"bundled: {', '.join(bundled_names())}"
        )
    return bundled


def load_scenario(name_or_path: str) -> Scenario:
    """Load and validate a scenario (see module docstring)."""
    path = resolve(name_or_path)
    return parse_scenario(read_json(path, "scenario", ScenarioError), path)


def parse_scenario(data: Any, path: Path) -> Scenario:
    """Validate a decoded scenario document; ``path`` names it in errors and anchors relative traces."""
    try:
        top = read(data, _TOP_FIELDS, what="a JSON object")
        topology = _topology(top["topology"])
        jobs = _jobs(top["jobs"], topology, path)
        schedulers = _schedulers(top["schedulers"])
        events = read_events(top["events"], topology)
        check_no_partition(topology, events, flow_pairs(jobs))
    except FieldError as err:
        raise ScenarioError(f"scenario {path}: {err}") from None
    return Scenario(top["name"] or path.stem, topology, jobs, schedulers, str(path), top["description"],
                    events)


def _topology(spec: Any) -> Topology:
    if not isinstance(spec, dict):
        example = '{"kind": "fattree", "k": 4, "rate_mbps": 10}'
        raise FieldError("topology", f"must be an object like {example}, got {show(spec)}")
    if "kind" not in spec:
        raise FieldError("topology.kind", "missing")
    kind = text()("topology.kind", spec["kind"])
    rates = [key for key in ("rate_mbps", "rate_bps") if key in spec]
    if len(rates) != 1:
        raise FieldError("topology.rate_mbps", "give exactly one of rate_mbps or rate_bps")
    scale = 1e6 if rates[0] == "rate_mbps" else 1.0
    rate = number(RATE_BPS.low / scale, RATE_BPS.high / scale)(f"topology.{rates[0]}", spec[rates[0]])
    rate_bps = rate * scale
    params = {k: v for k, v in spec.items() if k not in ("kind", "rate_mbps", "rate_bps")}
    try:
        return TopologySpec(kind, rate_bps, params).build()
    except TopologyError as exc:
        raise FieldError("topology", str(exc)) from None


def _jobs(entries: list[Any], topology: Topology, path: Path) -> list[Job]:
    known_hosts = topology.hosts
    jobs: list[Job] = []
    tasks = 0
    for index, entry in enumerate(entries):
        label, before = f"jobs[{index}]", len(jobs)
        if not isinstance(entry, dict):
            raise FieldError(label, f"must be an object, got {show(entry)}")
        if "trace" in entry:
            read(entry, _TRACE_JOB_FIELDS, label)
            jobs.extend(_trace_jobs(entry["trace"], known_hosts, path, f"{label}.trace"))
        elif "chakra" in entry:
            fields = read(entry, _CHAKRA_JOB_FIELDS, label)
            jobs.append(_timed(_chakra_job(fields, known_hosts, path, label), fields))
        elif "multi_tenant" in entry:
            read(entry, _MULTI_TENANT_FIELDS, label)
            jobs.extend(_multi_tenant_jobs(entry["multi_tenant"], topology, f"{label}.multi_tenant"))
        elif "coflow_benchmark" in entry:
            jobs.extend(_coflow_jobs(read(entry, _COFLOW_JOB_FIELDS, label), path, label))
        else:
            fields = read(entry, _GENERATOR_JOB_FIELDS, label)
            jobs.append(_timed(_generated_job(fields, known_hosts, label), fields))
        for job in jobs[before:]:
            _check_values(job, label)
        tasks += sum(len(job.tasks) for job in jobs[before:])
        if tasks > MAX_TASKS_PER_SCENARIO:  # each entry is bounded on its own (per job, per file size)
            raise FieldError(label, f"the jobs up to here have {tasks:,} tasks, more than the "
                                    f"{MAX_TASKS_PER_SCENARIO:,} allowed per scenario "
                                    "(echelonflow/limits.py)")
    seen: set[str] = set()
    host_set = set(known_hosts)
    for job in jobs:
        if job.job_id in seen:
            raise FieldError("jobs", f"duplicate job id {job.job_id!r}")
        seen.add(job.job_id)
        _check_hosts(job, host_set, topology)
    return jobs


def _check_values(job: Job, label: str) -> None:
    """Every number of ``job`` within the table of ranges (``echelonflow.limits``), whatever made it: a
    generator's parameters, a Chakra or Coflow-Benchmark file and its time scale (``ms_per_second``),
    a multi-tenant draw.  A trace's fields were checked as they were read; this catches what such
    sources compute (``1e300`` MB in a Coflow-Benchmark line, ``compute_s: 1e308``)."""
    where = f"{label}: job {job.job_id!r}"
    seconds, size = ranged(SECONDS, "a number of seconds"), ranged(SIZE_BYTES, "a whole number of bytes")
    _JOB_ID(f"{where}: id", job.job_id)
    seconds(f"{where}: arrival_s", job.arrival_s)
    ranged(WEIGHT)(f"{where}: weight", job.weight)
    if isinstance(job.tasks, FlowColumns):  # column by column: a task object per flow cost FB2010 1.5 s
        columns = job.tasks
        for task_id, size_bytes in zip(columns.ids, columns.sizes):
            at = f"{where}: task {task_id!r}"
            _JOB_ID(f"{at}: id", task_id)
            size(f"{at}: size_bytes", size_bytes)
        _JOB_ID(f"{where}: echelon", columns.echelon_id)
    else:
        for task in job.tasks.values():
            at = f"{where}: task {task.task_id!r}"
            _JOB_ID(f"{at}: id", task.task_id)
            if isinstance(task, ComputeTask):
                seconds(f"{at}: duration_s", task.duration_s)
            else:
                size(f"{at}: size_bytes", task.size_bytes)
                if task.echelon_id:
                    _JOB_ID(f"{at}: echelon", task.echelon_id)
    for flow_id, offset_s in job.explicit_offsets_s.items():
        seconds(f"{where}: offsets_s[{flow_id!r}]", offset_s)


def _generated_job(fields: dict[str, Any], known_hosts: list[str], label: str) -> Job:
    from echelonflow import workloads

    generator = one_of(*workloads.GENERATORS)(f"{label}.generator", fields["generator"])
    hosts = _placement(fields["hosts"], known_hosts, f"{label}.hosts")
    try:
        return workloads.generate(generator, fields["id"], hosts, dict(fields["params"]))
    except UserError as exc:
        raise FieldError(f"{label}.params", str(exc)) from None


def _placement(hosts: Any, known_hosts: list[str], field_name: str) -> list[str]:
    """A job's ``hosts``: a non-empty list of distinct topology hosts."""
    hosts = array(text(), nonempty=True, of="of host names")(field_name, hosts)
    missing = [h for h in hosts if h not in known_hosts]
    if missing:
        raise FieldError(field_name, f"host {missing[0]!r} is not in the topology (h1..h{len(known_hosts)})")
    if len(set(hosts)) != len(hosts):
        raise FieldError(field_name, "lists a host twice")
    return list(hosts)


def _timed(job: Job, fields: dict[str, Any]) -> Job:
    """The job with its entry's ``arrival_s`` and ``weight``, where given."""
    for name in ("arrival_s", "weight"):
        if fields.get(name) is not None:
            setattr(job, name, fields[name])
    return job


def _data_path(rel: Any, path: Path, label: str) -> Path:
    """A path named in a scenario: ``data:...`` is the project's data folder (echelonflow/data_files.py),
    any other relative path is relative to the scenario file."""
    from echelonflow.data_files import resolve_data

    rel = text()(label, rel)
    try:
        shared = resolve_data(rel)
    except UserError as exc:
        raise FieldError(label, str(exc)) from None
    if shared is not None:
        return shared
    return (path.parent / rel) if not os.path.isabs(rel) else Path(rel)


def _trace_jobs(rel: Any, known_hosts: list[str], path: Path, label: str) -> list[Job]:
    from echelonflow.trace import load_trace

    trace_path = _data_path(rel, path, label)
    kind = path_kind(trace_path, "trace file", lambda problem: FieldError(label, problem))
    if kind != "file":
        problem = "does not exist" if kind is None else f"is a {kind}, not a trace file"
        raise FieldError(label, f"trace file {str(trace_path)!r} {problem}")
    try:
        return list(load_trace(str(trace_path), known_hosts=known_hosts))
    except UserError as exc:
        raise FieldError(label, str(exc)) from None


def _chakra_job(fields: dict[str, Any], known_hosts: list[str], path: Path, label: str) -> Job:
    """``{"id": ..., "chakra": PATH, "hosts": [...]}``: a Chakra trace (file or per-rank folder)."""
    from echelonflow.importers.chakra import load_chakra

    hosts = _placement(fields["hosts"], known_hosts, f"{label}.hosts")
    trace_path = _data_path(fields["chakra"], path, f"{label}.chakra")
    try:
        return load_chakra(fields["id"], trace_path, hosts)
    except UserError as exc:
        raise FieldError(f"{label}.chakra", str(exc)) from None


def _coflow_jobs(fields: dict[str, Any], path: Path, label: str) -> list[Job]:
    """``{"coflow_benchmark": PATH[, "max_coflows": N][, "ms_per_second": MS][, "admission_epoch_ms": E]
    [, "weight": W]}``: one job per coflow (the two timing fields: CoflowSim's arrival model,
    ``importers/coflow_benchmark.py``)."""
    from echelonflow.importers.coflow_benchmark import load_coflow_benchmark

    trace_path = _data_path(fields["coflow_benchmark"], path, f"{label}.coflow_benchmark")
    limit = fields["max_coflows"]
    try:
        jobs = load_coflow_benchmark(trace_path, fields["ms_per_second"], fields["admission_epoch_ms"])
    except UserError as exc:
        raise FieldError(f"{label}.coflow_benchmark", str(exc)) from None
    jobs = jobs[:limit] if limit is not None else jobs
    return [_timed(job, fields) for job in jobs]


def _multi_tenant_jobs(spec: Any, topology: Topology, label: str) -> list[Job]:
    """``{"multi_tenant": {...}}``: a drawn multi-tenant DDL workload (``workloads/multitenant.py``)."""
    from echelonflow.workloads.multitenant import generate

    try:
        return generate(spec, topology).jobs
    except UserError as exc:
        raise FieldError(label, str(exc)) from None


def _check_hosts(job: Job, known: set, topology: Topology) -> None:
    if isinstance(job.tasks, FlowColumns):  # the hosts its columns number, each once
        columns = job.tasks
        used = set(columns.src).union(columns.dst)
        if all(columns.hosts[h] in known for h in used):
            return
    for task in job.tasks.values():
        for host in [task.host] if isinstance(task, ComputeTask) else [task.src, task.dst]:
            if host not in known:
                raise FieldError("jobs", f"job {job.job_id!r} task {task.task_id!r} uses host {host!r}, "
                                         f"not in {topology.name}")


def _schedulers(names: list[str]) -> list[str]:
    from echelonflow.schedulers import check_names

    try:
        check_names(names)
    except UserError as exc:
        raise FieldError("schedulers", str(exc)) from None
    if len(set(names)) != len(names):
        raise FieldError("schedulers", "lists a scheduler twice")
    return list(names)
