"""The "Adding a scheduler" recipe works: the example policy of ``docs/examples`` runs, unchanged, in the
simulator and in the controller's scheduling service, through the one entry point ``Scheduler.decide``."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.config import ControllerConfig
from controller.registry import Registry
from controller.service import SchedulingService
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import SCHEDULERS
from echelonflow.topology import two_hosts
from simulator.engine import simulate
from tests.helpers import EXAMPLE_SCHEDULER, RecordingSink, example_scheduler_class, overcommit_class


def test_the_example_is_short() -> None:
    code = [line for line in Path(EXAMPLE_SCHEDULER).read_text().splitlines() if line.strip()]
    assert len(code) <= 40


def test_the_example_runs_in_the_simulator() -> None:
    """Fig. 2 by hand: at t=2 act0 has 1 B.s left against act1's 2, so it goes first and ends at 3;
    act1 and act2 then tie at 2 B.s and go in id order (5, 7): worker 2 ends at 8, as echelon's."""
    scenario = load_scenario("fig2")
    result = simulate(scenario.topology, scenario.jobs, example_scheduler_class()())  # invariants checked
    finishes = sorted(flow.finish_s for flow in result.flows.values())
    assert finishes == pytest.approx([3.0, 5.0, 7.0], abs=0.05)
    assert result.jobs["fig2"].completion_s == pytest.approx(8.0, abs=0.05)
    gpipe_ring = load_scenario("fattree-gpipe-ring")
    simulate(gpipe_ring.topology, gpipe_ring.jobs, example_scheduler_class()(), alone_runs=False)


def test_the_example_runs_in_the_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registered by name, selected in the controller's service like any scheduler: the smaller flow
    gets the link and the top class, the larger one waits in a lower class."""
    monkeypatch.setitem(SCHEDULERS, "smallest-flow-first", example_scheduler_class())
    registry = Registry(two_hosts(8e6))
    port = RecordingSink()
    service = SchedulingService(registry, port, ControllerConfig(check_decisions=True), now=lambda: 1.0)
    registry.add_job("j")
    flows = [{"flow_id": name, "src": "h1", "dst": "h2", "size_bytes": size}
             for name, size in (("big", 2_000_000), ("small", 1_000))]
    registry.add_echelon("j", "e", flows=flows)
    service.set_scheduler("smallest-flow-first")
    for port_number, flow in ((5001, "big"), (5002, "small")):
        registry.flow_started("j", flow, port_number, 80, 1.0)
    report = service.reschedule("test")
    assert report.error == "" and report.installs == 2
    installs = {call[1]: call for call in port.take() if call[0] == "install"}
    assert installs["j/small"][4] < installs["j/big"][4]  # the smaller flow's class is more urgent
    assert service.state.decision.rate_bps["j/small"] > 0 == service.state.decision.rate_bps["j/big"]


def test_check_decisions_keeps_a_broken_policy_out_of_the_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's debug switch runs the simulator's invariants on every decision: a policy that
    gives a link twice its capacity is reported and nothing it decided is installed; without the switch
    the same decision would have been pushed."""

    monkeypatch.setitem(SCHEDULERS, "overcommit", overcommit_class())
    for check in (True, False):
        registry = Registry(two_hosts(8e6))
        port = RecordingSink()
        service = SchedulingService(registry, port, ControllerConfig(check_decisions=check), now=lambda: 1.0)
        registry.add_job("j")
        registry.add_echelon("j", "e", flows=[{"flow_id": "a", "src": "h1", "dst": "h2", "size_bytes": 1000}])
        service.set_scheduler("overcommit")
        registry.flow_started("j", "a", 5001, 80, 1.0)
        report = service.reschedule("test")
        if check:
            assert "over capacity" in report.error and report.installs == 0 and port.take() == []
        else:
            assert report.error == "" and report.installs == 1
