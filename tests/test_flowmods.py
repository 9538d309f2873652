"""OpenFlow messages as plain values, encoded by os-ken's real OpenFlow 1.3 parser and read back by Open
vSwitch's own printer (``ovs-ofctl ofp-print``)."""

from __future__ import annotations

import struct
import subprocess
from types import SimpleNamespace

import pytest

from controller import flowmods as fm
from controller.compat import ofproto_v1_3 as ofp
from controller.compat import ofproto_v1_3_parser
from controller.enforcement import FlowMatch
from tests.conftest import need_tool


def _serialize(op: fm.Op):
    """Encode with os-ken's OpenFlow 1.3 parser and serialize (os-ken parses only switch-to-controller
    messages, so the bytes are checked by header, by struct layout, or by Open vSwitch's own printer)."""
    msg = fm.encode(op, ofp, ofproto_v1_3_parser)
    msg.datapath = SimpleNamespace(ofproto=ofp, ofproto_parser=ofproto_v1_3_parser)
    msg.set_xid(7)
    msg.serialize()
    buf = bytes(msg.buf)
    version, msg_type, length, xid = struct.unpack("!BBHI", buf[:8])
    assert (version, length, xid) == (4, len(buf), 7)
    return msg, msg_type, buf


def _ovs_print(buf: bytes) -> str:
    return subprocess.run([need_tool("ovs-ofctl"), "ofp-print", buf.hex()], capture_output=True, text=True,
                          check=True).stdout


def test_flow_rule_encodes_meter_dscp_queue_and_output():
    rule = fm.FlowRule(20, FlowMatch("10.0.0.2", "10.0.0.3", 1000, 5201).fields(),
                       (fm.SetDscp(16), fm.SetQueue(2), fm.Output(3)), cookie=fm.make_cookie(2, 9),
                       idle_timeout_s=60, meter_id=4, send_flow_removed=True)
    msg, msg_type, buf = _serialize(rule)
    assert msg_type == ofp.OFPT_FLOW_MOD and msg.flags == ofp.OFPFF_SEND_FLOW_REM
    text = _ovs_print(buf)
    for piece in ("ADD", "priority=20", "tcp", "nw_src=10.0.0.2", "nw_dst=10.0.0.3", "tp_src=1000",
                  "tp_dst=5201", "cookie:0x200000000000009", "idle:60", "send_flow_rem", "meter:4",
                  "set_field:16->ip_dscp", "set_queue:2", "output:3"):
        assert piece in text, f"{piece!r} not in {text}"


def test_meter_and_delete_messages_serialize():
    _m, msg_type, buf = _serialize(fm.MeterSet(3, 10000, 1000, modify=True))
    command, flags, meter_id, band_type, _len, rate, burst = struct.unpack("!HHIHHII", buf[8:28])
    assert msg_type == ofp.OFPT_METER_MOD and command == ofp.OFPMC_MODIFY
    assert (flags, meter_id, band_type, rate, burst) == (ofp.OFPMF_KBPS | ofp.OFPMF_BURST, 3,
                                                        ofp.OFPMBT_DROP, 10000, 1000)
    _m, _t, buf = _serialize(fm.FlowDelete(fm.make_cookie(2, 4), 0xFF00000000000000))
    text = _ovs_print(buf)
    assert "DEL" in text and "cookie:0x200000000000004/0xff00000000000000" in text
    _m, msg_type, _b = _serialize(fm.Barrier())
    assert msg_type == ofp.OFPT_BARRIER_REQUEST


def test_cookie_number_must_fit():
    with pytest.raises(ValueError, match="56 bits"):
        fm.make_cookie(1, 1 << 56)
