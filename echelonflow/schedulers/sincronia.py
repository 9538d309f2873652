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

import heapq

from echelonflow.schedulers.base import EPS_BYTES, Decision, Scheduler, Snapshot
from echelonflow.schedulers.priority import groups_of, serve_in_order


class SincroniaScheduler(Scheduler):
    """BSSI coflow order (weighted), strict priority between coflows, fair sharing inside one."""

    name = "sincronia"
    enforces = True

    def decide(self, snapshot: Snapshot) -> Decision:
        groups = groups_of(snapshot)
        gids = sorted(groups)
        link_index: dict[object, int] = {}
        demand: list[dict[int, float]] = []  # group index -> link index -> seconds of that link
        for gid in gids:
            times: dict[int, float] = {}
            for flow in groups[gid]:
                if flow.remaining_bytes <= EPS_BYTES:
                    continue
                for link in flow.path:
                    li = link_index.setdefault(link, len(link_index))
                    seconds = 8.0 * flow.remaining_bytes / float(snapshot.capacity_bps[link])
                    times[li] = times.get(li, 0.0) + seconds
            demand.append(times)
        weights = [groups[gid][0].weight for gid in gids]
        order = [gids[i] for i in bssi_order(demand, weights, len(link_index))]
        return serve_in_order(snapshot, groups, order)


def bssi_order(demand: list[dict[int, float]], weights: list[float], links: int) -> list[int]:
    """Indices of the groups in BSSI order (first = most urgent); see the module docstring."""
    load = [0.0] * links
    users: list[list[int]] = [[] for _ in range(links)]
    for g, times in enumerate(demand):
        for li, t in times.items():
            load[li] += t
            users[li].append(g)
    weight = [float(w) for w in weights]
    unordered = [bool(times) for times in demand]
    idle = [g for g, times in enumerate(demand) if not times]  # nothing left: first, in id order
    heap = [(-load[li], li) for li in range(links)]
    heapq.heapify(heap)
    backwards: list[int] = []
    left = sum(unordered)
    while left:
        neg, b = heapq.heappop(heap)
        if -neg != load[b]:
            continue  # stale: a fresher entry for this link is in the heap
        candidates = [g for g in users[b] if unordered[g]]
        if not candidates:
            continue  # every user of b is ordered already; the link is done
        last = min(candidates, key=lambda g: (weight[g] / demand[g][b], -g))
        ratio = weight[last] / demand[last][b]
        for g in candidates:
            if g != last:
                weight[g] -= ratio * demand[g][b]
        unordered[last] = False
        left -= 1
        backwards.append(last)
        for li, t in demand[last].items():
            load[li] -= t
            heapq.heappush(heap, (-load[li], li))
        heapq.heappush(heap, (-load[b], b))
    return idle + backwards[::-1]
