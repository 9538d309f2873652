"""The dashboard in a real browser and ``/metrics`` during a real run: controller, k=4 fat-tree, TCP.

One controller (os-ken, metrics on a free port) and one Mininet/OVS fabric serve the module.  A job with a
staggered EchelonFlow of three flows is registered and started through the API, and three iperf3 TCP
flows with exactly those 5-tuples run for the whole module.  Debian's chromium, driven by its own
chromedriver through selenium, loads ``/ui/`` from the controller and must show the topology, the flows'
progress moving and the links carrying them, and must switch the scheduler so that the switches' rules
change (read with ovs-ofctl).  ``/metrics`` is read back with prometheus-client's parser twice during the
run: counters move, labels name the right switches, ports and flows.  Screenshots and the metrics text go
into a run folder under ``runs/`` (printed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.launcher import ControllerProcess, free_tcp_port, local_config
from echelonflow import topology as graphs
from reports.runfolder import default_run_dir
from tests.conftest import CHROMEDRIVER, CHROMIUM
from tests.fabric_helpers import controller_and_fabric, rules_of, wait_until

pytestmark = [pytest.mark.fabric, pytest.mark.slow, pytest.mark.browser]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK_BPS = 20e6
JOB, ECHELON = "train", "stage"
#: three pod pairs whose paths share no link in either direction: echelon serves an EchelonFlow's flows
#: earliest due first at full rate, so flows that met on a link would pause the later ones, and every
#: flow must carry traffic for the counters and the page to show it
ENDS = (("h1", "h16"), ("h5", "h12"), ("h9", "h8"))
STAGE = [{"flow_id": f"s{i}", "src": src, "dst": dst, "size_bytes": 400_000_000, "offset_s": 4.0 * i}
         for i, (src, dst) in enumerate(ENDS)]
PORTS = {f"s{i}": (41_100 + i, 5_401 + i) for i in range(3)}
TRAFFIC_S = 90  # longer than the module needs; stopped (by pid) at teardown
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1500,1000")


@pytest.fixture(scope="module")
def env(require_fabric, require_browser):
    topo = graphs.fattree(LINK_BPS, k=4)
    state = SimpleNamespace(topo=topo, port=free_tcp_port())
    state.ctl = ControllerProcess(topo, local_config(interval_s=0.5), ofp_port=state.port)
    state.run_dir = default_run_dir("dashboard", base=os.path.join(ROOT, "runs"))
    os.makedirs(state.run_dir)
    print(f"\ndashboard test run folder: {state.run_dir}")
    with controller_and_fabric(state), _traffic(state), _chromium(state.run_dir) as driver:
        state.driver = driver
        state.client = state.ctl.client()
        yield state
        state.client.close()


@contextlib.contextmanager
def _traffic(state):
    """Register and start the EchelonFlow through the API, then run its flows as iperf3 TCP."""
    fabric, procs = state.fabric, []
    with state.ctl.client() as client:
        client.register_job(JOB)
        client.register_echelon(JOB, ECHELON, STAGE)
        try:
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
            for flow in STAGE:
                sport = PORTS[flow["flow_id"]][1]
                server = ["iperf3", "-s", "-1", "-p", str(sport)]
                procs.append(fabric.host(flow["dst"]).popen(server, **quiet))
            wait_until(lambda: all(f":{PORTS[f['flow_id']][1]} " in fabric.host(f["dst"]).cmd("ss -ltn")
                                   for f in STAGE), 5, "iperf3 servers listening")
            for flow in STAGE:
                cport, sport = PORTS[flow["flow_id"]]
                client.flow_started(JOB, flow["flow_id"], cport, sport, wait_s=5)
                procs.append(fabric.host(flow["src"]).popen(
                    ["iperf3", "-c", fabric.host(flow["dst"]).IP(), "-p", str(sport), "--cport", str(cport),
                     "-t", str(TRAFFIC_S)], **quiet))
            yield
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()


@contextlib.contextmanager
def _chromium(run_dir: str):
    """Debian's chromium under its own chromedriver; a fresh profile, removed afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="echelon-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(CHROMEDRIVER, log_output=os.path.join(run_dir, "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


# --------------------------------------------------------------------------- helpers
def _scrape(env) -> tuple[str, dict]:
    text = urllib.request.urlopen(env.ctl.metrics_url, timeout=5).read().decode()
    return text, {family.name: family for family in text_string_to_metric_families(text)}


def _with_counters(scraped: tuple[str, dict]) -> tuple[str, dict] | None:
    """The scrape if it has port and meter counters (the stats polls answered), else None."""
    families = scraped[1]
    ok = all(name in families and families[name].samples
             for name in ("of_port_tx_bytes", "of_meter_byte_in_count"))
    return scraped if ok else None


def _value(families: dict, name: str, sample: str | None = None, **labels) -> float:
    """The one sample of metric family ``name`` (sample name ``sample``, default the family's) with labels."""
    found = [s for s in families[name].samples if s.name == (sample or name)
             and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{sample or name}{labels}: {len(found)} samples"
    return found[0].value


def _meter_count(env, dp_name: str, fid: str) -> tuple[str, float] | None:
    """(meter id, bytes in) of the meter the switch last reported for flow ``fid``, or None."""
    families = _scrape(env)[1]
    family = families.get("of_meter_byte_in_count")
    found = [s for s in (family.samples if family else [])
             if s.labels.get("dp_name") == dp_name and s.labels.get("flow_id") == f"{JOB}/{fid}"]
    return (found[0].labels["meter_id"], found[0].value) if len(found) == 1 else None


def _assert_meter_counts(env, dp_name: str, fid: str) -> None:
    """The flow's meter counts its bytes.  A meter shows under its flow once the switch's next stats
    reply (every second) names it, and one the controller installs afresh has a new id and counts from 0:
    so the counts compared are one meter id's, each read when the switch has reported it."""
    seen = wait_until(lambda: _meter_count(env, dp_name, fid), 10, f"{fid}'s meter on {dp_name}", 0.25)

    def moved() -> tuple[str, float] | None:
        nonlocal seen
        now = _meter_count(env, dp_name, fid)
        if now is not None and now[0] != seen[0]:
            seen = now  # installed afresh: count from its first reading
            return None
        return now if now is not None and now[1] > seen[1] else None

    wait_until(moved, 10, f"{fid}'s meter on {dp_name} counting (first read {seen})", 0.25)


def _flow(env, fid: str) -> dict:
    return env.client.flow(JOB, fid)


def _attr(env, selector: str, name: str | None) -> str | None:
    """The attribute ``name`` (``None``: the text) of the first element ``selector`` finds now.  The
    page's script re-renders the timeline between our find and our read (a stale element): then the
    element is found again, rather than the read failing the test."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(10):
        elements = env.driver.find_elements(By.CSS_SELECTOR, selector)
        try:
            if not elements:
                return None
            return elements[0].text if name is None else elements[0].get_attribute(name)
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{selector} was re-rendered 10 times while it was read")


def _polls(env) -> int:
    return int(_attr(env, "#status", "data-polls") or 0)


# --------------------------------------------------------------------------- metrics
def test_metrics_counters_move_and_labels_name_the_right_things(env) -> None:
    # the port and meter counters come with the controller's stats polls: wait for them, do not guess
    first_text, first = wait_until(lambda: _with_counters(_scrape(env)), 20, "port and meter counters")
    first_at = time.monotonic()
    time.sleep(3.0)  # the interval the counters must move over
    text, second = _scrape(env)
    interval_s = time.monotonic() - first_at
    with open(os.path.join(env.run_dir, "metrics.txt"), "w", encoding="utf-8") as handle:
        handle.write(text)
    topo = env.topo
    for switch in topo.switches:
        labels = {"dp_id": hex(topo.graph.nodes[switch]["dpid"]), "dp_name": switch}
        assert _value(second, "dp_status", **labels) == 1
        assert _value(second, "of_dp_connections", "of_dp_connections_total", **labels) == 1
    assert sum(s.value for s in second["of_packet_ins"].samples if s.name.endswith("_total")) > 0
    for fid in PORTS:
        flow = _flow(env, fid)
        src_switch, next_hop = flow["path"][1], flow["path"][2]
        port = {"dp_name": src_switch, "port": str(topo.port(src_switch, next_hop)),
                "port_description": next_hop}
        moved = _value(second, "of_port_tx_bytes", **port) - _value(first, "of_port_tx_bytes", **port)
        assert moved > 0.25 * LINK_BPS / 8 * 3.0, f"{fid}: {moved} bytes from {src_switch} to {next_hop}"
        allocation = env.client.allocation(JOB, fid)
        labels = {"job_id": JOB, "echelon_id": ECHELON, "flow_id": fid}
        assert _value(second, "echelon_flow_queue", **labels) == allocation["queue"]
        assert _value(second, "echelon_flow_remaining_bytes", **labels) < \
            _value(first, "echelon_flow_remaining_bytes", **labels)
        if allocation["meter_rate_bps"] is not None:
            _assert_meter_counts(env, src_switch, fid)
    rounds = "echelon_scheduling_rounds_total"
    interval = {"reason": "interval", "scheduler": "echelon"}
    # a round every 0.5 s: at least all but two of those due in the time between the scrapes
    assert _value(second, "echelon_scheduling_rounds", rounds, **interval) >= \
        _value(first, "echelon_scheduling_rounds", rounds, **interval) + int(interval_s / 0.5) - 2
    decided = _value(second, "echelon_scheduling_decide_seconds", "echelon_scheduling_decide_seconds_count",
                     scheduler="echelon")
    assert decided == sum(s.value for s in second["echelon_scheduling_rounds"].samples
                          if s.name == rounds and s.labels["scheduler"] == "echelon")
    assert _value(second, "echelon_echelonflow_active_flows", job_id=JOB, echelon_id=ECHELON) == 3
    assert "of_port_tx_bytes" in first_text and "# TYPE of_port_tx_bytes gauge" in text


# --------------------------------------------------------------------------- the page
def test_dashboard_shows_the_topology_and_the_echelonflow_moving(env) -> None:
    from selenium.webdriver.common.by import By

    driver = env.driver
    driver.get(env.ctl.dashboard_url)
    wait_until(lambda: _polls(env) >= 1, 15, "the page polled the controller")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#topology g.node.switch")) == 20
    assert len(driver.find_elements(By.CSS_SELECTOR, "#topology g.node.host")) == 16
    assert len(driver.find_elements(By.CSS_SELECTOR, "#topology line.link")) == 48
    assert "20/20 switches" in driver.find_element(By.ID, "status").text
    for fid in PORTS:
        flow = f'#timeline g.flow[data-flow="{JOB}/{fid}"]'
        wait_until(lambda f=flow: _attr(env, f, "data-state") == "active", 10, f"{fid} on the timeline")
    done = float(_attr(env, f'#timeline g.flow[data-flow="{JOB}/s0"]', "data-done"))
    wait_until(lambda: float(_attr(env, f'#timeline g.flow[data-flow="{JOB}/s0"]', "data-done")) > done + 1e6,
               10, "s0's progress on the page moved")
    assert (_attr(env, f'#timeline text[data-echelon="{JOB}/{ECHELON}"]', None) or "") \
        .startswith(f"{JOB}/{ECHELON} (staggered) tardiness")
    for fid in PORTS:
        flow = _flow(env, fid)
        a, b = flow["path"][1], flow["path"][2]
        link = ", ".join(f'#topology line.link[data-a="{x}"][data-b="{y}"]' for x, y in ((a, b), (b, a)))
        wait_until(lambda s=link: float(_attr(env, s, "data-bps") or 0) > 0.25 * LINK_BPS, 10,
                   f"link {a}-{b} carrying {fid} shows traffic")
        queue = env.client.allocation(JOB, fid)["queue"]
        row = f'#flows tr[data-flow="{JOB}/{fid}"]'
        wait_until(lambda r=row, q=queue: _attr(env, r, "data-queue") == str(q), 5,
                   f"{fid}'s queue {queue} in the flows table")
    assert driver.find_elements(By.CSS_SELECTOR, "#rounds tbody tr")
    problems = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert problems == [], f"the page logged errors: {problems[:3]}"
    path = os.path.join(env.run_dir, "dashboard.png")
    assert driver.save_screenshot(path) and os.path.getsize(path) > 20_000
    print(f"screenshot: {path}")


def test_switching_the_scheduler_from_the_page_changes_the_switches(env) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = env.driver
    flows = [_flow(env, fid) for fid in PORTS]
    assert all(rules_of(f) for f in flows), "echelon enforces every flow before the switch"

    def switch_to(name: str, token: str) -> str:
        message = driver.find_element(By.ID, "scheduler-message")
        driver.execute_script("arguments[0].textContent = ''", message)
        Select(driver.find_element(By.ID, "scheduler-select")).select_by_value(name)
        field = driver.find_element(By.ID, "token")
        field.clear()
        field.send_keys(token)
        driver.find_element(By.ID, "apply-scheduler").click()
        return wait_until(lambda: message.text, 10, "the page answered the switch")

    refused = switch_to("fair", "not-the-token")
    assert refused.startswith("refused: Authorization"), refused
    assert env.client.scheduler()["scheduler"] == "echelon" and all(rules_of(f) for f in flows)

    with open(env.ctl.token_file, encoding="utf-8") as handle:
        token = handle.read().strip()
    answer = switch_to("fair", token)
    assert answer.startswith("now fair:") and "in force" in answer, answer
    assert all(rules_of(f) == {} for f in flows), "fair enforces nothing: the rules must be gone"
    wait_until(lambda: driver.find_element(By.ID, "scheduler-current").text == "fair", 5, "page shows fair")
    _text, families = _scrape(env)
    assert _value(families, "echelon_scheduler", scheduler="fair") == 1

    answer = switch_to("echelon", token)
    assert answer.startswith("now echelon:") and "in force" in answer, answer
    for flow in flows:
        rules = rules_of(flow)
        assert set(rules) == set(flow["path"][1:-1]), f"{flow['flow_id']} not enforced again: {rules}"
        queue = env.client.allocation(JOB, flow["flow_id"])["queue"]
        assert {rule["queue"] for rule in rules.values()} == {str(queue)}
    path = os.path.join(env.run_dir, "dashboard-after-switch.png")
    assert driver.save_screenshot(path)
