"""What the controller's unit tests share: a k=4 fat-tree, a send function that records ops into a small
switch-table model (and walks packets through it hop by hop), switches that acknowledge every barrier,
and the controller's API called in-process through its WSGI entry.

No fabric: the ops are plain values (``controller.flowmods``), so a test sees exactly what a switch
would receive.
"""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from controller import flowmods as fm
from controller.api import Api
from controller.config import ControllerConfig
from controller.enforcement import Enforcer, FlowMatch
from controller.enforcement_api import EnforcementEndpoints
from controller.registry import Registry
from controller.service import SchedulingService
from controller.validation import COOPERATE_KEY
from echelonflow.topology import Topology, fattree

TOPO = fattree(10e6, k=4)


class Recorder:
    """A send function that records ops per dpid and keeps a per-switch rule/meter table model."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, list[fm.Op]]] = []
        self.rules: dict[int, dict[tuple, fm.FlowRule]] = {}
        self.meters: dict[int, dict[int, fm.MeterSet]] = {}

    def __call__(self, dpid: int, ops: list[fm.Op]) -> None:
        self.sent.append((dpid, list(ops)))
        table, meters = self.rules.setdefault(dpid, {}), self.meters.setdefault(dpid, {})
        for op in ops:
            if isinstance(op, fm.FlowRule):
                assert op.meter_id is None or op.meter_id in meters, "rule points at a missing meter"
                table[(op.priority, op.match)] = op
            elif isinstance(op, fm.FlowDelete):
                for key in [k for k, r in table.items() if (r.cookie & op.cookie_mask) == op.cookie]:
                    del table[key]
            elif isinstance(op, fm.MeterSet):
                assert op.modify == (op.meter_id in meters), "meter add/modify does not fit the switch state"
                meters[op.meter_id] = op
            elif isinstance(op, fm.MeterDelete):
                in_use = any(r.meter_id == op.meter_id for r in table.values())
                assert not in_use, "meter deleted while in use"
                meters.pop(op.meter_id, None)

    def resolve_barriers(self) -> None:
        for dpid, ops in self.sent:
            for op in ops:
                if isinstance(op, fm.Barrier) and op.ticket is not None:
                    op.ticket.switch_done(dpid)

    def walk(self, topo: Topology, src: str, packet: dict) -> list[str]:
        """Follow ``packet`` from host ``src`` through the highest-priority matching rules."""
        dpid_to_name = {topo.graph.nodes[s]["dpid"]: s for s in topo.switches}
        name_to_dpid = {v: k for k, v in dpid_to_name.items()}
        node, path = topo.host_switch(src), [src]
        while topo.graph.nodes[node]["kind"] == "switch" and len(path) < 10:
            path.append(node)
            rules = [r for r in self.rules.get(name_to_dpid[node], {}).values()
                     if all(packet.get(k) == v for k, v in r.match)]
            assert rules, f"no rule for {packet} on {node}"
            best = max(rules, key=lambda r: r.priority)
            (out,) = [a.port for a in best.actions if isinstance(a, fm.Output)]
            node = topo.neighbour_on_port(node, out)
        return path + [node]


def ip(host: str) -> str:
    return TOPO.graph.nodes[host]["ip"]


def dpid(switch: str) -> int:
    return TOPO.graph.nodes[switch]["dpid"]


# ----------------------------------------------------------------------------- enforcement
def make_enforcer(rec: Recorder, clock=None) -> Enforcer:
    times = iter(clock or range(1000))
    return Enforcer(TOPO, rec, ControllerConfig(queues=4, enforce_idle_s=60),
                    clock=lambda: float(next(times)))


#: one k=4 path, pod 1 to pod 2 through core c3, and a 5-tuple on it
PATH = ("h1", "e1", "a2", "c3", "a4", "e3", "h5")
MATCH = FlowMatch(ip("h1"), ip("h5"), 40001, 5201)


def packet(match: FlowMatch) -> dict:
    return dict(match.fields())


# ----------------------------------------------------------------------------- the API, in-process
TOKEN = "unit-token"


class AckingSwitches:
    """A send function standing in for connected switches: records ops and answers every barrier."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, list[fm.Op]]] = []

    def __call__(self, dpid: int, ops: list[fm.Op]) -> None:
        self.sent.append((dpid, list(ops)))
        for op in ops:
            if isinstance(op, fm.Barrier) and op.ticket is not None:
                op.ticket.switch_done(dpid)


def make_api(with_enforcer: bool = True) -> SimpleNamespace:
    """The API app over a registry, a scheduling service without switches and (unless told otherwise)
    enforcement primitives on switches that acknowledge everything."""
    switches = AckingSwitches()
    enforcer = Enforcer(TOPO, switches, ControllerConfig(queues=4))
    endpoints = EnforcementEndpoints(enforcer) if with_enforcer else None
    api = Api(SchedulingService(Registry(TOPO), None), TOKEN, enforcement=endpoints)
    return SimpleNamespace(api=api, enforcer=enforcer, switches=switches)


def call(api, method: str, path: str, body=None, token: str | None = TOKEN):
    """One request through the API's WSGI entry: (status, decoded JSON)."""
    raw = b"" if body is None else json.dumps(body).encode()
    route, _, query = path.partition("?")
    environ = {"REQUEST_METHOD": method, "PATH_INFO": route, "QUERY_STRING": query,
               "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(raw)),
               "wsgi.input": io.BytesIO(raw)}
    if token is not None:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    seen = {}
    out = api(environ, lambda status, headers: seen.update(status=status))
    return int(seen["status"].split()[0]), json.loads(b"".join(out))


def get_raw(api, path: str, cooperate=None) -> tuple[int, bytes]:
    """A GET through the API's WSGI entry, with the hub-turn hook a server gives (``COOPERATE_KEY``):
    (status, the body's bytes)."""
    route, _, query = path.partition("?")
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": route, "QUERY_STRING": query, "wsgi.input": io.BytesIO()}
    if cooperate is not None:
        environ[COOPERATE_KEY] = cooperate
    seen = {}
    out = b"".join(api(environ, lambda status, headers: seen.update(status=status)))
    return int(seen["status"].split()[0]), out


def match_body(**over):
    """An enforcement request's ``match`` (h1 -> h5), with fields replaced by ``over``."""
    return {"src_ip": ip("h1"), "dst_ip": ip("h5"), "src_port": 40001, "dst_port": 5201, **over}


def install_body(**over):
    """An enforcement ``install`` request for flow ``new``, with fields replaced by ``over``."""
    return {"op": "install", "flow_id": "new", "match": match_body(), "queue": 1, **over}
