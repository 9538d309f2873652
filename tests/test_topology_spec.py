"""The one topology spec: from JSON (the controller's spec file), from the command line and from a built
topology, rebuilt from the core, and one clear error for every way it can be wrong."""

from __future__ import annotations

import argparse

import pytest

from echelonflow.topology import DEFAULT_MTU_BYTES, leaf_spine
from echelonflow.topology_spec import (
    TopologySpec,
    TopologySpecError,
    add_topology_arguments,
    load_spec,
    topology_from_json,
    write_spec,
)


def test_spec_round_trip_and_errors(tmp_path):
    path = str(tmp_path / "t.json")
    write_spec(leaf_spine(1e6, leaves=2, spines=2, hosts_per_leaf=1), path)
    topo = load_spec(path)
    assert (topo.kind, topo.params, len(topo.hosts)) == ("leafspine", {"leaves": 2, "spines": 2,
                                                                       "hosts_per_leaf": 1}, 2)
    with pytest.raises(TopologySpecError, match="cannot read"):
        load_spec(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(TopologySpecError, match="not valid JSON"):
        load_spec(str(tmp_path / "bad.json"))
    with pytest.raises(TopologySpecError, match="unknown topology 'ring'"):
        topology_from_json({"kind": "ring", "rate_bps": 1e6})
    with pytest.raises(TopologySpecError, match="unknown field"):
        topology_from_json({"kind": "fattree", "rate_bps": 1e6, "colour": 1})
    with pytest.raises(TopologySpecError, match="topology spec: rate_bps: missing"):
        topology_from_json({"kind": "fattree"})


def test_one_spec_from_json_from_arguments_and_from_a_topology():
    """The controller's spec file, the command line and a built topology give the same spec, and it
    builds the same topology again."""
    parser = argparse.ArgumentParser()
    add_topology_arguments(parser)
    args = parser.parse_args(["--topology", "leafspine", "--leaves", "2", "--spines", "2",
                              "--hosts-per-leaf", "1", "--rate-mbps", "1"])
    from_args = TopologySpec.from_args(args)
    assert from_args.to_json() == {"kind": "leafspine", "rate_bps": 1e6, "mtu_bytes": DEFAULT_MTU_BYTES,
                                   "params": {"leaves": 2, "spines": 2, "hosts_per_leaf": 1,
                                              "oversubscription": 1.0}}
    topo = from_args.build()
    spec = TopologySpec.of(topo)
    assert spec == TopologySpec.from_json(spec.to_json())
    again = spec.build()
    assert again.capacity_bps() == topo.capacity_bps() and again.name == topo.name
    idealised = topology_from_json({"kind": "two_hosts", "rate_bps": 1e6, "mtu_bytes": None})
    assert idealised.mtu_bytes is None and TopologySpec.of(idealised).to_json()["mtu_bytes"] is None


@pytest.mark.parametrize("params, name", [({"rate_bps": 5}, "rate_bps"), ({"kind": 4}, "kind")])
def test_a_spec_field_among_the_parameters_is_one_line(params, name):
    """``{"params": {"rate_bps": 5}}`` in a spec file, or ``ECHELON_TOPOLOGY_PARAMS='{"rate_bps": 5}'`` for
    the controller, reached build() twice over: a TypeError traceback where the controller starts."""
    from controller.config import ConfigError, ControllerConfig

    own_field = f"topology 'two_hosts': '{name}' is the spec's own field"
    with pytest.raises(TopologySpecError, match=f"topology spec: {own_field}"):
        topology_from_json({"kind": "two_hosts", "rate_bps": 1e7, "params": params})
    with pytest.raises(ConfigError, match=own_field):
        ControllerConfig(topology="two_hosts", topology_params=params).build_topology()
