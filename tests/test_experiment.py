"""An experiment's parts that need no fabric: the scenario an emulation runs (a copy, never the caller's),
the simulated side, the settings a request gives every run, and ``--dilation auto``'s confirmation."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from types import SimpleNamespace

import pytest

from controller.config import ControllerConfig
from echelonflow.errors import UserError
from echelonflow.scenario import load_scenario
from echelonflow.topology import DEFAULT_MTU_BYTES
from emulation.command import with_faults
from emulation.dilation import Dilation, dilated
from emulation.experiment import (
    EmulationRequest,
    base_settings,
    emulate_and_report,
    simulate_side,
    with_real_frames,
)


def test_idealised_links_get_real_frames_in_a_copy_and_the_scenario_is_left_as_it_was():
    scenario = load_scenario("fig2")
    assert scenario.topology.mtu_bytes is None  # the paper's fluid model: payload only
    framed = with_real_frames(scenario)
    assert framed.topology.mtu_bytes == DEFAULT_MTU_BYTES and framed.topology is not scenario.topology
    assert scenario.topology.mtu_bytes is None and framed.jobs == scenario.jobs
    real = load_scenario("fattree-gpipe-ring")
    assert with_real_frames(real) is real  # already framed: nothing to copy


def test_the_simulated_side_counts_wire_bytes_as_the_emulation_does():
    """fig2 with 9000-byte frames takes longer than the paper's 8.5 / 8.0 s by the headers' share."""
    scenario = with_real_frames(load_scenario("fig2"))
    simulated = simulate_side(scenario, EmulationRequest(["fair", "echelon"]))
    assert simulated.mode == "simulate" and [run.scheduler for run in simulated.runs] == ["fair", "echelon"]
    fair, echelon = (run.jobs["fig2"] for run in simulated.runs)
    assert fair.completion_s == pytest.approx(8.544, abs=1e-3) and echelon.completion_s == pytest.approx(
        8.044, abs=1e-3)
    assert fair.lower_bound_s is not None and simulated.timing_noise is None
    noisy = simulate_side(scenario, EmulationRequest(["echelon"], timing_noise_ms=5.0))
    assert noisy.timing_noise["jitter_s"] == 0.005 and list(noisy.timing_noise["schedulers"]) == ["echelon"]


def test_a_live_request_keeps_every_controller_on_the_default_ports_also_when_dilated():
    defaults = ControllerConfig()
    live = base_settings(EmulationRequest(["echelon"], live=True), "runs/x")
    ports = ("api_port", "metrics_port")
    assert [live.controller[p] for p in ports] == [defaults.api_port, defaults.metrics_port]
    assert live.logs_dir == "runs/x"
    _topology, _jobs, slow = dilated(load_scenario("fig2"), live, 4.0, lambda text: None)
    assert [slow.controller[p] for p in ports] == [defaults.api_port, defaults.metrics_port]
    plain = base_settings(EmulationRequest(["echelon"]), "runs/x")
    assert [plain.controller[p] for p in ports] == [0, 0]  # a free port per controller


def test_faults_from_the_command_line_are_added_to_a_new_list_in_time_order():
    scenario = load_scenario("fattree-gpipe-ring")
    events = with_faults(scenario, ["link:a1-e1@3s..6s", "controller@1s"])
    assert [(e.kind, e.at_s, e.up) for e in events] == [("controller", 1.0, False), ("link", 3.0, False),
                                                        ("link", 6.0, True)]
    assert scenario.events == []
    _topology, _jobs, settings = dilated(replace(scenario, events=events),
                                         base_settings(EmulationRequest(["echelon"]), "d"), 2.0,
                                         lambda text: None)
    assert [e.at_s for e in settings.faults] == [2.0, 6.0, 12.0] and [e.at_s for e in events] == [1, 3, 6]


def _run(trusted: bool | None) -> SimpleNamespace:
    reasons = [] if trusted else ["CPU-saturated 83% of the time"]
    return SimpleNamespace(trusted=trusted, fidelity_monitor={"rounds": {"together": {"reasons": reasons}}})


def test_auto_dilation_is_confirmed_by_the_first_trusted_run_and_never_judged_again(tmp_path):
    said: list[str] = []
    dilation = Dilation({"factor": 2.0, "chosen_by": "calibration"}, auto=True)
    assert dilation.attempts() == (2.0, 4.0, 8.0, 16.0)
    escalated = dilation.escalated(_run(False), str(tmp_path), "coflow", said.append)  # run it again
    assert escalated.factor == 4.0 and "running it again at x4" in said[-1]
    assert dilation.factor == 2.0 and "confirmation" not in dilation.record  # frozen: a new value
    confirmed = escalated.confirmed(_run(True))
    assert confirmed.record["confirmation"] == [
        {"factor": 2.0, "trusted": False, "reasons": ["CPU-saturated 83% of the time"]},
        {"factor": 4.0, "trusted": True, "reasons": []}]
    assert confirmed.attempts() == (4.0,) and confirmed.confirmed(_run(False)) is confirmed  # later runs
    by_hand = Dilation({"factor": 2.0, "chosen_by": "hand"})
    assert by_hand.attempts() == (2.0,) and by_hand.confirmed(_run(False)) is by_hand
    assert "confirmation" not in by_hand.record and Dilation().factor == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        by_hand.auto = True


def test_auto_dilation_stops_doubling_at_its_largest_factor(tmp_path):
    dilation = Dilation({"factor": 16.0, "chosen_by": "calibration"}, auto=True)
    assert dilation.attempts() == (16.0,)
    confirmed = dilation.confirmed(_run(False))
    assert confirmed.factor == 16.0 and confirmed.record["confirmation"][-1]["trusted"] is False


def test_a_simulated_run_keeps_its_jobs_times_alone_as_simulating_each_alone_gives_them():
    """``--no-alone`` takes slowdowns against the simulated alone times: the simulated run keeps them
    (no job simulated alone again), equal to simulating each job alone, and in the scenario's time when
    a dilated run is contracted."""
    from echelonflow.dilation import contract_run
    from echelonflow.schedulers import get_scheduler
    from simulator.engine import simulate

    scenario = with_real_frames(load_scenario("fattree-fsdp-ps"))
    assert len(scenario.jobs) > 1
    run = simulate(scenario.topology, scenario.jobs, get_scheduler("echelon"), events=scenario.events)
    assert run.alone_s == {job.job_id: simulate(scenario.topology, [job], get_scheduler("echelon"),
                                                events=scenario.events).jobs[job.job_id].completion_s
                           for job in scenario.jobs}
    assert contract_run(run, 4.0).alone_s == pytest.approx({j: t / 4.0 for j, t in run.alone_s.items()})
    assert "alone_s" not in run.to_json_dict()


def test_an_experiment_refused_early_leaves_the_callers_scenario_as_it_was(tmp_path):
    """Before, ``emulate_and_report`` gave the caller's idealised topology real frames in place before its
    first check; now nothing of the caller's scenario changes, also when the experiment stops early."""
    scenario = load_scenario("fig2")
    with pytest.raises(UserError, match="no-such-policy"):
        emulate_and_report(scenario, EmulationRequest(["no-such-policy"], out=str(tmp_path / "run")),
                           progress=lambda text: None)
    assert scenario.topology.mtu_bytes is None and not (tmp_path / "run").exists()


def test_a_failed_emulation_is_raised_and_the_command_line_alone_prints_it(tmp_path, monkeypatch, capsys):
    """One error channel: the experiment raises; ``cli.main`` prints one line and exits 1 (a user's
    mistake stays exit 2).  The experiment itself needs a fabric, so here it is one that fails at once."""
    import emulation.command
    from cli.main import main
    from emulation.errors import EmulationError

    def failing(scenario, request, progress=None):
        raise EmulationError("emulation of fig2 under fair failed: agent h1 died (logs in x)")

    monkeypatch.setattr(emulation.command, "emulate_and_report", failing)
    assert main(["emulate", "fig2", "--scheduler", "fair", "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err == "echelon: error: emulation of fig2 under fair failed: agent h1 died (logs in x)\n"
    assert main(["emulate", "fig2", "--scheduler", "no-such-policy"]) == 2


def test_a_controller_setting_with_a_typo_is_refused_when_the_settings_are_built():
    """The controllers' settings are ControllerConfig's fields: a misspelt one is one error naming it,
    when the emulation's settings are made (not when the first controller starts, minutes later)."""
    from echelonflow.fields import FieldError
    from emulation.settings import CONTROLLER_SETTINGS, EmulationSettings

    with pytest.raises(FieldError, match=r"^controller\.intervl_s: unknown controller setting \(allowed: "):
        EmulationSettings(controller={**CONTROLLER_SETTINGS, "intervl_s": 0.1})
    settings = EmulationSettings()
    with pytest.raises(FieldError, match="controller.hold_pause:"):
        replace(settings, controller={**settings.controller, "hold_pause": True})
    assert settings.dilated(4.0).controller["interval_s"] == pytest.approx(0.8)
