"""Declared parameters of workload generators, checked by the project's one field checker.

Every generator states its parameters (type, default, minimum, meaning) and how many hosts it takes;
:meth:`Generator.generate` reads a user's parameters against that declaration with
``echelonflow.fields`` (the checker of scenario, trace, topology and run-spec files and API bodies)
before building anything, so a mistake is reported once, as one line naming the job, the generator,
the parameter and the problem (``job 'a', generator 'gpipe': micro_batches: must be an integer >= 1,
got 0``), and no half-built job escapes.  Generators themselves then trust their (complete, typed)
parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from echelonflow.errors import UserError
from echelonflow.fields import Field, FieldError, array, boolean, integer, number, read, text
from echelonflow.limits import MAX_TASKS_PER_JOB
from echelonflow.model import Job

REQUIRED: Any = object()  # default of a parameter the user must give
_JOB_ID = text(without="/")


@dataclass(frozen=True)
class Param:
    """One generator parameter; ``minimum`` applies to numbers (inclusive)."""

    name: str
    kind: type  # int, float or bool
    default: Any
    doc: str
    minimum: float = 0

    def describe(self) -> str:
        default = "required" if self.default is REQUIRED else f"default {self.default!r}"
        return f"{self.name} ({self.kind.__name__}, {default}): {self.doc}"

    def field(self) -> Field:
        """The parameter as a declared field (``echelonflow.fields``)."""
        if self.kind is bool:
            check = boolean()
        elif self.kind is int:
            check = integer(math.ceil(self.minimum))
        else:
            check = number(self.minimum)
        return Field(self.name, check, required=self.default is REQUIRED, default=self.default)


@dataclass(frozen=True)
class Generator:
    """A named workload generator: ``gen(job_id, hosts, **params) -> Job`` (parameters checked first)."""

    name: str
    doc: str  # one line: what the job is and how hosts are used
    params: tuple[Param, ...]
    min_hosts: int
    max_hosts: int | None  # None: no upper bound
    build: Callable[[str, tuple[str, ...], dict[str, Any]], Job]  # gets checked hosts and params
    #: how many tasks the build makes (at most) from the host count and the checked parameters: checked
    #: against MAX_TASKS_PER_JOB before anything is built (``micro_batches: 1e9`` is one line, not a
    #: MemoryError minutes later)
    tasks: Callable[[int, dict[str, Any]], int] | None = None

    def __call__(self, job_id: str, hosts: Sequence[str], **params: Any) -> Job:
        return self.generate(job_id, hosts, params)

    def generate(self, job_id: str, hosts: Sequence[str], params: Mapping[str, Any]) -> Job:
        """Check everything, then build the job (the build never sees bad input)."""
        try:
            _JOB_ID("id", job_id)
            checked_hosts = self._check_hosts(hosts)
            checked = read(params, [p.field() for p in self.params], what="an object of parameters")
        except FieldError as exc:
            raise UserError(f"job {job_id!r}, generator {self.name!r}: {exc}") from None
        count = self.task_count(len(checked_hosts), checked)
        if count > MAX_TASKS_PER_JOB:
            raise UserError(f"job {job_id!r}, generator {self.name!r}: {count:,} tasks with these "
                            f"parameters and {len(checked_hosts)} hosts, more than the {MAX_TASKS_PER_JOB:,} "
                            "allowed per job (echelonflow/limits.py)")
        return self.build(job_id, checked_hosts, checked)

    def task_count(self, hosts: int, params: dict[str, Any]) -> int:
        """Tasks (at most) a job of ``hosts`` hosts with these checked parameters gets; 0 if undeclared."""
        return 0 if self.tasks is None else int(self.tasks(hosts, params))

    def describe(self) -> str:
        """Multi-line help: the generator, its host rule and every parameter."""
        if self.max_hosts == self.min_hosts:
            count = f"exactly {self.min_hosts}"
        elif self.max_hosts is None:
            count = f"at least {self.min_hosts}"
        else:
            count = f"{self.min_hosts} to {self.max_hosts}"
        lines = [f"{self.name}: {self.doc}", f"  hosts: {count}"]
        lines += [f"  {p.describe()}" for p in self.params]
        return "\n".join(lines)

    def _check_hosts(self, hosts: Sequence[str]) -> tuple[str, ...]:
        """Distinct host names (a host plays one role), as many as the generator takes."""
        hosts = array(text(), of="of host names")("hosts", list(hosts) if isinstance(hosts, tuple) else hosts)
        duplicates = sorted({h for h in hosts if hosts.count(h) > 1})
        if duplicates:
            raise FieldError("hosts", f"lists host {duplicates[0]!r} twice (one role per host)")
        count = len(hosts)
        if self.max_hosts == self.min_hosts and count != self.min_hosts:
            raise FieldError("hosts", f"needs exactly {self.min_hosts} hosts, got {count}")
        if count < self.min_hosts:
            raise FieldError("hosts", f"needs at least {self.min_hosts} hosts, got {count}")
        if self.max_hosts is not None and count > self.max_hosts:
            raise FieldError("hosts", f"needs at most {self.max_hosts} hosts, got {count}")
        return tuple(hosts)


def iterations_param() -> Param:
    return Param("iterations", int, 1, "training iterations; iteration i+1 waits for i's results", 1)


def split_bytes(total_bytes: int, parts: int) -> list[int]:
    """``total_bytes`` split into ``parts`` near-equal whole parts (the first ones get the remainder)."""
    base, extra = divmod(total_bytes, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def chunk_bytes(size_bytes: int, workers: int) -> int:
    """Bytes one ring step moves: size/n rounded up, so a ring never moves less than the data."""
    return -(-size_bytes // workers)
