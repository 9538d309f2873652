"""Fully sharded data parallelism (FSDP / ZeRO-3) over all hosts.

Each host stores 1/n of every layer's parameters.  Before a layer's forward, and again before its
backward, the hosts ring-all-gather that layer's parameters (n-1 steps of param_bytes/n per host).
After a layer's backward its gradients are ring-reduce-scattered (n-1 steps, same chunk) so each host
keeps its shard; the next iteration's all-gather of that layer waits for that (the shard is updated).

With ``prefetch`` (default) the all-gathers run ahead of compute: the all-gather of the next layer in
the pass order (forward 0..L-1, then backward L-1..0) starts as soon as the previous all-gather is
done, not when its compute is.  Their data is then needed layer by layer: Table 1 / Eq. 7, all
all-gathers of an iteration form ONE staggered EchelonFlow (offsets grow by T_fwd per forward layer
and T_bwd per backward layer); each reduce-scatter is a Coflow.  Without prefetch an all-gather starts
when the compute before its consumer finishes.

Ids: compute ``i{k}.l{l}.fwd.w{i}`` / ``i{k}.l{l}.bwd.w{i}``; all-gather flows
``i{k}.ag.fwd.l{l}.s{step}.w{i}`` / ``i{k}.ag.bwd.l{l}.s{step}.w{i}``; reduce-scatter flows
``i{k}.rs.l{l}.s{step}.w{i}``; EchelonFlows ``i{k}.ag`` (staggered) and ``i{k}.rs.l{l}`` (coflows).
"""

from __future__ import annotations

from typing import Any

from echelonflow.model import ComputeTask, Job
from echelonflow.workloads.collectives import gather_steps, ring
from echelonflow.workloads.spec import REQUIRED, Generator, Param, chunk_bytes, iterations_param


def build(job_id: str, hosts: tuple[str, ...], p: dict[str, Any]) -> Job:
    n, layers = len(hosts), p["layers"]
    chunk, steps = chunk_bytes(p["param_bytes"], n), gather_steps(n)
    job = Job(job_id)
    last_compute: list[str] = ["" for _ in hosts]
    shard_ready: dict[int, list[str]] = {}  # layer -> per host: last reduce-scatter flow it received
    passes = [("fwd", layer) for layer in range(layers)] + [
        ("bwd", layer) for layer in reversed(range(layers))
    ]
    for k in range(p["iterations"]):
        gather_id = f"i{k}.ag"
        job.echelon_kinds[gather_id] = "staggered"
        previous_gather: list[str] = []
        for direction, layer in passes:
            start_deps = []
            for i in range(n):
                deps = []
                if direction == "fwd" and layer in shard_ready:
                    deps.append(shard_ready[layer][i])
                if p["prefetch"] and previous_gather:
                    deps.append(previous_gather[i])
                elif not p["prefetch"] and last_compute[i]:
                    deps.append(last_compute[i])
                start_deps.append(deps)
            label = f"{'forward' if direction == 'fwd' else 'backward'} layer {layer}"
            gathered = ring(
                job,
                f"i{k}.ag.{direction}.l{layer}",
                hosts,
                chunk,
                steps,
                start_deps,
                gather_id,
                f"all-gather for {label}",
            )
            previous_gather = gathered
            duration_s = p["forward_s"] if direction == "fwd" else p["backward_s"]
            for i, host in enumerate(hosts):
                task_id = f"i{k}.l{layer}.{direction}.w{i}"
                deps = [d for d in (last_compute[i], gathered[i]) if d]
                job.add(ComputeTask(task_id, host, duration_s, tuple(deps), label))
                last_compute[i] = task_id
            if direction == "bwd":
                scatter_id = f"i{k}.rs.l{layer}"
                job.echelon_kinds[scatter_id] = "coflow"
                shard_ready[layer] = ring(
                    job,
                    scatter_id,
                    hosts,
                    chunk,
                    steps,
                    [[f"i{k}.l{layer}.bwd.w{i}"] for i in range(n)],
                    scatter_id,
                    f"reduce-scatter layer {layer}",
                )
    return job


GENERATOR = Generator(
    name="fsdp",
    doc="fully sharded data parallel (ZeRO-3): per-layer all-gathers and reduce-scatters over all hosts",
    params=(
        iterations_param(),
        Param("layers", int, 4, "layers, each all-gathered before forward and before backward", 1),
        Param("param_bytes", int, REQUIRED, "full (unsharded) parameter bytes of one layer", 1),
        Param("forward_s", float, 0.005, "forward compute per layer per host (seconds)"),
        Param("backward_s", float, 0.01, "backward compute per layer per host (seconds)"),
        Param("prefetch", bool, True, "start each all-gather as soon as the previous one is done"),
    ),
    min_hosts=2,
    max_hosts=None,
    build=build,
    # per layer and iteration: an all-gather before forward and before backward and a reduce-scatter
    # (n(n-1) flows each), and a forward and a backward compute per host
    tasks=lambda n, p: p["iterations"] * p["layers"] * (3 * n * (n - 1) + 2 * n),
)
