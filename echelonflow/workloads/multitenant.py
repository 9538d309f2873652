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

The parameters are declared once (:data:`FIELDS`) and read by the project's one field checker
(``echelonflow.fields``): a bad one raises one :class:`~echelonflow.errors.UserError` line
``multi_tenant: <parameter>: <problem>``.  Pure and Python 3.9 compatible.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from echelonflow.errors import UserError
from echelonflow.fields import Field, FieldError, array, integer, number, one_of, read, show, text
from echelonflow.limits import MAX_TASKS_PER_SCENARIO
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

_POSITIVE = number(0.0, above=True)
#: The ``multi_tenant`` object's fields (``echelonflow.fields``); ``mix`` entries are read by :func:`_mix`.
FIELDS = (
    Field("jobs", integer(1), required=True),
    Field("load", _POSITIVE, required=True),
    Field("seed", integer(0), default=0),
    Field("mix", array(nonempty=True, of="of 'model/parallelism' entries")),
    Field("iterations", integer(1), default=1),
    Field("placement", one_of(*PLACEMENTS), default="random"),
    Field("accelerator_flops", _POSITIVE, default=models.ACCELERATOR_FLOPS),
    Field("utilisation", number(0.0, 1.0, above=True), default=models.UTILISATION),
    Field("prefix", text(nonempty=False, without="/"), default="j"),
)
MIX_FIELDS = (Field("model", text(), required=True), Field("parallelism", text(), required=True),
              Field("hosts", integer(1)))


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
    try:
        fields = read(spec, FIELDS, what="an object of parameters")
        mix = _mix(fields["mix"])
    except FieldError as exc:
        raise UserError(f"multi_tenant: {exc}") from None
    count, load, seed, placement = fields["jobs"], fields["load"], fields["seed"], fields["placement"]
    iterations, flops, utilisation = fields["iterations"], fields["accelerator_flops"], fields["utilisation"]
    prefix = fields["prefix"]

    def build(kind: JobKind, job_id: str, hosts: Sequence[str]) -> Job:
        name, params = models.job_params(models.model(kind.model), kind.parallelism, kind.hosts,
                                         iterations, flops, utilisation)
        return generate_job(name, job_id, hosts, params)

    host_names = topology.hosts
    if count > len(host_names):  # checked before anything is drawn: each job takes a host at least
        raise UserError(f"multi_tenant: {count:,} jobs need at least as many hosts, {topology.name} has "
                        f"{len(host_names)}")
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
    arrival_s, jobs, tasks = 0.0, [], 0
    for index, (kind, hosts) in enumerate(zip(kinds, placements)):
        if index:
            arrival_s += gap_rng.expovariate(1.0) / rate_per_s
        job_id = f"{prefix}{index:0{len(str(count - 1))}d}-{kind.model}-{kind.parallelism}"
        job = build(kind, job_id, hosts)
        job.arrival_s = arrival_s
        jobs.append(job)
        tasks += len(job.tasks)
        if tasks > MAX_TASKS_PER_SCENARIO:
            raise UserError(f"multi_tenant: the first {index + 1} of {count} jobs already have {tasks:,} "
                            f"tasks, more than the {MAX_TASKS_PER_SCENARIO:,} allowed per scenario "
                            "(echelonflow/limits.py)")
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


def _mix(entries: list[Any] | None) -> list[JobKind]:
    """The job kinds of ``mix`` (each checked against its model: parallelism and host count)."""
    if entries is None:
        return [JobKind(m, p, h) for m, p, h in DEFAULT_MIX]
    kinds = []
    for index, entry in enumerate(entries):
        where = f"mix[{index}]"
        if isinstance(entry, str):
            parts = entry.split("/")
            if len(parts) != 2:
                raise FieldError(where, f"must be 'model/parallelism' (e.g. 'gpt-13b/1f1b'), "
                                        f"got {show(entry)}")
            entry = {"model": parts[0], "parallelism": parts[1]}
        entry = read(entry, MIX_FIELDS, where, "'model/parallelism' or an object {model, parallelism, hosts}")
        try:
            config = models.model(entry["model"])
        except UserError as exc:
            raise FieldError(where, str(exc)) from None
        parallelism = entry["parallelism"]
        if parallelism not in config.parallelisms:
            raise FieldError(where, f"model {config.name!r} cannot use parallelism {parallelism!r}; "
                                    f"it supports {', '.join(config.parallelisms)}")
        hosts = entry["hosts"] or DEFAULT_HOSTS.get((config.name, parallelism), 8)
        try:  # host count against the parallelism (stages vs layers, a PS needs workers)
            models.job_params(config, parallelism, hosts, 1)
        except UserError as exc:
            raise FieldError(where, str(exc)) from None
        kinds.append(JobKind(config.name, parallelism, hosts))
    return kinds
