"""Links and switches going down: the shared path choice, the fault specs and the simulator's replay.

The fabric side (a real link taken down under a real TCP flow) is tests/test_reroute_fabric.py.
"""

from __future__ import annotations

import json

import pytest

from echelonflow.echelon import echelons_of
from echelonflow.errors import ScenarioError
from echelonflow.faults import FaultEvent, FaultSpecError, parse_fault, read_events
from echelonflow.fields import FieldError
from echelonflow.linkstate import LinkState
from echelonflow.model import FlowTask, Job
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from echelonflow.topology import Topology, fattree
from simulator.engine import _Run, simulate

RATE_BPS = 10e6
SIZE_BYTES = 2_500_000  # 2 s alone at 10 Mbit/s on idealised links


def _topology() -> Topology:
    topo = fattree(RATE_BPS, 4)
    topo.mtu_bytes = None  # payload only: round numbers
    return topo


def _switch_links(path) -> list[tuple[str, str]]:
    return [link for link in Topology.links_of(path) if not link[0].startswith("h") and
            not link[1].startswith("h")]


# ----------------------------------------------------------------------------- path choice
def test_only_flows_on_a_down_link_move_and_a_repair_moves_them_back() -> None:
    topo = _topology()
    keys = [f"j/f{i}" for i in range(40)]
    pinned = {k: topo.path_for("h1", "h16", k) for k in keys}
    a, b = _switch_links(pinned[keys[0]])[1]  # an agg-core link of the first flow
    links = LinkState()
    assert links.set_link(a, b, up=False)
    assert not links.set_link(b, a, up=False)  # already down: no change, version kept
    moved = {k: topo.path_for("h1", "h16", k, links) for k in keys}
    for key in keys:
        crosses = (a, b) in Topology.links_of(pinned[key])
        assert (moved[key] != pinned[key]) == crosses
        assert links.passes(moved[key])
        assert moved[key] in topo.equal_cost_paths("h1", "h16")
    assert links.set_link(a, b, up=True) and links.clear
    assert {k: topo.path_for("h1", "h16", k, links) for k in keys} == pinned


def test_one_port_down_takes_the_link_down_both_ways_and_a_down_switch_its_paths() -> None:
    topo = _topology()
    links = LinkState()
    links.set_port("a1", "e1", up=False)  # only a1's end reported
    assert not links.link_up("e1", "a1") and not links.link_up("a1", "e1")
    assert links.describe() == "links a1-e1"
    links.set_port("a1", "e1", up=True)
    links.set_switch("c1", up=False)
    for path in topo.equal_cost_paths("h1", "h16"):
        assert links.passes(path) == ("c1" not in path)
    assert "c1" not in topo.pair_path("h1", "h16", links)


def test_no_path_left_keeps_the_pinned_one() -> None:
    topo = _topology()
    links = LinkState()
    links.set_link("h1", "e1", up=False)
    assert topo.path_for("h1", "h16", "j/f") == topo.path_for("h1", "h16", "j/f", links)


# ----------------------------------------------------------------------------- fault specs
def test_fault_specs_parse_and_bad_ones_get_one_line() -> None:
    topo = _topology()
    assert parse_fault("link:a1-e1@3s", topo) == [FaultEvent(3.0, "link", ("a1", "e1"))]
    assert parse_fault("switch:c1@500ms..2.5s", topo) == [
        FaultEvent(0.5, "switch", ("c1",)), FaultEvent(2.5, "switch", ("c1",), up=True)]
    for bad, words in (("link:a1@3s", "two node names"), ("link:a1-e9@3s", "no node 'e9'"),
                       ("link:a1-c3@3s", "no link a1-c3"), ("link:a1-e1@soon", "a time is seconds"),
                       ("flood:a1@1s", "unknown kind 'flood'"), ("link:a1-e1", "KIND:TARGET@TIME"),
                       ("switch:h1@1s", "no switch 'h1'"), ("link:a1-e1@3s..2s", "come back after")):
        with pytest.raises(FaultSpecError) as err:
            parse_fault(bad, topo)
        assert words in str(err.value) and "\n" not in str(err.value), bad


def test_scenario_events_read_in_time_order_and_refuse_bad_entries() -> None:
    topo = _topology()
    events = read_events([{"at_s": 5, "link_up": ["a1", "e1"]}, {"at_s": 3, "link_down": ["a1", "e1"]},
                          {"at_s": 4, "switch_down": "c2"}], topo)
    assert [(e.at_s, e.kind, e.up) for e in events] == [(3, "link", False), (4, "switch", False),
                                                       (5, "link", True)]
    assert read_events([e.to_json() for e in events], topo) == events
    for bad, field in (([{"at_s": 1}], "events[0]"),
                       ([{"at_s": -1, "link_down": ["a1", "e1"]}], "events[0].at_s"),
                       ([{"at_s": 1, "link_down": ["a1"]}], "events[0].link_down"),
                       ([{"at_s": 1, "link_down": ["a1", "c3"]}], "events[0].link_down"),
                       ([{"at_s": 1, "link_down": ["a1", "e1"], "switch_up": "c1"}], "events[0]"),
                       ([{"at_s": 1, "cable_cut": "x"}], "events[0].cable_cut"), ({}, "events")):
        with pytest.raises(FieldError) as err:
            read_events(bad, topo)
        assert err.value.field == field, bad


def _scenario(tmp_path, events) -> str:
    doc = {"topology": {"kind": "fattree", "k": 4, "rate_mbps": 10},
           "jobs": [{"id": "j", "generator": "ring_allreduce", "hosts": ["h1", "h5"],
                     "params": {"bytes": 1000000}}], "events": events}
    path = tmp_path / "faulty.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_scenario_carries_events_and_refuses_cutting_a_host_off(tmp_path) -> None:
    scenario = load_scenario(_scenario(tmp_path, [{"at_s": 0.5, "link_down": ["a1", "e1"]}]))
    assert scenario.events == [FaultEvent(0.5, "link", ("a1", "e1"))]
    with pytest.raises(ScenarioError) as err:
        load_scenario(_scenario(tmp_path, [{"at_s": 0.5, "link_down": ["h1", "e1"]}]))
    assert "events: link h1-e1 down at 0.5 s leaves h1 -> h5" in str(err.value)
    with pytest.raises(ScenarioError) as err:
        load_scenario(_scenario(tmp_path, [{"at_s": 0.5, "link_down": "a1-e1"}]))
    assert "events[0].link_down: must be an array" in str(err.value)


# ----------------------------------------------------------------------------- the simulator
def _two_flows(topo: Topology) -> tuple[list[Job], tuple[str, str]]:
    """Two flows from e1 to e3 on disjoint routes, and a link of the first whose loss sends it onto
    the second's route (so the two then share every link above e1)."""
    jobs = [Job("a", {"f": FlowTask("f", "h1", "h5", SIZE_BYTES)}),
            Job("b", {"f": FlowTask("f", "h2", "h6", SIZE_BYTES)})]
    first, second = topo.pair_path("h1", "h5"), topo.pair_path("h2", "h6")
    assert not set(_switch_links(first)) & set(_switch_links(second))
    for a, b in _switch_links(first):
        links = LinkState()
        links.set_link(a, b, up=False)
        if topo.pair_path("h1", "h5", links) == (first[0], *second[1:-1], first[-1]):
            return jobs, (a, b)
    raise AssertionError("no link of the first route moves it onto the second's")


def test_the_simulator_moves_tcp_routes_when_a_link_goes_down_and_back() -> None:
    topo = _topology()
    jobs, (a, b) = _two_flows(topo)

    def finish(events) -> dict[str, float]:
        run = simulate(topo, jobs, get_scheduler("fair"), alone_runs=False, events=events)
        return {job: result.completion_s for job, result in run.jobs.items()}

    assert finish([]) == pytest.approx({"a": 2.0, "b": 2.0})
    down = FaultEvent(1.0, "link", (a, b))
    # from 1 s on the two share the links above e1: 1.25 MB each left at 5 Mbit/s each -> 2 s more
    assert finish([down]) == pytest.approx({"a": 3.0, "b": 3.0})
    # back at 2 s: 0.625 MB each left on their own routes again, at 10 Mbit/s -> 0.5 s more
    assert finish([down, FaultEvent(2.0, "link", (a, b), up=True)]) == pytest.approx({"a": 2.5, "b": 2.5})
    # an event on a link neither uses changes nothing
    assert finish([FaultEvent(1.0, "link", ("a5", "c1"))]) == pytest.approx({"a": 2.0, "b": 2.0})


def test_the_simulator_re_pins_an_enforced_flow_off_a_down_link() -> None:
    topo = _topology()
    job = Job("a", {"f": FlowTask("f", "h1", "h16", SIZE_BYTES)})
    pinned = topo.path_for("h1", "h16", "a/f")
    a, b = _switch_links(pinned)[1]
    scheduler = get_scheduler("echelon")
    run = _Run(topo, [job], scheduler, True, {"a": echelons_of(job)}, [FaultEvent(1.0, "link", (a, b))])
    run.run()
    table, f = run.table, run.flow_of["a/f"]
    now = [run.link_ids[i] for i in table.path_links[table.path_ptr[f]:table.path_ptr[f + 1]]]
    links = LinkState()
    links.set_link(a, b, up=False)
    assert now == list(Topology.links_of(topo.path_for("h1", "h16", "a/f", links)))
    assert (a, b) not in now and (b, a) not in now
    assert run.finish_s["a/f"] == pytest.approx(2.0)  # alone: the new path is as fast
