"""The registry, scheduling service and HTTP API inside the real controller, on a real k=4 fat-tree.

One controller (with its own store, token, API port and socket under a per-module directory) and one
fabric serve the module; tests run in file order and build on each other's state (register -> enforce ->
finish -> fair -> restart).  Registration goes through the API's Unix socket from inside a Mininet host
(another network namespace), the way agents reach it.  What the switches hold is read with ovs-ofctl.
Teardown stops both and fails if the controller logged a traceback or a switch rejected a message.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from controller.client import ApiClientError
from echelonflow.queues import dscp_for_queue
from tests.fabric_helpers import (
    assert_within,
    dump,
    enforced_rules,
    fattree_with_stored_controller,
    iperf3_flows,
    measured_until,
    rules_of,
    stored_controller,
    wait_until,
)

pytestmark = [pytest.mark.fabric, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK_BPS = 50e6
JOB = "train"
# Two EchelonFlows: a staggered pipeline stage (3 flows) and a later, less urgent coflow (2 flows).
STAGE = [
    {"flow_id": "s0", "src": "h1", "dst": "h16", "size_bytes": 40_000_000, "offset_s": 0.0},
    {"flow_id": "s1", "src": "h2", "dst": "h15", "size_bytes": 40_000_000, "offset_s": 20.0},
    {"flow_id": "s2", "src": "h3", "dst": "h14", "size_bytes": 40_000_000, "offset_s": 40.0},
]
LATER = [
    {"flow_id": "c0", "src": "h5", "dst": "h9", "size_bytes": 40_000_000, "offset_s": 0.0},
    {"flow_id": "c1", "src": "h6", "dst": "h10", "size_bytes": 40_000_000, "offset_s": 0.0},
]
PORTS = {"s0": (41000, 5301), "s1": (41001, 5302), "s2": (41002, 5303), "c0": (41003, 5304),
         "c1": (41004, 5305)}

# Runs inside a Mininet host with the venv's python: registers and starts flows over the Unix socket.
HOST_SCRIPT = r"""
import json, sys
from controller.client import EchelonClient
plan = json.load(open(sys.argv[1]))
c = EchelonClient(socket_path=plan["socket"], token_file=plan["token_file"])
out = {"registered": [], "started": []}
if plan.get("job"):
    c.register_job(plan["job"])
for ech in plan["echelons"]:
    out["registered"].append(c.register_echelon(plan["job_id"], ech["echelon_id"], ech["flows"]))
for i, (fid, (sport, dport)) in enumerate(plan["start"]):
    last = i == len(plan["start"]) - 1
    out["started"].append(c.flow_started(plan["job_id"], fid, sport, dport, wait_s=10 if last else None))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def env(require_fabric):
    with fattree_with_stored_controller(LINK_BPS, "echelon-rf-") as state:
        yield state


# --------------------------------------------------------------------------- switch state
def _meters(switch: str) -> dict[int, int]:
    """meter id -> rate in kbit/s on one switch."""
    out = {}
    for block in dump(switch, "dump-meters").split("meter=")[1:]:
        rate = re.search(r"rate=(\d+)", block)
        out[int(block.split()[0])] = int(rate.group(1)) if rate else 0
    return out


def _all_enforcement(env) -> dict[str, list]:
    out = {}
    for switch in env.topo.switches:
        rules, meters = enforced_rules(switch), _meters(switch)
        if rules or meters:
            out[switch] = [r["line"].split(" actions")[0].split("priority=")[-1] for r in rules] + \
                [f"meter {m}" for m in meters]
    return out


def _run_in_host(env, host: str, plan: dict) -> dict:
    """Run HOST_SCRIPT with ``plan`` inside a Mininet host (its own network namespace)."""
    script = os.path.join(env.workdir, "host_client.py")
    with open(script, "w", encoding="utf-8") as fh:
        fh.write(HOST_SCRIPT)
    plan_path = os.path.join(env.workdir, f"plan-{host}.json")
    with open(plan_path, "w", encoding="utf-8") as fh:
        json.dump({"socket": env.ctl.api_socket_path, "token_file": env.ctl.token_file, **plan}, fh)
    proc = env.fabric.host(host).popen([sys.executable, script, plan_path], cwd=ROOT,
                                       env=dict(os.environ, PYTHONPATH=ROOT),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"client in {host} failed: {err.decode()[-800:]}"
    return json.loads(out.decode())


# --------------------------------------------------------------------------- tests (in order)
def test_namespace_really_cannot_reach_root_loopback(env):
    """Premise of the socket transport: the API's TCP port is not reachable from inside a host."""
    out = env.fabric.host("h1").cmd(
        f"{sys.executable} -c \"import socket; s=socket.socket(); s.settimeout(1); "
        f"print(s.connect_ex(('127.0.0.1', {env.api_port})))\"")
    assert out.strip() != "0", "a Mininet host reached the root namespace's loopback"


def test_registered_flows_are_enforced_in_scheduler_order(env):
    result = _run_in_host(env, "h1", {
        "job": JOB, "job_id": JOB,
        "echelons": [{"echelon_id": "stage", "flows": STAGE}, {"echelon_id": "later", "flows": LATER}],
        "start": [(fid, PORTS[fid]) for fid in ("s0", "s1", "s2", "c0", "c1")],
    })
    assert result["started"][-1]["enforcement"]["in_force"], result["started"][-1]
    client = env.ctl.client()
    flows = {f["flow_id"]: f for f in client.flows(JOB, state="active")}
    assert sorted(flows) == ["c0", "c1", "s0", "s1", "s2"]
    alloc = {fid: client.allocation(JOB, fid) for fid in flows}
    for fid, flow in flows.items():
        rules = rules_of(flow)
        switches = flow["path"][1:-1]
        assert sorted(rules) == sorted(switches), f"{fid}: rules on {sorted(rules)}, path {switches}"
        queue = alloc[fid]["queue"]
        assert 1 <= queue <= 3, alloc[fid]
        for switch, rule in rules.items():
            assert int(rule["queue"]) == queue, (fid, switch, rule["line"], alloc[fid])
            assert int(rule["dscp"]) == dscp_for_queue(queue), (fid, switch, rule["line"])
        first = rules[switches[0]]
        if alloc[fid]["meter_rate_bps"] is None:
            assert first["meter"] is None, first["line"]
        else:
            meter_kbps = _meters(switches[0])[int(first["meter"])]
            assert_within(meter_kbps * 1e3, alloc[fid]["meter_rate_bps"], 0.8, 1.25, f"{fid} meter")
        assert all(r["meter"] is None for s, r in rules.items() if s != switches[0])
    # The scheduler's order is the queue order: among flows given a rate, by rank, queues never go down
    # and rank 0 has the smallest; a flow told to wait (no meter) sits in the last class, whatever its rank.
    sending = sorted((a for a in alloc.values() if a["meter_rate_bps"] is not None), key=lambda a: a["rank"])
    queues = [a["queue"] for a in sending]
    assert sending and queues == sorted(queues), sending
    assert sending[0]["rank"] == min(a["rank"] for a in alloc.values()) and sending[0]["queue"] == 1
    waiting = [a for a in alloc.values() if a["meter_rate_bps"] is None]
    assert all(a["queue"] == 3 for a in waiting), waiting
    # each EchelonFlow is a group with its own class (the scheduler orders groups, e.g. SEBF)
    assert alloc["c0"]["queue"] == alloc["c1"]["queue"] != alloc["s0"]["queue"], alloc
    print({fid: (a["rank"], a["queue"], a["meter_rate_bps"]) for fid, a in alloc.items()})


def test_finished_flow_loses_its_rules_and_meter(env):
    client = env.ctl.client()
    flow = client.flow(JOB, "s0")
    first = flow["path"][1]
    meter = rules_of(flow)[first]["meter"]
    assert meter is not None and int(meter) in _meters(first)
    answer = client.flow_finished(JOB, "s0", wait_s=10)
    assert answer["enforcement"]["in_force"], answer
    assert rules_of(flow) == {}, "rules of a finished flow are still in the switches"
    others = [r["meter"] for r in enforced_rules(first)]
    if meter not in others:  # the meter id may be re-used by a flow that starts at the same switch
        assert int(meter) not in _meters(first)
    assert client.allocation(JOB, "s0")["enforced"] is False


def test_bad_requests_are_refused_and_change_nothing(env):
    client = env.ctl.client()
    before = (client.jobs(), client.flows(), client.scheduler())
    rules_before = {s: sorted(r["line"].split(" actions")[0].split("priority=")[-1]
                              for r in enforced_rules(s)) for s in env.topo.switches}
    flow = {"flow_id": "x", "src": "h1", "dst": "h2", "size_bytes": 1000}
    bad = [
        (401, lambda: client.request("POST", "/jobs", {"job_id": "evil"})),  # no token
        (400, lambda: client.request("POST", "/jobs", raw=b'{"job_id": ', auth=True)),  # malformed JSON
        (400, lambda: client.register_echelon(JOB, "bad", [dict(flow, src="h99")])),  # unknown host
        (400, lambda: client.register_echelon(JOB, "bad", [flow, dict(flow, flow_id="y", size_bytes=0)])),
        (400, lambda: client.flow_started(JOB, "s1", 0, 5301)),  # port out of range
        (400, lambda: client.set_scheduler("fastest")),
        (400, lambda: client.flow_started(JOB, "s1", 1, 2, wait_s=-1)),
        (404, lambda: client.flow_started(JOB, "nope", 40000, 5201)),
        (404, lambda: client.request("GET", "/nothing")),
        (405, lambda: client.request("DELETE", "/jobs", auth=True)),
        (409, lambda: client.register_job(JOB)),
        (409, lambda: client.flow_started(JOB, "s1", 41001, 5302)),  # already active
        (409, lambda: client.register_echelon(JOB, "stage", [])),
        (413, lambda: client.request("POST", "/jobs", raw=b" " * (2 << 20), auth=True)),
        (415, lambda: client.request("POST", "/jobs", {"job_id": "z"}, auth=True,
                                     headers={"Content-Type": "text/plain"})),
    ]
    for status, call in bad:
        with pytest.raises(ApiClientError) as err:
            call()
        assert err.value.status == status, (status, err.value)
        assert err.value.problem and err.value.field is not None
    assert (client.jobs(), client.flows(), client.scheduler()) == before
    rules_after = {s: sorted(r["line"].split(" actions")[0].split("priority=")[-1]
                             for r in enforced_rules(s)) for s in env.topo.switches}
    assert rules_after == rules_before


def test_switching_to_fair_removes_everything_and_back(env):
    client = env.ctl.client()
    assert _all_enforcement(env), "nothing enforced before the switch"
    answer = client.set_scheduler("fair", wait_s=10)
    assert answer["enforcement"]["in_force"] and answer["pushed"]["removes"] == 4, answer
    assert _all_enforcement(env) == {}
    answer = client.set_scheduler("echelon", wait_s=10)
    assert answer["enforcement"]["in_force"] and answer["pushed"]["installs"] == 4, answer
    for fid in ("s1", "s2", "c0", "c1"):
        assert rules_of(client.flow(JOB, fid)), f"{fid} not enforced again"


def test_restart_keeps_registry_and_rules_come_back(env):
    client = env.ctl.client()
    before = client.flows(JOB)
    env.ctl.stop()
    env.problems += env.ctl.log_problems()
    assert os.path.exists(env.store)
    restarted_at = time.monotonic()
    env.ctl = stored_controller(env).start()
    env.ctl.wait_switches(timeout_s=20)
    client = env.ctl.client()
    assert client.flows(JOB) == before
    assert client.scheduler()["scheduler"] == "echelon"
    for fid in ("s1", "s2", "c0", "c1"):
        flow = client.flow(JOB, fid)
        rules = wait_until(lambda f=flow: len(rules_of(f)) == len(f["path"]) - 2 and rules_of(f),
                            10, f"{fid}'s rules back after the restart")
        since_s = time.monotonic() - restarted_at
        for switch, rule in rules.items():  # installed by the new controller, not left over
            assert float(rule["duration_s"]) <= since_s, (fid, switch, rule["line"])
    assert rules_of(client.flow(JOB, "s0")) == {}


def test_real_tcp_flows_get_their_enforced_classes(env):
    """Two flows of one EchelonFlow over real TCP (iperf3 with fixed ports) into the same host: the
    scheduler's urgent flow gets its rate (here the link), the other only what is left."""
    client = env.ctl.client()
    for fid in ("s1", "s2", "c0", "c1"):  # the earlier tests' flows would otherwise compete for links
        client.flow_finished(JOB, fid)
    spec = [  # different sources (no shared host shaper), one destination: they meet at e?->h12
        {"flow_id": "t0", "src": "h1", "dst": "h12", "size_bytes": 200_000_000, "offset_s": 0.0},
        {"flow_id": "t1", "src": "h5", "dst": "h12", "size_bytes": 200_000_000, "offset_s": 60.0},
    ]
    client.register_echelon(JOB, "tcp", spec)
    ports = {"t0": (42001, 5401), "t1": (42002, 5402)}
    for fid, (cport, sport) in ports.items():  # rules in force before the first SYN
        answer = client.flow_started(JOB, fid, cport, sport, wait_s=10)
        assert answer["enforcement"]["in_force"], answer
    alloc = {fid: client.allocation(JOB, fid) for fid in ports}
    assert alloc["t0"]["rank"] < alloc["t1"]["rank"] and alloc["t0"]["queue"] < alloc["t1"]["queue"], alloc
    target = min(alloc["t0"]["rate_bps"], LINK_BPS)

    def measure(_attempt: int) -> dict[str, float]:  # on the same ports: the rules are theirs
        measured = iperf3_flows(env.fabric, [(f["src"], f["dst"], None) for f in spec], seconds=5,
                                omit_s=1, ports=[ports[f["flow_id"]] for f in spec])
        rates = {f["flow_id"]: bps for f, bps in zip(spec, measured)}
        print("TCP " + ", ".join(f"{fid} {bps / 1e6:.1f} Mbit/s" for fid, bps in rates.items()))
        assert rates["t1"] <= 0.25 * LINK_BPS, f"the waiting flow got {rates['t1'] / 1e6:.1f} Mbit/s"
        return rates

    try:
        rates, measurements = measured_until(measure, lambda rates: rates["t0"] >= 0.85 * target)
        estimate = client.flow(JOB, "t0")["bytes_done_estimate"]
    finally:
        for fid in ports:
            client.flow_finished(JOB, fid, wait_s=10)
    for fid in ports:
        print(f"{fid}: queue {alloc[fid]['queue']}, rate {alloc[fid]['rate_bps']}, "
              f"meter {alloc[fid]['meter_rate_bps']}")
    assert_within(rates["t0"], target, 0.85, 1.05,
                  f"urgent flow over its scheduled rate in {measurements} measurement(s)")
    # switch counters fed the registry: the estimate moved although no agent reported progress
    assert estimate >= 0.5 * rates["t0"] * 4 / 8, estimate
