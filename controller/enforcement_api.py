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

A batch of 10,000 operations took the controller's one eventlet hub for 2-3 s in one piece (no
switch messages, API requests or passes served meanwhile; benchmarks/bench_batch_block.py, docs/api.md):
so validation and application yield to the hub every :data:`YIELD_EVERY` operations (``pause``, the
hub's ``sleep``), holding the scheduling service's pass lock throughout (``lock``), so that neither a
scheduling pass nor another batch interleaves with a half-applied one while others are served.

Framework-free and stdlib only (Python 3.9 compatible); waits use the Enforcer's event type, i.e. the
hub's events inside the controller.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

from controller.enforcement import (
    Ack,
    EnforcementError,
    Enforcer,
    FlowMatch,
    LiveFlow,
    check_match_free,
    wait_acks,
)
from controller.validation import ApiError
from echelonflow.fields import Field, array, boolean, identifier, integer, join, nullable, read, show, text

#: Most operations one batch may carry (a 100-flow batch is what benchmarks/bench_rules.py times).
MAX_BATCH = 10000
#: Operations validated or applied between two yields to the hub (about 40 ms of work here).
YIELD_EVERY = 200

#: A primitive's flow id: ids with "/" are the scheduling service's job/flow ids, never a primitive's.
FLOW_ID = identifier(re.compile(r"[^/\x00-\x1f]{1,128}"), "1-128 characters without '/', which is "
                                                         "reserved for the scheduling service's job/flow ids")
_OP = Field("op", required=True)
_FLOW = Field("flow_id", FLOW_ID, required=True)
#: op -> its declared fields (values the Enforcer checks against the topology: queue, rate, path).
OPS = {
    "install": (_OP, _FLOW, Field("match", required=True), Field("queue", required=True),
                Field("path", nullable(array(text(), of="of node names"))), Field("rate_bps")),
    "update": (_OP, _FLOW, Field("queue"), Field("rate_bps"), Field("clear_rate", boolean(), default=False)),
    "remove": (_OP, _FLOW),
}
BATCH = (_OP, Field("requests", array(nonempty=True, of="of install, update or remove requests"),
                    required=True))
MATCH = (Field("src_ip", text(), required=True), Field("dst_ip", text(), required=True),
         Field("src_port", integer(), required=True), Field("dst_port", integer(), required=True),
         Field("ip_proto", integer(), default=6))


@dataclass(frozen=True)
class Step:
    """One validated operation, ready to apply."""

    op: str
    flow_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)


class EnforcementEndpoints:
    """Validates and applies enforcement requests on one :class:`Enforcer`; answers JSON-ready dicts."""

    def __init__(self, enforcer: Enforcer, lock: Any = None,
                 pause: Callable[[float], Any] | None = None) -> None:
        """``lock``: held while a request is validated and applied (the app passes the scheduling
        service's pass lock); ``pause(0)``: yield to the other green threads (the hub's ``sleep``)."""
        self.enforcer = enforcer
        self._lock = lock if lock is not None else contextlib.nullcontext()
        self._pause = pause
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
        with self._lock:
            steps = self.parse(body)
            started_s = self.enforcer.clock()
            acks = []
            for index, step in enumerate(steps):
                self._yield_now_and_then(index)
                acks.append(self._run(step))
        answer: dict[str, Any] = {"applied": [{"op": s.op, "flow_id": s.flow_id} for s in steps]}
        if wait_s is not None:
            answer["enforcement"] = wait_for(acks, started_s, wait_s)
        return answer

    def parse(self, body: Any) -> list[Step]:
        """The request's operations, each checked against the state the earlier ones leave."""
        if not isinstance(body, dict):
            raise ApiError(400, "body", "must be a JSON object")
        if body.get("op") == "batch":
            requests = read(body, BATCH)["requests"]
            if len(requests) > MAX_BATCH:
                raise ApiError(400, "requests",
                               f"must hold at most {MAX_BATCH} operations, got {len(requests)}")
            items = [(f"requests[{i}]", r) for i, r in enumerate(requests)]
        else:
            items = [("", body)]
        live = {fid: flow.match for fid, flow in self.enforcer.live_flows().items()}
        held = self.enforcer.holders()
        steps = []
        for index, (where, request) in enumerate(items):
            self._yield_now_and_then(index)
            step = self._step(where, request)
            if step.op == "install" and step.flow_id in live:
                raise ApiError(409, join(where, "flow_id"),
                               f"flow {step.flow_id!r} is already enforced; remove it first")
            if step.op != "install" and step.flow_id not in live:
                raise ApiError(404, join(where, "flow_id"), f"no enforced flow {step.flow_id!r}")
            if step.op == "install":
                match = step.kwargs["match"]
                try:
                    check_match_free(step.flow_id, match, held)
                except EnforcementError as err:
                    raise ApiError(409, join(where, "match"), err.problem) from None
                live[step.flow_id] = match
                held[match] = held[match.reversed()] = step.flow_id
            elif step.op == "remove":
                gone = live.pop(step.flow_id)
                held.pop(gone, None)
                held.pop(gone.reversed(), None)
            steps.append(step)
        return steps

    def _yield_now_and_then(self, index: int) -> None:
        if self._pause is not None and index and index % YIELD_EVERY == 0:
            self._pause(0)

    def _step(self, where: str, request: Any) -> Step:
        if not isinstance(request, dict):
            raise ApiError(400, where or "body", "must be a JSON object")
        op = request.get("op")
        if not isinstance(op, str) or op not in OPS:  # a list or object is unhashable: never look it up
            ops = "install, update or remove" if where else "install, update, remove or batch"
            problem = f"missing (one of {ops})" if "op" not in request else f"must be {ops}, got {show(op)}"
            raise ApiError(400, join(where, "op"), problem)
        values = read(request, OPS[op], where)
        try:
            if op == "install":
                return self._install_step(where, values)
            if op == "update":
                return self._update_step(where, values)
        except EnforcementError as err:
            raise ApiError(err.status, join(where, err.field), err.problem) from None
        return Step("remove", values["flow_id"])

    def _install_step(self, where: str, values: dict[str, Any]) -> Step:
        flow_id = values["flow_id"]
        raw = read(values["match"], MATCH, join(where, "match"),
                   what="an object with src_ip, dst_ip, src_port, dst_port and optionally ip_proto")
        match = FlowMatch(raw["src_ip"], raw["dst_ip"], raw["src_port"], raw["dst_port"], raw["ip_proto"])
        path = values["path"]
        if path is None:
            src, dst = self._host_of_ip.get(match.src_ip), self._host_of_ip.get(match.dst_ip)
            known = src is not None and dst is not None and src != dst
            path = list(self.enforcer.topology.path_for(src, dst, flow_id)) if known else []
        queue, rate_bps = values["queue"], values["rate_bps"]
        node_path = self.enforcer.validate_install(flow_id, match, path, queue, rate_bps)
        return Step("install", flow_id, {"match": match, "path": node_path, "queue": queue,
                                         "rate_bps": rate_bps})

    def _update_step(self, where: str, values: dict[str, Any]) -> Step:
        queue, rate_bps, clear_rate = values["queue"], values["rate_bps"], values["clear_rate"]
        if queue is None and rate_bps is None and not clear_rate:
            raise ApiError(400, join(where, "op"), "an update needs queue, rate_bps or clear_rate: true")
        self.enforcer.validate_update(values["flow_id"], queue, rate_bps, clear_rate)
        return Step("update", values["flow_id"], {"queue": queue, "rate_bps": rate_bps,
                                                  "clear_rate": clear_rate})

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

