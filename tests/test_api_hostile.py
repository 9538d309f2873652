"""The API against a hostile client: times off the controller's clock, request smuggling, HEAD, query
parameters, oversize chunks, EchelonFlows declared empty, aborted jobs, and refused server starts.

Every test drives the real API server (eventlet, in its own thread and hub) over real sockets, as the
agents do (``tests/api_helpers.py``'s ``ServedApi``); the standalone server's refused starts run it as a
process.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
import time

import pytest

from controller import views
from controller.client import ApiClientError
from controller.registry import CLOCK_SKEW_S
from controller.store import open_registry
from echelonflow.topology import fattree
from tests.api_helpers import ServedApi, flows
from tests.controller_helpers import TOKEN
from tests.helpers import ROOT


@pytest.fixture()
def served(tmp_path):
    s = ServedApi(tmp_path)
    yield s
    s.stop()


def _refused(client, method: str, path: str, body=None, auth: bool = True) -> ApiClientError:
    with pytest.raises(ApiClientError) as info:
        client.request(method, path, body, auth=auth)
    return info.value


def _unchanged(served, call) -> ApiClientError:
    """``call()`` is refused and leaves the registry as it was."""
    before, version = copy.deepcopy(views.dump(served.registry)), served.registry.version
    with pytest.raises(ApiClientError) as info:
        call()
    assert views.dump(served.registry) == before and served.registry.version == version
    return info.value


# --------------------------------------------------------------------------- 3: times and the clock
def test_times_ahead_of_the_clock_or_before_the_job_are_refused_naming_the_field(served):
    c = served.unix
    c.register_job("j")
    c.register_echelon("j", "e", [{"flow_id": "f", "src": "h1", "dst": "h5", "size_bytes": 1000},
                                  {"flow_id": "g", "src": "h2", "dst": "h6", "size_bytes": 1000,
                                   "offset_s": 0.5}])
    now = time.time()
    for start_s in (4e9, now + 60, 0.0, 1.0, now - 3600):
        err = _unchanged(served, lambda s=start_s: c.flow_started("j", "f", 40000, 5201, start_s=s))
        assert (err.status, err.field) == (400, "start_s"), err
    assert c.flow("j", "f")["state"] == "declared" and c.echelon("j", "e")["reference_s"] is None
    # the same host's clock, a moment ago or within the skew ahead: accepted
    start_s = time.time() - 0.5
    assert c.flow_started("j", "f", 40000, 5201, start_s=start_s)["flow"]["start_s"] == start_s
    assert c.echelon("j", "e")["reference_s"] == start_s
    for finish_s in (time.time() + 60, start_s - 1.0):
        err = _unchanged(served, lambda s=finish_s: c.flow_finished("j", "f", finish_s=s))
        assert (err.status, err.field) == (400, "finish_s"), err
    # a start reported a little ahead (a remote agent's clock): the default finish is not before it
    ahead_s = time.time() + CLOCK_SKEW_S / 2
    c.flow_started("j", "g", 40001, 5202, start_s=ahead_s)
    assert c.flow_finished("j", "g")["flow"]["finish_s"] >= ahead_s
    assert c.flow_finished("j", "f")["flow"]["state"] == "finished"


def test_an_abort_is_checked_against_the_clock_and_its_flows_starts(served):
    c = served.unix
    c.register_job("j")
    c.register_echelon("j", "e", flows(("f", "h1", "h5", 1000), ("g", "h2", "h6", 1000)))
    start_s = time.time() - 1.0
    c.flow_started("j", "f", 40000, 5201, start_s=start_s)
    for at_s, problem in ((1.0, "registered"), (time.time() + 60, "ahead"), (start_s - 0.5, "start")):
        err = _unchanged(served, lambda a=at_s: c.abort_job("j", at_s=a))
        assert (err.status, err.field) == (400, "at_s") and problem in err.problem, err
    assert c.flow("j", "f")["state"] == "active"
    assert sorted(c.abort_job("j", at_s=start_s + 0.5)["aborted"]) == ["f", "g"]
    assert c.flow("j", "f")["finish_s"] == start_s + 0.5


# --------------------------------------------------------------------------- 9: an EchelonFlow declared empty
def test_an_echelonflow_declared_without_flows_takes_its_kind_from_its_first_flows(served, tmp_path):
    c = served.unix
    c.register_job("j")
    assert c.register_echelon("j", "stag", [])["kind"] is None
    added = c.add_flows("j", "stag", [{"flow_id": "a", "src": "h1", "dst": "h5", "size_bytes": 10,
                                       "offset_s": 0.0},
                                      {"flow_id": "b", "src": "h2", "dst": "h6", "size_bytes": 10,
                                       "offset_s": 0.2}])
    assert [f["offset_s"] for f in added["flows"]] == [0.0, 0.2]
    assert c.echelon("j", "stag")["kind"] == "staggered"
    # the first flows decide: all offsets 0 make a coflow, which then refuses an offset
    c.register_echelon("j", "co", [])
    c.add_flows("j", "co", flows(("c", "h1", "h5", 10)))
    assert c.echelon("j", "co")["kind"] == "coflow"
    err = _unchanged(served, lambda: c.add_flows("j", "co", [
        {"flow_id": "d", "src": "h1", "dst": "h5", "size_bytes": 10, "offset_s": 1.0}]))
    assert (err.status, err.field) == (400, "flows[0].offset_s")
    # a declared kind is kept as declared
    c.register_echelon("j", "given", [], kind="staggered")
    c.add_flows("j", "given", flows(("e", "h1", "h5", 10)))
    assert c.echelon("j", "given")["kind"] == "staggered"


def test_an_undecided_kind_survives_a_restart_and_is_decided_after_it(tmp_path):
    path, topo = str(tmp_path / "reg.sqlite"), fattree(20e6, 4)
    first = open_registry(topo, path)
    first.add_job("j")
    first.add_echelon("j", "e")
    first.store.close()
    second = open_registry(topo, path)
    assert second.echelons["j/e"].kind is None
    second.add_flows("j", "e", [{"flow_id": "a", "src": "h1", "dst": "h2", "size_bytes": 5, "offset_s": 1.0}])
    second.store.close()
    assert open_registry(topo, path).echelons["j/e"].kind == "staggered"


# --------------------------------------------------------------------------- 10: aborted is for good
def test_an_aborted_job_refuses_new_echelonflows_and_flows(served, tmp_path):
    c = served.unix
    c.register_job("j")
    c.register_echelon("j", "e", flows(("f", "h1", "h5", 1000)))
    c.abort_job("j")
    assert c.job("j")["aborted_s"] == pytest.approx(time.time(), abs=5)
    for call in (lambda: c.register_echelon("j", "e2", flows(("g", "h1", "h5", 1000))),
                 lambda: c.register_echelon("j", "e3", []),
                 lambda: c.add_flows("j", "e", flows(("h", "h2", "h6", 1000)))):
        err = _unchanged(served, call)
        assert (err.status, err.field) == (409, "job_id") and "'j'" in err.problem, err
    assert c.abort_job("j")["aborted"] == []  # again: nothing left, nothing changes
    assert c.flows(state="active") == []


def test_an_aborted_job_stays_aborted_after_a_restart(tmp_path):
    path, topo = str(tmp_path / "reg.sqlite"), fattree(20e6, 4)
    first = ServedApi(tmp_path, registry=open_registry(topo, path), name="a.sock")
    try:
        first.unix.register_job("j")
        first.unix.register_echelon("j", "e", flows(("f", "h1", "h5", 1000)))
        first.unix.abort_job("j")
        registered_s = first.unix.job("j")["registered_s"]
    finally:
        first.stop()
    second = ServedApi(tmp_path, registry=open_registry(topo, path), name="b.sock")
    try:
        assert second.unix.job("j")["registered_s"] == registered_s
        err = _refused(second.unix, "POST", "/jobs/j/echelons", {"echelon_id": "e2"})
        assert (err.status, err.field) == (409, "job_id")
    finally:
        second.stop()


# --------------------------------------------------------------------------- raw HTTP
def _exchange(served, data: bytes, wait_s: float = 3.0) -> tuple[bytes, float]:
    """Send ``data`` on one TCP connection, read until the server closes it (or ``wait_s`` of silence);
    the bytes and the seconds until the first answer byte."""
    started = time.monotonic()
    first_s = None
    with socket.create_connection(("127.0.0.1", served.server.port), timeout=wait_s) as sock:
        sock.sendall(data)
        answer = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                if first_s is None:
                    first_s = time.monotonic() - started
                answer += chunk
        except socket.timeout:
            pass
    return answer, first_s if first_s is not None else float("inf")


def _post(path: bytes, headers: bytes, body: bytes) -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
            + b"\r\nContent-Type: application/json\r\n" + headers + b"\r\n" + body)


def _answers(raw: bytes) -> list[tuple[int, dict]]:
    """The (status, JSON body) of each response in ``raw`` (the server answers JSON with a length)."""
    out = []
    while raw:
        head, rest = raw.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        length = int(_header(head, b"Content-Length"))
        out.append((int(lines[0].split()[1]), json.loads(rest[:length])))
        raw = rest[length:]
    return out


# --------------------------------------------------------------------------- 6: request smuggling
def test_two_different_content_lengths_are_refused_and_nothing_runs(served):
    first = b'{"job_id":"a"}'
    smuggled = _post(b"/v1/jobs", b"Content-Length: 21\r\n", b'{"job_id":"smuggled"}')
    data = _post(b"/v1/jobs", b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(first),
                                                                               len(first) + len(smuggled)),
                 first + smuggled)
    answer, _ = _exchange(served, data)
    answers = [(status, body["error"]["field"]) for status, body in _answers(answer)]
    assert answers == [(400, "Content-Length")]
    assert served.registry.jobs == {}


@pytest.mark.parametrize("headers, field", [
    (b"Content-Length: 14\r\nTransfer-Encoding: chunked\r\n", "Content-Length"),
    (b"Transfer-Encoding: chunked\r\nContent-Length: 14\r\n", "Content-Length"),
    (b"Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding"),
    (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "Transfer-Encoding"),
    (b"Content-Length: +14\r\n", "Content-Length"),
    (b"Content-Length: 1_4\r\n", "Content-Length"),
])
def test_ambiguous_body_framing_is_refused(served, headers, field):
    body = b"e\r\n" + b'{"job_id":"a"}' + b"\r\n0\r\n\r\n" if b"chunked" in headers else b'{"job_id":"a"}'
    answer, _ = _exchange(served, _post(b"/v1/jobs", headers, body))
    assert [(status, b["error"]["field"]) for status, b in _answers(answer)] == [(400, field)], answer
    assert served.registry.jobs == {}


def test_the_same_content_length_twice_is_one_length(served):
    body = b'{"job_id":"a"}'
    answer, _ = _exchange(served, _post(b"/v1/jobs", b"Content-Length: 14\r\nContent-Length: 14\r\n"
                                                     b"Connection: close\r\n", body))
    assert [status for status, _ in _answers(answer)] == [201] and "a" in served.registry.jobs


# --------------------------------------------------------------------------- 14: an oversize chunk
def test_a_chunk_announcing_more_than_the_limit_is_refused_at_once(served):
    limit = served.api.max_body_bytes
    data = _post(b"/v1/jobs", b"Transfer-Encoding: chunked\r\n", b"%x\r\n" % (limit + 1) + b'{"job_id":')
    answer, first_s = _exchange(served, data, wait_s=8.0)
    assert [(status, b["error"]["field"]) for status, b in _answers(answer)] == [(413, "body")], answer
    assert first_s < 3.0  # not after the request deadline (10 s): at the chunk-size line
    assert served.registry.jobs == {}
    # chunks that together exceed it: refused at the one that does
    chunk = b"x" * (limit // 2)
    chunks = (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 2 + b"10\r\n"
    data = _post(b"/v1/jobs", b"Transfer-Encoding: chunked\r\n", chunks)
    answer, first_s = _exchange(served, data, wait_s=8.0)
    assert [status for status, _ in _answers(answer)] == [413] and first_s < 3.0


# --------------------------------------------------------------------------- 12: HEAD
def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    return head, rest


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


@pytest.mark.parametrize("path, status", [
    (b"/v1/health", 200), (b"/v1/jobs", 200), (b"/v1/rounds?limit=3", 200), (b"/v1/jobs/nope", 404),
    (b"/v1/jobs/j1/flows/f1/start", 405), (b"/v1/rounds?limit=1.5", 400), (b"/ui/", 200), (b"/ui/nope", 404),
    (b"/elsewhere", 404),
])
def test_head_answers_like_get_without_a_body_and_the_connection_stays_in_step(served, path, status):
    served.seed()
    with socket.create_connection(("127.0.0.1", served.server.port), timeout=5) as sock:
        sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        get_head, rest = _read_head(sock)
        get_length = int(_header(get_head, b"Content-Length"))
        while len(rest) < get_length:
            rest += sock.recv(65536)
        sock.sendall(b"HEAD " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n"
                     + b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")  # pipelined: must stay in step
        head, rest = _read_head(sock)
        assert head.split(b"\r\n")[0] == get_head.split(b"\r\n")[0] == b"HTTP/1.1 %d " % status + \
            get_head.split(b"\r\n")[0].split(b" ", 2)[2]
        assert _header(head, b"Content-Type") == _header(get_head, b"Content-Type")
        if _header(head, b"Connection") == b"close":
            return
        assert int(_header(head, b"Content-Length")) == get_length  # the GET's length, no body
        while b"\r\n\r\n" not in rest:
            rest += sock.recv(65536)
        assert rest.startswith(b"HTTP/1.1 200 "), rest[:100]  # the next answer follows at once


def test_allow_names_head_where_get_is_allowed(served):
    err = _refused(served.unix, "DELETE", "/health", auth=False)
    assert err.status == 405 and "HEAD" in err.problem


# --------------------------------------------------------------------------- 13: query parameters
GET_PATHS = ["/health", "/scheduler", "/flows", "/allocations?src=h1", "/topology", "/links", "/echelons",
             "/rounds", "/jobs", "/channels", "/channels/c1", "/jobs/j1", "/jobs/j1/echelons",
             "/jobs/j1/echelons/e1", "/jobs/j1/flows", "/jobs/j1/flows/f1", "/jobs/j1/flows/f1/allocation"]
POSTS = [("POST", "/jobs", {"job_id": "j9"}), ("POST", "/jobs/j1/echelons", {"echelon_id": "e9"}),
         ("POST", "/jobs/j1/echelons/e1/flows", {"flows": flows(("f9", "h1", "h2", 5))}),
         ("POST", "/jobs/j1/flows/f2/progress", {"bytes_sent": 10}),
         ("POST", "/jobs/j1/flows/f1/start", {"src_port": 40009, "dst_port": 5209}),
         ("PUT", "/scheduler", {"scheduler": "fair"}), ("POST", "/jobs/j1/abort", {})]


@pytest.mark.parametrize("path", GET_PATHS)
def test_an_unknown_query_parameter_is_refused_on_every_read(served, path):
    served.seed()
    sep = "&" if "?" in path else "?"
    err = _refused(served.unix, "GET", f"{path}{sep}colour=red", auth=False)
    assert (err.status, err.field) == (400, "colour"), err
    served.unix.request("GET", path)  # and without it the read is fine


@pytest.mark.parametrize("method, path, body", POSTS, ids=[f"{m} {p}" for m, p, _ in POSTS])
def test_an_unknown_query_parameter_is_refused_on_every_write(served, method, path, body):
    served.seed()
    err = _unchanged(served, lambda: served.unix.request(method, f"{path}?colour=red", body, auth=True))
    assert (err.status, err.field) == (400, "colour"), err


@pytest.mark.parametrize("query, field", [
    ("/rounds?limit=1.5", "limit"), ("/rounds?limit=1e2", "limit"), ("/rounds?limit=+5", "limit"),
    ("/rounds?limit=0x10", "limit"), ("/rounds?limit=", "limit"), ("/rounds?limit=101", "limit"),
    ("/rounds?limit=5&limit=6", "limit"), ("/allocations?src=h1&after=1.0", "after"),
    ("/allocations?src=h1&after=1e3", "after"), ("/echelons?recent_s=nan", "recent_s"),
    ("/echelons?recent_s=inf", "recent_s"), ("/echelons?recent_s=1_0", "recent_s"),
    ("/echelons?recent_s=-1", "recent_s"), ("/flows?state=active&state=finished", "state"),
    ("/flows?state", "query"), ("/flows?=x", "query"), ("/jobs?wait_s=1", "wait_s"),
])
def test_query_values_are_read_by_one_reader(served, query, field):
    err = _refused(served.unix, "GET", query, auth=False)
    assert (err.status, err.field) == (400, field), err


def test_query_values_the_clients_send_are_accepted(served):
    served.seed()
    assert len(served.unix.request("GET", "/rounds?limit=2")["rounds"]) <= 2
    assert served.unix.request("GET", "/echelons?recent_s=60")["echelons"]
    assert served.unix.request("GET", "/echelons?recent_s=1.5e1")["echelons"]
    assert served.unix.allocations("h2", after=0, wait_s=0.0)["allocations"]
    assert served.unix.flows(state="active")[0]["flow_id"] == "f2"
    assert served.unix.set_scheduler("echelon", wait_s=0.5)["scheduler"] == "echelon"
    err = _refused(served.unix, "PUT", "/scheduler?wait_s=0", {"scheduler": "fair"})
    assert (err.status, err.field) == (400, "wait_s")


# --------------------------------------------------------------------------- 11: a refused start
def _standalone(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.api_server", "--topology", "two_hosts", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def _listing(root) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() if p.is_file() else "" for p in sorted(root.rglob("*"))}


def test_a_refused_standalone_start_writes_nothing(tmp_path, occupied):
    token, plain = occupied.token, occupied.plain
    state = tmp_path / "state"
    state.mkdir()
    refusals = [
        (("--socket", str(plain)), "not a socket"),
        (("--port", str(occupied.port), "--socket", str(tmp_path / "api.sock")), "cannot listen"),
        (("--socket", str(plain / "api.sock")), "not a directory"),
        (("--interval-s", "0", "--socket", str(tmp_path / "api.sock")), "--interval-s"),
        (("--store", str(state), "--socket", str(tmp_path / "api.sock")), "is a directory"),
    ]
    for extra, reason in refusals:
        before = _listing(tmp_path)
        proc = _standalone(tmp_path, "--port", "0", "--store", str(state / "registry.sqlite"),
                           "--token-file", str(token), *extra)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and reason in lines[0], proc.stderr
        assert _listing(tmp_path) == before, extra  # no token rewritten, no store, no lock files
