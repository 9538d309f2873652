"""The controller's HTTP API as a plain WSGI application (routing, auth, validation, JSON errors).

Framework-free on purpose: os-ken dropped Ryu's WSGI layer, and the standard WSGI interface runs under
``eventlet.wsgi`` (the controller's hub, see ``controller.api_server``) as well as under any test server.
Endpoints are documented in ``docs/api.md``.

Besides the JSON endpoints it serves the dashboard's static files at ``/ui/`` (``controller.dashboard``)
and read-only live views for it (``/v1/topology``, ``/v1/links``, ``/v1/echelons``, ``/v1/rounds``, built
by ``controller.live_view``).

Every refusal is a JSON body ``{"error": {"field": ..., "problem": ...}}`` with a 4xx status, decided in
this order: unknown route 404, wrong method 405, missing/bad token 401 (state-changing calls only), body
over ``max_body_bytes`` 413, malformed JSON 400, missing/unknown/mistyped fields 400, unknown job /
EchelonFlow / flow 404, duplicates and state conflicts 409.  The registry validates everything before it
changes anything, so a refused request leaves no trace.  Bodies are parsed as strictly as every JSON
file (``echelonflow.fileio.loads_strict``: no NaN/Infinity, no key twice in one object, integers below
2**63, finite doubles), nested at most :data:`MAX_DEPTH` deep.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

import json
import logging
import re
from http import HTTPStatus
from typing import Any, Callable

from controller import views
from controller.auth import bearer_ok
from controller.dashboard import PREFIX as UI_PREFIX
from controller.dashboard import Dashboard
from controller.enforcement_api import EnforcementEndpoints
from controller.live_view import LiveView
from controller.registry import STATES
from controller.service import RECENT_PASSES, SchedulingService
from controller.store import StoreError
from controller.validation import (
    BODY_LIMIT_KEY,
    REFUSED_KEY,
    ApiError,
    choice,
    count,
    fields,
    read_query,
    seconds,
)
from echelonflow.fields import FieldError
from echelonflow.fileio import JsonLimitError, loads_strict

LOG = logging.getLogger("echelon.api")
PREFIX = "/v1"
DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB: ~8,000 flow declarations in one request

StartResponse = Callable[..., Any]


#: A full 10,000-operation enforcement batch is 2-4 MB of JSON (docs/api.md): that endpoint gets more room.
BODY_LIMITS = {"post_enforcement": 8 << 20}
#: Deepest JSON nesting a request may have (the deepest valid body, a batch's match, has 4 levels).
MAX_DEPTH = 32

_ID = r"([^/]+)"
# (pattern, {method: (handler name, needs auth)})
ROUTES: list[tuple[re.Pattern[str], dict[str, tuple[str, bool]]]] = [
    (re.compile(r"^/health$"), {"GET": ("health", False)}),
    (re.compile(r"^/scheduler$"), {"GET": ("get_scheduler", False), "PUT": ("put_scheduler", True)}),
    (re.compile(r"^/flows$"), {"GET": ("list_all_flows", False)}),
    (re.compile(r"^/allocations$"), {"GET": ("get_allocations", False)}),
    (re.compile(r"^/topology$"), {"GET": ("get_topology", False)}),
    (re.compile(r"^/links$"), {"GET": ("get_links", False)}),
    (re.compile(r"^/echelons$"), {"GET": ("get_echelons", False)}),
    (re.compile(r"^/rounds$"), {"GET": ("get_rounds", False)}),
    (re.compile(r"^/enforcement$"), {"GET": ("get_enforcement", False), "POST": ("post_enforcement", True)}),
    (re.compile(r"^/jobs$"), {"GET": ("list_jobs", False), "POST": ("post_job", True)}),
    (re.compile(r"^/channels$"), {"GET": ("list_channels", False), "POST": ("post_channel", True)}),
    (re.compile(rf"^/channels/{_ID}$"), {"GET": ("get_channel", False), "DELETE": ("delete_channel", True)}),
    (re.compile(rf"^/jobs/{_ID}$"), {"GET": ("get_job", False)}),
    (re.compile(rf"^/jobs/{_ID}/abort$"), {"POST": ("post_abort", True)}),
    (re.compile(rf"^/jobs/{_ID}/echelons$"),
     {"GET": ("list_echelons", False), "POST": ("post_echelon", True)}),
    (re.compile(rf"^/jobs/{_ID}/echelons/{_ID}$"), {"GET": ("get_echelon", False)}),
    (re.compile(rf"^/jobs/{_ID}/echelons/{_ID}/flows$"), {"POST": ("post_flows", True)}),
    (re.compile(rf"^/jobs/{_ID}/flows$"), {"GET": ("list_flows", False)}),
    (re.compile(rf"^/jobs/{_ID}/flows/{_ID}$"), {"GET": ("get_flow", False)}),
    (re.compile(rf"^/jobs/{_ID}/flows/{_ID}/start$"), {"POST": ("post_start", True)}),
    (re.compile(rf"^/jobs/{_ID}/flows/{_ID}/progress$"), {"POST": ("post_progress", True)}),
    (re.compile(rf"^/jobs/{_ID}/flows/{_ID}/finish$"), {"POST": ("post_finish", True)}),
    (re.compile(rf"^/jobs/{_ID}/flows/{_ID}/allocation$"), {"GET": ("get_allocation", False)}),
]


#: Longest ``?wait_s=`` accepted (a request holds its connection while it waits).
MAX_WAIT_S = 60.0
_WAIT = {"wait_s": seconds(0.0, MAX_WAIT_S, above=True)}
#: The query parameters each endpoint takes, by handler, each with its one reader
#: (``controller.validation.read_query``); a name not listed is refused on every endpoint.
QUERY_PARAMETERS: dict[str, dict[str, Any]] = {
    "list_flows": {"state": choice(*STATES)},
    "list_all_flows": {"state": choice(*STATES)},
    "get_allocations": {"src": lambda _name, text: text, "after": count(0, 10**18 - 1),
                        "wait_s": seconds(0.0, MAX_WAIT_S)},
    "get_echelons": {"recent_s": seconds(0.0, 86400.0)},
    "get_rounds": {"limit": count(1, RECENT_PASSES)},
    **{name: _WAIT for name in ("post_enforcement", "put_scheduler", "post_channel", "delete_channel",
                                "post_start", "post_finish", "post_abort")},
}


class Api:
    """WSGI callable over one registry and its scheduling service."""

    def __init__(self, service: SchedulingService, token: str,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 status: Callable[[], dict[str, Any]] | None = None,
                 enforcement: EnforcementEndpoints | None = None,
                 live: LiveView | None = None) -> None:
        self.service = service
        self.registry = service.registry
        self.token = token
        self.max_body_bytes = int(max_body_bytes)
        #: Extra health fields from the host program (the controller app adds its switch counts).
        self.status = status
        #: The low-level enforcement primitives (None: no OpenFlow fabric, e.g. the standalone server).
        self.enforcement = enforcement
        #: The dashboard's views (the app passes one that also sees the switches' counters).
        self.live = live if live is not None else LiveView(service)
        self.dashboard = Dashboard()

    # ------------------------------------------------------------------ WSGI entry
    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        """The answer; to ``HEAD`` (answered wherever ``GET`` is) the same status and headers with no
        body (``Content-Length`` still the GET's, as RFC 9110 9.3.2 allows)."""
        body = self._answer(environ, start_response)
        return [b""] if environ.get("REQUEST_METHOD", "GET").upper() == "HEAD" else body

    def _answer(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if REFUSED_KEY not in environ and (path == UI_PREFIX or path.startswith(UI_PREFIX + "/")):
            return self.dashboard(environ, start_response)
        try:
            refused = environ.get(REFUSED_KEY)
            if refused is not None:  # the HTTP server's own refusal of the request's framing
                raise refused
            status, payload = self._dispatch(environ)
            headers: list[tuple[str, str]] = []
        except FieldError as err:  # the request's fault: ApiError, RegistryError, a refused value
            status, payload = err.status, _error(err.field or None, err.problem)
            headers = getattr(err, "headers", [])
        except StoreError as err:
            LOG.error("%s", err)
            status, payload, headers = 503, _error("store", str(err)), []
        except Exception as err:  # noqa: BLE001 - a bug must still answer in JSON, and be logged
            LOG.exception("API request failed")
            status, payload, headers = 500, _error(None, f"internal error: {type(err).__name__}"), []
        body = json.dumps(payload, sort_keys=True).encode()
        start_response(f"{status} {HTTPStatus(status).phrase}", [
            ("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers])
        return [body]

    def _dispatch(self, environ: dict[str, Any]) -> tuple[int, Any]:
        path = environ.get("PATH_INFO", "") or "/"
        method = environ.get("REQUEST_METHOD", "GET").upper()
        if method == "HEAD":
            method = "GET"  # the same answer; __call__ drops its body
        if not path.startswith(PREFIX + "/"):
            raise ApiError(404, "path", f"no such endpoint {path!r} (the API lives under {PREFIX}/)")
        route = path[len(PREFIX):]
        for pattern, methods in ROUTES:
            match = pattern.fullmatch(route)
            if match is None:
                continue
            if method not in methods:
                allow = ", ".join(sorted([*methods, "HEAD"] if "GET" in methods else methods))
                raise ApiError(405, "method", f"{method} is not allowed on {path} (allowed: {allow})",
                               [("Allow", allow)])
            handler_name, needs_auth = methods[method]
            if needs_auth and not bearer_ok(environ.get("HTTP_AUTHORIZATION"), self.token):
                raise ApiError(401, "Authorization", "missing or wrong bearer token (see the token file)",
                               [("WWW-Authenticate", 'Bearer realm="echelon"')])
            limit = max(self.max_body_bytes, BODY_LIMITS.get(handler_name, 0))
            body = self._body(environ, limit) if method in ("POST", "PUT") else None
            query = read_query(environ.get("QUERY_STRING", ""), QUERY_PARAMETERS.get(handler_name, {}))
            return getattr(self, handler_name)(*match.groups(), body=body, query=query)
        raise ApiError(404, "path", f"no such endpoint {path!r}")

    def _body(self, environ: dict[str, Any], limit: int) -> Any:
        """The request's JSON body, whole: a body cut short (the client gave up) is refused, not used."""
        ctype = environ.get("CONTENT_TYPE", "")
        if ctype and ctype.split(";")[0].strip().lower() != "application/json":
            raise ApiError(415, "Content-Type", f"must be application/json, got {ctype!r}")
        length_text = environ.get("CONTENT_LENGTH") or ""
        stream = environ["wsgi.input"]
        if length_text:
            try:
                length = int(length_text)
            except ValueError:
                raise ApiError(400, "Content-Length", f"not a number: {length_text!r}") from None
            if length > limit:
                raise ApiError(413, "body", f"{length} bytes is over the limit of {limit}")
            raw = _read_exactly(stream, length)
        else:
            announce_limit = environ.get(BODY_LIMIT_KEY)
            if announce_limit is not None:  # a chunk announcing more is refused before its bytes arrive
                announce_limit(limit)
            raw = _read(stream, limit + 1)
            if len(raw) > limit:
                raise ApiError(413, "body", f"over the limit of {limit} bytes")
        if not raw.strip():
            raise ApiError(400, "body", "empty; send a JSON object")
        try:
            return loads_strict(raw.decode("utf-8"), max_depth=MAX_DEPTH)
        except UnicodeDecodeError:
            raise ApiError(400, "body", "not UTF-8") from None
        except JsonLimitError as exc:  # nested too deep, a number out of range: named as a field check would
            raise ApiError(400, exc.field or "body", exc.problem) from None
        except ValueError as exc:  # syntax, NaN, a key twice
            raise ApiError(400, "body", f"malformed JSON: {exc}") from None

    # ------------------------------------------------------------------ reads
    def health(self, body: Any, query: Any) -> tuple[int, Any]:
        last = self.service.last_pass
        extra = self.status() if self.status is not None else {}
        return 200, {**extra, "status": "ok", "scheduler": self.service.scheduler_name,
                     "counts": views.counts(self.registry),
                     "topology": self.registry.topology.name,
                     "last_round": None if last is None else {
                         "reason": last.reason, "now_s": last.now_s, "active_flows": last.active_flows,
                         "snapshot_s": last.snapshot_s, "decide_s": last.decide_s,
                         "enforce_s": last.enforce_s, "error": last.error}}

    def get_scheduler(self, body: Any, query: Any) -> tuple[int, Any]:
        return 200, self._scheduler_view()

    def _scheduler_view(self) -> dict[str, Any]:
        """The selected policy: whether it enforces, whether it reads declared sizes (``clairvoyant``;
        agents declare none for a policy that does not), and the flow events it has heard."""
        scheduler = self.service.scheduler
        return {"scheduler": scheduler.name, "available": self.service.available(),
                "enforces": scheduler.enforces, "queues": self.service.queues,
                "hold_paused": self.service.hold_paused, "idle_queue": self.service.idle_queue,
                "clairvoyant": scheduler.clairvoyant, "observed": dict(self.service.observed)}

    def list_jobs(self, body: Any, query: Any) -> tuple[int, Any]:
        return 200, {"jobs": [views.job_view(self.registry, j) for j in self.registry.jobs.values()]}

    def get_job(self, job_id: str, body: Any, query: Any) -> tuple[int, Any]:
        return 200, views.job_view(self.registry, self.registry.job(job_id))

    def list_echelons(self, job_id: str, body: Any, query: Any) -> tuple[int, Any]:
        self.registry.job(job_id)
        echelons = [e for e in self.registry.echelons.values() if e.job_id == job_id]
        return 200, {"echelons": [views.echelon_view(self.registry, e, with_flows=False)
                                  for e in echelons]}

    def get_echelon(self, job_id: str, echelon_id: str, body: Any, query: Any) -> tuple[int, Any]:
        return 200, views.echelon_view(self.registry, self.registry.echelon(job_id, echelon_id))

    def list_flows(self, job_id: str, body: Any, query: Any) -> tuple[int, Any]:
        self.registry.job(job_id)
        state = query.get("state")
        flows = [f for f in self.registry.flows.values()
                 if f.job_id == job_id and (state is None or f.state == state)]
        return 200, {"flows": [views.flow_view(self.registry, f) for f in flows]}

    def list_all_flows(self, body: Any, query: Any) -> tuple[int, Any]:
        state = query.get("state")
        flows = [f for f in self.registry.flows.values() if state is None or f.state == state]
        return 200, {"flows": [views.flow_view(self.registry, f) for f in flows]}

    def get_flow(self, job_id: str, flow_id: str, body: Any, query: Any) -> tuple[int, Any]:
        return 200, views.flow_view(self.registry, self.registry.flow(job_id, flow_id))

    def get_allocation(self, job_id: str, flow_id: str, body: Any, query: Any) -> tuple[int, Any]:
        return 200, self.service.allocation(self.registry.flow(job_id, flow_id).key)

    def get_allocations(self, body: Any, query: Any) -> tuple[int, Any]:
        """Long-poll of one host's allocations: answers once a round changed the class or meter of one of
        its flows after the round numbered ``after`` (or after ``wait_s``), with the number to pass next
        (``controller.allocation_watch``)."""
        src = query.get("src", "")
        if src not in self.registry.topology.hosts:
            raise ApiError(400, "src", f"must be a host of the topology, got {src!r}")
        seq = self.service.watch.wait(src, query.get("after", 0), query.get("wait_s", 0.0))
        return 200, {"seq": seq, "allocations": self.service.allocations_of(src)}

    def get_topology(self, body: Any, query: Any) -> tuple[int, Any]:
        return 200, self.live.topology()

    def get_links(self, body: Any, query: Any) -> tuple[int, Any]:
        return 200, self.live.links()

    def get_echelons(self, body: Any, query: Any) -> tuple[int, Any]:
        return 200, self.live.echelons(query.get("recent_s"))

    def get_rounds(self, body: Any, query: Any) -> tuple[int, Any]:
        return 200, self.live.rounds(query.get("limit", 20))

    def get_enforcement(self, body: Any, query: Any) -> tuple[int, Any]:
        return 200, self._enforcement().live()

    # ------------------------------------------------------------------ writes
    def post_enforcement(self, body: Any, query: Any) -> tuple[int, Any]:
        """Low-level install/update/remove (or a batch of them); ``?wait_s=`` waits for barrier acks."""
        enforcement = self._enforcement()
        return 200, enforcement.apply(body, query.get("wait_s"))

    def _enforcement(self) -> EnforcementEndpoints:
        if self.enforcement is None:
            raise ApiError(503, "enforcement", "this API server has no OpenFlow fabric (standalone); "
                                               "nothing can be enforced")
        return self.enforcement

    def put_scheduler(self, body: Any, query: Any) -> tuple[int, Any]:
        fields(body, ("scheduler",))
        wait_s = query.get("wait_s")
        report = self.service.set_scheduler(body["scheduler"])
        answer = {**self._scheduler_view(),
                  "pushed": {"installs": report.installs, "updates": report.updates,
                             "removes": report.removes}}
        return 200, self._waited(answer, wait_s)

    def post_job(self, body: Any, query: Any) -> tuple[int, Any]:
        fields(body, ("job_id",), ("weight", "compute_s"))
        job = self.registry.add_job(body["job_id"], body.get("weight", 1.0), body.get("compute_s"),
                                    registered_s=self.service.now())
        return 201, views.job_view(self.registry, job)

    def post_echelon(self, job_id: str, body: Any, query: Any) -> tuple[int, Any]:
        self.registry.job(job_id)
        fields(body, ("echelon_id",), ("kind", "flows"))
        ech, _flows = self.registry.add_echelon(job_id, body["echelon_id"], body.get("kind"),
                                                body.get("flows", []))
        return 201, views.echelon_view(self.registry, ech)

    def post_flows(self, job_id: str, echelon_id: str, body: Any, query: Any) -> tuple[int, Any]:
        self.registry.echelon(job_id, echelon_id)
        fields(body, ("flows",))
        flows = self.registry.add_flows(job_id, echelon_id, body["flows"])
        return 201, {"flows": [views.flow_view(self.registry, f) for f in flows]}

    def list_channels(self, body: Any, query: Any) -> tuple[int, Any]:
        channels = self.registry.channels.values()
        return 200, {"channels": [views.channel_view(self.registry, c) for c in channels]}

    def get_channel(self, channel_id: str, body: Any, query: Any) -> tuple[int, Any]:
        channel = self.registry.channels.lookup(channel_id)
        return 200, {"channel": views.channel_view(self.registry, channel)}

    def post_channel(self, body: Any, query: Any) -> tuple[int, Any]:
        fields(body, ("channel_id", "src", "dst", "src_port", "dst_port"), ("path",))
        wait_s = query.get("wait_s")
        channel = self.registry.channels.add(body["channel_id"], body["src"], body["dst"], body["src_port"],
                                             body["dst_port"], body.get("path"))
        self.service.reschedule("channel")  # its rules go to the switches now, before any flow uses it
        return 201, self._waited({"channel": views.channel_view(self.registry, channel)}, wait_s)

    def delete_channel(self, channel_id: str, body: Any, query: Any) -> tuple[int, Any]:
        wait_s = query.get("wait_s")
        channel = self.registry.channels.remove(channel_id)
        self.service.reschedule("channel")
        return 200, self._waited({"channel": views.channel_view(self.registry, channel)}, wait_s)

    def post_start(self, job_id: str, flow_id: str, body: Any, query: Any) -> tuple[int, Any]:
        self.registry.flow(job_id, flow_id)
        if isinstance(body, dict) and "channel_id" in body:
            fields(body, ("channel_id",), ("start_s",))
        else:
            fields(body, ("src_port", "dst_port"), ("start_s",))
        wait_s = query.get("wait_s")
        now_s = self.service.now()
        start_s = body.get("start_s")
        flow = self.registry.flow_started(job_id, flow_id, body.get("src_port"), body.get("dst_port"),
                                          now_s if start_s is None else start_s,
                                          channel_id=body.get("channel_id"), now_s=now_s)
        self.service.on_arrival(flow.key)
        return 200, self._waited({"flow": views.flow_view(self.registry, self.registry.flows[flow.key]),
                                  "allocation": self.service.allocation(flow.key)}, wait_s)

    def post_progress(self, job_id: str, flow_id: str, body: Any, query: Any) -> tuple[int, Any]:
        self.registry.flow(job_id, flow_id)
        fields(body, ("bytes_sent",))
        flow = self.registry.flow_progress(job_id, flow_id, body["bytes_sent"])
        self.service.on_progress(flow.key)
        return 200, {"flow": views.flow_view(self.registry, flow),
                     "allocation": self.service.allocation(flow.key)}

    def post_finish(self, job_id: str, flow_id: str, body: Any, query: Any) -> tuple[int, Any]:
        self.registry.flow(job_id, flow_id)
        fields(body, (), ("finish_s", "bytes_sent"))
        wait_s = query.get("wait_s")
        flow = self.registry.flow_finished(job_id, flow_id, body.get("finish_s"), body.get("bytes_sent"),
                                           now_s=self.service.now())
        self.service.on_departure(flow.key)
        return 200, self._waited({"flow": views.flow_view(self.registry, flow)}, wait_s)

    def post_abort(self, job_id: str, body: Any, query: Any) -> tuple[int, Any]:
        """The job failed (an agent of it died): release its unfinished flows and their enforcement."""
        self.registry.job(job_id)
        fields(body, (), ("at_s",))
        wait_s = query.get("wait_s")
        flows = self.registry.abort_job(job_id, body.get("at_s"), now_s=self.service.now())
        if flows:
            self.service.on_departure()
        return 200, self._waited({"job_id": job_id, "aborted": [f.flow_id for f in flows]}, wait_s)

    def _waited(self, answer: dict[str, Any], wait_s: float | None) -> dict[str, Any]:
        """With ``?wait_s=``: wait until the switches acknowledged everything pushed so far, and say so."""
        if wait_s is not None:
            answer["enforcement"] = self.service.wait_in_force(wait_s)
        return answer


def _error(field: str | None, problem: str) -> dict[str, Any]:
    return {"error": {"field": field, "problem": problem}}


def _read_exactly(stream: Any, length: int) -> bytes:
    """``length`` bytes of the body, or a 400 when the client closed (or timed out) before sending them."""
    chunks, got = [], 0
    while got < length:
        chunk = _read(stream, length - got)
        if not chunk:
            raise ApiError(400, "body", f"truncated: {got} of the announced {length} bytes arrived")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read(stream: Any, size: int) -> bytes:
    try:
        return stream.read(size)
    except (OSError, ValueError) as exc:  # timeout, reset, or a broken chunked encoding
        raise ApiError(400, "body", f"could not be read whole ({type(exc).__name__})") from None
