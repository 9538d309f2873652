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
:func:`load_runspec` validates everything and raises :class:`SpecError` naming
the field, so an agent with a bad spec exits with one clear line instead of failing mid-run.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from echelonflow.errors import TraceError, UserError
from echelonflow.fileio import read_json, write_json_atomic
from echelonflow.model import Job
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
    #: the fabric's topology (``controller.topology_spec`` form): agents pin channels to the flows' paths
    topology_spec: dict[str, Any] | None = None
    #: channels to open before t0: ``[{"dst", "path" (node names or None), "count"}]`` (traffic.channels)
    channels: list[dict[str, Any]] | None = None

    def topology(self) -> Any:
        """The :class:`~echelonflow.topology.Topology` of ``topology_spec``, or None."""
        if self.topology_spec is None:
            return None
        from controller.topology_spec import topology_from_spec

        return topology_from_spec(self.topology_spec, "run-spec topology")

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
        if self.topology_spec is not None:
            out["topology"] = dict(self.topology_spec)
        if self.channels is not None:
            out["channels"] = [dict(c) for c in self.channels]
        if self.registry is not None:
            out["registry"] = {
                "socket_path": self.registry.socket_path,
                "token_file": self.registry.token_file,
                "poll_interval_s": self.registry.poll_interval_s,
                "job_prefix": self.registry.job_prefix,
                "pace": self.registry.pace,
                "install_wait_s": self.registry.install_wait_s,
            }
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
    if not isinstance(raw_jobs, list) or not raw_jobs:
        raise SpecError(f"{source}: 'jobs' must be a non-empty list of jobs in the trace format")
    try:
        return parse_trace({"jobs": raw_jobs}, f"{source}: jobs", known_hosts=hosts)
    except TraceError as exc:
        raise SpecError(str(exc)) from None


def check_serialisable(jobs: list[Job]) -> None:
    """Raise :class:`SpecError` if a job cannot travel in a spec (the trace format rejects it, e.g. a
    zero-byte flow), so the orchestrator fails before starting anything instead of every agent failing."""
    hosts = sorted({host for job in jobs for host in job.hosts})
    jobs_from_json(json.loads(json.dumps(jobs_to_json(jobs))), "run-spec", hosts)


def _need_str(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise SpecError(f"{where}: {key!r} must be a non-empty string, got {value!r}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ------------------------------------------------------------------------------------- load / save
def parse_runspec(data: Any, source: str) -> RunSpec:
    """Validate a decoded spec document; every error names ``source`` and the field."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: run-spec must be a JSON object")
    host = _need_str(data, "host", source)
    hosts_ip = data.get("hosts_ip")
    if not isinstance(hosts_ip, dict) or not hosts_ip or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in hosts_ip.items()
    ):
        raise SpecError(f"{source}: 'hosts_ip' must map host names to IP addresses")
    if host not in hosts_ip:
        raise SpecError(f"{source}: host {host!r} is not in 'hosts_ip'")
    jobs = jobs_from_json(data.get("jobs"), source, sorted(hosts_ip))
    t0 = data.get("t0_s")
    if not _is_number(t0) or t0 <= 0:
        raise SpecError(f"{source}: 't0_s' must be an epoch time in seconds, got {t0!r}")
    port = data.get("data_port")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise SpecError(f"{source}: 'data_port' must be a TCP port 1..65535, got {port!r}")
    control_dir = _need_str(data, "control_dir", source)
    if not os.path.isdir(control_dir):
        raise SpecError(f"{source}: control_dir {control_dir!r} is not a directory")
    if len(control_socket_path(control_dir, host).encode()) > 100:
        raise SpecError(f"{source}: control_dir {control_dir!r} is too long for a Unix socket path")
    output_path = _need_str(data, "output_path", source)
    if not os.path.isdir(os.path.dirname(os.path.abspath(output_path))):
        raise SpecError(f"{source}: the directory of output_path {output_path!r} does not exist")
    timeouts = {}
    for key, default in (("connect_timeout_s", 10.0), ("confirm_timeout_s", 30.0), ("run_timeout_s", 600.0)):
        value = data.get(key, default)
        if not _is_number(value) or value <= 0:
            raise SpecError(f"{source}: {key!r} must be a positive number of seconds, got {value!r}")
        timeouts[key] = float(value)
    registry = None
    if data.get("registry") is not None:
        raw = data["registry"]
        if not isinstance(raw, dict):
            raise SpecError(f"{source}: 'registry' must be an object with socket_path and token_file")
        poll = raw.get("poll_interval_s", 0.1)
        if not _is_number(poll) or poll <= 0:
            raise SpecError(f"{source}: registry 'poll_interval_s' must be a positive number, got {poll!r}")
        prefix = raw.get("job_prefix", "")
        if not isinstance(prefix, str) or "/" in prefix:
            raise SpecError(f"{source}: registry 'job_prefix' must be a string without '/', got {prefix!r}")
        pace = raw.get("pace", True)
        if not isinstance(pace, bool):
            raise SpecError(f"{source}: registry 'pace' must be true or false, got {pace!r}")
        install_wait = raw.get("install_wait_s", 0.5)
        if not _is_number(install_wait) or not 0 <= install_wait <= 60:
            raise SpecError(f"{source}: registry 'install_wait_s' must be a number of seconds in [0, 60], "
                            f"got {install_wait!r}")
        registry = RegistrySettings(_need_str(raw, "socket_path", f"{source}: registry"),
                                    _need_str(raw, "token_file", f"{source}: registry"), float(poll), prefix,
                                    pace, float(install_wait))
    topology_spec = data.get("topology")
    if topology_spec is not None:
        from controller.topology_spec import SpecError as TopologySpecError
        from controller.topology_spec import topology_from_spec

        try:
            topology = topology_from_spec(topology_spec, f"{source}: topology")
        except TopologySpecError as exc:
            raise SpecError(str(exc)) from None
        missing = sorted(set(hosts_ip) - set(topology.hosts))
        if missing:
            raise SpecError(f"{source}: host {missing[0]!r} is not in the topology {topology.name}")
    channels = _channels(data.get("channels"), hosts_ip, host, source)
    return RunSpec(host=host, hosts_ip=dict(hosts_ip), jobs=jobs, t0_s=float(t0), data_port=port,
                   control_dir=control_dir, output_path=output_path, registry=registry,
                   scheduler=str(data.get("scheduler", "")), topology_spec=topology_spec, channels=channels,
                   **timeouts)


def _channels(raw: Any, hosts_ip: dict[str, str], host: str, source: str) -> list[dict[str, Any]] | None:
    """The channel plan: each entry's destination is a known other host, path a list of names or null."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise SpecError(f"{source}: 'channels' must be a list of {{dst, path, count}} objects")
    out = []
    for i, entry in enumerate(raw):
        where = f"{source}: channels[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"dst", "path", "count"}:
            raise SpecError(f"{where} must be an object with exactly dst, path and count")
        if entry["dst"] not in hosts_ip or entry["dst"] == host:
            raise SpecError(f"{where}.dst must be another host of 'hosts_ip', got {entry['dst']!r}")
        path = entry["path"]
        if path is not None and not (isinstance(path, list) and all(isinstance(n, str) for n in path)):
            raise SpecError(f"{where}.path must be a list of node names or null, got {path!r}")
        count = entry["count"]
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 64:
            raise SpecError(f"{where}.count must be an integer from 1 to 64, got {count!r}")
        out.append({"dst": entry["dst"], "path": path, "count": count})
    return out


def load_runspec(path: str) -> RunSpec:
    return parse_runspec(read_json(path, "run-spec", SpecError), path)


def save_runspec(spec: RunSpec, path: str) -> None:
    write_json_atomic(path, spec.to_json_dict())
