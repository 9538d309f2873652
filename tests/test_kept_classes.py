"""Strict priority keeps the rates of the leading classes a decision serves as the one before it did
(``priority.KeptClasses``, ``kernels.priority_decide``'s ``kept``): every rate of every decision equal,
bit for bit, to the filling done afresh, for every policy served that way."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from echelonflow import echelon as echelon_mod
from echelonflow.model import Job
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler, kernels, priority
from simulator import engine
from tests.instances import TOPOLOGIES, placeable, workloads

#: The policies served class by class with strict priority (``priority.serve_classes``).
SERVED_BY_CLASS = ("sincronia", "aalo", "fifo-priority", "crux")


def _decisions(topology, jobs: list[Job], name: str, keep: bool, monkeypatch) -> tuple[list, int]:
    """Every decision's rates of its active flows (copies), and how many classes kept theirs."""
    count = priority.KeptClasses.count
    kept = [0]

    def counted(self, view, served, served_ptr) -> int:
        k = count(self, view, served, served_ptr) if keep else 0
        kept[0] += k
        return k

    monkeypatch.setattr(priority.KeptClasses, "count", counted)
    scheduler = get_scheduler(name)
    decide = scheduler.decide
    rates = []

    def recorded(view):
        allocation = decide(view)
        rates.append(np.array(view.rate)[np.asarray(view.active, dtype=np.int64)])
        return allocation

    scheduler.decide = recorded
    specs = {job.job_id: echelon_mod.echelons_of(job) for job in jobs}
    engine._Run(topology, jobs, scheduler, False, specs).run()
    return rates, kept[0]


def _assert_same_decisions(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for k, (a, b) in enumerate(zip(got, expected)):
        assert a.tobytes() == b.tobytes(), f"decision {k}: rates differ"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(workload=workloads())
def test_kept_classes_decide_as_the_filling_afresh_on_random_workloads(monkeypatch, workload) -> None:
    kind, jobs = workload
    if not placeable(kind, jobs):
        return
    for name in SERVED_BY_CLASS:
        kept, _ = _decisions(TOPOLOGIES[kind](), jobs, name, True, monkeypatch)
        afresh, _ = _decisions(TOPOLOGIES[kind](), jobs, name, False, monkeypatch)
        _assert_same_decisions(kept, afresh)


@pytest.mark.parametrize("name", SERVED_BY_CLASS)
def test_fb2010_coflows_keep_leading_classes_and_every_rate(name, monkeypatch) -> None:
    """FB2010's first 8 coflows offline: a decision after a flow of a later coflow finished keeps the
    coflows served before it; every rate is still the filling's."""
    fb2010 = load_scenario("fb2010")
    jobs = [dataclasses.replace(job, arrival_s=0.0) for job in fb2010.jobs[:8]]
    kept, count = _decisions(fb2010.topology, jobs, name, True, monkeypatch)
    afresh, none = _decisions(fb2010.topology, jobs, name, False, monkeypatch)
    assert count > 0 and none == 0
    _assert_same_decisions(kept, afresh)


def test_nothing_is_kept_across_runs_or_where_the_caller_does_not_vouch(monkeypatch) -> None:
    """The same policy object in a second run (another rate array: the simulator's alone runs) starts
    afresh, and so does every decision on a view that does not vouch for its rates (the controller's)."""
    fb2010 = load_scenario("fb2010")
    jobs = [dataclasses.replace(job, arrival_s=0.0) for job in fb2010.jobs[:6]]
    specs = {job.job_id: echelon_mod.echelons_of(job) for job in jobs}
    scheduler = get_scheduler("sincronia")
    counts: list[int] = []
    count = priority.KeptClasses.count

    def counted(self, view, served, served_ptr) -> int:
        counts.append(count(self, view, served, served_ptr))
        return counts[-1]

    monkeypatch.setattr(priority.KeptClasses, "count", counted)
    engine._Run(fb2010.topology, jobs, scheduler, True, specs).run()
    first_run = len(counts)
    assert first_run > 1 and sum(counts) > 0
    engine._Run(fb2010.topology, jobs, scheduler, True, specs).run()
    assert counts[first_run] == 0  # the second run's first decision

    decide = scheduler.decide
    scheduler.decide = lambda view: decide(dataclasses.replace(view, rates_kept=False))
    before = len(counts)
    engine._Run(fb2010.topology, jobs, scheduler, True, specs).run()
    assert len(counts) == before  # not even asked


@pytest.mark.parametrize(("served", "served_ptr", "expected"), [
    ([3, 4, 7, 8, 9], [0, 2, 5], 2),  # the very same classes
    ([3, 4, 7, 8], [0, 2, 4], 1),  # the second class lost a flow: its end moved
    ([3, 4, 7, 9, 8], [0, 2, 5], 1),  # the second class lists its flows in another order
    ([4, 3, 7, 8, 9], [0, 2, 5], 0),  # the first one does
    ([3, 4, 7, 8, 9, 11], [0, 2, 5, 6], 2),  # a class more at the end
    ([3, 4, 7], [0, 2, 3], 1),  # a class fewer, the second cut short
    ([], [0], 0),
])
def test_kept_classes_counts_the_leading_classes_listing_the_same_flows(served, served_ptr, expected) -> None:
    before, before_ptr = kernels.int_array([3, 4, 7, 8, 9]), kernels.int_array([0, 2, 5])
    got = kernels.kept_classes(kernels.int_array(served), kernels.int_array(served_ptr), before, before_ptr)
    assert got == expected
