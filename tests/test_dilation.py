"""Time dilation (echelonflow/dilation.py): a dilated scenario simulates to exactly F times the
undilated schedule, and contracting the dilated run gives the undilated run back."""

from __future__ import annotations

import pytest

from echelonflow.dilation import (
    DilationError,
    check_dilation,
    check_factor,
    contract_run,
    dilate_jobs,
    dilate_topology,
)
from echelonflow.model import ComputeTask, FlowTask
from echelonflow.results import Results
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from echelonflow.topology import build
from simulator.engine import simulate


def _times(run):
    """Every time a run holds, in one flat dict."""
    out = {f"job {j}": r.completion_s for j, r in run.jobs.items()}
    out.update({f"ech {e}": r.tardiness_s for e, r in run.echelonflows.items()})
    for key, flow in run.flows.items():
        out.update({f"{key} start": flow.start_s, f"{key} finish": flow.finish_s,
                    f"{key} ideal": flow.ideal_finish_s})
    for key, task in run.tasks.items():
        out.update({f"{key} task start": task.start_s, f"{key} task finish": task.finish_s})
    out["objective"] = run.objective_s
    return out


@pytest.mark.parametrize("scenario_name", ["fig2", "fattree-gpipe-ring", "fattree-fsdp-ps"])
@pytest.mark.parametrize("scheduler", ["fair", "coflow", "echelon"])
@pytest.mark.parametrize("factor", [2.0, 3.5])
def test_a_dilated_scenario_simulates_to_exactly_factor_times_the_schedule(scenario_name, scheduler, factor):
    scenario = load_scenario(scenario_name)
    plain = simulate(scenario.topology, scenario.jobs, get_scheduler(scheduler))
    dilated = simulate(dilate_topology(scenario.topology, factor), dilate_jobs(scenario.jobs, factor),
                       get_scheduler(scheduler))
    plain_times, dilated_times = _times(plain), _times(dilated)
    assert plain_times.keys() == dilated_times.keys()
    for key, value in plain_times.items():
        assert dilated_times[key] == pytest.approx(value * factor, rel=1e-9, abs=1e-9), key
    for job_id, job in plain.jobs.items():  # slowdowns are ratios of times: unchanged
        assert dilated.jobs[job_id].slowdown == pytest.approx(job.slowdown, rel=1e-9)
    back = _times(contract_run(dilated, factor))
    for key, value in plain_times.items():
        assert back[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key
    assert _times(dilated) == dilated_times  # contract_run copies, never edits its input


def test_dilation_scales_rates_computes_arrivals_and_offsets_but_not_flows():
    scenario = load_scenario("fattree-fsdp-ps")
    topo = dilate_topology(scenario.topology, 4)
    assert topo.rate_bps == scenario.topology.rate_bps / 4
    assert set(topo.capacity_bps().values()) == {r / 4 for r in scenario.topology.capacity_bps().values()}
    assert topo.hosts == scenario.topology.hosts and topo.mtu_bytes == scenario.topology.mtu_bytes
    assert scenario.topology.rate_bps == 10e6  # the original is untouched
    job = scenario.jobs[0]
    job.arrival_s, job.explicit_offsets_s = 1.5, {"e": 0.25}
    slow = dilate_jobs([job], 4)[0]
    assert (slow.arrival_s, slow.explicit_offsets_s, slow.weight) == (6.0, {"e": 1.0}, job.weight)
    assert list(slow.tasks) == list(job.tasks)  # declaration order kept (the tie-break rule)
    for task_id, task in job.tasks.items():
        if isinstance(task, ComputeTask):
            assert slow.tasks[task_id].duration_s == task.duration_s * 4
        else:
            assert isinstance(task, FlowTask) and slow.tasks[task_id] == task


@pytest.mark.parametrize("bad", [0.5, 0, -2, float("nan"), float("inf"), True, "2", 64.5, 1e6, 1e308])
def test_a_factor_outside_the_range_or_not_a_number_is_refused(bad):
    with pytest.raises(DilationError, match="dilation factor must be a number from 1 to 64"):
        check_factor(bad)
    assert check_factor(1) == 1.0 and check_factor(64) == 64.0


@pytest.mark.parametrize("text", ["1e308", "1e6", "65", "0.5", "nan", "inf", "fast"])
def test_emulate_refuses_a_dilation_out_of_range_as_its_arguments_are_read(text, capsys):
    """Issue 35: ``--dilation 1e308`` was an OverflowError traceback after the simulation side had run.
    The argument is refused while the command line is parsed: nothing is simulated, no fabric starts."""
    from cli.main import build_parser

    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["emulate", "fig2", "--dilation", text])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dilation: must be 'auto' or a number from 1 to 64" in err[0]
    args = build_parser().parse_args(["emulate", "fig2", "--dilation", "64"])
    assert args.dilation == 64.0


def test_a_dilation_that_takes_the_scenario_out_of_the_ranges_is_refused_before_anything_runs():
    scenario = load_scenario("fig2")
    check_dilation(scenario.topology, scenario.jobs, [], 64)
    slow = build("two_hosts", 1e4)
    with pytest.raises(DilationError, match=r"dilation x16 would run the slowest links at 625 bit/s"):
        check_dilation(slow, scenario.jobs, [], 16)
    job = scenario.jobs[0]
    late = dilate_jobs([job], 1)[0]
    late.arrival_s = 20000.0
    with pytest.raises(DilationError, match=r"job 'fig2' arrival_s 20000 s would become 1\.28e\+06 s"):
        check_dilation(scenario.topology, [late], [], 64)
    with pytest.raises(DilationError, match=r"a fault at 600000 s"):
        check_dilation(scenario.topology, scenario.jobs, [600000.0], 2)


def test_results_record_the_dilation_and_read_it_back():
    doc = Results("s", "emulate", [], {"factor": 2.0, "chosen_by": "hand"}).to_json_dict()
    assert doc["dilation"] == {"factor": 2.0, "chosen_by": "hand"}
    assert Results.from_json_dict(doc).dilation == {"factor": 2.0, "chosen_by": "hand"}
    assert "dilation" not in Results("s", "simulate").to_json_dict()


def test_auto_dilation_doubles_the_factor_after_an_untrusted_first_run(tmp_path):
    """The calibration's bulk traffic leaves out the controller's and the agents' CPU, so under
    ``--dilation auto`` the first real run confirms the factor: untrusted, it is run again twice as slow,
    its logs kept aside and its verdict recorded."""
    from types import SimpleNamespace

    from emulation.dilation import Dilation
    from reports.fidelity import dilation_line

    logs = tmp_path / "logs" / "coflow-r1"
    logs.mkdir(parents=True)
    (logs / "agent.log").write_text("x")
    verdict = {"reasons": ["CPU-saturated 83% of the time"]}
    run = SimpleNamespace(fidelity_monitor={"rounds": {"together": verdict}})
    said = []
    first = Dilation({"factor": 1.0, "chosen_by": "calibration", "calibration": {}}, auto=True)
    dilation = dict(first.escalated(run, str(tmp_path), "coflow-r1", said.append).record)
    assert dilation["factor"] == 2.0 and dilation["chosen_by"] == "calibration, then the first run"
    assert dilation["confirmation"] == [{"factor": 1.0, "trusted": False,
                                         "reasons": ["CPU-saturated 83% of the time"]}]
    assert (tmp_path / "logs" / "coflow-r1-x1-untrusted" / "agent.log").exists() and not logs.exists()
    assert "NOT trusted (CPU-saturated 83% of the time); running it again at x2" in said[0]
    dilation["confirmation"].append({"factor": 2.0, "trusted": True, "reasons": []})
    assert "then doubled until the first real run was trusted (not trusted at x1)" in dilation_line(dilation)


def test_a_dilated_runs_control_loop_and_timeouts_stretch_with_it():
    """What the machinery does per wall-clock second must fall with the factor (the agents' polls, the
    controller's periodic round), or a dilated k=8 run stays CPU-bound; a stall timeout in wall clock
    must grow as every wait does."""
    from emulation.settings import EmulationSettings

    base = EmulationSettings()
    slow = base.dilated(4)
    assert slow.poll_interval_s == pytest.approx(4 * base.poll_interval_s)
    assert slow.controller["interval_s"] == pytest.approx(4 * base.controller["interval_s"])
    assert slow.controller["stats_interval_s"] == pytest.approx(4 * base.controller["stats_interval_s"])
    assert slow.controller["api_port"] == base.controller["api_port"]  # ports are not periods
    assert slow.confirm_timeout_s == pytest.approx(4 * base.confirm_timeout_s)
    assert slow.tcp_rto_min_ms == 4 * base.tcp_rto_min_ms
    assert slow.time_scale == 4 and slow.dilated(2).time_scale == 8  # the monitor samples 4x less often
    lag_s = base.monitor_thresholds.ingress_lag_max_s
    assert slow.monitor_thresholds.ingress_lag_max_s == pytest.approx(4 * lag_s)
    assert base.dilated(1) == base and base.poll_interval_s == 0.05  # the original is left alone


def test_controllers_hold_and_fix_classes_only_where_agents_pace():
    """The controllers' settings are controller.config's names; holding paused flows and fixed classes
    need agents that pace, and a restarted controller keeps its ports."""
    from controller.launcher import local_config
    from emulation.settings import EmulationSettings

    paced = EmulationSettings(queues=3).controller_settings(api_port=8555)
    names = ("queues", "hold_paused", "fixed_class", "api_port")
    assert [paced[name] for name in names] == [3, True, True, 8555]
    unpaced = EmulationSettings(pace=False).controller_settings()
    assert (unpaced["hold_paused"], unpaced["fixed_class"]) == (False, False)
    config = local_config(**paced)
    assert (config.queues, config.interval_s, config.api_port, config.hold_paused) == (3, 0.2, 8555, True)
