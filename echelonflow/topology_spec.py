"""The one topology spec: what names a topology, however it is given.

A :class:`TopologySpec` is a topology's kind, its builder's parameters, its link rate and its MTU; it
builds the very same :class:`~echelonflow.topology.Topology` everywhere, so the simulator, the controller
and the Mininet fabric agree on ports, dpids, host addresses and the MTU by construction.  It comes from
JSON (:meth:`TopologySpec.from_json`: the controller's spec file, an agent's run spec), from the
command-line options every command that builds a topology takes (:func:`add_topology_arguments`,
:meth:`TopologySpec.from_args`), or from a built topology (:meth:`TopologySpec.of`), and goes back to
JSON with :meth:`TopologySpec.to_json`:
``{"kind": ..., "params": {...}, "rate_bps": ..., "mtu_bytes": ...}``.

Pure and kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from echelonflow.errors import UserError
from echelonflow.fields import Field, FieldError, mapping, ranged, read, text
from echelonflow.fileio import read_json
from echelonflow.limits import RATE_BPS
from echelonflow.topology import BUILDERS, DEFAULT_MTU_BYTES, Topology, TopologyError, build


class TopologySpecError(UserError):
    """A topology spec that is missing or cannot be turned into a topology."""


#: The JSON form's fields (``mtu_bytes``: absent, the default MTU; null, idealised links; build() checks it).
SPEC_FIELDS = (Field("kind", text(), required=True), Field("params", mapping(), default={}),
               Field("rate_bps", ranged(RATE_BPS, "a rate in bit/s"), required=True),
               Field("mtu_bytes", default=DEFAULT_MTU_BYTES))

#: The builders' parameters as command-line options: (option, parameter, type, default, kinds, help).
_OPTIONS = (
    ("--k", "k", int, 4, ("fattree",), "fat-tree arity (even, >= 2)"),
    ("--leaves", "leaves", int, 4, ("leafspine",), "leaf-spine: leaf switches"),
    ("--spines", "spines", int, 2, ("leafspine",), "leaf-spine: spine switches"),
    ("--hosts-per-leaf", "hosts_per_leaf", int, 4, ("leafspine",), "leaf-spine: hosts per leaf"),
    ("--hosts-per-side", "hosts_per_side", int, 2, ("dumbbell",), "dumbbell: hosts per side"),
    ("--hosts", "hosts", int, 16, ("bigswitch",), "bigswitch: hosts on the one switch"),
    ("--oversubscription", "oversubscription", float, 1.0, ("fattree", "leafspine"),
     "fattree/leafspine: links above the edge/leaf layer run at rate / this"),
)


@dataclass(frozen=True)
class TopologySpec:
    """A topology by name: ``build()`` gives it (see the module docstring for where specs come from)."""

    kind: str
    rate_bps: float
    params: dict[str, Any] = field(default_factory=dict)
    mtu_bytes: int | None = DEFAULT_MTU_BYTES  # None: idealised links (payload only)

    def build(self) -> Topology:
        """The topology; :class:`~echelonflow.topology.TopologyError` if kind or parameters are bad.
        An ``mtu_bytes`` among the parameters (a scenario's flat topology object) wins over the field."""
        taken = [name for name in ("kind", "rate_bps") if name in self.params]
        if taken:  # build() would get it twice: a TypeError traceback in the controller's start
            raise TopologyError(f"topology {self.kind!r}: {taken[0]!r} is the spec's own field, not one "
                                "of the builder's parameters")
        return build(self.kind, self.rate_bps, **{"mtu_bytes": self.mtu_bytes, **self.params})

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": dict(self.params), "rate_bps": self.rate_bps,
                "mtu_bytes": self.mtu_bytes}

    @classmethod
    def of(cls, topology: Topology) -> TopologySpec:
        """The spec that builds ``topology`` again."""
        return cls(topology.kind, topology.rate_bps, dict(topology.params), topology.mtu_bytes)

    @classmethod
    def from_json(cls, doc: Any) -> TopologySpec:
        """The spec a JSON object gives (its fields checked; kind and parameters are checked by
        :meth:`build`, :func:`topology_from_json` does both)."""
        fields = read(doc, SPEC_FIELDS, what="a JSON object")
        return cls(fields["kind"], fields["rate_bps"], fields["params"], fields["mtu_bytes"])

    @classmethod
    def from_args(cls, args: Any) -> TopologySpec:
        """The spec :func:`add_topology_arguments`'s options describe (the kind's own options only)."""
        if not args.rate_mbps > 0:
            raise TopologyError(f"--rate-mbps must be positive, got {args.rate_mbps}")
        params = {param: getattr(args, param) for _o, param, _t, _d, kinds, _h in _OPTIONS
                  if args.topology in kinds}
        return cls(args.topology, args.rate_mbps * 1e6, params)


def add_topology_arguments(parser: Any, positional: bool = False) -> None:
    """The options every command that builds a topology takes (``echelon controller``, ``fabric up``)."""
    kinds = ", ".join(sorted(BUILDERS))
    if positional:
        parser.add_argument("topology", help=kinds)
    else:
        parser.add_argument("--topology", default="fattree", help=f"{kinds} (default fattree)")
    for option, _param, kind, default, _kinds, help_text in _OPTIONS:
        parser.add_argument(option, type=kind, default=default, help=f"{help_text} (default {default})")
    parser.add_argument("--rate-mbps", type=float, default=10.0, help="link rate in Mbit/s (default 10)")


def topology_from_arguments(args: Any) -> Topology:
    """The topology :func:`add_topology_arguments`'s options describe; :class:`TopologyError` if bad."""
    return TopologySpec.from_args(args).build()


def topology_from_json(doc: Any, source: str = "topology spec") -> Topology:
    """The topology a JSON spec names; every problem is one :class:`TopologySpecError` naming ``source``, the
    field and the value."""
    try:
        return TopologySpec.from_json(doc).build()
    except (FieldError, TopologyError) as exc:
        raise TopologySpecError(f"{source}: {exc}") from None


def write_spec(topology: Topology, path: str) -> None:
    """``topology``'s spec as a JSON file (what the launcher hands the controller)."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(TopologySpec.of(topology).to_json(), handle, indent=2, sort_keys=True)
        handle.write("\n")


def load_spec(path: str) -> Topology:
    """The topology the spec file at ``path`` names."""
    return topology_from_json(read_json(path, "topology spec", TopologySpecError), source=path)
