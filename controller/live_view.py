"""What the dashboard and the metrics exporter show: JSON-ready views of the controller's live state.

One place computes the numbers both read, so the page and ``/metrics`` never disagree:

* the topology (nodes with kind, layer, dpid, pod, address; links with rate and ports);
* per directed link the rate measured by the switches' port counters (``SwitchStats``; none without a
  fabric) and the rate the current decision gives the flows on it (``scheduled_bps``);
* per EchelonFlow its flows with their allocation (queue, rate, meter) and an estimated finish, and a
  **tardiness estimate**: Eq. 2's max over the flows of (finish - ideal finish), where a flow still
  sending counts as finishing at ``now + remaining * 8 / rate`` and a flow with no rate (paused, i.e.
  below the service's meter floor, or not started) as finishing no earlier than now, so the estimate is
  a lower bound while flows wait;
* the recent scheduling passes, newest first.

Kept Python 3.9 compatible; no os_ken import.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Callable

from controller import encoded, listing
from controller.paging import DEFAULT_LIMIT
from controller.registry import DONE_STATES, EchelonRecord, FlowRecord
from controller.service import SchedulingService
from controller.switch_stats import SwitchStats
from controller.views import echelon_view, flow_view
from echelonflow.topology import DirectedLink, Topology

#: Allocation fields copied into each flow of the EchelonFlow view.
ALLOCATION_FIELDS = ("queue", "rank", "rate_bps", "meter_rate_bps", "enforced", "dscp")


@dataclass(frozen=True)
class FlowEstimate:
    """A live flow's remaining bytes, decided rate and estimated finish (None: no rate, or not live)."""

    remaining_bytes: float
    rate_bps: float | None
    estimated_finish_s: float | None


class LiveView:
    """Builds the read-only views of ``/v1/topology``, ``/v1/links``, ``/v1/echelons`` and ``/v1/rounds``."""

    def __init__(self, service: SchedulingService, switch_stats: SwitchStats | None = None) -> None:
        self.service = service
        self.registry = service.registry
        self.switch_stats = switch_stats
        #: Encoded views of EchelonFlows whose flows are all done (they no longer change with the clock).
        self.done_views = DoneEchelonViews()

    @property
    def topology_graph(self) -> Topology:
        return self.registry.topology

    # ------------------------------------------------------------------ topology and links
    def topology(self) -> dict[str, Any]:
        topo = self.topology_graph
        nodes = []
        for name in topo.hosts + topo.switches:
            data = topo.graph.nodes[name]
            node = {"name": name, "kind": data["kind"]}
            if data["kind"] == "host":
                node.update(ip=data["ip"], switch=topo.host_switch(name))
            else:
                node.update(layer=data["layer"], dpid=data["dpid"], pod=data.get("pod"))
            nodes.append(node)
        links = [{"a": a, "b": b, "rate_bps": data["rate_bps"], "ports": dict(data["ports"])}
                 for a, b, data in topo.graph.edges(data=True)]
        return {"name": topo.name, "kind": topo.kind, "params": dict(topo.params), "rate_bps": topo.rate_bps,
                "nodes": nodes, "links": links}

    def links(self) -> dict[str, Any]:
        measured = self.switch_stats.link_rates_bps() if self.switch_stats is not None else {}
        scheduled = self.scheduled_bps()
        return {"now_s": self.service.now(), "measured": self.switch_stats is not None, "links": [
            {"src": a, "dst": b, "capacity_bps": capacity, "measured_bps": measured.get((a, b)),
             "scheduled_bps": scheduled.get((a, b), 0.0)}
            for (a, b), capacity in sorted(self.topology_graph.capacity_bps().items())]}

    def scheduled_bps(self) -> dict[DirectedLink, float]:
        """Sum of the current decision's rates over the active flows on each directed link."""
        out: dict[DirectedLink, float] = {}
        flows = self.registry.flows
        for key, rate in self.service.state.decision.rate_bps.items():
            flow = flows.get(key)
            if flow is None or flow.state != "active":
                continue
            for link in Topology.links_of(self.registry.path_of(key)):
                out[link] = out.get(link, 0.0) + rate
        return out

    # ------------------------------------------------------------------ flows and EchelonFlows
    def estimate(self, flow: FlowRecord, now_s: float) -> FlowEstimate:
        remaining = self.registry.remaining_bytes(flow)  # a declared flow's whole size, before its start
        if flow.state != "active":
            return FlowEstimate(0.0 if flow.state in DONE_STATES else remaining, None, None)
        rate = self.service.state.decision.rate_bps.get(flow.key)
        waiting = rate is None or self.service.paused(rate)  # a paused flow has no finish to estimate
        finish = None if waiting else now_s + remaining * 8.0 / rate
        return FlowEstimate(remaining, rate, finish)

    def tardiness_estimate(self, flows: Iterable[FlowRecord], now_s: float) -> float | None:
        """Eq. 2 with estimated finishes (see the module docstring); None before the reference time."""
        values = []
        for flow in flows:
            reference = self.registry.reference_s(flow.echelon_key)
            if reference is None:
                return None
            if flow.state in DONE_STATES:
                finish = float(flow.finish_s)  # type: ignore[arg-type]
            else:
                estimated = self.estimate(flow, now_s).estimated_finish_s
                finish = max(now_s, estimated) if estimated is not None else now_s
            values.append(finish - (reference + flow.offset_s))
        return max(values) if values else None

    def echelons(self, recent_s: float | None = None, limit: int = DEFAULT_LIMIT,
                 cursor: str | None = None) -> dict[str, Any]:
        """A page of the EchelonFlows with their flows; with ``recent_s`` only the started ones that still
        have a flow not done or one done in the last ``recent_s`` seconds (read from the registry's
        index of them, ``controller.recent``, not by walking every EchelonFlow)."""
        now_s, echelons, next_cursor = self._echelon_page(recent_s, limit, cursor)
        return {"now_s": now_s, "scheduler": self.service.scheduler_name,
                "echelons": [self._echelon_view(ech, now_s) for ech in echelons], "next_cursor": next_cursor}

    def echelons_page(self, recent_s: float | None = None, limit: int = DEFAULT_LIMIT,
                      cursor: str | None = None,
                      cooperate: Callable[[], None] | None = None) -> encoded.Encoded:
        """:meth:`echelons` as the API sends it, encoded an EchelonFlow at a time with turns of the hub
        (``controller.encoded``); an EchelonFlow whose flows are all done is encoded once and its bytes
        kept until one of its records changes (:class:`DoneEchelonViews`)."""
        now_s, echelons, next_cursor = self._echelon_page(recent_s, limit, cursor)
        items = encoded.render(echelons, lambda ech: self.registry.echelons.get(ech.key),
                               lambda ech: self._echelon_bytes(ech, now_s), cooperate)
        return encoded.page_body({"now_s": now_s, "scheduler": self.service.scheduler_name,
                                  "next_cursor": next_cursor}, "echelons", items)

    def _echelon_page(self, recent_s: float | None, limit: int,
                      cursor: str | None) -> tuple[float, list[EchelonRecord], str | None]:
        now_s = self.service.now()
        if recent_s is None:
            echelons, next_cursor = listing.echelons(self.registry, limit, cursor)
        else:
            echelons, next_cursor = listing.recent_echelons(self.registry, now_s - recent_s, limit, cursor)
        return now_s, echelons, next_cursor

    def _echelon_bytes(self, ech: EchelonRecord, now_s: float) -> bytes:
        flows = self.registry.flows_of(ech.key)
        known = self.done_views.get(ech, flows)
        if known is not None:
            return known
        raw = encoded.encode(self._echelon_view(ech, now_s, flows))
        self.done_views.put(ech, flows, raw)
        return raw

    def _echelon_view(self, ech: EchelonRecord, now_s: float,
                      flows: list[FlowRecord] | None = None) -> dict[str, Any]:
        flows = self.registry.flows_of(ech.key) if flows is None else flows
        view = echelon_view(self.registry, ech, with_flows=False)
        view["state"] = _echelon_state(flows)
        view["tardiness_estimate_s"] = self.tardiness_estimate(flows, now_s)
        view["flows"] = [self._flow_view(flow, now_s) for flow in flows]
        return view

    def _flow_view(self, flow: FlowRecord, now_s: float) -> dict[str, Any]:
        view = flow_view(self.registry, flow)
        allocation = self.service.allocation(flow.key)
        view.update({name: allocation[name] for name in ALLOCATION_FIELDS})
        estimate = self.estimate(flow, now_s)
        view["remaining_bytes"] = estimate.remaining_bytes
        view["estimated_finish_s"] = estimate.estimated_finish_s
        return view

    # ------------------------------------------------------------------ passes (served as /v1/rounds)
    def rounds(self, limit: int = 20) -> dict[str, Any]:
        recent = list(self.service.recent_passes)[-limit:]
        return {"rounds": [dataclasses.asdict(r) for r in reversed(recent)]}


class DoneEchelonViews:
    """The encoded views of EchelonFlows whose flows are all done, each valid while its records are the
    same objects (records are immutable: any change of an EchelonFlow or of one of its flows replaces
    the record), the least recently read dropped beyond :attr:`max_bytes` in all (about 1,500
    EchelonFlows of 4 flows at the default).

    Such a view depends on the records alone: a done flow has no allocation, no rate, nothing left, and
    keeps the path it ran on; its tardiness is its finish's.  A flow of undeclared size is left out: its
    expected size is the scheduler's estimate, which moves as the scheduler learns."""

    def __init__(self, max_bytes: int = 4 << 20) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._views: OrderedDict[str, tuple[EchelonRecord, tuple[FlowRecord, ...], bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._views)

    def get(self, ech: EchelonRecord, flows: list[FlowRecord]) -> bytes | None:
        known = self._views.get(ech.key)
        if known is None:
            return None
        record, records, raw = known
        if record is not ech or len(records) != len(flows) or any(a is not b for a, b in zip(records, flows)):
            self._drop(ech.key)
            return None
        self._views.move_to_end(ech.key)
        return raw

    def put(self, ech: EchelonRecord, flows: list[FlowRecord], raw: bytes) -> None:
        if not flows or any(f.state not in DONE_STATES or f.size_bytes is None for f in flows):
            return
        self._drop(ech.key)
        self._views[ech.key] = (ech, tuple(flows), raw)
        self.bytes += len(raw)
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._views)))

    def _drop(self, key: str) -> None:
        known = self._views.pop(key, None)
        if known is not None:
            self.bytes -= len(known[2])


def _echelon_state(flows: list[FlowRecord]) -> str:
    states = {f.state for f in flows}
    if "active" in states:
        return "active"
    if states <= set(DONE_STATES):
        return "aborted" if "aborted" in states else "finished"
    return "declared"
