"""A small stdlib-only client of the controller's API, for traffic agents and tools.

Agents run inside Mininet hosts (other network namespaces), so the default transport is the controller's
Unix socket, which every namespace reaches through the shared file system; ``url=`` selects TCP instead
(for tools in the root namespace or on a management network).  One keep-alive connection is reused and
re-opened once if the server closed it.  The bearer token is read from the token file only when a
state-changing call needs it.

Errors come back as :class:`ApiClientError` carrying the server's ``field`` and ``problem``.

Kept Python 3.9 compatible; stdlib only, so it runs under any interpreter inside a Mininet host.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from controller.auth import DEFAULT_TOKEN_PATH, TokenError, read_token

DEFAULT_SOCKET = "/run/echelon/controller-8181.sock"


class ApiClientError(Exception):
    """The API refused a request (``status`` 4xx/5xx) or could not be reached (``status`` 0)."""

    def __init__(self, status: int, field: str | None, problem: str) -> None:
        super().__init__(f"HTTP {status}: {field}: {problem}" if status else problem)
        self.status = status
        self.field = field
        self.problem = problem


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class EchelonClient:
    """Calls the ``/v1`` API; every method returns the decoded JSON answer."""

    def __init__(self, socket_path: str | None = None, url: str | None = None, token: str | None = None,
                 token_file: str = DEFAULT_TOKEN_PATH, timeout_s: float = 10.0) -> None:
        if url is not None and socket_path is not None:
            raise ValueError("give either socket_path or url, not both")
        self.url = url
        self.socket_path = None if url is not None else (socket_path or DEFAULT_SOCKET)
        self._token = token
        self._token_given = token is not None
        self.token_file = token_file
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    # ------------------------------------------------------------------ transport
    def _connect(self) -> http.client.HTTPConnection:
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(f"url must look like http://host:port, got {self.url!r}")
            return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=self.timeout_s)
        return _UnixConnection(self.socket_path or DEFAULT_SOCKET, self.timeout_s)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> EchelonClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def token(self) -> str:
        """The bearer token, read from the token file when first needed.  A file that cannot be read is
        an unreachable controller (status 0): a controller writes it before it serves, and a restarted
        one's predecessor took its file along, so a caller riding out a restart retries as for a refused
        connection instead of dying of an exception it does not expect."""
        if self._token is None:
            try:
                self._token = read_token(self.token_file)
            except TokenError as exc:
                raise ApiClientError(0, None, str(exc)) from None
        return self._token

    def request(self, method: str, path: str, body: Any = None, auth: bool = False,
                raw: bytes | None = None, headers: Mapping[str, str] | None = None) -> Any:
        """Send one request to ``/v1<path>``; ``raw`` sends bytes as they are (tests of bad input).

        A restarted controller writes a fresh token: a 401 with a token read from the file re-reads the
        file once and retries, so agents carry on across a controller restart without noticing.
        """
        try:
            return self._request_once(method, path, body, auth, raw, headers)
        except ApiClientError as err:
            if err.status != 401 or not auth or self._token_given or self._token is None:
                raise
            stale, self._token = self._token, None
            if self.token == stale:
                raise
            return self._request_once(method, path, body, auth, raw, headers)

    def _request_once(self, method: str, path: str, body: Any = None, auth: bool = False,
                      raw: bytes | None = None, headers: Mapping[str, str] | None = None) -> Any:
        send_headers = {"Accept": "application/json"}
        payload = raw
        if payload is None and body is not None:
            payload = json.dumps(body).encode()
        if payload is not None:
            send_headers["Content-Type"] = "application/json"
        if auth:
            send_headers["Authorization"] = f"Bearer {self.token}"
        send_headers.update(headers or {})
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = self._connect()
            try:
                self._conn.request(method, "/v1" + path, body=payload, headers=send_headers)
                response = self._conn.getresponse()
                data = response.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self.close()  # a keep-alive connection the server had closed: retry once on a new one
                if attempt:
                    raise ApiClientError(0, None, f"controller API unreachable: {exc}") from None
            except (OSError, http.client.HTTPException) as exc:  # also an answer cut short (IncompleteRead)
                self.close()
                where = self.url or f"unix:{self.socket_path}"
                raise ApiClientError(0, None, f"controller API at {where} unreachable: "
                                              f"{exc or type(exc).__name__}") from None
        try:
            decoded = json.loads(data.decode("utf-8")) if data else None
        except ValueError:
            raise ApiClientError(response.status, None, f"non-JSON answer: {data[:200]!r}") from None
        if response.status >= 400:
            err = (decoded or {}).get("error", {}) if isinstance(decoded, dict) else {}
            raise ApiClientError(response.status, err.get("field"), err.get("problem", "unknown error"))
        return decoded

    # ------------------------------------------------------------------ reads
    def health(self) -> dict[str, Any]:
        return self.request("GET", "/health")

    def scheduler(self) -> dict[str, Any]:
        return self.request("GET", "/scheduler")

    def pages(self, path: str, name: str, limit: int | None = None, **query: Any) -> list[dict[str, Any]]:
        """Every item of a paginated list, following ``next_cursor`` page after page."""
        params = {key: value for key, value in query.items() if value is not None}
        if limit is not None:
            params["limit"] = limit
        items: list[dict[str, Any]] = []
        while True:
            answer = self.request("GET", path + (f"?{urlencode(params)}" if params else ""))
            items.extend(answer[name])
            if answer.get("next_cursor") is None:
                return items
            params["cursor"] = answer["next_cursor"]

    def jobs(self) -> list[dict[str, Any]]:
        return self.pages("/jobs", "jobs")

    def delete_job(self, job_id: str) -> dict[str, Any]:
        """Remove a done (finished or aborted) job from the controller's memory and store."""
        return self.request("DELETE", f"/jobs/{_q(job_id)}", auth=True)

    def job(self, job_id: str) -> dict[str, Any]:
        return self.request("GET", f"/jobs/{_q(job_id)}")

    def echelons(self, job_id: str) -> list[dict[str, Any]]:
        return self.pages(f"/jobs/{_q(job_id)}/echelons", "echelons")

    def echelon(self, job_id: str, echelon_id: str) -> dict[str, Any]:
        return self.request("GET", f"/jobs/{_q(job_id)}/echelons/{_q(echelon_id)}")

    def flows(self, job_id: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        path = f"/jobs/{_q(job_id)}/flows" if job_id is not None else "/flows"
        return self.pages(path, "flows", state=state)

    def flow(self, job_id: str, flow_id: str) -> dict[str, Any]:
        return self.request("GET", f"/jobs/{_q(job_id)}/flows/{_q(flow_id)}")

    def allocation(self, job_id: str, flow_id: str) -> dict[str, Any]:
        return self.request("GET", f"/jobs/{_q(job_id)}/flows/{_q(flow_id)}/allocation")

    def allocations(self, src: str, after: int = 0, wait_s: float = 0.0) -> dict[str, Any]:
        """``{"seq", "allocations"}`` of host ``src``'s active flows, once a pass changed one of them after
        pass ``after`` (or after ``wait_s``): a long-poll (docs/api.md)."""
        return self.request("GET", f"/allocations?src={_q(src)}&after={int(after)}&wait_s={wait_s:g}")

    # ------------------------------------------------------------------ writes
    def set_scheduler(self, name: str, wait_s: float | None = None) -> dict[str, Any]:
        """Switch policy; with ``wait_s`` the answer's ``enforcement`` says whether the switches acked."""
        return self.request("PUT", "/scheduler" + _wait(wait_s), {"scheduler": name}, auth=True)

    def register_job(self, job_id: str, weight: float = 1.0,
                     compute_s: float | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"job_id": job_id, "weight": weight}
        if compute_s is not None:
            body["compute_s"] = compute_s
        return self.request("POST", "/jobs", body, auth=True)

    def register_echelon(self, job_id: str, echelon_id: str, flows: Sequence[Mapping[str, Any]] = (),
                         kind: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"echelon_id": echelon_id, "flows": [dict(f) for f in flows]}
        if kind is not None:
            body["kind"] = kind
        return self.request("POST", f"/jobs/{_q(job_id)}/echelons", body, auth=True)

    def add_flows(self, job_id: str, echelon_id: str, flows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return self.request("POST", f"/jobs/{_q(job_id)}/echelons/{_q(echelon_id)}/flows",
                            {"flows": [dict(f) for f in flows]}, auth=True)

    def register_channel(self, channel_id: str, src: str, dst: str, src_port: int, dst_port: int,
                         path: Sequence[str] | None = None, wait_s: float | None = None) -> dict[str, Any]:
        """Declare a persistent connection (its rules are installed now, before any flow uses it)."""
        body: dict[str, Any] = {"channel_id": channel_id, "src": src, "dst": dst, "src_port": src_port,
                                "dst_port": dst_port}
        if path is not None:
            body["path"] = list(path)
        return self.request("POST", "/channels" + _wait(wait_s), body, auth=True)

    def remove_channel(self, channel_id: str) -> dict[str, Any]:
        return self.request("DELETE", f"/channels/{_q(channel_id)}", auth=True)

    def channels(self) -> list[dict[str, Any]]:
        return self.pages("/channels", "channels")

    def flow_started(self, job_id: str, flow_id: str, src_port: int | None = None,
                     dst_port: int | None = None, start_s: float | None = None, wait_s: float | None = None,
                     channel_id: str | None = None) -> dict[str, Any]:
        """Report a start on the flow's own 5-tuple or on a channel; with ``wait_s`` the call returns once
        the switches acked the new enforcement."""
        body: dict[str, Any] = ({"channel_id": channel_id} if channel_id is not None
                                else {"src_port": src_port, "dst_port": dst_port})
        if start_s is not None:
            body["start_s"] = start_s
        return self.request("POST", f"/jobs/{_q(job_id)}/flows/{_q(flow_id)}/start" + _wait(wait_s), body,
                            auth=True)

    def flow_progress(self, job_id: str, flow_id: str, bytes_sent: int) -> dict[str, Any]:
        return self.request("POST", f"/jobs/{_q(job_id)}/flows/{_q(flow_id)}/progress",
                            {"bytes_sent": bytes_sent}, auth=True)

    def flow_finished(self, job_id: str, flow_id: str, finish_s: float | None = None,
                      bytes_sent: int | None = None, wait_s: float | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if finish_s is not None:
            body["finish_s"] = finish_s
        if bytes_sent is not None:
            body["bytes_sent"] = bytes_sent
        return self.request("POST", f"/jobs/{_q(job_id)}/flows/{_q(flow_id)}/finish" + _wait(wait_s), body,
                            auth=True)

    def abort_job(self, job_id: str, at_s: float | None = None,
                  wait_s: float | None = None) -> dict[str, Any]:
        """Release every unfinished flow of a failed job (they become ``aborted``)."""
        body: dict[str, Any] = {} if at_s is None else {"at_s": at_s}
        return self.request("POST", f"/jobs/{_q(job_id)}/abort" + _wait(wait_s), body, auth=True)

    # ------------------------------------------------------------------ enforcement primitives
    # Low-level (tests, benchmarks): pin one 5-tuple to a path/class/meter, bypassing the scheduler.
    def enforcement(self) -> dict[str, dict[str, Any]]:
        """Every flow the switches hold enforcement for, by flow id (``GET /v1/enforcement``)."""
        return {f["flow_id"]: f for f in self.request("GET", "/enforcement")["flows"]}

    def enforce(self, request: Mapping[str, Any], wait_s: float | None = None) -> dict[str, Any]:
        """Send one operation or batch as it is; with ``wait_s`` the answer's ``enforcement`` has
        ``in_force`` and ``latency_s`` (call to last barrier ack)."""
        return self.request("POST", "/enforcement" + _wait(wait_s), dict(request), auth=True)

    def enforce_install(self, flow_id: str, match: Mapping[str, Any], queue: int,
                        path: Sequence[str] | None = None, rate_bps: float | None = None,
                        wait_s: float | None = None) -> dict[str, Any]:
        return self.enforce(install_op(flow_id, match, queue, path, rate_bps), wait_s)

    def enforce_update(self, flow_id: str, queue: int | None = None, rate_bps: float | None = None,
                       clear_rate: bool = False, wait_s: float | None = None) -> dict[str, Any]:
        return self.enforce(update_op(flow_id, queue, rate_bps, clear_rate), wait_s)

    def enforce_remove(self, flow_id: str, wait_s: float | None = None) -> dict[str, Any]:
        return self.enforce(remove_op(flow_id), wait_s)

    def enforce_batch(self, requests: Sequence[Mapping[str, Any]],
                      wait_s: float | None = None) -> dict[str, Any]:
        """Several operations validated together (all or none applied), timed together."""
        return self.enforce({"op": "batch", "requests": [dict(r) for r in requests]}, wait_s)


def install_op(flow_id: str, match: Mapping[str, Any], queue: int, path: Sequence[str] | None = None,
               rate_bps: float | None = None) -> dict[str, Any]:
    """An install operation for :meth:`EchelonClient.enforce_batch` (``match``: src_ip, dst_ip, src_port,
    dst_port, ip_proto?; no ``path``: the topology's pinned equal-cost path)."""
    op: dict[str, Any] = {"op": "install", "flow_id": flow_id, "match": dict(match), "queue": queue}
    if path is not None:
        op["path"] = list(path)
    if rate_bps is not None:
        op["rate_bps"] = rate_bps
    return op


def update_op(flow_id: str, queue: int | None = None, rate_bps: float | None = None,
              clear_rate: bool = False) -> dict[str, Any]:
    op: dict[str, Any] = {"op": "update", "flow_id": flow_id}
    if queue is not None:
        op["queue"] = queue
    if rate_bps is not None:
        op["rate_bps"] = rate_bps
    if clear_rate:
        op["clear_rate"] = True
    return op


def remove_op(flow_id: str) -> dict[str, Any]:
    return {"op": "remove", "flow_id": flow_id}


def _wait(wait_s: float | None) -> str:
    return "" if wait_s is None else f"?{urlencode({'wait_s': wait_s})}"


def _q(part: str) -> str:
    return quote(str(part), safe="")
