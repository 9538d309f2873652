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
and on the fabric.  What Crux profiles comes from the flow view's source (``FlowView.job_profiles``,
built by :func:`job_profile`): W_j is the job's declared compute (its compute tasks' seconds; the
controller's ``compute_s`` of the job), t_j its declared bytes over their pinned paths, both summed over
the whole job (for a job of equal iterations the same ratio as per iteration), and the links those bytes
cross say which jobs contend.  So the levels change only when a job starts or stops having active
flows, as Crux re-decides at job arrivals and completions.  A source that knows no job (a bare
snapshot) gives every job intensity 0: jobs then go in job-id order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from echelonflow.model import Job
from echelonflow.schedulers.base import Scheduler
from echelonflow.schedulers.priority import KeptClasses, serve_classes
from echelonflow.schedulers.view import Allocation, FlowView, GroupView, JobProfile

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


def job_profile(job_id: str, compute_s: float, flows: Iterable[tuple[Iterable[Hashable], float]],
                capacity_bps: Any) -> JobProfile:
    """A job's intensity and links from its compute seconds and its traffic: ``flows`` as (the links of
    a flow's path, its wire bytes), ``capacity_bps`` indexed by link.  t_j is the seconds its bytes take
    on its most loaded link."""
    bits: dict[Hashable, float] = {}
    for links, wire_bytes in flows:
        for link in links:
            bits[link] = bits.get(link, 0.0) + 8.0 * wire_bytes
    bottleneck_s = max((load / float(capacity_bps[link]) for link, load in bits.items()), default=0.0)
    return JobProfile(job_id, gpu_intensity(compute_s, bottleneck_s), frozenset(bits))


def contention_edges(links: Sequence[frozenset]) -> list[tuple[int, int]]:
    """The contention DAG's edges, jobs by position in the priority order with the links each uses:
    (a, b) for a before b sharing a link."""
    return [(a, b) for a in range(len(links)) for b in range(a + 1, len(links))
            if not links[a].isdisjoint(links[b])]


def compress(intensity: Sequence[float], edges: Iterable[tuple[int, int]], levels: int = LEVELS,
             tries: int = TOPOLOGICAL_ORDERS, seed: int = 0) -> list[int]:
    """Each job's level (0 highest), jobs given in priority order, ``edges`` (a, b) from a higher job a
    to a lower job b it contends with, weighted by ``intensity[a]`` (Crux's Algorithm 1)."""
    n = len(intensity)
    if n <= levels:
        return list(range(n))
    out_edges: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    weight = np.zeros((n, n))
    for a, b in edges:
        out_edges[a].append(b)
        indegree[b] += 1
        weight[a, b] = 0.0 if math.isinf(intensity[a]) else intensity[a]  # no traffic: contends with none
    if not weight.any():
        # nothing to lose anywhere (no job with compute contends): every cut is worth 0, and the dynamic
        # programme's first one is the priority order with a level for each of the first K - 1 jobs
        return [min(p, levels - 1) for p in range(n)]
    rng = random.Random(seed)
    best_value, best_level = -1.0, list(range(n))
    for attempt in range(tries):
        order = _topological_order(out_edges, indegree, rng if attempt else None)
        value, level = _max_k_cut(order, weight, levels)
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


def _max_k_cut(order: list[int], weight: np.ndarray, levels: int) -> tuple[float, list[int]]:
    """The best cut of ``order`` into ``levels`` consecutive blocks: the summed weight of the edges
    between blocks, and each job's block.  ``weight[a, b]``: the edge a -> b's weight (0: none).  With
    C(j, i) the weight of edges from order[:j] into order[j:i], f(i, k) = max_j f(j, k - 1) + C(j, i)."""
    n = len(order)
    edges = weight[np.ix_(order, order)]  # by position in ``order``
    into = np.vstack([np.zeros(n), np.cumsum(edges, axis=0)])  # into[j, q]: from order[:j] to order[q]
    into[np.arange(n + 1)[:, None] > np.arange(n)[None, :]] = 0.0  # only q >= j: into the new block
    cut = np.hstack([np.zeros((n + 1, 1)), np.cumsum(into, axis=1)])  # cut[j, i] = C(j, i)
    cut[np.arange(n + 1)[:, None] >= np.arange(n + 1)[None, :]] = -np.inf  # a block is never empty
    best = np.full(n + 1, -np.inf)
    best[0] = 0.0
    back = np.zeros((levels + 1, n + 1), dtype=np.int64)
    for k in range(1, levels + 1):
        candidates = best[:, None] + cut
        back[k] = np.argmax(candidates, axis=0)  # the first best j, as the paper's scan finds it
        best = candidates.max(axis=0)
    level = [0] * n
    i = n
    for k in range(levels, 0, -1):
        j = int(back[k, i])
        for p in range(j, i):
            level[order[p]] = k - 1
        i = j
    return float(best[n]), level


class CruxScheduler(Scheduler):
    """Jobs by GPU intensity, compressed to 8 levels, strict priority between levels, max-min inside."""

    name = "crux"
    enforces = True
    active_order = "group"
    #: The last compression, by its input (the jobs with active flows, in priority order, and their
    #: intensities): the jobs' links are fixed, so only an arrival or a departure changes it.
    _last: tuple[Any, list[int]] | None = None
    #: what the last decision served (``priority.KeptClasses``), made on the first decision
    _kept: KeptClasses | None = None

    def decide(self, view: FlowView) -> Allocation:
        groups = view.groups()
        if self._kept is None:
            self._kept = KeptClasses()
        return serve_classes(view, groups, self.classes(view, groups), self._kept)

    def classes(self, view: FlowView, groups: GroupView) -> list[list[int]]:
        """The groups by level, highest first; inside a level by job priority, then group id."""
        ptr = groups.group_ptr
        active = view.active
        heads = [int(active[ptr[g]]) for g in range(len(ptr) - 1)]
        job_of = [fid.split("/", 1)[0] for fid in view.flow_ids(heads)]  # job ids hold no '/'
        known = view.job_profiles(groups)
        profile = {job: None if known is None else known[g] for g, job in enumerate(job_of)}
        jobs = sorted(profile, key=lambda j: (-intensity_of(profile[j]), j))
        rank = {job: r for r, job in enumerate(jobs)}
        intensity = [intensity_of(profile[j]) for j in jobs]
        if len(jobs) <= LEVELS or not any(i > 0.0 for i in intensity):
            level = compress(intensity, ())
        else:
            key = (tuple(jobs), tuple(intensity))
            if self._last is None or self._last[0] != key:
                links = [profile[j].links if profile[j] is not None else frozenset() for j in jobs]
                self._last = (key, compress(intensity, contention_edges(links)))
            level = self._last[1]
        classes: list[list[int]] = [[] for _ in range(max(level, default=-1) + 1)]
        for g in sorted(range(len(job_of)), key=lambda g: (rank[job_of[g]], g)):
            classes[level[rank[job_of[g]]]].append(g)
        return [members for members in classes if members]


def intensity_of(profile: JobProfile | None) -> float:
    """A job's intensity, 0 where the view's source does not know it."""
    return 0.0 if profile is None else profile.intensity
