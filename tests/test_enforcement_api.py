"""The API's enforcement primitives (``GET``/``POST /v1/enforcement``) in-process: every bad request names its
field and applies nothing, batches apply in order, service flows are not touchable, and hostile input
(a scheduled flow's 5-tuple, huge rates, the largest batch) gets the answer documented in docs/api.md."""

from __future__ import annotations

import json

import pytest

from controller.enforcement import FlowMatch
from controller.enforcement_api import MAX_BATCH
from tests.controller_helpers import MATCH, PATH, TOPO, call, install_body, ip, make_api, match_body


@pytest.mark.parametrize(
    "body, query, status, field",
    [
        ([], "", 400, "body"),
        ({}, "", 400, "op"),
        ({"op": "frob", "flow_id": "a"}, "", 400, "op"),
        ({"op": "install", "flow_id": "new", "match": match_body()}, "", 400, "queue"),
        (install_body(colour="red"), "", 400, "colour"),
        (install_body(flow_id=5), "", 400, "flow_id"),
        (install_body(flow_id=""), "", 400, "flow_id"),
        (install_body(flow_id="job/f"), "", 400, "flow_id"),
        (install_body(match="h1->h5"), "", 400, "match"),
        (install_body(match={"src_ip": ip("h1"), "dst_ip": ip("h5"), "src_port": 1}), "", 400,
         "match.dst_port"),
        (install_body(match=match_body(vlan=3)), "", 400, "match.vlan"),
        (install_body(match=match_body(src_ip=5)), "", 400, "match.src_ip"),
        (install_body(match=match_body(src_ip="bogus")), "", 400, "match.src_ip"),
        (install_body(match=match_body(dst_ip="10.9.9.9")), "", 400, "match.dst_ip"),
        (install_body(match=match_body(src_port=True)), "", 400, "match.src_port"),
        (install_body(match=match_body(src_port=0)), "", 400, "match.src_port"),
        (install_body(match=match_body(dst_port=70000)), "", 400, "match.dst_port"),
        (install_body(match=match_body(ip_proto=1)), "", 400, "match.ip_proto"),
        (install_body(path="h1"), "", 400, "path"),
        (install_body(path=["h1", "e1", "a1", "c3", "a4", "e3", "h5"]), "", 400, "path"),
        (install_body(path=["h2", "e1", "h1"]), "", 400, "path"),
        (install_body(queue=4), "", 400, "queue"),
        (install_body(queue="1"), "", 400, "queue"),
        (install_body(rate_bps=10), "", 400, "rate_bps"),
        (install_body(rate_bps="fast"), "", 400, "rate_bps"),
        (install_body(flow_id="live"), "", 409, "flow_id"),
        ({"op": "update", "flow_id": "nope", "queue": 1}, "", 404, "flow_id"),
        ({"op": "update", "flow_id": "live"}, "", 400, "op"),
        ({"op": "update", "flow_id": "live", "rate_bps": 1e6, "clear_rate": True}, "", 400, "clear_rate"),
        ({"op": "update", "flow_id": "live", "clear_rate": "yes"}, "", 400, "clear_rate"),
        ({"op": "update", "flow_id": "live", "queue": -1}, "", 400, "queue"),
        ({"op": "remove", "flow_id": "nope"}, "", 404, "flow_id"),
        ({"op": "remove", "flow_id": "live", "queue": 1}, "", 400, "queue"),
        ({"op": "batch", "requests": []}, "", 400, "requests"),
        ({"op": "batch", "requests": "all"}, "", 400, "requests"),
        ({"op": "batch"}, "", 400, "requests"),
        ({"op": "batch", "requests": [install_body()], "wait_s": 5}, "", 400, "wait_s"),
        ({"op": "batch", "requests": [install_body(), install_body(flow_id="b", queue=9)]}, "", 400,
         "requests[1].queue"),
        ({"op": "batch", "requests": [install_body(), install_body()]}, "", 409, "requests[1].flow_id"),
        ({"op": "batch", "requests": [{"op": "remove", "flow_id": "live"},
                                      {"op": "update", "flow_id": "live", "queue": 2}]}, "", 404,
         "requests[1].flow_id"),
        ({"op": "batch", "requests": [install_body(), {"op": "batch", "requests": []}]}, "", 400,
         "requests[1].op"),
        ({"op": "batch", "requests": [install_body(), 7]}, "", 400, "requests[1]"),
        (install_body(), "?wait_s=0", 400, "wait_s"),
        (install_body(), "?wait_s=61", 400, "wait_s"),
        (install_body(), "?frob=1", 400, "frob"),
    ],
)
def test_bad_enforcement_request_names_the_field_and_applies_nothing(body, query, status, field):
    served = make_api()
    live_match = FlowMatch(ip("h5"), ip("h1"), 5201, 40099)  # not the 5-tuple the bodies install
    served.enforcer.install("live", live_match, tuple(reversed(PATH)), queue=2, rate_bps=3e6)
    before, sent = served.enforcer.live_flows(), len(served.switches.sent)
    got_status, answer = call(served.api, "POST", "/v1/enforcement" + query, body)
    assert (got_status, answer["error"]["field"]) == (status, field), answer
    assert answer["error"]["problem"]
    assert served.enforcer.live_flows() == before and len(served.switches.sent) == sent


def test_enforcement_needs_the_token_and_a_fabric():
    served = make_api()
    assert call(served.api, "POST", "/v1/enforcement", install_body(), token=None)[0] == 401
    assert call(served.api, "POST", "/v1/enforcement", install_body(), token="wrong")[0] == 401
    assert call(served.api, "GET", "/v1/enforcement?x=1")[1]["error"]["field"] == "x"
    assert call(served.api, "DELETE", "/v1/enforcement")[0] == 405
    assert served.enforcer.live_flows() == {}
    standalone = make_api(with_enforcer=False)
    for method, body in (("GET", None), ("POST", install_body())):
        status, answer = call(standalone.api, method, "/v1/enforcement", body)
        assert (status, answer["error"]["field"]) == (503, "enforcement")


def test_enforcement_batch_applies_in_order_and_times_the_barriers():
    served = make_api()
    batch = {"op": "batch", "requests": [
        install_body(flow_id="a", rate_bps=5e6),
        install_body(flow_id="b", match=match_body(src_port=40002), path=list(PATH), queue=3),
        {"op": "update", "flow_id": "a", "queue": 2, "rate_bps": 6e6},
        {"op": "remove", "flow_id": "b"},
        install_body(flow_id="b", match=match_body(src_port=40003), queue=1, path=list(PATH)),
    ]}
    status, answer = call(served.api, "POST", "/v1/enforcement?wait_s=5", batch)
    assert status == 200, answer
    assert [a["op"] for a in answer["applied"]] == ["install", "install", "update", "remove", "install"]
    ack = answer["enforcement"]
    assert ack["in_force"] and (ack["operations"], ack["pending"], ack["unreachable"]) == (5, 0, 0)
    assert 0 <= ack["latency_s"] < 1
    status, live = call(served.api, "GET", "/v1/enforcement", token=None)  # reads are open
    flows = {f["flow_id"]: f for f in live["flows"]}
    assert sorted(flows) == ["a", "b"]
    assert flows["a"]["path"] == list(TOPO.path_for("h1", "h5", "a"))  # no path given: the pinned one
    assert (flows["a"]["queue"], flows["a"]["rate_bps"], flows["a"]["meter_id"]) == (2, 6e6, 1)
    assert flows["b"]["match"] == match_body(src_port=40003, ip_proto=6)
    assert flows["b"]["owner"] == "primitive"
    assert served.enforcer.live_flows()["b"].match.src_port == 40003
    status, answer = call(served.api, "POST", "/v1/enforcement", {"op": "remove", "flow_id": "a"})
    assert status == 200 and "enforcement" not in answer  # no wait asked for


def test_service_flows_are_listed_but_not_touchable():
    served = make_api()
    served.enforcer.install("job/f1", MATCH, PATH, queue=1)
    (view,) = call(served.api, "GET", "/v1/enforcement")[1]["flows"]
    assert (view["flow_id"], view["owner"]) == ("job/f1", "service")
    status, answer = call(served.api, "POST", "/v1/enforcement", {"op": "remove", "flow_id": "job/f1"})
    assert (status, answer["error"]["field"]) == (400, "flow_id")
    assert list(served.enforcer.live_flows()) == ["job/f1"]


def test_primitive_cannot_take_a_scheduled_flows_5_tuple():
    """An install on a service flow's 5-tuple (either direction) is a 409 that changes nothing."""
    served = make_api()
    served.enforcer.install("kt/a", MATCH, PATH, queue=1, rate_bps=2e6)
    before, sent = served.enforcer.live_flows(), len(served.switches.sent)
    for match in (MATCH, MATCH.reversed()):
        body = install_body(flow_id="p1", match={"src_ip": match.src_ip, "dst_ip": match.dst_ip,
                                          "src_port": match.src_port, "dst_port": match.dst_port})
        status, answer = call(served.api, "POST", "/v1/enforcement", body)
        assert (status, answer["error"]["field"]) == (409, "match"), answer
        assert "kt/a" in answer["error"]["problem"]
        fine = install_body(flow_id="ok", match=match_body(src_port=40009))
        batch = {"op": "batch", "requests": [fine, body]}
        status, answer = call(served.api, "POST", "/v1/enforcement", batch)
        assert (status, answer["error"]["field"]) == (409, "requests[1].match"), answer
    assert served.enforcer.live_flows() == before and len(served.switches.sent) == sent
    assert before["kt/a"].meter_id == 1


def test_batch_may_reuse_a_5_tuple_it_frees_first():
    served = make_api()
    assert call(served.api, "POST", "/v1/enforcement", install_body(flow_id="p1"))[0] == 200
    swap = {"op": "batch",
            "requests": [{"op": "remove", "flow_id": "p1"}, install_body(flow_id="p2", queue=2)]}
    status, answer = call(served.api, "POST", "/v1/enforcement", swap)
    assert status == 200, answer
    assert list(served.enforcer.live_flows()) == ["p2"]


@pytest.mark.parametrize("rate", [10**400, -10**400, 2e12])
def test_huge_rates_are_a_400(rate):
    served = make_api()
    status, answer = call(served.api, "POST", "/v1/enforcement", install_body(rate_bps=rate))
    assert (status, answer["error"]["field"]) == (400, "rate_bps"), answer
    assert len(answer["error"]["problem"]) < 200


def test_a_full_10000_operation_batch_fits_the_body_limit():
    """The documented batch maximum must not be refused by the body size limit."""
    served = make_api()
    requests = [install_body(flow_id=f"bench-flow-{i:05d}", match=match_body(src_port=10000 + i),
                             rate_bps=5e6, path=list(TOPO.path_for("h1", "h5", f"bench-flow-{i:05d}")))
                for i in range(MAX_BATCH)]
    body = {"op": "batch", "requests": requests}
    assert len(json.dumps(body)) > 1 << 20  # over the general 1 MiB limit
    status, answer = call(served.api, "POST", "/v1/enforcement", body)
    assert status == 200, answer
    assert len(answer["applied"]) == MAX_BATCH == len(served.enforcer.live_flows())
    status, answer = call(served.api, "POST", "/v1/jobs", {"job_id": "x" * (2 << 20)})
    assert (status, answer["error"]["field"]) == (413, "body")  # other endpoints keep 1 MiB
