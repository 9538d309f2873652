"""The per-host traffic agent: executes this host's part of every job's DAG for real.

Started as ``python -m traffic.agent SPEC.json`` (see :mod:`traffic.runspec`), one process per host,
inside the host's network namespace.  It:

* runs this host's compute tasks as timed waits, one at a time (a host is one GPU); among the ready
  ones the job listed first, then the task declared first in it, runs first (the simulator's rule);
* sends every flow whose source is this host as exactly ``size_bytes`` over a persistent TCP connection
  to its destination, on the path the flow is pinned to (:mod:`traffic.channels`,
  :mod:`traffic.transfer`), the moment its dependencies are done; several flows may be in flight, each
  on its own channel;
* receives flows addressed to this host, and on full delivery marks them done;
* tells the agents that host a finished task's dependants (:mod:`traffic.control`), so dependencies
  across hosts resolve on real arrival;
* with a registry configured (:mod:`traffic.registry_link`): declares the jobs/EchelonFlows it is
  responsible for before t0 (the agent that sends a job's first flow declares the whole job,
  clairvoyantly) and its channels (so their rules are in place before the first byte); reports each
  flow's start on its channel and its finish in the background, and applies the flow's allocated DSCP
  and pacing rate to its channel's socket.

Result: one JSON document (:mod:`traffic.result`, written atomically to the spec's ``output_path``) with
every task's start and finish in seconds after t0, also on failure (its cause, the agent it is about and
the detail).  Exit status 0
when every task of this host is done, 1 when the run failed (a peer stalled, died, or aborted, or the
run timeout passed), 2 when the spec is unusable.  The agent never waits without a deadline.
"""

from __future__ import annotations

import contextlib
import heapq
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Union

from echelonflow.model import ComputeTask, FlowTask, Job, qualified
from echelonflow.queues import tos_for_dscp
from traffic import tcpstats
from traffic.channels import ChannelKey, ChannelPool
from traffic.control import ControlEndpoint, ControlError
from traffic.registry_link import RegistryLinkError, RegistryPort, build_registry
from traffic.result import ABORTED, FAILED, INTERRUPTED, AgentResult, Failure, save_result
from traffic.runspec import RunSpec, SpecError, load_runspec
from traffic.transfer import Arrival, Channel, ChannelRoute, FlowHeader, FlowReceiver, TransferError

#: An agent that becomes ready later than this after t0 fails (its peers would already be waiting).
LATE_START_TOLERANCE_S = 0.25
#: A transfer or control error waits this long for the orchestrator's word that a peer agent died (its
#: connections break the moment it dies, a little before the orchestrator sees the death): if the word
#: comes, the error only fails the dead agent's jobs; if not, it fails the run as before.
PEER_DEATH_GRACE_S = 2.0


class AgentError(Exception):
    """The run cannot complete on this host (the message says why)."""


class PeerAbortedError(AgentError):
    """Agent ``peer`` failed (``reason``) and told this one: the run cannot complete here either."""

    def __init__(self, peer: str, reason: str) -> None:
        super().__init__(f"aborted: agent {peer} failed: {reason}")
        self.peer, self.reason = peer, reason


@dataclass(frozen=True)
class _Broken:
    """A transfer or control error (``text``), of job ``job_id`` when known: maybe a dead peer's doing."""

    text: str
    job_id: str | None = None


@dataclass(frozen=True)
class _Arrived:
    """Every byte of a flow addressed to this host arrived."""

    arrival: Arrival


@dataclass(frozen=True)
class _Sent:
    """A flow this host sent was delivered and confirmed (``result``: the channel's account of it)."""

    qid: str
    result: Any


@dataclass(frozen=True)
class _Control:
    """A control message from a peer agent or the orchestrator (``type``: done, abort, peer_died)."""

    message: dict[str, Any]


#: What the agent's main loop waits for (its event queue's messages, from the receiver, the senders'
#: threads and the control socket).
_Event = Union[_Broken, _Arrived, _Sent, _Control]


@dataclass
class _Owned:
    """A task this host executes or observes."""

    qid: str
    job_index: int
    decl_index: int
    job: Job
    task: Any
    role: str  # "compute", "send" or "receive"


class Agent:
    """One host's agent; :meth:`run` returns its result (also written to ``output_path``)."""

    def __init__(self, spec: RunSpec, registry: RegistryPort | None = None,
                 clock: Callable[[], float] = time.time, log: Callable[[str], None] = None) -> None:
        self.spec = spec
        self.t0_s = spec.t0_s  # 0 until the orchestrator's start word gives it
        self.me = spec.host
        self.registry = registry or RegistryPort()
        self.clock = clock
        self._log_fn = log or (lambda text: print(f"agent {self.me}: {text}", file=sys.stderr, flush=True))
        self.events: queue.Queue[_Event] = queue.Queue()
        self.jobs_by_id = {job.job_id: job for job in spec.jobs}
        self.owned: dict[str, _Owned] = {}
        self.deps_left: dict[str, set[str]] = {}  # my compute/send tasks -> unfinished dep qids
        self.notify_hosts: dict[str, list[str]] = {}  # qid I observe -> hosts hosting its dependants
        self._index()
        self.done_s: dict[str, float] = {}  # qid -> epoch time it was known done here
        self.tasks_out: dict[str, dict[str, Any]] = {}
        self.sent_out: dict[str, dict[str, Any]] = {}
        self.received_out: dict[str, dict[str, Any]] = {}
        self.pending: set[str] = set(self.owned)
        self.receiver: FlowReceiver | None = None
        self.control: ControlEndpoint | None = None
        self.topology = spec.topology()
        self.capacity_bps = {} if self.topology is None else self.topology.capacity_bps()
        self.channels = ChannelPool(self._open_channel)
        self.tcp_before: dict[str, int] = {}  # this namespace's TCP counters when the agent started
        self._channel_numbers = iter(range(1, 1 << 30))
        self.failed_jobs: dict[str, str] = {}  # job -> why it failed (an agent of it died)
        self.dead_hosts: set[str] = set()
        self._death_notices_s: list[float] = []  # when each word of a peer's death arrived
        self._parked: list[tuple[float, str | None, str]] = []  # (when, job if known, error), undecided

    # ------------------------------------------------------------------------------ indexing
    def _index(self) -> None:
        for job_index, job in enumerate(self.spec.jobs):
            dependants = job.dependants()
            for decl_index, task in enumerate(job.tasks.values()):
                qid = qualified(job.job_id, task.task_id)
                role = None
                if isinstance(task, ComputeTask) and task.host == self.me:
                    role = "compute"
                elif isinstance(task, FlowTask) and task.src == self.me:
                    role = "send"
                elif isinstance(task, FlowTask) and task.dst == self.me:
                    role = "receive"
                if role is None:
                    continue
                self.owned[qid] = _Owned(qid, job_index, decl_index, job, task, role)
                if role in ("compute", "send"):
                    self.deps_left[qid] = {qualified(job.job_id, d) for d in task.deps}
                if role in ("compute", "receive"):  # this host observes the completion
                    hosts = {_executor(job.tasks[c]) for c in dependants[task.task_id]}
                    hosts.discard(self.me)
                    self.notify_hosts[qid] = sorted(hosts)

    def log(self, text: str) -> None:
        self._log_fn(text)

    def rel(self, epoch_s: float) -> float:
        return epoch_s - self.t0_s

    # ------------------------------------------------------------------------------ run
    def run(self) -> AgentResult:
        """Run this host's part; the result (also written to the spec's ``output_path``)."""
        failure: Failure | None = None
        try:
            self._start()
            self._loop()
        except PeerAbortedError as exc:
            failure = Failure(ABORTED, exc.peer, exc.reason)
        except (AgentError, ControlError, TransferError, RegistryLinkError) as exc:
            failure = Failure(FAILED, self.me, str(exc))
        except KeyboardInterrupt:
            failure = Failure(INTERRUPTED, self.me)
        except Exception as exc:  # e.g. the registry failing: report it, never leave a traceback and a hang
            failure = Failure(FAILED, self.me, f"{type(exc).__name__}: {exc}")
        finally:
            if failure is not None and failure.cause != INTERRUPTED:  # whoever stopped it deals with the run
                self._abort_peers(failure.line())
            self._stop()
        result = self._result(failure)
        save_result(result, self.spec.output_path)
        return result

    def _start(self) -> None:
        self.tcp_before = tcpstats.read_counters()
        for job in self.spec.jobs:
            if self._declares(job):
                self.registry.declare_job(job)
        my_ip = self.spec.hosts_ip[self.me]
        self.receiver = FlowReceiver(
            my_ip, self.spec.data_port, self._accept_header, self._on_arrival,
            lambda msg: self.events.put(_Broken(msg)), io_timeout_s=self.spec.confirm_timeout_s,
            clock=self.clock,
        ).start()
        for key, count in self._channel_plan().items():
            self.channels.open(key, count)
        # Binding the control socket is the "ready" signal the orchestrator waits for: every channel of
        # this agent is connected (its rules in place) by then.
        self.control = ControlEndpoint(self.spec.control_dir, self.me,
                                       lambda m: self.events.put(_Control(m)))
        self.control.start()
        if self.t0_s == 0.0:
            self.t0_s = self._await_start_word()
        now = self.clock()
        if now > self.t0_s + LATE_START_TOLERANCE_S:
            raise AgentError(f"ready {now - self.t0_s:.2f} s after t0; start agents earlier")
        time.sleep(max(0.0, self.t0_s - now))

    def _await_start_word(self) -> float:
        """t0 from the orchestrator's ``start`` word, which comes once every agent is ready; anything else
        that comes first is kept for the main loop, but a peer's abort ends the wait."""
        deadline = time.monotonic() + self.spec.run_timeout_s
        early: list[_Event] = []
        try:
            while True:
                try:
                    event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise AgentError(f"no start word within {self.spec.run_timeout_s:g} s") from None
                message = event.message if isinstance(event, _Control) else {}
                if message.get("type") == "start":
                    t0_s = message.get("t0_s")
                    if isinstance(t0_s, bool) or not isinstance(t0_s, (int, float)) or t0_s <= 0:
                        raise AgentError(f"bad start word {message!r}")
                    return float(t0_s)
                if message.get("type") == "abort":
                    raise PeerAbortedError(str(message.get("from")), str(message.get("reason")))
                early.append(event)
        finally:
            for event in early:
                self.events.put(event)

    def _declares(self, job: Job) -> bool:
        """The sender of the job's first flow declares the job (exactly one agent per job)."""
        flows = job.flows
        return bool(flows) and flows[0].src == self.me

    def _loop(self) -> None:
        deadline = self.t0_s + self.spec.run_timeout_s
        ready: list[tuple[int, int, str]] = []  # heap of (job index, declaration index, qid)
        running: tuple[float, str] | None = None  # (finish epoch, qid) of the compute in progress
        launched: set[str] = set()
        # A job's tasks without dependencies become ready when the job arrives (t0 + arrival_s).
        arrivals = sorted((self.t0_s + self.owned[qid].job.arrival_s, qid)
                          for qid, left in self.deps_left.items() if not left)
        while self.pending or self._parked:
            now = self.clock()
            self._judge_parked(now)
            while arrivals and arrivals[0][0] <= now:
                self._make_ready(arrivals.pop(0)[1], ready, launched)
            if running is not None and now >= running[0]:
                qid = running[1]
                running = None
                self.tasks_out[qid]["finish"] = self.rel(now)
                self._complete(qid, now, ready, launched)
                continue
            if running is None and ready:
                _, _, qid = heapq.heappop(ready)
                if self._failed(qid):
                    continue
                task = self.owned[qid].task
                self.tasks_out[qid] = {"type": "compute", "host": self.me, "start": self.rel(now)}
                running = (now + task.duration_s, qid)
                continue
            if now >= deadline:
                waiting = ", ".join(sorted(self.pending)[:5])
                raise AgentError(
                    f"run not finished {self.spec.run_timeout_s:g} s after t0; waiting for {waiting}"
                )
            wake = deadline if running is None else min(deadline, running[0])
            if arrivals:
                wake = min(wake, arrivals[0][0])
            if self._parked:
                wake = min(wake, self._parked[0][0] + PEER_DEATH_GRACE_S)
            try:
                event = self.events.get(timeout=max(0.0, wake - now))
            except queue.Empty:
                continue
            self._handle(event, ready, launched)

    def _handle(self, event: _Event, ready: list, launched: set[str]) -> None:
        if isinstance(event, _Broken):
            self._park(event.job_id, event.text)
            return
        if isinstance(event, _Arrived):
            arrival = event.arrival
            qid = qualified(arrival.header.job, arrival.header.flow)
            if self._failed(qid):
                return
            self.received_out[qid] = {"src": arrival.header.src, "received_bytes": arrival.received_bytes,
                                      "finish": self.rel(arrival.finish_s),
                                      "header": self.rel(arrival.header_s)}
            self._complete(qid, arrival.finish_s, ready, launched)
        elif isinstance(event, _Sent):
            qid, result = event.qid, event.result
            if self._failed(qid):
                return
            self.sent_out[qid].update(sent_bytes=result.sent_bytes, confirmed_bytes=result.received_bytes,
                                      finish=self.rel(result.finish_s),
                                      first_byte=self.rel(result.first_byte_s),
                                      last_queued=self.rel(result.last_queued_s),
                                      confirmed=self.rel(result.confirmed_s))
            self._complete(qid, result.finish_s, ready, launched)
        elif isinstance(event, _Control):
            message = event.message
            if message.get("type") == "abort":
                raise PeerAbortedError(str(message.get("from")), str(message.get("reason")))
            if message.get("type") == "peer_died":
                self._peer_died(message)
                return
            if message.get("type") != "done":
                raise AgentError(f"unexpected control message {message!r}")
            qid = qualified(str(message.get("job")), str(message.get("task")))
            self._satisfy(qid, float(message.get("time_s", self.clock())), ready, launched)

    def _complete(self, qid: str, when_s: float, ready: list, launched: set[str]) -> None:
        """A task this host owns is done: record, tell the hosts of its dependants, release local ones."""
        self.pending.discard(qid)
        if qid in self.done_s or self._failed(qid):
            return
        job_id, task_id = qid.split("/", 1)
        for host in self.notify_hosts.get(qid, ()):
            if host in self.dead_hosts:
                continue
            assert self.control is not None
            try:
                self.control.send(host, {"type": "done", "job": job_id, "task": task_id, "time_s": when_s},
                                  timeout_s=self.spec.connect_timeout_s)
            except ControlError as exc:  # the peer may have died: let the orchestrator's word decide
                self._park(job_id, str(exc))
        self._satisfy(qid, when_s, ready, launched)

    def _satisfy(self, dep_qid: str, when_s: float, ready: list, launched: set[str]) -> None:
        if dep_qid in self.done_s:
            return
        self.done_s[dep_qid] = when_s
        job_id, task_id = dep_qid.split("/", 1)
        job = self.jobs_by_id.get(job_id)
        if job is None or task_id not in job.tasks:
            raise AgentError(f"completion event for unknown task {dep_qid}")
        for qid, left in self.deps_left.items():
            if dep_qid in left:
                left.discard(dep_qid)
                if not left:
                    self._make_ready(qid, ready, launched)

    def _make_ready(self, qid: str, ready: list, launched: set[str]) -> None:
        if self._failed(qid):
            return
        owned = self.owned[qid]
        if owned.role == "compute":
            heapq.heappush(ready, (owned.job_index, owned.decl_index, qid))
        elif qid not in launched:
            launched.add(qid)
            self._launch_flow(owned)

    # ------------------------------------------------------------------------------ flows
    def _launch_flow(self, owned: _Owned) -> None:
        flow: FlowTask = owned.task
        start = self.clock()
        self.sent_out[owned.qid] = {"dst": flow.dst, "size_bytes": flow.size_bytes, "start": self.rel(start)}
        self.tasks_out[owned.qid] = {"type": "flow", "src": flow.src, "dst": flow.dst,
                                     "start": self.rel(start)}
        threading.Thread(target=self._send, args=(owned, start), name=f"send-{owned.qid}",
                         daemon=True).start()

    def _send(self, owned: _Owned, start_epoch: float) -> None:
        flow: FlowTask = owned.task
        job_id = owned.job.job_id
        key = self._channel_key(owned.job, flow)
        record = self.sent_out[owned.qid]
        channel: Channel | None = None
        try:
            channel = self.channels.acquire(key)
            record.update(channel=channel.channel_id, src_port=channel.src_port,
                          dst_port=channel.route.dst_port)
            self.registry.flow_started(owned.job, flow, channel, start_epoch)
            result = channel.send_flow(
                FlowHeader(job_id, flow.task_id, self.me, flow.size_bytes),
                tos_source=lambda: self._tos(job_id, flow.task_id),
                pacing_source=lambda: self.registry.pacing_bytes_per_s(job_id, flow.task_id),
                hold_source=lambda: self.registry.held(job_id, flow.task_id),
            )
        except (TransferError, RegistryLinkError) as exc:
            if channel is not None:
                self.channels.discard(channel)
            self.events.put(_Broken(str(exc), job_id))
            return
        except Exception as exc:  # a registry failure must fail the run, not kill a thread silently
            self.events.put(_Broken(f"flow {owned.qid}: {type(exc).__name__}: {exc}", job_id))
            return
        # The finish is queued before the channel is free again: the registry must hear of it before the
        # start of the next flow on this channel (reports are sent in order), or it refuses that start.
        self.registry.flow_finished(owned.job, flow, result.finish_s)
        self.channels.release(key, channel)
        self.events.put(_Sent(owned.qid, result))

    def _tos(self, job_id: str, flow_id: str) -> int | None:
        dscp = self.registry.dscp(job_id, flow_id)
        return None if dscp is None else tos_for_dscp(dscp)

    # ------------------------------------------------------------------------------ channels
    def _channel_key(self, job: Job, flow: FlowTask) -> ChannelKey:
        """(destination, path): the flow's own pinned path under a scheduler that enforces (the key is the
        registry's, so the simulator, the controller and this agent agree), else the pair's route."""
        if self.topology is None:
            return flow.dst, None
        if self.registry.enforces:
            registry_key = qualified(self.registry.prefix + job.job_id, flow.task_id)
            path = self.topology.path_for(flow.src, flow.dst, registry_key)
        else:
            path = self.topology.pair_path(flow.src, flow.dst)
        return flow.dst, tuple(path)

    def _channel_plan(self) -> dict[ChannelKey, int]:
        """How many channels to open before t0: the run-spec's plan, else one per (destination, path)."""
        plan: dict[ChannelKey, int] = {}
        if self.spec.channels is not None:
            for entry in self.spec.channels:
                path = None if entry["path"] is None or self.topology is None else tuple(entry["path"])
                plan[(entry["dst"], path)] = plan.get((entry["dst"], path), 0) + entry["count"]
            return plan
        for owned in self.owned.values():
            if owned.role == "send" and owned.task.size_bytes > 0:
                plan.setdefault(self._channel_key(owned.job, owned.task), 1)
        return plan

    def _open_channel(self, key: ChannelKey) -> Channel:
        dst, path = key
        path_rate_bps = None if path is None else min(self.capacity_bps[link] for link in zip(path, path[1:]))
        route = ChannelRoute(self.me, dst, self.spec.hosts_ip[self.me], self.spec.hosts_ip[dst],
                             self.spec.data_port, path, path_rate_bps)
        channel_id = f"{self.me}.{dst}.{next(self._channel_numbers)}"
        channel = Channel(channel_id, route, self.spec.confirm_timeout_s, self.spec.congestion_control)
        channel.bind()
        self.registry.register_channel(channel)  # its rules are in the switches before its SYN leaves
        channel.connect(self.spec.connect_timeout_s)
        return channel

    def _accept_header(self, header: FlowHeader) -> str | None:
        qid = qualified(header.job, header.flow)
        owned = self.owned.get(qid)
        if owned is None or owned.role != "receive":
            return f"no flow {qid} is addressed to {self.me}"
        if owned.task.src != header.src or owned.task.size_bytes != header.size_bytes:
            return (f"flow {qid} should come from {owned.task.src} with {owned.task.size_bytes} bytes, "
                    f"not from {header.src} with {header.size_bytes}")
        return None

    def _on_arrival(self, arrival: Arrival) -> None:
        self.events.put(_Arrived(arrival))

    # ------------------------------------------------------------------------------ a peer's death
    def _failed(self, qid: str) -> bool:
        return qid.split("/", 1)[0] in self.failed_jobs

    def _park(self, job_id: str | None, text: str) -> None:
        """Hold an error until the grace period tells whether a peer's death explains it."""
        self._parked.append((self.clock(), job_id, text))

    def _peer_died(self, message: dict[str, Any]) -> None:
        """The orchestrator saw agent ``host`` die: its jobs fail here too, the others go on."""
        self._death_notices_s.append(self.clock())
        host, reason = str(message.get("host")), str(message.get("reason"))
        self.dead_hosts.add(host)
        self.log(f"{reason}; giving up its job(s) {', '.join(map(str, message.get('jobs', [])))}")
        for job_id in message.get("jobs", []):
            if job_id not in self.jobs_by_id or job_id in self.failed_jobs:
                continue
            self.failed_jobs[job_id] = reason
            self.pending -= {qid for qid in self.pending if qid.split("/", 1)[0] == job_id}
            self.registry.forget_job(job_id)
        self._judge_parked(self.clock())

    def _judge_parked(self, now_s: float) -> None:
        """Drop parked errors a peer's death explains (their job failed, or, job unknown, the death was
        reported within the grace period of them); an unexplained one past the grace period fails the run."""
        kept = []
        for when_s, job_id, text in self._parked:
            if job_id is not None and job_id in self.failed_jobs:
                continue
            if job_id is None and any(abs(t - when_s) <= PEER_DEATH_GRACE_S for t in self._death_notices_s):
                continue
            if now_s >= when_s + PEER_DEATH_GRACE_S:
                raise AgentError(text)
            kept.append((when_s, job_id, text))
        self._parked = kept

    # ------------------------------------------------------------------------------ teardown
    def _abort_peers(self, reason: str) -> None:
        if self.control is None:
            return
        for host in sorted(set(self.spec.hosts_ip) - {self.me}):
            with contextlib.suppress(ControlError):  # a peer that is gone needs no telling
                self.control.send(host, {"type": "abort", "reason": reason}, timeout_s=0.0)

    def _stop(self) -> None:
        for closer in (self.channels, self.receiver, self.control, self.registry):
            if closer is not None:
                try:
                    closer.close()
                except Exception as exc:  # teardown must finish; report and go on
                    self.log(f"teardown: {type(exc).__name__}: {exc}")

    def _result(self, failure: Failure | None) -> AgentResult:
        for qid, record in self.received_out.items():
            self.tasks_out.setdefault(qid, {"type": "flow", "src": record["src"], "dst": self.me})
            self.tasks_out[qid]["finish"] = record["finish"]
        for qid, record in self.sent_out.items():
            job_id, flow_id = qid.split("/", 1)
            seen = self.registry.trace(job_id, flow_id)
            record["allocations"] = [
                {"t_s": self.rel(t), "dscp": dscp, "rate_bps": rate, "pacing_bytes_per_s": pace,
                 "decided_s": None if decided is None else self.rel(decided)}
                for t, dscp, rate, pace, decided in seen.get("allocations", [])]
            record["progress"] = [[self.rel(t), *counters] for t, *counters in seen.get("progress", [])]
        return AgentResult(
            self.me, self.t0_s, self.spec.scheduler, failure, dict(self.failed_jobs),
            sorted(self.pending), self.tasks_out, self.sent_out, self.received_out,
            channels={"opened": len(self.channels.channels), "opened_late": self.channels.opened_late},
            tcp=tcpstats.difference(self.tcp_before, tcpstats.read_counters()))


def _executor(task: Any) -> str:
    """The host that starts a task: a compute's host, a flow's source."""
    return task.host if isinstance(task, ComputeTask) else task.src


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m traffic.agent RUNSPEC.json", file=sys.stderr)
        return 2
    try:
        spec = load_runspec(argv[0])
    except SpecError as exc:
        print(f"agent: error: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        registry = build_registry(spec.registry,
                                  lambda text: print(f"agent {spec.host}: {text}", file=sys.stderr),
                                  spec.host)
    except Exception as exc:
        print(f"agent {spec.host}: error: registry unusable: {exc}", file=sys.stderr)
        failure = Failure(FAILED, spec.host, f"registry: {exc}")
        save_result(AgentResult(spec.host, spec.t0_s, spec.scheduler, failure), spec.output_path)
        return 1
    result = Agent(spec, registry).run()
    if result.failure is not None:
        print(f"agent {spec.host}: error: {result.failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
