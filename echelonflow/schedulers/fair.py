"""Per-flow max-min fairness: the stand-in for TCP sharing (the paper's Fig. 2a baseline).

Progressive filling (Bertsekas & Gallager, *Data Networks*, section 6.5.2): raise every unfrozen flow's
rate together until some directed link is full; freeze the flows crossing it at that level; repeat.
Implemented with a lazy min-heap of per-link fair shares (remaining capacity / unfrozen flows).  A
link's share can only grow when a flow crossing it freezes elsewhere at a lower level, so stale heap
entries are simply skipped: O(sum of path lengths * log links) per decision.

``enforces = False``: the controller pushes nothing for this policy, so it stays a true baseline.
"""

from __future__ import annotations

import heapq

from echelonflow.schedulers.base import EPS_BYTES, Decision, Scheduler, Snapshot


class FairScheduler(Scheduler):
    """Max-min fair rates over directed links; every flow has rank 0 (one shared class)."""

    name = "fair"
    enforces = False

    def decide(self, snapshot: Snapshot) -> Decision:
        capacity = snapshot.capacity_bps
        rate: dict[str, float] = {}
        rank: dict[str, int] = {}
        link_index: dict[object, int] = {}
        residual: list[float] = []
        members: list[list[int]] = []  # link -> indices of unfrozen flows crossing it
        paths: list[list[int]] = []
        ids: list[str] = []
        # Sorted by id: the result must not depend on the order the caller listed the flows in.
        for flow in sorted(snapshot.flows, key=lambda f: f.flow_id):
            rank[flow.flow_id] = 0
            rate[flow.flow_id] = 0.0
            if flow.remaining_bytes <= EPS_BYTES or not flow.path:
                continue
            idx = len(ids)
            ids.append(flow.flow_id)
            path = []
            for link in flow.path:
                li = link_index.get(link)
                if li is None:
                    li = link_index[link] = len(residual)
                    residual.append(float(capacity[link]))
                    members.append([])
                members[li].append(idx)
                path.append(li)
            paths.append(path)

        count = [len(m) for m in members]
        heap = [(residual[li] / count[li], li) for li in range(len(residual))]
        heapq.heapify(heap)
        frozen = [False] * len(ids)
        while heap:
            share, li = heapq.heappop(heap)
            if count[li] == 0:
                continue
            current = residual[li] / count[li]
            if current != share:  # stale entry; the fresh one is in the heap already
                continue
            level = max(share, 0.0)
            for idx in members[li]:
                if frozen[idx]:
                    continue
                frozen[idx] = True
                rate[ids[idx]] = level
                for other in paths[idx]:
                    residual[other] -= level
                    count[other] -= 1
                    if other != li and count[other] > 0:
                        heapq.heappush(heap, (residual[other] / count[other], other))
            count[li] = 0
        return Decision(rate_bps=rate, rank=rank)
