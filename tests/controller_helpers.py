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


class ServedApi:
    """A registry (with its SQLite store when given a path) served over real HTTP on a Unix socket, its
    service's clock set by the test (``now_s``); ``client`` is a real :class:`EchelonClient`."""

    TOKEN = "t" * 32

    def __init__(self, tmp_path, retention=None, store_path=None, topology=None):
        from controller.api import Api
        from controller.api_server import ApiServer, GreenEvent, run_in_thread
        from controller.client import EchelonClient
        from controller.registry import Registry
        from controller.retention import Retention
        from controller.service import SchedulingService
        from controller.store import open_registry
        from echelonflow.topology import fattree

        self.now_s = 1000.0
        self.topology = topology or fattree(20e6, 4)
        self.retention = retention or Retention()
        self.registry = (open_registry(self.topology, str(store_path), self.retention) if store_path
                         else Registry(self.topology, retention=self.retention))
        self.service = SchedulingService(self.registry, None, ControllerConfig(interval_s=1.0),
                                         now=lambda: self.now_s, event_factory=GreenEvent)
        self.server = ApiServer(Api(self.service, self.TOKEN), port=0, socket_path=str(tmp_path / "api.sock"))
        self.thread = run_in_thread(self.server)
        self.client = EchelonClient(socket_path=self.server.socket_path, token=self.TOKEN)

    def run_job(self, job_id, flows=2, src="h1", dst="h5"):
        """Register ``job_id`` with one EchelonFlow of ``flows`` flows, start and finish them all now."""
        c = self.client
        c.register_job(job_id)
        c.register_echelon(job_id, "e", [{"flow_id": f"f{i}", "src": src, "dst": dst, "size_bytes": 1000}
                                         for i in range(flows)])
        for i in range(flows):
            c.flow_started(job_id, f"f{i}", 40000 + i, 5201)
        for i in range(flows):
            c.flow_finished(job_id, f"f{i}")

    def tick(self, now_s):
        """The clock moves to ``now_s`` and the interval loop's round runs (with the retention)."""
        self.now_s = now_s
        self.service.tick()  # no request is being served meanwhile: the test waits for each answer

    def stop(self):
        self.client.close()
        self.thread.stop()
        if self.registry.store is not None:
            self.registry.store.close()
