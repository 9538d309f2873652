"""Aalo: non-clairvoyant coflow scheduling with Discretized Coflow-Aware Least-Attained Service (D-CLAS).

Reference: Chowdhury, Stoica, "Efficient Coflow Scheduling Without Prior Knowledge", SIGCOMM 2015.
No size is used: a coflow's priority comes from how many bytes it has already sent (all its flows,
finished ones included).  Queues Q_0 .. Q_{K-1}: a coflow is in Q_0 until it has sent ``first_bytes``,
then each queue's upper threshold is ``factor`` times the previous one (the paper's K = 10, E = 10,
Q_0 = 10 MB).  Lower queues go strictly first (CoflowSim's reading of D-CLAS), FIFO by coflow arrival
inside a queue, fair sharing inside a coflow (``echelonflow.schedulers.priority``).

Units.  The paper states its thresholds for 1 Gbit/s ports; we keep their *time* meaning, so the first
threshold is 10 MiB scaled by (slowest link of the snapshot / 2^30 bit/s): 10 MiB on the Coflow-Benchmark's
1 Gbit/s ports, about 98 KB on a 10 Mbit/s emulated fabric.  A weight w divides the attained bytes
(weighted least attained service: a heavier job stays longer in a high queue).

Queue changes happen between arrivals and departures, so the decision says when the first group will
cross its threshold (``Decision.valid_until_s``) and the simulator asks again then.
"""

from __future__ import annotations

import math

from echelonflow.schedulers.base import Decision, Snapshot
from echelonflow.schedulers.priority import GroupOrderScheduler, GroupTable

#: The paper's constants at its 1 Gbit/s ports: Q_0's threshold, the growth factor, the number of queues.
FIRST_BYTES_AT_1G = 10 * 2**20
GBIT_BPS = float(2**30)
FACTOR = 10.0
QUEUES = 10
#: Attained bytes this close (relative) below a threshold count as across it: the simulator wakes up at
#: the computed crossing time, and rounding must not leave the group a hair short of it.
CROSSED_RTOL = 1e-9


class AaloScheduler(GroupOrderScheduler):
    """D-CLAS: queue by attained service, FIFO inside a queue, strict priority between queues."""

    name = "aalo"
    enforces = True
    clairvoyant = False

    def __init__(self, first_bytes_at_1g: float = FIRST_BYTES_AT_1G, factor: float = FACTOR,
                 queues: int = QUEUES) -> None:
        self.first_bytes_at_1g = float(first_bytes_at_1g)
        self.factor = float(factor)
        self.queues = int(queues)

    def thresholds(self, snapshot: Snapshot) -> list[float]:
        """Upper attained-bytes threshold of queues 0 .. K-2 (the last queue has none)."""
        capacity = snapshot.capacity_bps
        slowest = min((capacity[link] for f in snapshot.flows for link in f.path), default=GBIT_BPS)
        first = self.first_bytes_at_1g * slowest / GBIT_BPS
        return [first * self.factor**q for q in range(self.queues - 1)]

    def queue_of(self, attained_bytes: float, thresholds: list[float]) -> int:
        for q, upper in enumerate(thresholds):
            if attained_bytes < upper * (1.0 - CROSSED_RTOL):
                return q
        return len(thresholds)

    def queue_per_group(self, table: GroupTable, thresholds: list[float]) -> list[int]:
        """Each group's queue, by its head flow's view of the group's attained bytes per weight."""
        heads = [table.flows[start] for start in table.group_ptr[:-1]]
        return [self.queue_of(head.group_sent_bytes / head.weight, thresholds) for head in heads]

    def group_order(self, table: GroupTable) -> list[int]:
        queue = self.queue_per_group(table, self.thresholds(table.snapshot))
        start_s = [min(f.group_start_s for f in table.members(g)) for g in range(len(table.gids))]
        return sorted(range(len(table.gids)), key=lambda g: (queue[g], start_s[g], table.gids[g]))

    def finish(self, table: GroupTable, decision: Decision) -> Decision:
        """The decision says when the first group will cross its queue's threshold."""
        thresholds = self.thresholds(table.snapshot)
        queue = self.queue_per_group(table, thresholds)
        soonest = math.inf
        for g in range(len(table.gids)):
            q = queue[g]
            if q >= len(thresholds):
                continue
            flows = table.members(g)
            rate_bps = sum(decision.rate_bps[f.flow_id] for f in flows)
            if rate_bps <= 0.0:
                continue
            head = flows[0]
            to_go_bytes = thresholds[q] * head.weight - head.group_sent_bytes
            soonest = min(soonest, table.snapshot.now_s + max(0.0, 8.0 * to_go_bytes / rate_bps))
        decision.valid_until_s = soonest
        return decision
