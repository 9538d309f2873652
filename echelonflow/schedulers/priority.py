"""Strict priority between groups, fair sharing inside one: how a coflow *order* becomes rates.

FIFO, Sincronia and Aalo decide only an order of coflows (EchelonFlows).  The network then serves them
the way priority classes over TCP do, which is also how Sincronia proposes to deploy its order: the
first group's flows go as fast as their paths allow, sharing max-min fairly among themselves (one
priority class, TCP inside it); the next group gets what is left on every link, and so on.  Every flow
ends up crossing a full link, so the result is work-conserving.

The fair sharing inside a group is exactly ``fair``'s progressive filling, run on the residual capacity;
the loop over groups is ``kernels.priority_decide`` (flat arrays, compiled where numba is installed).
A policy here implements :meth:`GroupOrderScheduler.order` on the view's groups
(:class:`~echelonflow.schedulers.view.GroupView`); the simulator and the controller both reach it
through :meth:`GroupOrderScheduler.decide`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import Scheduler
from echelonflow.schedulers.view import Allocation, FlowView, GroupView

#: Up to this many groups, :func:`serve_classes` copies the served flows group by group (one slice each);
#: with more, one gather (:func:`_gathered`).  Slicing costs a Python step per group (hundreds per
#: decision on a k=16 fabric), the gather a few passes over every served flow (FB2010's two or three
#: coflows of 20,000 flows: there it took 9 % of sincronia's run under cProfile, a slice is one copy).
SLICED_GROUPS = 16


class KeptClasses:
    """What a policy served at its last decision, so that the next one keeps the rates of the classes it
    serves alike.  With strict priority a class's rates depend only on its own flows and on what the
    classes before it left: when the first k classes list the very flows the previous decision's first k
    listed, on the same paths and capacities, the filling would write their rates again bit for bit, so
    ``kernels.priority_decide`` skips it (issue 31's "recompute from the first affected position of the
    order"; on FB2010's hour a fifth of the flows with a rate, docs/performance.md, "Leading classes
    served as before keep their rates").  Only where the caller vouches for the rates and capacities
    (``FlowView.rates_kept``: the simulator) and every active flow is covered (``FlowView.clean``)."""

    def __init__(self) -> None:
        self.served: Any = None  # the previous decision's served flows (a copy the caller does not touch)
        self.ptr: Any = None  # where each of its classes starts among them
        self.rate: Any = None  # the rate array it wrote
        self.layout: object | None = None  # the table layout it decided on (flow numbers and paths)

    def count(self, view: FlowView, served: Any, served_ptr: Any) -> int:
        """How many leading classes keep their rates at this decision, which the caller vouches for
        (``rates_kept`` and ``clean``): none after another table layout or rate array."""
        layout = view.table.layout
        if self.served is None or layout is None or layout is not self.layout or view.rate is not self.rate:
            return 0
        return int(kernels.kept_classes(served, served_ptr, self.served, self.ptr))

    def remember(self, view: FlowView, served: Any, served_ptr: Any) -> None:
        self.served, self.ptr, self.rate, self.layout = served, served_ptr, view.rate, view.table.layout


def serve(view: FlowView, groups: GroupView, order: Sequence[int],
          kept: KeptClasses | None = None) -> Allocation:
    """Rates into ``view.rate`` for the groups served in ``order`` (indices into ``groups``, each once);
    a flow's rank is its position in the global order (group order, then flow id), so the controller
    compresses it into one priority class per group, most urgent first.  ``kept``: the policy's memory of
    its last decision (:class:`KeptClasses`), or None."""
    return serve_classes(view, groups, [[g] for g in order], kept)


def serve_classes(view: FlowView, groups: GroupView, classes: Sequence[Sequence[int]],
                  kept: KeptClasses | None = None) -> Allocation:
    """:func:`serve` with several groups to a class (``crux``: every job of one priority level): the
    classes get strict priority in the order given, and every flow of one class shares max-min fairly
    with the class's other flows, whichever group it belongs to.  Ranks follow the classes, then the
    groups in the order listed inside a class, then flow id."""
    ptr = groups.group_ptr
    active = view.active
    order = [g for members in classes for g in members]
    if kernels.HAVE_NUMBA and len(order) > SLICED_GROUPS:
        served, served_ptr = _gathered(active, ptr, order, [len(members) for members in classes])
    else:
        served_ptr = [0]
        for members in classes:
            served_ptr.append(served_ptr[-1] + sum(ptr[g + 1] - ptr[g] for g in members))
        if kernels.HAVE_NUMBA:
            pieces = [active[ptr[g]:ptr[g + 1]] for g in order]
            served = kernels.np.concatenate(pieces) if pieces else kernels.int_array([])
        else:
            served = [active[k] for g in order for k in range(ptr[g], ptr[g + 1])]
    table = view.table
    served_ptr = kernels.int_array(served_ptr)
    vouched = kept is not None and view.rates_kept and view.clean
    skipped = kept.count(view, served, served_ptr) if vouched else 0
    kernels.priority_decide(served, served_ptr, table.remaining, table.path_ptr, table.path_links,
                            table.capacity, view.rate, bool(view.clean), skipped)
    if vouched:
        kept.remember(view, served, served_ptr)
    return Allocation(view.rate, served, len(served))


def _gathered(active, group_ptr: Sequence[int], order: Sequence[int], class_sizes: Sequence[int]):
    """(the flows of the groups in ``order``, one after another; where each class starts among them):
    one gather over numpy arrays, where a slice per group and a sum per class cost a Python step per
    group (hundreds per decision on a k=16 fabric)."""
    np = kernels.np
    ptr = np.asarray(group_ptr, dtype=np.int64)
    chosen = np.asarray(order, dtype=np.int64)
    firsts = ptr[chosen]
    sizes = ptr[chosen + 1] - firsts
    starts = np.zeros(len(chosen) + 1, dtype=np.int64)
    np.cumsum(sizes, out=starts[1:])
    served = active[np.arange(int(starts[-1]), dtype=np.int64) + np.repeat(firsts - starts[:-1], sizes)]
    bounds = np.zeros(len(class_sizes) + 1, dtype=np.int64)
    np.cumsum(np.asarray(class_sizes, dtype=np.int64), out=bounds[1:])
    return served, starts[bounds]


class GroupOrderScheduler(Scheduler):
    """A policy that only orders groups (:meth:`order`); :func:`serve` turns the order into rates."""

    active_order = "group"
    #: Does :meth:`order` read what the network has seen (``GroupView.attained_bytes``, Aalo)?
    needs_seen = False

    #: what the last decision served (:class:`KeptClasses`), made on the first decision
    _kept: KeptClasses | None = None

    def decide(self, view: FlowView) -> Allocation:
        groups = view.groups(self.needs_seen)
        if self._kept is None:
            self._kept = KeptClasses()
        allocation = serve(view, groups, self.order(view, groups), self._kept)
        allocation.valid_until_s = self.valid_until(view, groups)
        return allocation

    def order(self, view: FlowView, groups: GroupView) -> list[int]:
        """Indices of ``groups``, most urgent first (each exactly once)."""
        raise NotImplementedError

    def valid_until(self, view: FlowView, groups: GroupView) -> float:
        """When the decision served into ``view.rate`` stops holding (Aalo: a queue change)."""
        return math.inf


def group_rates(view: FlowView, groups: GroupView) -> list[float]:
    """Each group's summed rate in ``view.rate`` (bits/s), in a kernel: a Python sum over every active
    flow at every decision was most of Aalo's exact FB2010 hour."""
    sums = kernels.floats(len(groups.heads))
    kernels.group_rate_sums(view.active, kernels.int_array(groups.group_ptr), view.rate, sums)
    return kernels.to_list(sums, len(groups.heads))
