"""The run-spec: the one JSON file a traffic agent is started with.

The orchestrator (``echelon emulate`` or a test) writes one spec per host on the shared file system and
starts ``python -m traffic.agent SPEC`` inside that host.  Everything the agent needs is in the file, so an
agent never reads scenario files or talks to the orchestrator while it runs:

* ``host``: which host this agent is; ``hosts_ip``: host -> IP address of every agent (data plane);
* ``jobs``: every job of the run (all agents get all jobs: each executes only its own part, but needs
  the whole DAG to know where a completion event must be sent);
* ``t0_s``: the epoch time (``time.time()``) all task times are relative to; one machine, one clock.
  0 (what the orchestrator writes): the agent gets t0 in a ``start`` word on its control socket, sent
  once every agent is ready, so a slow interpreter start-up on a loaded machine never makes one late;
* ``data_port``: the TCP port every agent listens on for flows;
* ``control_dir``: where each agent's Unix control socket lives (``<control_dir>/<host>.sock``);
  completion events travel there, outside the shaped fabric;
* ``output_path``: where the agent writes its result JSON (atomically);
* ``registry``: optional ``{"socket_path", "token_file"}`` of the controller's registry API;
* timeouts: ``connect_timeout_s`` (a peer that never accepts), ``confirm_timeout_s`` (a receiver that
  never confirms, also the per-socket inactivity limit), ``run_timeout_s`` (the whole run, from t0).

Jobs travel in the trace format (``echelonflow.trace``: ``job_to_trace`` / ``parse_trace``, documented in
docs/trace-format.md), so the spec is self-contained and there is one job serialisation in the project.
The fields are declared once, each check beside its dataclass field (``SPEC_FIELDS`` and
``REGISTRY_FIELDS`` are made from :class:`RunSpec` and :class:`RegistrySettings`; ``CHANNEL_FIELDS``),
and read by the project's one field checker (``echelonflow.fields``), like API bodies and scenario,
trace and topology files:
:func:`load_runspec` checks the whole spec before anything uses it and raises :class:`SpecError`, one line
``<spec path>: <field>: <problem>``, so an agent with a bad spec exits at once instead of failing mid-run.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
from dataclasses import dataclass, field
from typing import Any

from echelonflow.errors import TraceError, UserError
from echelonflow.fields import (
    Check,
    Field,
    FieldError,
    anything,
    array,
    boolean,
    integer,
    mapping,
    nullable,
    number,
    read,
    record,
    show,
    text,
)
from echelonflow.fileio import read_json, write_json_atomic
from echelonflow.model import Job
from echelonflow.topology_spec import TopologySpecError, topology_from_json
from echelonflow.trace import job_to_trace, parse_trace


class SpecError(UserError):
    """A run-spec that an agent cannot execute (names the field and the problem)."""


#: The TCP port every agent listens on for flows (inside its own host's network namespace).
DEFAULT_DATA_PORT = 46000
_SECONDS = number(0.0, above=True, what="a number of seconds")


def _spec(check: Check | None = None, required: bool = False, key: str = "") -> dict[str, Any]:
    """A run-spec field's declaration, kept beside the field itself (:func:`declared_fields` reads it):
    its check, whether the file must have it, and its key in the file when that is not its name."""
    return {"check": check or anything(), "required": required, "key": key}


def declared_fields(cls: type) -> tuple[Field, ...]:
    """The fields of a spec dataclass as the field checker reads them (``echelonflow.fields``): their
    file keys, checks, and whether required, with the dataclass's own defaults (declared once)."""
    declared = []
    for spec in dataclasses.fields(cls):
        default = None if spec.default is dataclasses.MISSING else spec.default
        declared.append(Field(spec.metadata["key"] or spec.name, spec.metadata["check"],
                              required=spec.metadata["required"], default=default))
    return tuple(declared)


def control_socket_path(control_dir: str, host: str) -> str:
    """Path of ``host``'s control socket (short names: AF_UNIX paths are limited to 107 bytes)."""
    return os.path.join(control_dir, f"{host}.sock")


# ------------------------------------------------------------------------------------- job serialisation
def jobs_to_json(jobs: list[Job]) -> list[dict[str, Any]]:
    """Jobs in the trace format (``echelonflow.trace``), tasks in declaration order (it breaks ties)."""
    return [job_to_trace(job) for job in jobs]


def jobs_from_json(raw_jobs: Any, source: str, hosts: list[str]) -> list[Job]:
    """Jobs of a spec, checked by the trace parser (hosts must have addresses); :class:`SpecError` if bad."""
    try:
        return parse_trace({"jobs": raw_jobs}, f"{source}: jobs", known_hosts=hosts)
    except TraceError as exc:
        raise SpecError(str(exc)) from None


def check_serialisable(jobs: list[Job]) -> None:
    """Raise :class:`SpecError` if a job cannot travel in a spec (the trace format rejects it, e.g. a
    zero-byte flow), so the orchestrator fails before starting anything instead of every agent failing."""
    hosts = sorted({host for job in jobs for host in job.hosts})
    jobs_from_json(json.loads(json.dumps(jobs_to_json(jobs))), "run-spec", hosts)


@dataclass
class RegistrySettings:
    """How an agent reaches the controller's registry (HTTP over a Unix socket, token-authenticated)."""

    socket_path: str = field(metadata=_spec(text(), required=True))
    token_file: str = field(metadata=_spec(text(), required=True))
    poll_interval_s: float = field(default=0.1, metadata=_spec(_SECONDS))
    #: prepended to job ids in the registry (one controller, same job run twice)
    job_prefix: str = field(default="", metadata=_spec(text(nonempty=False, without="/")))
    #: apply allocated rates as socket pacing (only under schedulers that enforce)
    pace: bool = field(default=True, metadata=_spec(boolean()))
    #: A channel's registration waits up to this long for the switches to acknowledge its rules, so its
    #: first packet (the SYN) already takes the scheduled path and queue (0 = do not wait).
    install_wait_s: float = field(default=0.5, metadata=_spec(number(0.0, 60.0, what="a number of seconds")))


CHANNEL_FIELDS = (
    Field("dst", text(), required=True),
    Field("path", nullable(array(text(), of="of node names")), required=True),
    Field("count", integer(1, 64), required=True),
)


def _ip_address(name: str, value: Any) -> str:
    try:
        ipaddress.ip_address(text()(name, value))
    except ValueError:
        raise FieldError(name, f"must be an IP address, got {show(value)}") from None
    return value


@dataclass
class RunSpec:
    """Everything one agent needs, passed whole from the emulation phase that starts it to the agent: a
    new agent setting is one field here (its check beside it) and its use in the agent.

    The phase builds one template (no ``host``, ``t0_s``, ``control_dir``, ``output_path`` or
    ``channels`` yet); :func:`emulation.agents.run_agents` fills those in for each host.  In the file the
    fields marked required must be there (the template's empty defaults never reach a file)."""

    host: str = field(default="", metadata=_spec(text(), required=True))
    hosts_ip: dict[str, str] = field(default_factory=dict, metadata=_spec(
        mapping(text(), _ip_address, what="an object (host -> IP address)"), required=True))
    jobs: list[Job] = field(default_factory=list, metadata=_spec(
        array(nonempty=True, of="of jobs in the trace format"), required=True))
    t0_s: float = field(default=0.0, metadata=_spec(
        number(0.0, what="0 or an epoch time in seconds"), required=True))
    data_port: int = field(default=DEFAULT_DATA_PORT,
                           metadata=_spec(integer(1, 65535, what="a TCP port"), required=True))
    control_dir: str = field(default="", metadata=_spec(text(), required=True))
    output_path: str = field(default="", metadata=_spec(text(), required=True))
    registry: RegistrySettings | None = field(default=None, metadata=_spec(
        nullable(record(declared_fields(RegistrySettings)))))
    connect_timeout_s: float = field(default=10.0, metadata=_spec(_SECONDS))
    confirm_timeout_s: float = field(default=30.0, metadata=_spec(_SECONDS))
    run_timeout_s: float = field(default=600.0, metadata=_spec(_SECONDS))
    scheduler: str = field(default="", metadata=_spec(text(nonempty=False)))
    #: the fabric's topology (``echelonflow.topology_spec`` form): agents pin channels to the flows' paths
    #: (checked by ``echelonflow.topology_spec``)
    topology_spec: dict[str, Any] | None = field(default=None, metadata=_spec(key="topology"))
    #: channels to open before t0: ``[{"dst", "path" (node names or None), "count"}]`` (traffic.channels)
    channels: list[dict[str, Any]] | None = field(default=None, metadata=_spec(
        nullable(array(record(CHANNEL_FIELDS), of="of {dst, path, count} objects"))))
    #: the TCP congestion control of the channels this agent opens (None: the host's default)
    congestion_control: str | None = field(default=None, metadata=_spec(nullable(text())))

    def topology(self) -> Any:
        """The :class:`~echelonflow.topology.Topology` of ``topology_spec``, or None."""
        if self.topology_spec is None:
            return None
        return topology_from_json(self.topology_spec, "run-spec topology")

    def control_socket(self, host: str) -> str:
        return control_socket_path(self.control_dir, host)

    def to_json_dict(self) -> dict[str, Any]:
        """The spec file's document: every field under its key, those that are None left out."""
        out: dict[str, Any] = {}
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if value is not None:
                out[spec.metadata["key"] or spec.name] = _to_json(value)
        return out


def _to_json(value: Any) -> Any:
    """A field's value as the file holds it: jobs in the trace format, settings as objects, copies."""
    if isinstance(value, RegistrySettings):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return jobs_to_json(value) if value and isinstance(value[0], Job) else [_to_json(v) for v in value]
    return dict(value) if isinstance(value, dict) else value


#: The spec file's fields (their checks beside the :class:`RunSpec` fields) and the registry's.
SPEC_FIELDS = declared_fields(RunSpec)
REGISTRY_FIELDS = declared_fields(RegistrySettings)


# ------------------------------------------------------------------------------------- load / save
def parse_runspec(data: Any, source: str) -> RunSpec:
    """Check a decoded spec document whole before anything uses it; :class:`SpecError`, one line
    ``<source>: <field>: <problem>``, if any part is wrong."""
    try:
        fields = read(data, SPEC_FIELDS, what="a JSON object")
        _check_places(fields)
        jobs = jobs_from_json(fields["jobs"], source, sorted(fields["hosts_ip"]))
        _check_topology(fields["topology"], fields["hosts_ip"], source)
        _check_channels(fields["channels"] or [], fields["hosts_ip"], fields["host"])
    except FieldError as exc:
        raise SpecError(f"{source}: {exc}") from None
    registry, topology_spec = fields.pop("registry"), fields.pop("topology")
    fields["jobs"] = jobs
    return RunSpec(**fields, topology_spec=topology_spec,
                   registry=None if registry is None else RegistrySettings(**registry))


def _check_places(fields: dict[str, Any]) -> None:
    """This host has an address, and its socket and result file can be created where the spec says
    (paths are quoted whole: a shortened path would not tell the user which one is wrong)."""
    host, control_dir, output_path = fields["host"], fields["control_dir"], fields["output_path"]
    if host not in fields["hosts_ip"]:
        raise FieldError("host", f"{show(host)} is not in hosts_ip")
    if not os.path.isdir(control_dir):
        raise FieldError("control_dir", f"{control_dir!r} is not a directory")
    if len(control_socket_path(control_dir, host).encode()) > 100:
        raise FieldError("control_dir", f"{control_dir!r} is too long for a Unix socket path")
    if not os.path.isdir(os.path.dirname(os.path.abspath(output_path))):
        raise FieldError("output_path", f"the directory of {output_path!r} does not exist")


def _check_topology(spec: Any, hosts_ip: dict[str, str], source: str) -> None:
    """The fabric's topology, if given, builds and has every host of the run."""
    if spec is None:
        return
    try:
        topology = topology_from_json(spec, f"{source}: topology")
    except TopologySpecError as exc:
        raise SpecError(str(exc)) from None
    missing = sorted(set(hosts_ip) - set(topology.hosts))
    if missing:
        raise FieldError(f"hosts_ip[{missing[0]!r}]", f"is not a host of the topology {topology.name}")


def _check_channels(channels: list[dict[str, Any]], hosts_ip: dict[str, str], host: str) -> None:
    """Each planned channel leads to another host of the run."""
    for i, channel in enumerate(channels):
        dst = channel["dst"]
        if dst not in hosts_ip or dst == host:
            raise FieldError(f"channels[{i}].dst", f"must be another host of hosts_ip, got {show(dst)}")


def load_runspec(path: str) -> RunSpec:
    return parse_runspec(read_json(path, "run-spec", SpecError), path)


def save_runspec(spec: RunSpec, path: str) -> None:
    write_json_atomic(path, spec.to_json_dict())
