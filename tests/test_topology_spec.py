"""The fabric as the controller learns it: a small JSON file naming the topology, rebuilt from the core, and
one clear error for every way it can be wrong."""

from __future__ import annotations

import pytest

from controller.topology_spec import SpecError, load_spec, topology_from_spec, write_spec
from echelonflow.topology import leaf_spine


def test_spec_round_trip_and_errors(tmp_path):
    path = str(tmp_path / "t.json")
    write_spec(leaf_spine(1e6, leaves=2, spines=2, hosts_per_leaf=1), path)
    topo = load_spec(path)
    assert (topo.kind, topo.params, len(topo.hosts)) == ("leafspine", {"leaves": 2, "spines": 2,
                                                                       "hosts_per_leaf": 1}, 2)
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_spec(str(tmp_path / "bad.json"))
    with pytest.raises(SpecError, match="unknown topology 'ring'"):
        topology_from_spec({"kind": "ring", "rate_bps": 1e6})
    with pytest.raises(SpecError, match="unknown field"):
        topology_from_spec({"kind": "fattree", "rate_bps": 1e6, "colour": 1})
    with pytest.raises(SpecError, match="topology spec: rate_bps: missing"):
        topology_from_spec({"kind": "fattree"})
