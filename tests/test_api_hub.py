"""Reads never hold the controller's hub for a whole page (``controller.encoded``): a page is built and
encoded an item at a time with turns of the hub between items, an item that leaves memory meanwhile is
left out, and the bytes are those ``json.dumps(payload, sort_keys=True)`` gives for the whole page.  An
EchelonFlow whose flows are all done is encoded once (``live_view.DoneEchelonViews``) until a record of it
changes.  Standalone registry and API (the served test uses the real HTTP server on its own hub)."""

from __future__ import annotations

import json
import time

import eventlet
import pytest

from controller import encoded
from controller.api import Api
from controller.api_server import ApiServer, GreenEvent, run_in_thread
from controller.client import EchelonClient
from controller.registry import Registry
from controller.service import SchedulingService
from echelonflow.topology import fattree
from tests.controller_helpers import get_raw as get

TOKEN = "t" * 32


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def grown(jobs: int = 12, done: int = 6, flows: int = 4) -> tuple[Api, Clock]:
    """``jobs`` jobs of one EchelonFlow of ``flows`` flows each, all started; the first ``done`` finished."""
    clock = Clock()
    registry = Registry(fattree(20e6, 4))
    service = SchedulingService(registry, None, now=clock)
    for j in range(jobs):
        registry.add_job(f"j{j}", registered_s=clock.now_s)
        registry.add_echelon(f"j{j}", "e", flows=[
            {"flow_id": f"f{i}", "src": f"h{1 + i % 8}", "dst": f"h{9 + (i + j) % 8}", "size_bytes": 10**6}
            for i in range(flows)])
        for i in range(flows):
            registry.flow_started(f"j{j}", f"f{i}", 40000 + i, 5201 + j, clock.now_s)
            if j < done:
                registry.flow_finished(f"j{j}", f"f{i}", clock.now_s + 0.5)
    clock.now_s += 1.0
    service.reschedule("test")
    return Api(service, TOKEN), clock


@pytest.mark.parametrize("path", ["/v1/echelons", "/v1/echelons?recent_s=60&limit=5", "/v1/jobs?limit=7",
                                  "/v1/flows?limit=30", "/v1/jobs/j3/flows", "/v1/jobs/j3/echelons"])
def test_a_page_is_the_bytes_json_dumps_gives_with_turns_or_without(path, monkeypatch):
    api, _clock = grown()
    status, plain = get(api, path)
    assert status == 200
    payload = json.loads(plain)
    assert json.dumps(payload, sort_keys=True).encode() == plain
    monkeypatch.setattr(encoded, "TURN_EVERY_S", 0.0)
    turns = []
    assert get(api, path, lambda: turns.append(1))[1] == plain
    listed = next(value for key, value in payload.items() if isinstance(value, list))
    assert len(turns) == len(listed)  # a turn before every item


def test_the_echelons_page_matches_the_live_view_and_done_ones_are_encoded_once():
    api, clock = grown()
    live = api.live
    first = get(api, "/v1/echelons")[1]
    assert json.loads(first) == live.echelons()
    assert len(live.done_views) == 6  # the finished ones; active ones change with the clock
    clock.now_s += 5.0
    again = get(api, "/v1/echelons")[1]
    assert json.loads(again) == live.echelons()
    assert json.loads(again)["echelons"][:6] == json.loads(first)["echelons"][:6]
    # a record changing (a new flow declared into a finished EchelonFlow) is seen at once
    api.registry.add_flows("j0", "e", [{"flow_id": "late", "src": "h1", "dst": "h2", "size_bytes": 5}])
    view = json.loads(get(api, "/v1/echelons?limit=1")[1])["echelons"][0]
    assert view["state"] == "declared" and [f["flow_id"] for f in view["flows"]][-1] == "late"
    assert view == live.echelons(limit=1)["echelons"][0]


def test_the_done_views_stay_within_their_bytes():
    api, _clock = grown(jobs=30, done=30)
    done = api.live.done_views
    done.max_bytes = 3 * len(encoded.encode(api.live.echelons(limit=1)["echelons"][0]))
    assert json.loads(get(api, "/v1/echelons")[1]) == api.live.echelons()
    assert 2 <= len(done) <= 3 and done.bytes <= done.max_bytes  # ids grow longer: j10 on


def test_an_item_that_leaves_memory_while_the_page_is_built_is_left_out(monkeypatch):
    api, _clock = grown(jobs=6, done=6)
    monkeypatch.setattr(encoded, "TURN_EVERY_S", 0.0)
    deleted = []

    def delete_a_later_job():  # another request served during the hub's turn
        if not deleted:
            deleted.append(api.registry.delete_job("j4"))

    for path, key in (("/v1/jobs", "job_id"), ("/v1/echelons", "job_id"), ("/v1/flows", "job_id")):
        deleted.clear()
        if "j4" not in api.registry.jobs:
            api, _clock = grown(jobs=6, done=6)
        answer = json.loads(get(api, path, delete_a_later_job)[1])
        listed = next(value for value in answer.values() if isinstance(value, list))
        assert deleted and "j4" not in {item[key] for item in listed}, path
        assert {item[key] for item in listed} == {"j0", "j1", "j2", "j3", "j5"}, path


def test_a_round_waits_for_an_item_not_for_the_page(tmp_path):
    """Served for real: while a client reads pages of 50 EchelonFlows of 40 active flows each (tens of
    milliseconds of work per page), a green task on the hub still runs between the items."""
    registry = Registry(fattree(20e6, 4))
    for j in range(50):
        registry.add_job(f"j{j}")
        registry.add_echelon(f"j{j}", "e", flows=[
            {"flow_id": f"f{i}", "src": f"h{1 + i % 16}", "dst": f"h{1 + (i + 1 + j % 15) % 16}",
             "size_bytes": 10**6} for i in range(40)])
    api = Api(SchedulingService(registry, None, event_factory=GreenEvent), TOKEN)
    ran: list[float] = []
    inside: list[int] = []
    running = [True]

    def app(environ, start_response):
        before = len(ran)
        try:
            return api(environ, start_response)
        finally:
            inside.append(len(ran) - before)

    def task():
        while running[0]:
            ran.append(time.perf_counter())
            eventlet.sleep(0)

    server = ApiServer(app, port=0, socket_path=str(tmp_path / "hub.sock"))
    thread = run_in_thread(server, tasks=(task,))
    try:
        with EchelonClient(socket_path=server.socket_path, token=TOKEN) as client:
            for _ in range(3):
                page = client.request("GET", "/echelons?limit=50")
                assert len(page["echelons"]) == 50 and page["next_cursor"] is None
    finally:
        running[0] = False
        thread.stop()
    assert min(inside) >= 2, inside  # the task ran while each page was built
