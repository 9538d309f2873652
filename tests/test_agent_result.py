"""The agent's result file and its typed failure: written and read through the one field checker, and
compared by cause (never by the wording of a line)."""

from __future__ import annotations

import json

import pytest

from echelonflow.faults import FaultEvent
from emulation.command import unplanned_failures
from traffic.result import ABORTED, DIED, FAILED, INTERRUPTED, AgentResult, Failure, load_result, save_result


def test_a_result_round_trips_through_its_file_with_its_failure(tmp_path):
    path = str(tmp_path / "out-h1.json")
    result = AgentResult("h1", 1_700_000_000.0, "echelon", Failure(ABORTED, "h3", "flow a/f1: peer reset"),
                         {"b": "agent h2 died (killed by SIGKILL) 1.5 s after t0"}, ["a/f2"],
                         {"a/c1": {"type": "compute", "host": "h1", "start": 0.0, "finish": 0.2}},
                         channels={"opened": 2, "opened_late": 0}, tcp={"retransmitted": 0})
    save_result(result, path)
    doc = json.loads((tmp_path / "out-h1.json").read_text())
    assert doc["status"] == "error" and doc["error"] == "aborted: agent h3 failed: flow a/f1: peer reset"
    assert doc["failure"] == {"cause": "aborted", "host": "h3", "detail": "flow a/f1: peer reset"}
    assert load_result(path) == result
    ok = AgentResult("h2", 1.0)
    save_result(ok, path)
    assert load_result(path) == ok and json.loads((tmp_path / "out-h1.json").read_text())["error"] is None


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(failure={"cause": "exploded", "host": "h1"}), "failure.cause: must be one of"),
    (lambda d: d.update(sent=[]), "sent: must be an object"),
    (lambda d: d.pop("host"), "host: missing"),
    (lambda d: d.update(colour="red"), "colour: unknown field"),
])
def test_a_bad_result_file_is_one_line_naming_the_file_and_the_field(tmp_path, mutate, message):
    path = tmp_path / "out.json"
    doc = AgentResult("h1", 1.0, failure=Failure(FAILED, "h1", "x")).to_json_dict()
    mutate(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message) as refused:
        load_result(str(path))
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)


def test_each_cause_reads_as_one_line():
    assert Failure(FAILED, "h1", "run not finished").line() == "run not finished"
    assert Failure(INTERRUPTED, "h1").line() == "interrupted"
    assert str(Failure(DIED, "h5", "(killed by SIGKILL) 3.0 s after t0")) == \
        "agent h5 died (killed by SIGKILL) 3.0 s after t0"


def test_only_the_death_of_an_agent_the_faults_kill_is_planned():
    """``echelon emulate --fault agent:h5@3s`` fails with exit 1 only for a failure the fault does not
    explain: the death of another agent, or h5 failing by itself (compared by cause and host, whatever
    the lines say)."""
    faults = [FaultEvent(3.0, "agent", ("h5",))]
    planned = Failure(DIED, "h5", "(killed by SIGKILL) 3.0 s after t0")
    other = Failure(DIED, "h50", "(killed by SIGKILL) 3.1 s after t0")
    by_itself = Failure(FAILED, "h5", "agent h5 died of something else")
    assert unplanned_failures([planned], faults) == []
    assert unplanned_failures([planned, other, by_itself], faults) == [other, by_itself]
    assert unplanned_failures([planned], []) == [planned]
