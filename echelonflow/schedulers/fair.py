"""Per-flow max-min fairness: the stand-in for TCP sharing (the paper's Fig. 2a baseline).

Progressive filling (Bertsekas & Gallager, *Data Networks*, section 6.5.2): raise every unfrozen flow's
rate together until some directed link is full; freeze the flows crossing it at that level; repeat.
The next link to fill is the one with the smallest fair share (remaining capacity / unfrozen flows),
found by a lazy min-heap of shares where the links are many for the flows (a link's share can only grow
when a flow crossing it freezes elsewhere at a lower level, so stale heap entries are simply skipped:
O(sum of path lengths * log links) per decision), and by a scan of the links where they are few (a big
switch, a k=8 fat-tree with tens of flows: ``kernels.SCAN_FACTOR``, measured in docs/performance.md).
Both pick the same link at every step, so the rates are the same.  The loops are in
``kernels.fair_decide`` (compiled by numba where installed).

``enforces = False``: the controller pushes nothing for this policy, so it stays a true baseline.
"""

from __future__ import annotations

from typing import Any

from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import Decision, Snapshot
from echelonflow.schedulers.columns import ColumnarScheduler, FlowTable


class FairScheduler(ColumnarScheduler):
    """Max-min fair rates over directed links; every flow has rank 0 (one shared class)."""

    name = "fair"
    enforces = False

    def decide(self, snapshot: Snapshot) -> Decision:
        # Flow-id order: the result must not depend on the order the caller listed the flows in.
        table, ids = self.table_of(snapshot)
        rate = kernels.floats(len(ids))
        self.decide_table(table, kernels.int_array(range(len(ids))), snapshot.now_s, rate, None)
        return Decision(rate_bps=dict(zip(ids, kernels.to_list(rate, len(ids)))), rank=dict.fromkeys(ids, 0))

    def table_decision(self, ids: list[str], rates: list[float], ranked: list[str]) -> Decision:
        return Decision(rate_bps=dict(zip(ids, rates)), rank=dict.fromkeys(ids, 0))

    def flow_order(self, table: FlowTable) -> list[int]:
        """Flow numbers in flow-id order (links are numbered, and ties broken, by first use in it)."""
        if kernels.HAVE_NUMBA:
            return kernels.np.argsort(table.idrank, kind="stable").tolist()
        return sorted(range(len(table.idrank)), key=table.idrank.__getitem__)

    def decide_table(self, table: FlowTable, active: Any, now_s: float, rate: Any, order: Any) -> int:
        """Rates of the ``active`` flows of ``table`` into ``rate``; ranks none (every flow shares rank
        0, ``order`` unused), so returns 0."""
        kernels.fair_decide(active, table.remaining, table.path_ptr, table.path_links, table.capacity, rate)
        return 0
