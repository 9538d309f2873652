"""Enforcement primitives the scheduling service drives: pin a 5-tuple to a path, a class and a rate.

A scheduling decision becomes, for one TCP/UDP flow:

* higher-priority 5-tuple rules on every switch of the chosen path that mark the packet's DSCP for its
  class, ``set_queue`` to it and output to the next hop.  DSCP is what actually picks the htb class on
  the userspace datapath (``set_queue`` is accepted there but ignored, docs/platform.md); ``set_queue`` is
  kept so the kernel datapath behaves the same;
* a DROP-band meter on the first switch when a rate is given.  A drop meter is a policer, so its burst is
  sized generously (``meter_burst_s`` of traffic, at least ``min_burst_kbit``): with a small bucket TCP
  collapses far below the rate.  Measured (benchmarks/bench_rules.py, 50 Mbit/s links, 5 s TCP): 0.1 s /
  500 kbit gave 93/95/97 % of 5/10/20 Mbit/s, the defaults 0.2 s / 1000 kbit 98/99/99 %;
* the reverse 5-tuple (ACKs) on the same path reversed, in queue 0.  Queue 0 is the default class with
  the highest htb priority and carries little traffic (ARP, ACKs); an ACK queued behind bulk data of a
  low class would throttle its own flow's ACK clock and blur the very class separation being enforced,
  and pinning it to the forward path's switches makes the round trip deterministic.

The first switch's forward rule carries an idle timeout as a safety net and asks for a flow-removed
message; when it idles out, :meth:`Enforcer.on_flow_removed` forgets the flow and deletes its meter and
remaining rules.  Every other rule (downstream, and the reverse path) has none and lives until the
controller deletes it: switches expire their rules each on its own clock, so a flow that resumed just at
its idle deadline could keep its first rule while a downstream one expired, and its packets then missed
on a switch off its pair's default route, were dropped there, and the controller, seeing only the first
rule, never noticed (a k=8 fabric run lost two flows so for two minutes; docs/results.md, "The scheduler
on the fabric").  Every operation returns an :class:`Ack` that resolves once every switch it touched has
answered a barrier, which is how rule-install latency is measured and how callers wait for "in force".

The class never sends by itself beyond the ``send(dpid, ops)`` function it is given, and takes its clock
and event type as arguments, so unit tests run it against a recording send function.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Callable

from controller import flowmods as fm
from controller.config import ControllerConfig
from controller.routing import Hop, path_hops
from echelonflow.fields import Check, FieldError, integer, number, one_of, show
from echelonflow.limits import RATE_BPS
from echelonflow.queues import check_queues, dscp_for_queue
from echelonflow.topology import Topology

SendFn = Callable[[int, list[fm.Op]], None]
IP_PROTO_TCP = 6
IP_PROTO_UDP = 17
#: Highest meter rate accepted (the one table of ranges: 1 Tbit/s; OpenFlow meters count kbit/s in 32
#: bits, ~4.3 Tbit/s).
MAX_RATE_BPS = RATE_BPS.high


class EnforcementError(FieldError):
    """A request the enforcer refuses (unknown flow, bad path, queue or rate); nothing was applied.

    ``field`` names the argument at fault (``flow_id``, ``match.src_ip``, ``path``, ``queue``, ``rate_bps``,
    ``clear_rate``) so the HTTP API can report it; ``kind`` is ``invalid``, ``unknown`` (no such live
    flow) or ``conflict`` (already enforced), and sets the HTTP ``status``.
    """

    STATUS = {"invalid": 400, "unknown": 404, "conflict": 409}

    def __init__(self, field: str, problem: str, kind: str = "invalid") -> None:
        super().__init__(field, problem)
        self.kind = kind
        self.status = self.STATUS[kind]


@dataclass(frozen=True)
class FlowMatch:
    """The 5-tuple of one transport flow, in its forward (data) direction."""

    src_ip: str
    dst_ip: str
    src_port: int
    dst_port: int
    ip_proto: int = IP_PROTO_TCP

    def reversed(self) -> FlowMatch:
        return FlowMatch(self.dst_ip, self.src_ip, self.dst_port, self.src_port, self.ip_proto)

    def fields(self) -> fm.Match:
        l4 = "tcp" if self.ip_proto == IP_PROTO_TCP else "udp"
        return fm.match_of(
            eth_type=fm.ETH_TYPE_IPV4, ip_proto=self.ip_proto, ipv4_src=self.src_ip, ipv4_dst=self.dst_ip,
            **{f"{l4}_src": self.src_port, f"{l4}_dst": self.dst_port},
        )


@dataclass(frozen=True)
class LiveFlow:
    """What the enforcer holds in force for one flow."""

    flow_id: str
    match: FlowMatch
    path: tuple[str, ...]
    queue: int
    rate_bps: float | None
    meter_id: int | None
    number: int  # cookie number; forward rules use number*2, reverse number*2+1


class Ack:
    """Resolves when every switch of one operation has acknowledged a barrier sent after its messages.

    ``latency_s`` is from the operation call to the last barrier reply.  A switch that was not connected
    resolves as unreachable (``ok`` is then False; it gets the state on reconnect via ``reinstall``).
    """

    def __init__(self, dpids: Sequence[int], clock: Callable[[], float], event_factory: Callable[[], object]):
        self._clock = clock
        self.started_s = clock()
        self.pending: set[int] = set(dpids)
        self.unreachable: set[int] = set()
        self.done_s: float | None = None
        self._event = event_factory()
        if not self.pending:
            self._finish()

    def switch_done(self, dpid: int) -> None:
        self._resolve(dpid)

    def switch_unreachable(self, dpid: int) -> None:
        if dpid in self.pending:
            self.unreachable.add(dpid)
        self._resolve(dpid)

    def _resolve(self, dpid: int) -> None:
        if dpid in self.pending:
            self.pending.discard(dpid)
            if not self.pending:
                self._finish()

    def _finish(self) -> None:
        self.done_s = self._clock()
        self._event.set()  # type: ignore[attr-defined]

    @property
    def done(self) -> bool:
        return self.done_s is not None

    @property
    def ok(self) -> bool:
        return self.done and not self.unreachable

    @property
    def latency_s(self) -> float | None:
        return None if self.done_s is None else self.done_s - self.started_s

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block (green-thread friendly with the app's event type) until done; False on timeout."""
        if not self.done:
            self._event.wait(timeout_s)  # type: ignore[attr-defined]
        return self.done


def wait_acks(acks: Sequence[Ack], timeout_s: float) -> dict:
    """Wait up to ``timeout_s`` in all for ``acks``: are the switches holding what was sent?

    The one answer shape of every "wait until in force" in the API (the scheduling service's and the
    primitives'): ``in_force`` (every ack resolved, every switch reachable), ``waited_s``,
    ``operations``, ``pending`` (not resolved in time) and ``unreachable`` (hit a disconnected switch).
    """
    started = time.monotonic()
    deadline = started + max(0.0, float(timeout_s))
    for ack in acks:
        if not ack.done:
            ack.wait(max(0.0, deadline - time.monotonic()))
    pending = sum(1 for a in acks if not a.done)
    unreachable = sum(1 for a in acks if a.done and getattr(a, "unreachable", None))
    return {"in_force": pending == 0 and unreachable == 0, "waited_s": time.monotonic() - started,
            "operations": len(acks), "pending": pending, "unreachable": unreachable}


class Enforcer:
    """Installs, updates and removes per-flow class/rate enforcement along explicit paths."""

    def __init__(
        self,
        topology: Topology,
        send: SendFn,
        config: ControllerConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        event_factory: Callable[[], object] = threading.Event,
    ) -> None:
        """``config``: the controller's settings (default: their defaults); this reads ``queues``,
        ``enforce_idle_s``, ``meter_burst_s`` and ``meter_min_burst_kbit``."""
        config = config or ControllerConfig()
        self.topology = topology
        self.send = send
        self.queues = check_queues(config.queues)
        self.idle_timeout_s = config.enforce_idle_s
        self.meter_burst_s = config.meter_burst_s
        self.min_burst_kbit = config.meter_min_burst_kbit
        self.clock = clock
        self.event_factory = event_factory
        self._flows: dict[str, LiveFlow] = {}
        self._holders: dict[FlowMatch, str] = {}  # 5-tuple, both directions -> live flow id
        self._freed_meter_ids: list[int] = []  # a heap: the lowest freed id is reused first
        self._next_meter_id = 1
        self._by_number: dict[int, str] = {}
        self._numbers = itertools.count(1)
        nodes = topology.graph.nodes
        self._host_ips = {nodes[h]["ip"]: h for h in topology.hosts}

    # ----------------------------------------------------------------------- public API
    def install(
        self, flow_id: str, match: FlowMatch, path: Sequence[str], queue: int, rate_bps: float | None = None
    ) -> Ack:
        """Put a new flow on ``path`` in class ``queue``, metered at ``rate_bps`` if given."""
        node_path = self.validate_install(flow_id, match, path, queue, rate_bps)
        if flow_id in self._flows:
            raise EnforcementError("flow_id", f"flow {flow_id!r} is already enforced; update or remove it "
                                              "first", "conflict")
        check_match_free(flow_id, match, self._holders)
        number = next(self._numbers)
        meter_id = self._free_meter_id() if rate_bps is not None else None
        flow = LiveFlow(flow_id, match, node_path, queue, rate_bps, meter_id, number)
        self._set_live(flow)
        self._by_number[number] = flow_id
        ops = self._flow_ops(flow)
        return self._dispatch(ops, order=self._send_order(flow))

    def update(
        self, flow_id: str, queue: int | None = None, rate_bps: float | None = None,
        clear_rate: bool = False,
    ) -> Ack:
        """Change the class and/or rate of a live flow (meter modified in place when it exists)."""
        old = self._live(flow_id)
        self.validate_update(flow_id, queue, rate_bps, clear_rate)
        new = old
        if queue is not None:
            new = replace(new, queue=queue)
        if rate_bps is not None:
            new = replace(new, rate_bps=rate_bps, meter_id=old.meter_id or self._free_meter_id())
        if clear_rate:
            new = replace(new, rate_bps=None, meter_id=None)
        if old.meter_id is not None and new.meter_id is None:
            heapq.heappush(self._freed_meter_ids, old.meter_id)
        first = self._hops(new.path)[0].dpid
        ops: dict[int, list[fm.Op]] = {}
        if new.queue != old.queue:
            for dpid, rule in self._forward_rules(new):
                ops.setdefault(dpid, []).append(rule)
        if rate_bps is not None and old.meter_id is not None:
            ops.setdefault(first, []).insert(0, self._meter_set(new, modify=True))
        elif rate_bps is not None:  # a new meter, then the first rule pointing at it
            first_ops = ops.setdefault(first, [])
            first_ops[:] = [op for op in first_ops if not _is_forward_rule(op, new)]
            first_ops[:0] = [self._meter_set(new, modify=False), self._forward_rules(new)[0][1]]
        elif clear_rate and old.meter_id is not None:  # unhook the rule, then drop the meter
            first_ops = ops.setdefault(first, [])
            first_ops[:] = [op for op in first_ops if not _is_forward_rule(op, new)]
            first_ops.extend([self._forward_rules(new)[0][1], fm.Barrier(), fm.MeterDelete(old.meter_id)])
        self._set_live(new)
        return self._dispatch(ops, order=self._send_order(new))

    def validate_install(
        self, flow_id: str, match: FlowMatch, path: Sequence[str], queue: int, rate_bps: float | None = None
    ) -> tuple[str, ...]:
        """Check an install's arguments without looking at (or changing) live state; returns the path.

        Separate from :meth:`install` so a caller applying several operations (the API's batch) can
        check all of them first and apply none when one is bad.
        """
        if not isinstance(flow_id, str) or not flow_id:
            raise EnforcementError("flow_id", f"must be a non-empty string, got {show(flow_id)}")
        self._check_match(flow_id, match)
        node_path = self._check_path(flow_id, match, path)
        self._check_queue(flow_id, queue)
        self._check_rate(flow_id, rate_bps)
        return node_path

    def validate_update(
        self, flow_id: str, queue: int | None = None, rate_bps: float | None = None, clear_rate: bool = False,
    ) -> None:
        """Check an update's values (not whether ``flow_id`` is live); raises :class:`EnforcementError`."""
        if rate_bps is not None and clear_rate:
            raise EnforcementError("clear_rate", "give a new rate_bps or clear_rate, not both")
        if queue is not None:
            self._check_queue(flow_id, queue)
        self._check_rate(flow_id, rate_bps)

    def is_live(self, flow_id: str) -> bool:
        return flow_id in self._flows

    def remove(self, flow_id: str) -> Ack:
        """Delete the flow's rules everywhere (both directions) and then its meter."""
        flow = self._live(flow_id)
        del self._flows[flow_id]
        del self._by_number[flow.number]
        if flow.meter_id is not None:
            heapq.heappush(self._freed_meter_ids, flow.meter_id)
        for match in (flow.match, flow.match.reversed()):
            self._holders.pop(match, None)
        return self._dispatch(self._delete_ops(flow), order=self._send_order(flow))

    def repath(self, flow_id: str, path: Sequence[str]) -> Ack:
        """Move a live flow to another path between its hosts, keeping its class, meter and cookie.

        Rules go onto the new path first (last switch first; a switch on both paths has its rules
        replaced in place, same match and priority, counters kept), then the old path's other switches
        lose theirs.  The meter stays on the first switch, which every path of a host shares.  Used when
        a link or switch goes down (and back).
        """
        old = self._live(flow_id)
        node_path = self._check_path(flow_id, old.match, path)
        if node_path == old.path:
            return self._dispatch({}, order=[])
        new = replace(old, path=node_path)
        ops = self._flow_ops(new)
        old_first, new_first = self._hops(old.path)[0].dpid, self._hops(new.path)[0].dpid
        if old.meter_id is not None and old_first == new_first:
            ops[new_first] = [op for op in ops[new_first] if not isinstance(op, fm.MeterSet)]
        # a host has one link, so both paths start at its switch; the old path's other switches are stale
        stale = {dpid: rules for dpid, rules in self._delete_ops(old).items() if dpid not in ops}
        self._set_live(new)
        order = self._send_order(new) + [hop.dpid for hop in self._hops(old.path) if hop.dpid in stale]
        return self._dispatch({**ops, **stale}, order=order)

    def stranded(self, passes: Callable[[Sequence[str]], bool]) -> list[str]:
        """Live flows whose path no longer ``passes`` (crosses something down)."""
        return [flow_id for flow_id, flow in self._flows.items() if not passes(flow.path)]

    def host_pair(self, flow_id: str) -> tuple[str, str]:
        """(source host, destination host) of a live flow."""
        match = self._live(flow_id).match
        return self._host_ips[match.src_ip], self._host_ips[match.dst_ip]

    def reinstall(self, dpid: int) -> Ack:
        """Send a reconnected switch every live flow's meters and rules that it holds."""
        ops: list[fm.Op] = []
        for flow in self._flows.values():
            ops.extend(self._flow_ops(flow).get(dpid, []))
        return self._dispatch({dpid: ops} if ops else {}, order=[dpid])

    def on_flow_removed(self, dpid: int, cookie: int, idle_timeout: bool) -> str | None:
        """Handle a switch's flow-removed message; returns the flow id forgotten, if any.

        Only the idle timeout of a flow's forward rule on its first switch ends the flow (the only rule
        of the flow that has one); our own deletes are ignored.
        """
        if not idle_timeout or fm.cookie_kind(cookie) != fm.COOKIE_ENFORCE:
            return None
        raw = cookie & ~fm.COOKIE_KIND_MASK
        if raw & 1:
            return None
        flow_id = self._by_number.get(raw >> 1)
        if flow_id is None or self._hops(self._flows[flow_id].path)[0].dpid != dpid:
            return None
        self.remove(flow_id)
        return flow_id

    def live_flows(self) -> dict[str, LiveFlow]:
        return dict(self._flows)

    def holders(self) -> dict[FlowMatch, str]:
        """Every 5-tuple the live flows' rules match (both directions) -> the flow holding it.

        A second flow on the same 5-tuple would replace the first one's rules (same match and priority)
        and take or drop its meter, so installs refuse a held 5-tuple (:func:`check_match_free`): a
        scheduled flow and a primitive can never disturb each other.
        """
        return dict(self._holders)

    def flow_of_cookie(self, cookie: int) -> str | None:
        """The enforced flow whose *forward* rule carries ``cookie`` (None: reverse, other owner, gone)."""
        if fm.cookie_kind(cookie) != fm.COOKIE_ENFORCE:
            return None
        raw = cookie & ~fm.COOKIE_KIND_MASK
        return None if raw & 1 else self._by_number.get(raw >> 1)

    def first_hop(self, flow_id: str) -> int:
        """Dpid of the flow's first switch (where its meter and its counted forward rule sit)."""
        return self._hops(self._live(flow_id).path)[0].dpid

    def first_hops(self) -> dict[int, list[str]]:
        """First-hop dpid -> live flow ids starting there (what a flow-stats poll has to ask)."""
        out: dict[int, list[str]] = {}
        for flow_id, flow in self._flows.items():
            out.setdefault(self._hops(flow.path)[0].dpid, []).append(flow_id)
        return out

    #: (cookie, mask) selecting every enforced flow's forward rules in a flow-stats request.
    FORWARD_COOKIE = (fm.make_cookie(fm.COOKIE_ENFORCE, 0), fm.COOKIE_KIND_MASK | 1)

    def meter_burst_kbit(self, rate_bps: float) -> int:
        return max(self.min_burst_kbit, int(math.ceil(rate_bps * self.meter_burst_s / 1000.0)))

    # ----------------------------------------------------------------------- message building
    def _hops(self, path: Sequence[str]) -> list[Hop]:
        return path_hops(self.topology, path)

    def _cookie(self, flow: LiveFlow, reverse: bool) -> int:
        return fm.make_cookie(fm.COOKIE_ENFORCE, flow.number * 2 + int(reverse))

    def _forward_rules(self, flow: LiveFlow) -> list[tuple[int, fm.FlowRule]]:
        dscp, out = dscp_for_queue(flow.queue), []
        for index, hop in enumerate(self._hops(flow.path)):
            first = index == 0  # the flow's lifetime: its idle timeout, its meter
            rule = fm.FlowRule(
                fm.PRIORITY_ENFORCED, flow.match.fields(),
                (fm.SetDscp(dscp), fm.SetQueue(flow.queue), fm.Output(hop.out_port)),
                cookie=self._cookie(flow, reverse=False), idle_timeout_s=self.idle_timeout_s if first else 0,
                meter_id=flow.meter_id if first else None, send_flow_removed=True,
            )
            out.append((hop.dpid, rule))
        return out

    def _reverse_rules(self, flow: LiveFlow) -> list[tuple[int, fm.FlowRule]]:
        dscp, out = dscp_for_queue(0), []
        for hop in self._hops(tuple(reversed(flow.path))):
            rule = fm.FlowRule(
                fm.PRIORITY_ENFORCED, flow.match.reversed().fields(),
                (fm.SetDscp(dscp), fm.SetQueue(0), fm.Output(hop.out_port)),
                cookie=self._cookie(flow, reverse=True),
            )
            out.append((hop.dpid, rule))
        return out

    def _meter_set(self, flow: LiveFlow, modify: bool) -> fm.MeterSet:
        assert flow.meter_id is not None and flow.rate_bps is not None
        rate_kbps = max(1, int(round(flow.rate_bps / 1000.0)))
        return fm.MeterSet(flow.meter_id, rate_kbps, self.meter_burst_kbit(flow.rate_bps), modify=modify)

    def _flow_ops(self, flow: LiveFlow) -> dict[int, list[fm.Op]]:
        ops: dict[int, list[fm.Op]] = {}
        if flow.meter_id is not None:
            ops[self._hops(flow.path)[0].dpid] = [self._meter_set(flow, modify=False)]
        for dpid, rule in self._forward_rules(flow) + self._reverse_rules(flow):
            ops.setdefault(dpid, []).append(rule)
        return ops

    def _delete_ops(self, flow: LiveFlow) -> dict[int, list[fm.Op]]:
        both = fm.COOKIE_KIND_MASK | ((1 << fm.COOKIE_KIND_SHIFT) - 2)  # ignore the direction bit
        ops: dict[int, list[fm.Op]] = {}
        for hop in self._hops(flow.path):
            ops[hop.dpid] = [fm.FlowDelete(self._cookie(flow, reverse=False), both)]
        if flow.meter_id is not None:
            ops[self._hops(flow.path)[0].dpid] += [fm.Barrier(), fm.MeterDelete(flow.meter_id)]
        return ops

    def _send_order(self, flow: LiveFlow) -> list[int]:
        """Last switch first, so a packet admitted by the first switch finds its rules downstream."""
        return [hop.dpid for hop in reversed(self._hops(flow.path))]

    def _dispatch(self, ops: dict[int, list[fm.Op]], order: Sequence[int]) -> Ack:
        dpids = [d for d in order if d in ops] + sorted(d for d in ops if d not in order)
        ack = Ack(dpids, self.clock, self.event_factory)
        for dpid in dpids:
            self.send(dpid, list(ops[dpid]) + [fm.Barrier(ticket=ack)])
        return ack

    def _set_live(self, flow: LiveFlow) -> None:
        self._flows[flow.flow_id] = flow
        self._holders[flow.match] = self._holders[flow.match.reversed()] = flow.flow_id

    def _free_meter_id(self) -> int:
        """A meter id no live flow uses: the lowest freed one, else a new one (ids stay small)."""
        if self._freed_meter_ids:
            return heapq.heappop(self._freed_meter_ids)
        self._next_meter_id += 1
        return self._next_meter_id - 1

    # ----------------------------------------------------------------------- validation
    def _live(self, flow_id: str) -> LiveFlow:
        try:
            return self._flows[flow_id]
        except (KeyError, TypeError):
            raise EnforcementError("flow_id", f"no enforced flow {flow_id!r}", "unknown") from None

    def _check_match(self, flow_id: str, match: FlowMatch) -> None:
        if not isinstance(match, FlowMatch):
            raise EnforcementError("match", f"must be a FlowMatch, got {show(match)}")
        for name in ("src_ip", "dst_ip"):
            value = getattr(match, name)
            if value not in self._host_ips:
                raise EnforcementError(f"match.{name}", f"must be the IPv4 address of a host of "
                                                        f"{self.topology.name}, got {show(value)}")
        for name in ("src_port", "dst_port"):
            _check(f"match.{name}", getattr(match, name), PORT)
        _check("match.ip_proto", match.ip_proto, IP_PROTO)

    def _check_path(self, flow_id: str, match: FlowMatch, path: Sequence[str]) -> tuple[str, ...]:
        node_path = tuple(path) if isinstance(path, (list, tuple)) else ()
        src, dst = self._host_ips[match.src_ip], self._host_ips[match.dst_ip]
        if len(node_path) < 3 or node_path[0] != src or node_path[-1] != dst:
            raise EnforcementError(
                "path", f"must run from {src} to {dst} through at least one switch, got {show(path)}")
        graph = self.topology.graph
        for a, b in zip(node_path, node_path[1:]):
            if not graph.has_edge(a, b):
                raise EnforcementError("path", f"has no link {a}-{b} in {self.topology.name}")
        for node in node_path[1:-1]:
            if graph.nodes[node]["kind"] != "switch":
                raise EnforcementError("path", f"goes through host {node}")
        if len(set(node_path)) != len(node_path):
            raise EnforcementError("path", f"visits a node twice: {show(path)}")
        return node_path

    def _check_queue(self, flow_id: str, queue: object) -> None:
        _check("queue", queue, integer(0, self.queues - 1))

    def _check_rate(self, flow_id: str, rate_bps: object) -> None:
        if rate_bps is not None:
            _check("rate_bps", rate_bps, RATE)


#: Value checks of a flow's enforcement (the project's one field checker, echelonflow.fields).
PORT = integer(1, 65535)
IP_PROTO = one_of(IP_PROTO_TCP, IP_PROTO_UDP)
RATE = number(RATE_BPS.low, MAX_RATE_BPS, what="a rate in bit/s")


def _check(field: str, value: object, check: Check) -> None:
    try:
        check(field, value)
    except FieldError as err:
        raise EnforcementError(err.field, err.problem) from None


def check_match_free(flow_id: str, match: FlowMatch, held: dict[FlowMatch, str]) -> None:
    """Refuse (``conflict``) a ``match`` whose 5-tuple, either way round, another live flow holds."""
    for candidate in (match, match.reversed()):
        owner = held.get(candidate)
        if owner is not None and owner != flow_id:
            raise EnforcementError(
                "match", f"{match.src_ip}:{match.src_port} -> {match.dst_ip}:{match.dst_port} (proto "
                         f"{match.ip_proto}) is already enforced for flow {owner!r}", "conflict")


def _is_forward_rule(op: fm.Op, flow: LiveFlow) -> bool:
    return isinstance(op, fm.FlowRule) and op.match == flow.match.fields()
