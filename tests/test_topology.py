"""Topology kinds for evaluation: the big switch (Coflow-Benchmark model) and oversubscribed Clos fabrics."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from echelonflow.errors import UserError
from echelonflow.topology import Topology, TopologyError, build
from echelonflow.topology_spec import (
    TopologySpec,
    add_topology_arguments,
    topology_from_arguments,
    topology_from_json,
)


def test_bigswitch_is_one_switch_with_one_path_per_pair() -> None:
    topo = build("bigswitch", 2**30, hosts=150)
    assert topo.name == "bigswitch150" and topo.switches == ["s1"]
    assert topo.hosts[0] == "h1" and topo.hosts[-1] == "h150" and len(topo.hosts) == 150
    assert topo.equal_cost_paths("h1", "h150") == [("h1", "s1", "h150")]
    capacity = topo.capacity_bps()
    assert len(capacity) == 300 and set(capacity.values()) == {2.0**30}
    assert len({topo.graph.nodes[h]["ip"] for h in topo.hosts}) == 150


@pytest.mark.parametrize("hosts", [1, 0, -3, 2.5, True, "4"])
def test_bigswitch_rejects_bad_host_counts(hosts) -> None:
    with pytest.raises(TopologyError):
        build("bigswitch", 1e9, hosts=hosts)


def _rates_by_layer(topo: Topology) -> dict[tuple[str, str], set[float]]:
    layer = {n: d.get("layer", "host") for n, d in topo.graph.nodes(data=True)}
    out: dict[tuple[str, str], set[float]] = {}
    for a, b, data in topo.graph.edges(data=True):
        out.setdefault(tuple(sorted((layer[a], layer[b]))), set()).add(data["rate_bps"])
    return out


def test_fattree_oversubscription_divides_the_upper_links() -> None:
    topo = build("fattree", 10e6, k=4, oversubscription=4)
    assert topo.name == "fattree4-os4" and topo.params == {"k": 4, "oversubscription": 4}
    assert _rates_by_layer(topo) == {
        ("edge", "host"): {10e6}, ("agg", "edge"): {2.5e6}, ("agg", "core"): {2.5e6}}
    # an edge switch's hosts can send 4x what its uplinks carry
    edge = topo.host_switch("h1")
    down = sum(topo.graph.edges[edge, h]["rate_bps"] for h in topo.graph.neighbors(edge) if h.startswith("h"))
    up = sum(topo.graph.edges[edge, a]["rate_bps"] for a in topo.graph.neighbors(edge) if a.startswith("a"))
    assert down / up == pytest.approx(4.0)
    plain = build("fattree", 10e6, k=4)
    assert plain.name == "fattree4" and plain.params == {"k": 4}
    assert build("fattree", 10e6, k=4, oversubscription=1).name == "fattree4"


def test_leafspine_oversubscription_and_the_spec_round_trip() -> None:
    topo = build("leafspine", 10e6, leaves=2, spines=2, hosts_per_leaf=4, oversubscription=2.5)
    assert _rates_by_layer(topo) == {("host", "leaf"): {10e6}, ("leaf", "spine"): {4e6}}
    again = topology_from_json(TopologySpec.of(topo).to_json())
    assert again.name == topo.name and again.capacity_bps() == topo.capacity_bps()
    big = topology_from_json(TopologySpec.of(build("bigswitch", 1e9, hosts=8)).to_json())
    assert big.name == "bigswitch8"


@pytest.mark.parametrize("ratio", [0.5, 0, -1, float("inf"), float("nan"), True, "4"])
def test_bad_oversubscription_is_refused(ratio) -> None:
    with pytest.raises(TopologyError, match="oversubscription"):
        build("fattree", 10e6, k=4, oversubscription=ratio)


def _parsed(argv: list[str], positional: bool = False) -> Topology:
    parser = argparse.ArgumentParser()
    add_topology_arguments(parser, positional)
    return topology_from_arguments(parser.parse_args(argv))


@pytest.mark.parametrize("argv, built", [
    ([], ("fattree", 10e6, {"k": 4})),
    (["--topology", "leafspine", "--leaves", "3", "--spines", "2", "--hosts-per-leaf", "2",
      "--oversubscription", "2", "--rate-mbps", "20"],
     ("leafspine", 20e6, {"leaves": 3, "spines": 2, "hosts_per_leaf": 2, "oversubscription": 2.0})),
    (["--topology", "dumbbell", "--hosts-per-side", "3", "--k", "8"],
     ("dumbbell", 10e6, {"hosts_per_side": 3})),
    (["--topology", "bigswitch", "--hosts", "5"], ("bigswitch", 10e6, {"hosts": 5})),
    (["--topology", "two_hosts"], ("two_hosts", 10e6, {})),
])
def test_topology_options_build_what_the_builders_build(argv, built) -> None:
    """One option set for every command that builds a topology; options of other kinds are ignored."""
    kind, rate_bps, params = built
    expected = build(kind, rate_bps, **params)
    topo = _parsed(argv)
    assert topo.name == expected.name and topo.params == expected.params
    assert topo.capacity_bps() == expected.capacity_bps()
    assert _parsed([kind, *argv[2:]], positional=True).name == expected.name


@pytest.mark.parametrize("argv, problem", [
    (["--rate-mbps", "0"], "--rate-mbps must be positive, got 0.0"),
    (["--rate-mbps", "nan"], "--rate-mbps must be positive"),
    (["--k", "3"], "k"),
    (["--topology", "torus"], "torus"),
])
def test_bad_topology_options_are_one_line_errors(argv, problem) -> None:
    with pytest.raises(TopologyError, match=re.escape(problem)) as caught:
        _parsed(argv)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, UserError)  # so every command prints it as one line, exit 2


@pytest.mark.parametrize("argv, problem", [
    (["fabric", "up", "torus"], "unknown topology 'torus'"),
    (["controller", "--topology", "fattree", "--k", "3"], "fat-tree k must be an even integer >= 2, got 3"),
])
def test_commands_that_build_a_topology_refuse_a_bad_one_in_one_line(argv, problem) -> None:
    echelon = str(Path(sys.executable).parent / "echelon")
    proc = subprocess.run([echelon, *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("echelon: error: ") and proc.stderr.count("\n") == 1
    assert problem in proc.stderr
