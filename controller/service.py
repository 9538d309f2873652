"""The scheduling service: the registry's view -> the selected scheduler -> the smallest enforcement change.

Runs on every arrival (flow started), departure (flow finished), scheduler switch, link or switch going
down or coming back (:meth:`SchedulingService.on_links_changed` first moves what is enforced on the
changed paths) and every ``interval_s``.
It calls the very scheduler classes the simulator runs (``echelonflow.schedulers.get_scheduler``),
through the one entry point ``Scheduler.decide`` on the registry's view (``Registry.scheduler_view``: the
flow table every event keeps current; a policy that decides on a snapshot gets one built by the
registry).  With ``check_decisions`` (a debug setting) every decision is checked against the invariants
the simulator checks (``echelonflow.schedulers.view.check_decision``) and a failing one is not enforced.
Then it turns the ``Decision`` into enforcement through an :class:`EnforcementSink` (the controller's
``Enforcer``; a recording sink in unit tests):

* **rank -> priority queue.** Queue 0 is the default class of unscheduled traffic; scheduled flows use
  queues ``1..queues-1`` (1 = most urgent).  Ranks are compressed *by group order*: EchelonFlows with a
  sending flow are ordered by the best (lowest) rank of their sending flows, the i-th gets queue
  ``1 + min(i, queues - 2)``, so the ``queues - 2`` most urgent groups each get a class of their own and
  every later group shares the last one.
  Inside a group the scheduler's rates already order the flows (earliest due first gets its path, the
  ones after it what is left), so they share a class.
  A flow the scheduler gives (almost) no rate (its group is blocked, or it has no bytes left) goes to the
  last queue without a meter: it only gets what more urgent classes leave, and is never starved by a meter.
  With ``hold_paused`` (agents that hold a paused flow: it sends nothing) a paused flow keeps the class it
  has and idle channels sit in class 1, so no flow is ever raised out of a class that still holds its
  packets (they would be overtaken by its own newer ones; docs/emulation.md, "The allocation delivered").
* **rate -> meter.** ``rate_bps * headroom``; ``headroom`` defaults to 1.0 and is a knob for the fabric
  measurements (a drop meter polices, so TCP tends to get less than the rate).  A rate below
  ``min_rate_bps`` (default 8 kbit/s, the meter granularity is kbit/s) counts as paused (see above).
* **diff.** Only what changed is pushed: a new flow is installed, a gone flow removed, a queue change or a
  meter rate that moved by more than ``rate_tolerance`` (relative) is updated; everything else is left
  (``controller.plan`` computes it without a switch; this service applies it).
* ``fair`` (``enforces = False``) means plain TCP sharing: nothing is installed, and switching to it
  removes everything that is.

Remaining bytes come from the registry: the larger of the agents' progress reports and the switch
counters fed through :meth:`SchedulingService.observe_bytes` (scaled by ``payload_fraction`` because the
counters include Ethernet/IP/TCP headers).  The clock is passed in, so tests control time.

Learning policies (``echelon-online``) hear every flow start, progress report and finish as a
``FlowEvent`` (:meth:`SchedulingService.on_arrival`, :meth:`~SchedulingService.on_progress`,
:meth:`~SchedulingService.on_departure`), and a newly selected (or restarted) scheduler first hears the
registry's history, starts and finishes in time order.  The selected scheduler is the registry's
estimator of what flows registered without a size have left.

After a controller restart the registry is loaded from the store; :meth:`SchedulingService.start`
reschedules at once and installs every live flow again without any agent doing anything.

Every pass's :class:`PassReport` is kept in ``recent_passes`` (the last ``RECENT_PASSES``, for the
dashboard's table) and handed to each callable in ``pass_listeners`` (the metrics exporter's
histograms), so observers need no hook inside the pass itself.  (A scheduling pass is what the API
and the metrics publish as a "round": ``/v1/rounds``, ``last_round``, ``echelon_scheduling_rounds``.)

Kept Python 3.9 compatible; no os_ken import (the app wires the real ``Enforcer`` in).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from controller.allocation_watch import AllocationWatch
from controller.config import ControllerConfig
from controller.enforcement import FlowMatch, wait_acks
from controller.plan import Installed, plan
from controller.registry import FlowRecord, Registry, RegistryError
from echelonflow.errors import UserError
from echelonflow.queues import check_queues, dscp_for_queue
from echelonflow.schedulers import SCHEDULERS, get_scheduler
from echelonflow.schedulers.base import Decision, FlowEvent, Scheduler
from echelonflow.schedulers.view import check_decision

LOG = logging.getLogger("echelon.service")
DEFAULT_SCHEDULER = "echelon"
#: How many past passes ``SchedulingService.recent_passes`` keeps.
RECENT_PASSES = 100


class EnforcementSink(Protocol):
    """What the service drives; ``controller.enforcement.Enforcer`` has exactly these methods."""

    def install(self, flow_id: str, match: Any, path: Sequence[str], queue: int,
                rate_bps: float | None) -> Any: ...

    def update(self, flow_id: str, queue: int | None = None, rate_bps: float | None = None,
               clear_rate: bool = False) -> Any: ...

    def remove(self, flow_id: str) -> Any: ...

    def repath(self, flow_id: str, path: Sequence[str]) -> Any: ...


#: Enforcement keys of channels (``channel:<id>``): never a ``job/flow`` key, which always has a slash.
CHANNEL_PREFIX = "channel:"


def channel_key(channel_id: str) -> str:
    return CHANNEL_PREFIX + channel_id


@dataclass
class PassReport:
    """One reschedule: why, how long snapshot, decision and enforcement diff took, what was pushed."""

    reason: str
    now_s: float
    scheduler: str = ""
    active_flows: int = 0
    snapshot_s: float = 0.0  # taking the scheduler's view: the registry's table, or a Snapshot
    decide_s: float = 0.0
    enforce_s: float = 0.0
    installs: int = 0
    updates: int = 0
    removes: int = 0
    error: str = ""


@dataclass(frozen=True)
class Tuning:
    """The service's knobs that are not controller settings: the fabric measurements and unit tests
    set them."""

    #: Meter rate per allocated rate (a drop meter polices, so TCP tends to get less than the rate).
    headroom: float = 1.0
    #: A meter is updated only when its rate moves by more than this fraction.
    rate_tolerance: float = 0.01
    #: Payload bytes per counted frame byte; None: the topology's (its MTU's) framing.
    payload_fraction: float | None = None


@dataclass
class _State:
    decision: Decision = field(default_factory=Decision)
    queue: dict[str, int] = field(default_factory=dict)
    decided_at_s: float | None = None


class SchedulingService:
    """Keeps the network's enforcement equal to the selected scheduler's latest decision."""

    def __init__(
        self,
        registry: Registry,
        sink: EnforcementSink | None = None,
        config: ControllerConfig | None = None,
        now: Callable[[], float] = time.time,
        lock: Any = None,
        event_factory: Callable[[], Any] = threading.Event,
        tuning: Tuning | None = None,
    ) -> None:
        """``config``: the controller's settings (default: their defaults), held and read where used
        (``interval_s``, ``queues``, ``min_rate_bps``, ``hold_paused``, ``fixed_class``,
        ``check_decisions``); ``tuning`` likewise.
        ``now``, ``lock`` and ``event_factory`` are the clock, the one-pass-at-a-time lock and the
        long-polls' events (the app passes its hub's)."""
        self.config = config or ControllerConfig()
        self.tuning = tuning or Tuning()
        check_queues(self.config.queues)  # queue 0 plus at least one scheduled class
        self.registry = registry
        self.sink = sink
        self.now = now
        self._first_class: dict[str, int] = {}  # with fixed_class: flow -> the class it keeps
        #: agents' long-polls for their flows' changed allocations (``GET /v1/allocations``)
        self.watch = AllocationWatch(event_factory)
        #: payload bytes per counted frame byte; by default the topology's (its MTU's) framing
        self.payload_fraction = float(self.tuning.payload_fraction or registry.topology.payload_fraction)
        name = registry.settings.get("scheduler", DEFAULT_SCHEDULER)
        #: Flow events handed to the scheduler's ``observe`` since this service started, by kind.
        self.observed: dict[str, int] = {"start": 0, "progress": 0, "finish": 0}
        self.scheduler: Scheduler = self._attach(get_scheduler(name))
        self.installed: dict[str, Installed] = {}
        self.state = _State()
        self.last_pass: PassReport | None = None
        self.recent_passes: deque[PassReport] = deque(maxlen=RECENT_PASSES)
        self.pass_listeners: list[Callable[[PassReport], None]] = []
        self._last_run_s = float("-inf")
        self._stopped = False
        #: Flow id -> why the sink last refused it (logged once per reason, retried every pass).
        self._refused: dict[str, str] = {}
        #: Acks (objects with ``wait``/``done``/``unreachable``) of pushed operations not yet resolved.
        self.pending_acks: list[Any] = []
        #: One pass at a time.  Sending to a switch yields to other green threads, so without it an API
        #: handler's pass could interleave with the interval loop's and both would install the same flow.
        #: The app passes its hub's semaphore (a threading lock would block the whole eventlet hub).
        self._pass_lock = lock if lock is not None else threading.Lock()

    # ------------------------------------------------------------------ scheduler selection
    @property
    def scheduler_name(self) -> str:
        return self.scheduler.name

    @staticmethod
    def available() -> list[str]:
        return list(SCHEDULERS)

    def set_scheduler(self, name: Any) -> PassReport:
        """Switch policy (validated first, persisted, then applied at once)."""
        if not isinstance(name, str):
            raise RegistryError("scheduler", f"must be a string, one of {', '.join(SCHEDULERS)}")
        try:
            scheduler = get_scheduler(name)
        except UserError as exc:
            raise RegistryError("scheduler", str(exc)) from None
        self.registry.set_setting("scheduler", name)
        self.scheduler = self._attach(scheduler)
        return self.reschedule("scheduler")

    def _attach(self, scheduler: Scheduler) -> Scheduler:
        """Make ``scheduler`` the registry's size estimator and tell it what already happened."""
        history = []
        for flow in self.registry.flows.values():
            if flow.start_s is not None:
                history.append((flow.start_s, 1, flow.seq, "start", flow))
            if flow.state == "finished":  # not an aborted flow: it did not move its whole size
                history.append((flow.finish_s, 0, flow.seq, "finish", flow))
        for _time, _order, _seq, kind, flow in sorted(history, key=lambda e: e[:3]):
            self._tell(scheduler, kind, flow)
        self.registry.estimator = scheduler
        return scheduler

    def _tell(self, scheduler: Scheduler, kind: str, flow: FlowRecord) -> bool:
        """One ``FlowEvent`` to ``scheduler.observe``; a policy that fails on it must not fail the API."""
        time_s = {"start": flow.start_s, "finish": flow.finish_s}.get(kind)
        event = FlowEvent(kind, flow.key, flow.echelon_key, flow.src, flow.dst,
                          self.now() if time_s is None else float(time_s), float(flow.bytes_sent))
        try:
            scheduler.observe(event)
        except Exception:  # noqa: BLE001 - log it; the flow is in the registry whatever the policy thinks
            LOG.exception("scheduler %s failed to observe the %s of %s", scheduler.name, kind, flow.key)
            return False
        return True

    def _observe(self, kind: str, flow_key: str | None) -> None:
        if flow_key is not None and self._tell(self.scheduler, kind, self.registry.flows[flow_key]):
            self.observed[kind] += 1

    # ------------------------------------------------------------------ events
    def start(self) -> PassReport:
        """First pass after (re)start: re-enforces every live flow loaded from the store."""
        return self.reschedule("start")

    def on_arrival(self, flow_key: str | None = None) -> PassReport:
        """A flow started (the registry has it): the scheduler hears of it, and every allocation may
        change, so a full pass."""
        self._observe("start", flow_key)
        return self.reschedule("arrival")

    def on_progress(self, flow_key: str) -> None:
        """An agent reported a flow's bytes so far (the registry has them): the scheduler hears of it;
        the next pass (any reason) uses them."""
        self._observe("progress", flow_key)

    def on_departure(self, flow_key: str | None = None) -> PassReport:
        """A flow finished: the scheduler hears of it, and its capacity goes to the others at once, not
        at the next interval."""
        self._observe("finish", flow_key)
        report = self.reschedule("departure")
        self._expire()
        return report

    def on_links_changed(self) -> tuple[list[str], PassReport]:
        """A link or switch went down or came back (``registry.links`` already says so): re-pin.

        The registry re-routes its flows and channels; every enforced one whose path changed is moved
        at once (rules onto the new path, off the old one, meter kept), before the scheduler decides
        again on the new paths' loads.  Returns the enforcement keys moved and the pass's report.
        """
        with self._pass_lock:
            flows, channels = self.registry.repin()
            moved = []
            for key in [*flows, *(channel_key(c) for c in channels)]:
                if key not in self.installed:
                    continue
                path = self._install_args(key)[1]
                if self.sink is not None and not self._call(self.sink.repath, key, path):
                    self.installed.pop(key, None)  # the sink lost it: the pass below installs it afresh
                    continue
                moved.append(key)
        return moved, self.reschedule("reroute")

    def observe_bytes(self, flow_id: str, byte_count: float) -> None:
        """Switch-counter bytes of a flow's first-hop rule (frames incl. headers) -> payload estimate.

        A channel's counter adds up every flow it carried, so it says nothing about the current one:
        channel flows go by their agents' progress reports (TCP-acknowledged bytes) alone."""
        if not flow_id.startswith(CHANNEL_PREFIX):
            self.registry.observe_bytes(flow_id, float(byte_count) * self.payload_fraction)

    def forget(self, flow_id: str) -> None:
        """The enforcement dropped this flow by itself (rule idle timeout): install it again next pass."""
        self.installed.pop(flow_id, None)

    def tick(self) -> PassReport | None:
        """Reschedule if the interval has passed since the last pass (of any reason)."""
        if self.now() - self._last_run_s >= self.config.interval_s:
            report = self.reschedule("interval")
            self._expire()
            return report
        return None

    def _expire(self) -> None:
        """Done jobs past their retention leave memory (``Registry.expire``); a failure (the store) is
        logged, not the caller's: its event is in the registry already, the next round tries again."""
        try:
            self.registry.expire(self.now())
        except Exception:  # noqa: BLE001 - the finish that triggered it succeeded
            LOG.exception("retention of done jobs failed; tried again at the next round")

    def run(self, sleep: Callable[[float], Any]) -> None:
        """Interval loop for a green thread: ``hub.spawn(service.run, hub.sleep)``; ends on :meth:`stop`."""
        while not self._stopped:
            sleep(self.config.interval_s)
            if self._stopped:
                break
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the loop must outlive one bad pass
                LOG.exception("scheduling pass failed")

    def stop(self) -> None:
        self._stopped = True

    # ------------------------------------------------------------------ the pass
    def reschedule(self, reason: str) -> PassReport:
        with self._pass_lock:
            report = self._one_pass(reason)
        self.recent_passes.append(report)
        for listener in self.pass_listeners:
            listener(report)
        return report

    def _one_pass(self, reason: str) -> PassReport:
        now_s = self.now()
        self._last_run_s = now_s
        report = PassReport(reason=reason, now_s=now_s, scheduler=self.scheduler.name)
        started = time.perf_counter()
        scheduler = self.scheduler
        view = self.registry.scheduler_view(now_s, scheduler.active_order)  # kept current by every event
        report.active_flows = len(view.active)
        report.snapshot_s = time.perf_counter() - started
        started = time.perf_counter()
        try:
            allocation = scheduler.decide(view)
            if self.config.check_decisions:
                check_decision(view, allocation)
            decision = view.decision_of(allocation)
        except Exception as exc:  # noqa: BLE001 - keep the last good enforcement
            LOG.exception("scheduler %s failed; enforcement left as it was", self.scheduler.name)
            report.error = f"{type(exc).__name__}: {exc}"
            self.last_pass = report
            return report
        report.decide_s = time.perf_counter() - started
        started = time.perf_counter()
        queue = self.queues_for(decision)
        self.state = _State(decision=decision, queue=queue, decided_at_s=now_s)
        desired = self._desired(decision, queue) if self.scheduler.enforces else {}
        self._push(desired, report)
        if self.watch.host_seq:
            self._tell_watchers(decision, queue)
        report.enforce_s = time.perf_counter() - started
        self.last_pass = report
        return report

    def _tell_watchers(self, decision: Decision, queue: dict[str, int]) -> None:
        """Wake the agents whose flows' class or meter this pass changed (:class:`AllocationWatch`)."""
        flows, watched = self.registry.flows, self.watch.host_seq
        seen = {}
        for key in decision.rate_bps:
            flow = flows[key]
            if flow.src in watched and flow.state == "active":
                installed = self.installed.get(self.enforcement_key(key))
                seen[key] = (flow.src, (queue.get(key), None if installed is None else installed.rate_bps))
        self.watch.update(seen)

    def allocations_of(self, src: str) -> list[dict[str, Any]]:
        """The allocation of every active flow sent by host ``src``."""
        flows = self.registry.flows
        return [self.allocation(key) for key in self.registry.active_keys() if flows[key].src == src]

    def queues_for(self, decision: Decision) -> dict[str, int]:
        """Compress ranks into queues 1..queues-1 by group order (see the module docstring)."""
        group_best: dict[str, int] = {}
        flows = self.registry.flows
        for fid, rank in decision.rank.items():
            if self.paused(decision.rate_bps.get(fid, 0.0)):
                continue  # waiting flows do not claim a class for their group
            group = flows[fid].echelon_key
            if group not in group_best or rank < group_best[group]:
                group_best[group] = rank
        order = sorted(group_best, key=lambda g: (group_best[g], g))
        last = self.config.queues - 1
        group_queue = {g: 1 + min(i, self.config.queues - 2) for i, g in enumerate(order)}
        out = {}
        for fid in decision.rank:
            if not self.paused(decision.rate_bps.get(fid, 0.0)):
                out[fid] = group_queue[flows[fid].echelon_key]
            elif self.config.hold_paused:
                have = self.installed.get(self.enforcement_key(fid))
                out[fid] = self.idle_queue if have is None else have.queue
            else:
                out[fid] = last
        if self.config.fixed_class:
            # a flow keeps the class of its first allocation until it ends: a class change moves its
            # newer packets into another queue than its older ones, and a raise lets them overtake those
            # still waiting, which TCP takes for loss (docs/emulation.md, "The allocation delivered")
            kept = {fid: self._first_class[fid] for fid in out if fid in self._first_class}
            kept.update((fid, q) for fid, q in out.items()
                        if fid not in kept and not self.paused(decision.rate_bps.get(fid, 0.0)))
            self._first_class = kept  # flows that ended are forgotten
            out.update(kept)
        return out

    @property
    def idle_queue(self) -> int:
        """The class of idle channels and of paused flows without one.  Senders that hold paused flows
        (``hold_paused``: they write nothing) keep a paused flow in the class its last packets went in,
        and idle channels sit in class 1: no flow is ever raised out of a class it still has packets
        queued in (they would be overtaken by its newer ones: docs/emulation.md).  Otherwise the last."""
        return 1 if self.config.hold_paused else self.config.queues - 1

    def paused(self, rate_bps: float) -> bool:
        """A rate below ``min_rate_bps`` (incl. 0) means "wait": last queue, no meter (leftovers only)."""
        return rate_bps < self.config.min_rate_bps

    def enforcement_key(self, flow_key: str) -> str:
        """What the switches hold a flow's rules under: its channel's, or its own (``job/flow``)."""
        channel_id = self.registry.flows[flow_key].channel_id
        return flow_key if channel_id is None else channel_key(channel_id)

    def _desired(self, decision: Decision, queue: dict[str, int]) -> dict[str, Installed]:
        """Enforcement keys -> class and meter.  Every registered channel is held, idle ones in the idle
        class (:attr:`idle_queue`) without a meter, so its rules are in place before a flow starts on it."""
        idle = Installed(self.idle_queue, None)
        out = {channel_key(cid): idle for cid in self.registry.channels}
        for fid, q in queue.items():
            rate = decision.rate_bps.get(fid, 0.0)
            meter = None if self.paused(rate) else rate * self.tuning.headroom
            out[self.enforcement_key(fid)] = Installed(q, meter)
        return out

    def _install_args(self, key: str) -> tuple[FlowMatch, tuple[str, ...]]:
        if key.startswith(CHANNEL_PREFIX):
            channel = self.registry.channels[key[len(CHANNEL_PREFIX):]]
            route = self.registry.channels.route(channel, self.registry.links)
            return FlowMatch(*self.registry.channels.tuple_of(channel)), route
        return FlowMatch(*self.registry.five_tuple(key)), self.registry.path_of(key)

    def _push(self, desired: dict[str, Installed], report: PassReport) -> None:
        """Apply ``controller.plan``'s operations; record each one the sink accepted.

        A sink call may yield the hub, and a switch's idle-timeout report (:meth:`forget`) can run in
        between: a flow may leave ``installed`` while its operation is under way, so it is popped, not
        deleted."""
        sink = self.sink
        self.pending_acks = [a for a in self.pending_acks if not a.done]
        for op in plan(self.installed, desired, self.tuning.rate_tolerance):
            if op.kind == "remove":
                if sink is not None and not self._call(sink.remove, op.flow_id):
                    continue
                self.installed.pop(op.flow_id, None)
                report.removes += 1
            elif op.kind == "install":
                if sink is not None:
                    match, path = self._install_args(op.flow_id)
                    if not self._call(sink.install, op.flow_id, match, path, op.queue, op.rate_bps):
                        continue
                self.installed[op.flow_id] = op.after
                report.installs += 1
            else:
                kwargs: dict[str, Any] = {}
                if op.queue is not None:
                    kwargs["queue"] = op.queue
                if op.rate_bps is not None:
                    kwargs["rate_bps"] = op.rate_bps
                if op.clear_rate:
                    kwargs["clear_rate"] = True
                if sink is not None and not self._call(sink.update, op.flow_id, **kwargs):
                    # the sink may have dropped the flow (idle timeout): forget it, the next pass installs it
                    self.installed.pop(op.flow_id, None)
                    continue
                self.installed[op.flow_id] = op.after
                report.updates += 1

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Call the sink; a failure is logged and the flow retried next pass (state not recorded).

        An ack the sink returns (the real Enforcer's barrier ticket) is kept until it resolves, so
        :meth:`wait_in_force` can tell callers when the switches hold what was pushed.
        """
        try:
            result = method(*args, **kwargs)
        except UserError as exc:  # refused (e.g. its 5-tuple is a primitive's): say so once, retry later
            if self._refused.get(args[0]) != str(exc):
                self._refused[args[0]] = str(exc)
                LOG.warning("enforcement %s refused: %s", getattr(method, "__name__", "call"), exc)
            return False
        except Exception:  # noqa: BLE001 - one switch's trouble must not stop the others
            LOG.exception("enforcement %s%r failed", getattr(method, "__name__", "call"), args[:1])
            return False
        self._refused.pop(args[0], None)
        unresolved = not getattr(result, "done", True) or getattr(result, "unreachable", None)
        if hasattr(result, "wait") and unresolved:
            self.pending_acks.append(result)
        return True

    def wait_in_force(self, timeout_s: float) -> dict[str, Any]:
        """Wait (green-thread friendly) until every operation pushed so far is acknowledged by its switches.

        Barriers are per switch and ordered, so once these acks resolve the switches hold everything the
        service pushed up to now.  Returns ``in_force`` (all acked, every switch reachable), how long it
        waited, and how many operations are still pending or hit a disconnected switch.
        """
        acks = list(self.pending_acks)
        result = wait_acks(acks, timeout_s)
        self.pending_acks = [a for a in self.pending_acks if not a.done]
        return result

    # ------------------------------------------------------------------ reads
    def allocation(self, flow_key: str, flow: FlowRecord | None = None) -> dict[str, Any]:
        """The flow's current allocation as the API reports it (``flow``: its record when it is not in
        the registry's memory, a done flow of an archived job)."""
        flow = self.registry.flows[flow_key] if flow is None else flow
        decision = self.state.decision
        decided = flow_key in decision.rate_bps and flow.state == "active"
        installed = self.installed.get(self.enforcement_key(flow_key)) if flow.state == "active" else None
        queue = self.state.queue.get(flow_key) if decided and self.scheduler.enforces else None
        return {
            "job_id": flow.job_id,
            "flow_id": flow.flow_id,
            "state": flow.state,
            "scheduler": self.scheduler.name,
            "enforced": installed is not None,
            "rate_bps": decision.rate_bps[flow_key] if decided else None,
            "rank": decision.rank.get(flow_key) if decided else None,
            "queue": queue if queue is not None else (0 if decided else None),
            "dscp": dscp_for_queue(queue) if queue is not None else (0 if decided else None),
            "meter_rate_bps": installed.rate_bps if installed is not None else None,
            "decided_at_s": self.state.decided_at_s if decided else None,
        }
