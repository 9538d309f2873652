"""OpenFlow 1.3 messages as plain values, and one function that turns them into framework messages.

Routing and enforcement decide *what* each switch should hold and return lists of the small frozen
values below; they never touch a datapath or send anything, so unit tests compare plain values and a
recording send function sees exactly what a switch would receive.  :func:`encode` builds the
os-ken/Ryu message of every op here, and it takes the ``ofproto``/``parser`` modules as arguments (the
app passes them from :mod:`controller.compat`), so this module imports no framework at all.  The
datapath is attached only when the app sends (``msg.datapath = dp``), as Faucet does.  What is not an op
here is the app's own: its four read-only requests (flow, port and meter statistics in its stats poll,
port descriptions when a switch connects) are built in ``controller/app.py``, since they change nothing
on a switch and their replies are handled there.

Cookies name who owns a rule: the top byte is the owner kind (:data:`COOKIE_ROUTE`,
:data:`COOKIE_ENFORCE`), the rest an owner-chosen number, so a delete by cookie/mask removes exactly one
owner's rules and a flow-removed message says which flow it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

COOKIE_KIND_SHIFT = 56
COOKIE_ROUTE = 1
COOKIE_ENFORCE = 2
COOKIE_KIND_MASK = 0xFF << COOKIE_KIND_SHIFT

# Rule priorities: enforced 5-tuples beat the per-host-pair routes they refine.
PRIORITY_TABLE_MISS = 0
PRIORITY_QUIET = 1
PRIORITY_ROUTE = 10
PRIORITY_ENFORCED = 20
PRIORITY_ARP = 50

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_IPV6 = 0x86DD
OFPP_CONTROLLER = 0xFFFFFFFD  # packet-out "in_port" for packets the controller made up
OFPM_ALL = 0xFFFFFFFF  # "every meter" in OFPMeterMod (OpenFlow 1.3 spec 7.3.4.4)


def make_cookie(kind: int, number: int) -> int:
    """A 64-bit cookie: owner kind in the top byte, ``number`` (< 2**56) below it."""
    if not 0 <= number < (1 << COOKIE_KIND_SHIFT):
        raise ValueError(f"cookie number {number} does not fit in 56 bits")
    return (kind << COOKIE_KIND_SHIFT) | number


def cookie_kind(cookie: int) -> int:
    return (cookie >> COOKIE_KIND_SHIFT) & 0xFF


# ----------------------------------------------------------------------------- actions
@dataclass(frozen=True)
class Output:
    port: int


@dataclass(frozen=True)
class ToController:
    """Send the whole packet to the controller (no buffering: the userspace datapath has no buffers)."""


@dataclass(frozen=True)
class SetDscp:
    dscp: int


@dataclass(frozen=True)
class SetQueue:
    queue: int


Action = Union[Output, ToController, SetDscp, SetQueue]
Match = tuple[tuple[str, Any], ...]  # sorted OFPMatch keyword arguments, hashable


def match_of(**fields: Any) -> Match:
    return tuple(sorted(fields.items()))


# ----------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class FlowRule:
    """Add (or replace: same match and priority) one rule in table 0."""

    priority: int
    match: Match
    actions: tuple[Action, ...]
    cookie: int = 0
    idle_timeout_s: int = 0
    meter_id: int | None = None
    send_flow_removed: bool = False


@dataclass(frozen=True)
class FlowDelete:
    """Delete every table-0 rule whose cookie matches ``cookie`` under ``cookie_mask`` (0/0 = all)."""

    cookie: int = 0
    cookie_mask: int = 0


@dataclass(frozen=True)
class MeterSet:
    """Add (``modify=False``) or modify a DROP-band meter; the only band the userspace datapath has."""

    meter_id: int
    rate_kbps: int
    burst_kbit: int
    modify: bool = False


@dataclass(frozen=True)
class MeterDelete:
    meter_id: int = OFPM_ALL


@dataclass(frozen=True)
class PacketOut:
    in_port: int
    out_port: int
    data: bytes


@dataclass(frozen=True)
class Barrier:
    """A barrier request; ``ticket`` (if any) is what the app resolves when this switch replies."""

    ticket: Any = None


Op = Union[FlowRule, FlowDelete, MeterSet, MeterDelete, PacketOut, Barrier]


# ----------------------------------------------------------------------------- common rule sets
def table_miss() -> FlowRule:
    """Unknown traffic goes to the controller, which routes it (reactive per-host-pair routing)."""
    return FlowRule(PRIORITY_TABLE_MISS, match_of(), (ToController(),))


def arp_to_controller() -> FlowRule:
    """Every ARP packet to the controller: it answers from the topology, nothing is flooded (loops)."""
    return FlowRule(PRIORITY_ARP, match_of(eth_type=ETH_TYPE_ARP), (ToController(),))


def drop_ipv6() -> FlowRule:
    """Hosts chatter IPv6 (router/neighbour solicitations) that the IPv4 fabric never routes: drop it at
    the first switch instead of sending every such packet to the controller."""
    return FlowRule(PRIORITY_QUIET, match_of(eth_type=ETH_TYPE_IPV6), ())


def reset_switch() -> tuple[Op, ...]:
    """Forget everything a previous controller life left: all table-0 rules, then all meters.

    Rules go first because deleting a meter in use also deletes its rules, and the barrier keeps the
    order on switches that would otherwise reorder.
    """
    return (FlowDelete(), Barrier(), MeterDelete(OFPM_ALL), Barrier())


# ----------------------------------------------------------------------------- encoding
def encode(op: Op, ofproto: Any, parser: Any) -> Any:
    """The framework message for ``op`` (datapath left unset: the sender attaches it)."""
    if isinstance(op, FlowRule):
        instructions = []
        if op.meter_id is not None:
            instructions.append(parser.OFPInstructionMeter(op.meter_id, ofproto.OFPIT_METER))
        actions = [_encode_action(a, ofproto, parser) for a in op.actions]
        instructions.append(parser.OFPInstructionActions(ofproto.OFPIT_APPLY_ACTIONS, actions))
        return parser.OFPFlowMod(
            datapath=None,
            cookie=op.cookie,
            command=ofproto.OFPFC_ADD,
            idle_timeout=op.idle_timeout_s,
            priority=op.priority,
            buffer_id=ofproto.OFP_NO_BUFFER,
            flags=ofproto.OFPFF_SEND_FLOW_REM if op.send_flow_removed else 0,
            match=parser.OFPMatch(**dict(op.match)),
            instructions=instructions,
        )
    if isinstance(op, FlowDelete):
        return parser.OFPFlowMod(
            datapath=None,
            cookie=op.cookie,
            cookie_mask=op.cookie_mask,
            table_id=0,
            command=ofproto.OFPFC_DELETE,
            out_port=ofproto.OFPP_ANY,
            out_group=ofproto.OFPG_ANY,
            match=parser.OFPMatch(),
        )
    if isinstance(op, MeterSet):
        band = parser.OFPMeterBandDrop(rate=op.rate_kbps, burst_size=op.burst_kbit)
        return parser.OFPMeterMod(
            datapath=None,
            command=ofproto.OFPMC_MODIFY if op.modify else ofproto.OFPMC_ADD,
            flags=ofproto.OFPMF_KBPS | ofproto.OFPMF_BURST,
            meter_id=op.meter_id,
            bands=[band],
        )
    if isinstance(op, MeterDelete):
        return parser.OFPMeterMod(datapath=None, command=ofproto.OFPMC_DELETE, flags=0, meter_id=op.meter_id)
    if isinstance(op, PacketOut):
        return parser.OFPPacketOut(
            datapath=None,
            buffer_id=ofproto.OFP_NO_BUFFER,
            in_port=op.in_port,
            actions=[parser.OFPActionOutput(op.out_port)],
            data=op.data,
        )
    if isinstance(op, Barrier):
        return parser.OFPBarrierRequest(datapath=None)
    raise TypeError(f"not an OpenFlow op: {op!r}")


def _encode_action(action: Action, ofproto: Any, parser: Any) -> Any:
    if isinstance(action, Output):
        return parser.OFPActionOutput(action.port)
    if isinstance(action, ToController):
        return parser.OFPActionOutput(ofproto.OFPP_CONTROLLER, ofproto.OFPCML_NO_BUFFER)
    if isinstance(action, SetDscp):
        return parser.OFPActionSetField(ip_dscp=action.dscp)
    if isinstance(action, SetQueue):
        return parser.OFPActionSetQueue(action.queue)
    raise TypeError(f"not an OpenFlow action: {action!r}")
