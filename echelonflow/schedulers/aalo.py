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

from echelonflow.schedulers.priority import GroupOrderScheduler, group_rates
from echelonflow.schedulers.view import FlowView, GroupView

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
    needs_seen = True

    def __init__(self, first_bytes_at_1g: float = FIRST_BYTES_AT_1G, factor: float = FACTOR,
                 queues: int = QUEUES) -> None:
        self.first_bytes_at_1g = float(first_bytes_at_1g)
        self.factor = float(factor)
        self.queues = int(queues)

    def thresholds(self, slowest_bps: float) -> list[float]:
        """Upper attained-bytes threshold of queues 0 .. K-2 (the last queue has none), for a network
        whose slowest link on any active flow's path runs at ``slowest_bps`` (none: 2^30 bit/s)."""
        slowest = GBIT_BPS if math.isinf(slowest_bps) else slowest_bps
        first = self.first_bytes_at_1g * slowest / GBIT_BPS
        return [first * self.factor**q for q in range(self.queues - 1)]

    def queue_of(self, attained_bytes: float, thresholds: list[float]) -> int:
        for q, upper in enumerate(thresholds):
            if attained_bytes < upper * (1.0 - CROSSED_RTOL):
                return q
        return len(thresholds)

    def queue_per_group(self, groups: GroupView, thresholds: list[float]) -> list[int]:
        """Each group's queue, by its attained bytes per weight."""
        assert groups.attained_bytes is not None
        return [self.queue_of(sent / weight, thresholds)
                for sent, weight in zip(groups.attained_bytes, groups.weight)]

    def order(self, view: FlowView, groups: GroupView) -> list[int]:
        """Lower queue first, then the earlier-started group; groups come in id order, so the index
        breaks the remaining ties by group id."""
        queue = self.queue_per_group(groups, self.thresholds(groups.slowest_bps))
        return sorted(range(len(queue)), key=lambda g: (queue[g], groups.start_s[g], g))

    def valid_until(self, view: FlowView, groups: GroupView) -> float:
        """When the first group will cross its queue's threshold at the served rates."""
        assert groups.attained_bytes is not None
        thresholds = self.thresholds(groups.slowest_bps)
        queue = self.queue_per_group(groups, thresholds)
        rates = group_rates(view, groups)
        soonest = math.inf
        for g, q in enumerate(queue):
            if q >= len(thresholds) or rates[g] <= 0.0:
                continue
            to_go_bytes = thresholds[q] * groups.weight[g] - groups.attained_bytes[g]
            soonest = min(soonest, view.now_s + max(0.0, 8.0 * to_go_bytes / rates[g]))
        return soonest
