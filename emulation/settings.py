"""The knobs of one emulated run (:class:`EmulationSettings`), with their defaults and what dilation does
to them.

The defaults suit this 2-core machine's userspace datapath; each says why it has its value.  One value
object travels from the command down to the rig and its phases, so nothing below the command reads
arguments or the environment.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Any

from controller.config import ControllerConfig
from echelonflow.fields import FieldError
from emulation.monitor import Thresholds
from traffic.runspec import DEFAULT_DATA_PORT

#: The controllers' settings in an emulated run, by their names in ``controller.config.SETTINGS`` (what
#: ``controller.launcher.local_config`` takes, over its defaults), so none is declared twice.
CONTROLLER_SETTINGS = {
    "interval_s": 0.2,  # the scheduling service's periodic pass (arrivals run at once)
    "stats_interval_s": 1.0,  # the switch-counter poll (dashboard, metrics)
    "hold_paused": True,  # agents hold paused flows and the controller keeps their class (with ``pace``)
    "fixed_class": True,  # a flow keeps the class of its first allocation (with ``pace``)
    "api_port": 0,  # the API (and dashboard) port; 0: a free one per controller
    "metrics_port": 0,  # the /metrics port; 0: a free one per controller
}
#: The controller's periods, stretched by a time dilation as the scenario's times are.
DILATED_CONTROLLER_SETTINGS = ("interval_s", "stats_interval_s")


@dataclass
class EmulationSettings:
    """Knobs of :func:`emulation.run.emulate_scheduler` and of the rig and phases under it."""

    data_port: int = DEFAULT_DATA_PORT
    queues: int = 4
    alone_runs: bool = True  # several jobs: run each alone too (the simulator's slowdown definition)
    warmup: bool = True  # ping every communicating pair first (ARP and first-packet routing off the clock)
    run_timeout_factor: float = 4.0  # x the simulated completion time, plus run_timeout_extra_s
    run_timeout_extra_s: float = 60.0
    logs_dir: str | None = None  # where agent and controller logs are copied (the run folder)
    poll_interval_s: float = 0.05  # agents' allocation/progress poll (flows last >= ~0.5 s: ~10 polls)
    pace: bool = True  # agents pace flows at their allocated rate (schedulers that enforce only)
    tcp_rto_min_ms: int | None = 1000  # hosts' TCP minimum RTO (parked flows wait behind urgent classes)
    tcp_congestion_control: str | None = None  # the agents' channels' TCP congestion control (None: host's)
    #: sysctls set in every host's namespace (topologies.fabric.Fabric ``host_sysctls``)
    host_sysctls: dict = field(default_factory=dict)
    #: the controllers' settings (:data:`CONTROLLER_SETTINGS`; ``queues`` is the fabric's, above)
    controller: dict = field(default_factory=lambda: dict(CONTROLLER_SETTINGS))
    confirm_timeout_s: float = 30.0  # a flow's bytes stop moving this long: the run fails
    #: the time dilation this run runs at: the fidelity monitor samples that much less often, so it
    #: judges intervals as long in the scenario's time scale as an undilated run's (at x16 a 9000-byte
    #: frame takes 115 ms on a link, and 0.5 s intervals held too few frames to compare with the rate)
    time_scale: float = 1.0
    install_wait_s: float = 0.5  # a channel's registration waits up to this for its rules' barrier acks
    monitor_interval_s: float | None = None  # fidelity monitor's sampling period (None: by fabric size)
    monitor_thresholds: Thresholds = field(default_factory=Thresholds)  # .dilated(F) for dilated runs
    capture: bool = False  # capture first-hop switch ports and check marks and times (emulation.capture)
    fabric_connect_timeout_s: float = 30.0  # every switch connected to the controller within this
    #: faults injected into the phase with all jobs together (``echelon emulate --fault``): objects with
    #: ``kind``, ``target`` and ``at_s`` (``echelonflow.faults.FaultEvent``); ``agent`` (that host's
    #: agent killed with SIGKILL) and ``controller`` (killed with SIGKILL, then restarted on the same
    #: registry store) in that phase only; ``link`` and ``switch`` go down (and up) in every phase, as
    #: the simulator replays them in every run (emulation.fault_injector)
    faults: list = field(default_factory=list)
    #: build the fabric through Mininet's cluster mode on these servers (``localhost`` only; None: plain
    #: Mininet), topologies.fabric.Fabric ``cluster``
    cluster: list | None = None

    def __post_init__(self) -> None:
        check_controller_settings(self.controller)

    def dilated(self, factor: float) -> EmulationSettings:
        """These settings for a run time-dilated by ``factor``: the control loop's periods, the stall
        timeout and the hosts' minimum RTO stretched as the scenario's times are (queues drain F times
        slower too), so they stay the same in its time scale and the
        machinery's cost per wall-clock second falls with the factor instead of staying put (at k=8,
        x4 left the machine 7 % idle: 32 agents polling every 50 ms whatever the link rate)."""
        controller = {name: value * factor if name in DILATED_CONTROLLER_SETTINGS else value
                      for name, value in self.controller.items()}
        return replace(self, poll_interval_s=self.poll_interval_s * factor, controller=controller,
                       tcp_rto_min_ms=None if self.tcp_rto_min_ms is None
                       else int(round(self.tcp_rto_min_ms * factor)),
                       confirm_timeout_s=self.confirm_timeout_s * factor, time_scale=self.time_scale * factor,
                       monitor_thresholds=self.monitor_thresholds.dilated(factor))

    def controller_settings(self, **overrides: Any) -> dict[str, Any]:
        """The settings of this run's controllers, for ``controller.launcher.local_config``:
        :attr:`controller` with the fabric's queues, holding and fixed classes only where agents pace,
        and ``overrides`` (a restarted controller keeps its ports)."""
        settings = {**self.controller, "queues": self.queues, **overrides}
        for name in ("hold_paused", "fixed_class"):
            settings[name] = self.pace and settings.get(name, False)
        return settings


def check_controller_settings(settings: dict[str, Any]) -> None:
    """Every name in ``settings`` is a :class:`~controller.config.ControllerConfig` field, checked when
    the emulation's settings are built (a typo would otherwise surface only when the first controller
    starts): :class:`~echelonflow.fields.FieldError` names the first that is not.  The values are
    checked where the controller's config is built (``controller.launcher.local_config``: a port 0 there
    means a free one)."""
    known = [spec.name for spec in dataclasses.fields(ControllerConfig)]
    for name in settings:
        if name not in known:
            raise FieldError(f"controller.{name}",
                             f"unknown controller setting (allowed: {', '.join(known)})")
