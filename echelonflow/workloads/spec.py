"""Declared parameters of workload generators and the one place they are checked.

Every generator states its parameters (type, default, minimum, meaning) and how many hosts it takes;
:meth:`Generator.generate` checks a user's parameters against that declaration before building
anything, so a mistake is reported once, naming the job, the generator, the parameter and the problem,
and no half-built job escapes.  Generators themselves then trust their (complete, typed) parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from echelonflow.errors import UserError
from echelonflow.model import Job

REQUIRED: Any = object()  # default of a parameter the user must give
_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false"}


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


@dataclass(frozen=True)
class Generator:
    """A named workload generator: ``gen(job_id, hosts, **params) -> Job`` (parameters checked first)."""

    name: str
    doc: str  # one line: what the job is and how hosts are used
    params: tuple[Param, ...]
    min_hosts: int
    max_hosts: int | None  # None: no upper bound
    build: Callable[[str, tuple[str, ...], dict[str, Any]], Job]  # gets checked hosts and params

    def __call__(self, job_id: str, hosts: Sequence[str], **params: Any) -> Job:
        return self.generate(job_id, hosts, params)

    def generate(self, job_id: str, hosts: Sequence[str], params: Mapping[str, Any]) -> Job:
        """Check everything, then build the job (the build never sees bad input)."""
        where = f"job {job_id!r}, generator {self.name!r}"
        if not isinstance(job_id, str) or not job_id or "/" in job_id:
            raise UserError(f"{where}: job id must be a non-empty string without '/'")
        checked_hosts = self._check_hosts(where, hosts)
        checked = self._check_params(where, params)
        return self.build(job_id, checked_hosts, checked)

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

    def _check_hosts(self, where: str, hosts: Sequence[str]) -> tuple[str, ...]:
        if isinstance(hosts, (str, bytes)) or not isinstance(hosts, Sequence):
            raise UserError(f"{where}: hosts must be a list of host names, got {type(hosts).__name__}")
        for host in hosts:
            if not isinstance(host, str) or not host:
                raise UserError(f"{where}: host names must be non-empty strings, got {host!r}")
        duplicates = sorted({h for h in hosts if list(hosts).count(h) > 1})
        if duplicates:
            raise UserError(f"{where}: host {duplicates[0]!r} is listed twice (one role per host)")
        count = len(hosts)
        if self.max_hosts == self.min_hosts and count != self.min_hosts:
            raise UserError(f"{where}: needs exactly {self.min_hosts} hosts, got {count}")
        if count < self.min_hosts:
            raise UserError(f"{where}: needs at least {self.min_hosts} hosts, got {count}")
        if self.max_hosts is not None and count > self.max_hosts:
            raise UserError(f"{where}: needs at most {self.max_hosts} hosts, got {count}")
        return tuple(hosts)

    def _check_params(self, where: str, params: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(params, Mapping):
            raise UserError(f"{where}: params must be an object/mapping, got {type(params).__name__}")
        declared = {p.name: p for p in self.params}
        for name in params:
            if name not in declared:
                valid = ", ".join(sorted(declared)) or "none"
                raise UserError(f"{where}: unknown parameter {name!r} (valid: {valid})")
        out: dict[str, Any] = {}
        for param in self.params:
            if param.name not in params:
                if param.default is REQUIRED:
                    raise UserError(f"{where}: missing parameter {param.name!r} ({param.doc})")
                out[param.name] = param.default
                continue
            out[param.name] = _check_value(where, param, params[param.name])
        return out


def _check_value(where: str, param: Param, value: Any) -> Any:
    problem = f"{where}: parameter {param.name!r}"
    expected = _TYPE_NAMES[param.kind]
    if param.kind is bool:
        if not isinstance(value, bool):
            raise UserError(f"{problem} must be {expected}, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{problem} must be {expected}, got {value!r}")
    if param.kind is int and not isinstance(value, int):
        raise UserError(f"{problem} must be {expected}, got {value!r}")
    if not math.isfinite(value):
        raise UserError(f"{problem} must be finite, got {value!r}")
    if value < param.minimum:
        raise UserError(f"{problem} must be >= {param.minimum:g}, got {value!r}")
    return param.kind(value)


def iterations_param() -> Param:
    return Param("iterations", int, 1, "training iterations; iteration i+1 waits for i's results", 1)


def split_bytes(total_bytes: int, parts: int) -> list[int]:
    """``total_bytes`` split into ``parts`` near-equal whole parts (the first ones get the remainder)."""
    base, extra = divmod(total_bytes, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def chunk_bytes(size_bytes: int, workers: int) -> int:
    """Bytes one ring step moves: size/n rounded up, so a ring never moves less than the data."""
    return -(-size_bytes // workers)
