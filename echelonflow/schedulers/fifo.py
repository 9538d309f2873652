"""FIFO at the coflow level: groups served strictly in the order they arrived (CoflowSim's FIFO baseline).

A group "arrives" when its first flow starts (``group_start_s``); ties go to the smaller group id.  No
sizes are needed, so the policy is non-clairvoyant, and weights do not apply (arrival order is the whole
policy).  Rates: strict priority by that order, fair sharing inside a group
(``echelonflow.schedulers.priority``).  Reference: Chowdhury, Zhong, Stoica, "Efficient Coflow
Scheduling with Varys", SIGCOMM 2014 (the FIFO baseline of its evaluation).
"""

from __future__ import annotations

from echelonflow.schedulers.base import Decision, Scheduler, Snapshot
from echelonflow.schedulers.priority import groups_of, serve_in_order


class FifoScheduler(Scheduler):
    """Coflows in arrival order, strict priority between them."""

    name = "fifo"
    enforces = True
    clairvoyant = False

    def decide(self, snapshot: Snapshot) -> Decision:
        groups = groups_of(snapshot)
        order = sorted(groups, key=lambda g: (min(f.group_start_s for f in groups[g]), g))
        return serve_in_order(snapshot, groups, order)
