"""Tensor parallelism (Megatron-LM style) over all hosts.

Every host holds a 1/n slice of each of ``layers`` layers.  Per iteration, for each layer in order,
every host runs its slice's forward compute and then the hosts ring-all-reduce the layer's output
activations (``activation_bytes``); the backward pass runs the layers in reverse, each followed by a
ring all-reduce of the input gradients (same size).  A host's next compute waits for the previous
all-reduce to reach it.  (Megatron has two all-reduces per transformer layer; one per "layer" here is
the same pattern with half the layers.)  Table 1: each per-layer all-reduce is one Coflow.

Ids: compute ``i{k}.l{l}.fwd.w{i}`` / ``i{k}.l{l}.bwd.w{i}``; flows ``i{k}.l{l}.fwd.s{step}.w{i}`` /
``i{k}.l{l}.bwd.s{step}.w{i}``; EchelonFlows ``i{k}.l{l}.fwd`` and ``i{k}.l{l}.bwd`` (coflows).
"""

from __future__ import annotations

from typing import Any

from echelonflow.model import ComputeTask, Job
from echelonflow.workloads.collectives import allreduce_steps, ring
from echelonflow.workloads.spec import REQUIRED, Generator, Param, chunk_bytes, iterations_param


def build(job_id: str, hosts: tuple[str, ...], p: dict[str, Any]) -> Job:
    n, layers = len(hosts), p["layers"]
    chunk = chunk_bytes(p["activation_bytes"], n)
    job = Job(job_id)
    waits_for: list[list[str]] = [[] for _ in hosts]  # per host: previous compute + previous all-reduce
    passes = [("fwd", layer) for layer in range(layers)] + [
        ("bwd", layer) for layer in reversed(range(layers))
    ]
    for k in range(p["iterations"]):
        for direction, layer in passes:
            name = f"i{k}.l{layer}.{direction}"
            duration_s = p["forward_s"] if direction == "fwd" else p["backward_s"]
            label = f"{'forward' if direction == 'fwd' else 'backward'} layer {layer}"
            for i, host in enumerate(hosts):
                job.add(ComputeTask(f"{name}.w{i}", host, duration_s, tuple(waits_for[i]), label))
            finals = ring(
                job,
                name,
                hosts,
                chunk,
                allreduce_steps(n),
                [[f"{name}.w{i}"] for i in range(n)],
                name,
                f"all-reduce {label}",
            )
            job.echelon_kinds[name] = "coflow"
            waits_for = [[f"{name}.w{i}", finals[i]] for i in range(n)]
    return job


GENERATOR = Generator(
    name="megatron",
    doc="tensor parallel (Megatron-LM): every host holds a slice of every layer; ring all-reduce per layer",
    params=(
        iterations_param(),
        Param("layers", int, 4, "layers; each has one forward and one backward all-reduce", 1),
        Param("activation_bytes", int, REQUIRED, "bytes all-reduced per layer per direction", 1),
        Param("forward_s", float, 0.005, "forward compute per layer per host (seconds)"),
        Param("backward_s", float, 0.01, "backward compute per layer per host (seconds)"),
    ),
    min_hosts=2,
    max_hosts=None,
    build=build,
    # per layer and iteration: a forward and a backward all-reduce (2n(n-1) flows each), 2 computes per host
    tasks=lambda n, p: p["iterations"] * p["layers"] * (4 * n * (n - 1) + 2 * n),
)
