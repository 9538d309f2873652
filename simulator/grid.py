"""Sweep grids: the file ``echelon sweep GRID.json`` takes, and the cells it expands into.

A grid names scenarios, schedulers and scenario parameters with lists of values; its cells are every
combination (scenario x parameter values x scheduler), each one simulation (``docs/sweep.md``)::

    {"name": "load-study",
     "scenarios": ["multitenant-k8", "my-scenario.json"],
     "schedulers": ["fair", "coflow", "echelon"],
     "parameters": {"jobs.0.multi_tenant.load": [0.3, 0.6], "jobs.0.multi_tenant.seed": [0, 1, 2]},
     "alone_runs": true,
     "timing_noise_ms": [0, 1, 5], "samples": 10, "rescheduling": "every-flow"}

A parameter is a dotted path into the scenario document (``topology.rate_mbps``, ``jobs.0.params.
micro_batches``; a number indexes a list): every level but the last must exist in every scenario of the
grid, the last one may be new (an optional field).  ``timing_noise_ms`` adds the simulation under
timing noise (``simulator.noise``): each value other than 0 runs every cell ``samples`` times, sample k
with compute times jittered by seed k; ``rescheduling`` is the simulator's rule for the whole grid.
Loading checks everything up front, including each cell's scenario with its values put in (the scenario
loader's own checks), so a sweep never starts on a grid with a bad cell; every problem is one
:class:`~echelonflow.errors.UserError` line.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from echelonflow.errors import UserError
from echelonflow.fields import (
    Field,
    FieldError,
    array,
    boolean,
    integer,
    mapping,
    one_of,
    ranged,
    read,
    show,
    text,
)
from echelonflow.fileio import path_kind, read_json
from echelonflow.limits import MAX_SWEEP_CELLS, NOISE_MS
from echelonflow.scenario import DEFAULT_SCHEDULERS, parse_scenario, resolve
from echelonflow.schedulers import check_names
from simulator.engine import RESCHEDULING

_GRID_FIELDS = (
    Field("name", text(without="/\\\0\n\r"), default=""),
    Field("description", text(nonempty=False), default=""),
    Field("scenarios", array(text(), nonempty=True, of="of scenario names or paths"), required=True),
    Field("schedulers", array(text(), nonempty=True, of="of scheduler names")),
    Field("parameters", mapping(), default={}),
    Field("alone_runs", boolean(), default=True),
    Field("timing_noise_ms", array(ranged(NOISE_MS, "a number of milliseconds"), nonempty=True,
                                   of="of milliseconds"), default=[0]),
    Field("samples", integer(1, 1000), default=10),
    Field("rescheduling", one_of(*RESCHEDULING), default="every-flow"),
)


class GridError(UserError):
    """A grid file that cannot be swept (names the file, the field and the problem)."""


@dataclass(frozen=True)
class Cell:
    """One simulation of a sweep: a scenario document with the cell's values put in, one scheduler."""

    scenario: str
    source: str
    scheduler: str
    parameters: dict[str, Any]
    document: dict[str, Any] = field(repr=False, compare=False)
    alone_runs: bool = True
    noise_ms: float = 0.0  # every compute up to this much longer (simulator.noise); 0: exact
    sample: int = 0  # the noise's seed (0 with no noise)
    rescheduling: str = "every-flow"

    @property
    def key(self) -> str:
        """What identifies the cell across runs of a sweep (finished cells are skipped by it); a grid
        without noise or another rule keeps the keys it had before those existed."""
        parts: list[Any] = [self.scenario, self.scheduler, self.parameters, self.alone_runs]
        if self.noise_ms or self.rescheduling != "every-flow":
            parts += [self.noise_ms, self.sample, self.rescheduling]
        return json.dumps(parts, sort_keys=True)

    def label(self) -> str:
        values = " ".join(f"{path.rsplit('.', 1)[-1]}={value}" for path, value in self.parameters.items())
        noise = f" noise={self.noise_ms:g}ms#{self.sample}" if self.noise_ms else ""
        return f"{self.scenario} {self.scheduler}" + (f" {values}" if values else "") + noise


@dataclass
class Grid:
    name: str
    parameter_paths: list[str]
    cells: list[Cell]
    description: str = ""


def load_grid(path: str, progress: TextIO | None = None) -> Grid:
    """Read, check and expand the grid file ``path`` (see module docstring); ``progress`` hears the cell
    count, computed before any cell is built (a grid beyond ``limits.MAX_SWEEP_CELLS`` is refused then)."""
    data = read_json(path, "grid", GridError)
    try:
        top = read(data, _GRID_FIELDS, what="a JSON object")
        if top["name"] in (".", ".."):
            raise FieldError("name", f"must be a plain file name, got {top['name']!r}")
        parameters = _parameters(top["parameters"])
        schedulers = check_names(top["schedulers"]) if top["schedulers"] is not None else None
        if schedulers is not None and len(schedulers) != len(top["schedulers"]):
            raise FieldError("schedulers", "names a scheduler twice")
        if len(set(top["scenarios"])) != len(top["scenarios"]):
            raise FieldError("scenarios", "names a scenario twice")
    except (FieldError, UserError) as err:
        raise GridError(f"grid {path}: {err}") from None
    base = Path(path).resolve().parent
    sources = [_scenario_source(name, base, f"grid {path}: scenarios[{index}]")
               for index, name in enumerate(top["scenarios"])]
    documents = [read_json(source, "scenario", GridError) for source in sources]
    noise_levels = list(dict.fromkeys(float(v) for v in top["timing_noise_ms"]))
    runs_per_combo = sum(top["samples"] if level else 1 for level in noise_levels)
    combos_count = math.prod(len(values) for values in parameters.values())
    count = sum(combos_count * runs_per_combo * len(schedulers or _listed_schedulers(document))
                for document in documents)
    if progress is not None:
        print(f"grid {path}: {count:,} cells ({len(sources)} scenarios x {combos_count:,} parameter "
              f"combinations x {runs_per_combo} runs with their noise x the schedulers)", file=progress,
              flush=True)
    if count > MAX_SWEEP_CELLS:
        raise GridError(f"grid {path}: {count:,} cells, more than the {MAX_SWEEP_CELLS:,} allowed "
                        "(echelonflow/limits.py); split it into smaller grids")
    cells: list[Cell] = []
    for index, (source, document) in enumerate(zip(sources, documents)):
        label = f"grid {path}: scenarios[{index}]"
        combos = [dict(zip(parameters, values)) for values in itertools.product(*parameters.values())]
        for combo in combos:
            cell_document = _with_values(document, combo, label)
            try:
                scenario = parse_scenario(cell_document, source)
            except UserError as err:
                where = f" with {_show_combo(combo)}" if combo else ""
                raise GridError(f"{label}{where}: {err}") from None
            for noise_ms in noise_levels:
                for sample in range(1, top["samples"] + 1) if noise_ms else [0]:
                    for scheduler in schedulers or scenario.schedulers:
                        cells.append(Cell(scenario.name, str(source), scheduler, combo, cell_document,
                                          top["alone_runs"], noise_ms, sample, top["rescheduling"]))
    return Grid(top["name"] or Path(path).stem, list(parameters), cells, top["description"])


def _parameters(spec: dict[str, Any]) -> dict[str, list[Any]]:
    """Each parameter's values, a value listed twice (``[0.3, 0.3]``, ``[1, 1.0]``) kept once: the same
    cell twice would run twice under one key."""
    out: dict[str, list[Any]] = {}
    for path, values in spec.items():
        name = f"parameters.{path}"
        if not path or any(not part for part in path.split(".")):
            raise FieldError(name, "must be a dotted path such as jobs.0.multi_tenant.load")
        if not isinstance(values, list) or not values:
            raise FieldError(name, f"must be a non-empty array of values, got {show(values)}")
        kept: dict[str, Any] = {}
        for value in values:
            kept.setdefault(_same_value(value), value)
        out[path] = list(kept.values())
    return out


def _same_value(value: Any) -> str:
    """What makes two parameter values the same cell: numbers by value (1 and 1.0), anything else by its
    JSON text with keys sorted."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    return json.dumps(value, sort_keys=True)


def _listed_schedulers(document: Any) -> list[Any]:
    """The schedulers a scenario document lists (its loader's default when it lists none); only counted
    here, the loader checks them."""
    listed = document.get("schedulers") if isinstance(document, dict) else None
    return listed if isinstance(listed, list) and listed else list(DEFAULT_SCHEDULERS)


def _scenario_source(name: str, base: Path, label: str) -> Path:
    """A scenario named in a grid: a bundled name, or a path relative to the grid file."""
    candidate = base / name
    try:
        return resolve(str(candidate) if path_kind(candidate, "scenario file") == "file" else name)
    except UserError as err:
        raise GridError(f"{label}: {err}") from None


def _with_values(document: dict[str, Any], combo: dict[str, Any], label: str) -> dict[str, Any]:
    """A copy of ``document`` with each dotted path of ``combo`` set to its value."""
    out = copy.deepcopy(document)
    for path, value in combo.items():
        parts = path.split(".")
        node: Any = out
        for depth, part in enumerate(parts[:-1]):
            node = _step(node, part, ".".join(parts[: depth + 1]), label, path)
        last = parts[-1]
        if isinstance(node, list):
            _step(node, last, path, label, path)
            node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise GridError(f"{label}: parameter {path}: {'.'.join(parts[:-1])} is not an object or array")
    return out


def _step(node: Any, part: str, where: str, label: str, path: str) -> Any:
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise GridError(f"{label}: parameter {path}: the scenario has no {where}")


def _show_combo(combo: dict[str, Any]) -> str:
    return ", ".join(f"{path}={show(value)}" for path, value in combo.items())
