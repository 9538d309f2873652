"""How the controller learns the fabric: a small JSON file naming the topology, rebuilt from the core.

The file holds only ``{"kind": ..., "params": {...}, "rate_bps": ..., "mtu_bytes": ...}``; the controller
rebuilds the very same :class:`~echelonflow.topology.Topology` the simulator and the Mininet fabric use,
so ports, dpids, host addresses and the MTU agree by construction.  Its path comes from the
``ECHELON_TOPOLOGY`` environment variable (the launcher sets it) because os-ken and Ryu parse their own
command line.
"""

from __future__ import annotations

import json
import os
from typing import Any

from echelonflow.errors import UserError
from echelonflow.fileio import read_json
from echelonflow.topology import Topology, TopologyError, build

ENV_VAR = "ECHELON_TOPOLOGY"


class SpecError(UserError):
    """A topology spec file that is missing or cannot be turned into a topology."""


def spec_of(topology: Topology) -> dict[str, Any]:
    return {"kind": topology.kind, "params": dict(topology.params), "rate_bps": topology.rate_bps,
            "mtu_bytes": topology.mtu_bytes}


def write_spec(topology: Topology, path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(spec_of(topology), handle, indent=2, sort_keys=True)
        handle.write("\n")


def topology_from_spec(spec: Any, source: str = "topology spec") -> Topology:
    """Build the topology a spec describes; every problem names the field and the value."""
    if not isinstance(spec, dict):
        raise SpecError(f"{source}: expected a JSON object, got {type(spec).__name__}")
    unknown = sorted(set(spec) - {"kind", "params", "rate_bps", "mtu_bytes"})
    if unknown:
        raise SpecError(f"{source}: unknown field(s) {', '.join(unknown)}; "
                        "expected kind, params, rate_bps, mtu_bytes")
    for field in ("kind", "rate_bps"):
        if field not in spec:
            raise SpecError(f"{source}: missing field {field!r}")
    params = spec.get("params", {})
    if not isinstance(params, dict):
        raise SpecError(f"{source}: 'params' must be an object, got {params!r}")
    try:
        if "mtu_bytes" in spec:
            return build(spec["kind"], spec["rate_bps"], mtu_bytes=spec["mtu_bytes"], **params)
        return build(spec["kind"], spec["rate_bps"], **params)
    except TopologyError as exc:
        raise SpecError(f"{source}: {exc}") from None


def load_spec(path: str | None = None) -> Topology:
    """The topology named by ``path`` (default: the ``ECHELON_TOPOLOGY`` environment variable)."""
    path = path or os.environ.get(ENV_VAR, "")
    if not path:
        raise SpecError(f"no topology spec: set {ENV_VAR} to a JSON file (the launcher writes one)")
    spec = read_json(path, "topology spec", SpecError)
    return topology_from_spec(spec, source=path)
