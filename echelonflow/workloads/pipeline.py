"""Pipeline parallelism: GPipe, PipeDream-1F1B, and the paper's Fig. 2 example.

``hosts[i]`` runs pipeline stage i.  Each of ``micro_batches`` micro-batches goes forward through all
stages (activations of ``activation_bytes`` from stage i to i+1) and then backward (gradients of the
same size from stage i+1 to i).  Each stage runs its compute in a fixed per-stage order, encoded as
explicit dependencies between consecutive compute tasks of that stage (so the order holds in any
executor, not only one that honours declaration order):

* GPipe: all forwards F0..F(M-1), then all backwards in reverse micro-batch order B(M-1)..B0.
* 1F1B (PipeDream-Flush): stage i first runs min(S-1-i, M) warm-up forwards, then alternates one
  forward and one backward, then runs the remaining backwards (micro-batch order 0..M-1).
* forward-only (and ``fig2``): F0..F(M-1) and no backward.

Iterations are synchronous: a stage's first compute of iteration k+1 waits for its last of k (its
weights are updated in between).  Table 1 / Eq. 6: the activations from stage i to i+1 of one iteration
form one staggered EchelonFlow, as do the gradients from stage i+1 to i; their offsets come from the
consuming stage's compute times (multiples of its per-micro-batch time T for GPipe).

Ids: compute ``i{k}.s{i}.f{m}`` / ``i{k}.s{i}.b{m}``; flows ``i{k}.a{i}.m{m}`` (activation stage i ->
i+1) and ``i{k}.g{i}.m{m}`` (gradient stage i+1 -> i); EchelonFlows ``i{k}.fwd.s{i}`` and
``i{k}.bwd.s{i}``.
"""

from __future__ import annotations

from typing import Any, Callable

from echelonflow.model import ComputeTask, FlowTask, Job
from echelonflow.workloads.spec import REQUIRED, Generator, Param, iterations_param

Step = tuple[str, int]  # ("f" or "b", micro-batch)
OrderFn = Callable[[int, int, int], list[Step]]  # (stage, stages, micro_batches) -> that stage's order


def gpipe_order(stage: int, stages: int, micro_batches: int) -> list[Step]:
    """GPipe: every forward, then every backward in reverse micro-batch order."""
    forwards = [("f", m) for m in range(micro_batches)]
    return forwards + [("b", m) for m in reversed(range(micro_batches))]


def one_f_one_b_order(stage: int, stages: int, micro_batches: int) -> list[Step]:
    """PipeDream-Flush 1F1B: warm-up forwards, steady one-forward-one-backward, cool-down backwards."""
    warmup = min(stages - 1 - stage, micro_batches)
    order: list[Step] = [("f", m) for m in range(warmup)]
    for j in range(micro_batches - warmup):
        order += [("f", warmup + j), ("b", j)]
    order += [("b", m) for m in range(micro_batches - warmup, micro_batches)]
    return order


def forward_only_order(stage: int, stages: int, micro_batches: int) -> list[Step]:
    return [("f", m) for m in range(micro_batches)]


def build_pipeline(job_id: str, hosts: tuple[str, ...], p: dict[str, Any], order_fn: OrderFn) -> Job:
    """The shared DAG: ``order_fn(stage, stages, micro_batches)`` gives each stage's compute order."""
    stages, micro_batches = len(hosts), p["micro_batches"]
    size = p["activation_bytes"]
    job = Job(job_id)
    last_on_stage: list[str] = ["" for _ in hosts]
    for k in range(p["iterations"]):
        for i in range(stages - 1):
            job.echelon_kinds[f"i{k}.fwd.s{i}"] = "staggered"
            if order_fn is not forward_only_order:
                job.echelon_kinds[f"i{k}.bwd.s{i}"] = "staggered"
        for i, host in enumerate(hosts):
            for kind, m in order_fn(i, stages, micro_batches):
                task_id = f"i{k}.s{i}.{kind}{m}"
                deps = [last_on_stage[i]] if last_on_stage[i] else []
                if kind == "f" and i > 0:
                    deps.append(f"i{k}.a{i - 1}.m{m}")
                if kind == "b":
                    deps.append(f"i{k}.g{i}.m{m}" if i < stages - 1 else f"i{k}.s{i}.f{m}")
                label = f"{'forward' if kind == 'f' else 'backward'} micro-batch {m}"
                duration_s = p["forward_s"] if kind == "f" else p["backward_s"]
                job.add(ComputeTask(task_id, host, duration_s, tuple(dict.fromkeys(deps)), label))
                last_on_stage[i] = task_id
                if kind == "f" and i < stages - 1:
                    job.add(
                        FlowTask(
                            f"i{k}.a{i}.m{m}",
                            host,
                            hosts[i + 1],
                            size,
                            (task_id,),
                            f"i{k}.fwd.s{i}",
                            f"activations micro-batch {m}",
                        )
                    )
                if kind == "b" and i > 0:
                    job.add(
                        FlowTask(
                            f"i{k}.g{i - 1}.m{m}",
                            host,
                            hosts[i - 1],
                            size,
                            (task_id,),
                            f"i{k}.bwd.s{i - 1}",
                            f"gradients micro-batch {m}",
                        )
                    )
    return job


_PIPELINE_PARAMS = (
    iterations_param(),
    Param("micro_batches", int, 4, "micro-batches per iteration", 1),
    Param("activation_bytes", int, REQUIRED, "bytes per micro-batch per stage boundary, each direction", 1),
    Param("forward_s", float, 0.01, "forward compute per micro-batch per stage (seconds)"),
    Param("backward_s", float, 0.02, "backward compute per micro-batch per stage (seconds)"),
    Param("forward_only", bool, False, "only the forward pass (no backward, no gradients)"),
)


def _pipeline_generator(name: str, doc: str, order_fn: OrderFn) -> Generator:
    """GPipe and 1F1B differ only in each stage's compute order (and share ``forward_only``)."""

    def build(job_id: str, hosts: tuple[str, ...], p: dict[str, Any]) -> Job:
        return build_pipeline(job_id, hosts, p, forward_only_order if p["forward_only"] else order_fn)

    return Generator(name=name, doc=doc, params=_PIPELINE_PARAMS, min_hosts=2, max_hosts=None, build=build,
                     tasks=_pipeline_tasks)


def _pipeline_tasks(stages: int, p: dict[str, Any]) -> int:
    """Per micro-batch and iteration: a forward and a backward compute per stage, and an activation and
    a gradient flow per stage boundary (at most; forward-only has half)."""
    return p.get("iterations", 1) * p["micro_batches"] * (4 * stages - 2)


def _fig2(job_id: str, hosts: tuple[str, ...], p: dict[str, Any]) -> Job:
    """Paper Fig. 2: worker 1 computes micro-batches back to back, each followed by a 2B-byte flow."""
    params = {
        "iterations": 1,
        "micro_batches": p["micro_batches"],
        "activation_bytes": 2 * p["link_bytes_per_s"],
        "forward_s": p["compute_s"],
        "backward_s": 0.0,
    }
    return build_pipeline(job_id, hosts, params, forward_only_order)


GPIPE = _pipeline_generator("gpipe", "pipeline parallel, GPipe schedule; hosts[i] is stage i", gpipe_order)
ONE_F_ONE_B = _pipeline_generator(
    "1f1b", "pipeline parallel, PipeDream-Flush 1F1B schedule; hosts[i] is stage i", one_f_one_b_order
)

FIG2 = Generator(
    name="fig2",
    doc="the paper's Fig. 2: 2 pipeline workers, flows of 2B bytes after each 1 s micro-batch",
    params=(
        Param(
            "link_bytes_per_s", int, 1_250_000, "B: the bottleneck link's rate in bytes/s; flows are 2B", 1
        ),
        Param("micro_batches", int, 3, "micro-batches", 1),
        Param("compute_s", float, 1.0, "compute per micro-batch on each worker (seconds)"),
    ),
    min_hosts=2,
    max_hosts=2,
    build=_fig2,
    tasks=_pipeline_tasks,
)
