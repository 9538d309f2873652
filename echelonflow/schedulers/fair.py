"""Per-flow max-min fairness: the stand-in for TCP sharing (the paper's Fig. 2a baseline).

Progressive filling (Bertsekas & Gallager, *Data Networks*, section 6.5.2): raise every unfrozen flow's
rate together until some directed link is full; freeze the flows crossing it at that level; repeat.
The next link to fill is the one with the smallest fair share (remaining capacity / unfrozen flows),
found by a min-heap of the links keyed by their current share where the links are many for the flows
(a freeze re-keys each other link of the flows it froze once: O(sum of path lengths * log links) per
decision, and the heap never holds more than the links), and by a scan of the links where they are few (a big
switch, a k=8 fat-tree with tens of flows: ``kernels.SCAN_FACTOR``, measured in docs/performance.md).
Both pick the same link at every step, so the rates are the same.  The loops are in
``kernels.fair_decide`` (compiled by numba where installed), on the view's flows in flow-id order
(links are numbered, and ties broken, by first use in it).

``enforces = False``: the controller pushes nothing for this policy, so it stays a true baseline.
"""

from __future__ import annotations

from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import Scheduler
from echelonflow.schedulers.view import Allocation, FlowView


class FairScheduler(Scheduler):
    """Max-min fair rates over directed links; no ranking (every flow shares one class)."""

    name = "fair"
    blind_to_bytes = True  # max-min filling
    enforces = False
    active_order = "id"

    def decide(self, view: FlowView) -> Allocation:
        table = view.table
        kernels.fair_decide(view.active, table.remaining, table.path_ptr, table.path_links, table.capacity,
                            view.rate, bool(view.clean))
        return Allocation(view.rate, view.ranking(0), 0, shared_class=True)
