"""Varys (Chowdhury, Zhong, Stoica, SIGCOMM'14) as its authors' simulator CoflowSim runs it, and the
two CoflowSim baselines that share its machinery: FIFO (MADD in arrival order) and FAIR.

* ``coflow`` (:class:`CoflowScheduler`): coflows smallest-effective-bottleneck-first (SEBF) on the
  bytes they have left, MADD rates (every flow of a coflow finishes when its bottleneck does), the
  coflows MADD had to skip share the spare capacity evenly per link, then greedy back-fill;
* ``fifo`` (:class:`FifoScheduler`): the same with coflows in arrival order, which is CoflowSim's FIFO
  (its coflow-level schedulers differ only in the order they hand MADD);
* ``port-fair`` (:class:`PortFairScheduler`): CoflowSim's FAIR, each flow at the smallest over its
  links of capacity / flows on the link, nothing redistributed (not max-min: that is ``fair``).

The loops are in ``schedulers/varys_kernels.py``; docs/baselines.md has the rules, the differences
that remain from CoflowSim, and the FB2010 comparison (``benchmarks/coflowsim_compare.py``).
``coflow`` and ``fifo`` treat every EchelonFlow as a coflow: offsets are not read.

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

from typing import Any

from echelonflow.schedulers import kernels, varys_kernels
from echelonflow.schedulers.base import Decision, Snapshot
from echelonflow.schedulers.columns import ColumnarScheduler, FlowTable
from echelonflow.schedulers.fair import FairScheduler


class VarysScheduler(ColumnarScheduler):
    """MADD rates for coflows in the order ``order_by`` gives, spare split, back-fill (module docstring)."""

    enforces = True
    #: ``varys_kernels.ORDER_SEBF`` or ``varys_kernels.ORDER_ARRIVAL``
    order_by = varys_kernels.ORDER_SEBF
    live_order = "group"

    def decide(self, snapshot: Snapshot) -> Decision:
        table, ids = self.table_of(snapshot)
        # the snapshot's table numbers flows in id order: (group, flow id) is (group, flow number)
        group = kernels.to_list(table.group, len(ids))
        active = sorted(range(len(ids)), key=lambda f: (group[f], f))
        rate = kernels.floats(len(ids))
        order = kernels.ints(len(ids))
        ranked = self.decide_table(table, kernels.int_array(active), snapshot.now_s, rate, order)
        return self.table_decision(ids, kernels.to_list(rate, len(ids)),
                                   [ids[f] for f in kernels.to_list(order, ranked)])

    def flow_order(self, table: FlowTable) -> list[int]:
        """Flow numbers in (group, flow id) order, as :meth:`decide_table` wants its active flows."""
        group, idrank = table.group, table.idrank
        if kernels.HAVE_NUMBA:
            return kernels.np.lexsort((idrank, group)).tolist()
        return sorted(range(len(group)), key=lambda f: (group[f], idrank[f]))

    def decide_table(self, table: FlowTable, active: Any, now_s: float, rate: Any, order: Any) -> int:
        """Rates of the ``active`` flows of ``table`` into ``rate``; their ranking into ``order``."""
        return varys_kernels.varys_decide(
            active, table.remaining, table.group, table.reference, table.ref_slot, table.idrank,
            table.weight, table.path_ptr, table.path_links, table.capacity, self.order_by, rate, order,
        )


class CoflowScheduler(VarysScheduler):
    """Varys: SEBF order on the bytes left, weighted by the job's weight (Smith's rule)."""

    name = "coflow"


class FifoScheduler(VarysScheduler):
    """CoflowSim's FIFO: Varys's rates with coflows in arrival order (weights do not apply).

    A coflow arrives at its reference time ``r``: for a coflow, when its flows started (for a
    staggered EchelonFlow, when its head flow started or would have, given the starts seen so far);
    ties go to the smaller group id.
    """

    name = "fifo"
    order_by = varys_kernels.ORDER_ARRIVAL


class PortFairScheduler(FairScheduler):
    """CoflowSim's FAIR: per flow, the smallest over its links of capacity / active flows on the link.

    Unlike ``fair`` (max-min), what a flow is held below its share on one link by another link stays
    unused, so it is not work-conserving; every flow has rank 0.  It enforces, so on the network the
    rates are the meters the controller installs rather than whatever TCP would settle on.
    """

    name = "port-fair"
    enforces = True

    def decide(self, snapshot: Snapshot) -> Decision:
        # fair's decide, declared here so that decides_by_table finds decide and decide_table in one
        # class (the simulator and the controller then use the table path)
        return super().decide(snapshot)

    def decide_table(self, table: FlowTable, active: Any, now_s: float, rate: Any, order: Any) -> int:
        """Rates of the ``active`` flows of ``table`` into ``rate``; ranks none (returns 0)."""
        return varys_kernels.port_fair_decide(active, table.remaining, table.path_ptr, table.path_links,
                                              table.capacity, rate)
