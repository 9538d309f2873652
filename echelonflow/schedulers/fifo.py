"""FIFO at the coflow level served by strict priority: groups in the order they arrived, each taking what
the groups before it left, max-min fair inside (``fifo-priority``).

This is how a FIFO order is deployed on switch priority queues over TCP, the way ``sincronia`` and
``aalo`` serve their orders (``echelonflow.schedulers.priority``).  It is not CoflowSim's FIFO baseline,
which hands the arrival order to Varys's MADD and back-fill: that is ``fifo``
(``echelonflow.schedulers.varys``; docs/baselines.md compares the two on FB2010).

A group "arrives" when its first flow starts (``GroupView.start_s``); ties go to the smaller group id.
No sizes are needed, so the policy is non-clairvoyant, and weights do not apply (arrival order is the
whole policy).
"""

from __future__ import annotations

from echelonflow.schedulers.priority import GroupOrderScheduler
from echelonflow.schedulers.view import FlowView, GroupView


class FifoPriorityScheduler(GroupOrderScheduler):
    """Coflows in arrival order, strict priority between them."""

    name = "fifo-priority"
    blind_to_bytes = True  # max-min filling per class, classes by first start
    enforces = True
    clairvoyant = False

    def order(self, view: FlowView, groups: GroupView) -> list[int]:
        """Groups by first start; ties by group id (groups come in group-id order)."""
        start_s = groups.start_s
        return sorted(range(len(start_s)), key=lambda g: (start_s[g], g))
