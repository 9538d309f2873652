"""Done jobs leave memory after their retention, stay readable from the store until the second one, and
``DELETE /v1/jobs/{job}`` removes a done job at once; a restart loads only what memory held.  A real
registry with its SQLite store, served over real HTTP, on a clock the test moves."""

from __future__ import annotations

import pytest

from controller.client import ApiClientError
from controller.registry_errors import ConflictError
from controller.retention import Retention
from controller.store import open_registry
from echelonflow.topology import fattree
from tests.api_helpers import ServedApi


def _served(tmp_path, retention: Retention) -> ServedApi:
    """The API over a registry with its store and ``retention``, on the test's clock from 1,000 s."""
    registry = open_registry(fattree(20e6, 4), str(tmp_path / "registry.sqlite"), retention)
    return ServedApi(tmp_path, registry, now_s=1000.0)


@pytest.fixture()
def served(tmp_path):
    s = _served(tmp_path, Retention(memory_jobs=100, memory_s=100.0, store_s=1000.0))
    yield s
    s.stop()


def _listed(client):
    return [job["job_id"] for job in client.jobs()]


def _refused(call):
    with pytest.raises(ApiClientError) as info:
        call()
    return info.value


def test_a_done_job_leaves_memory_then_the_store(served):
    c = served.unix
    served.run_job("old")
    c.register_job("live")
    served.tick(1050.0)
    assert _listed(c) == ["old", "live"]  # done 50 s ago: still in memory
    served.tick(1101.0)
    assert _listed(c) == ["live"] and "old" not in served.registry.jobs
    job = c.job("old")  # readable from the store, as it was
    assert job["archived"] is True and job["echelons"] == ["e"]
    assert [(f["flow_id"], f["state"]) for f in c.flows("old")] == [("f0", "finished"), ("f1", "finished")]
    assert c.flow("old", "f1")["path"][0] == "h1" and c.echelons("old")[0]["echelon_id"] == "e"
    assert c.allocation("old", "f0")["state"] == "finished"
    assert c.health()["counts"]["finished"] == 0  # memory holds none of its flows
    for call in (lambda: c.register_job("old"), lambda: c.register_echelon("old", "e2", [])):
        err = _refused(call)
        assert (err.status, err.field) == (409, "job_id") and "archived" in err.problem
    served.tick(1999.0)
    assert c.job("old")["archived"] is True  # the store keeps it 1,000 s after it was done
    served.tick(2060.0)  # deleted at the next check (at most a minute apart)
    err = _refused(lambda: c.job("old"))
    assert (err.status, err.field) == (404, "job_id")
    c.register_job("old")  # the id is free again


def test_memory_keeps_at_most_the_newest_done_jobs(tmp_path):
    served = _served(tmp_path, Retention(memory_jobs=2, memory_s=1e6, store_s=1e7))
    try:
        for name in ("a", "b", "c"):
            served.run_job(name)
        assert _listed(served.unix) == ["b", "c"]
        assert served.unix.job("a")["archived"] is True
    finally:
        served.stop()


def test_delete_removes_a_done_job_and_refuses_a_live_one(served):
    c = served.unix
    c.register_job("live")
    c.register_echelon("live", "e", [{"flow_id": "f", "src": "h1", "dst": "h2", "size_bytes": 10}])
    err = _refused(lambda: c.delete_job("live"))
    assert (err.status, err.field) == (409, "job_id")
    served.run_job("done")
    assert c.delete_job("done")["deleted"] is True
    assert _listed(c) == ["live"]
    err = _refused(lambda: c.job("done"))
    assert err.status == 404
    err = _refused(lambda: c.delete_job("done"))
    assert (err.status, err.field) == (404, "job_id")
    c.request("POST", "/jobs/live/abort", {}, auth=True)
    assert c.delete_job("live")["job_id"] == "live"  # aborted: done
    served.run_job("archived")
    served.tick(1200.0)
    assert c.job("archived")["archived"] is True
    c.delete_job("archived")
    assert _refused(lambda: c.job("archived")).status == 404
    err = _refused(lambda: c.request("DELETE", "/jobs/x"))  # without the token
    assert err.status == 401


def test_a_restart_loads_only_what_memory_held(tmp_path):
    path = tmp_path / "registry.sqlite"
    retention = Retention(memory_jobs=100, memory_s=100.0, store_s=1000.0)
    served = _served(tmp_path, retention)
    try:
        served.run_job("old")
        served.tick(1150.0)
        served.run_job("recent")
        served.unix.register_job("live")
    finally:
        served.stop()
    registry = open_registry(served.registry.topology, str(path), retention)
    try:
        assert list(registry.jobs) == ["recent", "live"]
        assert registry.index.counts["finished"] == 2 and len(registry.flows) == 2
        assert registry.store.archived("old") == 1000.0
        registry.expire(1251.0)  # "recent", done at 1150, is due now: its done time came back with it
        assert list(registry.jobs) == ["live"]
    finally:
        registry.store.close()


def test_the_standalone_server_takes_the_retention_settings(tmp_path):
    """``python -m controller.api_server --retain-done-s`` (as ``echelon controller`` takes every setting):
    a bad value is one line naming the option, exit 2, nothing written."""
    import subprocess
    import sys

    token = tmp_path / "token"
    proc = subprocess.run([sys.executable, "-m", "controller.api_server", "--port", "0", "--socket",
                           str(tmp_path / "s.sock"), "--token-file", str(token), "--retain-done-s", "soon"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --retain-done-s: must be a number")
    assert list(tmp_path.iterdir()) == []


def _iteration(c, job_id, k, src="h1", dst="h5"):
    """One iteration of a long-lived job: EchelonFlow ``i{k}`` of two flows, started and finished now."""
    c.register_echelon(job_id, f"i{k}", [{"flow_id": f"i{k}.f{i}", "src": src, "dst": dst, "size_bytes": 1000}
                                          for i in range(2)])
    for i in range(2):
        c.flow_started(job_id, f"i{k}.f{i}", 41000 + i, 5201)
    for i in range(2):
        c.flow_finished(job_id, f"i{k}.f{i}")


def test_a_live_jobs_done_echelonflows_leave_memory_then_the_store(served):
    """A job that stays live for weeks (here an EchelonFlow with a flow never started keeps it live) runs
    iteration after iteration: each finished EchelonFlow leaves memory ``memory_s`` after its last flow
    ended, stays readable from the store until ``store_s``, and is then deleted; the job stays live."""
    c = served.unix
    c.register_job("long")
    c.register_echelon("long", "keep", [{"flow_id": "k", "src": "h2", "dst": "h6", "size_bytes": 10}])
    _iteration(c, "long", 0)
    served.tick(1050.0)
    _iteration(c, "long", 1)
    served.tick(1101.0)  # i0 done at 1000: 101 s ago
    registry = served.registry
    assert "long/i0" not in registry.echelons and "long/i0.f0" not in registry.flows
    assert [e["echelon_id"] for e in c.echelons("long")] == ["keep", "i1"]
    assert [f["flow_id"] for f in c.flows("long")] == ["k", "i1.f0", "i1.f1"]
    assert c.job("long")["archived"] is False and c.job("long")["echelons"] == ["keep", "i1"]
    assert c.health()["counts"]["finished"] == 2
    echelon = c.echelon("long", "i0")  # read from the store, as it was
    assert [(f["flow_id"], f["state"]) for f in echelon["flows"]] == [("i0.f0", "finished"),
                                                                     ("i0.f1", "finished")]
    assert c.flow("long", "i0.f1")["path"][0] == "h1"
    assert c.allocation("long", "i0.f0")["state"] == "finished"
    for call in (lambda: c.register_echelon("long", "i0", []),
                 lambda: c.register_echelon("long", "again", [{"flow_id": "i0.f0", "src": "h1",
                                                               "dst": "h5", "size_bytes": 9}]),
                 lambda: c.flow_finished("long", "i0.f0")):
        err = _refused(call)
        assert err.status == 409 and "archived" in err.problem, err
    served.tick(2020.0)  # i0 past its time in the store (done at 1000); i1 (done at 1050) archived
    assert _refused(lambda: c.echelon("long", "i0")).status == 404
    assert c.echelon("long", "i1")["flows"][0]["state"] == "finished"
    assert list(registry.jobs) == ["long"] and registry.index.counts["declared"] == 1


def test_memory_keeps_at_most_the_newest_done_echelonflows_and_a_restart_loads_only_those(tmp_path):
    path = tmp_path / "registry.sqlite"
    retention = Retention(memory_jobs=2, memory_s=1e6, store_s=1e7)
    served = ServedApi(tmp_path, open_registry(fattree(20e6, 4), str(path), retention), now_s=1000.0)
    try:
        c = served.unix
        c.register_job("long")
        c.register_echelon("long", "keep", [{"flow_id": "k", "src": "h2", "dst": "h6", "size_bytes": 10}])
        for k in range(5):
            _iteration(c, "long", k)
        assert [e["echelon_id"] for e in c.echelons("long")] == ["keep", "i3", "i4"]
        assert c.echelon("long", "i0")["flows"][1]["flow_id"] == "i0.f1"
    finally:
        served.stop()
    registry = open_registry(served.registry.topology, str(path), retention)
    try:
        assert list(registry.echelons) == ["long/keep", "long/i3", "long/i4"]
        assert sorted(registry.flows) == ["long/i3.f0", "long/i3.f1", "long/i4.f0", "long/i4.f1", "long/k"]
        with pytest.raises(ConflictError, match="archived"):  # the archived ids stay taken
            registry.add_echelon("long", "i0")
        with pytest.raises(ConflictError, match="archived"):
            registry.add_echelon("long", "new", flows=[{"flow_id": "i1.f0", "src": "h1", "dst": "h5"}])
    finally:
        registry.store.close()
