"""The invariants the simulator checks on every decision (``view.check_decision``): their kernels name
the first bad flow and link as the decision lists them, and leave their scratch arrays zeroed."""

from __future__ import annotations

import numpy as np
import pytest

from echelonflow.schedulers import kernels

# Three flows on three links: flow 0 on link 1; flow 1 on link 2; flow 2 on links 0 and 1.
PATH_PTR = np.array([0, 1, 2, 4], dtype=np.int64)
PATH_LINKS = np.array([1, 2, 0, 1], dtype=np.int64)
CAPACITY = np.array([10.0, 10.0, 10.0])
ACTIVE = np.array([2, 0, 1], dtype=np.int64)  # the decision's order: flow 2 first


def _variants(name: str) -> list:
    compiled = getattr(kernels, name)
    return [compiled, getattr(compiled, "py_func", compiled)]


@pytest.mark.parametrize("over_capacity", _variants("over_capacity"))
def test_over_capacity_names_the_first_flow_on_an_overloaded_link(over_capacity) -> None:
    load = np.zeros(3)
    full = np.array([5.0, 10.0, 5.0])  # links 1 and 2 exactly full
    assert over_capacity(ACTIVE, full, PATH_PTR, PATH_LINKS, CAPACITY, 1e-9, load)[0] == 0
    assert not load.any()
    code, flow, link, used = over_capacity(ACTIVE, np.array([6.0, 1.0, 5.0]), PATH_PTR, PATH_LINKS, CAPACITY,
                                           1e-9, load)
    assert (code, flow, link, used) == (2, 2, 1, 11.0)  # flow 2 is listed first; its second link is full
    assert not load.any()
    assert over_capacity(ACTIVE, np.array([5.0, 10.0 * (1 + 1e-12), 5.0]), PATH_PTR, PATH_LINKS, CAPACITY,
                         1e-9, load)[0] == 0  # within the tolerance
    code, flow, _link, _used = over_capacity(ACTIVE, np.array([1.0, 1.0, np.nan]), PATH_PTR, PATH_LINKS,
                                             CAPACITY, 1e-9, load)
    assert (code, flow) == (1, 2) and not load.any()


@pytest.mark.parametrize("repeats_or_strays", _variants("ranking_repeats_or_strays"))
def test_the_ranking_may_name_active_flows_once_each(repeats_or_strays) -> None:
    mark = np.zeros(4, dtype=np.int64)  # four flows in the table; 3 is not active
    for ranked, bad in (([2, 0, 1], False), ([0], False), ([], False), ([2, 0, 2], True), ([2, 3], True),
                        ([2, 7], True), ([0, 1, 2, 1], True)):
        assert repeats_or_strays(ACTIVE, np.array(ranked, dtype=np.int64), len(ranked), mark) == bad, ranked
        assert not mark.any()
    assert not repeats_or_strays(ACTIVE, np.array([2, 0, 2], dtype=np.int64), 2, mark)  # only count read


@pytest.mark.parametrize("listing_differs", _variants("rated_listing_differs"))
def test_the_flows_listed_as_given_a_rate_are_those_with_a_positive_rate(listing_differs) -> None:
    mark = np.zeros(4, dtype=np.int64)
    rate = np.array([3.0, 0.0, 2.0, 5.0])  # flow 3 has a rate but is not active
    for rated, bad in (([2, 0], False), ([0, 2], False), ([0], True), ([0, 2, 1], True), ([0, 2, 2], True),
                       ([0, 2, 3], True), ([], True)):
        assert listing_differs(ACTIVE, rate, np.array(rated, dtype=np.int64), mark) == bad, rated
        assert not mark.any()
    assert not listing_differs(ACTIVE, np.zeros(4), np.array([], dtype=np.int64), mark)


@pytest.mark.parametrize("decision_fault", _variants("decision_fault"))
def test_one_call_finds_each_fault_in_the_order_the_checks_name_them(decision_fault) -> None:
    """``decision_fault`` (what ``view.check_decision`` calls) gives the capacity check's answer first,
    then the ranking's, then the rated listing's, and leaves its kept scratch zeroed every time."""
    scratch = (np.zeros(3), np.zeros(4, dtype=np.int64))
    paths = (PATH_PTR, PATH_LINKS, CAPACITY)
    fine_rate = np.array([5.0, 10.0, 5.0, 0.0])
    ranked = np.array([2, 0, 1], dtype=np.int64)
    listed = np.array([2, 0, 1], dtype=np.int64)
    cases = (
        (fine_rate, (ranked, 3, listed, True), (0, -1, -1, 0.0)),
        (fine_rate, (ranked, 3, listed[:0], False), (0, -1, -1, 0.0)),  # no listing: not checked
        (np.array([6.0, 1.0, 5.0, 0.0]), (np.array([2, 2], dtype=np.int64), 2, listed[:1], True),
         (2, 2, 1, 11.0)),  # over capacity comes first, whatever else is wrong
        (fine_rate, (np.array([2, 3], dtype=np.int64), 2, listed, True), (kernels.RANKING_BAD, -1, -1, 0.0)),
        (fine_rate, (ranked, 3, listed[:2], True), (kernels.RATED_BAD, -1, -1, 0.0)),
    )
    for rate, ranking, expected in cases:
        assert tuple(decision_fault(ACTIVE, rate, paths, 1e-9, ranking, scratch)) == expected, expected
        assert not scratch[0].any() and not scratch[1].any()
