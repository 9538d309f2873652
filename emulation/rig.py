"""The rig: one Mininet/OVS fabric and its controller, for one scheduler's phases.

A scheduler's run brings the fabric up once and gives every phase a controller of its own (so a new,
empty registry): job and flow ids then stay exactly the simulator's ("job/flow"), which is the key
``Topology.path_for`` pins a flow's path with, so each phase's flows take the paths the simulator gives
them; reusing one registry would need renamed jobs and so other paths.  The rig owns what it starts:
leaving its ``with`` block (normally, on an error or on Ctrl-C) stops the fabric and the controller,
copies the logs into the run folder and removes its temporary folder.

A start that fails (Mininet and OVS fail in assorted ways on a loaded machine) is undone and retried
once.  The controller fault is the rig's too: :meth:`Rig.crash_controller` kills it (the switches keep
forwarding on the rules they hold) and :meth:`Rig.restart_controller` starts its successor on the same
folder, store, ports and API socket.  So is the switch daemon's: :meth:`Rig.stop_switch_daemon` stops
ovs-vswitchd (every switch's flows, meters and ports gone at once) and :meth:`Rig.start_switch_daemon`
starts it again and waits until every switch is back with the controller, which re-installs their state.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Callable

from controller.client import ApiClientError, EchelonClient
from controller.launcher import ControllerProcess, free_tcp_port, local_config
from echelonflow import ownership
from echelonflow.model import Job
from echelonflow.schedulers import get_scheduler
from echelonflow.topology import Topology
from echelonflow.topology_spec import TopologySpec
from emulation.errors import EmulationError, one_line
from emulation.progress import Say, prefixed
from emulation.settings import EmulationSettings
from topologies import ovs
from topologies.fabric import Fabric
from traffic.runspec import RegistrySettings


class Rig:
    """The fabric of ``topology`` and a controller running ``scheduler``, for the phases of one run.

    ``jobs`` (all of the run's) give the host pairs warmed up before the clock starts; ``run_name``
    names the run's log folder under ``settings.logs_dir``.  Use it as a context manager.
    """

    def __init__(self, topology: Topology, jobs: Sequence[Job], scheduler: str, settings: EmulationSettings,
                 progress: Say, run_name: str) -> None:
        self.topology, self.scheduler, self.settings, self.run_name = topology, scheduler, settings, run_name
        self.say = prefixed(progress, f"[{scheduler}] ")
        self.enforces = get_scheduler(scheduler).enforces
        self.topology_spec = TopologySpec.of(topology).to_json()
        self.hosts_ip = {h: topology.graph.nodes[h]["ip"] for h in topology.hosts}
        self.port = free_tcp_port()
        self.fabric = Fabric(topology, controller_port=self.port, queues=settings.queues,
                             tag=f"emu{os.getpid()}-{scheduler}"[:40],
                             connect_timeout_s=settings.fabric_connect_timeout_s,
                             tcp_rto_min_ms=settings.tcp_rto_min_ms, host_sysctls=settings.host_sysctls,
                             cluster=settings.cluster)
        self.controller: ControllerProcess | None = None
        self.problems: list[str] = []  # the controllers' log lines that look wrong, over every phase
        self._pairs = sorted({(f.src, f.dst) for job in jobs for f in job.flows})
        self._crashed: list[tuple[ControllerProcess, float]] = []  # killed, not yet succeeded
        self._vswitchd_stopped_at: float | None = None  # monotonic time of a stop not yet undone
        self._daemon_lock = threading.Lock()  # one stop or start of ovs-vswitchd at a time
        self.workdir = ownership.make_run_folder("emu")

    def __enter__(self) -> Rig:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.say("tearing down")
        try:
            for problem in self.ensure_switch_daemon():
                self.say(f"warning: {problem}")
            self.fabric.stop()
        finally:
            if self.controller is not None:
                self.controller.stop()
            if self.settings.logs_dir:
                keep_logs(self.workdir, os.path.join(self.settings.logs_dir, "logs", self.run_name))
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------------------ bring-up
    def bring_up(self, label: str) -> None:
        """A fresh controller for the phase ``label`` (the fabric too, on the first phase), retried once."""
        what = f"{'fabric' if self.fabric.net is None else 'controller'} start"
        retry_once(lambda: self._bring_up(label), self._undo_start, what, self.say)

    def _bring_up(self, label: str) -> None:
        """Controller, then the fabric connected to it (first phase only), ARP warm-up and tuning."""
        self._fresh_controller(label)
        if self.fabric.net is None:
            self.say(f"starting fabric {self.topology.name}")
            self.fabric.start()
            self.say(f"fabric up in {self.fabric.timings_s.get('start', 0.0):.1f} s")
            if self.settings.warmup:
                self._warm_up()
            self._tune_datapath()

    def _fresh_controller(self, label: str) -> None:
        """A new controller process (so a new, empty registry) on the fabric's OpenFlow port, running
        the rig's scheduler; once the fabric is up, connected to every switch and warmed up."""
        if self.controller is not None:
            self.controller.stop()
        folder = tempfile.mkdtemp(prefix=f"ctl-{label}-", dir=self.workdir)
        self.controller = self._controller_process(folder)
        self.say(f"{label}: starting controller (OpenFlow port {self.port})")
        self.controller.start()
        ownership.record_processes(self.workdir, self.controller.pid)
        self.say(f"{label}: controller up (pid {self.controller.pid})")
        if self.fabric.net is not None:
            self.controller.wait_switches(timeout_s=30)
        with EchelonClient(socket_path=self.controller.api_socket_path,
                           token_file=self.controller.token_file) as client:
            try:
                client.set_scheduler(self.scheduler)
            except ApiClientError as exc:
                raise EmulationError(f"controller refused scheduler {self.scheduler!r}: {exc}") from None
        if self.fabric.net is not None and self.settings.warmup:
            self._warm_up()  # ARP and first-packet routes off the clock

    def _controller_process(self, folder: str, **ports: int | None) -> ControllerProcess:
        """A controller with this run's settings; a fresh phase and a restart after a crash differ only
        in folder and ``ports`` (a restart keeps ``api_port`` and ``metrics_port``)."""
        config = local_config(**self.settings.controller_settings(**ports))
        return ControllerProcess(self.topology, config, ofp_port=self.port, workdir=folder)

    def _undo_start(self) -> None:
        with contextlib.suppress(Exception):
            self.fabric.stop()
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def _warm_up(self) -> None:
        """One ping per communicating pair, so ARP and reactive routing happen before the clock starts."""
        for src, dst in self._pairs:
            self.fabric.host(src).cmd(f"ping -c 1 -W 2 {self.hosts_ip[dst]}")
            self.fabric.host(dst).cmd(f"ping -c 1 -W 2 {self.hosts_ip[src]}")

    def _tune_datapath(self, wait_s: float = 0.0) -> bool:
        """Give the userspace datapath's shared transmit socket a large send buffer (see
        ``topologies.ovs.ensure_tx_buffer``): without it ovs-vswitchd drops packets on every port as soon
        as a few htb queues back up.  The socket exists once packets flowed, i.e. after the warm-up (or,
        after a restart of the daemon, once traffic flows again: waited for up to ``wait_s``)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                size = ovs.ensure_tx_buffer()
            except (ovs.OvsError, OSError) as exc:
                self.say(f"warning: could not enlarge ovs-vswitchd's send buffer ({exc}); expect drops")
                return False
            if size is not None:
                return True
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if not wait_s:
            self.say("note: ovs-vswitchd has no packet transmit socket (kernel datapath?)")
        return False

    # ------------------------------------------------------------------------------ during a phase
    def registry_settings(self) -> RegistrySettings:
        """How this phase's agents reach the controller's registry."""
        settings = self.settings
        return RegistrySettings(socket_path=self.controller.api_socket_path,
                                token_file=self.controller.token_file,
                                poll_interval_s=settings.poll_interval_s, pace=settings.pace,
                                install_wait_s=settings.install_wait_s)

    def collect_problems(self) -> None:
        """Keep the problem lines of the current controller's log (said once the run is over)."""
        self.problems += self.controller.log_problems()

    def crash_controller(self) -> str:
        """The controller fault: kill -9 (the switches keep forwarding on the rules they hold)."""
        ctl, pid = self.controller, self.controller.pid
        os.kill(pid, signal.SIGKILL)
        self._crashed.append((ctl, time.monotonic()))
        ctl.stop()  # reaps it; its folder keeps the store
        self.problems.extend(ctl.log_problems())
        return f"fault: controller pid {pid} killed with SIGKILL"

    def restart_controller(self) -> str:
        """A new controller on the killed one's folder, store, ports and API socket: it loads the
        registry and re-enforces every live flow; the agents never see a new address."""
        old, killed_at = self._crashed.pop()
        self.controller = self._controller_process(old.workdir, api_port=old.api_port,
                                                   metrics_port=old.metrics_port)
        self.controller.start()
        ownership.record_processes(self.workdir, self.controller.pid)
        self.controller.wait_switches(timeout_s=30)
        return (f"fault: controller restarted on the same store (pid {self.controller.pid}), serving again "
                f"{time.monotonic() - killed_at:.1f} s after the kill")

    def stop_switch_daemon(self) -> str:
        """The switch daemon's fault: ovs-vswitchd stopped, so every switch loses its flows, meters and
        ports at once and drops its controller connection (waited for: the restart's reconnection must
        be a new one)."""
        with self._daemon_lock:  # a start due while the stop is under way waits for it
            started = time.monotonic()
            pid = self.fabric.stop_switch_daemon()
            self._vswitchd_stopped_at = started
            stop_ms = 1000 * (time.monotonic() - started)
            try:
                self._wait_switch_count(lambda connected: connected == 0, timeout_s=10.0)
            except (ApiClientError, EmulationError) as exc:
                return (f"fault: ovs-vswitchd pid {pid} stopped in {stop_ms:.0f} ms (controller: "
                        f"{one_line(exc)})")
            return (f"fault: ovs-vswitchd pid {pid} stopped in {stop_ms:.0f} ms; the controller saw every "
                    f"switch go {time.monotonic() - started:.2f} s after the stop began")

    def start_switch_daemon(self) -> str:
        """ovs-vswitchd started again: its ports and QoS back (the fabric), every switch reconnected (the
        controller then re-installs routes, rules and meters), its new transmit socket enlarged."""
        with self._daemon_lock:
            stopped_at = self._vswitchd_stopped_at
            if stopped_at is None:
                return "fault: ovs-vswitchd is running; nothing to start"
            timings = self.fabric.start_switch_daemon()
            self._vswitchd_stopped_at = None
            self.controller.wait_switches(timeout_s=30)
            reconnected_s = time.monotonic() - stopped_at
            tx = self._tune_datapath(wait_s=5.0)
        return (f"fault: ovs-vswitchd restarted: ports back {timings['ports']:.2f} s and QoS "
                f"{timings['qos']:.2f} s after its start, every switch reconnected {reconnected_s:.2f} s "
                f"after the stop{'' if tx else '; send buffer not enlarged yet'}")

    def ensure_switch_daemon(self) -> list[str]:
        """Start ovs-vswitchd again if a fault left it stopped (``ovs@T..U`` with U after the phase's end),
        so the next phase and the teardown find their switches; the problem, if that fails."""
        with self._daemon_lock:
            if self._vswitchd_stopped_at is None:
                return []
        try:
            self.say(self.start_switch_daemon())
        except Exception as exc:  # noqa: BLE001 - said, and the teardown still runs
            return [f"starting ovs-vswitchd again failed: {one_line(exc)}"]
        return []

    def _wait_switch_count(self, done: Callable[[int], bool], timeout_s: float) -> None:
        """Wait until the controller's count of connected switches satisfies ``done``."""
        deadline = time.monotonic() + timeout_s
        with EchelonClient(socket_path=self.controller.api_socket_path,
                           token_file=self.controller.token_file, timeout_s=5.0) as client:
            while True:
                connected = int(client.health()["switches"]["connected"])
                if done(connected):
                    return
                if time.monotonic() > deadline:
                    raise EmulationError(f"{connected} switches still connected after {timeout_s:.0f} s")
                time.sleep(0.02)


def retry_once(action: Callable[[], None], undo: Callable[[], None], what: str, say: Say,
               pause_s: float = 1.0) -> None:
    """Run ``action``; if it fails, ``undo`` what it left, say so in one line and try once more.

    A second failure raises :class:`EmulationError` with one line naming both (Mininet and OVS raise
    assorted exception types during a bring-up, so any ``Exception`` counts; Ctrl-C does not).
    """
    try:
        action()
        return
    except Exception as exc:  # noqa: BLE001 (see docstring)
        first = one_line(exc)
    undo()
    say(f"{what} failed ({first}); retrying once")
    time.sleep(pause_s)
    try:
        action()
    except Exception as exc:  # noqa: BLE001
        undo()
        raise EmulationError(f"{what} failed twice: {one_line(exc)} (first: {first})") from None


def keep_logs(workdir: str, target: str) -> None:
    """Copy agent logs, agent result documents, monitor samples and the controller logs into the run
    folder (flattened: ``together/agent-h1.log`` becomes ``together_agent-h1.log``)."""
    os.makedirs(target, exist_ok=True)
    for root, _dirs, files in os.walk(workdir):
        for name in files:
            if name.endswith(".log") or name.startswith(("out-", "monitor-")):
                rel = os.path.relpath(os.path.join(root, name), workdir).replace(os.sep, "_")
                shutil.copyfile(os.path.join(root, name), os.path.join(target, rel))

