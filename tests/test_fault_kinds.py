"""The process faults of ``echelon emulate --fault`` (agent and controller deaths, ovs-vswitchd's
restart): how they are written, what is refused with one line, and what a scenario may say.  The fabric
runs are in tests/test_faults.py and tests/test_ovs_restart.py."""

from __future__ import annotations

import json

import pytest

from cli.main import main
from echelonflow.faults import FaultEvent, FaultSpecError, parse_fault, read_events
from echelonflow.fields import FieldError
from echelonflow.topology import fattree
from emulation.fault_injector import restart_actions
from topologies.ovs import parse_dpif_show


def test_agent_and_controller_faults_parse() -> None:
    topo = fattree(10e6, 4)
    assert parse_fault("agent:h5@3s", topo) == [FaultEvent(3.0, "agent", ("h5",))]
    assert parse_fault("controller@4s", topo) == [FaultEvent(4.0, "controller", ())]
    assert parse_fault("controller@4s..6.5s", topo) == [
        FaultEvent(4.0, "controller", ()), FaultEvent(6.5, "controller", (), up=True)]
    assert FaultEvent(4.0, "controller", ()).describe() == "controller down at 4 s"
    assert FaultEvent(3.0, "agent", ("h5",)).describe() == "agent h5 down at 3 s"
    assert not FaultEvent(3.0, "agent", ("h5",)).network and not FaultEvent(4.0, "controller", ()).network


def test_the_switch_daemon_restart_parses() -> None:
    topo = fattree(10e6, 4)
    assert parse_fault("ovs@3s", topo) == [FaultEvent(3.0, "ovs", ())]
    assert parse_fault("ovs@500ms", topo) == [FaultEvent(0.5, "ovs", ())]
    assert parse_fault("ovs@1s..2.5s") == [FaultEvent(1.0, "ovs", ()), FaultEvent(2.5, "ovs", (), up=True)]
    assert FaultEvent(3.0, "ovs", ()).describe() == "ovs down at 3 s"
    assert not FaultEvent(3.0, "ovs", ()).network  # the simulator has no daemon to restart


def test_a_restart_fault_stops_then_starts_at_its_times() -> None:
    """``KIND@T``: one action at T doing both; ``KIND@T..U``: the stop at T, the start at U; other kinds
    are left to their own actions."""
    said: list[str] = []

    def stop() -> str:
        said.append("stop")
        return "stopped"

    def start() -> str:
        said.append("start")
        return "started"

    events = parse_fault("ovs@1s") + parse_fault("controller@2s")
    actions = restart_actions("ovs", events, stop, start)
    assert [(at_s, action()) for at_s, action in actions] == [(1.0, "stopped; started")]
    assert said == ["stop", "start"]
    actions = restart_actions("ovs", parse_fault("ovs@1s..4s"), stop, start)
    assert [(at_s, action()) for at_s, action in actions] == [(1.0, "stopped"), (4.0, "started")]


def test_datapath_ports_are_read_from_dpif_show() -> None:
    """What the restart waits for: every bridge's ports back in ovs-vswitchd's datapath (the text is
    ``ovs-appctl dpif/show`` of Open vSwitch 3.1 on this machine)."""
    text = ("netdev@ovs-netdev: hit:244 missed:92\n  a1:\n    a1 65534/5: (tap)\n    a1-eth1 1/2: (system)\n"
            "    a1-eth2 2/4: (system)\n  e1:\n    e1 65534/10: (tap)\n    e1-eth3 3/8: (system)\n")
    assert parse_dpif_show(text) == {"a1": {"a1-eth1", "a1-eth2"}, "e1": {"e1-eth3"}}
    assert parse_dpif_show("") == {}
    assert parse_dpif_show("ovs-appctl: cannot connect to ... (No such file or directory)\n") == {}


@pytest.mark.parametrize("spec, words", [
    ("agent:h99@3s", "no host 'h99'"),
    ("agent:e1@3s", "no host 'e1'"),
    ("agent:h1-h2@3s", "named by its host"),
    ("agent:@3s", "named by its host"),
    ("agent:h1@3s..5s", "does not come back"),
    ("controller:c1@4s", "has no target"),
    ("controller", "KIND:TARGET@TIME"),
    ("controller@later", "a time is seconds"),
    ("controller@5s..4s", "come back after"),
    ("agent@3s", "KIND:TARGET@TIME"),
    ("ovs:c1@3s", "the ovs fault has no target: write it like ovs@3s"),
    ("ovs:@3s", "has no target"),
    ("ovs", "KIND:TARGET@TIME"),
    ("ovs@", "a time is seconds"),
    ("ovs@3x", "a time is seconds"),
    ("ovs@-1s", "a time is seconds"),
    ("ovs@3s..2s", "come back after"),
    ("ovs@3s..3s", "come back after"),
    ("ovs@3s..", "a time is seconds"),
    ("ovs@1e9s", "a time is seconds"),
    ("vswitchd@3s", "unknown kind 'vswitchd'; kinds: "),
])
def test_bad_process_faults_get_one_line(spec, words) -> None:
    with pytest.raises(FaultSpecError) as err:
        parse_fault(spec, fattree(10e6, 4))
    assert words in str(err.value) and "\n" not in str(err.value) and spec in str(err.value)


def test_a_scenario_may_carry_process_faults_and_they_read_back() -> None:
    topo = fattree(10e6, 4)
    events = read_events([{"at_s": 4, "controller_down": True}, {"at_s": 3, "agent_down": "h2"}], topo)
    assert events == [FaultEvent(3.0, "agent", ("h2",)), FaultEvent(4.0, "controller", ())]
    assert read_events([e.to_json() for e in events], topo) == events
    with pytest.raises(FieldError, match="controller_down: must be true"):
        read_events([{"at_s": 4, "controller_down": "c1"}], topo)
    events = read_events([{"at_s": 2, "ovs_up": True}, {"at_s": 1, "ovs_down": True}], topo)
    assert events == [FaultEvent(1.0, "ovs", ()), FaultEvent(2.0, "ovs", (), up=True)]
    assert read_events([e.to_json() for e in events], topo) == events
    with pytest.raises(FieldError, match=r"events\[0\]\.ovs_down: must be true \(the ovs fault has no"):
        read_events([{"at_s": 1, "ovs_down": "e1"}], topo)


@pytest.mark.parametrize("argv, words", [
    (["--fault", "agent:h99@1s"], "fault 'agent:h99@1s': topology fattree4 has no host 'h99'"),
    (["--fault", "agent:h1@1s", "--fault", "agent:h1@2s"], "agent h1 is killed twice"),
    (["--fault", "ovs:e1@1s"], "fault 'ovs:e1@1s': the ovs fault has no target: write it like ovs@3s"),
    (["--fault", "ovs@soon"], "fault 'ovs@soon': a time is seconds like 3s, 2.5s or 500ms, got 'soon'"),
])
def test_emulate_refuses_bad_faults_before_anything_starts(tmp_path, capsys, argv, words) -> None:
    """Exit status 2 and one line, before any fabric, controller or run folder exists."""
    out = tmp_path / "run"
    assert main(["emulate", "fattree-gpipe-ring", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("echelon: error: ") and words in err and "\n" not in err, err
    assert not out.exists()


def test_emulate_help_names_the_fault_kinds(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["emulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "agent:HOST@3s" in text and "controller@4s" in text and "ovs@3s" in text
    json.dumps(text)  # plain text
