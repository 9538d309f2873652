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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from controller import listing
from controller.paging import DEFAULT_LIMIT
from controller.registry import DONE_STATES, FlowRecord
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
        now_s = self.service.now()
        if recent_s is None:
            echelons, next_cursor = listing.echelons(self.registry, limit, cursor)
        else:
            echelons, next_cursor = listing.recent_echelons(self.registry, now_s - recent_s, limit, cursor)
        out = []
        for ech in echelons:
            flows = self.registry.flows_of(ech.key)
            view = echelon_view(self.registry, ech, with_flows=False)
            view["state"] = _echelon_state(flows)
            view["tardiness_estimate_s"] = self.tardiness_estimate(flows, now_s)
            view["flows"] = [self._flow_view(flow, now_s) for flow in flows]
            out.append(view)
        return {"now_s": now_s, "scheduler": self.service.scheduler_name, "echelons": out,
                "next_cursor": next_cursor}

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


def _echelon_state(flows: list[FlowRecord]) -> str:
    states = {f.state for f in flows}
    if "active" in states:
        return "active"
    if states <= set(DONE_STATES):
        return "aborted" if "aborted" in states else "finished"
    return "declared"
