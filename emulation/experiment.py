"""An experiment: the scenario simulated, then emulated under every scheduler ``repeat`` times, into a
run folder, and the table of emulated next to simulated.

For each scheduler in turn (``repeat`` times each) :func:`emulation.run.emulate_scheduler` runs the
scenario on a fresh rig; the same scenario is simulated for comparison (and, with a timing noise, simulated
under jittered computes too).  The run folder (default ``runs/<timestamp>-<scenario>/``) gets
results.json (mode ``emulate``, the same shape as ``echelon simulate --json``, every repeat a run of its
own, plus the spread and the fidelity section), results-simulate.json, results.csv, fidelity.md, the
plots and the agents' and controller's logs (:mod:`reports.runfolder`).  Nothing finished is lost:
results.json is rewritten after every run with its status (:mod:`emulation.runfolder`).

The scenario is never changed: an emulation runs a copy with real frames (idealised links cannot be
emulated) and, under a time dilation, a dilated copy (:mod:`emulation.dilation`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from controller.config import ControllerConfig
from echelonflow.bounds import attach_lower_bounds
from echelonflow.dilation import check_dilation, contract_run
from echelonflow.fileio import check_output_dir
from echelonflow.model import Job
from echelonflow.results import Results, RunResult
from echelonflow.scenario import Scenario
from echelonflow.schedulers import get_scheduler
from echelonflow.topology import DEFAULT_MTU_BYTES, Topology
from emulation.assemble import fault_records
from emulation.calibrate import CalibrationError
from emulation.dilation import MAX_DILATION, Dilation, choose_dilation, dilated
from emulation.errors import EmulationError
from emulation.phase import Simulated
from emulation.progress import Say, completion_times, stderr_progress
from emulation.run import EmulatedRun, emulate_scheduler
from emulation.runfolder import Checkpoints
from emulation.settings import EmulationSettings
from reports.runfolder import CSV_FILE, RESULTS_FILE, RunFolder, default_run_dir
from reports.table import format_report
from simulator.engine import simulate
from simulator.noise import timing_noise_section
from traffic.result import Failure


@dataclass(frozen=True)
class EmulationRequest:
    """What ``echelon emulate`` (or ``echelon demo``) asks of an experiment besides the scenario."""

    schedulers: Sequence[str]
    out: str | None = None  # the run folder (default: runs/<timestamp>-<scenario>)
    plots: bool = True
    alone_runs: bool = True  # several jobs: run each alone too (else slowdowns use simulated alone times)
    pace: bool = True  # agents pace flows at their allocated rates
    live: bool = False  # every controller of the run on the default API and metrics ports
    repeat: int = 1  # runs per scheduler
    capture: bool = False  # capture the first-hop ports and check marks and times on the wire
    dilation: float | str | None = None  # a factor >= 1, "auto" (calibrated), or None (undilated)
    congestion_control: str | None = None  # the agents' TCP congestion control (None: the hosts' own)
    host_sysctls: Mapping[str, str] = field(default_factory=dict)  # set in every host's namespace
    timing_noise_ms: float = 0.0  # > 0: also simulate under that much compute jitter and judge against it
    cluster: list[str] | None = None  # build the fabric through Mininet's cluster mode on these servers


class EmulationOutcome(NamedTuple):
    """The emulated document, the run folder written, the table to print, and why each failed job of
    every run failed."""

    emulated: Results
    folder: RunFolder
    table: str
    failures: list[Failure]


class RunFailedError(EmulationError):
    """A run of the experiment failed: ``reason`` for the run folder, ``logs`` where its logs are."""

    def __init__(self, reason: str, logs: str) -> None:
        super().__init__(reason)
        self.reason, self.logs = reason, logs


def emulate_and_report(scenario: Scenario, request: EmulationRequest,
                       progress: Say | None = None) -> EmulationOutcome:
    """Simulate, emulate every scheduler ``request.repeat`` times, write the run folder.

    Raises :class:`EmulationError` (one line) when the emulation failed: an agent, the fabric or the
    controller (:class:`RunFailedError`, the line naming the logs and the partial folder), or no
    dilation the calibration trusts; everything started has been stopped by then and the run folder
    holds the runs that finished, marked partial.  Ctrl-C / SIGTERM likewise mark it partial, then
    propagate.  ``progress`` (default: stamped lines on stderr) hears every step.
    """
    say = progress or stderr_progress()
    scenario = with_real_frames(scenario)
    run_dir = request.out or default_run_dir(scenario.name)
    # before the runs, which would have nowhere to go; a folder holding an earlier run's documents is
    # refused, as the first checkpoint would overwrite them
    check_output_dir(run_dir, "run folder", kept=(RESULTS_FILE, CSV_FILE))
    check_dilation(scenario.topology, scenario.jobs, [e.at_s for e in scenario.events],
                   MAX_DILATION if request.dilation == "auto" else request.dilation or 1.0)
    simulated = simulate_side(scenario, request)
    try:
        dilation = choose_dilation(request.dilation, scenario, run_dir, say)
    except CalibrationError as exc:
        raise EmulationError(str(exc)) from None
    runs = ExperimentRuns(scenario, request, run_dir, dilation, say)
    emulated = runs.emulated
    checkpoints = Checkpoints(run_dir, emulated, simulated, request.repeat, request.plots)
    checkpoints.write()
    with checkpoints.partial_on_stop():
        try:
            for sim_run in simulated.runs:
                for result in runs.of(sim_run):
                    emulated.runs.append(result)
                    checkpoints.write()
                    runs.say_result(result)
        except RunFailedError as failed:
            folder = checkpoints.write(failed.reason)
            raise EmulationError(f"{failed.reason} (logs in {failed.logs}; the {len(emulated.runs)} "
                                 f"finished run(s) are in {folder.results}, marked partial)") from None
    folder = checkpoints.write(complete=True)
    return EmulationOutcome(emulated, folder, format_report(emulated, simulated), runs.failures)


def with_real_frames(scenario: Scenario) -> Scenario:
    """The scenario as an emulation runs it on both sides: idealised links (no MTU: the paper's fluid
    model) cannot be emulated, so they get real frames.  A copy; the caller's scenario stays as it was."""
    if scenario.topology.mtu_bytes is not None:
        return scenario
    topology = copy.deepcopy(scenario.topology)
    topology.mtu_bytes = DEFAULT_MTU_BYTES
    return replace(scenario, topology=topology)


def simulate_side(scenario: Scenario, request: EmulationRequest) -> Results:
    """The simulator's document for the same scenario and schedulers (and its timing-noise section)."""
    simulated = Results(scenario.name, "simulate")
    for name in request.schedulers:
        simulated.runs.append(simulate(scenario.topology, scenario.jobs, get_scheduler(name),
                                       events=scenario.events))
    attach_lower_bounds(simulated.runs, scenario.jobs, scenario.topology)
    if request.timing_noise_ms:
        simulated.timing_noise = timing_noise_section(scenario.topology, scenario.jobs,
                                                      list(request.schedulers), request.timing_noise_ms / 1e3,
                                                      events=scenario.events)
    return simulated


def base_settings(request: EmulationRequest, run_dir: str) -> EmulationSettings:
    """The undilated settings of every run of the experiment (``--live``: the controllers' default API
    and metrics ports, so the dashboard keeps one address from phase to phase)."""
    settings = EmulationSettings(alone_runs=request.alone_runs, logs_dir=run_dir, pace=request.pace,
                                 capture=request.capture, tcp_congestion_control=request.congestion_control,
                                 host_sysctls=dict(request.host_sysctls), cluster=request.cluster)
    if request.live:
        defaults = ControllerConfig()
        ports = {"api_port": defaults.api_port, "metrics_port": defaults.metrics_port}
        settings = replace(settings, controller={**settings.controller, **ports})
    return settings


class ExperimentRuns:
    """Every emulated run of the experiment: each scheduler ``repeat`` times on the (dilated) scenario,
    each result brought back to the scenario's time scale.  ``emulated`` is the experiment's document,
    its ``dilation`` kept current (the runs themselves are the caller's to add)."""

    def __init__(self, scenario: Scenario, request: EmulationRequest, run_dir: str, dilation: Dilation,
                 say: Say) -> None:
        self.scenario, self.request, self.run_dir, self.dilation, self.say = (scenario, request, run_dir,
                                                                               dilation, say)
        self.base = base_settings(request, run_dir)
        #: the factor and what the fabric runs at it (:meth:`_inputs`)
        self._dilated = (dilation.factor, dilated(scenario, self.base, dilation.factor, say))
        self.emulated = Results(scenario.name, "emulate")
        self.failures: list[Failure] = []  # why each failed job of the runs so far failed
        self._settle(dilation)
        self._announce()

    def _announce(self) -> None:
        """Say what differs from a plain run: the hosts' transport, the faults, the live addresses."""
        request, factor = self.request, self.dilation.factor
        if request.congestion_control or request.host_sysctls:
            self.say("hosts' transport: " + ", ".join(
                ([f"congestion control {request.congestion_control}"] if request.congestion_control else [])
                + [f"{k}={v}" for k, v in request.host_sysctls.items()]))
        for event in self.scenario.events:
            self.say(f"fault planned: {event.describe()}"
                     + (f" (x{factor:g}: {event.at_s * factor:g} s wall clock)" if factor != 1.0 else ""))
        if request.live:
            controller = self.base.controller
            self.say(f"live dashboard: http://127.0.0.1:{controller['api_port']}/ui/  metrics: "
                     f"http://127.0.0.1:{controller['metrics_port']}/metrics")

    def of(self, sim_run: RunResult) -> Iterator[RunResult]:
        """``sim_run``'s scheduler emulated ``repeat`` times; raises :class:`RunFailedError` on a failure."""
        sim_s = {j: r.completion_s for j, r in sim_run.jobs.items()}
        alone_s = self._simulated_alone_s(sim_run)
        for index in range(self.request.repeat):
            yield self._run(sim_run, index, sim_s, alone_s)

    def _simulated_alone_s(self, sim_run: RunResult) -> dict[str, float] | None:
        """Without alone phases (``--no-alone``) and several jobs: each job's simulated time alone (the
        simulated run's own), the slowdowns' reference (None otherwise: the alone phases measure it)."""
        if self.request.alone_runs or len(self.scenario.jobs) <= 1:
            return None
        return dict(sim_run.alone_s or {})

    def _run(self, sim_run: RunResult, index: int, sim_s: dict[str, float],
             alone_s: dict[str, float] | None) -> RunResult:
        """One run, tried at the dilation's factors in turn (``--dilation auto``'s first run: until the
        fidelity monitor trusts one; any other run: its one factor)."""
        name, which = self._names(sim_run.scheduler, index)
        attempts = self.dilation.attempts()
        for factor in attempts:
            result, failures = self._emulate(sim_run, factor, name, which, sim_s, alone_s)
            if result.trusted is not False or factor == attempts[-1]:
                break
            self._settle(self.dilation.escalated(result, self.run_dir, name, self.say))
        self._settle(self.dilation.confirmed(result))
        self.failures.extend(failures.values())
        return self._in_scenario_time(result, index)

    def _emulate(self, sim_run: RunResult, factor: float, name: str, which: str, sim_s: dict[str, float],
                 alone_s: dict[str, float] | None) -> EmulatedRun:
        """``sim_run``'s scheduler emulated once at ``factor`` (times as the fabric ran them)."""
        self.say(f"scheduler {sim_run.scheduler}{which}: emulating {self.scenario.name} "
                 f"(simulated completion {completion_times(sim_s)})")
        topology, jobs, settings = self._inputs(factor)
        scheduler = sim_run.scheduler
        try:
            simulated = Simulated(_scaled(sim_s, factor), sim_run.flows,
                                  None if alone_s is None else _scaled(alone_s, factor))
            return emulate_scheduler(topology, jobs, scheduler, simulated, settings, self.say, run_name=name)
        except EmulationError as exc:
            reason = f"emulation of {self.scenario.name} under {scheduler}{which} failed: {exc}"
            raise RunFailedError(reason, f"{self.run_dir}/logs/{name}") from None

    def _inputs(self, factor: float) -> tuple[Topology, list[Job], EmulationSettings]:
        """The topology, jobs and settings the fabric runs at ``factor`` (built once per factor)."""
        if self._dilated[0] != factor:
            self._dilated = (factor, dilated(self.scenario, self.base, factor, self.say))
        return self._dilated[1]

    def _settle(self, dilation: Dilation) -> None:
        """The dilation from now on, and results.json's record of it."""
        self.dilation = dilation
        self.emulated.dilation = None if dilation.record is None else dict(dilation.record)

    def _in_scenario_time(self, result: RunResult, index: int) -> RunResult:
        """The run with times divided by the dilation, faults at their scenario times, its repeat index
        and every job's lower bound."""
        factor = self.dilation.factor
        if factor != 1.0:
            result = contract_run(result, factor)
        if self.scenario.events:
            result.faults = fault_records(self.scenario.events)
        result.repeat = index
        attach_lower_bounds([result], self.scenario.jobs, self.scenario.topology)
        return result

    def _names(self, scheduler: str, index: int) -> tuple[str, str]:
        """The run's folder name (``echelon-r2``) and its words in progress lines (`` (repeat 2 of 3)``)."""
        if self.request.repeat == 1:
            return scheduler, ""
        return f"{scheduler}-r{index + 1}", f" (repeat {index + 1} of {self.request.repeat})"

    def say_result(self, result: RunResult) -> None:
        """The run's completion times (and its failed jobs) in progress lines."""
        _name, which = self._names(result.scheduler, result.repeat)
        emu_s = {j: r.completion_s for j, r in result.jobs.items()}
        trust = "" if result.trusted else " (NOT trusted by the fidelity monitor)"
        self.say(f"scheduler {result.scheduler}{which}: emulated completion "
                 f"{completion_times(emu_s)}{trust}")
        for job_id, why in (result.failed_jobs or {}).items():
            self.say(f"scheduler {result.scheduler}{which}: job {job_id} FAILED: {why}")


def _scaled(times_s: Mapping[str, float], factor: float) -> dict[str, float]:
    return {key: factor * value for key, value in times_s.items()}
