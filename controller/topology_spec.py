"""How the controller learns the fabric: a small JSON file naming the topology, rebuilt from the core.

The file holds only ``{"kind": ..., "params": {...}, "rate_bps": ..., "mtu_bytes": ...}``; the controller
rebuilds the very same :class:`~echelonflow.topology.Topology` the simulator and the Mininet fabric use,
so ports, dpids, host addresses and the MTU agree by construction.  The launcher writes it and passes its
path as the controller configuration's ``topology_file`` (``ECHELON_TOPOLOGY``, see controller.config).
"""

from __future__ import annotations

import json
from typing import Any

from echelonflow.errors import UserError
from echelonflow.fields import Field, FieldError, mapping, number, read, text
from echelonflow.fileio import read_json
from echelonflow.topology import Topology, TopologyError, build


class SpecError(UserError):
    """A topology spec file that is missing or cannot be turned into a topology."""


def spec_of(topology: Topology) -> dict[str, Any]:
    return {"kind": topology.kind, "params": dict(topology.params), "rate_bps": topology.rate_bps,
            "mtu_bytes": topology.mtu_bytes}


def write_spec(topology: Topology, path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(spec_of(topology), handle, indent=2, sort_keys=True)
        handle.write("\n")


SPEC_FIELDS = (Field("kind", text(), required=True), Field("params", mapping(), default={}),
               Field("rate_bps", number(0.0, above=True, what="a rate in bit/s"), required=True),
               Field("mtu_bytes"))  # build() checks it (absent: the default MTU; null: idealised links)


def topology_from_spec(spec: Any, source: str = "topology spec") -> Topology:
    """Build the topology a spec describes; every problem names the field and the value."""
    try:
        fields = read(spec, SPEC_FIELDS, what="a JSON object")
        if "mtu_bytes" in spec:
            return build(fields["kind"], fields["rate_bps"], mtu_bytes=fields["mtu_bytes"],
                         **fields["params"])
        return build(fields["kind"], fields["rate_bps"], **fields["params"])
    except (FieldError, TopologyError) as exc:
        raise SpecError(f"{source}: {exc}") from None


def load_spec(path: str) -> Topology:
    """The topology the spec file at ``path`` names."""
    return topology_from_spec(read_json(path, "topology spec", SpecError), source=path)
