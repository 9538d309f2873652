"""Fuzzing ``POST /v1/enforcement`` inside the running controller, on the real fabric.

tests/test_api_fuzz.py fuzzes the registry API served standalone; this fuzzes the low-level enforcement
primitives where they act: the controller connected to a k=4 fat-tree of real OVS switches.  Hypothesis
builds each request from a valid install, update, remove or batch, by replacing, dropping or adding fields
(top level, ``match``, a batch's requests) with awkward JSON (huge integers, NaN and infinities, ids with
newlines, nesting, wrong types), or sends broken JSON or a bad ``wait_s``; about one request in five is
left valid, so the state moves and refusals are tried against more than one state.

Checked after every request: never a 5xx; a 4xx is one line and changes nothing, neither ``GET
/v1/enforcement`` nor the enforcement rules (priority 20) and meters the switches hold, compared with
what they held after the last request that applied; a 2xx is waited for (``?wait_s=``), so that
snapshot is what the switches really hold.  The controller runs with a one-hour enforcement idle
timeout (``ECHELON_ENFORCE_IDLE_S``): with the default 60 s, rules of the idle seeded flows would
expire by themselves during the run and a switch comparison could not tell that from a refused request
changing something.  A scheduled flow owned by the service is live throughout and must never move.

Shrinking is off: every example acts on the live controller, so replaying a shrunk one would start from
another state; the failing request is reported as sent (``derandomize``: the same requests every run).
"""

from __future__ import annotations

import copy
import re
import subprocess

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from controller.client import ApiClientError
from tests.fabric_helpers import fattree_with_stored_controller

pytestmark = [pytest.mark.fabric, pytest.mark.slow]

LINK_BPS = 10e6
#: Requests per run: the default suite sends 40 (every kind of request, refusals against more than one
#: state); the reference tier (tests/run --full) 120.
REQUESTS = (40, 120)
IDLE_S = 3600  # longer than the run: no rule of an idle flow expires while it is compared
AWKWARD = [None, True, False, 0, -1, 1, 7, 65536, 2**31, 10**400, -(10**400), 1e308, -0.0, 0.5, 1e6, "",
           " ", "a\n", "p/1", "h1", "e1", "c1", "10.0.0.1", "10.0.0.999", "x" * 300, [], ["h1", "e1"],
           ["h1", "e1", "a1", "c1", "a7", "e8", "h16"], {}, {"a": 1}, [[[[[]]]]], "é", "\u0000"]
KEYS = ["op", "flow_id", "src_ip", "src_port", "queue", "rate_bps", "path", "requests", "zz"]
LEAF = st.one_of(st.sampled_from(AWKWARD), st.integers(), st.floats(), st.text(max_size=12))
VALUE = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(KEYS), inner, max_size=3), max_leaves=6)
KINDS = ["valid"] * 6 + ["mutated"] * 12 + ["query", "raw"]  # of a request; drawn about evenly
BAD_QUERIES = ["?wait_s=abc", "?wait_s=-1", "?wait_s=1e400", "?wait_s=1&wait_s=2", "?x=1"]
BAD_RAW = [b"{", b"[]", b"\xff\xfe", b'{"op": "install"', b"null", b"1e400", b'{"op": NaN}']
VOLATILE = re.compile(r"\b(duration|n_packets|n_bytes|idle_age|hard_age|packet_count|byte_count|"
                      r"flow_count|packet_in_count)=[^ ,]*,?\s*")


@pytest.fixture(scope="module")
def env(require_fabric):
    with fattree_with_stored_controller(LINK_BPS, "echelon-efuzz-",
                                        controller_env={"ECHELON_ENFORCE_IDLE_S": str(IDLE_S)}) as state:
        yield state


def _ip(env, host: str) -> str:
    return env.topo.graph.nodes[host]["ip"]


def _valid(env) -> list[dict]:
    """Requests that would succeed on the seeded state."""
    def match(src, dst, sport, dport):
        return {"src_ip": _ip(env, src), "dst_ip": _ip(env, dst), "src_port": sport, "dst_port": dport}

    install = {"op": "install", "flow_id": "p1", "match": match("h2", "h15", 41001, 5301), "queue": 1,
               "rate_bps": 2e6}
    return [
        install,
        {**install, "flow_id": "p2", "match": match("h3", "h14", 41002, 5302),
         "path": ["h3", "e2", "a1", "c1", "a7", "e7", "h14"], "queue": 2},
        {"op": "update", "flow_id": "p0", "queue": 2, "rate_bps": 3e6},
        {"op": "update", "flow_id": "p0", "clear_rate": True},
        {"op": "remove", "flow_id": "p0"},
        {"op": "batch", "requests": [{**install, "flow_id": "p3", "match": match("h4", "h13", 41003, 5303)},
                                     {"op": "update", "flow_id": "p0", "queue": 3}]},
    ]


def _mutated(data, body: dict):
    """``body`` with 1-3 fields replaced, dropped or added (anywhere in it), or not an object at all."""
    body = copy.deepcopy(body)
    for _ in range(data.draw(st.integers(1, 3))):
        if data.draw(st.integers(0, 19)) == 0:
            return data.draw(VALUE)
        requests = body.get("requests")
        places = [body] + [r for r in (requests if isinstance(requests, list) else []) if isinstance(r, dict)]
        places += [p["match"] for p in places if isinstance(p.get("match"), dict)]
        target = data.draw(st.sampled_from(places))
        key = data.draw(st.sampled_from(sorted(target) + ["extra", "op"]))
        if key in target and data.draw(st.integers(0, 4)) == 0:
            del target[key]
        else:
            target[key] = data.draw(VALUE)
    return body


def _dump(switch: str, what: str) -> list[str]:
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", what, switch], capture_output=True, text=True,
                         check=True).stdout
    return sorted(VOLATILE.sub("", line).strip() for line in out.splitlines()[1:] if line.strip())


def _switch_state(env) -> dict[str, tuple[list[str], list[str]]]:
    """Switch -> (its enforcement rules with their cookies, its meters), counters and ages left out."""
    return {switch: ([r for r in _dump(switch, "dump-flows") if "priority=20" in r],
                     _dump(switch, "dump-meters")) for switch in env.topo.switches}


P0 = {"op": "install", "flow_id": "p0", "queue": 1, "rate_bps": 4e6}


def _seed(env, client, job: str, src_port: int) -> None:
    """A scheduled flow (the service's, job ``job``) and a metered primitive p0, both in force."""
    client.set_scheduler("echelon", wait_s=10)
    client.register_job(job)
    client.register_echelon(job, "e", [{"flow_id": "f", "src": "h1", "dst": "h16", "size_bytes": 10**9}])
    assert client.flow_started(job, "f", src_port, 5400, wait_s=10)["enforcement"]["in_force"]
    _reset(env, client)


def _reset(env, client) -> None:
    """Back to the seeded state: only p0 (metered, queue 1) next to the service's flow."""
    live = client.enforcement()
    extra = [{"op": "remove", "flow_id": fid} for fid, flow in live.items()
             if flow["owner"] == "primitive" and fid != "p0"]
    if "p0" in live:
        extra.append({"op": "update", "flow_id": "p0", "queue": P0["queue"], "rate_bps": P0["rate_bps"]})
    else:
        extra.append({**P0, "match": {"src_ip": _ip(env, "h5"), "dst_ip": _ip(env, "h12"), "src_port": 41000,
                                      "dst_port": 5300}})
    answer = client.enforce({"op": "batch", "requests": extra}, wait_s=10)
    assert answer["enforcement"]["in_force"], answer


@pytest.mark.parametrize("requests", [REQUESTS[0], pytest.param(REQUESTS[1], marks=pytest.mark.reference)])
def test_enforcement_requests_never_5xx_and_refusals_change_nothing_on_the_switches(env, requests):
    client = env.ctl.client()
    job = f"fz{requests}"
    _seed(env, client, job, 42000 + REQUESTS.index(requests))
    service_flow = client.enforcement()[f"{job}/f"]
    assert service_flow["owner"] != "primitive"
    valid = _valid(env)
    seen = {"switches": _switch_state(env), "enforced": client.enforcement(), "applied": 0}
    statuses: dict[int, int] = {}

    @settings(max_examples=requests, deadline=None, derandomize=True, database=None,
              phases=(Phase.generate,), suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one_request(data):
        body = data.draw(st.sampled_from(valid), label="valid body")
        query, raw, kind = "?wait_s=10", None, data.draw(st.sampled_from(KINDS), label="kind")
        if kind == "query":
            query = data.draw(st.sampled_from(BAD_QUERIES), label="query")
        elif kind == "raw":
            raw = data.draw(st.sampled_from(BAD_RAW), label="raw body")
        elif kind == "mutated":  # else the valid body as it is: it applies, later refusals start from there
            body = _mutated(data, body)
        data.draw(st.just(raw or body), label="sent")
        try:
            client.request("POST", "/enforcement" + query, None if raw else body, auth=True, raw=raw)
            status = 200
        except ApiClientError as err:
            status = err.status
            assert 400 <= status < 500, err
            assert err.problem and "\n" not in err.problem, err.problem
            assert client.enforcement() == seen["enforced"], err
            assert _switch_state(env) == seen["switches"], err
        else:
            seen["applied"] += 1
            if seen["applied"] % 3 == 0 or "p0" not in client.enforcement():
                _reset(env, client)  # now and then back to the seeded state, so valid bodies stay valid
            seen["switches"], seen["enforced"] = _switch_state(env), client.enforcement()
        statuses[status] = statuses.get(status, 0) + 1

    one_request()
    print(f"\n{sum(statuses.values())} requests, answers {dict(sorted(statuses.items()))}")
    assert sum(statuses.values()) == requests
    assert client.enforcement()[f"{job}/f"] == service_flow  # the scheduled flow never moved
    assert sum(n for s, n in statuses.items() if s >= 400) > requests // 3, statuses
    assert statuses.get(200, 0) >= requests // 12, statuses  # the fuzz also reaches requests that apply
