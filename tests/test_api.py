"""The real API server (eventlet.wsgi on a loopback TCP port and a Unix socket) through the real client.

Every class of bad input is sent over a real socket and must come back as a 4xx JSON error naming the
field, with the registry unchanged afterwards.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest

from controller import views
from controller.api_server import ApiServer, ServerError, ServerLimits, run_in_thread
from controller.auth import read_token, write_token
from controller.client import ApiClientError, EchelonClient
from controller.store import open_registry
from echelonflow.topology import fattree
from tests.api_helpers import ServedApi, flows
from tests.conftest import need, need_tool
from tests.controller_helpers import TOKEN
from tests.helpers import ROOT


@pytest.fixture()
def served(tmp_path):
    s = ServedApi(tmp_path)
    yield s
    s.stop()


def test_lifecycle_over_the_unix_socket_and_tcp(served):
    c = served.unix
    assert c.health()["status"] == "ok"
    job = c.register_job("j1", 2.0)
    assert job == {"job_id": "j1", "weight": 2.0, "registered_s": pytest.approx(time.time(), abs=5),
                   "aborted_s": None, "echelons": []}
    t0 = job["registered_s"]
    ech = c.register_echelon("j1", "e1", flows(("f1", "h1", "h5", 10**6)))
    assert ech["kind"] == "coflow" and ech["flows"][0]["state"] == "declared"
    added = c.add_flows("j1", "e1", [{"flow_id": "f2", "src": "h2", "dst": "h5", "size_bytes": 10**6}])
    assert [f["flow_id"] for f in added["flows"]] == ["f2"]
    started = served.tcp.flow_started("j1", "f1", 40000, 5201, start_s=t0 + 0.5)
    assert started["flow"]["state"] == "active" and started["flow"]["src_ip"] == "10.0.0.2"
    alloc = started["allocation"]
    assert alloc["enforced"] and alloc["queue"] == 1 and alloc["rate_bps"] == pytest.approx(20e6)
    assert ("install", "j1/f1") in served.sink.told()
    assert c.allocation("j1", "f1") == served.tcp.allocation("j1", "f1")
    assert c.flow_progress("j1", "f1", 4000)["flow"]["bytes_sent"] == 4000
    assert c.flows(state="active")[0]["flow_id"] == "f1"
    assert [f["flow_id"] for f in c.flows("j1")] == ["f1", "f2"]
    assert c.echelon("j1", "e1")["reference_s"] == t0 + 0.5
    assert c.flow_finished("j1", "f1", finish_s=t0 + 1.5)["flow"]["state"] == "finished"
    assert ("remove", "j1/f1") in served.sink.told()
    assert c.jobs()[0]["echelons"] == ["e1"] and c.job("j1")["weight"] == 2.0
    assert c.echelons("j1")[0]["echelon_id"] == "e1"
    assert c.flow("j1", "f1")["bytes_sent"] == 10**6
    assert c.health()["counts"] == {"jobs": 1, "echelons": 1, "declared": 1, "active": 0, "finished": 1,
                                     "aborted": 0}


def test_channel_lifecycle(served):
    c = served.unix
    c.register_job("j")
    c.register_echelon("j", "e", flows(("f", "h1", "h5", 1000), ("g", "h1", "h5", 1000)))
    answer = c.register_channel("c1", "h1", "h5", 40001, 46000, wait_s=1.0)
    assert answer["channel"]["path"] == list(served.registry.topology.pair_path("h1", "h5"))
    assert ("install", "channel:c1") in served.sink.told()  # held before any flow uses it
    started = c.flow_started("j", "f", channel_id="c1")
    assert (started["flow"]["channel_id"], started["flow"]["src_port"]) == ("c1", 40001)
    assert c.channels()[0]["flow"] == "j/f"
    with pytest.raises(ApiClientError) as busy:
        c.flow_started("j", "g", channel_id="c1")
    assert (busy.value.status, busy.value.field) == (409, "channel_id")
    c.flow_finished("j", "f")
    c.flow_started("j", "g", channel_id="c1")  # the same connection, the next flow
    c.flow_finished("j", "g")
    assert c.remove_channel("c1")["channel"]["channel_id"] == "c1"
    assert c.channels() == [] and ("remove", "channel:c1") in served.sink.told()


def test_scheduler_get_and_switch(served):
    assert served.unix.scheduler()["scheduler"] == "echelon"
    answer = served.unix.set_scheduler("fair")
    assert answer["scheduler"] == "fair" and answer["enforces"] is False
    assert served.registry.settings["scheduler"] == "fair"
    with pytest.raises(ApiClientError) as info:
        served.unix.set_scheduler("pfabric")
    assert info.value.status == 400 and info.value.field == "scheduler" and "echelon" in info.value.problem
    assert served.tcp.scheduler()["scheduler"] == "fair"


CHANNEL = {"channel_id": "c2", "src": "h1", "dst": "h5", "src_port": 40002, "dst_port": 46000}
BIG = b'{"job_id": "' + b"x" * (70 * 1024) + b'"}'

# (method, path, raw body or JSON-able body, headers, expected status, expected field)
BAD = [
    ("POST", "/jobs", b"{not json", {}, 400, "body"),
    ("POST", "/jobs", b"", {}, 400, "body"),
    ("POST", "/jobs", b"\xff\xfe", {}, 400, "body"),
    ("POST", "/jobs", b'{"job_id": NaN}', {}, 400, "body"),
    ("POST", "/jobs", b'{"job_id": "j2", "job_id": "j3"}', {}, 400, "body"),
    ("POST", "/jobs", [1, 2], {}, 400, "body"),
    ("POST", "/jobs", {}, {}, 400, "job_id"),
    ("POST", "/jobs", {"job_id": "j2", "colour": "red"}, {}, 400, "colour"),
    ("POST", "/jobs", {"job_id": 5}, {}, 400, "job_id"),
    ("POST", "/jobs", {"job_id": "j2", "weight": True}, {}, 400, "weight"),
    ("POST", "/jobs", {"job_id": "j2", "weight": -1}, {}, 400, "weight"),
    ("POST", "/jobs", {"job_id": "j1"}, {}, 409, "job_id"),
    ("POST", "/jobs", BIG, {}, 413, "body"),
    ("POST", "/jobs", {"job_id": "j2"}, {"Content-Type": "text/plain"}, 415, "Content-Type"),
    ("POST", "/jobs/nope/echelons", {"echelon_id": "e"}, {}, 404, "job_id"),
    ("POST", "/jobs/j1/echelons", {"echelon_id": "e1"}, {}, 409, "echelon_id"),
    ("POST", "/jobs/j1/echelons", {"echelon_id": "e2", "flows": flows(("a", "h1", "h2", 0))}, {}, 400,
     "flows[0].size_bytes"),
    ("POST", "/jobs/j1/echelons", {"echelon_id": "e2", "flows": flows(("a", "h1", "h2", -10))}, {}, 400,
     "flows[0].size_bytes"),
    ("POST", "/jobs/j1/echelons", {"echelon_id": "e2", "flows": flows(("a", "h1", "h2", "10"))}, {}, 400,
     "flows[0].size_bytes"),
    ("POST", "/jobs/j1/echelons", {"echelon_id": "e2", "flows": flows(("a", "h1", "h2", False))}, {}, 400,
     "flows[0].size_bytes"),
    ("POST", "/jobs/j1/echelons",
     {"echelon_id": "e2", "flows": flows(("a", "h1", "h2", 5), ("b", "h1", "h77", 5))}, {}, 400,
     "flows[1].dst"),
    ("POST", "/jobs/j1/echelons", {"echelon_id": "e2", "flows": flows(("a", "h4", "h4", 5))}, {}, 400,
     "flows[0].dst"),
    ("POST", "/jobs/j1/echelons",
     {"echelon_id": "e2", "flows": flows(("a", "h1", "h2", 5), ("a", "h3", "h2", 5))}, {}, 409,
     "flows[1].flow_id"),
    ("POST", "/jobs/j1/echelons/e1/flows", {"flows": flows(("f1", "h1", "h2", 5))}, {}, 409,
     "flows[0].flow_id"),
    ("POST", "/jobs/j1/echelons/e9/flows", {"flows": flows(("z", "h1", "h2", 5))}, {}, 404, "echelon_id"),
    ("POST", "/jobs/j1/flows/f9/start", {"src_port": 1, "dst_port": 2}, {}, 404, "flow_id"),
    ("POST", "/jobs/j1/flows/f1/start", {"src_port": 1}, {}, 400, "dst_port"),
    ("POST", "/jobs/j1/flows/f1/start", {"src_port": 1.5, "dst_port": 2}, {}, 400, "src_port"),
    ("POST", "/jobs/j1/flows/f1/start", {"src_port": 1, "dst_port": 2, "start_s": "now"}, {}, 400, "start_s"),
    ("POST", "/jobs/j1/flows/f2/start", {"src_port": 1, "dst_port": 2}, {}, 409, "flow_id"),
    ("POST", "/jobs/j1/flows/f2/progress", {"bytes_sent": 10**9}, {}, 400, "bytes_sent"),
    ("POST", "/jobs/j1/flows/f1/progress", {"bytes_sent": 10}, {}, 409, "flow_id"),
    ("POST", "/jobs/j1/flows/f2/finish", {"finish_s": 1.0}, {}, 400, "finish_s"),  # before its start
    ("PUT", "/scheduler", {"scheduler": "nope"}, {}, 400, "scheduler"),
    ("GET", "/flows?state=running", None, {}, 400, "state"),
    ("GET", "/flows?colour=1", None, {}, 400, "colour"),
    ("GET", "/jobs/nope", None, {}, 404, "job_id"),
    ("GET", "/jobs/j1/flows/nope/allocation", None, {}, 404, "flow_id"),
    ("GET", "/nothing-here", None, {}, 404, "path"),
    ("DELETE", "/jobs", None, {}, 405, "method"),
    ("GET", "/jobs/j1/flows/f1/start", None, {}, 405, "method"),
    # hostile input: nesting, huge integers, ids with a final newline
    ("POST", "/jobs", b"[" * 10000 + b"]" * 10000, {}, 400, "body"),
    ("POST", "/jobs", b'{"job_id": ' + b"[" * 40 + b"]" * 40 + b"}", {}, 400, "body"),
    ("POST", "/jobs", b'{"a":' * 10000 + b"1" + b"}" * 10000, {}, 400, "body"),
    ("POST", "/jobs", {"job_id": "j2", "weight": 10**400}, {}, 400, "weight"),
    ("POST", "/jobs", {"job_id": "a\n"}, {}, 400, "job_id"),
    ("POST", "/jobs/j1/echelons", {"echelon_id": "e2", "flows": [
        {"flow_id": "a", "src": "h1", "dst": "h2", "size_bytes": 5, "offset_s": 10**400}]}, {}, 400,
     "flows[0].offset_s"),
    ("POST", "/jobs/j1/echelons", {"echelon_id": "e2", "flows": [
        {"flow_id": "a", "src": "h1", "dst": "h2", "size_bytes": 5, "start_offset_s": -10**400}]}, {}, 400,
     "flows[0].start_offset_s"),
    ("POST", "/jobs/j1/echelons", {"echelon_id": "e2", "flows": flows(("a", "h1", "h2", 10**400))}, {}, 400,
     "flows[0].size_bytes"),
    ("POST", "/jobs/j1/echelons", {"echelon_id": "e2\n"}, {}, 400, "echelon_id"),
    ("POST", "/jobs/j1/flows/f1/start", {"src_port": 1, "dst_port": 2, "start_s": 10**400}, {}, 400,
     "start_s"),
    ("POST", "/jobs/j1/flows/f2/finish", {"finish_s": 10**400}, {}, 400, "finish_s"),
    ("GET", "/jobs/j1%0A", None, {}, 400, "job_id"),
    ("GET", "/jobs%0A", None, {}, 404, "path"),
    # channels (persistent connections)
    ("POST", "/channels", dict(CHANNEL, channel_id="c1"), {}, 409, "channel_id"),
    ("POST", "/channels", dict(CHANNEL, src_port=40001), {}, 409, "src_port"),
    ("POST", "/channels", dict(CHANNEL, dst="h1"), {}, 400, "dst"),
    ("POST", "/channels", dict(CHANNEL, dst="h99"), {}, 400, "dst"),
    ("POST", "/channels", dict(CHANNEL, path=["h1", "e1", "h5"]), {}, 400, "path"),
    ("POST", "/channels", dict(CHANNEL, colour="red"), {}, 400, "colour"),
    ("POST", "/channels", {"channel_id": "c2"}, {}, 400, "src"),
    ("GET", "/channels/c9", None, {}, 404, "channel_id"),
    ("DELETE", "/channels/c9", None, {}, 404, "channel_id"),
    ("POST", "/jobs/j1/flows/f1/start", {"channel_id": "c9"}, {}, 404, "channel_id"),
    ("POST", "/jobs/j1/flows/f1/start", {"channel_id": "c1", "src_port": 1}, {}, 400, "src_port"),
    ("POST", "/jobs/j1/flows/f2/start", {"channel_id": "c1"}, {}, 409, "flow_id"),
]


@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "field"), BAD,
                         ids=[f"{m} {p} {s} {f}" for m, p, _b, _h, s, f in BAD])
def test_bad_request_is_a_json_error_and_changes_nothing(served, method, path, body, headers, status, field):
    served.seed()
    before, version = copy.deepcopy(views.dump(served.registry)), served.registry.version
    calls = list(served.sink.calls)
    raw = body if isinstance(body, bytes) else None
    payload = None if isinstance(body, bytes) else body
    needs_auth = method in ("POST", "PUT", "DELETE")
    for client in (served.unix, served.tcp):
        with pytest.raises(ApiClientError) as info:
            client.request(method, path, payload, auth=needs_auth, raw=raw, headers=headers)
        assert (info.value.status, info.value.field) == (status, field), info.value
        assert info.value.problem
    assert views.dump(served.registry) == before and served.registry.version == version
    assert served.sink.calls == calls


@pytest.mark.parametrize("token", [None, "wrong", ""])
def test_state_changes_need_the_token(served, token):
    served.seed()
    before = copy.deepcopy(views.dump(served.registry))
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    attempts = (("/jobs", {"job_id": "j2"}), ("/jobs/j1/flows/f1/start", {"src_port": 1, "dst_port": 2}))
    for path, body in attempts:
        with pytest.raises(ApiClientError) as info:
            served.unix.request("POST", path, body, auth=False, headers=headers)
        assert (info.value.status, info.value.field) == (401, "Authorization")
    with pytest.raises(ApiClientError) as info:
        served.tcp.request("PUT", "/scheduler", {"scheduler": "fair"}, headers=headers)
    assert info.value.status == 401
    assert views.dump(served.registry) == before
    assert served.unix.request("GET", "/jobs")["jobs"]  # reads stay open


def test_raw_http_error_shape_and_headers(served):
    conn = http.client.HTTPConnection("127.0.0.1", served.server.port, timeout=5)
    conn.request("DELETE", "/v1/scheduler")
    resp = conn.getresponse()
    body = json.loads(resp.read())
    assert resp.status == 405 and resp.getheader("Allow") == "GET, HEAD, PUT"
    assert resp.getheader("Content-Type") == "application/json"
    assert set(body) == {"error"} and set(body["error"]) == {"field", "problem"}
    conn.request("POST", "/v1/jobs", body=b'{"job_id": "j"}', headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 401 and resp.getheader("WWW-Authenticate", "").startswith("Bearer")
    conn.close()


def test_oversized_body_without_content_length_is_refused(served):
    """Chunked upload: no Content-Length, the server must still stop at the limit."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(served.server.socket_path)
    chunk = b"x" * 8192
    head = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
            + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    sock.sendall(head + (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 10 + b"0\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
        data = sock.recv(65536)
        if not data:
            break
        answer += data
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413")
    assert served.registry.jobs == {}


def _raw_exchange(served, data: bytes, close_write: bool) -> bytes:
    """Send ``data`` over loopback TCP (optionally closing our side) and read the whole answer."""
    with socket.create_connection(("127.0.0.1", served.server.port), timeout=10) as sock:
        sock.sendall(data)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return answer
            answer += chunk


def test_truncated_body_is_refused_and_changes_nothing(served):
    """A client that announced 1000 bytes, sent 19 and gave up must not get its job created."""
    served.seed()
    before = copy.deepcopy(views.dump(served.registry))
    head = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    answer = _raw_exchange(served, head + b'{"job_id":"trunc2"}', close_write=True)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["field"] == "body" and "truncated" in error["problem"]
    assert views.dump(served.registry) == before and "trunc2" not in served.registry.jobs


def test_truncated_chunked_body_is_refused(served):
    head = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
            + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    body = b'{"job_id":"trunc3"}'
    answer = _raw_exchange(served, head + b"%x\r\n" % (len(body) + 50) + body, close_write=True)
    assert not answer.startswith(b"HTTP/1.1 2"), answer[:200]
    assert served.registry.jobs == {}


class Trickle:
    """TCP connections that each send ``head`` and then one more byte every ``every_s`` (slowloris)."""

    def __init__(self, port: int, count: int, head: bytes, every_s: float = 0.2) -> None:
        self.socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]
        for sock in self.socks:
            sock.sendall(head)
        self.every_s = every_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            for sock in self.socks:
                with contextlib.suppress(OSError):
                    sock.send(b"a")

    def answers(self, timeout_s: float) -> list[bytes | None]:
        """What each connection got until the server closed it (None: still open after ``timeout_s``)."""
        out: list[bytes | None] = []
        for sock in self.socks:
            sock.settimeout(timeout_s)
            data = b""
            try:
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                out.append(data)
            except socket.timeout:
                out.append(None)
            except OSError:
                out.append(data)
        return out

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for sock in self.socks:
            sock.close()


def test_slow_clients_cannot_starve_the_others(tmp_path):
    """Connections trickling a header byte every 0.2 s fill every slot of the listener; a request must
    still be answered: each request has ``request_timeout_s`` to arrive whole, then its slot is freed."""
    served = ServedApi(tmp_path, limits=ServerLimits(max_connections=4, request_timeout_s=1.0))
    slow = Trickle(served.server.port, 8, b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    try:
        client = EchelonClient(url=f"http://127.0.0.1:{served.server.port}", token=TOKEN, timeout_s=8)
        with client:
            assert client.health()["status"] == "ok"  # without the deadline: a timeout, the slots never free
        assert slow.answers(timeout_s=5) == [b""] * 8  # each closed without an answer
    finally:
        slow.close()
        served.stop()


def test_a_body_trickled_past_the_deadline_is_refused_and_changes_nothing(tmp_path):
    served = ServedApi(tmp_path, limits=ServerLimits(request_timeout_s=1.0))
    head = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n" + b'{"job_id": "slow"')
    slow = Trickle(served.server.port, 1, head, every_s=0.3)
    try:
        [answer] = slow.answers(timeout_s=5)  # closed after the answer: the rest of the body is not awaited
        assert answer is not None and answer.startswith(b"HTTP/1.1 400"), answer
        error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["field"] == "body" and "could not be read whole" in error["problem"], error
        assert served.registry.jobs == {}
    finally:
        slow.close()
        served.stop()


def test_a_request_after_a_long_idle_keep_alive_has_its_own_deadline(tmp_path):
    """The deadline of a request counts from its head's arrival, not from when the connection began
    waiting: an agent's keep-alive connection idle for nearly ``request_timeout_s`` whose next request
    arrived just in time had its body refused (HTTP 400 "could not be read whole", a k=8 emulation)."""
    served = ServedApi(tmp_path, limits=ServerLimits(request_timeout_s=1.0))
    body = json.dumps({"job_id": "late"}).encode()
    head = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\n\r\n")
    sock = socket.create_connection(("127.0.0.1", served.server.port), timeout=5)
    try:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(0.8)  # idle, within the keep-alive limit
        sock.sendall(head)
        time.sleep(0.4)  # the body follows after the connection's first deadline, within the request's own
        sock.sendall(body)
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 201"), answer[:300]
        assert "late" in served.registry.jobs
    finally:
        sock.close()
        served.stop()


def test_socket_and_token_file_are_root_only(tmp_path, served):
    mode = os.stat(served.server.socket_path).st_mode
    assert stat.S_ISSOCK(mode) and mode & 0o777 == 0o600
    token_path = str(tmp_path / "sub" / "token")
    write_token(token_path, TOKEN)
    assert os.stat(token_path).st_mode & 0o777 == 0o600
    client = EchelonClient(socket_path=served.server.socket_path, token_file=token_path)
    assert read_token(token_path) == TOKEN
    assert client.register_job("via-file")["job_id"] == "via-file"
    client.close()


def test_socket_path_rules(tmp_path, served):
    # a live socket belongs to someone else: refuse, and leave it alone
    other = ApiServer(served.api, port=0, socket_path=served.server.socket_path)
    with pytest.raises(ServerError, match="another process"):
        run_in_thread(other)
    assert served.unix.health()["status"] == "ok"
    # a non-socket file is never replaced
    plain = tmp_path / "plain.sock"
    plain.write_text("keep me")
    with pytest.raises(ServerError, match="not a socket"):
        run_in_thread(ApiServer(served.api, port=0, socket_path=str(plain)))
    assert plain.read_text() == "keep me"
    # a dead controller's leftover socket is replaced
    stale = str(tmp_path / "stale.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(stale)
    dead.close()
    revived = run_in_thread(ApiServer(served.api, port=0, socket_path=stale))
    with EchelonClient(socket_path=stale) as client:
        assert client.health()["status"] == "ok"
    revived.stop()
    assert not os.path.exists(stale)  # stop() removes what it created


def test_unreachable_controller_is_a_clear_client_error(tmp_path):
    client = EchelonClient(socket_path=str(tmp_path / "absent.sock"))
    with pytest.raises(ApiClientError) as info:
        client.health()
    assert info.value.status == 0 and "absent.sock" in str(info.value)


def test_client_in_another_network_namespace_reaches_the_unix_socket(served):
    """What Mininet hosts do: no route to the root namespace's 127.0.0.1, same file system."""
    need("a network namespace", "" if os.geteuid() == 0 else "needs root")
    unshare = need_tool("unshare")
    code = (
        "import sys; from controller.client import EchelonClient, ApiClientError\n"
        f"c = EchelonClient(socket_path={served.server.socket_path!r}, token={TOKEN!r})\n"
        "print(c.register_job('from-netns')['job_id'])\n"
        f"t = EchelonClient(url='http://127.0.0.1:{served.server.port}', timeout_s=2)\n"
        "try:\n    t.health()\nexcept ApiClientError:\n    print('tcp-unreachable')\n"
    )
    out = subprocess.run([unshare, "--net", sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["from-netns", "tcp-unreachable"]
    assert "from-netns" in served.registry.jobs


def test_restart_keeps_the_registry_and_reenforces(tmp_path):
    path = str(tmp_path / "reg.sqlite")
    topo = fattree(20e6, 4)
    first = ServedApi(tmp_path, registry=open_registry(topo, path), name="a.sock")
    try:
        first.seed()
        first.unix.set_scheduler("coflow")
        dump = views.dump(first.registry)
    finally:
        first.stop()
    second = ServedApi(tmp_path, registry=open_registry(topo, path), name="b.sock")
    try:
        assert views.dump(second.registry) == dump
        assert second.unix.scheduler()["scheduler"] == "coflow"
        second.service.start()  # what the app does once it is up
        assert second.sink.told() == [("install", "channel:c1"), ("install", "j1/f2")]
        assert second.unix.allocation("j1", "f2")["enforced"] is True
    finally:
        second.stop()


def test_an_allocation_long_poll_answers_when_a_round_changes_its_hosts_flows(served):
    """``GET /v1/allocations?src=h1&after=N&wait_s=S`` waits in the hub (other requests go on) and answers
    as soon as a round changed one of h1's flows, with the number to wait after next; a host whose flows
    did not change waits the whole ``wait_s``."""
    served.unix.register_job("j")
    served.unix.register_echelon("j", "e", flows(("f", "h1", "h5", 10**7), ("g", "h2", "h6", 10**7)))
    first = served.unix.allocations("h1")  # starts the watch: answers at once (after=0), nothing active
    assert first["allocations"] == []
    answers, waited = [], []

    def wait_for_change():
        with EchelonClient(socket_path=served.server.socket_path, token=TOKEN) as client:
            started = time.monotonic()
            answers.append(client.allocations("h1", after=first["seq"], wait_s=10.0))
            waited.append(time.monotonic() - started)

    waiter = threading.Thread(target=wait_for_change)
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and served.tcp.health()["status"] == "ok"  # the hub serves others meanwhile
    served.unix.flow_started("j", "f", 40000, 5201)
    waiter.join(5.0)
    assert not waiter.is_alive() and waited[0] < 10.0 / 2  # woken by the round, not by its wait_s (10 s)
    answer = answers[0]
    assert answer["seq"] > first["seq"]
    assert [(a["job_id"], a["flow_id"], a["state"]) for a in answer["allocations"]] == [("j", "f", "active")]
    assert answer["allocations"][0]["dscp"] == 8  # class 1: what the agent applies
    # h2 watches too, but nothing of h2 changes: it waits its whole wait_s and gets the same seq back
    h2 = served.unix.allocations("h2")
    started = time.monotonic()
    again = served.tcp.allocations("h2", after=h2["seq"], wait_s=0.4)
    assert 0.35 <= time.monotonic() - started < 2.0 and again == {"seq": h2["seq"], "allocations": []}


@pytest.mark.parametrize("query, field", [
    ("src=h99", "src"), ("", "src"), ("src=h1&after=-1", "after"), ("src=h1&after=x", "after"),
    ("src=h1&wait_s=61", "wait_s"), ("src=h1&wait_s=nan", "wait_s"), ("src=h1&src=h2", "src"),
    ("src=h1&colour=red", "colour"),
])
def test_bad_allocation_long_polls_are_refused_naming_the_parameter(served, query, field):
    with pytest.raises(ApiClientError) as err:
        served.unix.request("GET", f"/allocations?{query}")
    assert err.value.status == 400 and err.value.field == field
