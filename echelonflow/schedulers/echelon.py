"""EchelonFlow scheduling (Pan et al., HotNets '22), and the paper's Varys adaptation it grew out of.

``echelon`` (:class:`EchelonScheduler`) minimises the weighted sum of EchelonFlow tardiness (Eq. 4).
Each decision (docs/scheduler-design.md works both rules through, with why and the measurements):

1. **Order** EchelonFlows by the residual bottleneck of *everything they have left*,
   ``max_l max_j (C_j / c_l - o_j)`` over the group's remaining flows in earliest-due-first order,
   declared flows that have not started yet included, divided by the job's weight (Smith's rule:
   least time per weight first).  For a Coflow (every ``o_j = 0``) this is Varys's
   smallest-effective-bottleneck-first on the whole coflow.  Counting what has not started is what
   makes the order stable: a ring all-reduce's key is its whole remaining all-reduce before and after
   its next step starts, so a millisecond's difference in when a step ends does not reorder groups.
   Smith's rule looks at each group's own bottleneck only; where groups contend on several links at
   once (oversubscribed fabrics), Sincronia's BSSI order does better.  So the same groups are also
   ordered by BSSI on what they have left, with offsets (a group's seconds on a link:
   ``max_j (C_j / c_l - (o_j - o_first))``), and that order is kept unless two list-schedule
   estimates of the weighted tardiness (each link serving the groups one after another; a group
   ahead of its arrangement holding all it has left, or only what its due times need) both put
   Smith's lower by more than ``BSSI_MARGIN`` (2 %, measured on the scheduler matrix: list
   schedules' near ties say little, and they go to BSSI's order).
2. **Serve** in that order, against what earlier groups left, each group's flows as soon as possible,
   one after another in earliest-due-first order (on one link, Jackson's rule: the least maximum
   tardiness).  A flow done before its ideal finish time buys its own job nothing, but the capacity it
   used is free once it is done, for whatever arrives next; holding a staggered EchelonFlow back to
   just-in-time rates ``b_j / (d_j + t* - now)`` instead, as the paper sketches, lost on the
   contended fabrics measured (2.2 % on a k=16 4:1 cell with the order held fixed;
   docs/scheduler-design.md, rule 2).  When
   the caller does not decide again at every flow finish (the coflow rescheduling rule), one flow
   after another would leave capacity idle until the next decision, so a Coflow's flows share their
   paths max-min fairly and a staggered EchelonFlow's get the just-in-time rates, which keep all of
   them moving.
3. **Back-fill** what is left in the same global order (work conservation).

``echelon-varys`` (:class:`EchelonVarysScheduler`) is the paper's sketch taken literally, the
``echelon`` of earlier versions, kept for comparison: groups by Varys's SEBF on their *active* flows
(``order_by`` picks the key), just-in-time rates for every group (MADD for a Coflow), back-fill.  With
its offsets ignored it is Varys without CoflowSim's spare split; the ``coflow`` baseline is
``schedulers/varys.py``.

``rank`` is the flow's index in the global order (0 = most urgent); the controller compresses it into
the switch's few priority queues.  The loops are in ``echelon_kernels.py``.
"""

from __future__ import annotations

from echelonflow.schedulers import echelon_kernels as ek
from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import Scheduler
from echelonflow.schedulers.columns import TableArrays
from echelonflow.schedulers.echelon_totals import CoflowTotals, coflow_totals
from echelonflow.schedulers.view import Allocation, FlowView

ORDERINGS = ("bottleneck", "tardiness", "volume")
_ORDER_CODES = {"bottleneck": ek.ORDER_BOTTLENECK, "tardiness": ek.ORDER_TARDINESS, "volume": ek.ORDER_VOLUME}


class EchelonScheduler(Scheduler):
    """Whole-group residual-bottleneck (or BSSI) order; each group as soon as possible, earliest due first."""

    name = "echelon"
    enforces = True
    active_order = "group-offset"

    #: Uniform groups with more live flows than this are read off exact totals (``ek.EXACT_ABOVE``).
    exact_above = ek.EXACT_ABOVE
    #: The table layout ``_totals`` belongs to (``FlowTable.layout``) and the totals themselves.
    _layout: object | None = None
    _totals: CoflowTotals | None = None
    #: The flows a decision gave a rate (``Allocation.rated``, read before the next decision): one entry
    #: per link holds them all (each fills a link).
    _served: object | None = None
    #: ``echelon_decide``'s per-decision buffers, kept (sized by the table's flows)
    _buffers: tuple | None = None

    def decide(self, view: FlowView) -> Allocation:
        # deciding at every flow event, nothing but the ranking reads ``order``: left out when not read
        ranked = bool(view.ranked or not view.every_flow)
        order = view.ranking(len(view.active) if ranked else 0)
        arrays = view.table.arrays()
        totals = self._totals_for(view.table.layout, arrays)
        if self._served is None or len(self._served) != len(arrays.capacity):
            self._served = kernels.unset_ints(len(arrays.capacity))
        n_flows = len(arrays.remaining)
        if self._buffers is None or len(self._buffers[0]) != n_flows:
            self._buffers = (kernels.unset_ints(n_flows), kernels.unset_floats(n_flows),
                             kernels.unset_ints(n_flows + 1))
        # the caller vouches that only the flows it lists had a rate: clearing them clears every active
        # flow, and a kept Coflow's run is then not read at all (``ek._edf_core``)
        before = view.rated_before
        cleared = bool(view.clean and view.every_flow) and before is not None and totals is not None
        if cleared:
            view.rate[before] = 0.0
        count, n_served = ek.echelon_decide(view.active, arrays, float(view.now_s), bool(view.every_flow),
                                            view.rate, order, totals, self.exact_above, self._served, ranked,
                                            self._buffers, cleared)
        return Allocation(view.rate, order, count, rated=self._served[:n_served] if n_served >= 0 else None)

    def _totals_for(self, layout: object | None, arrays: TableArrays) -> CoflowTotals | None:
        """The exact per-link totals of the table's large uniform groups, kept while its layout stays
        (``echelon_totals.py``); built afresh for a new layout; None without a layout or such groups
        (the kernel then takes no totals at all: no arrays to hand over per decision)."""
        if layout is None or not len(arrays.members_ptr):
            return None
        if layout is not self._layout:
            self._totals = coflow_totals(arrays, self.exact_above)
            self._layout = layout
        return self._totals


class EchelonVarysScheduler(Scheduler):
    """The paper's Varys adaptation: SEBF on active flows, just-in-time rates for every group."""

    name = "echelon-varys"
    enforces = True
    active_order = "group-offset"
    #: When False every offset is treated as 0 (ideal finish = reference time): Varys.
    use_offsets = True

    def __init__(self, order_by: str = "volume") -> None:
        if order_by not in ORDERINGS:
            raise ValueError(f"order_by must be one of {', '.join(ORDERINGS)}, got {order_by!r}")
        self.order_by = order_by

    def decide(self, view: FlowView) -> Allocation:
        order = view.ranking(len(view.active))
        count = ek.jit_decide(view.active, view.table.arrays(), float(view.now_s), self.use_offsets,
                              _ORDER_CODES[self.order_by], view.rate, order)
        return Allocation(view.rate, order, count)
