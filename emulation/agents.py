"""Starting one traffic agent per host, waiting for all of them, stopping every one it started.

:func:`run_agents` works anywhere: it writes one run-spec per host (:mod:`traffic.runspec`), starts the
agents through a ``popen`` function (:func:`local_popen` on this machine for tests, :func:`fabric_popen`
inside the Mininet hosts), records their pids, waits for all of them with a deadline, and stops every
agent it started (by pid) on failure or Ctrl-C.  The first agent that fails decides the error message.
An agent that *dies* (killed by a signal, or stopped by SIGTERM) fails only the jobs it takes part in:
the survivors are told (a ``peer_died`` control message) and go on with the other jobs, and the registry
releases the failed jobs' flows and the dead agent's channels (:func:`release_in_registry`).

Faults timed against the agents' common start (t0) run here too: an agent killed at its time, and any
other action (a link down, the controller killed) in a timer thread that says what it did.
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

from controller.client import ApiClientError, EchelonClient
from echelonflow import ownership
from echelonflow.model import Job
from emulation.errors import EmulationError, one_line
from traffic.control import ControlError, wait_for_sockets
from traffic.result import ABORTED, DIED, FAILED, INTERRUPTED, AgentResult, Failure, load_result
from traffic.runspec import RegistrySettings, RunSpec, SpecError, check_serialisable, save_runspec

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: t0 this far after the last agent is ready: the start word reaches every agent well before it (a
#: datagram on a local socket), and an agent later than ``traffic.agent.LATE_START_TOLERANCE_S`` fails.
START_LEAD_S = 0.2

#: popen(host, argv, log_file) -> a started process (``subprocess.Popen``-like: pid, poll, wait, ...)
PopenFn = Callable[[str, list, Any], Any]
#: (seconds after t0, action returning the line to say)
TimedAction = tuple[float, Callable[[], str]]


def agent_env() -> dict[str, str]:
    """The environment an agent (or any helper process run inside a host) starts with: ours, with the
    repository importable."""
    return dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def local_popen(host: str, argv: list, log_file: Any) -> subprocess.Popen:
    """Start an agent as a plain process on this machine (tests without the fabric)."""
    return subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=agent_env(),
                            start_new_session=True)


def fabric_popen(fabric: Any) -> PopenFn:
    """A ``popen`` that starts the agent inside the Mininet host (its own network namespace)."""

    def popen(host: str, argv: list, log_file: Any) -> Any:
        return fabric.host(host).popen(argv, stdin=subprocess.DEVNULL, stdout=log_file,
                                       stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=agent_env())

    return popen


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

    documents: dict[str, AgentResult]
    handles: dict[str, AgentHandle] = field(default_factory=dict)
    t0_s: float = 0.0
    failed_jobs: dict[str, Failure] = field(default_factory=dict)  # job -> why it failed


def agent_hosts(jobs: Sequence[Job]) -> list[str]:
    """Every host any job uses, in first-use order (one agent each)."""
    seen: dict[str, None] = {}
    for job in jobs:
        for host in job.hosts:
            seen.setdefault(host)
    return list(seen)


def run_agents(
    template: RunSpec,
    workdir: str,
    popen: PopenFn = local_popen,
    *,
    channel_plan: Mapping[str, list[dict[str, Any]]] | None = None,
    kill_agents: Mapping[str, float] | None = None,
    actions: Sequence[TimedAction] = (),
    ready_timeout_s: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> AgentsOutcome:
    """Run one agent per host used by ``template.jobs``; return their documents or raise
    :class:`EmulationError`.

    ``template`` is every agent's run-spec but for what differs per agent or per start, filled in here:
    the host, the control folder, the output file and the host's channels.  ``workdir`` must exist
    and be empty of earlier agent files (specs, outputs, logs and the control sockets go there).  Every
    agent gets ready (interpreter up, channels open) within ``ready_timeout_s`` (default grows with the
    number of agents and of channels to open), then all are told one t0 a moment ahead (the ``start``
    word), so a slow start-up on a loaded machine delays the run instead of failing it.  ``channel_plan``
    (source host -> ``traffic.channels.channel_plan`` entries) says how many channels each opens before t0.

    Faults: ``kill_agents`` (host -> seconds after t0) kills those agents with SIGKILL; ``actions``
    ((seconds after t0, action)) runs each action then, in a thread (its one-line answer is said).  A
    dead agent's jobs end up in ``failed_jobs``; if every job failed, :class:`EmulationError` says why.
    """
    jobs, registry = template.jobs, template.registry
    hosts = _checked_hosts(jobs, template.hosts_ip)
    control_dir = os.path.join(workdir, "ctl")
    os.makedirs(control_dir, exist_ok=False)
    timeout_s = ready_timeout_s if ready_timeout_s is not None else _ready_timeout_s(hosts, channel_plan)
    handles = _write_specs(replace(template, t0_s=0.0, control_dir=control_dir), hosts, workdir,
                           channel_plan)
    say = progress or (lambda text: None)
    try:
        _start(handles, popen, workdir, say)
        _wait_until_ready(handles, control_dir, timeout_s)
        t0_s = time.time() + START_LEAD_S
        tell_agents(control_dir, hosts, {"type": "start", "t0_s": t0_s})
        say("agents ready; running")
        timers = [_start_timer(t0_s + at_s, action, say)
                  for at_s, action in [*_kills(handles, kill_agents or {}), *actions]]
        deaths = _DeathNotices(control_dir, hosts, registry, say)
        failed = _wait_all(handles, jobs, t0_s, t0_s + template.run_timeout_s + 5.0, say, deaths)
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


def _checked_hosts(jobs: Sequence[Job], hosts_ip: Mapping[str, str]) -> list[str]:
    """The agents' hosts, once every one has an address and the jobs can be written into a run-spec."""
    hosts = agent_hosts(jobs)
    missing = [h for h in hosts if h not in hosts_ip]
    if missing:
        raise EmulationError(f"no IP address for host(s) {', '.join(missing)}")
    try:
        check_serialisable(list(jobs))
    except SpecError as exc:
        raise EmulationError(f"jobs cannot be handed to the agents: {exc}") from None
    return hosts


def _ready_timeout_s(hosts: Sequence[str], channel_plan: Mapping[str, list[dict[str, Any]]] | None) -> float:
    """How long every interpreter may take to start and open its planned channels: a bound for an agent
    that hangs, far above a loaded machine's start-up (a second or two per agent)."""
    channels = sum(e["count"] for entries in (channel_plan or {}).values() for e in entries)
    return 30.0 + 1.0 * len(hosts) + 0.05 * channels


def _write_specs(template: RunSpec, hosts: Sequence[str], workdir: str,
                 channel_plan: Mapping[str, list[dict[str, Any]]] | None) -> dict[str, AgentHandle]:
    """One run-spec file per host (``template`` with the host's own name, output and channels)."""
    handles: dict[str, AgentHandle] = {}
    for host in hosts:
        handle = AgentHandle(host, os.path.join(workdir, f"spec-{host}.json"),
                             os.path.join(workdir, f"out-{host}.json"),
                             os.path.join(workdir, f"agent-{host}.log"))
        channels = None if channel_plan is None else list(channel_plan.get(host, []))
        save_runspec(replace(template, host=host, output_path=handle.output_path, channels=channels),
                     handle.spec_path)
        handles[host] = handle
    return handles


def _start(handles: Mapping[str, AgentHandle], popen: PopenFn, workdir: str,
           say: Callable[[str], None]) -> None:
    """Start every agent (with a parent-death signal where ``setpriv`` exists) and record its pid."""
    for host, handle in handles.items():
        with open(handle.log_path, "w", encoding="utf-8") as log_file:
            handle.proc = popen(host, ownership.PDEATHSIG + [sys.executable, "-u", "-m", "traffic.agent",
                                                             handle.spec_path], log_file)
    ownership.record_processes(workdir, *(h.pid for h in handles.values()))
    say(f"{len(handles)} agents started (pids {', '.join(str(h.pid) for h in handles.values())})")


def _wait_until_ready(handles: Mapping[str, AgentHandle], control_dir: str, timeout_s: float) -> None:
    """Every agent's control socket is up within ``timeout_s``, or the run fails naming the first that
    exited."""
    try:
        wait_for_sockets(control_dir, list(handles), timeout_s, alive=lambda: _first_exit_problem(handles))
    except ControlError as exc:
        raise EmulationError(f"agents did not come up: {exc}") from None


class _DeathNotices:
    """What happens when an agent dies mid-run: the survivors are told which jobs failed (they go on
    with the others), and the registry releases what the dead agent held."""

    def __init__(self, control_dir: str, hosts: Sequence[str], registry: RegistrySettings | None,
                 say: Callable[[str], None]) -> None:
        self.control_dir, self.hosts, self.registry, self.say = control_dir, list(hosts), registry, say

    def __call__(self, host: str, lost: list[str], death: Failure) -> None:
        reason = death.line()
        self.say(f"{reason}: job(s) {', '.join(lost) or '(none left)'} failed; the others go on")
        tell_agents(self.control_dir, [h for h in self.hosts if h != host],
                    {"type": "peer_died", "host": host, "jobs": lost, "reason": reason})
        if self.registry is not None and lost:
            release_in_registry(self.registry, lost, host, self.say)


def _kills(handles: Mapping[str, AgentHandle], kill_agents: Mapping[str, float]) -> list[TimedAction]:
    """``--fault agent:HOST@T``: SIGKILL that host's agent T seconds after t0."""
    return [(at_s, _killer(handles[host], host)) for host, at_s in kill_agents.items()]


def _failure_lines(failed_jobs: Mapping[str, Failure]) -> list[str]:
    """``job a failed: <reason>`` lines, one per job."""
    return [f"job {job_id} failed: {failure}" for job_id, failure in failed_jobs.items()]


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
            say(f"fault could not be injected: {one_line(exc)}")

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
    (their enforcement goes with the next scheduling pass) and its own channels removed.  A registry
    that refuses or is unreachable is said in one line; the run goes on."""
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
            return f"agent {host} exited with status {code}: {_failure(handle)}"
    return None


@dataclass
class _Failures:
    """What :func:`_wait_all` saw die: the dead agents and the jobs they took down (job -> reason)."""

    dead: set[str] = field(default_factory=set)
    jobs: dict[str, Failure] = field(default_factory=dict)


def _wait_all(handles: Mapping[str, AgentHandle], jobs: Sequence[Job], t0_s: float, deadline_s: float,
              say: Callable[[str], None], on_death: Callable[[str, list[str], Failure], None]) -> _Failures:
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
                failure = Failure(DIED, host, f"({death}) {time.time() - t0_s:.1f} s after t0")
                lost = [j.job_id for j in jobs if host in j.hosts and j.job_id not in failed.jobs]
                failed.jobs.update(dict.fromkeys(lost, failure))
                on_death(host, lost, failure)
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
    if code != 0 and _failure(handle).cause == INTERRUPTED:
        return "stopped by SIGTERM"
    return None


def _root_cause(handles: Mapping[str, AgentHandle], dead: set[str] = frozenset()) -> str:
    """The failure that started it all: an agent killed by a signal (its peers then see broken
    connections), else one that failed by itself rather than aborted because of a peer.  Agents whose
    death was already dealt with (``dead``) are not it."""
    failures = []
    for host, handle in handles.items():
        code = handle.proc.poll()
        if code is not None and code != 0 and host not in dead:
            failures.append((host, code, _failure(handle)))
    primary = ([f for f in failures if f[1] < 0] or [f for f in failures if f[2].cause != ABORTED]
               or failures)
    host, code, failure = primary[0]
    return f"agent {host} failed (exit status {code}): {failure}"


def _failure(handle: AgentHandle) -> Failure:
    """Why the agent of ``handle`` failed: its result's failure, else its log's last line."""
    try:
        failure = load_result(handle.output_path).failure
        if failure is not None:
            return failure
    except ValueError:
        pass
    try:
        with open(handle.log_path, encoding="utf-8", errors="replace") as fh:
            lines = [line.strip() for line in fh if line.strip()]
        return Failure(FAILED, handle.host, lines[-1] if lines else "no output")
    except OSError:
        return Failure(FAILED, handle.host, "no output")


def _read_document(handle: AgentHandle) -> AgentResult:
    try:
        return load_result(handle.output_path)
    except ValueError as exc:
        raise EmulationError(f"agent {handle.host} exited 0 but left no readable result ({exc})") from None
