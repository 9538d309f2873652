"""One run: one scheduler on a fresh rig, all jobs together and then (several jobs) each alone.

This is the unit the experiment repeats (:mod:`emulation.experiment`): a rig (:mod:`emulation.rig`)
brought up for the run, a phase per job set on it (:mod:`emulation.phase`), and the phases' documents
assembled into one result (:mod:`emulation.assemble`) that carries the fidelity monitor's verdict and the
wire check.  Times here are the rig's (wall clock, dilated if the experiment dilates); the experiment
brings them back to the scenario's time scale and records the faults there, in the scenario's times.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from echelonflow.model import Job
from echelonflow.results import RunResult
from echelonflow.topology import Topology
from emulation.assemble import assemble_run
from emulation.monitor import combine
from emulation.phase import TOGETHER, PhaseRecord, Simulated, plan_phases, run_phase
from emulation.progress import Say
from emulation.rig import Rig
from emulation.settings import EmulationSettings
from traffic.result import Failure


def emulate_scheduler(
    topology: Topology,
    jobs: Sequence[Job],
    scheduler: str,
    simulated: Simulated,
    settings: EmulationSettings,
    progress: Say,
    run_name: str = "",
) -> EmulatedRun:
    """One scheduler on a fresh fabric and controller: all jobs together, then (several jobs) each alone.

    ``simulated`` (the simulated run, at the rig's time scale) sizes the run timeout and each agent's
    channel pool (:func:`traffic.channels.channel_plan`); without the alone phases
    (``settings.alone_runs`` false) slowdowns are taken against its ``alone_s``.  Every phase is watched
    by the fidelity monitor (and, with ``settings.capture``, captured on the wire); the result carries
    their verdicts.  ``run_name`` (default: the scheduler) names this run's folders under
    ``settings.logs_dir``.  A fabric or controller start that fails is retried once.
    The result comes with the failures of the jobs that failed (a killed agent's).
    Everything started here (controller, fabric, agents, capture) is stopped on the way out, also on
    Ctrl-C.
    """
    records: dict[str, PhaseRecord] = {}
    alone_s: dict[str, float] = {}
    with Rig(topology, jobs, scheduler, settings, progress, run_name or scheduler) as rig:
        for phase in plan_phases(jobs, settings.alone_runs, settings.faults):
            rig.bring_up(phase.label)
            records[phase.label] = record = run_phase(rig, phase, simulated)
            if phase.alone:
                solo = assemble_run(phase.jobs, record.outcome.documents, scheduler)
                alone_s.update({j: r.completion_s for j, r in solo.jobs.items()})
        if rig.problems:
            rig.say(f"warning: controller log shows {len(rig.problems)} problem line(s), e.g. "
                    f"{rig.problems[0][:160]}")
        together = records[TOGETHER].outcome
        result = assemble_run(jobs, together.documents, scheduler, alone_s or simulated.alone_s,
                              together.failed_jobs)
    result.fidelity_monitor = combine({label: record.monitor for label, record in records.items()})
    result.trusted = result.fidelity_monitor["trusted"]
    wire = {label: record.wire for label, record in records.items() if record.wire is not None}
    if wire:
        result.wire_check = {"rounds": wire}
    return EmulatedRun(result, dict(together.failed_jobs))


class EmulatedRun(NamedTuple):
    """One run's result, in the rig's times, and why each failed job failed (job -> failure)."""

    result: RunResult
    failures: dict[str, Failure]
