"""The invariants the simulator checks on every decision (``view.check_decision``): their kernel names the
first bad flow and link as the decision lists them, finds each fault in a fixed order, leaves its scratch
zeroed, and gives every check the same answer on scratch kept from one check to the next as on fresh."""

from __future__ import annotations

import random

import numpy as np
import pytest

from echelonflow.schedulers import kernels

# Three flows on three links: flow 0 on link 1; flow 1 on link 2; flow 2 on links 0 and 1; flow 3 on none.
PATH_PTR = np.array([0, 1, 2, 4, 4], dtype=np.int64)
PATH_LINKS = np.array([1, 2, 0, 1], dtype=np.int64)
CAPACITY = np.array([10.0, 10.0, 10.0])
PATHS = (PATH_PTR, PATH_LINKS, CAPACITY)
ACTIVE = np.array([2, 0, 1], dtype=np.int64)  # the decision's order: flow 2 first
FINE_RATE = np.array([5.0, 10.0, 5.0, 0.0])  # links 1 and 2 exactly full
NONE = np.array([], dtype=np.int64)
VARIANTS = [kernels.decision_fault, getattr(kernels.decision_fault, "py_func", kernels.decision_fault)]


def _ints(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _fresh() -> tuple:
    """Scratch as ``view.check_decision`` makes it: per link, per flow (of four, a byte each)."""
    return np.zeros(3), np.zeros(4, dtype=np.int8)


def _check(decision_fault, rate: np.ndarray, ranked: list[int], rated: list[int] | None,
           scratch: tuple | None = None, active: np.ndarray = ACTIVE) -> tuple:
    """decision_fault on the three flows (a fourth, flow 3, in the table but not active), its scratch
    checked zeroed afterwards."""
    scratch = _fresh() if scratch is None else scratch
    ranking = (_ints(ranked), len(ranked), NONE if rated is None else _ints(rated), rated is not None)
    result = tuple(decision_fault(active, rate, PATHS, 1e-9, ranking, scratch))
    assert not scratch[0].any() and not scratch[1].any(), "scratch left dirty"
    return result


@pytest.mark.parametrize("decision_fault", VARIANTS)
def test_the_first_flow_on_an_overloaded_link_is_named_with_the_link(decision_fault) -> None:
    assert _check(decision_fault, FINE_RATE, [], None) == (0, -1, -1, 0.0)
    # flow 2 is listed first and its second link is over; flow 0, listed later, is the one over it
    over = (kernels.OVER_CAPACITY, 2, 1, 11.0)
    assert _check(decision_fault, np.array([6.0, 1.0, 5.0, 0.0]), [], None) == over
    within = np.array([5.0, 10.0 * (1 + 1e-12), 5.0, 0.0])
    assert _check(decision_fault, within, [], None)[0] == 0  # within the tolerance
    # a flow at rate 0 on the overloaded link is still the first one named (as the decision lists them)
    assert _check(decision_fault, np.array([11.0, 1.0, 0.0, 0.0]), [], None) == over


@pytest.mark.parametrize("decision_fault", VARIANTS)
def test_a_bad_rate_names_the_first_such_flow_as_listed(decision_fault) -> None:
    for bad in (np.nan, -1.0, np.inf):
        rate = np.array([1.0, bad, bad, 0.0])
        assert _check(decision_fault, rate, [2, 0, 1], [0])[:2] == (kernels.BAD_RATE, 2), bad
    assert _check(decision_fault, np.array([1.0, 1.0, np.nan, 0.0]), [], None)[:2] == (kernels.BAD_RATE, 2)
    assert _check(decision_fault, np.array([np.nan, 1.0, 1.0, 0.0]), [], None)[:2] == (kernels.BAD_RATE, 0)
    # flow 3 is not active: its rate is not the decision's
    assert _check(decision_fault, np.array([5.0, 10.0, 5.0, np.nan]), [], None)[0] == 0


@pytest.mark.parametrize("decision_fault", VARIANTS)
def test_the_ranking_may_name_active_flows_once_each(decision_fault) -> None:
    for ranked, bad in (([2, 0, 1], False), ([0], False), ([], False), ([2, 0, 2], True), ([2, 3], True),
                        ([2, 7], True), ([-1], True), ([0, 1, 2, 1], True)):
        code = _check(decision_fault, FINE_RATE, ranked, None)[0]
        assert code == (kernels.RANKING_BAD if bad else 0), ranked
    only_two = (_ints([2, 0, 2]), 2, NONE, False)  # only ``count`` of the ranking is read
    assert decision_fault(ACTIVE, FINE_RATE, PATHS, 1e-9, only_two, _fresh())[0] == 0


@pytest.mark.parametrize("decision_fault", VARIANTS)
def test_the_flows_listed_as_given_a_rate_are_those_with_a_positive_rate(decision_fault) -> None:
    rate = np.array([3.0, 0.0, 2.0, 5.0])  # flow 3 has a rate but is not active
    for rated, bad in (([2, 0], False), ([0, 2], False), ([0], True), ([0, 2, 1], True), ([0, 2, 2], True),
                       ([0, 2, 3], True), ([], True), ([0, 9], True)):
        for ranked in ([], [2, 0, 1]):  # the ranking's check must leave the marks as it found them
            code = _check(decision_fault, rate, ranked, rated)[0]
            assert code == (kernels.RATED_BAD if bad else 0), (rated, ranked)
    assert _check(decision_fault, np.zeros(4), [2, 0, 1], [])[0] == 0


@pytest.mark.parametrize("decision_fault", VARIANTS)
def test_faults_are_found_in_a_fixed_order(decision_fault) -> None:
    over = np.array([6.0, 1.0, 5.0, 0.0])
    assert _check(decision_fault, over, [2, 2], [1])[0] == kernels.OVER_CAPACITY  # before the ranking
    assert _check(decision_fault, np.array([6.0, np.nan, 5.0, 0.0]), [], None)[0] == kernels.BAD_RATE
    assert _check(decision_fault, FINE_RATE, [2, 3], [1])[0] == kernels.RANKING_BAD  # before the listing


@pytest.mark.parametrize("decision_fault", VARIANTS)
def test_kept_scratch_answers_every_check_as_fresh_scratch_does(decision_fault) -> None:
    """400 checks on one kept scratch: active sets that change (flow 3 active in some, so a mark of it
    left over could pass a later ranking that names it), rankings and listings right and wrong, checks
    stopped early by a fault; each answer as on fresh scratch."""
    rng = random.Random(7)
    kept = _fresh()
    rate = np.array([3.0, 0.0, 2.0, 5.0])
    for _ in range(400):
        active = _ints(rng.sample(range(4), rng.randint(1, 4)))
        flows = list(range(5))  # flow 4 is in no table: a stray
        ranked = [rng.choice(flows) for _ in range(rng.randint(0, 4))]
        rated = None if rng.random() < 0.3 else [rng.choice(flows) for _ in range(rng.randint(0, 3))]
        this_rate = rate if rng.random() < 0.9 else np.array([3.0, np.nan, 2.0, 5.0])
        expected = _check(decision_fault, this_rate, ranked, rated, active=active)
        assert _check(decision_fault, this_rate, ranked, rated, kept, active) == expected
