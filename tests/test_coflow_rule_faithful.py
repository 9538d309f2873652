"""The coflow rescheduling rule is said to be unfaithful wherever it runs a scheduler it handicaps.

The rule (``simulate(..., rescheduling="coflow")``) re-decides only at flow starts and coflow
completions.  That is Varys's own rule, so it is faithful to the MADD family (``coflow``,
``coflow-static``, ``fifo``); a scheduler that would hand a finished flow's bandwidth on at once
(greedy or fair rates) has it idle instead (docs/performance.md, "The coflow rescheduling rule").
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from cli.main import main
from echelonflow.schedulers import SCHEDULERS, coflow_rule_warning
from tests.instances import fig1, run_fig1


def test_the_rule_is_faithful_to_the_madd_family_only() -> None:
    assert {name for name, cls in SCHEDULERS.items() if cls.coflow_rule_faithful} == {
        "coflow", "coflow-static", "fifo"}


def test_the_rule_idles_what_a_greedy_allocator_frees_and_not_what_madd_holds() -> None:
    """Sincronia's Fig. 1 instance (tests/instances.py): ``sincronia``'s average rises from
    2.801 to 3.001 under the coflow rule (C2, third in its order at 0, finishes at 5.002 instead of
    4.001: the bandwidth C1's early flow frees at 1 s waits for a coflow event); ``coflow`` is the same
    under both rules."""
    def average(name: str, rule: str) -> float:
        return statistics.fmean(run_fig1(name, fig1(), rule).values())

    assert average("sincronia", "coflow") > average("sincronia", "every-flow") + 0.1
    assert average("coflow", "coflow") == pytest.approx(average("coflow", "every-flow"))


def test_warning_names_exactly_the_schedulers_handicapped() -> None:
    line = coflow_rule_warning(["coflow", "sincronia", "echelon", "sincronia"])
    assert line is not None and "\n" not in line
    assert "not faithful to sincronia, echelon:" in line
    assert "faithful to coflow, fifo, coflow-static only" in line  # in the registry's order
    assert coflow_rule_warning(["coflow", "fifo", "coflow-static"]) is None


def test_simulate_says_so_in_one_line_on_stderr(capsys) -> None:
    assert main(["simulate", "fig2", "--rescheduling", "coflow", "--scheduler", "coflow",
                 "--scheduler", "echelon"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("echelon simulate: warning: ")
    assert "not faithful to echelon:" in err[0]


@pytest.mark.parametrize("args", [["--rescheduling", "coflow", "--scheduler", "coflow"],
                                  ["--scheduler", "echelon"]], ids=["faithful", "exact-rule"])
def test_simulate_stays_quiet_when_the_rule_is_faithful(capsys, args: list[str]) -> None:
    assert main(["simulate", "fig2", *args]) == 0
    assert capsys.readouterr().err == ""


def test_sweep_says_so_for_a_grid_under_the_coflow_rule(tmp_path: Path, capsys) -> None:
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"name": "rule", "scenarios": ["fig2"], "schedulers": ["coflow", "sincronia"],
                                "alone_runs": False, "rescheduling": "coflow"}))
    assert main(["sweep", str(grid), "--out", str(tmp_path / "out"), "--workers", "1", "--no-plots"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [f"echelon sweep: grid rule: {coflow_rule_warning(['sincronia'])}"]
