"""EchelonFlow scheduling (Pan et al., HotNets'22) and Varys coflow scheduling (Chowdhury et al., SIGCOMM'14).

One algorithm with one knob (docs/scheduler-design.md, with the paper's Fig. 2 worked through): a flow's
ideal-finish offset ``o_j = d_j - r`` within its group.  Coflow scheduling is the special case
``o_j = 0`` (the paper's Eq. 5), so :class:`CoflowScheduler` is this class with offsets ignored.

Per decision (rates in bits/s; "bytes" below are taken as bits, ``8 * remaining_bytes``):

1. each group's bottleneck tardiness ``t*_H = max_l max_j (C_j / c_l - (d_j - now))`` where ``C_j``
   is the group's cumulative remaining volume on link ``l`` in EDF order (Jackson's rule);
2. groups are ordered smallest-effective-bottleneck-first on their remaining volume,
   ``max_l C_l / c_l`` (Varys's SEBF; ``order_by="volume"``, the default), by the offset-adjusted
   residual bottleneck ``max_l max_j (C_j / c_l - o_j)`` (``"bottleneck"``), or by ``t*_H`` itself
   (``"tardiness"``), each divided by the job's weight (the weighted sum of Eq. 4: Smith's rule orders
   by time per weight).  Measured on the bundled scenarios (README, "Group ordering"), volume wins: the
   objective is a sum over groups, so as in Smith's rule the group that occupies the bottleneck
   for the least time goes first; subtracting offsets makes a staggered group look shorter than
   the bandwidth it really holds and lets it delay everyone else;
3. group by group, flows in EDF order get just-in-time rates ``b_j / (d_j + t*_H - now)`` capped by
   the residual capacity of their path, ``t*_H`` being recomputed against what earlier groups left
   (MADD for coflows);
4. leftover capacity is back-filled in the same global order (work conservation).

``rank`` is the flow's index in that global order (0 = most urgent); the controller compresses it
into the switch's few priority queues.  Everything is plain lists indexed by integers so one
decision over 10,000 flows on a k=16 fat-tree stays well under 200 ms.
"""

from __future__ import annotations

from echelonflow.schedulers.base import EPS_BYTES, Decision, Scheduler, Snapshot

#: Residual capacity (bits/s) at or below this, relative to the link's capacity, counts as full.
EPS_RELATIVE = 1e-12

ORDERINGS = ("bottleneck", "tardiness", "volume")


class EchelonScheduler(Scheduler):
    """EchelonFlow-aware Varys: staggered just-in-time rates aimed at equal tardiness per group."""

    name = "echelon"
    enforces = True
    #: When False every offset is treated as 0 (ideal finish = reference time): Varys.
    use_offsets = True

    def __init__(self, order_by: str = "volume") -> None:
        if order_by not in ORDERINGS:
            raise ValueError(f"order_by must be one of {', '.join(ORDERINGS)}, got {order_by!r}")
        self.order_by = order_by

    def decide(self, snapshot: Snapshot) -> Decision:
        now = snapshot.now_s
        capacity = snapshot.capacity_bps
        rate: dict[str, float] = {}
        rank: dict[str, int] = {}

        # ---- index links and flows; group flows by EchelonFlow
        link_index: dict[object, int] = {}
        residual: list[float] = []
        full: list[float] = []
        groups: dict[str, list[int]] = {}
        weight: dict[str, float] = {}
        ids: list[str] = []
        bits: list[float] = []
        offset: list[float] = []
        due: list[float] = []
        paths: list[list[int]] = []
        finished: list[str] = []
        for flow in sorted(snapshot.flows, key=lambda f: f.flow_id):
            rate[flow.flow_id] = 0.0
            if flow.remaining_bytes <= EPS_BYTES or not flow.path:
                finished.append(flow.flow_id)
                continue
            idx = len(ids)
            ids.append(flow.flow_id)
            bits.append(8.0 * flow.remaining_bytes)
            o = flow.offset_s if self.use_offsets else 0.0
            offset.append(o)
            due.append(flow.reference_s + o)
            path = []
            for link in flow.path:
                li = link_index.get(link)
                if li is None:
                    li = link_index[link] = len(residual)
                    cap = float(capacity[link])
                    residual.append(cap)
                    full.append(cap)
                path.append(li)
            paths.append(path)
            groups.setdefault(flow.echelon_id, []).append(idx)
            weight[flow.echelon_id] = flow.weight

        # ---- EDF order inside each group (ties by flow id, already sorted), then order the groups
        ordered: list[tuple[float, str, list[int]]] = []
        no_slack = [0.0] * len(bits)  # "volume": C_l / c_l alone (one list, not one per group)
        for gid, members in groups.items():
            members.sort(key=lambda i: due[i])
            if self.order_by == "bottleneck":
                key = _bottleneck(members, bits, offset, 0.0, paths, full)
            elif self.order_by == "volume":
                key = _bottleneck(members, bits, no_slack, 0.0, paths, full)
            else:
                key = _bottleneck(members, bits, due, now, paths, full)
            ordered.append((_weighted(key, weight[gid]), gid, members))
        ordered.sort(key=lambda item: (item[0], item[1]))

        # ---- just-in-time rates, group by group, against the residual capacity
        global_order: list[int] = []
        for _key, _gid, members in ordered:
            global_order.extend(members)
            t_star = _bottleneck(members, bits, due, now, paths, residual)
            if t_star == float("inf"):
                continue  # some link of this group is full: it waits for back-fill
            for i in members:
                horizon = due[i] + t_star - now
                want = bits[i] / horizon if horizon > 0 else float("inf")
                path = paths[i]
                give = min(want, min(residual[li] for li in path))
                if give <= 0:
                    continue
                rate[ids[i]] = give
                _consume(path, give, residual, full)

        # ---- back-fill leftovers in the same global order
        for i in global_order:
            path = paths[i]
            spare = min(residual[li] for li in path)
            if spare <= 0:
                continue
            rate[ids[i]] += spare
            _consume(path, spare, residual, full)

        for position, i in enumerate(global_order):
            rank[ids[i]] = position
        for position, fid in enumerate(finished, start=len(global_order)):
            rank[fid] = position
        return Decision(rate_bps=rate, rank=rank)


def _bottleneck(
    members: list[int],
    bits: list[float],
    base: list[float],
    shift: float,
    paths: list[list[int]],
    cap: list[float],
) -> float:
    """max over links and EDF prefixes of ``C_j / c_l - (base_j - shift)``.

    With ``base = due, shift = now`` this is Step 1's ``t*_H``; with ``base = offsets, shift = 0`` it is
    Step 2's residual bottleneck.  ``members`` must be in EDF order so the running per-link sums are
    the prefix volumes.  A link with no capacity left gives infinity: the group must wait.
    """
    cumulative: dict[int, float] = {}
    worst = float("-inf")
    for i in members:
        slack = base[i] - shift
        b = bits[i]
        for li in paths[i]:
            capacity = cap[li]
            if capacity <= 0.0:
                return float("inf")
            c = cumulative.get(li, 0.0) + b
            cumulative[li] = c
            value = c / capacity - slack
            if value > worst:
                worst = value
    return worst


def _weighted(key: float, weight: float) -> float:
    """A group's ordering key under its job's weight: a heavier job looks shorter (Smith's rule,
    bottleneck / weight); a negative key (ahead of schedule) becomes more negative instead."""
    return key / weight if key >= 0 else key * weight


def _consume(path: list[int], amount_bps: float, residual: list[float], full: list[float]) -> None:
    """Take ``amount_bps`` from every link of ``path``; rounding dust below EPS_RELATIVE becomes exactly 0."""
    for li in path:
        left = residual[li] - amount_bps
        residual[li] = left if left > full[li] * EPS_RELATIVE else 0.0


class CoflowScheduler(EchelonScheduler):
    """Varys: SEBF ordering + MADD rates + back-fill; the echelon code with every offset 0."""

    name = "coflow"
    use_offsets = False
