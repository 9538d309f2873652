"""Every list the API serves comes a page at a time: a walk meets every item once while items are added,
limits are bounded, a bad limit or cursor is the API's JSON error naming it, and ``recent_s`` (read from
an index) answers what its definition over every EchelonFlow says.  Real server, real HTTP."""

from __future__ import annotations

import json
import random

import pytest

from controller.client import ApiClientError
from controller.paging import MAX_LIMIT
from tests.api_helpers import ServedApi
from tests.controller_helpers import get_raw as get


@pytest.fixture()
def served(tmp_path):
    s = ServedApi(tmp_path, now_s=1000.0)  # the clock the recent_s test moves
    yield s
    s.stop()


def test_a_walk_meets_every_job_once_while_jobs_are_added(served):
    c = served.unix
    for i in range(25):
        c.register_job(f"j{i:03d}")
    seen, cursor, added = [], None, 0
    while True:
        answer = c.request("GET", "/jobs?limit=4" + (f"&cursor={cursor}" if cursor else ""))
        assert len(answer["jobs"]) <= 4
        seen += [job["job_id"] for job in answer["jobs"]]
        c.register_job(f"new{added}")  # between pages, the list grows
        added += 1
        cursor = answer["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen))
    assert set(seen) >= {f"j{i:03d}" for i in range(25)}
    assert seen == sorted(seen, key=lambda j: (j.startswith("new"), int(j[3:]) if j.startswith("new") else j))
    assert len(c.jobs()) == 25 + added  # the client follows the cursors to the end


def test_flow_pages_filter_on_the_server(served):
    c = served.unix
    for job in ("a", "b"):
        c.register_job(job)
        c.register_echelon(job, "e", [{"flow_id": f"f{i}", "src": "h1", "dst": "h9", "size_bytes": 100}
                                      for i in range(7)])
    for i in range(0, 7, 2):
        c.flow_started("b", f"f{i}", 41000 + i, 5201)
    page = c.request("GET", "/flows?state=active&limit=3")
    assert [f["flow_id"] for f in page["flows"]] == ["f0", "f2", "f4"] and page["next_cursor"]
    assert [f["flow_id"] for f in c.flows(state="active")] == ["f0", "f2", "f4", "f6"]
    assert [f["flow_id"] for f in c.flows("b", state="declared")] == ["f1", "f3", "f5"]
    assert len(c.flows()) == 14 and len(c.pages("/flows", "flows", limit=1)) == 14


@pytest.mark.parametrize("query, field", [
    ("/jobs?limit=0", "limit"), (f"/jobs?limit={MAX_LIMIT + 1}", "limit"), ("/jobs?limit=1.5", "limit"),
    ("/jobs?limit=", "limit"), ("/jobs?cursor=", "cursor"), ("/jobs?cursor=%%%", "cursor"),
    ("/jobs?cursor=bm90LWEtY3Vyc29y", "cursor"), ("/flows?cursor=abc", "cursor"),
    ("/echelons?recent_s=60&limit=-1", "limit"), ("/channels?limit=x", "limit"),
    ("/jobs/j/flows?cursor=zz", "cursor"), ("/jobs?limit=2&limit=3", "limit"),
    ("/echelons?limit=51", "limit"),
])
def test_a_bad_limit_or_cursor_is_refused_by_name(served, query, field):
    served.unix.register_job("j")
    with pytest.raises(ApiClientError) as info:
        served.unix.request("GET", query)
    assert (info.value.status, info.value.field) == (400, field), info.value


def test_a_cursor_of_another_list_is_refused(served):
    c = served.unix
    for i in range(3):
        c.register_job(f"j{i}")
    cursor = c.request("GET", "/jobs?limit=1")["next_cursor"]
    with pytest.raises(ApiClientError) as info:
        c.request("GET", f"/flows?cursor={cursor}")
    assert (info.value.status, info.value.field) == (400, "cursor")
    assert len(c.request("GET", f"/jobs?limit={MAX_LIMIT}")["jobs"]) == 3


def _recent_by_definition(echelons, since_s):
    """docs/api.md: started, and a flow not done or one done at or after ``since_s``."""
    return [(e["job_id"], e["echelon_id"]) for e in echelons if e["reference_s"] is not None and any(
        f["state"] not in ("finished", "aborted") or f["finish_s"] >= since_s for f in e["flows"])]


@pytest.mark.parametrize("seed", range(6))
def test_recent_echelons_from_the_index_are_those_of_the_definition(served, seed):
    rng, c = random.Random(seed), served.unix
    pending, port = [], 30000
    for j in range(8):
        job = f"j{j}"
        c.register_job(job)
        for e in range(rng.randint(1, 3)):
            n = rng.randint(1, 3)
            c.register_echelon(job, f"e{e}", [{"flow_id": f"e{e}f{i}", "src": "h1", "dst": "h3",
                                               "size_bytes": 100} for i in range(n)])
            pending += [(job, f"e{e}f{i}") for i in range(n)]
    rng.shuffle(pending)
    active = []
    for _step in range(60):
        served.now_s += rng.choice([0.5, 3.0, 20.0])
        if pending and (not active or rng.random() < 0.5):
            job, flow = pending.pop()
            port += 1
            c.flow_started(job, flow, port, 5201)
            active.append((job, flow))
        elif active:
            job, flow = active.pop(rng.randrange(len(active)))
            c.flow_finished(job, flow)
        if rng.random() < 0.05:
            c.request("POST", f"/jobs/j{rng.randrange(8)}/abort", {}, auth=True)
            active = [a for a in active if c.flow(*a)["state"] == "active"]
            pending = [p for p in pending if c.flow(*p)["state"] == "declared"]
    every = c.pages("/echelons", "echelons", limit=7)
    for recent_s in (0.0, 1.0, 10.0, 30.0, 100.0, 1000.0):
        got = c.pages("/echelons", "echelons", limit=3, recent_s=recent_s)
        expected = _recent_by_definition(every, served.now_s - recent_s)
        assert [(e["job_id"], e["echelon_id"]) for e in got] == expected, recent_s


def test_a_walk_of_the_channels_meets_each_once_while_some_are_removed(served):
    c = served.unix
    for i in range(9):
        c.register_channel(f"c{i}", "h1", "h2", 30000 + i, 5201)
    first = c.request("GET", "/channels?limit=4")
    c.remove_channel("c0")  # one already walked: the next page starts where the last one ended
    c.remove_channel("c5")
    rest = c.pages("/channels", "channels", limit=4, cursor=first["next_cursor"])
    walked = [ch["channel_id"] for ch in first["channels"] + rest]
    assert walked == ["c0", "c1", "c2", "c3", "c4", "c6", "c7", "c8"]


def test_a_walk_continues_across_a_controller_restart(tmp_path, monkeypatch):
    """A client paging across a restart goes on where it was (the restarted controller loads its lists in
    the registration order), items added after the restart included; a cursor whose item left memory
    meanwhile is a 400 naming ``cursor``.  Real store; the restart is a new registry, service and API on
    the same file with a new process epoch (what a new controller process draws)."""
    from controller import paging
    from controller.api import Api
    from controller.service import SchedulingService
    from controller.store import open_registry
    from echelonflow.topology import fattree

    path = str(tmp_path / "reg.sqlite")
    registry = open_registry(fattree(20e6, 4), path)
    for i in range(7):
        registry.add_job(f"j{i}")
        registry.add_echelon(f"j{i}", "e", flows=[{"flow_id": "f", "src": "h1", "dst": "h9",
                                                   "size_bytes": 9}])
    first = Api(SchedulingService(registry, None), "t" * 32)
    pages = {name: json.loads(get(first, f"/v1/{name}?limit=3")[1]) for name in ("jobs", "flows", "echelons")}
    gone = json.loads(get(first, "/v1/jobs?limit=5")[1])["next_cursor"]  # continues after j4
    registry.abort_job("j4", 1.0)
    registry.store.close()

    monkeypatch.setattr(paging, "EPOCH", "restarted")
    registry = open_registry(fattree(20e6, 4), path)
    registry.delete_job("j4")
    registry.add_job("late")
    registry.add_echelon("late", "e", flows=[{"flow_id": "f", "src": "h2", "dst": "h9", "size_bytes": 9}])
    second = Api(SchedulingService(registry, None), "t" * 32)
    for name in ("jobs", "flows", "echelons"):
        status, body = get(second, f"/v1/{name}?cursor={pages[name]['next_cursor']}")
        assert status == 200, body
        rest = [item["job_id"] for item in json.loads(body)[name]]
        assert rest == ["j3", "j5", "j6", "late"], (name, rest)
    status, body = get(second, f"/v1/jobs?cursor={gone}")
    assert status == 400 and json.loads(body)["error"]["field"] == "cursor"
    assert "restart" in json.loads(body)["error"]["problem"]
    registry.store.close()
