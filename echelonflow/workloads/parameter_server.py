"""Data parallelism with a parameter server (PS).

``hosts[0]`` is the PS, ``hosts[1:]`` are the workers.  Per iteration each worker runs forward and
backward, then pushes ``bytes`` of gradients to the PS; the PS aggregates once every push has arrived
(``aggregate_s`` of compute, may be 0) and each worker pulls ``bytes`` of updated weights back.  A
worker's next forward waits for its pull.  Table 1: all pushes of an iteration are one Coflow, all
pulls another.

Ids: compute ``i{k}.w{j}.fwd``, ``i{k}.w{j}.bwd``, ``i{k}.ps.aggregate``; flows ``i{k}.w{j}.push``
and ``i{k}.w{j}.pull`` (j = position in ``hosts``, so workers are w1..w{n-1}); EchelonFlows
``i{k}.push`` and ``i{k}.pull`` (coflows).
"""

from __future__ import annotations

from typing import Any

from echelonflow.model import ComputeTask, FlowTask, Job
from echelonflow.workloads.spec import REQUIRED, Generator, Param, iterations_param


def build(job_id: str, hosts: tuple[str, ...], p: dict[str, Any]) -> Job:
    ps, workers = hosts[0], range(1, len(hosts))
    job = Job(job_id)
    for k in range(p["iterations"]):
        push, pull = f"i{k}.push", f"i{k}.pull"
        job.echelon_kinds[push] = "coflow"
        job.echelon_kinds[pull] = "coflow"
        for j in workers:
            fwd_deps = (f"i{k - 1}.w{j}.pull", f"i{k - 1}.w{j}.bwd") if k else ()
            job.add(ComputeTask(f"i{k}.w{j}.fwd", hosts[j], p["forward_s"], fwd_deps, "forward"))
            job.add(ComputeTask(f"i{k}.w{j}.bwd", hosts[j], p["backward_s"], (f"i{k}.w{j}.fwd",), "backward"))
            job.add(FlowTask(f"i{k}.w{j}.push", hosts[j], ps, p["bytes"], (f"i{k}.w{j}.bwd",), push, "push"))
        pushes = tuple(f"i{k}.w{j}.push" for j in workers)
        prev_aggregate = (f"i{k - 1}.ps.aggregate",) if k else ()
        job.add(ComputeTask(f"i{k}.ps.aggregate", ps, p["aggregate_s"], pushes + prev_aggregate, "aggregate"))
        for j in workers:
            job.add(
                FlowTask(f"i{k}.w{j}.pull", ps, hosts[j], p["bytes"], (f"i{k}.ps.aggregate",), pull, "pull")
            )
    return job


GENERATOR = Generator(
    name="parameter_server",
    doc="data parallel with a parameter server: hosts[0] is the PS, the other hosts are workers",
    params=(
        iterations_param(),
        Param(
            "bytes",
            int,
            REQUIRED,
            "bytes each worker pushes (gradients) and pulls (weights) per iteration",
            1,
        ),
        Param("forward_s", float, 0.05, "forward compute per worker per iteration (seconds)"),
        Param("backward_s", float, 0.1, "backward compute per worker per iteration (seconds)"),
        Param("aggregate_s", float, 0.0, "PS aggregation compute per iteration (seconds)"),
    ),
    min_hosts=2,
    max_hosts=None,
    build=build,
    # per iteration: each of the n-1 workers' compute, push, pull and apply, and the PS's aggregation
    tasks=lambda n, p: p["iterations"] * (4 * (n - 1) + 1),
)
