"""Prometheus metrics of the controller (``/metrics`` on its own port, 9302 by default like Faucet's).

Why prometheus-client and not hand-written text: it owns the exposition format (escaping, histograms,
OpenMetrics negotiation, gzip), and its parser is what the tests read the page back with.

Names and labels follow Faucet where the two overlap, so dashboards and queries written for Faucet work:
switches are labelled ``dp_id`` (hex, ``0x10001``) and ``dp_name`` (``e1``); ports add ``port`` and
``port_description`` (the neighbour on that port); meters add ``meter_id``.  Like Faucet's Gauge, the
switches' own counters (``of_port_*``, ``of_meter_*``) are exported as gauges mirroring the last reply,
under Faucet's names; what the controller counts itself is a Prometheus counter (``of_packet_ins``,
``of_flowmsgs_sent``, ``of_errors``, ``of_dp_connections``, ``of_dp_disconnections``; ``_total`` in the
exposition).  EchelonFlow metrics start with ``echelon_`` and use the API's names as labels (``job_id``,
``echelon_id``, ``flow_id``; not ``job``, which Prometheus itself puts on every scraped series).  Per-flow
and per-EchelonFlow series exist only while they are live, so a long run does not pile up series.
The full list is in docs/metrics.md.

Counters are incremented by the app's handlers (:meth:`ControllerMetrics.packet_in` and friends, and the
scheduling service's pass listener); everything else is read at scrape time from the live state by
:class:`_LiveCollector`, through the same :class:`~controller.live_view.LiveView` the dashboard reads.

Kept Python 3.9 compatible; no os_ken import.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from controller import flowmods as fm
from controller.live_view import LiveView
from controller.registry import DONE_STATES
from controller.service import PassReport
from controller.switch_stats import METER_FIELDS, PORT_FIELDS
from controller.views import counts

DEFAULT_METRICS_PORT = 9302
DP_LABELS = ["dp_id", "dp_name"]
#: A pass's phases take from ~0.1 ms (a few flows) to ~1 s (a thousand installs on k=8, docs/results.md).
LATENCY_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
MESSAGE_TYPES = {fm.FlowRule: "flow_mod", fm.FlowDelete: "flow_mod", fm.MeterSet: "meter_mod",
                 fm.MeterDelete: "meter_mod", fm.PacketOut: "packet_out"}

#: (dpid, meter id) -> the flow id whose meter it is.
MeterOwners = Callable[[], "dict[tuple[int, int], str]"]


def dp_id_label(dpid: int) -> str:
    """Faucet's ``dp_id`` label: the dpid in hex."""
    return hex(dpid)


class ControllerMetrics:
    """The controller's metric registry: counters fed by the app, the rest collected at scrape time."""

    def __init__(self, live: LiveView, connected: Callable[[], Iterable[int]] = tuple,
                 meter_owners: MeterOwners | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        topology = live.topology_graph
        self._dp = {topology.graph.nodes[s]["dpid"]: (dp_id_label(topology.graph.nodes[s]["dpid"]), s)
                    for s in topology.switches}
        reg = self.registry
        self.packet_ins = Counter("of_packet_ins", "OpenFlow packet-ins received from a switch",
                                  DP_LABELS, registry=reg)
        self.flowmsgs_sent = Counter(
            "of_flowmsgs_sent", "OpenFlow messages sent to a switch that change its tables "
            "(type flow_mod, meter_mod) or send a packet (packet_out)", [*DP_LABELS, "type"], registry=reg)
        self.errors = Counter("of_errors", "OpenFlow error messages received from a switch", DP_LABELS,
                              registry=reg)
        self.dp_connections = Counter("of_dp_connections", "OpenFlow connections from a switch", DP_LABELS,
                                      registry=reg)
        self.dp_disconnections = Counter("of_dp_disconnections", "OpenFlow disconnections of a switch",
                                         DP_LABELS, registry=reg)
        self.rounds = Counter("echelon_scheduling_rounds", "Scheduling rounds run, by trigger and scheduler",
                              ["reason", "scheduler"], registry=reg)
        self.round_errors = Counter("echelon_scheduling_round_errors",
                                    "Scheduling rounds whose scheduler raised (enforcement left as it was)",
                                    ["scheduler"], registry=reg)
        self.decide_seconds = Histogram("echelon_scheduling_decide_seconds",
                                        "Time the scheduler took to decide one round", ["scheduler"],
                                        buckets=LATENCY_BUCKETS_S, registry=reg)
        self.push_seconds = Histogram(
            "echelon_scheduling_push_seconds", "Time one round took to turn its decision into switch "
            "messages and send them (the enforcement diff)", ["scheduler"], buckets=LATENCY_BUCKETS_S,
            registry=reg)
        self.operations = Counter("echelon_enforcement_operations",
                                  "Per-flow enforcement operations pushed by scheduling rounds", ["op"],
                                  registry=reg)
        self.rerouted_flows = Counter(
            "echelon_rerouted_flows", "Enforced flows moved to another path because a link or switch went "
            "down or came back", registry=reg)
        for labels in self._dp.values():  # every switch's series exists from the start, at 0
            for counter in (self.packet_ins, self.errors, self.dp_connections, self.dp_disconnections):
                counter.labels(*labels)
            for kind in sorted(set(MESSAGE_TYPES.values())):
                self.flowmsgs_sent.labels(*labels, kind)
        for op in ("install", "update", "remove"):
            self.operations.labels(op)
        reg.register(_LiveCollector(live, self._dp, connected, meter_owners))

    def wsgi_app(self) -> Callable[..., Any]:
        """The exposition as a WSGI app (served by an ``ApiServer`` on the metrics port)."""
        return make_wsgi_app(self.registry)

    # ------------------------------------------------------------------ fed by the app
    def _labels(self, dpid: int) -> tuple[str, str]:
        return self._dp.get(dpid, (dp_id_label(dpid), ""))

    def packet_in(self, dpid: int) -> None:
        self.packet_ins.labels(*self._labels(dpid)).inc()

    def sent(self, dpid: int, ops: Sequence[fm.Op]) -> None:
        labels = self._labels(dpid)
        for op in ops:
            kind = MESSAGE_TYPES.get(type(op))
            if kind is not None:
                self.flowmsgs_sent.labels(*labels, kind).inc()

    def error(self, dpid: int) -> None:
        self.errors.labels(*self._labels(dpid)).inc()

    def connected(self, dpid: int) -> None:
        self.dp_connections.labels(*self._labels(dpid)).inc()

    def disconnected(self, dpid: int) -> None:
        self.dp_disconnections.labels(*self._labels(dpid)).inc()

    def rerouted(self, flows: int) -> None:
        self.rerouted_flows.inc(flows)

    def observe_pass(self, report: PassReport) -> None:
        """The scheduling service's pass listener."""
        self.rounds.labels(report.reason, report.scheduler).inc()
        if report.error:
            self.round_errors.labels(report.scheduler).inc()
            return
        self.decide_seconds.labels(report.scheduler).observe(report.decide_s)
        self.push_seconds.labels(report.scheduler).observe(report.enforce_s)
        for op, count in (("install", report.installs), ("update", report.updates),
                          ("remove", report.removes)):
            if count:
                self.operations.labels(op).inc(count)


class _LiveCollector(Collector):
    """Gauges read at scrape time: switch status and counters, the registry, the current decision."""

    def __init__(self, live: LiveView, dp: dict[int, tuple[str, str]], connected: Callable[[], Iterable[int]],
                 meter_owners: MeterOwners | None) -> None:
        self.live = live
        self.dp = dp
        self.connected = connected
        self.meter_owners = meter_owners

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._switches()
        yield from self._registry()

    def _switches(self) -> Iterator[GaugeMetricFamily]:
        status = GaugeMetricFamily("dp_status", "1 while the switch is connected to the controller",
                                   labels=DP_LABELS)
        up = set(self.connected())
        for dpid, labels in sorted(self.dp.items()):
            status.add_metric(labels, 1.0 if dpid in up else 0.0)
        yield status
        stats = self.live.switch_stats
        if stats is None:
            return
        port_labels = [*DP_LABELS, "port", "port_description"]
        ports = {f: GaugeMetricFamily(f"of_port_{f}", f"Port counter {f} as the switch last reported it",
                                      labels=port_labels) for f in PORT_FIELDS}
        for dpid, name, port_no, neighbour, counters in stats.ports():
            labels = [self.dp[dpid][0], name, str(port_no), neighbour]
            for f, family in ports.items():
                family.add_metric(labels, float(getattr(counters, f)))
        yield from ports.values()
        owners = self.meter_owners() if self.meter_owners is not None else {}
        meters = {f: GaugeMetricFamily(f"of_meter_{f}", f"Meter counter {f} as the switch last reported it "
                                       "(band counts: bytes/packets the DROP band dropped)",
                                       labels=[*DP_LABELS, "meter_id", "flow_id"]) for f in METER_FIELDS}
        for dpid, name, meter_id, counters in stats.meters():
            labels = [self.dp[dpid][0], name, str(meter_id), owners.get((dpid, meter_id), "")]
            for f, family in meters.items():
                family.add_metric(labels, float(getattr(counters, f)))
        yield from meters.values()

    def _registry(self) -> Iterator[GaugeMetricFamily]:
        live = self.live
        registry, service = live.registry, live.service
        now_s = service.now()
        scheduler = GaugeMetricFamily("echelon_scheduler", "1 for the active scheduler", labels=["scheduler"])
        for name in service.available():
            scheduler.add_metric([name], 1.0 if name == service.scheduler_name else 0.0)
        yield scheduler
        states = GaugeMetricFamily("echelon_flows", "Flows in the registry by state", labels=["state"])
        for state, count in counts(registry).items():
            if state not in ("jobs", "echelons"):
                states.add_metric([state], float(count))
        yield states

        job_active = GaugeMetricFamily("echelon_job_active_flows", "Flows of a job sending now",
                                       labels=["job_id"])
        job_left = GaugeMetricFamily("echelon_job_remaining_bytes", "Bytes a job's started-or-declared "
                                     "flows still have to deliver", labels=["job_id"])
        per_job: dict[str, list[float]] = {job_id: [0.0, 0.0] for job_id in registry.jobs}
        ech_labels = ["job_id", "echelon_id"]
        ech_active = GaugeMetricFamily("echelon_echelonflow_active_flows",
                                       "Flows of a live EchelonFlow sending now", labels=ech_labels)
        ech_left = GaugeMetricFamily("echelon_echelonflow_remaining_bytes",
                                     "Bytes a live EchelonFlow still has to deliver", labels=ech_labels)
        ech_tardy = GaugeMetricFamily(
            "echelon_echelonflow_tardiness_estimate_seconds", "Eq. 2 tardiness with estimated finishes "
            "(now + remaining / rate); a waiting flow counts as finishing now", labels=ech_labels)
        flow_labels = ["job_id", "echelon_id", "flow_id"]
        flow_queue = GaugeMetricFamily("echelon_flow_queue", "Priority class of an active flow "
                                       "(0 default, 1 most urgent)", labels=flow_labels)
        flow_rate = GaugeMetricFamily("echelon_flow_rate_bits_per_second",
                                      "Rate the scheduler gives an active flow", labels=flow_labels)
        flow_meter = GaugeMetricFamily("echelon_flow_meter_rate_bits_per_second",
                                       "Meter rate installed for an active flow", labels=flow_labels)
        flow_left = GaugeMetricFamily("echelon_flow_remaining_bytes", "Bytes an active flow still has to "
                                      "deliver", labels=flow_labels)
        for key, ech in registry.echelons.items():
            flows = registry.flows_of(key)
            unfinished = [f for f in flows if f.state not in DONE_STATES]
            left = sum(live.estimate(f, now_s).remaining_bytes for f in unfinished)
            active = [f for f in flows if f.state == "active"]
            totals = per_job[ech.job_id]
            totals[0] += len(active)
            totals[1] += left
            tardiness = live.tardiness_estimate(flows, now_s)
            if not unfinished or tardiness is None:
                continue  # not started yet, or over: no per-EchelonFlow series
            labels = [ech.job_id, ech.echelon_id]
            ech_active.add_metric(labels, float(len(active)))
            ech_left.add_metric(labels, left)
            ech_tardy.add_metric(labels, tardiness)
            for flow in active:
                allocation = service.allocation(flow.key)
                labels = [flow.job_id, flow.echelon_id, flow.flow_id]
                flow_left.add_metric(labels, live.estimate(flow, now_s).remaining_bytes)
                if allocation["queue"] is not None:
                    flow_queue.add_metric(labels, float(allocation["queue"]))
                if allocation["rate_bps"] is not None:
                    flow_rate.add_metric(labels, float(allocation["rate_bps"]))
                if allocation["meter_rate_bps"] is not None:
                    flow_meter.add_metric(labels, float(allocation["meter_rate_bps"]))
        for job_id, (active_count, left) in per_job.items():
            job_active.add_metric([job_id], active_count)
            job_left.add_metric([job_id], left)
        yield from (job_active, job_left, ech_active, ech_left, ech_tardy, flow_queue, flow_rate, flow_meter,
                    flow_left)
