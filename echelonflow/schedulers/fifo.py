"""FIFO at the coflow level: groups served strictly in the order they arrived (CoflowSim's FIFO baseline).

A group "arrives" when its first flow starts (``GroupView.start_s``); ties go to the smaller group id.
No sizes are needed, so the policy is non-clairvoyant, and weights do not apply (arrival order is the
whole policy).  Rates: strict priority by that order, fair sharing inside a group
(``echelonflow.schedulers.priority``).  Reference: Chowdhury, Zhong, Stoica, "Efficient Coflow
Scheduling with Varys", SIGCOMM 2014 (the FIFO baseline of its evaluation).
"""

from __future__ import annotations

from echelonflow.schedulers.priority import GroupOrderScheduler
from echelonflow.schedulers.view import FlowView, GroupView


class FifoScheduler(GroupOrderScheduler):
    """Coflows in arrival order, strict priority between them."""

    name = "fifo"
    enforces = True
    clairvoyant = False

    def order(self, view: FlowView, groups: GroupView) -> list[int]:
        """Groups by first start; ties by group id (groups come in group-id order)."""
        start_s = groups.start_s
        return sorted(range(len(start_s)), key=lambda g: (start_s[g], g))
