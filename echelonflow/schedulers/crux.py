"""Crux: strict priority across jobs by GPU intensity, compressed to the switches' priority levels.

Reference: Cao, Guan, Qian, Gao, Xiao, Dong, Fu, Cai, Zhai, "Crux: GPU-efficient communication
scheduling for deep learning training", SIGCOMM 2024 (docs/baselines.md, "`crux`", states what is kept
and what is simplified).  Crux maximises the GPUs' busy time; its Theorem 1 reduces that to serving the
jobs of highest *GPU intensity* first, I_j = W_j / t_j: the job's compute per iteration over the time its
traffic takes on its most loaded link, t_j = max_e M_{j,e} / B_e (its Eq. 2).  Then:

1. **Priority assignment** (its §4.2): jobs ordered by I_j, highest first (its correction factor k_j,
   which needs per-pair what-if comparisons against a reference job, is 1 here: P_j = I_j);
2. **Priority compression** (§4.3): K = 8 levels.  With at most K jobs each has a level of its own;
   with more, the contention DAG (an edge from each job to every lower-priority job it shares a link
   with, weighted by the higher job's intensity: what that job loses if the two share a level) is cut
   into K consecutive blocks of a topological order so that the weight of the edges cut is largest
   (Algorithm 1: dynamic programming over 10 random topological orders, the best cut kept; the random
   orders are seeded, so a decision is deterministic);
3. **Serving**: levels in strict priority, every flow of a level sharing max-min fairly with the level's
   others (inside a job and across the jobs of a level), each level on what the levels above it left
   (``priority.serve_classes``).

Crux's path selection (§4.1) is not done: paths here are pinned per flow, the same in the simulator
and on the fabric.  W_j and t_j come from the flow view's source (``FlowView.job_intensity``): W_j is
the job's declared compute (its compute tasks' seconds; the controller's ``compute_s`` of the job) and
t_j its declared bytes over its pinned paths, both summed over the whole job, which for a job of equal
iterations is the same ratio as per iteration.  A source that knows neither (a bare snapshot) gives
every job intensity 0: jobs then go in job-id order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from echelonflow.model import Job
from echelonflow.schedulers import kernels
from echelonflow.schedulers.base import Scheduler
from echelonflow.schedulers.priority import serve_classes
from echelonflow.schedulers.view import Allocation, FlowView, GroupView

#: Priority levels (the switches' queues; Crux's simulator assumes 8).
LEVELS = 8
#: Random topological orders Algorithm 1 tries (the paper's m = 10).
TOPOLOGICAL_ORDERS = 10


def job_compute_s(job: Job) -> float:
    """W_j: the seconds of compute a job declares (its compute tasks' durations, over all its hosts)."""
    return sum(task.duration_s for task in job.computes)


def gpu_intensity(compute_s: float, bottleneck_s: float) -> float:
    """I_j = W_j / t_j; a job with no traffic never contends (infinite), one without compute is 0."""
    if compute_s <= 0.0:
        return 0.0
    return math.inf if bottleneck_s <= 0.0 else compute_s / bottleneck_s


def bottleneck_s(flows: Iterable[tuple[Iterable[Hashable], float]], capacity_bps: Any) -> float:
    """t_j: the seconds a job's traffic takes on its most loaded link, ``flows`` as (the links of a
    flow's path, its wire bytes), ``capacity_bps`` indexed by link."""
    bits: dict[Hashable, float] = {}
    for links, wire_bytes in flows:
        for link in links:
            bits[link] = bits.get(link, 0.0) + 8.0 * wire_bytes
    return max((load / float(capacity_bps[link]) for link, load in bits.items()), default=0.0)


def contention_edges(order: Sequence[str], links: Mapping[str, set]) -> dict[tuple[int, int], None]:
    """The contention DAG's edges (positions in ``order``, the priority order): a before b sharing a link."""
    edges: dict[tuple[int, int], None] = {}
    for a in range(len(order)):
        for b in range(a + 1, len(order)):
            if not links[order[a]].isdisjoint(links[order[b]]):
                edges[(a, b)] = None
    return edges


def compress(intensity: Sequence[float], edges: Iterable[tuple[int, int]], levels: int = LEVELS,
             tries: int = TOPOLOGICAL_ORDERS, seed: int = 0) -> list[int]:
    """Each job's level (0 highest), jobs given in priority order, ``edges`` (a, b) from a higher job a
    to a lower job b it contends with, weighted by ``intensity[a]`` (Crux's Algorithm 1)."""
    n = len(intensity)
    if n <= levels:
        return list(range(n))
    out_edges: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for a, b in edges:
        out_edges[a].append(b)
        indegree[b] += 1
    weight = [0.0 if math.isinf(w) else w for w in intensity]  # a job without traffic contends with none
    if not any(weight[a] > 0.0 for a in range(n) if out_edges[a]):
        # nothing to lose anywhere (no job with compute contends): every cut is worth 0, and the dynamic
        # programme's first one is the priority order with a level for each of the first K - 1 jobs
        return [min(p, levels - 1) for p in range(n)]
    rng = random.Random(seed)
    best_value, best_level = -1.0, list(range(n))
    for attempt in range(tries):
        order = _topological_order(out_edges, indegree, rng if attempt else None)
        value, level = _max_k_cut(order, out_edges, weight, levels)
        if value > best_value:
            best_value, best_level = value, level
    return best_level


def _topological_order(out_edges: list[list[int]], indegree: Sequence[int],
                       rng: random.Random | None) -> list[int]:
    """A topological order by breadth-first search; ready jobs taken in priority order (``rng`` None,
    the first try) or at random."""
    left = list(indegree)
    ready = [v for v in range(len(left)) if left[v] == 0]
    order = []
    while ready:
        pick = 0 if rng is None else rng.randrange(len(ready))
        v = ready.pop(pick)
        order.append(v)
        for w in out_edges[v]:
            left[w] -= 1
            if left[w] == 0:
                ready.append(w)
        if rng is None:
            ready.sort()
    return order


def _max_k_cut(order: list[int], out_edges: list[list[int]], weight: Sequence[float],
               levels: int) -> tuple[float, list[int]]:
    """The best cut of ``order`` into ``levels`` consecutive blocks: the summed weight of edges between
    blocks, and each job's block.  C(j, i): weight of edges from order[:j] into order[j:i]."""
    n = len(order)
    position = {v: p for p, v in enumerate(order)}
    into = [[0.0] * (n + 1) for _ in range(n + 1)]  # into[j][i]: edge weight from order[:j] to order[i-1]
    for v in range(n):
        for w in out_edges[v]:
            into[position[v] + 1][position[w] + 1] += weight[v]
    for j in range(1, n + 1):
        for i in range(n + 1):
            into[j][i] += into[j - 1][i]
    cut = [[0.0] * (n + 1) for _ in range(n + 1)]  # cut[j][i] = C(j, i), j < i
    for j in range(n + 1):
        running = 0.0
        for i in range(j + 1, n + 1):
            running += into[j][i]
            cut[j][i] = running
    minus = -math.inf
    best = [[minus] * (levels + 1) for _ in range(n + 1)]
    back = [[0] * (levels + 1) for _ in range(n + 1)]
    best[0][0] = 0.0
    for k in range(1, levels + 1):
        for i in range(1, n + 1):
            for j in range(k - 1, i):
                if best[j][k - 1] > minus and best[j][k - 1] + cut[j][i] > best[i][k]:
                    best[i][k], back[i][k] = best[j][k - 1] + cut[j][i], j
    k = min(levels, n)
    level = [0] * n
    i = n
    while k > 0:
        j = back[i][k]
        for p in range(j, i):
            level[order[p]] = k - 1
        i, k = j, k - 1
    return best[n][min(levels, n)], level


class CruxScheduler(Scheduler):
    """Jobs by GPU intensity, compressed to 8 levels, strict priority between levels, max-min inside."""

    name = "crux"
    enforces = True
    active_order = "group"
    #: The last compression, by its input (jobs in priority order, their intensities, the contention
    #: edges): between two arrivals or departures of a job the same jobs contend the same way.
    _last: tuple[Any, list[int]] | None = None

    def decide(self, view: FlowView) -> Allocation:
        groups = view.groups()
        return serve_classes(view, groups, self.classes(view, groups))

    def classes(self, view: FlowView, groups: GroupView) -> list[list[int]]:
        """The groups by level, highest first; inside a level by job priority, then group id."""
        ptr = groups.group_ptr
        active = view.active
        heads = [int(active[ptr[g]]) for g in range(len(ptr) - 1)]
        job_of = [fid.split("/", 1)[0] for fid in view.flow_ids(heads)]  # job ids hold no '/'

        known = view.job_intensity(groups)
        by_job = {job: 0.0 if known is None else float(known[g]) for g, job in enumerate(job_of)}
        jobs = sorted(by_job, key=lambda j: (-by_job[j], j))
        rank = {job: r for r, job in enumerate(jobs)}
        intensity = [by_job[j] for j in jobs]
        if len(jobs) <= LEVELS or not any(i > 0.0 for i in intensity):
            level = compress(intensity, ())
        else:
            edges = contention_edges(jobs, _links_by_job(view, ptr, job_of))
            key = (tuple(jobs), tuple(intensity), tuple(edges))
            if self._last is None or self._last[0] != key:
                self._last = (key, compress(intensity, edges))
            level = self._last[1]
        classes: list[list[int]] = [[] for _ in range(max(level, default=-1) + 1)]
        for g in sorted(range(len(job_of)), key=lambda g: (rank[job_of[g]], g)):
            classes[level[rank[job_of[g]]]].append(g)
        return [members for members in classes if members]


def _links_by_job(view: FlowView, group_ptr: Sequence[int], job_of: Sequence[str]) -> dict[str, set]:
    """The links each job's active flows with bytes left cross (link numbers of the view's table)."""
    table = view.table
    active = kernels.to_list(view.active, len(view.active))
    path_ptr = kernels.to_list(table.path_ptr, len(table.path_ptr))
    path_links = table.path_links
    links: dict[str, set] = {job: set() for job in job_of}
    for g, job in enumerate(job_of):
        mine = links[job]
        for f in active[group_ptr[g]:group_ptr[g + 1]]:
            if table.remaining[f] > 0.0:
                mine.update(int(li) for li in path_links[path_ptr[f]:path_ptr[f + 1]])
    return links
