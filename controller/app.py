"""The EchelonFlow OpenFlow 1.3 app: a thin shell around :class:`Router` and :class:`Enforcer`.

Load it with ``osken-manager controller/app.py`` (or ``ryu-manager controller/app.py`` on the Ryu VM):
with nothing else it controls the k=4 fat-tree at 10 Mbit/s, API on 127.0.0.1:8181.  Its settings are
one :class:`~controller.config.ControllerConfig` (the topology, priority classes, meter sizing, the
registry store, token file, API and metrics addresses, intervals), taken from an ``[echelon]`` section
of the manager's ``--config-file`` and from ``ECHELON_*`` environment variables, which is how
``controller.launcher.ControllerProcess`` passes them; a bad value stops the app with one line.

The app learns the fabric from the very graph the simulator and the Mininet fabric are built from, not
by LLDP discovery: that graph gives ports, dpids and host addresses deterministically and at once, while
discovery would inject LLDP packets into shaped queues, take seconds to converge, and could disagree
with the simulator.  The HTTP API (docs/api.md) is the app's only control surface: besides the registry
and the scheduler it serves the low-level enforcement primitives (``/v1/enforcement``,
controller.enforcement_api) that tests and benchmarks use.  Prometheus metrics (controller.metrics) and
the dashboard at ``/ui/`` come from the counters each switch is asked for every stats interval
(controller.switch_stats).

Every handler decodes the event, asks a pure object what to do and sends the op list it returns
(:func:`send_ops`); no forwarding logic lives here.  Everything runs as green threads of the one eventlet
hub (OpenFlow handlers, API requests, the scheduling loop, the counter poll), so nothing needs a lock and
nothing may block: the API's waits use the hub's events.  Where the scheduling service plugs in: it takes
``app.enforcer`` (install/update/remove return an :class:`~controller.enforcement.Ack` resolved on
barrier replies) and may append callables to ``app.switch_ready_hooks`` (called with the dpid after a
switch (re)connected and got its routing and enforcement state back).

Faults: a port going down or up (OFPT_PORT_STATUS, and the port list each switch is asked for when it
connects) and a switch disconnecting or reconnecting change one :class:`~echelonflow.linkstate.LinkState`
that the router and the registry share; :meth:`EchelonApp._links_changed` then moves every pair route,
scheduled flow and channel, and any enforcement primitive, whose path changed (docs/faults.md).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

# osken-manager loads this file by path, so the project root may not be on sys.path yet.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from controller import compat  # noqa: E402
from controller import flowmods as fm  # noqa: E402
from controller.api import Api  # noqa: E402
from controller.api_server import ApiServer, ServerError  # noqa: E402
from controller.auth import TokenError, generate_token, write_token  # noqa: E402
from controller.compat import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, ofp_event, set_ev_cls  # noqa: E402
from controller.config import START_ERROR_PREFIX, ControllerConfig, oslo_options  # noqa: E402
from controller.enforcement import Ack, Enforcer  # noqa: E402
from controller.enforcement_api import EnforcementEndpoints  # noqa: E402
from controller.heap import settle  # noqa: E402
from controller.live_view import LiveView  # noqa: E402
from controller.metrics import ControllerMetrics  # noqa: E402
from controller.owner_lock import own_store_and_token  # noqa: E402
from controller.routing import Router  # noqa: E402
from controller.service import SchedulingService  # noqa: E402
from controller.store import StoreError, open_registry  # noqa: E402
from controller.switch_stats import MeterCounters, SwitchPortCounters, SwitchStats  # noqa: E402
from controller.views import counts  # noqa: E402
from echelonflow.errors import UserError  # noqa: E402
from echelonflow.linkstate import LinkState  # noqa: E402

LOG = logging.getLogger("echelon.controller")
# Ryu/os-ken apps take options from the manager's --config-file: ours live in its [echelon] section.
compat.cfg.CONF.register_opts(oslo_options(compat.cfg), group="echelon")
OFP_ERROR_MARK = "OFP-ERROR"  # the launcher fails tests on log lines carrying it


class EchelonApp(compat.BaseApp):
    OFP_VERSIONS = [compat.ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            self.config = config = ControllerConfig.load(os.environ, compat.cfg.CONF.echelon)
            self.topology = config.build_topology()
            # what can be refused is, before the first write: a refused start leaves no trace
            for what, path in (("registry store", config.store), ("API token file", config.token_file)):
                if os.path.isdir(path):
                    raise UserError(f"{what} {path} is a directory; give a file path")
            api_host, api_port = config.api_host, config.api_port
            ApiServer(None, host=api_host, port=api_port, socket_path=config.socket_path).check()
            if config.metrics_port is not None:
                ApiServer(None, host=config.metrics_host, port=config.metrics_port, unix=False).check()
            # one controller per store and per token file, for this process's whole life (owner_lock)
            self._owner_locks = own_store_and_token(config.store, config.token_file)
            self.registry = open_registry(self.topology, config.store, config.retention)
            token = generate_token()
            write_token(config.token_file, token)
        except (UserError, StoreError, TokenError, ServerError) as exc:  # a bad setting, spec, store,
            # token or address: one line
            print(f"{START_ERROR_PREFIX}{exc}", file=sys.stderr, flush=True)
            os._exit(2)
        #: Links and switches down now; the router, the registry and the primitives route around them.
        self.links = LinkState()
        self.router = Router(self.topology, config, links=self.links)
        self.datapaths: dict[int, Any] = {}
        self._barrier_tickets: dict[tuple[int, int], Ack] = {}
        self.enforcer = Enforcer(self.topology, self.send_ops, config, event_factory=compat.hub.Event)
        self.switch_ready_hooks: list[Callable[[int], None]] = []
        self.registry.links = self.links
        pass_lock = compat.hub.Semaphore()  # one change of enforcement at a time: a pass or a batch
        self.service = SchedulingService(self.registry, self.enforcer, config, lock=pass_lock,
                                         event_factory=compat.hub.Event)
        self.stats_interval_s = config.stats_interval_s
        self.switch_stats = SwitchStats(self.topology)
        live = LiveView(self.service, self.switch_stats)
        self.metrics = ControllerMetrics(live, connected=lambda: list(self.datapaths),
                                         meter_owners=self.meter_owners)
        self.service.pass_listeners.append(self.metrics.observe_pass)
        self.token_file = config.token_file
        self.api_server = ApiServer(
            Api(self.service, token, status=self.switch_status,
                enforcement=EnforcementEndpoints(self.enforcer, lock=pass_lock, pause=compat.hub.sleep),
                live=live),
            host=config.api_host, port=config.api_port, socket_path=config.socket_path,
        )
        self.metrics_server = None if config.metrics_port is None else ApiServer(
            self.metrics.wsgi_app(), host=config.metrics_host, port=config.metrics_port, unix=False,
            name="metrics")
        self._closed = False
        LOG.info("echelon app up (%s): topology %s, %d switches", compat.FRAMEWORK, self.topology.name,
                 len(self.topology.switches))

    # ----------------------------------------------------------------------- life cycle of the app
    def start(self) -> Any:
        """After the manager built every app: serve the API, re-enforce the stored registry, start loops.

        ``service.start()`` runs before any switch is connected, so its installs resolve as
        "unreachable" and the Enforcer sends each switch its share in ``reinstall`` when it connects:
        that is how enforcement comes back after a controller restart without any agent doing anything.
        """
        thread = super().start()
        self.api_server.start()
        if self.metrics_server is not None:
            self.metrics_server.start()
        report = self.service.start()
        LOG.info("registry loaded: %s; scheduler %s re-enforced %d flows", counts(self.registry),
                 self.service.scheduler_name, report.installs)
        settle()  # the start-up's objects out of full collections, which stall rounds
        self.threads.append(compat.hub.spawn(self.service.run, compat.hub.sleep))
        if self.stats_interval_s > 0:
            self.threads.append(compat.hub.spawn(self._poll_stats))
        signal.signal(signal.SIGTERM, self._on_sigterm)
        return thread

    def close(self) -> None:
        """Stop the loops and the API (removes its socket file), close the store.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.service.stop()
        self.api_server.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        store = self.registry.store
        if store is not None:
            store.close()  # type: ignore[attr-defined]
        LOG.info("echelon app closed")

    def stop(self) -> None:
        self.close()
        super().stop()

    def _on_sigterm(self, _signum: int, _frame: Any) -> None:
        # The handler runs inside whatever the hub was doing: close in a green thread of our own, then
        # exit the process (osken-manager has no SIGTERM handling of its own; the default just dies).
        compat.hub.spawn(self._exit_cleanly)

    def _exit_cleanly(self) -> None:
        try:
            self.close()
        finally:
            logging.shutdown()
            os._exit(0)

    def switch_status(self) -> dict[str, Any]:
        """Extra ``GET /v1/health`` fields: how many of the topology's switches are connected."""
        return {"switches": {"connected": len(self.datapaths), "expected": len(self.topology.switches)},
                "enforced_flows": len(self.enforcer.live_flows())}

    def meter_owners(self) -> dict[tuple[int, int], str]:
        """(first-hop dpid, meter id) -> flow id of every enforced flow with a meter (metrics labels)."""
        return {(self.enforcer.first_hop(f.flow_id), f.meter_id): f.flow_id
                for f in self.enforcer.live_flows().values() if f.meter_id is not None}

    # ----------------------------------------------------------------------- counters
    def _poll_stats(self) -> None:
        """Every ``stats_interval_s``: ask each first-hop switch for its enforced forward rules' counters,
        and every switch for its port and meter counters.

        One flow-stats request per first-hop switch (cookie/mask select forward enforcement rules only);
        the replies feed ``service.observe_bytes`` in :meth:`_on_flow_stats`, so remaining bytes stay
        current even when an agent reports progress rarely.  Port and meter replies go to
        ``switch_stats`` (metrics and the dashboard's link utilisation).
        """
        cookie, mask = Enforcer.FORWARD_COOKIE
        while not self._closed:
            compat.hub.sleep(self.stats_interval_s)
            for dpid in list(self.enforcer.first_hops()):
                dp = self.datapaths.get(dpid)
                if dp is None:
                    continue
                ofp, parser = dp.ofproto, dp.ofproto_parser
                dp.send_msg(parser.OFPFlowStatsRequest(dp, 0, 0, ofp.OFPP_ANY, ofp.OFPG_ANY, cookie, mask,
                                                       parser.OFPMatch()))
            for dp in list(self.datapaths.values()):
                ofp, parser = dp.ofproto, dp.ofproto_parser
                dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
                dp.send_msg(parser.OFPMeterStatsRequest(dp, 0, ofp.OFPM_ALL))

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _on_port_stats(self, ev: Any) -> None:
        msg = ev.msg
        rows = {s.port_no: SwitchPortCounters(s.tx_packets, s.rx_packets, s.tx_bytes, s.rx_bytes,
                                              s.tx_dropped, s.rx_dropped, s.tx_errors, s.rx_errors)
                for s in msg.body}
        self.switch_stats.record_ports(msg.datapath.id, time.time(), rows, _more(msg))

    @set_ev_cls(ofp_event.EventOFPMeterStatsReply, MAIN_DISPATCHER)
    def _on_meter_stats(self, ev: Any) -> None:
        msg = ev.msg
        rows = {s.meter_id: MeterCounters(
            s.flow_count, s.byte_in_count, s.packet_in_count, sum(b.byte_band_count for b in s.band_stats),
            sum(b.packet_band_count for b in s.band_stats)) for s in msg.body}
        self.switch_stats.record_meters(msg.datapath.id, rows, _more(msg))

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _on_flow_stats(self, ev: Any) -> None:
        dpid = ev.msg.datapath.id
        for stat in ev.msg.body:
            flow_id = self.enforcer.flow_of_cookie(stat.cookie)
            if flow_id is not None and self.enforcer.first_hop(flow_id) == dpid:
                self.service.observe_bytes(flow_id, stat.byte_count)

    # ----------------------------------------------------------------------- sending
    def send_ops(self, dpid: int, ops: list[fm.Op]) -> None:
        """Encode and send ``ops`` to one switch; barrier tickets resolve on the matching reply."""
        dp = self.datapaths.get(dpid)
        if dp is None:
            for op in ops:
                if isinstance(op, fm.Barrier) and op.ticket is not None:
                    op.ticket.switch_unreachable(dpid)
            return
        self.metrics.sent(dpid, ops)
        for op in ops:
            msg = fm.encode(op, dp.ofproto, dp.ofproto_parser)
            msg.datapath = dp
            if isinstance(op, fm.Barrier) and op.ticket is not None:
                dp.set_xid(msg)
                self._barrier_tickets[(dpid, msg.xid)] = op.ticket
            dp.send_msg(msg)

    # ----------------------------------------------------------------------- switch life cycle
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _on_features(self, ev: Any) -> None:
        dp = ev.msg.datapath
        if dp.id not in self.router.switch_by_dpid:
            LOG.warning("switch dpid %#x is not in topology %s; ignoring it", dp.id, self.topology.name)
            return
        self.datapaths[dp.id] = dp
        self.metrics.connected(dp.id)
        self.send_ops(dp.id, self.router.ops_for_switch(dp.id))
        self.enforcer.reinstall(dp.id)
        name = self.router.switch_by_dpid[dp.id]
        LOG.info("switch %s (dpid %#x) ready", name, dp.id)
        dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))  # which of its ports are down
        if self.links.set_switch(name, up=True):
            self._links_changed(f"switch {name} reconnected")
        for hook in self.switch_ready_hooks:
            hook(dp.id)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def _on_dead(self, ev: Any) -> None:
        dp = ev.datapath
        if dp.id is not None and self.datapaths.get(dp.id) is dp:
            del self.datapaths[dp.id]
            self.metrics.disconnected(dp.id)
            for key in [k for k in self._barrier_tickets if k[0] == dp.id]:
                self._barrier_tickets.pop(key).switch_unreachable(dp.id)
            LOG.info("switch dpid %#x disconnected", dp.id)
            name = self.router.switch_by_dpid.get(dp.id)
            if name is not None and self.links.set_switch(name, up=False):
                self._links_changed(f"switch {name} disconnected")

    # ----------------------------------------------------------------------- faults
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _on_port_status(self, ev: Any) -> None:
        msg = ev.msg
        gone = msg.reason == msg.datapath.ofproto.OFPPR_DELETE
        self._port_state(msg.datapath, [msg.desc], gone)

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def _on_port_desc(self, ev: Any) -> None:
        self._port_state(ev.msg.datapath, ev.msg.body, gone=False)

    def _port_state(self, dp: Any, ports: Any, gone: bool) -> None:
        """Ports of one switch reported (status change or the list on connect): mark their links."""
        switch = self.router.switch_by_dpid.get(dp.id)
        if switch is None:
            return
        ofp = dp.ofproto
        changed = []
        for desc in ports:
            neighbour = self.topology.neighbour_on_port(switch, desc.port_no)
            if neighbour is None:
                continue
            up = not gone and not desc.state & ofp.OFPPS_LINK_DOWN and not desc.config & ofp.OFPPC_PORT_DOWN
            if self.links.set_port(switch, neighbour, up):
                changed.append(f"{switch}-{neighbour} {'up' if up else 'down'} (port {desc.port_no})")
        if changed:
            self._links_changed("link " + ", ".join(changed))

    def _links_changed(self, what: str) -> None:
        """Move everything whose path the change affects: pair routes, the service's flows and channels
        (registry paths, rules, meters kept), then enforcement primitives left on something down."""
        started = time.monotonic()
        for dpid, ops in self.router.reroute().items():
            self.send_ops(dpid, ops)
        moved, _report = self.service.on_links_changed()
        for flow_id in self.enforcer.stranded(self.links.passes):
            if flow_id not in self.service.installed:  # a primitive: its own key picks the new path
                src, dst = self.enforcer.host_pair(flow_id)
                self.enforcer.repath(flow_id, self.topology.path_for(src, dst, flow_id, self.links))
                moved.append(flow_id)
        self.metrics.rerouted(len(moved))
        LOG.info("%s; down now: %s; moved %d enforced flows in %.1f ms%s", what, self.links.describe(),
                 len(moved), 1000 * (time.monotonic() - started), f": {', '.join(moved)}" if moved else "")

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _on_barrier_reply(self, ev: Any) -> None:
        ticket = self._barrier_tickets.pop((ev.msg.datapath.id, ev.msg.xid), None)
        if ticket is not None:
            ticket.switch_done(ev.msg.datapath.id)

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def _on_flow_removed(self, ev: Any) -> None:
        msg = ev.msg
        idle = msg.reason == msg.datapath.ofproto.OFPRR_IDLE_TIMEOUT
        flow_id = self.enforcer.on_flow_removed(msg.datapath.id, msg.cookie, idle)
        if flow_id is not None:
            self.service.forget(flow_id)
            LOG.info("enforced flow %s idled out; rules and meter removed", flow_id)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_error(self, ev: Any) -> None:
        msg = ev.msg
        self.metrics.error(msg.datapath.id)
        LOG.error("%s switch dpid %#x rejected a message: type=%d code=%d", OFP_ERROR_MARK,
                  msg.datapath.id, msg.type, msg.code)

    # ----------------------------------------------------------------------- packets
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _on_packet_in(self, ev: Any) -> None:
        msg = ev.msg
        dpid, in_port = msg.datapath.id, msg.match["in_port"]
        self.metrics.packet_in(dpid)
        pkt = compat.packet.Packet(msg.data)
        request = pkt.get_protocol(compat.arp.arp)
        if request is not None:
            self._answer_arp(dpid, in_port, request)
            return
        ip = pkt.get_protocol(compat.ipv4.ipv4)
        if ip is not None:
            decision = self.router.on_ipv4(dpid, in_port, ip.src, ip.dst, msg.data, time.monotonic())
            for target, ops in decision.items():
                self.send_ops(target, ops)

    def _answer_arp(self, dpid: int, in_port: int, request: Any) -> None:
        if request.opcode != compat.arp.ARP_REQUEST:
            return
        mac = self.router.arp_reply_mac(request.dst_ip)
        if mac is None:
            return
        reply = compat.packet.Packet()
        reply.add_protocol(compat.ethernet.ethernet(
            ethertype=compat.ether_types.ETH_TYPE_ARP, dst=request.src_mac, src=mac))
        reply.add_protocol(compat.arp.arp(
            opcode=compat.arp.ARP_REPLY, src_mac=mac, src_ip=request.dst_ip,
            dst_mac=request.src_mac, dst_ip=request.src_ip))
        reply.serialize()
        self.send_ops(dpid, [fm.PacketOut(fm.OFPP_CONTROLLER, in_port, bytes(reply.data))])


def _more(msg: Any) -> bool:
    """Whether a multipart reply continues in another message (OFPMPF_REPLY_MORE)."""
    return bool(msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE)
