"""benchmarks/exact_rule_scaling.py's measurements of a held group order (docs/performance.md, "An order
held between group events")."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from echelonflow import echelon as echelon_mod
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from echelonflow.schedulers.view import Allocation
from simulator import engine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import exact_rule_scaling  # noqa: E402


def _run(scheduler) -> engine._Run:
    fb2010 = load_scenario("fb2010")
    jobs = [dataclasses.replace(job, arrival_s=0.0) for job in fb2010.jobs[:8]]
    specs = {job.job_id: echelon_mod.echelons_of(job) for job in jobs}
    run = engine._Run(fb2010.topology, jobs, scheduler, False, specs)
    run.run()
    return run


@pytest.mark.slow
def test_a_held_order_is_computed_only_when_the_groups_change() -> None:
    scheduler = get_scheduler("sincronia")
    computed: list[tuple[int, ...]] = []
    order = scheduler.order

    def counting(view, groups):
        computed.append(tuple(groups.heads))
        return order(view, groups)

    scheduler.order = counting
    exact_rule_scaling.hold_order(scheduler)
    run = _run(scheduler)
    assert run.decisions > 2 * len(computed)  # most decisions reused the order
    assert all(a != b for a, b in zip(computed, computed[1:]))  # computed again only for other groups


def test_order_changes_counts_reorderings_of_shared_groups() -> None:
    """Rankings over flows of groups 0, 1, 2: the count compares the groups two decisions share."""
    group = np.array([0, 0, 1, 1, 2])  # flow number -> group
    rankings = iter([[0, 2, 4], [2, 0, 4], [2, 3, 0], [4, 0, 2]])  # 0 1 2 -> 1 0 2 -> 1 0 -> 2 0 1

    class Replay:
        def decide(self, view):
            ranked = next(rankings)
            return Allocation(None, np.array(ranked), len(ranked))

    view = SimpleNamespace(table=SimpleNamespace(arrays=lambda: SimpleNamespace(group=group)))
    scheduler = Replay()
    changes = exact_rule_scaling.OrderChanges(scheduler)
    for _ in range(4):
        scheduler.decide(view)
    assert (changes.changed, changes.same_groups) == (2, 1)  # 1 0 2 (same groups); 2 0 1 after 1 0


@pytest.mark.slow
def test_holding_an_order_that_never_changes_changes_nothing() -> None:
    """On FB2010's first 8 coflows offline sincronia never re-orders the groups it keeps, so the held
    order gives every coflow the same completion time; a held order that served other groups than the
    decision's would not."""
    exact = get_scheduler("sincronia")
    changes = exact_rule_scaling.OrderChanges(exact)
    exact_run = _run(exact)
    held = get_scheduler("sincronia")
    exact_rule_scaling.hold_order(held)
    held_run = _run(held)
    assert changes.same_groups == 0
    assert list(held_run.finish_s) == list(exact_run.finish_s)


@pytest.mark.slow
def test_the_script_prints_the_held_run_with_its_error() -> None:
    script = str(ROOT / "benchmarks" / "exact_rule_scaling.py")
    arguments = ["--coflows", "5", "--scheduler", "sincronia", "--scheduler", "echelon", "--held-order",
                 "--order-changes", "--checks"]
    out = subprocess.run([sys.executable, script, *arguments], capture_output=True, text=True, timeout=600,
                         check=True).stdout
    rows = [line.split() for line in out.splitlines() if line.startswith("fb2010")]
    assert [(row[2], row[3]) for row in rows] == [("sincronia", "0"), ("sincronia", "held"), ("echelon", "0")]
    assert "order changed at" in " ".join(rows[0]) and "worst job" in " ".join(rows[1])


def test_rate_changes_counts_rates_a_decision_rewrites() -> None:
    """Three decisions over flows 0-2: new flows count as changed; a rate moved by rounding dust counts
    in the last bit only; a flow at rate 0 is active but not positive."""
    decisions = iter([([0, 1], [4.0, 4.0, 0.0]),
                      ([0, 1, 2], [4.0, 4.0 * (1 + 1e-12), 0.0]),
                      ([1, 2], [0.0, 8.0, 1.0])])

    class Replay:
        def decide(self, view):
            active, rate = next(decisions)
            view.active, view.rate[:] = np.array(active), rate
            return Allocation(view.rate, view.active, len(active))

    scheduler = Replay()
    changes = exact_rule_scaling.RateChanges(scheduler)
    view = SimpleNamespace(active=None, rate=np.zeros(3))
    for _ in range(3):
        scheduler.decide(view)
    assert changes.decisions == 3 and changes.active == 2 + 3 + 2
    assert changes.positive == 2 + 2 + 2
    assert changes.changed == 2 + 1 + 2  # flow 2 new; then flows 1 and 2 rewritten
    assert changes.changed_bits == 2 + 2 + 2  # flow 1's dust too


def test_group_reuse_counts_the_unchanged_prefix_and_the_groups_where_nothing_moved() -> None:
    """Flows 0-4 in groups 0, 0, 1, 1, 2.  The second decision repeats the first (its whole ranking is an
    unchanged prefix; groups 1 and 2 had no rate, group 0 had); the third puts group 1 first after flow 1
    finished (no prefix; only group 2 is the same with nothing moved, flow 3 of group 1 had a rate); in
    the fourth group 1 stays first without flow 2, which had 1.0, so flow 3, at 0.5, froze before it."""
    group = np.array([0, 0, 1, 1, 2])
    decisions = iter([([0, 1, 2, 3, 4], [1.0, 1.0, 0.0, 0.0, 0.0]),
                      ([0, 1, 2, 3, 4], [1.0, 0.0, 0.0, 1.0, 0.0]),
                      ([2, 3, 0, 4], [1.0, 0.0, 1.0, 0.5, 0.0]),
                      ([3, 0, 4], [0.5, 0.0, 0.0, 1.0, 0.0])])

    class Replay:
        def decide(self, view):
            ranked, rate = next(decisions)
            view.rate[:] = rate
            return Allocation(view.rate, np.array(ranked), len(ranked))

    scheduler = Replay()
    reuse = exact_rule_scaling.GroupReuse(scheduler)
    table = SimpleNamespace(arrays=lambda: SimpleNamespace(group=group))
    view = SimpleNamespace(rate=np.zeros(5), table=table)
    for _ in range(4):
        scheduler.decide(view)
    assert (reuse.ranked, reuse.prefix, reuse.still) == (5 + 5 + 4 + 3, 0 + 5 + 0 + 0, 0 + 3 + 1 + 1)
    assert (reuse.rated, reuse.rated_prefix, reuse.resumable) == (2 + 2 + 3 + 2, 0 + 2 + 0 + 0, 0 + 0 + 0 + 1)
