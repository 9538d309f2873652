"""The one way into a scheduler: a :class:`FlowView` in, an :class:`Allocation` out.

Why one entry point: the simulator and the controller must run the very same decision, and each has
its flows in its own form (the simulator a flow table for the whole run, the controller a table it keeps
current as flows start and finish).  Both hand a scheduler the same thing: the flows as a
:class:`~echelonflow.schedulers.columns.FlowTable` (integer-numbered arrays the compiled kernels
read), which of them are active, the clock, and a *source* that answers what is costly to gather and
only some policies need (a :class:`~echelonflow.schedulers.base.Snapshot`; per group what the network
has seen).  A scheduler writes its rates into ``view.rate`` and returns its ranking.

Policies that decide on arrays override :meth:`Scheduler.decide` directly.  A simple policy implements
only :meth:`Scheduler.decide_snapshot` (a :class:`Snapshot` in, a :class:`Decision` by flow id out) and
the default :meth:`Scheduler.decide` builds the snapshot for it (docs/scheduler-design.md, "Adding a
scheduler").  :func:`check_decision` is the invariant every decision keeps; the simulator, the tests and
the controller's ``check_decisions`` setting run it.

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Protocol

from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import Decision, Snapshot
from echelonflow.schedulers.columns import FlowTable, LinkNumbering

#: How ``FlowView.active`` is ordered, by what a policy's kernel expects (``Scheduler.active_order``).
ACTIVE_ORDERS = ("id", "group", "group-offset")
#: A decision may load a link this much (relative) above its capacity: floating-point rounding.
CAPACITY_RTOL = 1e-6


@dataclass(frozen=True)
class JobProfile:
    """A job as ``crux`` knows it (``echelonflow.schedulers.crux.job_profile``): its GPU intensity
    I_j = W_j / t_j (declared compute seconds over the seconds its declared bytes take on its most
    loaded link) and the links its declared flows cross (in the caller's numbering; they say which
    jobs contend).  Fixed for the job: the caller makes it once."""

    job_id: str
    intensity: float
    links: frozenset


@dataclass
class GroupView:
    """The active flows cut into groups (EchelonFlows), with what each group is known by.

    Group ``g`` is ``view.active[group_ptr[g]:group_ptr[g + 1]]`` (needs ``active_order`` "group" or
    "group-offset") and has number ``heads[g]`` in the table's ``group`` array.  ``attained_bytes``,
    ``flow_sent_bytes`` and ``slowest_bps`` are filled only when asked for (``seen=True``): what
    non-clairvoyant policies read instead of sizes (the simulator keeps what it needs for them only:
    ``clairvoyant = False``).
    """

    group_ptr: list[int]
    heads: list[int]
    start_s: list[float]  # when the group's first flow started
    weight: list[float]  # its job's weight (Eq. 4)
    attained_bytes: list[float] | None = None  # wire bytes it has delivered, finished flows included
    flow_sent_bytes: Any = None  # per position of ``active``: wire bytes that flow has delivered
    slowest_bps: float | None = None  # the slowest link on any active flow's path


class ViewSource(Protocol):
    """What the caller of a decision answers on demand (the simulator's run, the controller's registry,
    or a snapshot)."""

    def flow_ids(self, numbers: Sequence[int]) -> list[str]: ...

    def snapshot(self, view: FlowView) -> Snapshot: ...

    def groups(self, view: FlowView, seen: bool) -> GroupView: ...

    def job_profiles(self, view: FlowView, groups: GroupView) -> list[JobProfile] | None: ...


@dataclass
class Allocation:
    """A decision on a view: rates by flow number (``rate``, the view's buffer) and the ranking."""

    rate: Any
    ranked: Any  # flow numbers, most urgent first
    count: int  # how many of ``ranked`` are used
    valid_until_s: float = math.inf  # the policy would decide otherwise then, even with nothing new
    shared_class: bool = False  # no ranking at all: every flow in one class (``fair``)
    #: The flows given a positive rate, in any order, when the policy lists them (``echelon`` deciding
    #: at every flow event: a few hundred of tens of thousands active on FB2010), so the simulator's
    #: step need not look for them; None: not listed.
    rated: Any = None


@dataclass
class FlowView:
    """Everything a scheduler reads at one decision (module docstring).

    ``every_flow``: the caller decides again at every flow start and finish (the controller, and the
    simulator's exact rule); false under the coflow rescheduling rule (decisions at flow starts and
    coflow completions only), where capacity a flow frees stays idle until the next decision.
    """

    now_s: float
    table: FlowTable
    active: Any  # flow numbers of the active flows, in the scheduler's ``active_order``
    source: ViewSource
    rate: Any  # per flow number, bits/s: the scheduler writes the active flows' rates here
    every_flow: bool = True
    #: Does the caller read the ranking?  The controller does (priority queues); the simulator only to
    #: check it, so with its checks off a policy may leave it out (an empty ranking).
    ranked: bool = True
    #: The caller vouches that ``active`` is in increasing flow numbers and that every active flow has
    #: more than dust left and a path (the simulator), so a policy covers every active flow without
    #: checking each; False where it does not (the controller, a snapshot).
    clean: bool = False
    #: What the last decision listed as given a rate (its ``Allocation.rated``), when the caller vouches
    #: that every other active flow's rate is 0 (the simulator); None where it does not.  A policy may
    #: then clear just those rates instead of every active flow's.
    rated_before: Any = None
    #: The caller vouches that ``rate`` is the array this policy's previous decision wrote, untouched
    #: since, and that the table's capacities have not changed since (its paths may have: a new
    #: ``table.layout`` says so); the simulator does (one run, one policy, capacities fixed at its
    #: start), the controller and a snapshot do not.  A policy may then leave rates it would write
    #: again as they are (``priority.KeptClasses``).
    rates_kept: bool = False

    def snapshot(self) -> Snapshot:
        return self.source.snapshot(self)

    def groups(self, seen: bool = False) -> GroupView:
        return self.source.groups(self, seen)

    def flow_ids(self, numbers: Sequence[int]) -> list[str]:
        return self.source.flow_ids(numbers)

    def job_profiles(self, groups: GroupView) -> list[JobProfile] | None:
        """Per group of ``groups``, its job's :class:`JobProfile` (what ``crux`` reads).  None where the
        caller does not know the jobs (a view of a bare snapshot)."""
        return self.source.job_profiles(self, groups)

    def ranking(self, count: int) -> Any:
        """A buffer for up to ``count`` ranked flow numbers (read only as far as the policy fills it)."""
        return kernels.unset_ints(count)

    def allocation_of(self, decision: Decision) -> Allocation:
        """A decision by flow id (a snapshot policy's) as an allocation on this view."""
        active = kernels.to_list(self.active, len(self.active))
        number = dict(zip(self.flow_ids(active), active))
        for fid, f in number.items():
            self.rate[f] = float(decision.rate_bps.get(fid, 0.0))
        ranked = sorted((rank, number[fid]) for fid, rank in decision.rank.items() if fid in number)
        shared = len(ranked) > 1 and len({rank for rank, _ in ranked}) == 1  # every flow in one class
        order = kernels.int_array([f for _, f in ranked])
        return Allocation(self.rate, order, len(ranked), decision.valid_until_s, shared)

    def decision_of(self, allocation: Allocation) -> Decision:
        """The allocation by flow id, as the controller enforces it and the tests read it: every active
        flow has a rate; ranks 0.. in ranking order, unranked flows after them in flow-id order (or every
        flow at rank 0: one shared class)."""
        ids = self.flow_ids(self.active)
        rates = kernels.gather(self.rate, self.active)
        if allocation.shared_class:
            return Decision(rate_bps=dict(zip(ids, rates)), rank=dict.fromkeys(ids, 0),
                            valid_until_s=allocation.valid_until_s)
        ranked = self.flow_ids(allocation.ranked[:allocation.count])
        rank = dict(zip(ranked, range(len(ranked))))
        if len(rank) < len(ids):
            unranked = sorted(fid for fid in ids if fid not in rank)
            rank.update(zip(unranked, range(len(ranked), len(ranked) + len(unranked))))
        return Decision(rate_bps=dict(zip(ids, rates)), rank=rank, valid_until_s=allocation.valid_until_s)


def check_decision(view: FlowView, allocation: Allocation) -> None:
    """The invariants every scheduler keeps, else AssertionError naming the flow or link: every active
    flow's rate is finite and non-negative, no link carries more than its capacity, no flow is
    ranked twice or ranked without being active, and the flows listed as given a rate (if listed) are
    those with a positive rate."""
    table = view.table
    scratch = table.check_scratch
    if scratch is None or len(scratch[0]) != len(table.capacity) or len(scratch[1]) != len(view.rate):
        scratch = table.check_scratch = (kernels.floats(len(table.capacity)), kernels.flags(len(view.rate)))
    rated = allocation.rated
    ranking = (kernels.int_array(allocation.ranked), allocation.count,
               kernels.int_array(() if rated is None else rated), rated is not None)
    code, f, li, used = kernels.decision_fault(view.active, view.rate,
                                               (table.path_ptr, table.path_links, table.capacity),
                                               CAPACITY_RTOL, ranking, scratch)
    if code == kernels.BAD_RATE:
        raise AssertionError(f"flow {view.flow_ids([f])[0]}: bad rate {float(view.rate[f])!r}")
    if code == kernels.OVER_CAPACITY:
        raise AssertionError(f"link number {li}: {used} bps allocated over capacity {table.capacity[li]} bps")
    if code == kernels.RANKING_BAD:
        raise AssertionError("the ranking repeats a flow or ranks one that is not active")
    if code == kernels.RATED_BAD:
        raise AssertionError("the flows listed as given a rate are not the active flows with a rate")


# --------------------------------------------------------------------------- views of a snapshot
class SnapshotSource:
    """A :class:`Snapshot` as a view's source: for tests, benchmarks and callers with a snapshot."""

    def __init__(self, snapshot: Snapshot, flows: list) -> None:
        self.snap = snapshot
        self.flows = flows  # the snapshot's flows by flow number

    def flow_ids(self, numbers: Sequence[int]) -> list[str]:
        return [self.flows[f].flow_id for f in numbers]

    def snapshot(self, view: FlowView) -> Snapshot:
        return self.snap

    def job_profiles(self, view: FlowView, groups: GroupView) -> list[JobProfile] | None:
        return None  # a snapshot holds flows, not the jobs' compute

    def groups(self, view: FlowView, seen: bool) -> GroupView:
        active = kernels.to_list(view.active, len(view.active))
        group = view.table.group
        ptr = [k for k in range(len(active)) if k == 0 or group[active[k]] != group[active[k - 1]]]
        ptr.append(len(active))
        members = [[self.flows[f] for f in active[lo:hi]] for lo, hi in zip(ptr, ptr[1:])]
        out = GroupView(group_ptr=ptr, heads=[int(group[active[lo]]) for lo in ptr[:-1]],
                        start_s=[min(f.group_start_s for f in flows) for flows in members],
                        weight=[flows[0].weight for flows in members])
        if seen:
            out.attained_bytes = [flows[0].group_sent_bytes for flows in members]
            out.flow_sent_bytes = kernels.float_array([self.flows[f].sent_bytes for f in active])
            capacity = self.snap.capacity_bps
            out.slowest_bps = min((capacity[link] for f in self.snap.flows for link in f.path),
                                  default=math.inf)
        return out


def snapshot_view(snapshot: Snapshot, active_order: str, links: LinkNumbering | None = None) -> FlowView:
    """A view of ``snapshot``: its flows, numbered in ``active_order``, are the active ones; its
    ``declared`` flows follow them as members of their groups (``FlowTable.members``)."""
    if active_order not in ACTIVE_ORDERS:
        raise ValueError(f"active_order must be one of {', '.join(ACTIVE_ORDERS)}, got {active_order!r}")
    keys = {"id": attrgetter("flow_id"), "group": attrgetter("echelon_id", "flow_id"),
            "group-offset": attrgetter("echelon_id", "offset_s", "flow_id")}[active_order]
    active = sorted(snapshot.flows, key=keys)
    groups = {f.echelon_id for f in active}
    flows = active + sorted((f for f in snapshot.declared if f.echelon_id in groups), key=keys)
    table = FlowTable.of_flows(snapshot, flows, links or LinkNumbering())
    if len(flows) > len(active):
        group = kernels.to_list(table.group, len(flows))
        by_group = sorted(range(len(flows)), key=lambda k: (group[k], flows[k].offset_s, flows[k].flow_id))
        counts = [0] * (1 + max(group))
        for k in by_group:
            counts[group[k]] += 1
        ptr = [0]
        for count in counts:
            ptr.append(ptr[-1] + count)
        table.members_ptr, table.members = kernels.int_array(ptr), kernels.int_array(by_group)
    return FlowView(snapshot.now_s, table, kernels.int_array(range(len(active))),
                    SnapshotSource(snapshot, flows), kernels.floats(len(flows)))


def decision_on_snapshot(scheduler: Any, snapshot: Snapshot) -> Decision:
    """``scheduler``'s decision on ``snapshot``, by flow id (what tests and benchmarks compare): its
    :meth:`~Scheduler.decide` on a view of the snapshot, whichever way the policy is written (the
    opposite of :meth:`Scheduler.decide_snapshot`, which a simple policy implements)."""
    view = snapshot_view(snapshot, scheduler.active_order, scheduler.links())
    return view.decision_of(scheduler.decide(view))
