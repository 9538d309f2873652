"""Workload generators: one module per training paradigm, all producing a :class:`~echelonflow.model.Job`.

``GENERATORS[name](job_id, hosts, **params)`` or ``generate(name, job_id, hosts, params)`` build a job
whose flows carry EchelonFlow ids per the paper's Table 1.  ``hosts`` is the placement: hosts[i] plays
worker/stage i (parameter server: hosts[0] is the PS).  Parameters are declared per generator
(``GENERATORS[name].params``, ``.describe()``) and checked before anything is built; a mistake raises
:class:`~echelonflow.errors.UserError` naming the job, the generator, the parameter and the problem.

Every generator: ``iterations`` (default 1) chained so iteration i+1's compute waits for iteration i's
results; compute durations in seconds (``forward_s``, ``backward_s``); sizes in bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from echelonflow.errors import UserError
from echelonflow.model import Job
from echelonflow.workloads import fsdp, megatron, parameter_server, pipeline, ring_allreduce
from echelonflow.workloads.spec import Generator, Param

GENERATORS: dict[str, Generator] = {
    g.name: g
    for g in (
        ring_allreduce.GENERATOR,
        parameter_server.GENERATOR,
        pipeline.GPIPE,
        pipeline.ONE_F_ONE_B,
        megatron.GENERATOR,
        fsdp.GENERATOR,
        pipeline.FIG2,
    )
}


def generate(name: str, job_id: str, hosts: Sequence[str], params: Mapping[str, Any]) -> Job:
    """Build job ``job_id`` with generator ``name``; UserError for an unknown generator or bad input."""
    generator = GENERATORS.get(name) if isinstance(name, str) else None
    if generator is None:
        raise UserError(
            f"job {job_id!r}: unknown generator {name!r} (valid: {', '.join(sorted(GENERATORS))})"
        )
    return generator.generate(job_id, hosts, params)


__all__ = ["GENERATORS", "Generator", "Param", "generate"]
