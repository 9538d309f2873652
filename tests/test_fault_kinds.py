"""The process faults of ``echelon emulate --fault`` (agent and controller deaths): how they are
written, what is refused with one line, and what a scenario may say.  The fabric runs are in
tests/test_faults.py."""

from __future__ import annotations

import json

import pytest

from cli.main import main
from echelonflow.faults import FaultEvent, FaultSpecError, parse_fault, read_events
from echelonflow.fields import FieldError
from echelonflow.topology import fattree


def test_agent_and_controller_faults_parse() -> None:
    topo = fattree(10e6, 4)
    assert parse_fault("agent:h5@3s", topo) == [FaultEvent(3.0, "agent", ("h5",))]
    assert parse_fault("controller@4s", topo) == [FaultEvent(4.0, "controller", ())]
    assert parse_fault("controller@4s..6.5s", topo) == [
        FaultEvent(4.0, "controller", ()), FaultEvent(6.5, "controller", (), up=True)]
    assert FaultEvent(4.0, "controller", ()).describe() == "controller down at 4 s"
    assert FaultEvent(3.0, "agent", ("h5",)).describe() == "agent h5 down at 3 s"
    assert not FaultEvent(3.0, "agent", ("h5",)).network and not FaultEvent(4.0, "controller", ()).network


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


@pytest.mark.parametrize("argv, words", [
    (["--fault", "agent:h99@1s"], "fault 'agent:h99@1s': topology fattree4 has no host 'h99'"),
    (["--fault", "agent:h1@1s", "--fault", "agent:h1@2s"], "agent h1 is killed twice"),
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
    assert "agent:HOST@3s" in text and "controller@4s" in text
    json.dumps(text)  # plain text
