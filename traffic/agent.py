"""The per-host traffic agent: executes this host's part of every job's DAG for real.

Started as ``python -m traffic.agent SPEC.json`` (see :mod:`traffic.runspec`), one process per host,
inside the host's network namespace.  It:

* runs this host's compute tasks as timed waits, one at a time (a host is one GPU); among the ready
  ones the job listed first, then the task declared first in it, runs first (the simulator's rule);
* sends every flow whose source is this host as a real TCP transfer of exactly ``size_bytes``
  (:mod:`traffic.transfer`) the moment its dependencies are done; several flows may be in flight;
* receives flows addressed to this host, and on full delivery marks them done;
* tells the agents that host a finished task's dependants (:mod:`traffic.control`), so dependencies
  across hosts resolve on real arrival;
* with a registry configured: declares the jobs/EchelonFlows it is responsible for before t0 (the agent
  that sends a job's first flow declares the whole job, clairvoyantly), reports each flow's start with its
  bound source port and its finish, and applies the flow's allocated DSCP to the socket's IP_TOS.

Result: one JSON document (written atomically to the spec's ``output_path``) with every task's start
and finish in seconds after t0, also on failure (``"status": "error"`` and the reason).  Exit status 0
when every task of this host is done, 1 when the run failed (a peer stalled, died, or aborted, or the
run timeout passed), 2 when the spec is unusable.  The agent never waits without a deadline.
"""

from __future__ import annotations

import contextlib
import heapq
import queue
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from echelonflow.fileio import write_json_atomic
from echelonflow.model import ComputeTask, FlowTask, Job, qualified
from traffic.control import ControlEndpoint, ControlError
from traffic.runspec import RegistrySettings, RunSpec, SpecError, load_runspec
from traffic.transfer import Arrival, FlowHeader, FlowReceiver, TransferError, acked_bytes, send_flow

#: An agent that becomes ready later than this after t0 fails (its peers would already be waiting).
LATE_START_TOLERANCE_S = 0.25


class AgentError(Exception):
    """The run cannot complete on this host (the message says why)."""


class Registry:
    """What the agent needs from the controller's registry (:class:`RegistryLink` talks to the real one).

    The base class does nothing, so an agent without a registry runs plain TCP (the ``fair`` baseline).
    """

    def declare_job(self, job: Job) -> None:
        """Register the job and all its EchelonFlows (flows with offsets), before t0."""

    def flow_started(self, job: Job, flow: FlowTask, src_port: int, dst_port: int, start_s: float) -> None:
        """Report that a flow starts on this 5-tuple (called after bind, before its first packet)."""

    def flow_connected(self, job: Job, flow: FlowTask, sock: socket.socket, header_bytes: int) -> None:
        """The flow's socket is connected (progress can be read from it; the header is not payload)."""

    def flow_finished(self, job: Job, flow: FlowTask, finish_s: float) -> None:
        """Report that every byte of a flow arrived."""

    def dscp(self, job_id: str, flow_id: str) -> int | None:
        """The DSCP of the queue the scheduler currently gives the flow, or None to leave IP_TOS alone."""
        return None

    def pacing_bytes_per_s(self, job_id: str, flow_id: str) -> int | None:
        """The rate the flow should be paced at, or None for no limit (plain TCP)."""
        return None

    def trace(self, job_id: str, flow_id: str) -> dict[str, list]:
        """What the agent saw of a flow's allocation and progress over time (epoch seconds):
        ``allocations`` [(t, dscp, rate_bps decided, pacing bytes/s applied)], ``progress`` [(t, acked)]."""
        return {}

    def close(self) -> None:
        """Stop background polling."""


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
    """One host's agent; :meth:`run` returns the result document (also written to ``output_path``)."""

    def __init__(self, spec: RunSpec, registry: Registry | None = None,
                 clock: Callable[[], float] = time.time, log: Callable[[str], None] = None) -> None:
        self.spec = spec
        self.me = spec.host
        self.registry = registry or Registry()
        self.clock = clock
        self._log_fn = log or (lambda text: print(f"agent {self.me}: {text}", file=sys.stderr, flush=True))
        self.events: queue.Queue = queue.Queue()
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
        return epoch_s - self.spec.t0_s

    # ------------------------------------------------------------------------------ run
    def run(self) -> dict[str, Any]:
        error: str | None = None
        try:
            self._start()
            self._loop()
        except (AgentError, ControlError, TransferError) as exc:
            error = str(exc)
        except KeyboardInterrupt:
            error = "interrupted"
        except Exception as exc:  # e.g. the registry failing: report it, never leave a traceback and a hang
            error = f"{type(exc).__name__}: {exc}"
        finally:
            if error is not None:
                self._abort_peers(error)
            self._stop()
        document = self._document(error)
        write_json_atomic(self.spec.output_path, document)
        return document

    def _start(self) -> None:
        for job in self.spec.jobs:
            if self._declares(job):
                self.registry.declare_job(job)
        my_ip = self.spec.hosts_ip[self.me]
        self.receiver = FlowReceiver(
            my_ip, self.spec.data_port, self._accept_header, self._on_arrival,
            lambda msg: self.events.put(("error", msg)), io_timeout_s=self.spec.confirm_timeout_s,
            clock=self.clock,
        ).start()
        # Binding the control socket is the "ready" signal the orchestrator waits for.
        self.control = ControlEndpoint(self.spec.control_dir, self.me,
                                       lambda m: self.events.put(("control", m)))
        self.control.start()
        now = self.clock()
        if now > self.spec.t0_s + LATE_START_TOLERANCE_S:
            raise AgentError(f"ready {now - self.spec.t0_s:.2f} s after t0; start agents earlier")
        time.sleep(max(0.0, self.spec.t0_s - now))

    def _declares(self, job: Job) -> bool:
        """The sender of the job's first flow declares the job (exactly one agent per job)."""
        flows = job.flows
        return bool(flows) and flows[0].src == self.me

    def _loop(self) -> None:
        deadline = self.spec.t0_s + self.spec.run_timeout_s
        ready: list[tuple[int, int, str]] = []  # heap of (job index, declaration index, qid)
        running: tuple[float, str] | None = None  # (finish epoch, qid) of the compute in progress
        launched: set[str] = set()
        # A job's tasks without dependencies become ready when the job arrives (t0 + arrival_s).
        arrivals = sorted((self.spec.t0_s + self.owned[qid].job.arrival_s, qid)
                          for qid, left in self.deps_left.items() if not left)
        while self.pending:
            now = self.clock()
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
            try:
                event = self.events.get(timeout=max(0.0, wake - now))
            except queue.Empty:
                continue
            self._handle(event, ready, launched)

    def _handle(self, event: tuple[Any, ...], ready: list, launched: set[str]) -> None:
        kind = event[0]
        if kind == "error":
            raise AgentError(event[1])
        if kind == "arrived":
            arrival: Arrival = event[1]
            qid = qualified(arrival.header.job, arrival.header.flow)
            self.received_out[qid] = {"src": arrival.header.src, "received_bytes": arrival.received_bytes,
                                      "finish": self.rel(arrival.finish_s),
                                      "header": self.rel(arrival.header_s)}
            self._complete(qid, arrival.finish_s, ready, launched)
        elif kind == "sent":
            qid, result = event[1], event[2]
            owned = self.owned[qid]
            self.sent_out[qid].update(dst_port=result.dst_port, sent_bytes=result.sent_bytes,
                                      confirmed_bytes=result.received_bytes, finish=self.rel(result.finish_s),
                                      connected=self.rel(result.connected_s),
                                      last_queued=self.rel(result.last_queued_s),
                                      confirmed=self.rel(result.confirmed_s))
            self.registry.flow_finished(owned.job, owned.task, result.finish_s)
            self._complete(qid, result.finish_s, ready, launched)
        elif kind == "control":
            message = event[1]
            if message.get("type") == "abort":
                raise AgentError(f"aborted: agent {message.get('from')} failed: {message.get('reason')}")
            if message.get("type") != "done":
                raise AgentError(f"unexpected control message {message!r}")
            qid = qualified(str(message.get("job")), str(message.get("task")))
            self._satisfy(qid, float(message.get("time_s", self.clock())), ready, launched)

    def _complete(self, qid: str, when_s: float, ready: list, launched: set[str]) -> None:
        """A task this host owns is done: record, tell the hosts of its dependants, release local ones."""
        self.pending.discard(qid)
        if qid in self.done_s:
            return
        for host in self.notify_hosts.get(qid, ()):
            job_id, task_id = qid.split("/", 1)
            assert self.control is not None
            self.control.send(host, {"type": "done", "job": job_id, "task": task_id, "time_s": when_s},
                              timeout_s=self.spec.connect_timeout_s)
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
        threading.Thread(target=self._send, args=(owned,), name=f"send-{owned.qid}", daemon=True).start()

    def _send(self, owned: _Owned) -> None:
        flow: FlowTask = owned.task
        job_id = owned.job.job_id
        src_ip, dst_ip = self.spec.hosts_ip[flow.src], self.spec.hosts_ip[flow.dst]

        start_epoch = self.spec.t0_s + self.sent_out[owned.qid]["start"]

        def on_bound(src_port: int) -> None:
            self.sent_out[owned.qid]["src_port"] = src_port
            self.registry.flow_started(owned.job, flow, src_port, self.spec.data_port, start_epoch)
            self.sent_out[owned.qid]["registered"] = self.rel(self.clock())

        header = FlowHeader(job_id, flow.task_id, self.me, flow.size_bytes)
        header_bytes = len(header.encode())
        try:
            result = send_flow(
                header, dst_ip, self.spec.data_port,
                bind_ip=src_ip, connect_timeout_s=self.spec.connect_timeout_s,
                io_timeout_s=self.spec.confirm_timeout_s, on_bound=on_bound,
                tos_source=lambda: _tos(self.registry.dscp(job_id, flow.task_id)),
                on_connected=lambda sock: self.registry.flow_connected(owned.job, flow, sock, header_bytes),
                pacing_source=lambda: self.registry.pacing_bytes_per_s(job_id, flow.task_id),
            )
        except TransferError as exc:
            self.events.put(("error", str(exc)))
            return
        except Exception as exc:  # a registry failure must fail the run, not kill a thread silently
            self.events.put(("error", f"flow {owned.qid}: {type(exc).__name__}: {exc}"))
            return
        self.events.put(("sent", owned.qid, result))

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
        self.events.put(("arrived", arrival))

    # ------------------------------------------------------------------------------ teardown
    def _abort_peers(self, reason: str) -> None:
        if self.control is None:
            return
        for host in sorted(set(self.spec.hosts_ip) - {self.me}):
            with contextlib.suppress(ControlError):  # a peer that is gone needs no telling
                self.control.send(host, {"type": "abort", "reason": reason}, timeout_s=0.0)

    def _stop(self) -> None:
        for closer in (self.receiver, self.control, self.registry):
            if closer is not None:
                try:
                    closer.close()
                except Exception as exc:  # teardown must finish; report and go on
                    self.log(f"teardown: {type(exc).__name__}: {exc}")

    def _document(self, error: str | None) -> dict[str, Any]:
        for qid, record in self.received_out.items():
            self.tasks_out.setdefault(qid, {"type": "flow", "src": record["src"], "dst": self.me})
            self.tasks_out[qid]["finish"] = record["finish"]
        for qid, record in self.sent_out.items():
            job_id, flow_id = qid.split("/", 1)
            seen = self.registry.trace(job_id, flow_id)
            record["allocations"] = [
                {"t_s": self.rel(t), "dscp": dscp, "rate_bps": rate, "pacing_bytes_per_s": pace}
                for t, dscp, rate, pace in seen.get("allocations", [])]
            record["progress"] = [[self.rel(t), acked] for t, acked in seen.get("progress", [])]
        return {
            "host": self.me,
            "t0_s": self.spec.t0_s,
            "scheduler": self.spec.scheduler,
            "status": "error" if error else "ok",
            "error": error,
            "pending": sorted(self.pending),
            "tasks": self.tasks_out,
            "sent": self.sent_out,
            "received": self.received_out,
        }


def _executor(task: Any) -> str:
    """The host that starts a task: a compute's host, a flow's source."""
    return task.host if isinstance(task, ComputeTask) else task.src


def _tos(dscp: int | None) -> int | None:
    return None if dscp is None else dscp << 2


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class RegistryLink(Registry):
    """The controller's registry over its Unix-socket HTTP API (``controller.client.EchelonClient``).

    Declarations are clairvoyant: the whole job with every EchelonFlow's flows, ideal-finish offsets
    (``offset_s``) and ideal-start offsets (``start_offset_s``) from ``echelonflow.echelon``.  A poller
    thread refreshes each active flow's allocation (its DSCP goes into IP_TOS between send chunks) and
    reports progress as the bytes TCP has seen acknowledged.  Zero-byte flows are not declared (the
    registry has nothing to schedule for them).  With ``pace`` set and a scheduler that enforces (not
    ``fair``, which stands for plain TCP), the allocated rate is also applied at the sender as a pacing
    rate: end-host enforcement, as the paper proposes, which TCP follows far better than a policer.
    ``job_prefix`` namespaces job ids, so one controller can see the same job run twice (e.g. together,
    then alone).  Calls are serialised on one connection.
    """

    def __init__(self, settings: RegistrySettings, log: Callable[[str], None]) -> None:
        from controller.client import EchelonClient  # stdlib-only client; imported only when used

        self.settings = settings
        self.prefix = settings.job_prefix
        self.client = EchelonClient(socket_path=settings.socket_path, token_file=settings.token_file,
                                    timeout_s=10.0)
        self.log = log
        self._lock = threading.Lock()
        self._dscp: dict[str, int] = {}
        self._rate_bps: dict[str, float] = {}
        self._active: dict[tuple[str, str], tuple[socket.socket, int] | None] = {}
        self._allocations: dict[str, list] = {}  # flow -> [(t, dscp, rate_bps, pacing)] on every change
        self._progress: dict[str, list] = {}  # flow -> [(t, acked bytes)] at every poll
        self._stop = threading.Event()
        self._errors: list[str] = []
        self.enforces = bool(self.client.scheduler().get("enforces"))
        self._thread = threading.Thread(target=self._poll_loop, name="registry-poll", daemon=True)
        self._thread.start()

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return getattr(self.client, method)(*args, **kwargs)

    def declare_job(self, job: Job) -> None:
        from echelonflow.echelon import echelons_of

        job_id = self.prefix + job.job_id
        self._call("register_job", job_id, weight=job.weight)
        for ech_id, spec in echelons_of(job).items():
            head_start = spec.ideal_start_s[spec.head]
            flows = [{"flow_id": fid, "src": job.tasks[fid].src, "dst": job.tasks[fid].dst,
                      "size_bytes": job.tasks[fid].size_bytes, "offset_s": spec.offsets_s[fid],
                      "start_offset_s": spec.ideal_start_s[fid] - head_start}
                     for fid in spec.flow_ids if job.tasks[fid].size_bytes > 0]
            if flows:
                self._call("register_echelon", job_id, ech_id, flows, kind=spec.kind)

    def flow_started(self, job: Job, flow: FlowTask, src_port: int, dst_port: int, start_s: float) -> None:
        if flow.size_bytes <= 0:
            return
        key = (self.prefix + job.job_id, flow.task_id)
        # The arrival's scheduling round already decided this flow: its answer carries the allocation,
        # applied before the first byte (the SYN leaves after this returns).  Under a scheduler that
        # enforces, wait until the switches acknowledged the new rules, so the first packets already
        # take the flow's path and queue instead of the unscheduled default.
        wait_s = self.settings.start_wait_s if self.enforces and self.settings.start_wait_s > 0 else None
        answer = self._call("flow_started", key[0], key[1], src_port, dst_port, start_s=start_s,
                            wait_s=wait_s)
        self._remember(key, (answer or {}).get("allocation") or {})
        self._active[key] = None

    def flow_connected(self, job: Job, flow: FlowTask, sock: socket.socket, header_bytes: int) -> None:
        key = (self.prefix + job.job_id, flow.task_id)
        if key in self._active:
            self._active[key] = (sock, header_bytes)

    def flow_finished(self, job: Job, flow: FlowTask, finish_s: float) -> None:
        if flow.size_bytes <= 0:
            return
        key = (self.prefix + job.job_id, flow.task_id)
        self._active.pop(key, None)
        self._call("flow_finished", key[0], key[1], finish_s=finish_s, bytes_sent=flow.size_bytes)

    def dscp(self, job_id: str, flow_id: str) -> int | None:
        if self._errors:
            raise AgentError(self._errors[0])
        return self._dscp.get(f"{self.prefix}{job_id}/{flow_id}")

    def pacing_bytes_per_s(self, job_id: str, flow_id: str) -> int | None:
        if not (self.settings.pace and self.enforces):
            return None
        rate = self._rate_bps.get(f"{self.prefix}{job_id}/{flow_id}")
        return None if rate is None else int(rate / 8)

    def trace(self, job_id: str, flow_id: str) -> dict[str, list]:
        name = f"{self.prefix}{job_id}/{flow_id}"
        return {"allocations": list(self._allocations.get(name, ())),
                "progress": list(self._progress.get(name, ()))}

    def _remember(self, key: tuple[str, str], allocation: dict) -> None:
        self._remember_allocation(key, allocation)
        name = f"{key[0]}/{key[1]}"
        rate = self._rate_bps.get(name) if self.settings.pace and self.enforces else None
        entry = (self._dscp.get(name), allocation.get("rate_bps"), None if rate is None else int(rate / 8))
        log = self._allocations.setdefault(name, [])
        if not log or log[-1][1:] != entry:
            log.append((time.time(), *entry))

    def _remember_allocation(self, key: tuple[str, str], allocation: dict) -> None:
        value = allocation.get("dscp")
        if isinstance(value, int) and 0 <= value <= 63:
            self._dscp[f"{key[0]}/{key[1]}"] = value
        # Pace exactly what the network meters: a flow the scheduler holds back ("paused": no meter,
        # last queue) stays unpaced so it can still take leftovers the fluid model did not foresee
        # (TCP never fills its allocation exactly); pacing it near zero would stall it for a whole round.
        rate = allocation.get("meter_rate_bps")
        name = f"{key[0]}/{key[1]}"
        if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0:
            self._rate_bps[name] = float(rate)
        else:
            self._rate_bps.pop(name, None)

    def _poll_loop(self) -> None:
        from controller.client import ApiClientError

        while not self._stop.wait(self.settings.poll_interval_s):
            for key, conn in list(self._active.items()):
                try:
                    answer = None
                    if conn is not None:
                        acked = acked_bytes(*conn)
                        if acked is not None:
                            self._progress.setdefault(f"{key[0]}/{key[1]}", []).append((time.time(), acked))
                        if acked:  # the progress answer carries the allocation too: one call, not two
                            answer = self._call("flow_progress", key[0], key[1], acked)
                    if answer is None:
                        answer = {"allocation": self._call("allocation", key[0], key[1])}
                    self._remember(key, answer.get("allocation") or {})
                except ApiClientError as exc:
                    if key not in self._active:  # finished meanwhile: the answer is moot
                        continue
                    if exc.status == 0:
                        self._errors.append(f"registry unreachable: {exc.problem}")
                        return
                    self.log(f"registry refused a poll for {key[0]}/{key[1]}: {exc}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        with self._lock:
            self.client.close()


def build_registry(spec: RunSpec, log: Callable[[str], None]) -> Registry:
    """The registry client the spec asks for (plain :class:`Registry` when none is configured)."""
    if spec.registry is None:
        return Registry()
    return RegistryLink(spec.registry, log)


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
        registry = build_registry(spec, lambda text: print(f"agent {spec.host}: {text}", file=sys.stderr))
    except Exception as exc:
        print(f"agent {spec.host}: error: registry unusable: {exc}", file=sys.stderr)
        write_json_atomic(spec.output_path, {
            "host": spec.host, "status": "error", "error": f"registry: {exc}", "t0_s": spec.t0_s,
            "tasks": {}, "sent": {}, "received": {}, "pending": [], "scheduler": spec.scheduler,
        })
        return 1
    document = Agent(spec, registry).run()
    if document["status"] != "ok":
        print(f"agent {spec.host}: error: {document['error']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
