"""One phase: the agents of some jobs on a rig that is up, watched while they run.

A scheduler's run is a phase with all jobs together and, with several jobs, one phase per job alone
(the simulator's slowdown is a job's completion together over its completion alone).  Around the agents
(:func:`emulation.agents.run_agents`) a phase starts the fidelity monitor (:mod:`emulation.monitor`:
did the machine forward faithfully, and did any host's TCP time out?), with ``--capture`` the wire
capture of the hosts' first-hop ports (:mod:`emulation.capture`), and acts out the faults at their
times (:mod:`emulation.fault_injector`): links and switches in every phase, as the simulator replays
them in every run; an agent or the controller killed, or ovs-vswitchd restarted, only in the phase
with all jobs together.  Whatever a phase starts is stopped when it ends, also on errors.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from echelonflow import ownership
from echelonflow.model import Job
from echelonflow.topology import Topology, intf_name
from emulation.agents import AgentsOutcome, agent_hosts, fabric_popen, run_agents
from emulation.capture import CaptureError, WireCapture
from emulation.errors import EmulationError
from emulation.fault_injector import NetworkFaults, restart_actions
from emulation.monitor import FidelityMonitor, judge_tcp_timeouts, sample_interval_s
from emulation.progress import prefixed, say_all, say_monitor, say_wire
from emulation.rig import Rig
from traffic.channels import channel_plan
from traffic.runspec import RunSpec

TOGETHER = "together"


@dataclass
class Phase:
    """The jobs of one phase, its label (``together`` or ``alone-<job>``) and the process faults it
    acts out (agents, the controller, ovs-vswitchd: the phase with all jobs only)."""

    label: str
    jobs: list[Job]
    process_faults: list = field(default_factory=list)

    @property
    def alone(self) -> bool:
        return self.label != TOGETHER


class Simulated(NamedTuple):
    """What the simulated run says of the one emulated, at the rig's time scale: each job's completion
    (``completion_s``, job -> seconds: sizes the run timeout), its flows (``flows``, results format: size
    each agent's channel pool; None: one channel per destination and path) and each job's completion
    alone (``alone_s``: the slowdowns' reference without alone phases; None: the alone phases measure
    it)."""

    completion_s: Mapping[str, float]
    flows: Mapping[str, Any] | None = None
    alone_s: Mapping[str, float] | None = None


@dataclass
class PhaseRecord:
    """What a phase leaves: the agents' documents, the fidelity monitor's verdict, the wire check."""

    outcome: AgentsOutcome
    monitor: dict[str, Any]
    wire: dict[str, Any] | None = None


def plan_phases(jobs: Sequence[Job], alone_runs: bool, faults: Sequence[Any]) -> list[Phase]:
    """All jobs together (with the process faults), then each job alone when there are several."""
    phases = [Phase(TOGETHER, list(jobs), list(faults))]
    if alone_runs and len(jobs) > 1:
        phases += [Phase(f"alone-{job.job_id}", [job]) for job in jobs]
    return phases


def run_phase(rig: Rig, phase: Phase, simulated: Simulated) -> PhaseRecord:
    """Run ``phase``'s agents on ``rig`` (controller up), watched by the monitor (and the capture);
    ``simulated`` sizes the run timeout and the agents' channel pools."""
    label = phase.label
    host_ports = {h: first_hop_port(rig.topology, h) for h in agent_hosts(phase.jobs)}
    rig.say(f"{label}: {len(phase.jobs)} job(s), {len(host_ports)} agents")
    wire = _wire_capture(rig, label, host_ports) if rig.settings.capture else None
    monitor = _monitor(rig)
    network = NetworkFaults(rig.fabric, rig.settings.faults)  # links and switches: every phase
    with contextlib.ExitStack() as watchers:
        watchers.callback(say_all, rig.say, network.restore)
        watchers.callback(say_all, rig.say, rig.ensure_switch_daemon)  # a stopped ovs-vswitchd: first
        if wire is not None:
            try:
                watchers.enter_context(wire)
            except CaptureError as exc:
                raise EmulationError(str(exc)) from None
            ownership.record_processes(rig.workdir, wire.proc.pid)
        watchers.enter_context(monitor)
        outcome = _run_agents(rig, phase, simulated, network.actions())
    faulted = bool(network.events or phase.process_faults)  # timeouts are then the fault's, not judged
    verdict = judge_tcp_timeouts(monitor.report(window=(outcome.t0_s, time.time())),
                                 {host: doc.tcp for host, doc in outcome.documents.items()},
                                 monitor.thresholds, faults_injected=faulted)
    record = PhaseRecord(outcome, verdict)
    monitor.save_intervals(os.path.join(rig.workdir, f"monitor-{label}.json"))
    say_monitor(rig.say, label, record.monitor)
    if wire is not None:
        record.wire = wire.check(outcome.documents, rig.hosts_ip, host_ports, outcome.t0_s, rig.enforces)
        say_wire(rig.say, label, record.wire)
    rig.collect_problems()
    return record


def _run_agents(rig: Rig, phase: Phase, simulated: Simulated, network_actions: list) -> AgentsOutcome:
    """The agents of ``phase``, with the run-spec, channel plan and timed faults they need."""
    agents_dir = os.path.join(rig.workdir, phase.label)
    os.makedirs(agents_dir)
    faults = phase.process_faults
    return run_agents(
        agent_template(rig, phase, simulated.completion_s), agents_dir, fabric_popen(rig.fabric),
        channel_plan=_channel_plan(rig, phase, simulated.flows),
        kill_agents={f.target[0]: f.at_s for f in faults if f.kind == "agent"},
        actions=(restart_actions("controller", faults, rig.crash_controller, rig.restart_controller)
                 + restart_actions("ovs", faults, rig.stop_switch_daemon, rig.start_switch_daemon)
                 + network_actions),
        progress=prefixed(rig.say, f"{phase.label}: "),
    )


def agent_template(rig: Rig, phase: Phase, simulated_s: Mapping[str, float]) -> RunSpec:
    """What every agent of ``phase`` is told (:class:`~traffic.runspec.RunSpec`, passed whole to the
    agents; each gets its host, t0 and files filled in): the run deadline is ``run_timeout_factor`` x
    the latest simulated completion (``simulated_s``, job -> seconds) plus ``run_timeout_extra_s``."""
    settings = rig.settings
    budget_s = max(j.arrival_s + simulated_s.get(j.job_id, 0.0) for j in phase.jobs)
    return RunSpec(hosts_ip=dict(rig.hosts_ip), jobs=list(phase.jobs), data_port=settings.data_port,
                   registry=rig.registry_settings(), scheduler=rig.scheduler,
                   run_timeout_s=settings.run_timeout_factor * budget_s + settings.run_timeout_extra_s,
                   confirm_timeout_s=settings.confirm_timeout_s, topology_spec=dict(rig.topology_spec),
                   congestion_control=settings.tcp_congestion_control)


def _channel_plan(rig: Rig, phase: Phase,
                  simulated_flows: Mapping[str, Any] | None) -> dict[str, list[dict[str, Any]]] | None:
    """How many channels each agent opens before t0: the most flows of one (source, destination, path)
    in flight at once in the simulated run (the same at any dilation: only which flows overlap counts).
    A scheduler that enforces pins each flow's path; plain TCP's flows follow their host pair's route."""
    if simulated_flows is None:
        return None
    topology = rig.topology
    path_of = topology.path_for if rig.enforces else (lambda src, dst, key: topology.pair_path(src, dst))
    phase_ids = {j.job_id for j in phase.jobs}
    mine = {key: flow for key, flow in simulated_flows.items() if key.split("/", 1)[0] in phase_ids}
    return channel_plan(mine, path_of)


def _wire_capture(rig: Rig, label: str, host_ports: Mapping[str, str]) -> WireCapture:
    """The capture of the phase's first-hop switch ports, into the run folder's ``captures/``."""
    capture_dir = os.path.join(rig.settings.logs_dir or rig.workdir, "captures", rig.run_name, label)
    return WireCapture(capture_dir, sorted(host_ports.values()))


def _monitor(rig: Rig) -> FidelityMonitor:
    """The fidelity monitor of every switch port, sampling as often as the fabric's size allows (less
    often under dilation, so its intervals stay as long in the scenario's time scale)."""
    settings = rig.settings
    ports = rig.fabric.switch_ports
    interval_s = settings.monitor_interval_s or sample_interval_s(len(ports)) * settings.time_scale
    return FidelityMonitor(ports, interval_s, rig.controller.pid, settings.monitor_thresholds)


def first_hop_port(topology: Topology, host: str) -> str:
    """The switch-side interface of ``host``'s link (root namespace): where its traffic is captured."""
    switch = topology.host_switch(host)
    return intf_name(switch, topology.port(switch, host))
