"""Links and switches going down: the shared path choice, the fault specs and the simulator's replay.

The fabric side (a real link taken down under a real TCP flow) is tests/test_faults.py; under a whole
emulation, tests/test_reroute_fabric.py.
"""

from __future__ import annotations

import json

import pytest

from cli.main import main
from controller import flowmods as fm
from controller import views
from controller.config import ControllerConfig
from controller.enforcement import Enforcer, FlowMatch
from controller.registry import Registry
from controller.routing import Router
from controller.service import SchedulingService
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
from tests.controller_helpers import Recorder

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
    table, f = run.table, run.flow_number("a/f")
    now = [run.link_ids[i] for i in table.path_links[table.path_ptr[f]:table.path_ptr[f + 1]]]
    links = LinkState()
    links.set_link(a, b, up=False)
    assert now == list(Topology.links_of(topo.path_for("h1", "h16", "a/f", links)))
    assert (a, b) not in now and (b, a) not in now
    assert run.finish_of("a/f") == pytest.approx(2.0)  # alone: the new path is as fast


# ----------------------------------------------------------------------------- the controller's logic
def _agg_core_link(path) -> tuple[str, str]:
    return next((a, b) for a, b in _switch_links(path) if a.startswith("a") and b.startswith("c"))


def _cookie_rules(rec: Recorder, cookie: int) -> set[int]:
    return {dpid for dpid, table in rec.rules.items() for r in table.values() if r.cookie == cookie}


def test_router_moves_a_pair_route_off_a_down_link_and_back() -> None:
    topo = fattree(10e6, 4)
    router, rec = Router(topo), Recorder()
    ip = {h: topo.graph.nodes[h]["ip"] for h in ("h1", "h16")}
    for dpid, ops in router.on_ipv4(topo.graph.nodes["e1"]["dpid"], 1, ip["h1"], ip["h16"], b"", 0.0).items():
        rec(dpid, [op for op in ops if isinstance(op, fm.FlowRule)])
    packet = {"eth_type": fm.ETH_TYPE_IPV4, "ipv4_src": ip["h1"], "ipv4_dst": ip["h16"]}
    before = tuple(rec.walk(topo, "h1", packet))
    assert before == topo.pair_path("h1", "h16")
    a, b = _agg_core_link(before)
    router.links.set_link(a, b, up=False)
    for dpid, ops in router.reroute().items():
        rec(dpid, ops)
    after = tuple(rec.walk(topo, "h1", packet))
    assert (a, b) not in Topology.links_of(after) and after == router.routes[("h1", "h16")]
    back = tuple(rec.walk(topo, "h16", {**packet, "ipv4_src": ip["h16"], "ipv4_dst": ip["h1"]}))
    assert router.links.passes(back)
    route_cookies = {r.cookie for table in rec.rules.values() for r in table.values()}
    for cookie in route_cookies:  # every switch holding a pair's rule is on that pair's path now
        holders = {router.switch_by_dpid[d] for d in _cookie_rules(rec, cookie)}
        assert holders <= set(after) | set(back)
    assert router.reroute() == {}  # nothing changed since
    router.links.set_link(a, b, up=True)
    for dpid, ops in router.reroute().items():
        rec(dpid, ops)
    assert tuple(rec.walk(topo, "h1", packet)) == before


def test_service_moves_an_enforced_flow_with_its_meter_and_the_registry_path() -> None:
    topo = fattree(10e6, 4)
    rec = Recorder()
    registry = Registry(topo)
    enforcer = Enforcer(topo, rec, ControllerConfig(queues=4))
    service = SchedulingService(registry, enforcer, now=lambda: 1.0)
    registry.add_job("j")
    registry.add_echelon("j", "e", flows=[{"flow_id": "f", "src": "h1", "dst": "h16", "size_bytes": 10**7}])
    registry.flow_started("j", "f", 40000, 5201, 1.0)
    service.reschedule("arrival")
    match = FlowMatch(*registry.five_tuple("j/f"))
    live = enforcer.live_flows()["j/f"]
    assert live.meter_id is not None and live.path == registry.path_of("j/f")
    forward = dict(match.fields())
    assert tuple(rec.walk(topo, "h1", forward)) == live.path
    a, b = _agg_core_link(live.path)
    registry.links.set_link(a, b, up=False)
    moved, report = service.on_links_changed()
    assert moved == ["j/f"] and report.reason == "reroute"
    new = enforcer.live_flows()["j/f"]
    path = views.flow_view(registry, registry.flows["j/f"])["path"]
    assert tuple(path) == new.path != live.path and registry.links.passes(new.path)
    assert tuple(rec.walk(topo, "h1", forward)) == new.path
    assert tuple(rec.walk(topo, "h16", dict(match.reversed().fields()))) == tuple(reversed(new.path))
    first = topo.graph.nodes["e1"]["dpid"]
    assert new.meter_id == live.meter_id and new.meter_id in rec.meters[first]
    cookie = fm.make_cookie(fm.COOKIE_ENFORCE, new.number * 2)
    assert {Router(topo).switch_by_dpid[d] for d in _cookie_rules(rec, cookie)} == set(new.path[1:-1])
    assert service.on_links_changed()[0] == []  # nothing changed since
    registry.links.set_link(a, b, up=True)
    assert service.on_links_changed()[0] == ["j/f"]
    assert enforcer.live_flows()["j/f"].path == live.path == tuple(rec.walk(topo, "h1", forward))


def test_emulate_refuses_a_bad_fault_with_one_line_and_status_2(capsys) -> None:
    for spec, words in (("link:a1@3s", "two node names"), ("link:h1-e1@1s", "without a path"),
                        ("cable:x@1s", "unknown kind 'cable'")):
        assert main(["emulate", "fattree-gpipe-ring", "--fault", spec]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err


def test_simulate_replays_a_scenario_s_events(tmp_path, capsys) -> None:
    path = _scenario(tmp_path, [{"at_s": 0.05, "link_down": ["a1", "e1"]},
                                {"at_s": 0.1, "link_down": ["a2", "c3"]}])
    assert main(["simulate", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"]
