"""Varys (Chowdhury, Zhong, Stoica, SIGCOMM'14) as its authors' simulator CoflowSim runs it, and the
two CoflowSim baselines that share its machinery: FIFO (MADD in arrival order) and FAIR.

* ``coflow`` (:class:`CoflowScheduler`): coflows smallest-effective-bottleneck-first (SEBF) on the
  bytes they have left, MADD rates (every flow of a coflow finishes when its bottleneck does), the
  coflows MADD had to skip share the spare capacity evenly per link, then greedy back-fill;
* ``coflow-static`` (:class:`CoflowStaticScheduler`): the same with each coflow's SEBF key fixed the
  first time it is ordered, as CoflowSim sorts a coflow once, when it is admitted;
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

from echelonflow.schedulers import varys_kernels
from echelonflow.schedulers.base import Scheduler
from echelonflow.schedulers.view import Allocation, FlowView


class VarysScheduler(Scheduler):
    """MADD rates for coflows in the order ``order_by`` gives, spare split, back-fill (module docstring)."""

    enforces = True
    #: Varys and CoflowSim re-decide only when a coflow arrives or departs (``Scheduler``)
    coflow_rule_faithful = True
    #: ``varys_kernels.ORDER_SEBF`` or ``varys_kernels.ORDER_ARRIVAL``
    order_by = varys_kernels.ORDER_SEBF
    active_order = "group"

    def decide(self, view: FlowView) -> Allocation:
        table = view.table
        order = view.ranking(len(view.active))
        count = varys_kernels.varys_decide(view.active, table.arrays(), self.order_by, view.rate, order,
                                           table.admission_keys(), bool(view.clean))
        return Allocation(view.rate, order, count)


class CoflowScheduler(VarysScheduler):
    """Varys: SEBF order on the bytes left, weighted by the job's weight (Smith's rule)."""

    name = "coflow"


class CoflowStaticScheduler(VarysScheduler):
    """CoflowSim's SEBF: a coflow's key is its bottleneck on the bytes it has when first ordered, kept.

    CoflowSim computes a coflow's ``alpha`` (its largest per-port byte count) when the coflow is
    admitted and inserts it into a sorted list it never re-sorts; ``coflow`` recomputes the key on the
    bytes left at each decision, so a coflow that has progressed moves up.  The key is kept where the
    caller keeps its flow table between decisions (the simulator's run, the controller's registry); a
    table built per snapshot starts afresh, and there this is ``coflow``.  For matching CoflowSim
    (docs/baselines.md): on the bundled DAG scenarios the recomputed order is the better one.
    """

    name = "coflow-static"
    order_by = varys_kernels.ORDER_SEBF_ADMITTED


class FifoScheduler(VarysScheduler):
    """CoflowSim's FIFO: Varys's rates with coflows in arrival order (weights do not apply).

    A coflow arrives at its reference time ``r``: for a coflow, when its flows started (for a
    staggered EchelonFlow, when its head flow started or would have, given the starts seen so far);
    ties go to the smaller group id.
    """

    name = "fifo"
    order_by = varys_kernels.ORDER_ARRIVAL


class PortFairScheduler(Scheduler):
    """CoflowSim's FAIR: per flow, the smallest over its links of capacity / active flows on the link.

    Unlike ``fair`` (max-min), what a flow is held below its share on one link by another link stays
    unused, so it is not work-conserving; every flow shares one class.  It enforces, so on the network
    the rates are the meters the controller installs rather than whatever TCP would settle on.
    """

    name = "port-fair"
    blind_to_bytes = True  # each flow from its own links: capacity / flows on the link
    enforces = True
    active_order = "id"
    #: not faithful: CoflowSim re-divides FAIR's shares every 8-ms step, so a finished flow's share goes
    #: to the others at once (the exact rule is FAIR's)
    coflow_rule_faithful = False

    def decide(self, view: FlowView) -> Allocation:
        table = view.table
        varys_kernels.port_fair_decide(view.active, table.remaining, table.path_ptr, table.path_links,
                                       table.capacity, view.rate)
        return Allocation(view.rate, view.ranking(0), 0, shared_class=True)
