"""EchelonFlow scheduling (Pan et al., HotNets'22) and Varys coflow scheduling (Chowdhury et al., SIGCOMM'14).

One algorithm with one knob (docs/scheduler-design.md, with the paper's Fig. 2 worked through): a flow's
ideal-finish offset ``o_j = d_j - r`` within its group.  Coflow scheduling is the special case
``o_j = 0`` (the paper's Eq. 5); the ``coflow`` baseline itself is Varys as CoflowSim runs it
(``schedulers/varys.py``), which also splits spare capacity among the coflows MADD skips.

Per decision (rates in bits/s; "bytes" below are taken as bits, ``8 * remaining_bytes``):

1. each group's bottleneck tardiness ``t*_H = max_l max_j (C_j / c_l - (d_j - now))`` where ``C_j``
   is the group's cumulative remaining volume on link ``l`` in EDF order (Jackson's rule);
2. groups are ordered smallest-effective-bottleneck-first on their remaining volume,
   ``max_l C_l / c_l`` (Varys's SEBF; ``order_by="volume"``, the default), by the offset-adjusted
   residual bottleneck ``max_l max_j (C_j / c_l - o_j)`` (``"bottleneck"``), or by ``t*_H`` itself
   (``"tardiness"``), each divided by the job's weight (the weighted sum of Eq. 4: Smith's rule orders
   by time per weight).  Measured on the bundled scenarios (README, "Group ordering"), volume wins: the
   objective is a sum over groups, so as in Smith's rule the group that occupies the bottleneck
   for the least time goes first; subtracting offsets makes a staggered group look shorter than
   the bandwidth it really holds and lets it delay everyone else;
3. group by group, flows in EDF order get just-in-time rates ``b_j / (d_j + t*_H - now)`` capped by
   the residual capacity of their path, ``t*_H`` being recomputed against what earlier groups left
   (MADD for coflows);
4. leftover capacity is back-filled in the same global order (work conservation).

``rank`` is the flow's index in that global order (0 = most urgent); the controller compresses it
into the switch's few priority queues.  The loops themselves are in ``kernels.echelon_decide`` (flat
arrays, compiled by numba where installed); this class orders the flows for it and keeps the
interface.
"""

from __future__ import annotations

from typing import Any

from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import Decision, Snapshot
from echelonflow.schedulers.columns import ColumnarScheduler, FlowTable

ORDERINGS = ("bottleneck", "tardiness", "volume")
_ORDER_CODES = {
    "bottleneck": kernels.ORDER_BOTTLENECK,
    "tardiness": kernels.ORDER_TARDINESS,
    "volume": kernels.ORDER_VOLUME,
}


class EchelonScheduler(ColumnarScheduler):
    """EchelonFlow-aware Varys: staggered just-in-time rates aimed at equal tardiness per group."""

    name = "echelon"
    enforces = True
    #: When False every offset is treated as 0 (ideal finish = reference time): Varys.
    use_offsets = True

    def __init__(self, order_by: str = "volume") -> None:
        if order_by not in ORDERINGS:
            raise ValueError(f"order_by must be one of {', '.join(ORDERINGS)}, got {order_by!r}")
        self.order_by = order_by

    def decide(self, snapshot: Snapshot) -> Decision:
        table, ids = self.table_of(snapshot)
        return self.decide_whole_table(table, ids, snapshot.now_s)

    def decide_whole_table(self, table: FlowTable, ids: list[str], now_s: float) -> Decision:
        """The decision over every flow of a snapshot's ``table`` (flows ``ids``, in id order; one
        reference per flow, as :meth:`FlowTable.from_snapshot` makes it)."""
        # EDF inside each group: by due time (the kernel puts equal due times in flow-id order)
        n = len(ids)
        ref, off, group = (kernels.to_list(a, n) for a in (table.reference, table.offset, table.group))
        use = self.use_offsets
        active = sorted(range(n), key=lambda f: (group[f], ref[f] + (off[f] if use else 0.0), f))
        rate = kernels.floats(n)
        order = kernels.ints(n)
        ranked = self.decide_table(table, kernels.int_array(active), now_s, rate, order)
        ranked_ids = [ids[f] for f in kernels.to_list(order, ranked)]
        return self.table_decision(ids, kernels.to_list(rate, n), ranked_ids)

    @property
    def live_order(self) -> str:  # type: ignore[override]
        return "group-offset" if self.use_offsets else "group"

    def flow_order(self, table: FlowTable) -> list[int]:
        """Flow numbers in the order :meth:`decide_table` wants its active flows (group, offset, id).

        Within a group every due time is the same reference plus the offset, so offset order is due
        order; the kernel sorts out the ties.  Only valid for tables with one reference per group.
        """
        use = self.use_offsets
        group, offset, idrank = table.group, table.offset, table.idrank
        if kernels.HAVE_NUMBA:
            zeros = offset * 0.0
            return kernels.np.lexsort((idrank, offset if use else zeros, group)).tolist()
        return sorted(range(len(group)), key=lambda f: (group[f], offset[f] if use else 0.0, idrank[f]))

    def decide_table(self, table: FlowTable, active: Any, now_s: float, rate: Any, order: Any) -> int:
        """Rates of the ``active`` flows of ``table`` into ``rate``; their ranking into ``order``."""
        return kernels.echelon_decide(
            active, table.remaining, table.group, table.offset, table.reference, table.ref_slot,
            table.idrank, table.weight, table.path_ptr, table.path_links, table.capacity, float(now_s),
            self.use_offsets, _ORDER_CODES[self.order_by], rate, order,
        )
