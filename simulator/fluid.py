"""The simulator's per-event loops over the active flows (compiled by numba where installed).

Between two events every rate is constant, so an event costs a walk over the active flows for the
next finish time (which lists the flows with a rate; a decision that listed them spares it:
:func:`soonest`), one over those flows to move their remaining bytes to that time, and (when the
scheduler ran and checks are on) the capacity invariant.  They live here as flat-array kernels
(``echelonflow.schedulers.kernels.jit``) with the same arithmetic, in the same order, as the original
per-flow Python loops, so results do not change by a single bit.

``active`` is a numpy array of flow numbers in increasing order (the simulator's flow numbering, see
``engine._Run``); ``remaining`` (bytes), ``rate`` (bits/s) and ``leftover`` (bytes) are per flow number.
"""

from __future__ import annotations

import math

import numpy as np

from echelonflow.schedulers.kernels import jit, jit_borrowing

INF = math.inf


@jit_borrowing
def next_finish(active, remaining, rate, now, rated):
    """Earliest ``now + 8 * remaining / rate`` over the active flows with a positive rate (inf if none),
    and how many those are: their flow numbers go to ``rated`` (in order) for the :func:`advance` that
    follows."""
    best = INF
    n_rated = 0
    for k in range(len(active)):
        f = active[k]
        r = rate[f]
        if r > 0:
            rated[n_rated] = f
            n_rated += 1
            done = now + 8.0 * remaining[f] / r
            if done < best:
                best = done
    return best, n_rated


@jit_borrowing
def soonest(rated, n_rated, remaining, rate, now):
    """:func:`next_finish`'s time when the flows with a rate are listed already (``rated[:n_rated]``,
    in any order: a scheduler that lists them, ``Allocation.rated``): the same minimum over the same
    flows, without a walk over every active flow."""
    best = INF
    for i in range(n_rated):
        f = rated[i]
        done = now + 8.0 * remaining[f] / rate[f]
        if done < best:
            best = done
    return best


@jit
def advance(active, rated, n_rated, remaining, rate, leftover, now, next_s, tol, bytes_atol, finished,
            counting, path_ptr, path_links, users):
    """Move every active flow to ``next_s``; compact ``active`` in place to the ones still running,
    which end up at ``active[first:end]`` (:func:`_closed_gaps`).

    Only the flows listed in ``rated[:n_rated]`` move (by :func:`next_finish`, or by the decision, in
    any order; a flow at rate 0 stays as it is): on a coflow trace ``echelon`` gives a rate to about 1 %
    of the active flows, and moving all of them took some 8 % of its hour (docs/performance.md, "Steps
    over the flows with a rate").  Only the finished ones are looked up in ``active``.  Flows
    due by ``next_s + tol`` (or with at most ``bytes_atol`` left) finish: their flow numbers go to
    ``finished`` in ``active`` order, and to ``leftover`` at the same place the bytes the step would
    not have covered beyond what the time tolerance itself explains (``rate * tol``; the delivery check
    looks for more than dust there).  With ``counting``, the finished flows also come off ``users``
    (active flows per link, kept for skipped decisions: ``engine``).  Returns (first, end, flows
    finished, whether some finished and every link of theirs is left without a user; False without
    ``counting``).
    """
    dt = next_s - now
    done = 0
    for i in range(n_rated):
        f = rated[i]
        r = rate[f]
        if now + 8.0 * remaining[f] / r <= next_s + tol:
            # finished within the time tolerance: up to tol seconds of bytes are legitimately left
            left = remaining[f] - r * dt / 8.0 - r * tol / 8.0
        else:
            remaining[f] -= r * dt / 8.0
            if remaining[f] > bytes_atol:
                continue
            left = remaining[f]
        leftover[done] = left if left > 0.0 else 0.0
        remaining[f] = 0.0
        finished[done] = f
        done += 1
    first, end = 0, len(active)
    if done > 0:
        _in_flow_order(finished, leftover, done)
        for j in range(done):  # where they are: ``rated`` is read already
            rated[j] = np.searchsorted(active, finished[j])
        first, end = _closed_gaps(active, rated, done)
    alone = False
    if counting and done > 0:
        alone = left_alone(finished, done, path_ptr, path_links, users)
    return first, end, done, alone


@jit
def _in_flow_order(finished, leftover, count):
    """Sort ``finished[:count]`` (flow numbers) with ``leftover[:count]`` beside them: their order in
    ``active``.  A decision lists its flows in its own order; :func:`next_finish` lists them sorted."""
    ordered = True
    for j in range(1, count):
        if finished[j - 1] > finished[j]:
            ordered = False
            break
    if ordered:
        return
    order = np.argsort(finished[:count])
    flows = finished[:count][order]
    left = leftover[:count][order]
    finished[:count] = flows
    leftover[:count] = left


@jit_borrowing
def _closed_gaps(active, gaps, count):
    """Close the gaps at the increasing positions ``gaps[:count]`` of ``active``, keeping the order:
    the gaps of the first ``split`` are closed by moving what precedes them towards the end, the
    others by moving what follows them towards the start, with ``split`` chosen to move the fewest
    flows.  Returns where the flows now are, ``active[first:end]``.  The array is in flow-number order,
    so a finish lands anywhere in it: moving the whole tail after it moved half the active flows on
    average, hundreds of thousands per step on FB2010 offline (docs/performance.md, "Where echelon's
    hour goes now")."""
    n = len(active)
    split, least = 0, n - gaps[0]
    for s in range(1, count + 1):
        moved = gaps[s - 1] + (n - gaps[s] if s < count else 0)
        if moved < least:
            split, least = s, moved
    first = 0
    if split > 0:
        w = gaps[split - 1]
        for j in range(split - 1, -1, -1):
            lo = gaps[j - 1] + 1 if j > 0 else 0
            for k in range(gaps[j] - 1, lo - 1, -1):
                active[w] = active[k]
                w -= 1
        first = w + 1
    end = n
    if split < count:
        end = gaps[split]
        for j in range(split, count):
            stop = gaps[j + 1] if j + 1 < count else n
            for k in range(gaps[j] + 1, stop):
                active[end] = active[k]
                end += 1
    return first, end


@jit
def merged(active, arrived, counting, path_ptr, path_links, users):
    """The increasing flow numbers of ``active`` and ``arrived`` (both increasing, disjoint) in one
    new array: what sorting their concatenation gives, in one pass.  With ``counting`` the arrived
    flows are added to ``users`` (active flows per link)."""
    if counting:
        count_links(arrived, len(arrived), path_ptr, path_links, users, 1)
    n, m = len(active), len(arrived)
    out = np.empty(n + m, np.int64)
    i = j = 0
    for k in range(n + m):
        if j >= m or (i < n and active[i] < arrived[j]):
            out[k] = active[i]
            i += 1
        else:
            out[k] = arrived[j]
            j += 1
    return out


@jit_borrowing
def count_links(flows, count, path_ptr, path_links, users, delta):
    """Add ``delta`` to ``users[l]`` for every link l of the first ``count`` flows of ``flows``."""
    for k in range(count):
        f = flows[k]
        for p in range(path_ptr[f], path_ptr[f + 1]):
            users[path_links[p]] += delta


@jit_borrowing
def left_alone(flows, count, path_ptr, path_links, users):
    """The first ``count`` flows of ``flows`` leave: take them off ``users`` (active flows per link) and
    say whether they leave every one of their links without a user (one call per step)."""
    count_links(flows, count, path_ptr, path_links, users, -1)
    for k in range(count):
        f = flows[k]
        for p in range(path_ptr[f], path_ptr[f + 1]):
            if users[path_links[p]] != 0:
                return False
    return True


@jit_borrowing
def group_sent(active, heads, listing, wire, remaining, position, sent, group_totals):
    """What non-clairvoyant policies see of the groups (``engine._Run.groups``): each active flow's wire
    bytes delivered (``sent``, aligned with ``active``) and, per group ``heads[g]``, its active flows'
    sum in the order they started, as the controller's snapshot lists them, so the floating-point sums
    agree to the last bit.  ``listing`` = (``base``, ``count``, ``by_start``): group ``h``'s started flows
    in start order are ``by_start[base[h]:base[h] + count[h]]``, so no decision sorts; ``position`` (per
    flow, kept between calls) tells which of them are active now: its entry is checked against
    ``active``.  A flow leaves the active ones only when it finishes, so the flows found finished are
    dropped from the listing (``count[h]`` shrinks): each is passed over once."""
    base, count, by_start = listing
    for k in range(len(active)):
        f = active[k]
        sent[k] = wire[f] - remaining[f]
        position[f] = k
    for g in range(len(heads)):
        h = heads[g]
        total = 0.0
        kept = base[h]
        for j in range(base[h], base[h] + count[h]):
            f = by_start[j]
            k = position[f]
            if k < len(active) and active[k] == f:
                total += sent[k]
                by_start[kept] = f
                kept += 1
        count[h] = kept - base[h]
        group_totals[g] = total
