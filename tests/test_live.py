"""The live view without a fabric: switch counters to link rates, the dashboard's JSON endpoints and files,
the Prometheus exposition read back with prometheus-client's own parser, the Grafana dashboard.

The API and the metrics are served by the real ``ApiServer`` (eventlet.wsgi on loopback) over a real
registry and scheduling service whose clock the tests move; the switch counters are fed to the real
``SwitchStats`` the way the app feeds decoded replies.  The fabric, the browser and os-ken are in
tests/test_dashboard.py.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller import flowmods as fm
from controller.api import Api
from controller.api_server import ApiServer, run_in_thread
from controller.launcher import ControllerError, ControllerProcess, local_config
from controller.live_view import LiveView
from controller.metrics import ControllerMetrics
from controller.registry import Registry
from controller.service import SchedulingService
from controller.switch_stats import MeterCounters, SwitchPortCounters, SwitchStats
from echelonflow.topology import fattree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "live-test-token"
RATE_BPS = 10e6
# A staggered EchelonFlow of three flows on disjoint paths (h1->h16, h2->h15, h3->h14).
STAGE = [{"flow_id": f"s{i}", "src": f"h{i + 1}", "dst": f"h{16 - i}", "size_bytes": 5_000_000,
          "offset_s": 2.0 * i} for i in range(3)]


def dpid(topo, switch: str) -> int:
    return topo.graph.nodes[switch]["dpid"]


# --------------------------------------------------------------------------- switch counters
def test_link_rates_come_from_two_port_samples_at_the_switch_end_of_each_link() -> None:
    topo = fattree(RATE_BPS, 4)
    stats = SwitchStats(topo)
    e1 = dpid(topo, "e1")
    to_a1, from_h1 = topo.port("e1", "a1"), topo.port("e1", "h1")
    stats.record_ports(e1, 10.0, {to_a1: SwitchPortCounters(tx_bytes=1_000),
                                  from_h1: SwitchPortCounters(rx_bytes=500)})
    assert stats.link_rates_bps() == {}  # one sample is no rate
    stats.record_ports(e1, 12.0, {to_a1: SwitchPortCounters(tx_bytes=3_500),
                                  from_h1: SwitchPortCounters(rx_bytes=10_500)})
    rates = stats.link_rates_bps()
    assert rates[("e1", "a1")] == pytest.approx(2_500 * 8 / 2.0)  # switch -> switch: tx of the sender
    assert rates[("h1", "e1")] == pytest.approx(10_000 * 8 / 2.0)  # host -> switch: rx at the switch
    assert ("a1", "e1") not in rates  # a1 never reported
    stats.record_ports(e1, 13.0, {to_a1: SwitchPortCounters(tx_bytes=100)})  # counters reset (switch restart)
    assert stats.link_rates_bps()[("e1", "a1")] == 0.0


def test_unknown_ports_and_switches_are_ignored_and_multipart_replies_wait_for_their_last_part() -> None:
    topo = fattree(RATE_BPS, 4)
    stats = SwitchStats(topo)
    e1 = dpid(topo, "e1")
    local_port = 0xFFFFFFFE  # OVS's bridge-internal port, in every port-stats reply
    stats.record_ports(e1, 1.0, {1: SwitchPortCounters(tx_bytes=1),
                                 local_port: SwitchPortCounters(tx_bytes=9)},
                       more=True)
    assert list(stats.ports()) == []  # half a table is never shown
    stats.record_ports(e1, 1.0, {2: SwitchPortCounters(tx_bytes=2)})
    listed = [(name, port, neighbour) for _dpid, name, port, neighbour, _counters in stats.ports()]
    assert listed == [("e1", 1, "a1"), ("e1", 2, "a2")]
    stats.record_ports(0xDEAD, 1.0, {1: SwitchPortCounters(tx_bytes=1)})
    stats.record_meters(e1, {1: MeterCounters(byte_in_count=10), 2: MeterCounters(byte_in_count=20)})
    stats.record_meters(e1, {2: MeterCounters(byte_in_count=30)})  # meter 1 was deleted
    assert [(m, c.byte_in_count) for _d, _n, m, c in stats.meters()] == [(2, 30)]


# --------------------------------------------------------------------------- a served controller
class Live:
    """Registry + service (moved clock) + API and metrics servers in their own thread and hub."""

    def __init__(self) -> None:
        self.clock_s = 1_000.0
        self.topo = fattree(RATE_BPS, 4)
        self.registry = Registry(self.topo)
        self.service = SchedulingService(self.registry, None, now=lambda: self.clock_s)
        self.stats = SwitchStats(self.topo)
        self.view = LiveView(self.service, self.stats)
        self.connected: list[int] = []
        self.metrics = ControllerMetrics(self.view, connected=lambda: self.connected)
        self.service.pass_listeners.append(self.metrics.observe_pass)
        self.api = ApiServer(Api(self.service, TOKEN, live=self.view), port=0, unix=False)
        self.metrics_server = ApiServer(self.metrics.wsgi_app(), port=0, unix=False, name="metrics")
        self.threads = [run_in_thread(self.api), run_in_thread(self.metrics_server)]

    def get(self, path: str) -> tuple[int, dict[str, str], bytes]:
        return request(self.api.port, "GET", path)

    def json(self, path: str) -> dict:
        status, _headers, body = self.get(path)
        assert status == 200, body
        return json.loads(body)

    def scrape(self) -> dict:
        url = f"http://127.0.0.1:{self.metrics_server.port}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read()
        return {family.name: family for family in text_string_to_metric_families(text.decode())}

    def start_stage(self) -> None:
        self.registry.add_job("train")
        self.registry.add_echelon("train", "stage", None, STAGE)
        for i in range(3):
            self.registry.flow_started("train", f"s{i}", 40_000 + i, 5_300 + i, self.clock_s)
            self.service.on_arrival()

    def stop(self) -> None:
        for thread in self.threads:
            thread.stop()


def request(port: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def samples(family, **labels) -> list:
    return [s for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())]


@pytest.fixture()
def live():
    served = Live()
    yield served
    served.stop()


# --------------------------------------------------------------------------- JSON views
def test_topology_and_links_views(live) -> None:
    topo = live.json("/v1/topology")
    kinds = [n["kind"] for n in topo["nodes"]]
    assert (kinds.count("host"), kinds.count("switch"), len(topo["links"])) == (16, 20, 48)
    e1 = next(n for n in topo["nodes"] if n["name"] == "e1")
    assert (e1["layer"], e1["dpid"], e1["pod"]) == ("edge", dpid(live.topo, "e1"), 0)
    live.start_stage()
    links = {(x["src"], x["dst"]): x for x in live.json("/v1/links")["links"]}
    assert len(links) == 96 and all(x["measured_bps"] is None for x in links.values())  # no counters yet
    path = live.registry.path_of("train/s0")
    rate = live.service.allocation("train/s0")["rate_bps"]
    assert rate > 0 and links[(path[0], path[1])]["scheduled_bps"] == pytest.approx(rate)
    hops = {f"train/s{i}": len(live.registry.path_of(f"train/s{i}")) - 1 for i in range(3)}
    assert sum(x["scheduled_bps"] for x in links.values()) == pytest.approx(
        sum(live.service.allocation(key)["rate_bps"] * count for key, count in hops.items()))
    e1 = dpid(live.topo, "e1")
    port = live.topo.port("e1", path[2])
    live.stats.record_ports(e1, 1.0, {port: SwitchPortCounters(tx_bytes=0)})
    live.stats.record_ports(e1, 2.0, {port: SwitchPortCounters(tx_bytes=1_000_000)})
    links = {(x["src"], x["dst"]): x for x in live.json("/v1/links")["links"]}
    assert links[("e1", path[2])]["measured_bps"] == pytest.approx(8e6)


def test_echelons_view_has_allocations_estimates_and_a_tardiness_estimate(live) -> None:
    assert live.json("/v1/echelons") == {"now_s": 1000.0, "scheduler": "echelon", "echelons": [],
                                         "next_cursor": None}
    live.start_stage()
    live.registry.flow_progress("train", "s0", 1_000_000)
    live.clock_s += 2.0
    (ech,) = live.json("/v1/echelons?recent_s=60")["echelons"]
    identity = [ech[k] for k in ("job_id", "echelon_id", "kind", "state")]
    assert identity == ["train", "stage", "staggered", "active"]
    flows = {f["flow_id"]: f for f in ech["flows"]}
    worst = []
    for fid, flow in flows.items():
        allocation = live.service.allocation(f"train/{fid}")
        assert {k: flow[k] for k in ("queue", "rate_bps", "meter_rate_bps")} == {
            k: allocation[k] for k in ("queue", "rate_bps", "meter_rate_bps")}
        assert flow["ideal_finish_s"] == pytest.approx(1000.0 + flow["offset_s"])
        if flow["estimated_finish_s"] is None:  # waiting (no rate): counts as finishing now
            assert live.service.paused(flow["rate_bps"])
            worst.append(live.clock_s - flow["ideal_finish_s"])
        else:
            assert flow["estimated_finish_s"] == pytest.approx(
                live.clock_s + flow["remaining_bytes"] * 8 / flow["rate_bps"])
            worst.append(flow["estimated_finish_s"] - flow["ideal_finish_s"])
    assert flows["s0"]["remaining_bytes"] == 4_000_000
    assert ech["tardiness_estimate_s"] == pytest.approx(max(worst))
    for i in range(3):
        live.registry.flow_finished("train", f"s{i}", live.clock_s + i, 5_000_000)
    live.clock_s += 100.0
    assert live.json("/v1/echelons?recent_s=60")["echelons"] == []  # over for more than a minute
    (done,) = live.json("/v1/echelons")["echelons"]
    assert done["state"] == "finished" and done["tardiness_estimate_s"] == pytest.approx(
        max(1102.0 + i - (1000.0 + 2.0 * i) for i in range(3)) - 100.0)


def test_rounds_view_is_newest_first_and_limited(live) -> None:
    live.start_stage()
    live.service.reschedule("interval")
    rounds = live.json("/v1/rounds?limit=2")["rounds"]
    assert [r["reason"] for r in rounds] == ["interval", "arrival"]
    assert rounds[1]["installs"] == 1 and rounds[0]["scheduler"] == "echelon"
    assert len(live.json("/v1/rounds")["rounds"]) == 4


@pytest.mark.parametrize("path, field", [
    ("/v1/rounds?limit=0", "limit"), ("/v1/rounds?limit=101", "limit"), ("/v1/rounds?limit=x", "limit"),
    ("/v1/echelons?recent_s=-1", "recent_s"), ("/v1/echelons?recent_s=nan", "recent_s"),
    ("/v1/echelons?since=3", "since"), ("/v1/topology?x=1", "x"), ("/v1/links?x=1", "x"),
])
def test_bad_query_parameters_are_refused_with_the_field(live, path, field) -> None:
    status, _headers, body = live.get(path)
    assert status == 400 and json.loads(body)["error"]["field"] == field


def test_live_views_are_read_only(live) -> None:
    status, headers, _body = request(live.api.port, "POST", "/v1/topology")
    assert status == 405 and headers["Allow"] == "GET, HEAD"


# --------------------------------------------------------------------------- dashboard files
def test_dashboard_files_are_served_offline_with_their_types(live) -> None:
    status, headers, body = live.get("/ui/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    page = body.decode()
    referenced = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert referenced and not [r for r in referenced if "//" in r]  # nothing from another origin
    for name in referenced:
        status, headers, body = live.get("/ui/" + name)
        assert status == 200 and body, name
    scripts = ["app.js", "dom.js", "timeline.js", "topology.js"]
    for name in scripts:
        status, headers, body = live.get("/ui/" + name)
        assert headers["Content-Type"].startswith("text/javascript")
        urls = set(re.findall(r"https?://[^\s\"'`]+", body.decode())) - {"http://www.w3.org/2000/svg"}
        assert not urls, f"{name} refers to another origin: {urls}"
        for imported in re.findall(r'from "\./([^"]+)"', body.decode()):
            assert imported in scripts, f"{name} imports {imported}, which is not served"
    assert live.get("/ui")[0] == 301 and live.get("/ui")[1]["Location"] == "/ui/"


@pytest.mark.parametrize("path", ["/ui/nope.js", "/ui/../api.py", "/ui/%2e%2e/api.py", "/ui/sub/app.js",
                                  "/ui/__init__.py"])
def test_only_the_dashboard_files_are_served(live, path) -> None:
    assert live.get(path)[0] == 404


def test_dashboard_is_read_only_and_answers_head(live) -> None:
    assert request(live.api.port, "POST", "/ui/app.js")[0] == 405
    status, headers, body = request(live.api.port, "HEAD", "/ui/app.js")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0


# --------------------------------------------------------------------------- metrics
def test_metrics_names_labels_and_counters_move(live) -> None:
    topo = live.topo
    e1 = dpid(topo, "e1")
    before = live.scrape()
    packet_ins = before["of_packet_ins"]
    assert packet_ins.type == "counter"
    assert [(s.name, s.value) for s in samples(packet_ins, dp_id=hex(e1), dp_name="e1")
            if not s.name.endswith("_created")] == [("of_packet_ins_total", 0)]
    assert {s.labels["dp_name"] for s in before["dp_status"].samples} == set(topo.switches)
    assert all(s.value == 0 for s in before["dp_status"].samples)
    live.connected.append(e1)
    live.metrics.connected(e1)
    live.metrics.packet_in(e1)
    live.metrics.packet_in(e1)
    live.metrics.sent(e1, [fm.table_miss(), fm.Barrier(), fm.MeterSet(1, 1000, 100), fm.FlowDelete()])
    live.start_stage()
    port = topo.port("e1", "a1")
    live.stats.record_ports(e1, 1.0, {port: SwitchPortCounters(tx_bytes=5_000, rx_packets=7)})
    live.stats.record_meters(e1, {3: MeterCounters(flow_count=1, byte_in_count=900, byte_band_count=100)})
    after = live.scrape()
    total = "of_packet_ins_total"
    assert samples(after["of_packet_ins"], dp_name="e1")[0].name == total
    assert samples(after["of_packet_ins"], dp_name="e1")[0].value == 2
    sent = {s.labels["type"]: s.value for s in samples(after["of_flowmsgs_sent"], dp_name="e1")
            if s.name.endswith("_total")}
    assert sent == {"flow_mod": 2, "meter_mod": 1, "packet_out": 0}
    assert samples(after["of_dp_connections"], dp_name="e1")[0].value == 1
    assert samples(after["dp_status"], dp_name="e1")[0].value == 1
    (tx,) = after["of_port_tx_bytes"].samples
    assert tx.labels == {"dp_id": hex(e1), "dp_name": "e1", "port": str(port), "port_description": "a1"}
    assert tx.value == 5_000 and after["of_port_tx_bytes"].type == "gauge"
    assert after["of_port_rx_packets"].samples[0].value == 7
    (band,) = after["of_meter_byte_band_count"].samples
    assert band.labels == {"dp_id": hex(e1), "dp_name": "e1", "meter_id": "3", "flow_id": ""}
    assert band.value == 100
    rounds = {s.labels["reason"]: s.value for s in after["echelon_scheduling_rounds"].samples
              if s.name.endswith("_total")}
    assert rounds == {"arrival": 3}
    decide = {s.name: s.value for s in after["echelon_scheduling_decide_seconds"].samples
              if s.labels["scheduler"] == "echelon"}
    assert decide["echelon_scheduling_decide_seconds_count"] == 3
    assert after["echelon_scheduler"].samples and {s.labels["scheduler"]: s.value for s in
                                                    after["echelon_scheduler"].samples}["echelon"] == 1
    queues = {s.labels["flow_id"]: s.value for s in after["echelon_flow_queue"].samples}
    assert queues == {f"s{i}": live.service.allocation(f"train/s{i}")["queue"] for i in range(3)}
    assert set(after["echelon_flow_queue"].samples[0].labels) == {"job_id", "echelon_id", "flow_id"}
    (tardy,) = after["echelon_echelonflow_tardiness_estimate_seconds"].samples
    assert tardy.value == pytest.approx(
        live.json("/v1/echelons")["echelons"][0]["tardiness_estimate_s"])
    assert samples(after["echelon_flows"], state="active")[0].value == 3
    installs = samples(after["echelon_enforcement_operations"], op="install")[0].value
    assert installs == sum(r.installs for r in live.service.recent_passes) > 0


def test_per_flow_series_disappear_when_the_echelonflow_is_over(live) -> None:
    live.start_stage()
    assert len(live.scrape()["echelon_flow_rate_bits_per_second"].samples) == 3
    for i in range(3):
        live.registry.flow_finished("train", f"s{i}", live.clock_s + 1, 5_000_000)
        live.service.on_departure()
    after = live.scrape()
    for name in ("echelon_flow_queue", "echelon_flow_rate_bits_per_second",
                 "echelon_echelonflow_active_flows", "echelon_echelonflow_tardiness_estimate_seconds"):
        assert after[name].samples == [], name
    assert samples(after["echelon_job_active_flows"], job_id="train")[0].value == 0
    rounds = {s.labels["reason"]: s.value for s in after["echelon_scheduling_rounds"].samples
              if s.name.endswith("_total")}
    assert rounds == {"arrival": 3, "departure": 3}


# --------------------------------------------------------------------------- Grafana
def test_grafana_dashboard_only_queries_exported_metrics(live) -> None:
    """Every metric a panel queries is one the controller exports (names as the parser reports them)."""
    with open(os.path.join(ROOT, "docs", "grafana-dashboard.json"), encoding="utf-8") as handle:
        dashboard = json.load(handle)
    live.start_stage()
    e1 = dpid(live.topo, "e1")
    live.stats.record_ports(e1, 1.0, {1: SwitchPortCounters()})
    live.stats.record_meters(e1, {1: MeterCounters()})
    exported = set()
    for family in live.scrape().values():
        exported |= {s.name for s in family.samples}
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(queries) >= 8
    words = {w for q in queries for w in re.findall(r"[a-z_][a-z0-9_]*", q)}
    used = {w for w in words if w.startswith(("of_", "echelon_", "dp_status"))}
    assert used and used <= exported, f"panels query metrics nobody exports: {used - exported}"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


# --------------------------------------------------------------------------- command line and launcher
@pytest.mark.parametrize("args, message", [
    (["--metrics-port", "0"], "--metrics-port: must be an integer between 1 and 65535, got 0"),
    (["--api-port", "80a"], "--api-port: must be an integer between 1 and 65535, got '80a'"),
    (["--metrics-port", "8181"], "--metrics-port and --api-port must differ"),
])
def test_controller_command_refuses_bad_metrics_ports(args, message) -> None:
    proc = subprocess.run([sys.executable, "-m", "cli", "controller", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_launcher_refuses_a_bad_metrics_port_and_says_where_metrics_are() -> None:
    with pytest.raises(ControllerError, match="metrics_port: must be an integer between 1 and 65535"):
        local_config(metrics_port=70000)
    ctl = ControllerProcess(fattree(RATE_BPS, 4), local_config(api_port=8181, metrics_port=9302))
    assert (ctl.dashboard_url, ctl.metrics_url) == ("http://127.0.0.1:8181/ui/", "http://127.0.0.1:9302/metrics")
    assert ControllerProcess(fattree(RATE_BPS, 4), local_config(metrics_port=None)).metrics_url is None
