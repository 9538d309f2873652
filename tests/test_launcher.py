"""The controller as a child process: the real manager (os-ken here, ryu-manager 4.34 under
tests/test_py39.py) started, talked to over its API and stopped by its pid, without switches."""

from __future__ import annotations

import os
import sys

import pytest

from controller import compat
from controller.client import ApiClientError, EchelonClient, install_op, remove_op
from controller.launcher import (
    ControllerError,
    ControllerProcess,
    default_manager_name,
    free_tcp_port,
    tcp_port_listening,
)
from tests.controller_helpers import TOPO, ip


def test_launcher_runs_real_manager_and_enforcement_api(require_controller, tmp_path):
    """The real manager (os-ken here, ryu-manager 4.34 under tests/test_py39.py) serves the enforcement
    primitives on its one HTTP API; with no switch connected an install resolves as unreachable."""
    assert default_manager_name() == compat.MANAGER
    with pytest.raises(ControllerError, match="^ofp_port: must be an integer between 1 and 65535, got 70000"):
        ControllerProcess(TOPO, ofp_port=70000)
    with pytest.raises(ControllerError, match="'/nonexistent/osken-manager' is not an executable"):
        ControllerProcess(TOPO, ofp_port=free_tcp_port(), manager="/nonexistent/osken-manager").start()
    manager = os.path.join(os.path.dirname(sys.executable), compat.MANAGER)
    ctl = ControllerProcess(TOPO, ofp_port=free_tcp_port(), manager=[manager])
    try:
        ctl.start()
        assert tcp_port_listening(ctl.ofp_port)
        assert not os.path.exists(os.path.join(ctl.workdir, "control.sock"))  # one API, no side channel
        with ctl.client() as api:
            assert api.health()["switches"] == {"connected": 0, "expected": 20}
            assert api.enforcement() == {}
            match = {"src_ip": ip("h1"), "dst_ip": ip("h2"), "src_port": 1, "dst_port": 2}
            with pytest.raises(ApiClientError) as bad:
                api.enforce_install("x", match, queue=7)
            assert (bad.value.status, bad.value.field) == (400, "queue")
            assert bad.value.problem == "must be an integer between 0 and 3, got 7"
            with pytest.raises(ApiClientError) as bad:
                api.enforce({"op": "frob"})
            assert (bad.value.status, bad.value.field) == (400, "op")
            assert bad.value.problem == "must be install, update, remove or batch, got 'frob'"
            for unhashable in ([[], 1e308], {"a": 1}):  # test_enforcement_fuzz.py's find: 400, not 500
                with pytest.raises(ApiClientError) as bad:
                    api.enforce({"op": unhashable, "flow_id": "p0", "clear_rate": True})
                assert (bad.value.status, bad.value.field) == (400, "op"), bad.value
                with pytest.raises(ApiClientError) as bad:
                    api.enforce({"op": "batch", "requests": [{"op": unhashable}]})
                assert (bad.value.status, bad.value.field) == (400, "requests[0].op"), bad.value
            with pytest.raises(ApiClientError) as bad:
                EchelonClient(socket_path=ctl.api_socket_path, token="wrong").enforce_remove("x")
            assert (bad.value.status, bad.value.field) == (401, "Authorization")
            reply = api.enforce_install("x", match, queue=1, rate_bps=2e6, wait_s=2)
            path = list(TOPO.path_for("h1", "h2", "x"))
            assert reply["applied"] == [{"op": "install", "flow_id": "x"}]
            ack = reply["enforcement"]
            assert ack["in_force"] is False and ack["latency_s"] is None  # no switch connected
            assert (ack["operations"], ack["pending"], ack["unreachable"]) == (1, 0, 1)
            live = api.enforcement()["x"]
            assert (live["path"], live["queue"], live["rate_bps"], live["meter_id"]) == (path, 1, 2e6, 1)
            with pytest.raises(ApiClientError) as bad:  # a good op, then a bad one: neither applied
                api.enforce_batch([remove_op("x"), install_op("y", match, 9)], wait_s=1)
            assert (bad.value.status, bad.value.field) == (400, "requests[1].queue")
            assert list(api.enforcement()) == ["x"]
            assert api.enforce_update("x", clear_rate=True)["applied"] == [{"op": "update", "flow_id": "x"}]
            assert api.enforcement()["x"]["meter_id"] is None
            api.enforce_remove("x")
            assert api.enforcement() == {}
        with pytest.raises(ControllerError, match="only 0 of 1 switches connected"):
            ctl.wait_switches(count=1, timeout_s=0.3)
        with pytest.raises(ControllerError, match="already in use"):
            ControllerProcess(TOPO, ofp_port=ctl.ofp_port).start()
    finally:
        ctl.stop()
    assert not tcp_port_listening(ctl.ofp_port) and ctl.log_problems() == []
    assert f"echelon app up ({compat.FRAMEWORK})" in ctl.log_text


@pytest.mark.parametrize("host, message", [
    ("not_a_host!!", "OpenFlow listen address 'not_a_host!!' does not resolve"),
    ("a" * 300, "does not resolve: not a valid host name"),
    ("192.0.2.1", "cannot listen for switches on 192.0.2.1:"),  # TEST-NET: no address of this host
])
def test_an_openflow_address_that_cannot_listen_is_one_line_before_the_child(host, message):
    ctl = ControllerProcess(TOPO, ofp_port=free_tcp_port(), ofp_host=host)
    with pytest.raises(ControllerError, match=message):
        ctl.start()
    assert ctl.proc is None and ctl.workdir is None  # nothing started, nothing left
