"""Data parallelism with bucketed ring all-reduce (Horovod/PyTorch DDP style).

Every host is one worker holding a full model replica.  Per iteration each worker runs its forward
pass, then its backward pass in ``buckets`` equal pieces; as soon as piece b is computed, bucket b's
gradients are all-reduced over the ring (2(n-1) steps of bucket_bytes/n per worker).  The next
iteration's forward on a worker waits for every bucket it must receive.  Table 1: one Coflow per
bucket per iteration.

Ids: compute ``i{k}.w{i}.fwd`` and ``i{k}.w{i}.bwd{b}``; flows ``i{k}.b{b}.s{step}.w{i}``;
EchelonFlow ``i{k}.b{b}`` (coflow).
"""

from __future__ import annotations

from typing import Any

from echelonflow.errors import UserError
from echelonflow.model import ComputeTask, Job
from echelonflow.workloads.collectives import allreduce_steps, ring
from echelonflow.workloads.spec import REQUIRED, Generator, Param, chunk_bytes, iterations_param, split_bytes


def build(job_id: str, hosts: tuple[str, ...], p: dict[str, Any]) -> Job:
    n, buckets = len(hosts), p["buckets"]
    if p["bytes"] < buckets:
        raise UserError(
            f"job {job_id!r}, generator 'ring_allreduce': parameter 'bytes' ({p['bytes']}) must be at least "
            f"'buckets' ({buckets})"
        )
    bucket_bytes = split_bytes(p["bytes"], buckets)
    job = Job(job_id)
    waits_for: list[list[str]] = [[] for _ in hosts]  # what worker i's next forward needs
    for k in range(p["iterations"]):
        last_bwd = []
        for i, host in enumerate(hosts):
            job.add(ComputeTask(f"i{k}.w{i}.fwd", host, p["forward_s"], tuple(waits_for[i]), "forward"))
            previous = f"i{k}.w{i}.fwd"
            for b in range(buckets):
                task_id = f"i{k}.w{i}.bwd{b}"
                job.add(
                    ComputeTask(task_id, host, p["backward_s"] / buckets, (previous,), f"backward bucket {b}")
                )
                previous = task_id
            last_bwd.append(previous)
        received: list[list[str]] = [[] for _ in hosts]
        for b in range(buckets):
            echelon_id = f"i{k}.b{b}"
            finals = ring(
                job,
                echelon_id,
                hosts,
                chunk_bytes(bucket_bytes[b], n),
                allreduce_steps(n),
                [[f"i{k}.w{i}.bwd{b}"] for i in range(n)],
                echelon_id,
                f"all-reduce bucket {b}",
            )
            job.echelon_kinds[echelon_id] = "coflow"
            for i in range(n):
                received[i].append(finals[i])
        waits_for = [[last_bwd[i], *received[i]] for i in range(n)]
    return job


GENERATOR = Generator(
    name="ring_allreduce",
    doc="data parallel, bucketed ring all-reduce; every host is a worker (ring order = host order)",
    params=(
        iterations_param(),
        Param("bytes", int, REQUIRED, "gradient bytes per iteration (all buckets together)", 1),
        Param("buckets", int, 1, "gradient buckets, each all-reduced once its backward piece is done", 1),
        Param("forward_s", float, 0.05, "forward compute per iteration (seconds)"),
        Param(
            "backward_s", float, 0.1, "backward compute per iteration (seconds), split evenly over buckets"
        ),
    ),
    min_hosts=2,
    max_hosts=None,
    build=build,
    # per iteration: every bucket's ring (2(n-1) steps of n flows), a compute per bucket and host, a forward
    tasks=lambda n, p: p["iterations"] * (p["buckets"] * 2 * n * (n - 1) + (p["buckets"] + 1) * n),
)
