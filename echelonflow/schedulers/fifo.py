"""FIFO at the coflow level: groups served strictly in the order they arrived (CoflowSim's FIFO baseline).

A group "arrives" when its first flow starts (``group_start_s``); ties go to the smaller group id.  No
sizes are needed, so the policy is non-clairvoyant, and weights do not apply (arrival order is the whole
policy).  Rates: strict priority by that order, fair sharing inside a group
(``echelonflow.schedulers.priority``).  Reference: Chowdhury, Zhong, Stoica, "Efficient Coflow
Scheduling with Varys", SIGCOMM 2014 (the FIFO baseline of its evaluation).
"""

from __future__ import annotations

from echelonflow.schedulers.priority import GroupOrderScheduler, GroupTable


class FifoScheduler(GroupOrderScheduler):
    """Coflows in arrival order, strict priority between them."""

    name = "fifo"
    enforces = True
    clairvoyant = False

    def group_order(self, table: GroupTable) -> list[int]:
        start_s = [min(f.group_start_s for f in table.members(g)) for g in range(len(table.gids))]
        return sorted(range(len(table.gids)), key=lambda g: (start_s[g], table.gids[g]))
