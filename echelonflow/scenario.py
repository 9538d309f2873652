"""Scenario files: one topology, some jobs, the schedulers to compare (``docs/scenario-format.md``).

A scenario is named either by a path to a JSON file or by the name of a bundled example
(``echelonflow/examples/<name>.json``).  Loading checks everything up front (types, missing and
unknown fields, topology kind and parameters, generators, hosts, duplicate job ids, scheduler names)
and fails with one :class:`~echelonflow.errors.ScenarioError` line naming the file, the field and the
problem, so a run never starts on a half-valid scenario.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echelonflow.errors import ScenarioError, UserError
from echelonflow.fileio import read_json
from echelonflow.model import ComputeTask, Job
from echelonflow.topology import Topology, TopologyError, build

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"
DEFAULT_SCHEDULERS = ("fair", "coflow", "echelon")

_TOP_FIELDS = {"name", "description", "topology", "jobs", "schedulers"}
_TIMING_FIELDS = {"arrival_s", "weight"}
_GENERATOR_JOB_FIELDS = {"id", "generator", "params", "hosts"} | _TIMING_FIELDS
_TRACE_JOB_FIELDS = {"trace"}
_COFLOW_JOB_FIELDS = {"coflow_benchmark", "max_coflows", "weight"}
_CHAKRA_JOB_FIELDS = {"id", "chakra", "hosts"} | _TIMING_FIELDS
_MULTI_TENANT_FIELDS = {"multi_tenant"}


@dataclass
class Scenario:
    """A loaded, validated scenario."""

    name: str
    topology: Topology
    jobs: list[Job]
    schedulers: list[str] = field(default_factory=lambda: list(DEFAULT_SCHEDULERS))
    source: str = ""
    description: str = ""


def bundled_names() -> list[str]:
    """Names of the scenarios shipped in ``echelonflow/examples`` (traces excluded)."""
    return sorted(p.stem for p in EXAMPLES_DIR.glob("*.json") if not p.stem.endswith("-trace"))


def resolve(name_or_path: str) -> Path:
    """The scenario file for a path or a bundled example name."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".json" or os.sep in name_or_path or candidate.is_file():
        if not candidate.is_file():
            raise ScenarioError(f"scenario file {name_or_path!r} does not exist")
        return candidate
    bundled = EXAMPLES_DIR / f"{name_or_path}.json"
    if not bundled.is_file() or name_or_path not in bundled_names():
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
    where = str(path)

    def fail(field_name: str, problem: str) -> ScenarioError:
        return ScenarioError(f"scenario {where}: field {field_name}: {problem}")

    if not isinstance(data, dict):
        raise ScenarioError(f"scenario {where}: must be a JSON object, got {type(data).__name__}")
    _no_unknown(data, _TOP_FIELDS, "(top level)", fail)
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise fail("name", f"must be a non-empty string, got {name!r}")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise fail("description", f"must be a string, got {description!r}")
    if "topology" not in data:
        raise fail("topology", "missing")
    topology = _topology(data["topology"], fail)
    if "jobs" not in data:
        raise fail("jobs", "missing")
    jobs = _jobs(data["jobs"], topology, path, fail)
    schedulers = _schedulers(data.get("schedulers", list(DEFAULT_SCHEDULERS)), fail)
    return Scenario(name, topology, jobs, schedulers, where, description)


def _no_unknown(obj: dict[str, Any], allowed: set, label: str, fail: Any) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise fail(label, f"unknown field {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")


def _topology(spec: Any, fail: Any) -> Topology:
    if not isinstance(spec, dict):
        example = '{"kind": "fattree", "k": 4, "rate_mbps": 10}'
        raise fail("topology", f"must be an object like {example}, got {spec!r}")
    if "kind" not in spec:
        raise fail("topology.kind", "missing")
    kind = spec["kind"]
    if not isinstance(kind, str):
        raise fail("topology.kind", f"must be a string, got {kind!r}")
    rates = [key for key in ("rate_mbps", "rate_bps") if key in spec]
    if len(rates) != 1:
        raise fail("topology.rate_mbps", "give exactly one of rate_mbps or rate_bps")
    rate = spec[rates[0]]
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0:
        raise fail(f"topology.{rates[0]}", f"must be a positive number, got {rate!r}")
    rate_bps = float(rate) * (1e6 if rates[0] == "rate_mbps" else 1.0)
    params = {k: v for k, v in spec.items() if k not in ("kind", "rate_mbps", "rate_bps")}
    try:
        return build(kind, rate_bps, **params)
    except TopologyError as exc:
        raise fail("topology", str(exc)) from None


def _jobs(entries: Any, topology: Topology, path: Path, fail: Any) -> list[Job]:
    if not isinstance(entries, list) or not entries:
        raise fail("jobs", f"must be a non-empty list, got {entries!r}")
    known_hosts = topology.hosts
    jobs: list[Job] = []
    for index, entry in enumerate(entries):
        label = f"jobs[{index}]"
        if not isinstance(entry, dict):
            raise fail(label, f"must be an object, got {entry!r}")
        if "trace" in entry:
            _no_unknown(entry, _TRACE_JOB_FIELDS, label, fail)
            jobs.extend(_trace_jobs(entry["trace"], known_hosts, path, f"{label}.trace", fail))
        elif "chakra" in entry:
            _no_unknown(entry, _CHAKRA_JOB_FIELDS, label, fail)
            job = _chakra_job(entry, known_hosts, path, label, fail)
            _set_timing(job, entry, label, fail)
            jobs.append(job)
        elif "multi_tenant" in entry:
            _no_unknown(entry, _MULTI_TENANT_FIELDS, label, fail)
            jobs.extend(_multi_tenant_jobs(entry["multi_tenant"], topology, f"{label}.multi_tenant", fail))
        elif "coflow_benchmark" in entry:
            _no_unknown(entry, _COFLOW_JOB_FIELDS, label, fail)
            jobs.extend(_coflow_jobs(entry, path, label, fail))
        else:
            _no_unknown(entry, _GENERATOR_JOB_FIELDS, label, fail)
            job = _generated_job(entry, known_hosts, label, fail)
            _set_timing(job, entry, label, fail)
            jobs.append(job)
    seen: set[str] = set()
    host_set = set(known_hosts)
    for job in jobs:
        if job.job_id in seen:
            raise fail("jobs", f"duplicate job id {job.job_id!r}")
        seen.add(job.job_id)
        _check_hosts(job, host_set, topology, fail)
    return jobs


def _generated_job(entry: dict[str, Any], known_hosts: list[str], label: str, fail: Any) -> Job:
    from echelonflow import workloads

    for key in ("id", "generator", "hosts"):
        if key not in entry:
            raise fail(f"{label}.{key}", "missing (a job needs id, generator, hosts[, params]; or trace)")
    job_id, generator, hosts = entry["id"], entry["generator"], entry["hosts"]
    params = entry.get("params", {})
    if not isinstance(job_id, str) or not job_id or "/" in job_id:
        raise fail(f"{label}.id", f"must be a non-empty string without '/', got {job_id!r}")
    if not isinstance(generator, str):
        raise fail(f"{label}.generator", f"must be a string, got {generator!r}")
    if generator not in workloads.GENERATORS:
        valid = ", ".join(workloads.GENERATORS)
        raise fail(f"{label}.generator", f"unknown generator {generator!r}; choose one of {valid}")
    hosts = _placement(hosts, known_hosts, f"{label}.hosts", fail)
    if not isinstance(params, dict):
        raise fail(f"{label}.params", f"must be an object, got {params!r}")
    try:
        return workloads.generate(generator, job_id, list(hosts), dict(params))
    except UserError as exc:
        raise fail(f"{label}.params", str(exc)) from None


def _placement(hosts: Any, known_hosts: list[str], field_name: str, fail: Any) -> list[str]:
    """A job's ``hosts``: a non-empty list of distinct topology hosts."""
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise fail(field_name, f"must be a non-empty list of host names, got {hosts!r}")
    missing = [h for h in hosts if h not in known_hosts]
    if missing:
        raise fail(field_name, f"host {missing[0]!r} is not in the topology (h1..h{len(known_hosts)})")
    if len(set(hosts)) != len(hosts):
        raise fail(field_name, "lists a host twice")
    return list(hosts)


def _set_timing(job: Job, entry: dict[str, Any], label: str, fail: Any) -> None:
    """A job entry's ``arrival_s`` (>= 0) and ``weight`` (> 0), when given."""
    if "arrival_s" in entry:
        job.arrival_s = _number(entry["arrival_s"], f"{label}.arrival_s", fail, positive=False)
    if "weight" in entry:
        job.weight = _number(entry["weight"], f"{label}.weight", fail, positive=True)


def _number(value: Any, field_name: str, fail: Any, positive: bool) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        raise fail(field_name, f"must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def _data_path(rel: Any, path: Path, label: str, fail: Any) -> Path:
    """A path named in a scenario: ``../shared/data/...`` is the shared data folder (next to the
    repository), any other relative path is relative to the scenario file."""
    from echelonflow.shared_data import resolve_shared

    if not isinstance(rel, str) or not rel:
        raise fail(label, f"must be a path string, got {rel!r}")
    try:
        shared = resolve_shared(rel)
    except UserError as exc:
        raise fail(label, str(exc)) from None
    if shared is not None:
        return shared
    return (path.parent / rel) if not os.path.isabs(rel) else Path(rel)


def _trace_jobs(rel: Any, known_hosts: list[str], path: Path, label: str, fail: Any) -> list[Job]:
    from echelonflow.trace import load_trace

    trace_path = _data_path(rel, path, label, fail)
    if not trace_path.is_file():
        raise fail(label, f"trace file {str(trace_path)!r} does not exist")
    try:
        return list(load_trace(str(trace_path), known_hosts=known_hosts))
    except UserError as exc:
        raise fail(label, str(exc)) from None


def _chakra_job(entry: dict[str, Any], known_hosts: list[str], path: Path, label: str, fail: Any) -> Job:
    """``{"id": ..., "chakra": PATH, "hosts": [...]}``: a Chakra trace (file or per-rank folder)."""
    from echelonflow.importers.chakra import load_chakra

    job_id = entry.get("id")
    if not isinstance(job_id, str) or not job_id or "/" in job_id:
        raise fail(f"{label}.id", f"must be a non-empty string without '/', got {job_id!r}")
    hosts = _placement(entry.get("hosts"), known_hosts, f"{label}.hosts", fail)
    trace_path = _data_path(entry["chakra"], path, f"{label}.chakra", fail)
    try:
        return load_chakra(job_id, trace_path, hosts)
    except UserError as exc:
        raise fail(f"{label}.chakra", str(exc)) from None


def _coflow_jobs(entry: dict[str, Any], path: Path, label: str, fail: Any) -> list[Job]:
    """``{"coflow_benchmark": PATH[, "max_coflows": N][, "weight": W]}``: one job per coflow."""
    from echelonflow.importers.coflow_benchmark import load_coflow_benchmark

    trace_path = _data_path(entry["coflow_benchmark"], path, f"{label}.coflow_benchmark", fail)
    limit = entry.get("max_coflows")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise fail(f"{label}.max_coflows", f"must be a positive whole number, got {limit!r}")
    try:
        jobs = load_coflow_benchmark(trace_path)
    except UserError as exc:
        raise fail(f"{label}.coflow_benchmark", str(exc)) from None
    jobs = jobs[:limit] if limit is not None else jobs
    for job in jobs:
        _set_timing(job, {k: v for k, v in entry.items() if k == "weight"}, label, fail)
    return jobs


def _multi_tenant_jobs(spec: Any, topology: Topology, label: str, fail: Any) -> list[Job]:
    """``{"multi_tenant": {...}}``: a drawn multi-tenant DDL workload (``workloads/multitenant.py``)."""
    from echelonflow.workloads.multitenant import generate

    try:
        return generate(spec, topology).jobs
    except UserError as exc:
        raise fail(label, str(exc)) from None


def _check_hosts(job: Job, known: set, topology: Topology, fail: Any) -> None:
    for task in job.tasks.values():
        for host in [task.host] if isinstance(task, ComputeTask) else [task.src, task.dst]:
            if host not in known:
                problem = (
                    f"job {job.job_id!r} task {task.task_id!r} uses host {host!r}, not in {topology.name}"
                )
                raise fail("jobs", problem)


def _schedulers(names: Any, fail: Any) -> list[str]:
    from echelonflow.schedulers import check_names

    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise fail("schedulers", f"must be a non-empty list of scheduler names, got {names!r}")
    try:
        check_names(names)
    except UserError as exc:
        raise fail("schedulers", str(exc)) from None
    if len(set(names)) != len(names):
        raise fail("schedulers", "lists a scheduler twice")
    return list(names)
