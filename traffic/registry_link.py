"""The agent's side of the controller's echelon registry: declarations, channels, starts, progress.

:class:`RegistryPort` is what the agent calls; the base class does nothing, so an agent without a
registry runs plain TCP (the ``fair`` baseline of a bare network).  :class:`RegistryLink` talks to the real
registry over its Unix-socket HTTP API (``controller.client.EchelonClient``, standard library only):

* before t0, synchronously: the job's declaration, and every channel, waiting until the switches hold
  its rules.  Under a clairvoyant scheduler the declaration is every EchelonFlow with its flows' sizes,
  ideal-finish offsets ``offset_s`` and ideal-start offsets ``start_offset_s`` from
  ``echelonflow.echelon``; under one that is not (``echelon-online``, ``aalo``: the controller's
  ``clairvoyant`` is false) only which flows (ids, hosts) make up which EchelonFlow: no size, no offset,
  so the scheduler goes by the starts, progress and finishes reported below and what it learns from them;
* during the run, never on a flow's critical path: flow starts and finishes go through a worker thread in
  order, and a poller reads each active flow's allocation every ``poll_interval_s`` while reporting the
  bytes TCP has seen acknowledged.  The allocation's DSCP goes into the channel's ``IP_TOS``; under a
  scheduler that enforces (not ``fair``) its metered rate becomes the socket's pacing rate: end-host
  enforcement, which TCP follows far better than the switches' drop meters.

Zero-byte flows are not declared (the registry has nothing to schedule for them).  ``job_prefix``
namespaces job ids, so one controller can see the same job run twice.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Union

from echelonflow.model import FlowTask, Job
from echelonflow.queues import dscp_for_queue
from traffic.runspec import RegistrySettings
from traffic.transfer import Channel

#: How long the registry may be unreachable before the run fails: a controller that dies and is restarted
#: on the same store comes back within this, and the agents go on as if nothing happened (the switches
#: keep forwarding and the last allocation keeps being applied meanwhile).
OUTAGE_TOLERANCE_S = 30.0
#: Longest one allocation long-poll waits for a change before it is asked again (``GET /v1/allocations``).
WATCH_WAIT_S = 0.5


class RegistryLinkError(Exception):
    """The registry became unreachable or refused the run (the message says which)."""


class RegistryPort:
    """What the agent needs from the registry; this base class is the bare network (no registry)."""

    #: the selected scheduler enforces allocations (flows are pinned to their own paths)
    enforces = False
    #: prepended to job ids in the registry (``RegistrySettings.job_prefix``)
    prefix = ""

    def declare_job(self, job: Job) -> None:
        """Register the job and all its EchelonFlows (flows with offsets), before t0."""

    def register_channel(self, channel: Channel) -> None:
        """Declare a bound channel's 5-tuple and path; returns once the switches hold its rules."""

    def flow_started(self, job: Job, flow: FlowTask, channel: Channel, start_s: float) -> None:
        """A flow starts on ``channel`` (returns at once; reported in the background)."""

    def flow_finished(self, job: Job, flow: FlowTask, finish_s: float) -> None:
        """Every byte of a flow arrived (returns at once; reported in the background)."""

    def dscp(self, job_id: str, flow_id: str) -> int | None:
        """The DSCP of the flow's current queue: its allocation's, else the idle channels' class,
        or None to leave IP_TOS alone."""
        return None

    def pacing_bytes_per_s(self, job_id: str, flow_id: str) -> int | None:
        """The rate the flow should be paced at (its allocation's, or its channel's path rate until the
        first allocation arrives), or None for no limit (plain TCP)."""
        return None

    def held(self, job_id: str, flow_id: str) -> bool:
        """Whether the flow's sender should write nothing more for now: the scheduler paused it."""
        return False

    def forget_job(self, job_id: str) -> None:
        """The job failed (an agent of it died; the orchestrator released its flows in the registry):
        report and poll nothing more of it, and take the registry's refusals for it calmly."""

    def trace(self, job_id: str, flow_id: str) -> dict[str, list]:
        """What the agent saw of a flow over time (epoch seconds): ``allocations`` [(t, dscp, rate_bps
        decided, pacing bytes/s applied, the controller's decision time or None)] on every change and
        ``progress`` [(t, acked payload bytes, segments retransmitted since the flow began, retransmission
        timeouts in a row, payload bytes written)] every poll."""
        return {}

    def close(self) -> None:
        """Stop background work and forget this agent's channels."""


class RegistryLink(RegistryPort):
    """The controller's registry (see the module docstring): the declarations before t0 here, the
    reports of starts and finishes in a :class:`_Reporter`, the allocations in an
    :class:`_AllocationTracker`, all over one :class:`_Connection`."""

    def __init__(self, settings: RegistrySettings, log: Callable[[str], None],
                 host: str | None = None) -> None:
        self.settings = settings
        self.prefix = settings.job_prefix
        self.connection = _Connection(settings, log)
        with self.connection.locked() as client:
            info = client.scheduler()
        self.enforces = bool(info.get("enforces"))
        #: declare sizes and offsets (else the scheduler learns them from starts, progress and finishes)
        self.declares_sizes = bool(info.get("clairvoyant", True))
        self._channels: list[str] = []
        self.allocations = _AllocationTracker(settings, self.connection, info, host)
        self.reports = _Reporter(self.connection, self.allocations)

    def _name(self, job_id: str, flow_id: str) -> str:
        return f"{self.prefix}{job_id}/{flow_id}"

    # ------------------------------------------------------------------ before t0 (synchronous)
    def declare_job(self, job: Job) -> None:
        from echelonflow.echelon import echelons_of
        from echelonflow.schedulers.crux import job_compute_s

        job_id = self.prefix + job.job_id
        with self.connection.locked() as client:
            client.register_job(job_id, weight=job.weight, compute_s=job_compute_s(job))
        for ech_id, spec in echelons_of(job).items():
            head_start = spec.ideal_start_s[spec.head]
            flows = [{"flow_id": fid, "src": job.tasks[fid].src, "dst": job.tasks[fid].dst}
                     for fid in spec.flow_ids if job.tasks[fid].size_bytes > 0]
            if flows and self.declares_sizes:
                for flow in flows:
                    fid = flow["flow_id"]
                    flow.update(size_bytes=job.tasks[fid].size_bytes, offset_s=spec.offsets_s[fid],
                                start_offset_s=spec.ideal_start_s[fid] - head_start)
            if flows:
                kind = spec.kind if self.declares_sizes else None
                with self.connection.locked() as client:
                    client.register_echelon(job_id, ech_id, flows, kind=kind)

    def register_channel(self, channel: Channel) -> None:
        wait_s = self.settings.install_wait_s if self.enforces and self.settings.install_wait_s > 0 else None
        with self.connection.locked() as client:
            route = channel.route
            client.register_channel(channel.channel_id, route.src, route.dst, channel.src_port,
                                    route.dst_port, path=route.path, wait_s=wait_s)
        self._channels.append(channel.channel_id)

    # ------------------------------------------------------------------ during the run (in the background)
    def flow_started(self, job: Job, flow: FlowTask, channel: Channel, start_s: float) -> None:
        if flow.size_bytes > 0:
            if channel.route.path_rate_bps:
                self.allocations.awaiting(self._name(job.job_id, flow.task_id), channel.route.path_rate_bps)
            self.reports.put(_StartReport(self.prefix + job.job_id, flow.task_id, channel, start_s))

    def flow_finished(self, job: Job, flow: FlowTask, finish_s: float) -> None:
        if flow.size_bytes > 0:
            self.allocations.finished(self._name(job.job_id, flow.task_id))
            self.reports.put(_FinishReport(self.prefix + job.job_id, flow.task_id, flow.size_bytes, finish_s))

    def forget_job(self, job_id: str) -> None:
        self.allocations.forget(self.prefix + job_id)

    # ------------------------------------------------------------------ what the sender applies
    def dscp(self, job_id: str, flow_id: str) -> int | None:
        self.connection.raise_failure()
        return self.allocations.dscp(self._name(job_id, flow_id))

    def pacing_bytes_per_s(self, job_id: str, flow_id: str) -> int | None:
        return self.allocations.pacing_bytes_per_s(self._name(job_id, flow_id))

    def held(self, job_id: str, flow_id: str) -> bool:
        self.connection.raise_failure()  # a held sender calls nothing else: it must fail here, not stall
        return self.allocations.held(self._name(job_id, flow_id))

    def trace(self, job_id: str, flow_id: str) -> dict[str, list]:
        return self.allocations.trace(self._name(job_id, flow_id))

    def close(self) -> None:
        """Flush the reports, stop polling, and remove this agent's channels (best effort: the run is over
        and a controller that is gone already forgot them)."""
        from controller.client import ApiClientError

        self.reports.close()
        self.allocations.stop()
        for channel_id in self._channels:
            try:
                with self.connection.locked() as client:
                    client.remove_channel(channel_id)
            except ApiClientError:
                break
        self.connection.close()


class _Connection:
    """The registry client the agent's threads share, one request at a time, and how the registry has
    been doing: an outage being ridden out, or the failure that ends the run as scheduled."""

    def __init__(self, settings: RegistrySettings, log: Callable[[str], None]) -> None:
        from controller.client import EchelonClient  # stdlib-only client; imported only when used

        self.log = log
        self._client = EchelonClient(socket_path=settings.socket_path, token_file=settings.token_file,
                                     timeout_s=10.0)
        self.lock = threading.Lock()  # one request at a time on the client's connection
        self.errors: list[str] = []
        self._unreachable_since: float | None = None  # the registry stopped answering then

    @contextlib.contextmanager
    def locked(self) -> Iterator[Any]:
        """The client, for one request (or a few in a row) while no other thread uses it."""
        with self.lock:
            yield self._client

    def outage_over(self, exc: Any) -> bool:
        """An unreachable registry (``exc.status`` 0): False while it may still come back (a controller
        restart), True once it stayed away longer than OUTAGE_TOLERANCE_S; any answer ends the outage."""
        if exc is None or exc.status != 0:
            self._unreachable_since = None
            return False
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
            self.log(f"registry unreachable ({exc.problem}); waiting up to {OUTAGE_TOLERANCE_S:g} s for it")
        return now - self._unreachable_since > OUTAGE_TOLERANCE_S

    def fail(self, problem: str) -> None:
        """Record why the run cannot go on as scheduled; the next sender to ask (dscp, held) raises it.
        Logged at once: a sender that never asks again would otherwise leave no trace of it."""
        self.errors.append(problem)
        self.log(f"registry error: {problem}")

    def raise_failure(self) -> None:
        """:class:`RegistryLinkError` with the first failure recorded, if any."""
        if self.errors:
            raise RegistryLinkError(self.errors[0])

    def close(self) -> None:
        with self.lock:
            self._client.close()


@dataclass(frozen=True)
class _StartReport:
    """A flow started on ``channel`` at ``start_s`` (epoch seconds); ``job_id`` with the prefix."""

    job_id: str
    flow_id: str
    channel: Channel
    start_s: float
    kind = "start"

    @property
    def name(self) -> str:
        return f"{self.job_id}/{self.flow_id}"


@dataclass(frozen=True)
class _FinishReport:
    """Every byte (``size_bytes``) of a flow arrived at ``finish_s`` (epoch seconds)."""

    job_id: str
    flow_id: str
    size_bytes: int
    finish_s: float
    kind = "finish"

    @property
    def name(self) -> str:
        return f"{self.job_id}/{self.flow_id}"


_Report = Union[_StartReport, _FinishReport]


class _Reporter:
    """Reports flow starts and finishes in order, in a worker thread, never on a flow's critical path;
    a report the registry is away for (a controller restart) is sent again until it is back."""

    def __init__(self, connection: _Connection, allocations: _AllocationTracker) -> None:
        self.connection, self.allocations = connection, allocations
        self._queue: queue.Queue[_Report | None] = queue.Queue()
        self._worker = threading.Thread(target=self._loop, name="registry-reports", daemon=True)
        self._worker.start()

    def put(self, report: _Report) -> None:
        self._queue.put(report)

    def close(self) -> None:
        """Send what is queued (for up to 5 s), then stop."""
        self._queue.put(None)
        self._worker.join(5.0)

    def _loop(self) -> None:
        while True:
            report = self._queue.get()
            if report is None:
                return
            while not self.allocations.forgotten(report.job_id) and not self._send(report):
                time.sleep(0.1)  # the registry is away (a controller restart): the same report again

    def _send(self, report: _Report) -> bool:
        """Send one start or finish report; False when it should be retried (the registry is away)."""
        from controller.client import ApiClientError

        try:
            with self.connection.locked() as client:
                if isinstance(report, _StartReport):
                    answer = client.flow_started(report.job_id, report.flow_id, start_s=report.start_s,
                                                 channel_id=report.channel.channel_id)
                else:
                    client.flow_finished(report.job_id, report.flow_id, finish_s=report.finish_s,
                                         bytes_sent=report.size_bytes)
            if isinstance(report, _StartReport):
                self.allocations.started(report.name, report.channel, (answer or {}).get("allocation") or {})
        except ApiClientError as exc:
            if exc.status == 0 and not self.connection.outage_over(exc):
                return False
            if exc.status == 409 and self._explained(report):
                return True
            self.connection.fail(f"registry {'unreachable' if exc.status == 0 else 'refused'} the "
                                 f"{report.kind} of {report.name}: {exc.problem if exc.status == 0 else exc}")
        self.connection.outage_over(None)
        return True

    def _explained(self, report: _Report) -> bool:
        """Whether the registry's state explains its refusal (409) of this report, so nothing is wrong:

        * the job was aborted meanwhile (it failed; forget_job is on its way);
        * the registry already has exactly this report: a controller killed after it stored the report
          and before it answered, and the repeat went to its successor, which loaded the store.  A start
          is then taken as answered (the allocation is fetched, the flow polled from now on), a finish
          as done; refusing them failed the run although nothing was lost.
        """
        from controller.client import ApiClientError

        try:
            with self.connection.locked() as client:
                flow = client.flow(report.job_id, report.flow_id)
            if flow.get("state") == "aborted":
                return True
            if isinstance(report, _FinishReport):
                if flow.get("state") != "finished":
                    return False
            else:
                stored_s = flow.get("start_s")
                same_start = isinstance(stored_s, (int, float)) and abs(stored_s - report.start_s) <= 1e-6
                if flow.get("state") not in ("active", "finished") or not same_start \
                        or flow.get("channel_id") != report.channel.channel_id:
                    return False
                if flow["state"] == "active":
                    with self.connection.locked() as client:
                        allocation = client.allocation(report.job_id, report.flow_id)
                    self.allocations.started(report.name, report.channel, allocation)
        except ApiClientError:
            return False
        self.connection.log(f"registry already had the {report.kind} of {report.name} (its answer was lost "
                            f"in a controller restart)")
        return True


class _AllocationTracker:
    """Every active flow's allocation, kept current: a poller reads it every ``poll_interval_s`` while
    reporting the bytes TCP has seen acknowledged, and (with the sending host known, under a scheduler
    that enforces) one long-poll hears every change the moment a scheduling pass makes it
    (``controller.allocation_watch``).  Flows are named ``<prefixed job>/<flow>``."""

    def __init__(self, settings: RegistrySettings, connection: _Connection, info: dict[str, Any],
                 host: str | None) -> None:
        self.settings, self.connection, self.host = settings, connection, host
        self.enforces = bool(info.get("enforces"))
        #: a channel between flows sits in the controller's idle class (the last one, or class 1 when the
        #: controller expects paused flows to be held)
        idle_queue = int(info.get("idle_queue", int(info.get("queues", 4)) - 1))
        self.idle_dscp = dscp_for_queue(idle_queue) if self.enforces else None
        #: the controller leaves a paused flow in its class and expects its sender to write nothing
        self.hold_paused = bool(info.get("hold_paused", False))
        self._pace = settings.pace and self.enforces
        self._dscp: dict[str, int] = {}
        self._rate_bps: dict[str, float] = {}
        self._paused: set[str] = set()  # flows whose last allocation paused them (no meter)
        self._active: dict[str, Channel] = {}  # flows whose start the registry has, -> their channel
        self._finished: set[str] = set()  # a short flow may finish before the worker reported its start
        self._forgotten: set[str] = set()  # prefixed ids of failed jobs
        self._allocations: dict[str, list] = {}
        self._decided_at: dict[str, float] = {}  # flow -> decision time of the allocation in force
        self._lock = threading.Lock()  # three threads bring allocations (see remember)
        self._progress: dict[str, list] = {}
        #: started flows whose first allocation has not arrived yet -> their channel's path rate (bit/s)
        self._awaiting: dict[str, float] = {}
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="registry-poll", daemon=True)
        self._poller.start()
        self._watcher = threading.Thread(target=self._watch_loop, name="registry-watch", daemon=True)
        if host is not None and self.enforces:
            self._watcher.start()

    # ------------------------------------------------------------------ a flow's life
    def awaiting(self, name: str, path_rate_bps: float) -> None:
        """The flow started; until its first allocation it goes at its path's rate."""
        self._awaiting[name] = path_rate_bps

    def started(self, name: str, channel: Channel, allocation: dict[str, Any]) -> None:
        """The registry has the flow's start (answered with ``allocation``): polled from now on."""
        self.remember(name, allocation)
        if name not in self._finished:  # else its channel already carries the next flow
            self._active[name] = channel

    def finished(self, name: str) -> None:
        self._finished.add(name)
        self._active.pop(name, None)

    def forget(self, job_id: str) -> None:
        """The (prefixed) job failed: poll nothing more of it, report nothing more of it."""
        self._forgotten.add(job_id)
        for key in [k for k in self._active if k.split("/", 1)[0] == job_id]:
            self._active.pop(key, None)

    def forgotten(self, job_id: str) -> bool:
        return job_id in self._forgotten

    def stop(self) -> None:
        self._stop.set()
        self._poller.join(2.0)

    # ------------------------------------------------------------------ what the sender applies
    def dscp(self, name: str) -> int | None:
        return self._dscp.get(name, self.idle_dscp)

    def pacing_bytes_per_s(self, name: str) -> int | None:
        if not self._pace:
            return None
        # Until its first allocation arrives (the start report's round trip: a few milliseconds), a flow
        # goes at its path's rate, as it would alone: unpaced it would put a whole congestion window into
        # the top class at once (docs/emulation.md, "The allocation delivered", item 10).
        rate = self._rate_bps.get(name, self._awaiting.get(name))
        return None if rate is None else int(rate / 8)

    def held(self, name: str) -> bool:
        return self.hold_paused and self._pace and name in self._paused

    def trace(self, name: str) -> dict[str, list]:
        return {"allocations": list(self._allocations.get(name, ())),
                "progress": list(self._progress.get(name, ()))}

    # ------------------------------------------------------------------ hearing allocations
    def _poll_loop(self) -> None:
        from controller.client import ApiClientError

        while not self._stop.wait(self.settings.poll_interval_s):
            for name, channel in list(self._active.items()):
                job_id, flow_id = name.split("/", 1)
                try:
                    progress = channel.progress()
                    if name not in self._active:  # finished meanwhile: the channel carries another flow
                        continue
                    acked = None if progress is None else progress.acked_payload
                    if progress is not None:
                        self._progress.setdefault(name, []).append((time.time(), *progress))
                    with self.connection.locked() as client:
                        if acked:  # the progress answer carries the allocation too: one call, not two
                            answer = client.flow_progress(job_id, flow_id, acked)
                        else:
                            answer = {"allocation": client.allocation(job_id, flow_id)}
                    self.remember(name, answer.get("allocation") or {})
                    self.connection.outage_over(None)
                except ApiClientError as exc:
                    if name not in self._active or job_id in self._forgotten:  # finished or failed: moot
                        continue
                    if exc.status == 0:
                        if not self.connection.outage_over(exc):
                            break  # keep the last allocation; poll again next interval
                        self.connection.fail(f"registry unreachable for over {OUTAGE_TOLERANCE_S:g} s: "
                                             f"{exc.problem}")
                        return
                    self.connection.log(f"registry refused a poll for {name}: {exc}")

    def _watch_loop(self) -> None:
        from controller.client import ApiClientError, EchelonClient

        client = EchelonClient(socket_path=self.settings.socket_path, token_file=self.settings.token_file,
                               timeout_s=WATCH_WAIT_S + 10.0)
        seq = 0
        try:
            while not self._stop.is_set():
                try:
                    answer = client.allocations(str(self.host), seq, WATCH_WAIT_S)
                except ApiClientError:  # away (a restart) or refused: the poller reports outages
                    self._stop.wait(self.settings.poll_interval_s)
                    continue
                seq = int(answer.get("seq", seq))
                for allocation in answer.get("allocations") or []:
                    name = f"{allocation.get('job_id')}/{allocation.get('flow_id')}"
                    if name in self._active:
                        self.remember(name, allocation)
        finally:
            client.close()

    def remember(self, name: str, allocation: dict[str, Any]) -> None:
        """Apply ``allocation`` to the flow ``name``, unless a newer decision is already in force."""
        with self._lock:
            self._apply(name, allocation)

    def _apply(self, name: str, allocation: dict[str, Any]) -> None:
        # The long-poll, the poller and the start report each bring allocations: keep the newest decision
        self._awaiting.pop(name, None)
        decided = allocation.get("decided_at_s")
        if isinstance(decided, (int, float)):
            if decided < self._decided_at.get(name, float("-inf")):
                return
            self._decided_at[name] = decided
        value = allocation.get("dscp")
        if isinstance(value, int) and 0 <= value <= 63:
            self._dscp[name] = value
        # Pace exactly what the network meters.  A flow the scheduler holds back ("paused": no meter) is
        # either held by its sender (the controller's hold_paused: it writes nothing more, as the fluid
        # model gives it nothing, and keeps its class, so none of its packets wait in a lower class when
        # it is raised: docs/emulation.md, "The allocation delivered") or left unpaced in the last class,
        # taking leftovers; pacing it near zero instead would stall it for a whole scheduling pass after
        # the raise.
        rate = allocation.get("meter_rate_bps")
        if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0:
            self._rate_bps[name] = float(rate)
            self._paused.discard(name)
        else:
            self._rate_bps.pop(name, None)
            self._paused.add(name)
        paced = self._rate_bps.get(name) if self._pace else None
        entry = (self._dscp.get(name), allocation.get("rate_bps"), None if paced is None else int(paced / 8))
        log = self._allocations.setdefault(name, [])
        if not log or log[-1][1:4] != entry:  # with the decision's time: how late the agent heard of it
            log.append((time.time(), *entry, decided if isinstance(decided, (int, float)) else None))


def build_registry(settings: RegistrySettings | None, log: Callable[[str], None],
                   host: str | None = None) -> RegistryPort:
    """The registry client a run-spec asks for (the bare :class:`RegistryPort` when none is configured);
    ``host`` is the agent's, whose flows' allocation changes it then hears at once."""
    return RegistryPort() if settings is None else RegistryLink(settings, log, host)
