"""Running jobs for real: start one agent per host, wait for all, turn their timings into results.

Two layers:

* :func:`run_agents` works anywhere: it writes one run-spec per host, starts the agents through a
  ``popen`` function (``subprocess.Popen`` on this machine for tests, ``mininet_host.popen`` on the
  fabric), records their pids, waits for all of them with a deadline, and stops every agent it started
  (by pid) on failure or Ctrl-C.  The first agent that fails decides the error message.  An agent that
  *dies* (killed by a signal, or stopped by SIGTERM) fails only the jobs it takes part in: the survivors
  are told (a ``peer_died`` control message) and go on with the other jobs, and the registry releases
  the failed jobs' flows and the dead agent's channels (:func:`release_in_registry`).
* :func:`assemble_run` merges the agents' documents into the result shape shared with the simulator
  (``echelonflow.results``): compute times from the compute's host, a flow's start from its sender and its
  finish from its receiver (the moment the last byte arrived); reference times, ideal finish times,
  tardiness and the objective come from ``echelonflow.results.build_run``, the simulator's builder.

:func:`emulate_scenario` (the fabric part: fresh Mininet/OVS fabric and controller per scheduler) builds on
both; see ``docs/emulation.md``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from controller.topology_spec import spec_of
from echelonflow import ownership
from echelonflow.errors import UserError
from echelonflow.fileio import read_json
from echelonflow.model import ComputeTask, Job, qualified
from echelonflow.results import RunResult, build_run
from echelonflow.topology import intf_name
from traffic.agent import INTERRUPTED
from traffic.capture import CaptureError, WireCapture
from traffic.channels import channel_plan
from traffic.control import ControlError, wait_for_sockets
from traffic.fault_injector import NetworkFaults
from traffic.monitor import FidelityMonitor, Thresholds, combine, sample_interval_s
from traffic.runspec import RegistrySettings, RunSpec, SpecError, check_serialisable, save_runspec

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA_PORT = 46000


class EmulationError(Exception):
    """An emulation run that failed (an agent died, stalled or mis-delivered); the message says which."""


#: popen(host, argv, log_file) -> a started process (``subprocess.Popen``-like: pid, poll, wait, ...)
PopenFn = Callable[[str, list, Any], Any]


def local_popen(host: str, argv: list, log_file: Any) -> subprocess.Popen:
    """Start an agent as a plain process on this machine (tests without the fabric)."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env,
                            start_new_session=True)


@dataclass
class AgentHandle:
    host: str
    spec_path: str
    output_path: str
    log_path: str
    proc: Any = None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid


@dataclass
class AgentsOutcome:
    """What :func:`run_agents` returns: every agent's document, keyed by host, and the handles."""

    documents: dict[str, dict]
    handles: dict[str, AgentHandle] = field(default_factory=dict)
    t0_s: float = 0.0
    failed_jobs: dict[str, str] = field(default_factory=dict)  # job -> one line: why it failed


def agent_hosts(jobs: Sequence[Job]) -> list[str]:
    """Every host any job uses, in first-use order (one agent each)."""
    seen: dict[str, None] = {}
    for job in jobs:
        for host in job.hosts:
            seen.setdefault(host)
    return list(seen)


def run_agents(
    jobs: Sequence[Job],
    hosts_ip: Mapping[str, str],
    workdir: str,
    popen: PopenFn = local_popen,
    *,
    data_port: int = DEFAULT_DATA_PORT,
    registry: RegistrySettings | None = None,
    scheduler: str = "",
    run_timeout_s: float = 300.0,
    connect_timeout_s: float = 10.0,
    confirm_timeout_s: float = 30.0,
    start_margin_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    python: str = sys.executable,
    topology_spec: Mapping[str, Any] | None = None,
    channel_plan: Mapping[str, list[dict[str, Any]]] | None = None,
    kill_agents: Mapping[str, float] | None = None,
    actions: Sequence[tuple[float, Callable[[], str]]] = (),
    congestion_control: str | None = None,
) -> AgentsOutcome:
    """Run one agent per host used by ``jobs``; return their documents or raise :class:`EmulationError`.

    ``workdir`` must exist and be empty of earlier agent files (specs, outputs, logs and the control
    sockets go there).  Agents start together at t0 = now + ``start_margin_s`` (default grows with the
    number of agents and of channels to open, so slow interpreter start-up never makes one late).
    ``topology_spec`` lets agents pin their channels to the flows' paths; ``channel_plan`` (source host ->
    ``traffic.channels.channel_plan`` entries) says how many channels each opens before t0.

    Faults: ``kill_agents`` (host -> seconds after t0) kills those agents with SIGKILL; ``actions``
    ((seconds after t0, action)) runs each action then, in a thread (its one-line answer is said).  A
    dead agent's jobs end up in ``failed_jobs``; if every job failed, :class:`EmulationError` says why.
    """
    hosts = agent_hosts(jobs)
    missing = [h for h in hosts if h not in hosts_ip]
    if missing:
        raise EmulationError(f"no IP address for host(s) {', '.join(missing)}")
    try:
        check_serialisable(list(jobs))
    except SpecError as exc:
        raise EmulationError(f"jobs cannot be handed to the agents: {exc}") from None
    control_dir = os.path.join(workdir, "ctl")
    os.makedirs(control_dir, exist_ok=False)
    channels = sum(e["count"] for entries in (channel_plan or {}).values() for e in entries)
    margin = start_margin_s if start_margin_s is not None else 1.5 + 0.25 * len(hosts) + 0.02 * channels
    t0_s = time.time() + margin
    handles: dict[str, AgentHandle] = {}
    for host in hosts:
        handle = AgentHandle(host, os.path.join(workdir, f"spec-{host}.json"),
                             os.path.join(workdir, f"out-{host}.json"),
                             os.path.join(workdir, f"agent-{host}.log"))
        spec = RunSpec(host=host, hosts_ip=dict(hosts_ip), jobs=list(jobs), t0_s=t0_s, data_port=data_port,
                       control_dir=control_dir, output_path=handle.output_path, registry=registry,
                       connect_timeout_s=connect_timeout_s, confirm_timeout_s=confirm_timeout_s,
                       run_timeout_s=run_timeout_s, scheduler=scheduler,
                       topology_spec=None if topology_spec is None else dict(topology_spec),
                       channels=None if channel_plan is None else list(channel_plan.get(host, [])),
                       congestion_control=congestion_control)
        save_runspec(spec, handle.spec_path)
        handles[host] = handle
    say = progress or (lambda text: None)
    try:
        for host, handle in handles.items():
            with open(handle.log_path, "w", encoding="utf-8") as log_file:
                handle.proc = popen(host, ownership.PDEATHSIG + [python, "-u", "-m", "traffic.agent",
                                                                 handle.spec_path], log_file)
        ownership.record_processes(workdir, *(h.pid for h in handles.values()))
        say(f"{len(handles)} agents started (pids {', '.join(str(h.pid) for h in handles.values())})")
        try:
            wait_for_sockets(control_dir, hosts, max(0.0, t0_s - time.time()),
                             alive=lambda: _first_exit_problem(handles))
        except ControlError as exc:
            raise EmulationError(f"agents did not come up before t0: {exc}") from None
        say("agents ready; running")
        timed = [(at_s, _killer(handles[host], host)) for host, at_s in (kill_agents or {}).items()]
        timers = [_start_timer(t0_s + at_s, action, say) for at_s, action in [*timed, *actions]]

        def on_death(host: str, lost: list[str], reason: str) -> None:
            say(f"{reason}: job(s) {', '.join(lost) or '(none left)'} failed; the others go on")
            tell_agents(control_dir, [h for h in hosts if h != host],
                        {"type": "peer_died", "host": host, "jobs": lost, "reason": reason})
            if registry is not None and lost:
                release_in_registry(registry, lost, host, say)

        failed = _wait_all(handles, jobs, t0_s, t0_s + run_timeout_s + 5.0, say, on_death)
        for timer in timers:  # one not due yet never fires; one under way (a restart) is waited for
            timer.cancel()
            timer.join(60.0)
        documents = {host: _read_document(handle) for host, handle in handles.items()
                     if handle.host not in failed.dead}
    finally:
        stop_agents(handles.values())
    if jobs and len(failed.jobs) == len(jobs):
        raise EmulationError("every job failed: " + "; ".join(_failure_lines(failed.jobs)))
    return AgentsOutcome(documents, handles, t0_s, failed.jobs)


def _failure_lines(failed_jobs: Mapping[str, str]) -> list[str]:
    """``job a failed: <reason>`` lines, one per job."""
    return [f"job {job_id} failed: {reason}" for job_id, reason in failed_jobs.items()]


def _killer(handle: AgentHandle, host: str) -> Callable[[], str]:
    def kill() -> str:
        if handle.proc is None or handle.proc.poll() is not None:
            return f"fault: agent {host} already gone, nothing to kill"
        with contextlib.suppress(ProcessLookupError):
            os.kill(handle.proc.pid, signal.SIGKILL)
        return f"fault: killed agent {host} (pid {handle.proc.pid}) with SIGKILL"

    return kill


def _start_timer(at_epoch_s: float, action: Callable[[], str], say: Callable[[str], None]) -> threading.Timer:
    def run() -> None:
        try:
            say(action())
        except Exception as exc:  # noqa: BLE001 (a fault that cannot be injected is said, not raised)
            say(f"fault could not be injected: {_one_line(exc)}")

    timer = threading.Timer(max(0.0, at_epoch_s - time.time()), run)
    timer.daemon = True
    timer.start()
    return timer


def tell_agents(control_dir: str, hosts: Sequence[str], message: Mapping[str, Any]) -> None:
    """Send one control message to each agent in ``hosts`` (best effort: one that is gone needs no word)."""
    data = json.dumps(dict(message, **{"from": "orchestrator"})).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        for host in hosts:
            with contextlib.suppress(OSError):
                sock.sendto(data, os.path.join(control_dir, f"{host}.sock"))


def release_in_registry(registry: RegistrySettings, job_ids: Sequence[str], host: str,
                        say: Callable[[str], None]) -> None:
    """A dead agent leaves nothing behind in the registry: its failed jobs' unfinished flows are aborted
    (their enforcement goes with the next round) and its own channels removed.  A registry that refuses
    or is unreachable is said in one line; the run goes on."""
    from controller.client import ApiClientError, EchelonClient

    try:
        with EchelonClient(socket_path=registry.socket_path, token_file=registry.token_file,
                           timeout_s=10.0) as client:
            aborted = sum(len(client.abort_job(registry.job_prefix + job_id)["aborted"])
                          for job_id in job_ids)
            mine = [c["channel_id"] for c in client.channels()
                    if c["src"] == host and c["channel_id"].startswith(f"{host}.")]
            for channel_id in mine:
                client.remove_channel(channel_id)
    except ApiClientError as exc:
        say(f"warning: could not release agent {host}'s flows in the registry: {exc}")
        return
    say(f"registry: released {aborted} unfinished flow(s) of job(s) {', '.join(job_ids)} and agent "
        f"{host}'s {len(mine)} channel(s)")


def stop_agents(handles: Any, grace_s: float = 3.0) -> None:
    """Terminate every agent still running (SIGTERM by pid, then SIGKILL after ``grace_s``)."""
    ownership.stop_children([h.proc for h in handles], grace_s)


def _first_exit_problem(handles: Mapping[str, AgentHandle]) -> str | None:
    for host, handle in handles.items():
        code = handle.proc.poll() if handle.proc is not None else None
        if code is not None and code != 0:
            return f"agent {host} exited with status {code}: {_failure_text(handle)}"
    return None


@dataclass
class _Failures:
    """What :func:`_wait_all` saw die: the dead agents and the jobs they took down (job -> reason)."""

    dead: set[str] = field(default_factory=set)
    jobs: dict[str, str] = field(default_factory=dict)


def _wait_all(handles: Mapping[str, AgentHandle], jobs: Sequence[Job], t0_s: float, deadline_s: float,
              say: Callable[[str], None], on_death: Callable[[str, list[str], str], None]) -> _Failures:
    """Wait for every agent.  A death fails its jobs (``on_death`` tells the rest); any other failure
    ends the run with its root cause."""
    running = set(handles)
    failed = _Failures()
    while running:
        for host in sorted(running):
            code = handles[host].proc.poll()
            if code is None:
                continue
            running.discard(host)
            death = _death(handles[host], code)
            if death is not None:
                failed.dead.add(host)
                reason = f"agent {host} died ({death}) {time.time() - t0_s:.1f} s after t0"
                lost = [j.job_id for j in jobs if host in j.hosts and j.job_id not in failed.jobs]
                failed.jobs.update(dict.fromkeys(lost, reason))
                on_death(host, lost, reason)
                continue
            if code != 0:
                # Peers abort on a failure; give them a moment so the root cause can be told apart.
                time.sleep(0.3)
                raise EmulationError(_root_cause(handles, failed.dead))
            say(f"agent {host} done ({len(handles) - len(running)}/{len(handles)})")
        if running and time.time() > deadline_s:
            raise EmulationError(f"agents still running at the run deadline: {', '.join(sorted(running))}")
        time.sleep(0.05)
    return failed


def _death(handle: AgentHandle, code: int) -> str | None:
    """How an agent that ended with ``code`` died (killed by a signal, or stopped by SIGTERM, which it
    turns into an "interrupted" exit), or None if it exited by itself."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code != 0 and _failure_text(handle) == INTERRUPTED:
        return "stopped by SIGTERM"
    return None


def _root_cause(handles: Mapping[str, AgentHandle], dead: set[str] = frozenset()) -> str:
    """The failure that started it all: an agent killed by a signal (its peers then see broken
    connections), else one whose error is not 'aborted because of a peer'.  Agents whose death was
    already dealt with (``dead``) are not it."""
    failures = []
    for host, handle in handles.items():
        code = handle.proc.poll()
        if code is not None and code != 0 and host not in dead:
            failures.append((host, code, _failure_text(handle)))
    primary = ([f for f in failures if f[1] < 0] or [f for f in failures if not f[2].startswith("aborted:")]
               or failures)
    host, code, text = primary[0]
    return f"agent {host} failed (exit status {code}): {text}"


def _failure_text(handle: AgentHandle) -> str:
    try:
        doc = _load_json(handle.output_path)
        if doc.get("error"):
            return str(doc["error"])
    except ValueError:
        pass
    try:
        with open(handle.log_path, encoding="utf-8", errors="replace") as fh:
            lines = [line.strip() for line in fh if line.strip()]
        return lines[-1] if lines else "no output"
    except OSError:
        return "no output"


def _load_json(path: str) -> dict:
    data = read_json(path, "agent result", ValueError)
    if not isinstance(data, dict):
        raise ValueError(f"agent result {path}: not a JSON object")
    return data


def _read_document(handle: AgentHandle) -> dict:
    try:
        return _load_json(handle.output_path)
    except ValueError as exc:
        raise EmulationError(f"agent {handle.host} exited 0 but left no readable result ({exc})") from None


# ------------------------------------------------------------------------------------------ assembly
def assemble_run(
    jobs: Sequence[Job],
    documents: Mapping[str, Mapping[str, Any]],
    scheduler: str,
    alone_s: Mapping[str, float] | None = None,
    failed_jobs: Mapping[str, str] | None = None,
) -> RunResult:
    """The shared result shape from the agents' documents (see module docstring).

    Checks that every flow was delivered exactly (receiver count and sender confirmation equal the size);
    a job's slowdown is its completion over ``alone_s[job]`` (its completion when run alone), 1.0 if
    not given.  ``failed_jobs`` (job -> why) are left out of the timings and listed as failed.
    """
    start_s: dict[str, float] = {}
    finish_s: dict[str, float] = {}
    failed_jobs = dict(failed_jobs or {})
    jobs = [job for job in jobs if job.job_id not in failed_jobs]
    for job in jobs:
        for task in job.tasks.values():
            qid = qualified(job.job_id, task.task_id)
            if isinstance(task, ComputeTask):
                record = _record(documents, task.host, "tasks", qid)
                start_s[qid], finish_s[qid] = float(record["start"]), float(record["finish"])
                continue
            sent = _record(documents, task.src, "sent", qid)
            received = _record(documents, task.dst, "received", qid)
            for who, count in (("receiver", received.get("received_bytes")),
                               ("sender's confirmation", sent.get("confirmed_bytes"))):
                if count != task.size_bytes:
                    raise EmulationError(
                        f"flow {qid}: {who} counted {count} bytes, expected {task.size_bytes}")
            start_s[qid], finish_s[qid] = float(sent["start"]), float(received["finish"])
    run = build_run(scheduler, jobs, start_s, finish_s, alone_s)
    run.failed_jobs = failed_jobs or None
    return run


def _record(documents: Mapping[str, Mapping[str, Any]], host: str, section: str,
            qid: str) -> Mapping[str, Any]:
    doc = documents.get(host)
    if doc is None:
        raise EmulationError(f"no result from agent {host} (needed for {qid})")
    record = doc.get(section, {}).get(qid)
    if record is None or (section == "tasks" and "finish" not in record):
        raise EmulationError(f"agent {host} has no {section} record for {qid}")
    return record


# ------------------------------------------------------------------------------------------ fabric
@dataclass
class EmulationSettings:
    """Knobs of :func:`emulate_scenario` (defaults suit this 2-core machine's userspace datapath)."""

    data_port: int = DEFAULT_DATA_PORT
    queues: int = 4
    alone_runs: bool = True  # several jobs: run each alone too (the simulator's slowdown definition)
    warmup: bool = True  # ping every communicating pair first (ARP and first-packet routing off the clock)
    run_timeout_factor: float = 4.0  # x the simulated completion time, plus run_timeout_extra_s
    run_timeout_extra_s: float = 60.0
    logs_dir: str | None = None  # where agent and controller logs are copied (the run folder)
    poll_interval_s: float = 0.05  # agents' allocation/progress poll (flows last >= ~0.5 s: ~10 polls)
    pace: bool = True  # agents pace flows at their allocated rate (schedulers that enforce only)
    #: agents hold paused flows and the controller keeps their class (controller setting hold_paused)
    hold_paused: bool = True
    #: a flow keeps the class of its first allocation (controller setting fixed_class)
    fixed_class: bool = True
    tcp_rto_min_ms: int | None = 1000  # hosts' TCP minimum RTO (parked flows wait behind urgent classes)
    tcp_congestion_control: str | None = None  # the agents' channels' TCP congestion control (None: host's)
    #: sysctls set in every host's namespace (topologies.fabric.Fabric ``host_sysctls``)
    host_sysctls: dict = field(default_factory=dict)
    controller_interval_s: float = 0.2  # the scheduling service's periodic round (arrivals run at once)
    stats_interval_s: float = 1.0  # the controller's switch-counter poll (dashboard, metrics)
    confirm_timeout_s: float = 30.0  # a flow's bytes stop moving this long: the run fails
    #: the time dilation this run runs at: the fidelity monitor samples that much less often, so it
    #: judges intervals as long in the scenario's time scale as an undilated run's (at x16 a 9000-byte
    #: frame takes 115 ms on a link, and 0.5 s intervals held too few frames to compare with the rate)
    time_scale: float = 1.0

    def dilated(self, factor: float) -> EmulationSettings:
        """These settings for a run time-dilated by ``factor``: the control loop's periods, the stall
        timeout and the hosts' minimum RTO stretched as the scenario's times are (queues drain F times
        slower too), so they stay the same in its time scale and the
        machinery's cost per wall-clock second falls with the factor instead of staying put (at k=8,
        x4 left the machine 7 % idle: 32 agents polling every 50 ms whatever the link rate)."""
        return replace(self, poll_interval_s=self.poll_interval_s * factor,
                       controller_interval_s=self.controller_interval_s * factor,
                       stats_interval_s=self.stats_interval_s * factor,
                       tcp_rto_min_ms=None if self.tcp_rto_min_ms is None
                       else int(round(self.tcp_rto_min_ms * factor)),
                       confirm_timeout_s=self.confirm_timeout_s * factor, time_scale=self.time_scale * factor,
                       monitor_thresholds=self.monitor_thresholds.dilated(factor))
    install_wait_s: float = 0.5  # a channel's registration waits up to this for its rules' barrier acks
    monitor_interval_s: float | None = None  # fidelity monitor's sampling period (None: by fabric size)
    monitor_thresholds: Thresholds = field(default_factory=Thresholds)  # .dilated(F) for dilated runs
    api_port: int = 0  # the controllers' API (and dashboard) port; 0: a free one per controller
    metrics_port: int = 0  # the controllers' /metrics port; 0: a free one per controller
    capture: bool = False  # capture first-hop switch ports and check marks and times (traffic.capture)
    fabric_connect_timeout_s: float = 30.0  # every switch connected to the controller within this
    #: faults injected into the round with all jobs together (``echelon emulate --fault``): objects with
    #: ``kind``, ``target`` and ``at_s`` (``echelonflow.faults.FaultEvent``); handled here: ``agent``
    #: (that host's agent killed with SIGKILL) and ``controller`` (killed with SIGKILL, then restarted
    #: on the same registry store); ``link`` and ``switch`` go down (and up) in every round, as the
    #: simulator replays them in every run (traffic.fault_injector)
    faults: list = field(default_factory=list)
    #: build the fabric through Mininet's cluster mode on these servers (``localhost`` only; None: plain
    #: Mininet), topologies.fabric.Fabric ``cluster``
    cluster: list | None = None


def fabric_popen(fabric: Any) -> PopenFn:
    """A ``popen`` that starts the agent inside the Mininet host (its own network namespace)."""

    def popen(host: str, argv: list, log_file: Any) -> Any:
        env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        return fabric.host(host).popen(argv, stdin=subprocess.DEVNULL, stdout=log_file,
                                       stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env)

    return popen


def emulate_scheduler(
    topology: Any,
    jobs: Sequence[Job],
    scheduler: str,
    simulated_s: Mapping[str, float],
    settings: EmulationSettings,
    progress: Callable[[str], None],
    alone_fallback_s: Mapping[str, float] | None = None,
    run_name: str = "",
    simulated_flows: Mapping[str, Any] | None = None,
) -> RunResult:
    """One scheduler on a fresh fabric and controller: all jobs together, then (several jobs) each alone.

    ``simulated_s`` (job -> simulated completion) only sizes the run timeout.  Without the alone
    rounds (``settings.alone_runs`` false) slowdowns are taken against ``alone_fallback_s``.  Every round
    is watched by the fidelity monitor (and, with ``settings.capture``, captured on the wire); the result
    carries their verdicts.  ``run_name`` (default: the scheduler) names this run's folders under
    ``settings.logs_dir``.  ``simulated_flows`` (the simulated run's flows) size each agent's channel
    pool (:func:`traffic.channels.channel_plan`).  A fabric or controller start that fails is retried once.
    Everything started here (controller, fabric, agents, capture) is stopped in ``finally`` blocks, also on
    Ctrl-C.
    """
    import shutil
    import tempfile

    from controller.client import ApiClientError, EchelonClient
    from controller.launcher import ControllerProcess, free_tcp_port
    from echelonflow.schedulers import get_scheduler
    from topologies.fabric import Fabric

    run_name = run_name or scheduler
    workdir = ownership.make_run_folder("emu")
    port = free_tcp_port()
    tag = f"emu{os.getpid()}-{scheduler}"[:40]
    fabric = Fabric(topology, controller_port=port, queues=settings.queues, tag=tag,
                    connect_timeout_s=settings.fabric_connect_timeout_s,
                    tcp_rto_min_ms=settings.tcp_rto_min_ms, host_sysctls=settings.host_sysctls,
                    cluster=settings.cluster)
    hosts_ip = {h: topology.graph.nodes[h]["ip"] for h in topology.hosts}
    ctl: Any = None
    say = _prefixed(progress, f"[{scheduler}] ")

    def controller_process(controller_dir: str, api_port: int, metrics_port: int | None) -> Any:
        """This run's controller settings; a fresh round and a restart after a crash differ only in
        folder and ports."""
        return ControllerProcess(topology, ofp_port=port, queues=settings.queues,
                                 interval_s=settings.controller_interval_s,
                                 stats_interval_s=settings.stats_interval_s,
                                 hold_paused=settings.pace and settings.hold_paused,
                                 fixed_class=settings.pace and settings.fixed_class,
                                 workdir=controller_dir, api_port=api_port, metrics_port=metrics_port)

    def fresh_controller(label: str) -> Any:
        """A new controller process (so a new, empty registry) on the fabric's OpenFlow port.

        Every round gets its own: job and flow ids then stay exactly the simulator's ("job/flow"), which
        is the key ``Topology.path_for`` pins a flow's path with, so each round's flows take the paths
        the simulator gives them; reusing one registry would need renamed jobs and so other paths.
        """
        nonlocal ctl
        if ctl is not None:
            ctl.stop()
        ctl = controller_process(tempfile.mkdtemp(prefix=f"ctl-{label}-", dir=workdir), settings.api_port,
                                 settings.metrics_port)
        say(f"{label}: starting controller (OpenFlow port {port})")
        ctl.start()
        ownership.record_processes(workdir, ctl.pid)
        say(f"{label}: controller up (pid {ctl.pid})")
        if fabric.net is not None:
            ctl.wait_switches(timeout_s=30)
        with EchelonClient(socket_path=ctl.api_socket_path, token_file=ctl.token_file) as client:
            try:
                client.set_scheduler(scheduler)
            except ApiClientError as exc:
                raise EmulationError(f"controller refused scheduler {scheduler!r}: {exc}") from None
        if fabric.net is not None and settings.warmup:
            _warm_up(fabric, jobs, hosts_ip)  # ARP and first-packet routes off the clock
        return ctl

    def bring_up(label: str) -> None:
        """Controller, then the fabric connected to it (first round only), ARP warm-up and tuning."""
        fresh_controller(label)
        if fabric.net is None:
            say(f"starting fabric {topology.name}")
            fabric.start()
            say(f"fabric up in {fabric.timings_s.get('start', 0.0):.1f} s")
            if settings.warmup:
                _warm_up(fabric, jobs, hosts_ip)
            _tune_datapath(progress, scheduler)

    crashed: list[tuple[Any, float]] = []  # (the killed controller, when) until its successor serves

    def crash_controller() -> str:
        """The controller fault: kill -9 (the switches keep forwarding on the rules they hold)."""
        pid = ctl.pid
        os.kill(pid, signal.SIGKILL)
        crashed.append((ctl, time.monotonic()))
        ctl.stop()  # reaps it; its folder keeps the store
        problems.extend(ctl.log_problems())
        return f"fault: controller pid {pid} killed with SIGKILL"

    def restart_controller() -> str:
        """A new controller on the killed one's folder, store, ports and API socket: it loads the
        registry and re-enforces every live flow; the agents never see a new address."""
        nonlocal ctl
        old, killed_at = crashed.pop()
        ctl = controller_process(old.workdir, old.api_port, old.metrics_port)
        ctl.start()
        ownership.record_processes(workdir, ctl.pid)
        ctl.wait_switches(timeout_s=30)
        return (f"fault: controller restarted on the same store (pid {ctl.pid}), serving again "
                f"{time.monotonic() - killed_at:.1f} s after the kill")

    def controller_actions(faults: Sequence[Any]) -> list[tuple[float, Callable[[], str]]]:
        """``controller@T``: kill and restart at once; ``controller@T..U``: kill at T, restart at U."""
        events = [f for f in faults if f.kind == "controller"]
        actions: list[tuple[float, Callable[[], str]]] = []
        for event in events:
            if event.up:
                actions.append((event.at_s, restart_controller))
            elif any(e.up and e.at_s > event.at_s for e in events):
                actions.append((event.at_s, crash_controller))
            else:
                actions.append((event.at_s, lambda: f"{crash_controller()}; {restart_controller()}"))
        return actions

    def tear_down_failed_start() -> None:
        nonlocal ctl
        with contextlib.suppress(Exception):
            fabric.stop()
        if ctl is not None:
            ctl.stop()
            ctl = None

    enforces = get_scheduler(scheduler).enforces
    topology_spec = spec_of(topology)
    path_of = topology.path_for if enforces else (lambda src, dst, key: topology.pair_path(src, dst))
    problems: list[str] = []
    try:
        rounds: list[tuple[str, list[Job]]] = [("together", list(jobs))]
        if settings.alone_runs and len(jobs) > 1:
            rounds += [(f"alone-{job.job_id}", [job]) for job in jobs]
        documents: dict[str, dict] = {}
        failed_jobs: dict[str, str] = {}
        alone_s: dict[str, float] = {}
        monitor_docs: dict[str, dict] = {}
        wire_docs: dict[str, dict] = {}
        for label, round_jobs in rounds:
            retry_once(lambda lb=label: bring_up(lb), tear_down_failed_start,
                       f"{'fabric' if fabric.net is None else 'controller'} start", say)
            agents_dir = os.path.join(workdir, label)
            os.makedirs(agents_dir)
            budget = max(j.arrival_s + simulated_s.get(j.job_id, 0.0) for j in round_jobs)
            registry = RegistrySettings(ctl.api_socket_path, ctl.token_file, settings.poll_interval_s, "",
                                        settings.pace, settings.install_wait_s)
            say(f"{label}: {len(round_jobs)} job(s), {len(agent_hosts(round_jobs))} agents")
            host_ports = {h: _first_hop_port(topology, h) for h in agent_hosts(round_jobs)}
            capture_dir = os.path.join(settings.logs_dir or workdir, "captures", run_name, label)
            wire = WireCapture(capture_dir, sorted(host_ports.values())) if settings.capture else None
            ports = fabric.switch_ports
            interval_s = settings.monitor_interval_s or sample_interval_s(len(ports)) * settings.time_scale
            monitor = FidelityMonitor(ports, interval_s, ctl.pid, settings.monitor_thresholds)
            network = NetworkFaults(fabric, settings.faults)  # links and switches: every round, as simulated
            with contextlib.ExitStack() as watchers:
                watchers.callback(_say_all, say, network.restore)
                if wire is not None:
                    try:
                        watchers.enter_context(wire)
                    except CaptureError as exc:
                        raise EmulationError(str(exc)) from None
                    ownership.record_processes(workdir, wire.proc.pid)
                watchers.enter_context(monitor)
                round_ids = {j.job_id for j in round_jobs}
                faults = settings.faults if label == "together" else []
                plan = None if simulated_flows is None else channel_plan(
                    {k: f for k, f in simulated_flows.items() if k.split("/", 1)[0] in round_ids}, path_of)
                outcome = run_agents(
                    round_jobs, hosts_ip, agents_dir, fabric_popen(fabric), data_port=settings.data_port,
                    registry=registry, scheduler=scheduler,
                    run_timeout_s=settings.run_timeout_factor * budget + settings.run_timeout_extra_s,
                    progress=_prefixed(say, f"{label}: "), topology_spec=topology_spec, channel_plan=plan,
                    kill_agents={f.target[0]: f.at_s for f in faults if f.kind == "agent"},
                    actions=controller_actions(faults) + network.actions(),
                    congestion_control=settings.tcp_congestion_control,
                    confirm_timeout_s=settings.confirm_timeout_s,
                )
            monitor_docs[label] = monitor.report(window=(outcome.t0_s, time.time()))
            monitor.save_intervals(os.path.join(workdir, f"monitor-{label}.json"))
            _say_monitor(say, label, monitor_docs[label])
            if wire is not None:
                wire_docs[label] = wire.check(outcome.documents, hosts_ip, host_ports, outcome.t0_s, enforces)
                _say_wire(say, label, wire_docs[label])
            if label == "together":
                documents, failed_jobs = outcome.documents, outcome.failed_jobs
            else:
                solo = assemble_run(round_jobs, outcome.documents, scheduler)
                alone_s.update({j: r.completion_s for j, r in solo.jobs.items()})
            problems += ctl.log_problems()
        if problems:
            say(f"warning: controller log shows {len(problems)} problem line(s), e.g. {problems[0][:160]}")
        result = assemble_run(jobs, documents, scheduler, alone_s or alone_fallback_s, failed_jobs)
        if settings.faults:
            result.faults = fault_records(settings.faults)
        result.fidelity_monitor = combine(monitor_docs)
        result.trusted = result.fidelity_monitor["trusted"]
        if wire_docs:
            result.wire_check = {"rounds": wire_docs}
        return result
    finally:
        say("tearing down")
        try:
            fabric.stop()
        finally:
            if ctl is not None:
                ctl.stop()
            if settings.logs_dir:
                _keep_logs(workdir, os.path.join(settings.logs_dir, "logs", run_name))
            shutil.rmtree(workdir, ignore_errors=True)


def fault_records(faults: Sequence[Any]) -> list[dict[str, Any]]:
    """Fault events as a result records them (``RunResult.faults``)."""
    return [{"kind": f.kind, "target": list(f.target), "at_s": f.at_s, "up": f.up} for f in faults]


def retry_once(action: Callable[[], None], undo: Callable[[], None], what: str,
               say: Callable[[str], None], pause_s: float = 1.0) -> None:
    """Run ``action``; if it fails, ``undo`` what it left, say so in one line and try once more.

    A second failure raises :class:`EmulationError` with one line naming both (Mininet and OVS raise
    assorted exception types during a bring-up, so any ``Exception`` counts; Ctrl-C does not).
    """
    try:
        action()
        return
    except Exception as exc:  # noqa: BLE001 (see docstring)
        first = _one_line(exc)
    undo()
    say(f"{what} failed ({first}); retrying once")
    time.sleep(pause_s)
    try:
        action()
    except Exception as exc:  # noqa: BLE001
        undo()
        raise EmulationError(f"{what} failed twice: {_one_line(exc)} (first: {first})") from None


def _say_all(say: Callable[[str], None], lines: Callable[[], list[str]]) -> None:
    for line in lines():
        say(line)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, (EmulationError, UserError)) else f"{type(exc).__name__}: {text}"


def _prefixed(progress: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    return lambda text: progress(prefix + text)


def _first_hop_port(topology: Any, host: str) -> str:
    """The switch-side interface of ``host``'s link (root namespace): where its traffic is captured."""
    switch = topology.host_switch(host)
    return intf_name(switch, topology.port(switch, host))


def _say_wire(say: Callable[[str], None], label: str, doc: Mapping[str, Any]) -> None:
    """One progress line with the round's wire check."""
    bad = doc["flows_with_problems"]
    say(f"{label}: wire check: {doc['flows']} flows, {doc['packets_judged']} packets judged, "
        f"{doc['packets_mismatched']} with a mark other than assigned; {bad} flow(s) with problems"
        + (f", e.g. {doc['mismatches'][0]}" if doc["mismatches"] else ""))


def _say_monitor(say: Callable[[str], None], label: str, doc: Mapping[str, Any]) -> None:
    """One progress line with the round's fidelity verdict."""
    busy = doc["ovs_thread_busy"]
    idle = doc["cpu_idle"]
    verdict = "trusted" if doc["trusted"] else "NOT trusted: " + "; ".join(doc["reasons"])
    say(f"{label}: fidelity monitor: {verdict} (switch thread median/p90 "
             f"{_pct(busy['median'])}/{_pct(busy['p90'])} of a core, machine idle median "
             f"{_pct(idle['median'])}, "
             f"{doc['busy_port_intervals']} busy port intervals, link ratio median "
             f"{_pct(doc['link_ratio']['median'])})")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _warm_up(fabric: Any, jobs: Sequence[Job], hosts_ip: Mapping[str, str]) -> None:
    """One ping per communicating pair, so ARP and reactive routing happen before the clock starts."""
    pairs = {(f.src, f.dst) for job in jobs for f in job.flows}
    for src, dst in sorted(pairs):
        fabric.host(src).cmd(f"ping -c 1 -W 2 {hosts_ip[dst]}")
        fabric.host(dst).cmd(f"ping -c 1 -W 2 {hosts_ip[src]}")


def _tune_datapath(progress: Callable[[str], None], scheduler: str) -> None:
    """Give the userspace datapath's shared transmit socket a large send buffer (see
    ``topologies.ovs.ensure_tx_buffer``): without it ovs-vswitchd drops packets on every port as soon as
    a few htb queues back up.  The socket exists once packets flowed, i.e. after the warm-up pings."""
    from topologies import ovs

    try:
        size = ovs.ensure_tx_buffer()
    except (ovs.OvsError, OSError) as exc:
        progress(f"[{scheduler}] warning: could not enlarge ovs-vswitchd's send buffer ({exc}); expect drops")
        return
    if size is None:
        progress(f"[{scheduler}] note: ovs-vswitchd has no packet transmit socket (kernel datapath?)")


def _keep_logs(workdir: str, target: str) -> None:
    """Copy agent logs, agent result documents and the controller log into the run folder."""
    import shutil

    os.makedirs(target, exist_ok=True)
    for root, _dirs, files in os.walk(workdir):
        for name in files:
            if name.endswith(".log") or name.startswith(("out-", "monitor-")):
                rel = os.path.relpath(os.path.join(root, name), workdir).replace(os.sep, "_")
                shutil.copyfile(os.path.join(root, name), os.path.join(target, rel))
