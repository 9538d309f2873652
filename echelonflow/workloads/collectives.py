"""Ring collectives as flows: the building block of all-reduce, all-gather and reduce-scatter.

A ring over n workers runs in steps; in every step each worker i sends one chunk (size/n bytes,
rounded up) to its neighbour i+1.  Worker i's step s+1 send needs what it received in step s (from
i-1) and its own step-s send to be done (one NIC queue, chunks go out in order).  A ring all-reduce is
2(n-1) steps (reduce-scatter then all-gather); all-gather and reduce-scatter alone are n-1 steps each.

Flow ids: ``{prefix}.s{step}.w{i}`` is worker i's send in that step.
"""

from __future__ import annotations

from collections.abc import Sequence

from echelonflow.model import FlowTask, Job


def ring(
    job: Job,
    prefix: str,
    hosts: Sequence[str],
    chunk_bytes: int,
    steps: int,
    start_deps: Sequence[Sequence[str]],
    echelon_id: str,
    label: str = "",
) -> list[str]:
    """Add ``steps`` ring steps (n flows each) to ``job``; return, per worker, the last flow it receives.

    ``start_deps[i]`` are what worker i's first send waits for (e.g. the compute producing the data).
    Consumers of the collective's result on worker i should depend on the returned ``[i]`` flow.
    """
    n = len(hosts)
    previous: list[str] = []
    for step in range(steps):
        current = []
        for i in range(n):
            flow_id = f"{prefix}.s{step}.w{i}"
            if step == 0:
                deps = tuple(dict.fromkeys(start_deps[i]))
            else:
                deps = tuple(dict.fromkeys((previous[(i - 1) % n], previous[i])))
            job.add(FlowTask(flow_id, hosts[i], hosts[(i + 1) % n], chunk_bytes, deps, echelon_id, label))
            current.append(flow_id)
        previous = current
    return [previous[(i - 1) % n] for i in range(n)]


def allreduce_steps(workers: int) -> int:
    return 2 * (workers - 1)


def gather_steps(workers: int) -> int:
    """Steps of a ring all-gather or reduce-scatter."""
    return workers - 1
