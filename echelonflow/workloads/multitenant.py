"""Multi-tenant DDL workloads: N training jobs of mixed models and parallelisms sharing one fabric.

A shared cluster is the setting the paper leaves open: jobs arrive over time, each on its own hosts,
and meet in the switches.  :func:`generate` draws such a workload from a few numbers, reproducibly:

* **Mix.** Each job is one entry of ``mix`` (``"model/parallelism"`` or ``{"model", "parallelism",
  "hosts"}``), drawn uniformly; bytes and compute times come from the model's shape
  (``echelonflow.workloads.models``).  The default mix is :data:`DEFAULT_MIX`.
* **Arrivals.** Poisson: exponential gaps at rate ``lambda``; the first job arrives at 0.
* **Load.** ``load`` is the offered load on the host links: ``lambda x E[wire bytes a job sends] /
  (hosts x host link rate)``, the fraction of the cluster's aggregate host-link capacity the jobs'
  traffic asks for (the usual definition in flow-scheduling evaluations).  So ``lambda = load x hosts x
  rate_bps / 8 / E[wire bytes]``, with the expectation taken exactly over the mix.
* **Placement.** Each job gets its own hosts (a host is one accelerator: no two jobs share it):
  ``random`` scatters them over the fabric, ``packed`` takes the next free hosts in order (locality).

One seed fixes everything, and the three random streams (job kinds, placement, arrival gaps) are
separate, so the same seed at another load gives the same jobs on the same hosts with every arrival
time scaled by the load ratio: loads compare like for like.

Bad parameters raise one :class:`~echelonflow.errors.UserError` line naming the parameter.  Pure and
Python 3.9 compatible.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from echelonflow.errors import UserError
from echelonflow.model import Job
from echelonflow.topology import Topology, natural_key
from echelonflow.workloads import generate as generate_job
from echelonflow.workloads import models

#: (model, parallelism, hosts): every paradigm the generators have, at sizes such jobs run at.
DEFAULT_MIX: tuple[tuple[str, str, int], ...] = (
    ("resnet50", "ring", 8),
    ("resnet50", "ps", 5),
    ("bert-large", "ring", 8),
    ("bert-large", "fsdp", 4),
    ("gpt2-xl", "fsdp", 8),
    ("gpt2-xl", "gpipe", 4),
    ("bert-large", "megatron", 4),
    ("gpt-13b", "1f1b", 8),
)
DEFAULT_HOSTS = {(m, p): h for m, p, h in DEFAULT_MIX}
PLACEMENTS = ("random", "packed")

_PARAMS = {"jobs", "load", "seed", "mix", "iterations", "placement", "accelerator_flops", "utilisation",
           "prefix"}


@dataclass(frozen=True)
class JobKind:
    """One entry of the mix: a model trained with a parallelism on a number of hosts."""

    model: str
    parallelism: str
    hosts: int

    @property
    def label(self) -> str:
        return f"{self.model}/{self.parallelism}"


@dataclass
class Workload:
    """A generated workload and the numbers behind its arrival rate (reported by benchmarks)."""

    jobs: list[Job]
    kinds: list[JobKind]  # kinds[i] is jobs[i]'s
    arrival_rate_per_s: float
    mean_wire_bytes: float  # E[wire bytes one job sends], exactly over the mix
    load: float
    seed: int
    params: dict[str, Any] = field(default_factory=dict)


def generate(spec: Mapping[str, Any], topology: Topology) -> Workload:
    """Draw the workload ``spec`` describes on ``topology`` (see the module docstring)."""
    if not isinstance(spec, Mapping):
        raise UserError(f"multi_tenant must be an object of parameters, got {spec!r}")
    unknown = sorted(set(spec) - _PARAMS)
    if unknown:
        allowed = ", ".join(sorted(_PARAMS))
        raise UserError(f"multi_tenant: unknown parameter {unknown[0]!r}; allowed: {allowed}")
    count = _integer(spec, "jobs", None, 1)
    load = _real(spec, "load", None)
    seed = _integer(spec, "seed", 0, 0)
    iterations = _integer(spec, "iterations", 1, 1)
    flops = _real(spec, "accelerator_flops", models.ACCELERATOR_FLOPS)
    utilisation = _real(spec, "utilisation", models.UTILISATION)
    if utilisation > 1:
        raise UserError(f"multi_tenant: parameter 'utilisation' must be at most 1, got {utilisation!r}")
    placement = spec.get("placement", "random")
    if placement not in PLACEMENTS:
        raise UserError(f"multi_tenant: parameter 'placement' must be one of {', '.join(PLACEMENTS)}, "
                        f"got {placement!r}")
    prefix = spec.get("prefix", "j")
    if not isinstance(prefix, str) or "/" in prefix:
        raise UserError(f"multi_tenant: parameter 'prefix' must be a string without '/', got {prefix!r}")
    mix = _mix(spec.get("mix"))

    def build(kind: JobKind, job_id: str, hosts: Sequence[str]) -> Job:
        name, params = models.job_params(models.model(kind.model), kind.parallelism, kind.hosts,
                                         iterations, flops, utilisation)
        return generate_job(name, job_id, hosts, params)

    host_names = topology.hosts
    probe_hosts = host_names[: max(k.hosts for k in mix)]
    if len(probe_hosts) < max(k.hosts for k in mix):
        raise UserError(f"multi_tenant: a job needs {max(k.hosts for k in mix)} hosts, "
                        f"{topology.name} has {len(host_names)}")
    mean_payload = sum(_payload_bytes(build(k, "probe", probe_hosts[: k.hosts])) for k in mix) / len(mix)
    mean_wire_bytes = topology.wire_bytes(mean_payload)
    rate_per_s = load * len(host_names) * topology.rate_bps / 8.0 / mean_wire_bytes

    kind_rng = random.Random(f"{seed}/kinds")
    kinds = [kind_rng.choice(mix) for _ in range(count)]
    needed = sum(k.hosts for k in kinds)
    if needed > len(host_names):
        raise UserError(f"multi_tenant: {count} jobs need {needed} hosts (one job per host), "
                        f"{topology.name} has {len(host_names)}; use fewer jobs or a larger topology")
    placements = _place(kinds, sorted(host_names, key=natural_key), placement, random.Random(f"{seed}/hosts"))
    gap_rng = random.Random(f"{seed}/arrivals")
    arrival_s, jobs = 0.0, []
    for index, (kind, hosts) in enumerate(zip(kinds, placements)):
        if index:
            arrival_s += gap_rng.expovariate(1.0) / rate_per_s
        job_id = f"{prefix}{index:0{len(str(count - 1))}d}-{kind.model}-{kind.parallelism}"
        job = build(kind, job_id, hosts)
        job.arrival_s = arrival_s
        jobs.append(job)
    params = {"jobs": count, "load": load, "seed": seed, "iterations": iterations, "placement": placement,
              "accelerator_flops": flops, "utilisation": utilisation, "mix": [k.label for k in mix]}
    return Workload(jobs, kinds, rate_per_s, mean_wire_bytes, load, seed, params)


def _payload_bytes(job: Job) -> int:
    return sum(flow.size_bytes for flow in job.flows)


def _place(kinds: Sequence[JobKind], free: list[str], placement: str, rng: random.Random) -> list[list[str]]:
    out = []
    for kind in kinds:
        chosen = free[: kind.hosts] if placement == "packed" else rng.sample(free, kind.hosts)
        taken = set(chosen)
        free = [h for h in free if h not in taken]
        out.append(list(chosen))
    return out


def _mix(entries: Any) -> list[JobKind]:
    if entries is None:
        return [JobKind(m, p, h) for m, p, h in DEFAULT_MIX]
    if not isinstance(entries, list) or not entries:
        raise UserError(f"multi_tenant: parameter 'mix' must be a non-empty list, got {entries!r}")
    kinds = []
    for index, entry in enumerate(entries):
        where = f"multi_tenant: mix[{index}]"
        if isinstance(entry, str):
            parts = entry.split("/")
            if len(parts) != 2:
                raise UserError(f"{where}: must be 'model/parallelism' (e.g. 'gpt-13b/1f1b'), got {entry!r}")
            entry = {"model": parts[0], "parallelism": parts[1]}
        keys = set(entry) if isinstance(entry, dict) else set()
        if not isinstance(entry, dict) or keys - {"model", "parallelism", "hosts"} \
                or not {"model", "parallelism"} <= keys:
            raise UserError(f"{where}: must be 'model/parallelism' or {{\"model\", \"parallelism\", "
                            f"\"hosts\"?}}, got {entry!r}")
        try:
            config = models.model(entry["model"])
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None
        parallelism = entry["parallelism"]
        if parallelism not in config.parallelisms:
            raise UserError(f"{where}: model {config.name!r} cannot use parallelism {parallelism!r}; "
                            f"it supports {', '.join(config.parallelisms)}")
        hosts = entry.get("hosts", DEFAULT_HOSTS.get((config.name, parallelism), 8))
        if not isinstance(hosts, int) or isinstance(hosts, bool) or hosts < 1:
            raise UserError(f"{where}: hosts must be a positive whole number, got {hosts!r}")
        kind = JobKind(config.name, parallelism, hosts)
        try:  # host count against the parallelism (stages vs layers, a PS needs workers)
            models.job_params(config, parallelism, hosts, 1)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None
        kinds.append(kind)
    return kinds


def _integer(spec: Mapping[str, Any], name: str, default: int | None, minimum: int) -> int:
    if name not in spec:
        if default is None:
            raise UserError(f"multi_tenant: parameter {name!r} is missing")
        return default
    value = spec[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UserError(
            f"multi_tenant: parameter {name!r} must be a whole number >= {minimum}, got {value!r}")
    return value


def _real(spec: Mapping[str, Any], name: str, default: float | None) -> float:
    if name not in spec:
        if default is None:
            raise UserError(f"multi_tenant: parameter {name!r} is missing")
        return default
    value = spec[name]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value <= 0:
        raise UserError(f"multi_tenant: parameter {name!r} must be a finite number > 0, got {value!r}")
    return float(value)
