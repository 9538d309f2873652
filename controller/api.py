"""The controller's HTTP API as a plain WSGI application (routing, auth, validation, JSON errors).

:data:`ROUTES` is the API in one table: each route's methods, each an :class:`Endpoint` naming its
handler, whether it needs the token, and the body fields and query parameters it takes, both declared as
``echelonflow.fields.Field`` and read by ``fields.read``.  Lists answer a page at a time
(``controller.listing``); a job that left memory is read from the store (``controller.archive``).

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

import logging
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Callable

from controller import archive, encoded, listing, paging, views
from controller.auth import bearer_ok
from controller.dashboard import PREFIX as UI_PREFIX
from controller.dashboard import Dashboard
from controller.enforcement_api import EnforcementEndpoints
from controller.live_view import LiveView
from controller.registry import STATES, Registry
from controller.service import RECENT_PASSES, SchedulingService
from controller.store import StoreError
from controller.validation import (
    BODY_LIMIT_KEY,
    COOPERATE_KEY,
    REFUSED_KEY,
    ApiError,
    choice,
    count,
    read_query,
    seconds,
)
from echelonflow.fields import Field, FieldError, read
from echelonflow.fileio import JsonLimitError, loads_strict

LOG = logging.getLogger("echelon.api")
PREFIX = "/v1"
DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB: ~8,000 flow declarations in one request

StartResponse = Callable[..., Any]


#: Deepest JSON nesting a request may have (the deepest valid body, a batch's match, has 4 levels).
MAX_DEPTH = 32


class Request:
    """What a handler gets besides the path's ids: the query as its endpoint declares it, read already,
    and the body, read by :meth:`body` against the endpoint's fields when the handler asks (after it
    looked up the job or flow the path names, so an unknown one is a 404 whatever the body)."""

    def __init__(self, raw: Any, declared: tuple[Field, ...] | None, query: dict[str, Any],
                 cooperate: Callable[[], None] | None = None) -> None:
        self.raw = raw
        self.declared = declared
        self.query = query
        #: Gives the hub a turn while a long answer is built (None: not served on a hub).
        self.cooperate = cooperate

    def body(self, declared: tuple[Field, ...] | None = None) -> dict[str, Any]:
        if not isinstance(self.raw, dict):
            raise ApiError(400, "body", "must be a JSON object")
        return read(self.raw, declared if declared is not None else self.declared or ())

    @property
    def page(self) -> tuple[int, str | None]:
        """(limit, cursor) of a list endpoint."""
        return self.query["limit"], self.query["cursor"]


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
        body = payload.body if isinstance(payload, encoded.Encoded) else encoded.encode(payload)
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
            endpoint = methods[method]
            if endpoint.auth and not bearer_ok(environ.get("HTTP_AUTHORIZATION"), self.token):
                raise ApiError(401, "Authorization", "missing or wrong bearer token (see the token file)",
                               [("WWW-Authenticate", 'Bearer realm="echelon"')])
            limit = max(self.max_body_bytes, endpoint.body_limit)
            raw = self._body(environ, limit) if method in ("POST", "PUT") else None
            query = read_query(environ.get("QUERY_STRING", ""), endpoint.query)
            request = Request(raw, endpoint.body, query, environ.get(COOPERATE_KEY))
            return endpoint.handler(self, *match.groups(), request=request)
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
    def health(self, request: Request) -> tuple[int, Any]:
        last = self.service.last_pass
        extra = self.status() if self.status is not None else {}
        return 200, {**extra, "status": "ok", "scheduler": self.service.scheduler_name,
                     "counts": views.counts(self.registry),
                     "topology": self.registry.topology.name,
                     "last_round": None if last is None else {
                         "reason": last.reason, "now_s": last.now_s, "active_flows": last.active_flows,
                         "snapshot_s": last.snapshot_s, "decide_s": last.decide_s,
                         "enforce_s": last.enforce_s, "error": last.error}}

    def get_scheduler(self, request: Request) -> tuple[int, Any]:
        return 200, self._scheduler_view()

    def _scheduler_view(self) -> dict[str, Any]:
        """The selected policy: whether it enforces, whether it reads declared sizes (``clairvoyant``;
        agents declare none for a policy that does not), and the flow events it has heard."""
        scheduler = self.service.scheduler
        return {"scheduler": scheduler.name, "available": self.service.available(),
                "enforces": scheduler.enforces, "queues": self.service.config.queues,
                "hold_paused": self.service.config.hold_paused, "idle_queue": self.service.idle_queue,
                "clairvoyant": scheduler.clairvoyant, "observed": dict(self.service.observed)}

    def list_jobs(self, request: Request) -> tuple[int, Any]:
        jobs, cursor = listing.jobs(self.registry, *request.page)
        registry = self.registry
        return _page(request, "jobs", jobs, cursor, lambda job: registry.jobs.get(job.job_id),
                     lambda job: views.job_view(registry, job))

    def _reader(self, job_id: str) -> Registry:
        """The registry that holds ``job_id``: the live one, or the job read back from the store's archive
        (``controller.archive``); a job in neither is a 404."""
        if job_id not in self.registry.jobs:
            archived = archive.read_job(self.registry, job_id)
            if archived is not None:
                return archived
        self.registry.job(job_id)
        return self.registry

    def get_job(self, job_id: str, request: Request) -> tuple[int, Any]:
        reader = self._reader(job_id)
        return 200, {**views.job_view(reader, reader.job(job_id)), "archived": reader is not self.registry}

    def delete_job(self, job_id: str, request: Request) -> tuple[int, Any]:
        """A done job (finished or aborted) is removed from memory and the store, now."""
        reader = self._reader(job_id)
        view = views.job_view(reader, reader.job(job_id))
        self.registry.delete_job(job_id)
        return 200, {**view, "deleted": True}

    def list_echelons(self, job_id: str, request: Request) -> tuple[int, Any]:
        reader = self._reader(job_id)
        echelons, cursor = listing.echelons(reader, *request.page, job_id=job_id)
        return _page(request, "echelons", echelons, cursor, lambda ech: reader.echelons.get(ech.key),
                     lambda ech: views.echelon_view(reader, ech, with_flows=False))

    def _part_reader(self, job_id: str, echelon_id: str | None = None,
                     flow_id: str | None = None) -> Registry:
        """The registry that holds the EchelonFlow (or flow) of ``job_id``: :meth:`_reader`'s, or for a
        job in memory whose done EchelonFlow left it, that EchelonFlow read back from the store."""
        reader = self._reader(job_id)
        if reader is self.registry:
            archived = (archive.read_echelon(reader, job_id, echelon_id) if echelon_id is not None
                        else archive.read_flow(reader, job_id, flow_id))  # type: ignore[arg-type]
            if archived is not None:
                return archived
        return reader

    def get_echelon(self, job_id: str, echelon_id: str, request: Request) -> tuple[int, Any]:
        reader = self._part_reader(job_id, echelon_id=echelon_id)
        return 200, views.echelon_view(reader, reader.echelon(job_id, echelon_id))

    def list_flows(self, job_id: str, request: Request) -> tuple[int, Any]:
        reader = self._reader(job_id)
        return _flow_page(reader, request, job_id)

    def list_all_flows(self, request: Request) -> tuple[int, Any]:
        return _flow_page(self.registry, request)

    def get_flow(self, job_id: str, flow_id: str, request: Request) -> tuple[int, Any]:
        reader = self._part_reader(job_id, flow_id=flow_id)
        return 200, views.flow_view(reader, reader.flow(job_id, flow_id))

    def get_allocation(self, job_id: str, flow_id: str, request: Request) -> tuple[int, Any]:
        reader = self._part_reader(job_id, flow_id=flow_id)
        flow = reader.flow(job_id, flow_id)
        return 200, self.service.allocation(flow.key, flow)

    def get_allocations(self, request: Request) -> tuple[int, Any]:
        """Long-poll of one host's allocations: answers once a round changed the class or meter of one of
        its flows after the round numbered ``after`` (or after ``wait_s``), with the number to pass next
        (``controller.allocation_watch``)."""
        src, query = request.query["src"], request.query
        if src not in self.registry.topology.hosts:
            raise ApiError(400, "src", f"must be a host of the topology, got {src!r}")
        seq = self.service.watch.wait(src, query["after"], query["wait_s"])
        return 200, {"seq": seq, "allocations": self.service.allocations_of(src)}

    def get_topology(self, request: Request) -> tuple[int, Any]:
        return 200, self.live.topology()

    def get_links(self, request: Request) -> tuple[int, Any]:
        return 200, self.live.links()

    def get_echelons(self, request: Request) -> tuple[int, Any]:
        return 200, self.live.echelons_page(request.query["recent_s"], *request.page,
                                            cooperate=request.cooperate)

    def get_rounds(self, request: Request) -> tuple[int, Any]:
        return 200, self.live.rounds(request.query["limit"])

    def get_enforcement(self, request: Request) -> tuple[int, Any]:
        return 200, self._enforcement().live()

    # ------------------------------------------------------------------ writes
    def post_enforcement(self, request: Request) -> tuple[int, Any]:
        """Low-level install/update/remove (or a batch of them); ``?wait_s=`` waits for barrier acks."""
        enforcement = self._enforcement()
        return 200, enforcement.apply(request.raw, request.query["wait_s"])

    def _enforcement(self) -> EnforcementEndpoints:
        if self.enforcement is None:
            raise ApiError(503, "enforcement", "this API server has no OpenFlow fabric (standalone); "
                                               "nothing can be enforced")
        return self.enforcement

    def put_scheduler(self, request: Request) -> tuple[int, Any]:
        body = request.body()
        report = self.service.set_scheduler(body["scheduler"])
        answer = {**self._scheduler_view(),
                  "pushed": {"installs": report.installs, "updates": report.updates,
                             "removes": report.removes}}
        return 200, self._waited(answer, request.query["wait_s"])

    def post_job(self, request: Request) -> tuple[int, Any]:
        body = request.body()
        job = self.registry.add_job(body["job_id"], body["weight"], body["compute_s"],
                                    registered_s=self.service.now())
        return 201, views.job_view(self.registry, job)

    def post_echelon(self, job_id: str, request: Request) -> tuple[int, Any]:
        self.registry.job(job_id)
        body = request.body()
        ech, _flows = self.registry.add_echelon(job_id, body["echelon_id"], body["kind"], body["flows"])
        return 201, views.echelon_view(self.registry, ech)

    def post_flows(self, job_id: str, echelon_id: str, request: Request) -> tuple[int, Any]:
        self.registry.echelon(job_id, echelon_id)
        flows = self.registry.add_flows(job_id, echelon_id, request.body()["flows"])
        return 201, {"flows": [views.flow_view(self.registry, f) for f in flows]}

    def list_channels(self, request: Request) -> tuple[int, Any]:
        channels, cursor = listing.channels(self.registry, *request.page)
        registry = self.registry
        return _page(request, "channels", channels, cursor, lambda ch: registry.channels.get(ch.channel_id),
                     lambda ch: views.channel_view(registry, ch))

    def get_channel(self, channel_id: str, request: Request) -> tuple[int, Any]:
        channel = self.registry.channels.lookup(channel_id)
        return 200, {"channel": views.channel_view(self.registry, channel)}

    def post_channel(self, request: Request) -> tuple[int, Any]:
        body = request.body()
        channel = self.registry.channels.add(body["channel_id"], body["src"], body["dst"], body["src_port"],
                                             body["dst_port"], body["path"])
        self.service.reschedule("channel")  # its rules go to the switches now, before any flow uses it
        return 201, self._waited({"channel": views.channel_view(self.registry, channel)},
                                 request.query["wait_s"])

    def delete_channel(self, channel_id: str, request: Request) -> tuple[int, Any]:
        channel = self.registry.channels.remove(channel_id)
        self.service.reschedule("channel")
        return 200, self._waited({"channel": views.channel_view(self.registry, channel)},
                                 request.query["wait_s"])

    def post_start(self, job_id: str, flow_id: str, request: Request) -> tuple[int, Any]:
        """A start on the flow's own 5-tuple or on a channel: two bodies, told apart by ``channel_id``."""
        self.registry.flow(job_id, flow_id)
        body = request.raw
        on_channel = isinstance(body, dict) and "channel_id" in body
        body = request.body(START_ON_CHANNEL if on_channel else START_ON_PORTS)
        now_s = self.service.now()
        start_s = body["start_s"]
        flow = self.registry.flow_started(job_id, flow_id, body.get("src_port"), body.get("dst_port"),
                                          now_s if start_s is None else start_s,
                                          channel_id=body.get("channel_id"), now_s=now_s)
        self.service.on_arrival(flow.key)
        return 200, self._waited({"flow": views.flow_view(self.registry, self.registry.flows[flow.key]),
                                  "allocation": self.service.allocation(flow.key)}, request.query["wait_s"])

    def post_progress(self, job_id: str, flow_id: str, request: Request) -> tuple[int, Any]:
        self.registry.flow(job_id, flow_id)
        flow = self.registry.flow_progress(job_id, flow_id, request.body()["bytes_sent"])
        self.service.on_progress(flow.key)
        return 200, {"flow": views.flow_view(self.registry, flow),
                     "allocation": self.service.allocation(flow.key)}

    def post_finish(self, job_id: str, flow_id: str, request: Request) -> tuple[int, Any]:
        self.registry.flow(job_id, flow_id)
        body = request.body()
        flow = self.registry.flow_finished(job_id, flow_id, body["finish_s"], body["bytes_sent"],
                                           now_s=self.service.now())
        self.service.on_departure(flow.key)
        return 200, self._waited({"flow": views.flow_view(self.registry, flow)}, request.query["wait_s"])

    def post_abort(self, job_id: str, request: Request) -> tuple[int, Any]:
        """The job failed (an agent of it died): release its unfinished flows and their enforcement."""
        self.registry.job(job_id)
        flows = self.registry.abort_job(job_id, request.body()["at_s"], now_s=self.service.now())
        if flows:
            self.service.on_departure()
        return 200, self._waited({"job_id": job_id, "aborted": [f.flow_id for f in flows]},
                                 request.query["wait_s"])

    def _waited(self, answer: dict[str, Any], wait_s: float | None) -> dict[str, Any]:
        """With ``?wait_s=``: wait until the switches acknowledged everything pushed so far, and say so."""
        if wait_s is not None:
            answer["enforcement"] = self.service.wait_in_force(wait_s)
        return answer


# ------------------------------------------------------------------ the route table
@dataclass(frozen=True)
class Endpoint:
    """One method of one route: its handler, whether it needs the token, the body fields and query
    parameters it takes (both :class:`~echelonflow.fields.Field`, read by ``echelonflow.fields.read``;
    ``body`` None: the handler reads the body itself), and its body limit when above the API's."""

    handler: Callable[..., tuple[int, Any]]
    auth: bool = False
    body: tuple[Field, ...] | None = None
    query: tuple[Field, ...] = ()
    body_limit: int = 0


def _page(request: Request, key: str, records: list[Any], cursor: str | None,
          current: Callable[[Any], Any], view: Callable[[Any], Any]) -> tuple[int, encoded.Encoded]:
    """A list's page: ``{key: [...], "next_cursor"}``, each record still in memory rendered by ``view``,
    the hub given turns meanwhile (``controller.encoded``)."""
    items = encoded.render(records, current, view, request.cooperate)
    return 200, encoded.page_body({"next_cursor": cursor}, key, items)


def _flow_page(reader: Registry, request: Request, job_id: str | None = None) -> tuple[int, encoded.Encoded]:
    flows, cursor = listing.flows(reader, *request.page, job_id=job_id, state=request.query["state"])
    return _page(request, "flows", flows, cursor, lambda flow: reader.flows.get(flow.key),
                 lambda flow: views.flow_view(reader, flow))


def _route(path: str, **methods: Endpoint) -> tuple[re.Pattern[str], dict[str, Endpoint]]:
    return re.compile("^" + path.replace("{id}", r"([^/]+)") + "$"), methods


def _body(*required: str, **optional: Any) -> tuple[Field, ...]:
    """Body fields: names that must be there, and optional ones with their default (the registry
    checks the values)."""
    return (*(Field(name, required=True) for name in required),
            *(Field(name, default=value) for name, value in optional.items()))


#: A full 10,000-operation enforcement batch is 2-4 MB of JSON (docs/api.md): that endpoint gets more room.
ENFORCEMENT_BODY_BYTES = 8 << 20
#: Longest ``?wait_s=`` accepted (a request holds its connection while it waits).
MAX_WAIT_S = 60.0
WAIT = (Field("wait_s", seconds(0.0, MAX_WAIT_S, above=True)),)
PAGE = (Field("limit", paging.read_limit, default=paging.DEFAULT_LIMIT), Field("cursor", paging.read_cursor))
HEAVY_PAGE = (Field("limit", paging.read_heavy_limit, default=paging.DEFAULT_LIMIT), PAGE[1])
STATE = (Field("state", choice(*STATES)),)
START_ON_PORTS = _body("src_port", "dst_port", start_s=None)
START_ON_CHANNEL = _body("channel_id", start_s=None)

ROUTES: list[tuple[re.Pattern[str], dict[str, Endpoint]]] = [
    _route("/health", GET=Endpoint(Api.health)),
    _route("/scheduler", GET=Endpoint(Api.get_scheduler),
           PUT=Endpoint(Api.put_scheduler, True, _body("scheduler"), WAIT)),
    _route("/flows", GET=Endpoint(Api.list_all_flows, query=STATE + PAGE)),
    _route("/allocations", GET=Endpoint(Api.get_allocations, query=(
        Field("src", default=""), Field("after", count(0, 10**18 - 1), default=0),
        Field("wait_s", seconds(0.0, MAX_WAIT_S), default=0.0)))),
    _route("/topology", GET=Endpoint(Api.get_topology)),
    _route("/links", GET=Endpoint(Api.get_links)),
    _route("/echelons", GET=Endpoint(Api.get_echelons, query=(Field("recent_s", seconds(0.0, 86400.0)),
                                                              *HEAVY_PAGE))),
    _route("/rounds", GET=Endpoint(Api.get_rounds, query=(Field("limit", count(1, RECENT_PASSES),
                                                                default=20),))),
    _route("/enforcement", GET=Endpoint(Api.get_enforcement),
           POST=Endpoint(Api.post_enforcement, True, None, WAIT, body_limit=ENFORCEMENT_BODY_BYTES)),
    _route("/jobs", GET=Endpoint(Api.list_jobs, query=PAGE),
           POST=Endpoint(Api.post_job, True, _body("job_id", weight=1.0, compute_s=None))),
    _route("/channels", GET=Endpoint(Api.list_channels, query=PAGE),
           POST=Endpoint(Api.post_channel, True,
                         _body("channel_id", "src", "dst", "src_port", "dst_port", path=None), WAIT)),
    _route("/channels/{id}", GET=Endpoint(Api.get_channel),
           DELETE=Endpoint(Api.delete_channel, True, query=WAIT)),
    _route("/jobs/{id}", GET=Endpoint(Api.get_job), DELETE=Endpoint(Api.delete_job, True)),
    _route("/jobs/{id}/abort", POST=Endpoint(Api.post_abort, True, _body(at_s=None), WAIT)),
    _route("/jobs/{id}/echelons", GET=Endpoint(Api.list_echelons, query=PAGE),
           POST=Endpoint(Api.post_echelon, True, _body("echelon_id", kind=None, flows=()))),
    _route("/jobs/{id}/echelons/{id}", GET=Endpoint(Api.get_echelon)),
    _route("/jobs/{id}/echelons/{id}/flows", POST=Endpoint(Api.post_flows, True, _body("flows"))),
    _route("/jobs/{id}/flows", GET=Endpoint(Api.list_flows, query=STATE + PAGE)),
    _route("/jobs/{id}/flows/{id}", GET=Endpoint(Api.get_flow)),
    _route("/jobs/{id}/flows/{id}/start", POST=Endpoint(Api.post_start, True, START_ON_PORTS, WAIT)),
    _route("/jobs/{id}/flows/{id}/progress", POST=Endpoint(Api.post_progress, True, _body("bytes_sent"))),
    _route("/jobs/{id}/flows/{id}/finish",
           POST=Endpoint(Api.post_finish, True, _body(finish_s=None, bytes_sent=None), WAIT)),
    _route("/jobs/{id}/flows/{id}/allocation", GET=Endpoint(Api.get_allocation)),
]


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
