"""Sincronia: coflows ordered by BSSI, then served with per-flow priorities.

Reference: Agarwal, Rajakrishnan, Narayan, Agarwal, Shmoys, Vahdat, "Sincronia: Near-Optimal Network
Design for Coflows", SIGCOMM 2018.  Its ordering, Bottleneck-Select-Scale-Iterate (BSSI), is a
primal-dual 4-approximation for the sum of weighted coflow completion times; the paper then hands the
order to any per-flow rate allocation with priorities (DSCP classes over TCP), which is what
``echelonflow.schedulers.priority`` does here.

BSSI builds the order from the back, once per decision on the remaining bytes:

1. the most loaded port b (here: the directed link with the most remaining time, bits / capacity, summed
   over the unordered groups: on a big switch those are exactly the ingress and egress ports);
2. among the unordered groups using b, the one with the least weight per time on b goes LAST;
3. every other group on b pays for it: ``w_c -= w_last * t_{c,b} / t_{last,b}`` (the "scale" step);
4. remove it and repeat.

Groups without any remaining bytes left (all their flows are dust) go first, in id order.  Ties are
broken by link and group index in id order, so the decision is deterministic.
"""

from __future__ import annotations

from echelonflow.schedulers import kernels
from echelonflow.schedulers.priority import GroupOrderScheduler
from echelonflow.schedulers.view import FlowView, GroupView


class SincroniaScheduler(GroupOrderScheduler):
    """BSSI coflow order (weighted), strict priority between coflows, fair sharing inside one."""

    name = "sincronia"
    enforces = True

    def order(self, view: FlowView, groups: GroupView) -> list[int]:
        """BSSI over the remaining bytes (``kernels.bssi_order``; each link's time is bits / capacity)."""
        table = view.table
        order = kernels.bssi_order(view.active, kernels.int_array(groups.group_ptr), table.remaining,
                                   table.path_ptr, table.path_links, table.capacity,
                                   kernels.float_array(groups.weight))
        return kernels.to_list(order, len(order))
