"""The API's low-level enforcement primitives: ``GET /v1/enforcement`` and ``POST /v1/enforcement``.

Why they exist next to the scheduling service: tests and benchmarks must pin one 5-tuple to a chosen
path, class and meter and time the switches' barrier acks, without a scheduler deciding anything.  They
drive the same :class:`~controller.enforcement.Enforcer` the service drives, through the same
authenticated API (one control surface, one token, one error shape), and are documented in docs/api.md
as primitives: the scheduling service is the normal user of enforcement.

A POST carries one operation (``{"op": "install" | "update" | "remove", ...}``) or ``{"op": "batch",
"requests": [...]}``.  Every operation of a request is validated, in order and against the live state
as the earlier ones would leave it, before the first one is applied: a refused request applies nothing.
Flow ids containing ``/`` are reserved for the scheduling service's ``job/flow`` ids, and a 5-tuple
(either direction) that a live flow's rules match cannot be installed again under another id, so the
primitives can neither take over nor disturb a scheduled flow, nor the service a primitive's.

Framework-free and stdlib only (Python 3.9 compatible); waits use the Enforcer's event type, i.e. the
hub's events inside the controller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.enforcement import (
    Ack,
    EnforcementError,
    Enforcer,
    FlowMatch,
    LiveFlow,
    check_match_free,
    wait_acks,
)
from controller.validation import ApiError, fields

#: Most operations one batch may carry (a 100-flow batch is what benchmarks/bench_rules.py times).
MAX_BATCH = 10000
MAX_FLOW_ID_CHARS = 128

_FIELDS = {  # op -> (required, optional)
    "install": (("op", "flow_id", "match", "queue"), ("path", "rate_bps")),
    "update": (("op", "flow_id"), ("queue", "rate_bps", "clear_rate")),
    "remove": (("op", "flow_id"), ()),
}
_MATCH_FIELDS = (("src_ip", "dst_ip", "src_port", "dst_port"), ("ip_proto",))
_STATUS = {"invalid": 400, "unknown": 404, "conflict": 409}


@dataclass(frozen=True)
class Step:
    """One validated operation, ready to apply."""

    op: str
    flow_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)


class EnforcementEndpoints:
    """Validates and applies enforcement requests on one :class:`Enforcer`; answers JSON-ready dicts."""

    def __init__(self, enforcer: Enforcer) -> None:
        self.enforcer = enforcer
        nodes = enforcer.topology.graph.nodes
        self._host_of_ip = {nodes[h]["ip"]: h for h in enforcer.topology.hosts}

    # ------------------------------------------------------------------ reads
    def live(self) -> dict[str, Any]:
        """Every flow the enforcer holds in force (the service's and the primitives'), by flow id."""
        flows = self.enforcer.live_flows()
        return {"flows": [flow_view(flows[fid]) for fid in sorted(flows)]}

    # ------------------------------------------------------------------ writes
    def apply(self, body: Any, wait_s: float | None) -> dict[str, Any]:
        """Validate all of ``body``, apply it, and with ``wait_s`` wait for the barrier acks."""
        steps = self.parse(body)
        started_s = self.enforcer.clock()
        acks = [self._run(step) for step in steps]
        answer: dict[str, Any] = {"applied": [{"op": s.op, "flow_id": s.flow_id} for s in steps]}
        if wait_s is not None:
            answer["enforcement"] = wait_for(acks, started_s, wait_s)
        return answer

    def parse(self, body: Any) -> list[Step]:
        """The request's operations, each checked against the state the earlier ones leave."""
        if not isinstance(body, dict):
            raise _bad("body", "must be a JSON object")
        if body.get("op") == "batch":
            fields(body, ("op", "requests"))
            requests = body["requests"]
            if not isinstance(requests, list) or not requests:
                raise _bad("requests", "must be a non-empty list of install, update or "
                           "remove requests")
            if len(requests) > MAX_BATCH:
                raise _bad("requests", f"{len(requests)} operations; at most {MAX_BATCH}")
            items = [(f"requests[{i}].", r) for i, r in enumerate(requests)]
        else:
            items = [("", body)]
        live = {fid: flow.match for fid, flow in self.enforcer.live_flows().items()}
        held = self.enforcer.holders()
        steps = []
        for prefix, request in items:
            step = self._step(prefix, request)
            if step.op == "install" and step.flow_id in live:
                raise ApiError(
                    409, prefix + "flow_id", f"flow {step.flow_id!r} is already enforced; remove it first")
            if step.op != "install" and step.flow_id not in live:
                raise ApiError(404, prefix + "flow_id", f"no enforced flow {step.flow_id!r}")
            if step.op == "install":
                match = step.kwargs["match"]
                try:
                    check_match_free(step.flow_id, match, held)
                except EnforcementError as err:
                    raise ApiError(409, prefix + "match", str(err)) from None
                live[step.flow_id] = match
                held[match] = held[match.reversed()] = step.flow_id
            elif step.op == "remove":
                gone = live.pop(step.flow_id)
                held.pop(gone, None)
                held.pop(gone.reversed(), None)
            steps.append(step)
        return steps

    def _step(self, prefix: str, request: Any) -> Step:
        where = prefix[:-1] if prefix else "body"
        if not isinstance(request, dict):
            raise _bad(where, "must be a JSON object")
        op = request.get("op")
        if op not in _FIELDS:
            problem = "missing" if "op" not in request else f"unknown op {op!r}"
            allowed = "install, update or remove" + ("" if prefix else " (or batch)")
            raise _bad(prefix + "op", f"{problem}; use {allowed}")
        required, optional = _FIELDS[op]
        fields(request, required, optional, prefix=prefix)
        flow_id = request["flow_id"]
        if not isinstance(flow_id, str) or not 0 < len(flow_id) <= MAX_FLOW_ID_CHARS:
            raise _bad(
                prefix + "flow_id", f"must be a string of 1..{MAX_FLOW_ID_CHARS} characters, got {flow_id!r}")
        if "/" in flow_id:
            raise _bad(prefix + "flow_id", "'/' is reserved for the scheduling service's "
                       f"job/flow ids, got {flow_id!r}")
        try:
            if op == "install":
                return self._install_step(prefix, flow_id, request)
            if op == "update":
                return self._update_step(prefix, flow_id, request)
        except EnforcementError as err:
            raise ApiError(_STATUS.get(err.kind, 400), prefix + (err.field or "body"),
                                     str(err)) from None
        return Step("remove", flow_id)

    def _install_step(self, prefix: str, flow_id: str, request: dict[str, Any]) -> Step:
        match = self._match(prefix + "match.", request["match"])
        path = request.get("path")
        if path is not None and (not isinstance(path, list) or not all(isinstance(n, str) for n in path)):
            raise _bad(prefix + "path",
                       f"must be a list of node names or null, got {path!r}")
        if path is None:
            src, dst = self._host_of_ip.get(match.src_ip), self._host_of_ip.get(match.dst_ip)
            known = src is not None and dst is not None and src != dst
            path = list(self.enforcer.topology.path_for(src, dst, flow_id)) if known else []
        queue, rate_bps = request["queue"], request.get("rate_bps")
        node_path = self.enforcer.validate_install(flow_id, match, path, queue, rate_bps)
        return Step("install", flow_id, {"match": match, "path": node_path, "queue": queue,
                                         "rate_bps": rate_bps})

    def _update_step(self, prefix: str, flow_id: str, request: dict[str, Any]) -> Step:
        clear_rate = request.get("clear_rate", False)
        if not isinstance(clear_rate, bool):
            raise _bad(prefix + "clear_rate", f"must be true or false, got {clear_rate!r}")
        queue, rate_bps = request.get("queue"), request.get("rate_bps")
        if queue is None and rate_bps is None and not clear_rate:
            raise _bad(prefix + "op",
                       "an update needs queue, rate_bps or clear_rate: true")
        self.enforcer.validate_update(flow_id, queue, rate_bps, clear_rate)
        return Step("update", flow_id, {"queue": queue, "rate_bps": rate_bps, "clear_rate": clear_rate})

    @staticmethod
    def _match(prefix: str, raw: Any) -> FlowMatch:
        if not isinstance(raw, dict):
            raise _bad(prefix[:-1], "must be an object with src_ip, dst_ip, src_port, "
                       "dst_port and optionally ip_proto")
        fields(raw, *_MATCH_FIELDS, prefix=prefix)
        for name in ("src_ip", "dst_ip"):
            if not isinstance(raw[name], str):
                raise _bad(prefix + name,
                           f"must be an IPv4 address string, got {raw[name]!r}")
        for name in ("src_port", "dst_port", "ip_proto"):
            value = raw.get(name, 6)
            if not isinstance(value, int) or isinstance(value, bool):
                raise _bad(prefix + name, f"must be an integer, got {value!r}")
        return FlowMatch(raw["src_ip"], raw["dst_ip"], raw["src_port"], raw["dst_port"],
                         raw.get("ip_proto", 6))

    def _run(self, step: Step) -> Ack:
        if step.op == "install":
            return self.enforcer.install(step.flow_id, **step.kwargs)
        if step.op == "update":
            return self.enforcer.update(step.flow_id, **step.kwargs)
        return self.enforcer.remove(step.flow_id)


def wait_for(acks: Sequence[Ack], started_s: float, wait_s: float) -> dict[str, Any]:
    """Wait up to ``wait_s`` for ``acks``; the same fields as the service's ``enforcement`` answer.

    ``latency_s`` runs from just before the first operation was applied to the last barrier reply of
    every switch the request touched (None unless every ack resolved with every switch reachable).
    """
    result = wait_acks(acks, wait_s)
    done = [a.done_s for a in acks if a.done_s is not None]
    result["latency_s"] = (max(done) - started_s) if result["in_force"] and done else None
    return result


def flow_view(flow: LiveFlow) -> dict[str, Any]:
    """One live flow as the API shows it (``owner``: ``service`` for job/flow ids, else ``primitive``)."""
    m = flow.match
    return {"flow_id": flow.flow_id, "owner": "service" if "/" in flow.flow_id else "primitive",
            "match": {"src_ip": m.src_ip, "dst_ip": m.dst_ip, "src_port": m.src_port, "dst_port": m.dst_port,
                      "ip_proto": m.ip_proto},
            "path": list(flow.path), "queue": flow.queue, "rate_bps": flow.rate_bps,
            "meter_id": flow.meter_id}


def _bad(field: str, problem: str) -> ApiError:
    return ApiError(400, field, problem)
