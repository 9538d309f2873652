"""The run-spec: the one JSON file a traffic agent is started with.

The orchestrator (``echelon emulate`` or a test) writes one spec per host on the shared file system and
starts ``python -m traffic.agent SPEC`` inside that host.  Everything the agent needs is in the file, so an
agent never reads scenario files or talks to the orchestrator while it runs:

* ``host``: which host this agent is; ``hosts_ip``: host -> IP address of every agent (data plane);
* ``jobs``: every job of the run (all agents get all jobs: each executes only its own part, but needs
  the whole DAG to know where a completion event must be sent);
* ``t0_s``: the epoch time (``time.time()``) all task times are relative to; one machine, one clock;
* ``data_port``: the TCP port every agent listens on for flows;
* ``control_dir``: where each agent's Unix control socket lives (``<control_dir>/<host>.sock``);
  completion events travel there, outside the shaped fabric;
* ``output_path``: where the agent writes its result JSON (atomically);
* ``registry``: optional ``{"socket_path", "token_file"}`` of the controller's registry API;
* timeouts: ``connect_timeout_s`` (a peer that never accepts), ``confirm_timeout_s`` (a receiver that
  never confirms, also the per-socket inactivity limit), ``run_timeout_s`` (the whole run, from t0).

Jobs travel in the trace format (``echelonflow.trace``: ``job_to_trace`` / ``parse_trace``, documented in
docs/trace-format.md), so the spec is self-contained and there is one job serialisation in the project.
The fields are declared once (``SPEC_FIELDS``, ``REGISTRY_FIELDS``, ``CHANNEL_FIELDS``) and read by the
project's one field checker (``echelonflow.fields``), like API bodies and scenario, trace and topology files:
:func:`load_runspec` checks the whole spec before anything uses it and raises :class:`SpecError`, one line
``<spec path>: <field>: <problem>``, so an agent with a bad spec exits at once instead of failing mid-run.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
from dataclasses import dataclass
from typing import Any

from echelonflow.errors import TraceError, UserError
from echelonflow.fields import (
    Field,
    FieldError,
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
from echelonflow.topology_spec import SpecError as TopologySpecError
from echelonflow.topology_spec import topology_from_json
from echelonflow.trace import job_to_trace, parse_trace


class SpecError(UserError):
    """A run-spec that an agent cannot execute (names the field and the problem)."""


@dataclass
class RegistrySettings:
    """How an agent reaches the controller's registry (HTTP over a Unix socket, token-authenticated)."""

    socket_path: str
    token_file: str
    poll_interval_s: float = 0.1
    job_prefix: str = ""  # prepended to job ids in the registry (one controller, same job run twice)
    pace: bool = True  # apply allocated rates as socket pacing (only under schedulers that enforce)
    #: A channel's registration waits up to this long for the switches to acknowledge its rules, so its
    #: first packet (the SYN) already takes the scheduled path and queue (0 = do not wait).
    install_wait_s: float = 0.5


@dataclass
class RunSpec:
    host: str
    hosts_ip: dict[str, str]
    jobs: list[Job]
    t0_s: float
    data_port: int
    control_dir: str
    output_path: str
    registry: RegistrySettings | None = None
    connect_timeout_s: float = 10.0
    confirm_timeout_s: float = 30.0
    run_timeout_s: float = 600.0
    scheduler: str = ""
    #: the fabric's topology (``echelonflow.topology_spec`` form): agents pin channels to the flows' paths
    topology_spec: dict[str, Any] | None = None
    #: channels to open before t0: ``[{"dst", "path" (node names or None), "count"}]`` (traffic.channels)
    channels: list[dict[str, Any]] | None = None
    #: the TCP congestion control of the channels this agent opens (None: the host's default)
    congestion_control: str | None = None

    def topology(self) -> Any:
        """The :class:`~echelonflow.topology.Topology` of ``topology_spec``, or None."""
        if self.topology_spec is None:
            return None
        return topology_from_json(self.topology_spec, "run-spec topology")

    def control_socket(self, host: str) -> str:
        return control_socket_path(self.control_dir, host)

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "host": self.host,
            "hosts_ip": dict(self.hosts_ip),
            "jobs": jobs_to_json(self.jobs),
            "t0_s": self.t0_s,
            "data_port": self.data_port,
            "control_dir": self.control_dir,
            "output_path": self.output_path,
            "connect_timeout_s": self.connect_timeout_s,
            "confirm_timeout_s": self.confirm_timeout_s,
            "run_timeout_s": self.run_timeout_s,
            "scheduler": self.scheduler,
        }
        if self.congestion_control is not None:
            out["congestion_control"] = self.congestion_control
        if self.topology_spec is not None:
            out["topology"] = dict(self.topology_spec)
        if self.channels is not None:
            out["channels"] = [dict(c) for c in self.channels]
        if self.registry is not None:
            out["registry"] = dataclasses.asdict(self.registry)
        return out


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


# ------------------------------------------------------------------------------------- fields
def _default(cls: type, name: str) -> Any:
    """The dataclass's own default for ``name`` (declared once, there)."""
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def _ip_address(field: str, value: Any) -> str:
    try:
        ipaddress.ip_address(text()(field, value))
    except ValueError:
        raise FieldError(field, f"must be an IP address, got {show(value)}") from None
    return value


_SECONDS = number(0.0, above=True, what="a number of seconds")
REGISTRY_FIELDS = (
    Field("socket_path", text(), required=True),
    Field("token_file", text(), required=True),
    Field("poll_interval_s", _SECONDS, default=_default(RegistrySettings, "poll_interval_s")),
    Field("job_prefix", text(nonempty=False, without="/"), default=_default(RegistrySettings, "job_prefix")),
    Field("pace", boolean(), default=_default(RegistrySettings, "pace")),
    Field("install_wait_s", number(0.0, 60.0, what="a number of seconds"),
          default=_default(RegistrySettings, "install_wait_s")),
)
CHANNEL_FIELDS = (
    Field("dst", text(), required=True),
    Field("path", nullable(array(text(), of="of node names")), required=True),
    Field("count", integer(1, 64), required=True),
)
SPEC_FIELDS = (
    Field("host", text(), required=True),
    Field("hosts_ip", mapping(text(), _ip_address, what="an object (host -> IP address)"), required=True),
    Field("jobs", array(nonempty=True, of="of jobs in the trace format"), required=True),
    Field("t0_s", number(0.0, above=True, what="an epoch time in seconds"), required=True),
    Field("data_port", integer(1, 65535, what="a TCP port"), required=True),
    Field("control_dir", text(), required=True),
    Field("output_path", text(), required=True),
    Field("registry", nullable(record(REGISTRY_FIELDS))),
    Field("connect_timeout_s", _SECONDS, default=_default(RunSpec, "connect_timeout_s")),
    Field("confirm_timeout_s", _SECONDS, default=_default(RunSpec, "confirm_timeout_s")),
    Field("run_timeout_s", _SECONDS, default=_default(RunSpec, "run_timeout_s")),
    Field("scheduler", text(nonempty=False), default=""),
    Field("topology"),  # checked by echelonflow.topology_spec
    Field("channels", nullable(array(record(CHANNEL_FIELDS), of="of {dst, path, count} objects"))),
    Field("congestion_control", nullable(text())),
)


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
