"""Which time dilation an emulation runs at, and the scenario as the fabric then sees it.

A factor F divides every link rate and multiplies every compute duration and arrival by F
(:mod:`echelonflow.dilation`), so a machine too slow to forward the fabric at its real rate forwards it
faithfully F times slower; results are divided by F back into the scenario's own time scale.  The
factor is given by hand (``--dilation F``) or chosen (``--dilation auto``): first by a calibration on
the fabric (:mod:`emulation.calibrate`), then confirmed by the first real run, since the calibration's
bulk traffic leaves out what a real run costs besides forwarding: the first run is tried at the factors
of :meth:`Dilation.attempts` in turn until the fidelity monitor trusts one (:meth:`Dilation.escalated`).
How the factor was chosen goes into results.json's ``dilation`` (docs/emulation.md, "Time dilation").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from echelonflow.dilation import dilate_jobs, dilate_topology
from echelonflow.model import Job
from echelonflow.scenario import Scenario
from echelonflow.topology import Topology
from emulation.calibrate import calibrate
from emulation.progress import Say
from emulation.settings import EmulationSettings

#: Largest factor ``--dilation auto`` goes to (the calibration's last).
MAX_DILATION = 16.0


@dataclass(frozen=True)
class Dilation:
    """The factor an emulation runs at: ``record`` is results.json's ``dilation`` (None: undilated,
    nothing chosen); ``auto`` while the first real run still has to confirm a calibrated factor."""

    record: Mapping[str, Any] | None = None
    auto: bool = False

    @property
    def factor(self) -> float:
        return float(self.record["factor"]) if self.record else 1.0

    def attempts(self) -> tuple[float, ...]:
        """The factors a run is tried at, in order: this one and, while the first run still has to confirm
        a calibrated factor, each double of it up to :data:`MAX_DILATION` (the next one only when the
        fidelity monitor did not trust the run at the last)."""
        factors = [self.factor]
        while self.auto and factors[-1] * 2 <= MAX_DILATION:
            factors.append(factors[-1] * 2)
        return tuple(factors)

    def confirmed(self, run: Any) -> Dilation:
        """The factor stands after ``run`` (under ``--dilation auto``, recorded with its verdict; the
        first run confirms once, later runs are never judged)."""
        if not self.auto:
            return self
        return Dilation(_with_confirmation(self.record, self.factor, run.trusted is not False, run))

    def escalated(self, run: Any, run_dir: str, run_name: str, say: Say) -> Dilation:
        """``--dilation auto`` after a first run the fidelity monitor did not trust: the factor doubles.

        The calibration loads the fabric with plain bulk traffic, which leaves out what the real run
        costs besides forwarding (the controller deciding on every start and finish, an agent per host
        writing and pacing each flow's segments): at k=8 it trusted 10 Mbit/s while the first real run
        left the machine 1 % idle.  So the first run confirms the factor, and until one is trusted (or
        :data:`MAX_DILATION`) it is run again, twice as slow; the untrusted trial keeps its logs under
        ``logs/<run>-x<F>-untrusted`` and its verdict in ``dilation.confirmation``."""
        factor = self.factor
        reasons = monitor_reasons(run)
        record = dict(_with_confirmation(self.record, factor, False, run), factor=factor * 2,
                      chosen_by="calibration, then the first run")
        logs = os.path.join(run_dir, "logs", run_name)
        if os.path.isdir(logs):
            os.replace(logs, f"{logs}-x{factor:g}-untrusted")
        why = "; ".join(reasons) or "no reason"
        say(f"time dilation x{factor:g}: the first run was NOT trusted ({why}); running it again at "
            f"x{factor * 2:g}")
        return Dilation(record, auto=True)


def _with_confirmation(record: Mapping[str, Any] | None, factor: float, trusted: bool,
                       run: Any) -> dict[str, Any]:
    """``record`` with one more verdict of a first run in its ``confirmation`` list."""
    record = dict(record or {})
    verdict = {"factor": factor, "trusted": trusted, "reasons": monitor_reasons(run)}
    return dict(record, confirmation=[*record.get("confirmation", []), verdict])


def choose_dilation(requested: float | str | None, scenario: Scenario, run_dir: str, say: Say) -> Dilation:
    """``None``: undilated; a number: that factor, given by hand; ``"auto"``: calibrated on the fabric
    (raises :class:`emulation.calibrate.CalibrationError` when no factor is trusted)."""
    if requested is None:
        return Dilation()
    if requested != "auto":
        return Dilation({"factor": float(requested), "chosen_by": "hand"})
    say(f"calibrating the time dilation on {scenario.topology.name} (factors tried until the fidelity "
        f"monitor trusts one)")
    return Dilation(calibrate(scenario.topology, scenario.jobs, say, logs_dir=run_dir), auto=True)


def dilated(scenario: Scenario, base: EmulationSettings, factor: float,
            say: Say) -> tuple[Topology, list[Job], EmulationSettings]:
    """The topology, jobs and settings the fabric runs at ``factor``: control periods, timeouts, the
    monitor's thresholds and the faults' times stretched with it."""
    if factor != 1.0:
        say(f"time dilation x{factor:g}: links at {scenario.topology.rate_bps / factor / 1e6:g} "
            f"Mbit/s, compute, arrivals and the control loop's periods x{factor:g}; times below: "
            f"the scenario's own time scale (wall clock / {factor:g})")
    faults = [replace(e, at_s=e.at_s * factor) for e in scenario.events]
    settings = replace(base.dilated(factor), faults=faults)
    return dilate_topology(scenario.topology, factor), dilate_jobs(scenario.jobs, factor), settings


def monitor_reasons(run: Any) -> list[str]:
    """Why the fidelity monitor did not trust a run, over its phases (empty when it did)."""
    return [reason for doc in (run.fidelity_monitor or {}).get("rounds", {}).values()
            for reason in doc.get("reasons", [])]
