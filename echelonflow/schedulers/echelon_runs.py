"""Runs of a kept Coflow's flows, and the links at their other end, laid out once per table.

Deciding at every flow event, ``echelon`` serves a group's flows one after another, each the least
residual on its path (``echelon_kernels._serve_runs``).  A coflow trace lists one flow per (mapper,
reducer) pair, mapper by mapper or reducer by reducer, so consecutive members share their first link
(or their last): a *run*.  Two things let a decision skip flows that would get nothing:

* the run's shared link (its *run link*) is full: the whole run gets nothing (:func:`runs_of`);
* the link at a flow's other end is full.  On FB2010 that was 98 % of the flows a decision still
  visited: each run link with room was followed by flows whose reducer (or mapper) link earlier flows
  had filled.  Each run keeps a bit set of the links at its members' other ends
  (:func:`open_end_bits`); a decision keeps the set of those with room, and serves only the flows
  whose bit is in both, in member order.

Member order must be the order of the other-end links' bits along every run, so the links are
numbered in an order every run agrees with (a topological order of "comes right after in some run");
a group whose runs disagree (or repeat a link) keeps the flow-by-flow loop.

Same conventions as ``kernels.py``; kept Python 3.9 compatible.
"""

from __future__ import annotations

from echelonflow.schedulers.kernels import EPS_BYTES, _unnumbered, ints, jit, jit_borrowing, small_ints


@jit_borrowing
def run_link(f, last, path_ptr, path_links):
    """Flow f's first link (``last`` 0) or last link (1)."""
    return path_links[path_ptr[f + 1] - 1] if last == 1 else path_links[path_ptr[f]]


@jit
def runs_of(table, in_order):
    """``(run_last, run_of, run_links, run_stop)`` for the slots ``in_order`` vouches for (members with
    a path, numbered in member order).  ``run_last[slot]``: which end of the members' paths (0: the
    first link, 1: the last) runs along consecutive members the longer (the end that changes less often
    along the members is the one whose runs are long).  ``run_of[f]``: the run of member f (numbered
    across every slot, in member order); ``run_links[run]``: the link its members share (kept, not read
    off a member's path: a decision looks at every run of the Coflows it serves, and that read is two
    scattered loads per run); ``run_stop[run]``: one past its last member's flow number.  ``table``:
    ``columns.TableArrays``."""
    members_ptr, members = table.members_ptr, table.members
    path_ptr, path_links = table.path_ptr, table.path_links
    run_last = ints(len(in_order))
    n_runs = 0
    for s in range(len(in_order)):
        lo, hi = members_ptr[s], members_ptr[s + 1]
        if in_order[s] == 0 or hi == lo:
            continue
        breaks_first = 0
        breaks_last = 0
        for e in range(lo + 1, hi):
            f, before = members[e], members[e - 1]
            breaks_first += run_link(f, 0, path_ptr, path_links) != run_link(before, 0, path_ptr, path_links)
            breaks_last += run_link(f, 1, path_ptr, path_links) != run_link(before, 1, path_ptr, path_links)
        run_last[s] = 1 if breaks_last < breaks_first else 0
        n_runs += 1 + (breaks_last if breaks_last < breaks_first else breaks_first)
    run_of = small_ints(len(table.remaining))
    run_links = ints(n_runs)
    run_stop = ints(n_runs)
    run = -1
    for s in range(len(in_order)):
        if in_order[s] == 0:
            continue
        side = run_last[s]
        for e in range(members_ptr[s], members_ptr[s + 1]):
            f = members[e]
            link = run_link(f, side, path_ptr, path_links)
            if e == members_ptr[s] or link != run_links[run]:  # the member before is in run ``run``
                run += 1
                run_links[run] = link
            run_of[f] = run
            run_stop[run] = f + 1
    return run_last, run_of, run_links, run_stop


@jit
def _ends_in_run_order(table, side, slot, index_of, ends, base):
    """The other-end links of ``slot``'s members (written to ``ends`` from ``base``, first use first;
    ``index_of`` maps each to its place there and must be all -1 on entry) in an order every run lists
    them in: ``(count, order)`` with ``order`` a permutation of the ``count`` places, or ``count`` -1 if
    the runs disagree."""
    members, path_ptr, path_links = table.members, table.path_ptr, table.path_links
    lo, hi = table.members_ptr[slot], table.members_ptr[slot + 1]
    other = 1 - side
    count = 0
    for e in range(lo, hi):
        li = run_link(members[e], other, path_ptr, path_links)
        if index_of[li] < 0:
            index_of[li] = count
            ends[base + count] = li
            count += 1
    # "b comes right after a in some run": an edge a -> b; Kahn's algorithm orders the links
    indegree = ints(count)
    out_ptr = ints(count + 1)
    for e in range(lo + 1, hi):
        f, before = members[e], members[e - 1]
        if run_link(f, side, path_ptr, path_links) == run_link(before, side, path_ptr, path_links):
            out_ptr[index_of[run_link(before, other, path_ptr, path_links)] + 1] += 1
            indegree[index_of[run_link(f, other, path_ptr, path_links)]] += 1
    for i in range(count):
        out_ptr[i + 1] += out_ptr[i]
    targets = ints(out_ptr[count])
    fill = ints(count)
    for e in range(lo + 1, hi):
        f, before = members[e], members[e - 1]
        if run_link(f, side, path_ptr, path_links) == run_link(before, side, path_ptr, path_links):
            a = index_of[run_link(before, other, path_ptr, path_links)]
            targets[out_ptr[a] + fill[a]] = index_of[run_link(f, other, path_ptr, path_links)]
            fill[a] += 1
    order = ints(count)
    head = 0
    tail = 0
    for i in range(count):
        if indegree[i] == 0:
            order[tail] = i
            tail += 1
    while head < tail:
        a = order[head]
        head += 1
        for t in range(out_ptr[a], out_ptr[a + 1]):
            b = targets[t]
            indegree[b] -= 1
            if indegree[b] == 0:
                order[tail] = b
                tail += 1
    return (count if tail == count else -1), order


@jit
def open_end_bits(table, in_order, run_last, run_of, n_runs):
    """The other-end links of each vouched slot's runs, for serving only flows whose other end has room
    (module docstring): ``(ends_ptr, ends, end_place, bits_at, bits)``.  Slot s's other-end links,
    numbered in an order its runs agree with (their *places*), are ``ends[ends_ptr[s]:ends_ptr[s + 1]]``,
    and ``end_place[f]`` is member f's.  Run r's live members' places (bytes left, as the kept totals
    count them live; ``echelon_totals.refresh`` keeps them so) are the bits set in
    ``bits[bits_at[r]:][:words]`` (``words`` = one per 64 places of its slot), or ``bits_at[r]`` is -1
    when its slot's runs disagree on the order (serve those flow by flow)."""
    members_ptr, members = table.members_ptr, table.members
    path_ptr, path_links = table.path_ptr, table.path_links
    remaining, n_links = table.remaining, len(table.capacity)
    n_slots = len(in_order)
    bound = 0
    for s in range(n_slots):
        if in_order[s] == 1:
            bound += min(members_ptr[s + 1] - members_ptr[s], n_links)
    ends_ptr = ints(n_slots + 1)
    ends = ints(bound)
    bits_at = ints(n_runs)
    n_words = 0
    index_of = _unnumbered(n_links)
    for s in range(n_slots):
        ends_ptr[s + 1] = ends_ptr[s]
        lo, hi = members_ptr[s], members_ptr[s + 1]
        if in_order[s] == 0 or hi == lo:
            continue
        base = ends_ptr[s]
        count, order = _ends_in_run_order(table, run_last[s], s, index_of, ends, base)
        for e in range(lo, hi):  # index_of back to all -1
            index_of[run_link(members[e], 1 - run_last[s], path_ptr, path_links)] = -1
        words = (count + 63) >> 6
        for r in range(run_of[members[lo]], run_of[members[hi - 1]] + 1):
            bits_at[r] = -1 if count < 0 else n_words + (r - run_of[members[lo]]) * words
        if count >= 0:
            firsts = ends[base:base + count].copy()
            for i in range(count):
                ends[base + i] = firsts[order[i]]
            ends_ptr[s + 1] = base + count
            n_words += (run_of[members[hi - 1]] - run_of[members[lo]] + 1) * words
    bits = ints(n_words)
    end_place = small_ints(len(remaining))
    for s in range(n_slots):
        lo, hi = ends_ptr[s], ends_ptr[s + 1]
        if hi == lo:
            continue
        for i in range(lo, hi):
            index_of[ends[i]] = i - lo
        other = 1 - run_last[s]
        for e in range(members_ptr[s], members_ptr[s + 1]):
            f = members[e]
            i = index_of[run_link(f, other, path_ptr, path_links)]
            end_place[f] = i
            if remaining[f] > EPS_BYTES:
                bits[bits_at[run_of[f]] + (i >> 6)] |= 1 << (i & 63)
        for i in range(lo, hi):
            index_of[ends[i]] = -1
    return ends_ptr, ends[:ends_ptr[n_slots]].copy(), end_place, bits_at, bits
