"""The schedulers' inner loops over flat arrays, compiled by numba when it is installed.

Why this module exists: a decision walks every active flow's path a handful of times in a fixed,
sequential order (a flow's rate depends on what the flows before it left on its links), so it cannot
be vectorised with numpy without changing its floating-point results.  Written as plain loops over
integer-indexed arrays, the same source runs in two ways:

* with numba (the simulator's virtualenv): compiled once per machine (``cache=True`` keeps the machine
  code in ``__pycache__``) and run on numpy arrays, about two orders of magnitude faster;
* without numba (the Python 3.9 controller venv: its pinned set has numpy but no numba): as ordinary
  Python on lists, numpy unused, with the same results.

The arithmetic is exactly that of the original per-flow Python code (same operations in the same
order, no fast-math), so compiled and interpreted runs agree bit for bit; ``tests/test_kernels.py``
checks that on random instances.

Layout shared by every kernel (see :class:`echelonflow.schedulers.columns.FlowTable`): flows are
numbered ``0..F-1``; flow ``f`` crosses links ``path_links[path_ptr[f]:path_ptr[f + 1]]`` (integers
into ``capacity``); ``active`` lists the flow numbers a decision covers, in the order the kernel
expects (documented per kernel); ``rate`` is written at those flow numbers.

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

import math

try:  # pragma: no cover - which branch runs depends on the venv
    import numpy as np
    from numba import njit

    HAVE_NUMBA = True
except ImportError:  # Python 3.9 controller venv: interpreted kernels on lists
    np = None
    HAVE_NUMBA = False

EPS_BYTES = 1e-9  # same as schedulers.base.EPS_BYTES (base imports nothing from here, and vice versa)
#: Residual capacity (bits/s) at or below this, relative to the link's capacity, counts as full.
EPS_RELATIVE = 1e-12
INF = math.inf
#: A group's least seconds on a link it crosses, when offsets may leave it none (:func:`group_demands`).
TINY_S = 1e-12
#: Progressive filling scans the links for the smallest share instead of keeping a heap when
#: links^2 <= SCAN_FACTOR x (links of all paths).  Measured on fat-trees (k=8 and 16, 60-10,000
#: random flows; the scan's cost is rounds x links, the heap's a push per frozen flow and link):
#: the scan was 1.7-3.7x faster up to a ratio links^2 / path links of 326 (bench-k8's decisions sit
#: near 44), the heap 1.25-2.6x faster from 644 on (k=16 with 200-10,000 flows); docs/performance.md.
SCAN_FACTOR = 400
#: :func:`_fill` gives a flow crossing a full link rate 0 without listing it (its docstring says why the
#: rates stay the same bit for bit), and :func:`priority_decide` passes over a group whose every flow
#: crosses one (:func:`_zeroed_when_blocked`); False lists them as plain filling does
#: (tests/test_kernels.py compares).
SKIP_BLOCKED = True
#: BSSI (:func:`bssi_from_demands`) scans the links for the most loaded one instead of keeping a heap
#: when groups x links <= BSSI_SCAN_FACTOR x demands.  The scan costs a pass over the links per group
#: ordered; the heap a re-keying (a sift through log(links) levels) for each demand taken off a link.
#: On echelon's decisions of bench-k8 at 20 iterations (about 7 groups on 390 links) the scan took 8.6
#: us per order against the heap's 42 (CPU time, 1,623 decisions); with dozens of groups each on most of
#: a big switch's ports (FB2010 offline) it is the scan again; with many groups each on a few of a
#: large fabric's links, the heap (docs/performance.md, "Chains through memory").
BSSI_SCAN_FACTOR = 16
#: BSSI leaves out of its search, from the start, the links with one user that cannot be the bottleneck
#: (:func:`_bssi_candidates`); False searches every link (tests/test_kernels.py compares).
BSSI_ONE_USER_FIRST = True


def jit(func):
    """numba.njit(cache=True) when numba is installed; the function itself otherwise."""
    if HAVE_NUMBA:
        return njit(cache=True)(func)
    return func


#: Every helper compiled by :func:`jit_borrowing` (tests/test_precompile.py checks what they return).
BORROWING: list = []


def jit_borrowing(func):
    """:func:`jit` for a helper that borrows its callers' arrays and returns none: compiled without
    numba's reference counting (``_nrt=False``), so a call counts no references on the arrays it is
    given.  numba counts them atomically (a locked increment and decrement per array at each call of a
    function with branches, some 5 ns each); echelon's helpers called per flow or per path entry with
    the kept totals' 32 arrays spent about a quarter of its FB2010 time there (docs/performance.md,
    "Reference counts").  numba refuses to compile such a helper if it allocates an array, directly or
    through what it calls; one that returned an array (or a view of one) would hand its caller a
    reference never counted, so tests/test_precompile.py checks that none returns one."""
    if HAVE_NUMBA:
        compiled = njit(cache=True, _nrt=False)(func)
        BORROWING.append(compiled)
        return compiled
    return func


if HAVE_NUMBA:

    @njit(cache=True)
    def floats(n):
        return np.zeros(n)

    @njit(cache=True)
    def ints(n):
        return np.zeros(n, np.int64)

    @njit(cache=True)
    def small_ints(n):
        """Integers below 2**31 (positions) in half the memory: per-flow and per-path arrays."""
        return np.zeros(n, np.int32)

    @njit(cache=True)
    def flags(n):
        """0/1 per flow in a byte each (an eighth of ``ints``)."""
        return np.zeros(n, np.int8)

    @njit(cache=True)
    def unset_ints(n):
        """``n`` integers not zeroed, for a buffer every reader reads only where it was written (the
        flows a decision covers, their runs' starts, a ranking): zeroing them took some 7 % of
        ``echelon``'s FB2010 hour (docs/performance.md, "A kept Coflow's flows copied")."""
        return np.empty(n, np.int64)

    @njit(cache=True)
    def unset_floats(n):
        """:func:`unset_ints` for floats."""
        return np.empty(n)

    @njit(cache=True)
    def stable_argsort(keys, n):
        """Indices 0..n-1 ordered by ``keys[:n]``, ties in index order."""
        return np.argsort(keys[:n], kind="mergesort")

else:

    def floats(n):
        return [0.0] * n

    def ints(n):
        return [0] * n

    def small_ints(n):
        return [0] * n

    def flags(n):
        return [0] * n

    def unset_ints(n):
        return [0] * n

    def unset_floats(n):
        return [0.0] * n

    def stable_argsort(keys, n):
        return sorted(range(n), key=keys.__getitem__)


# --------------------------------------------------------------------------- shared prologue
@jit_borrowing
def _select(active, start, stop, remaining, path_ptr, rate, sel):
    """Zero the rate of ``active[start:stop]`` and copy into ``sel`` (in order) the flows a decision
    covers: bytes left and a path.  Returns how many; the others keep rate 0 and get no rank."""
    m = 0
    for k in range(start, stop):
        f = active[k]
        rate[f] = 0.0
        if remaining[f] <= EPS_BYTES or path_ptr[f + 1] == path_ptr[f]:
            continue
        sel[m] = f
        m += 1
    return m


# --------------------------------------------------------------------------- shared by the group policies
@jit_borrowing
def _bottleneck(sel, bits, base, shift, start, stop, path_ptr, path_links, cap, cumulative, touched):
    """max over links and EDF prefixes of ``C_j / c_l - (base_j - shift)`` for sel[start:stop].

    ``cumulative`` is all zeros on entry and on return (only ``touched`` links are reset).  A link
    with no capacity left gives infinity: the group must wait.
    """
    worst = -INF
    n_touched = 0
    for k in range(start, stop):
        slack = base[k] - shift
        b = bits[k]
        f = sel[k]
        for p in range(path_ptr[f], path_ptr[f + 1]):
            li = path_links[p]
            capacity = cap[li]
            if capacity <= 0.0:
                worst = INF
                break
            c = cumulative[li]
            if c == 0.0:
                touched[n_touched] = li
                n_touched += 1
            c = c + b
            cumulative[li] = c
            value = c / capacity - slack
            if value > worst:
                worst = value
        if worst == INF:
            break
    for t in range(n_touched):
        cumulative[touched[t]] = 0.0
    return worst


@jit_borrowing
def _consume(f, amount, path_ptr, path_links, residual, full):
    """Take ``amount`` from every link of flow f; rounding dust below EPS_RELATIVE becomes exactly 0."""
    for p in range(path_ptr[f], path_ptr[f + 1]):
        li = path_links[p]
        left = residual[li] - amount
        residual[li] = left if left > full[li] * EPS_RELATIVE else 0.0


@jit_borrowing
def _consume_holding(f, amount, path_ptr, path_links, residual, full, held, value):
    """``kernels._consume`` with the residual of one link, ``held``, kept in ``value`` rather than in
    ``residual``: the first link of the last flow that took.  A mapper's flows in a shuffle come one
    after another and share their first link, and each subtraction there waited on the one before it
    through memory: Varys's spare split took its flows' rates off in 0.6x the time with the link held
    (FB2010's first 100 coflows offline).  The same subtractions in the same order: the same residuals,
    bit for bit.  Returns the new (held, value); the caller writes ``value`` back once it is done, and
    reads nothing of ``residual[held]`` meanwhile."""
    first = path_ptr[f]
    for p in range(first, path_ptr[f + 1]):
        li = path_links[p]
        if p == first and li != held:
            if held >= 0:
                residual[held] = value
            held, value = li, residual[li]
        if li == held:
            left = value - amount
            value = left if left > full[li] * EPS_RELATIVE else 0.0
        else:
            left = residual[li] - amount
            residual[li] = left if left > full[li] * EPS_RELATIVE else 0.0
    return held, value


@jit
def _copied(values):
    """A fresh float array holding ``values`` (what is left of each link before anything is given)."""
    out = floats(len(values))
    for i in range(len(values)):
        out[i] = values[i]
    return out


@jit_borrowing
def _path_min(f, path_ptr, path_links, residual):
    spare = INF
    for p in range(path_ptr[f], path_ptr[f + 1]):
        r = residual[path_links[p]]
        if r < spare:
            spare = r
    return spare


@jit_borrowing
def _backfill(order, m, path_ptr, path_links, residual, capacity, rate):
    """Leftover capacity to the ranked flows in rank order (work conservation)."""
    for k in range(m):
        f = order[k]
        spare = _path_min(f, path_ptr, path_links, residual)
        if spare <= 0:
            continue
        rate[f] += spare
        _consume(f, spare, path_ptr, path_links, residual, capacity)


# --------------------------------------------------------------------------- heaps
@jit
def _heap_less(s1, l1, s2, l2):
    """Does (key ``s1``, link ``l1``) come before (``s2``, ``l2``)?  Taken without a branch."""
    return (s1 < s2) | ((s1 == s2) & (l1 < l2))


@jit_borrowing
def _heap_pop(hs, hl, size):
    """Remove the smallest (key, link) entry into slot ``size - 1``; return the new size."""
    last = size - 1
    hs[0], hs[last] = hs[last], hs[0]
    hl[0], hl[last] = hl[last], hl[0]
    _heap_sift_down(hs, hl, 0, last)
    return last


@jit_borrowing
def _heap_first(hs, hl, a, b):
    """Of heap entries ``a`` and ``b``, the one that comes first in (key, link) order."""
    return b if _heap_less(hs[b], hl[b], hs[a], hl[a]) else a


@jit_borrowing
def _heap_sift_down(hs, hl, k, size):
    """Move entry ``k`` down to its place among the first ``size`` (its key grew, or it is new).

    The heap is 4-ary (entry k's children are 4k+1 .. 4k+4), and the hole goes down the first of each
    entry's children to a leaf before the entry comes back up to its place: a re-keyed top mostly
    belongs near the bottom (BSSI's stale links sank 11 of 13 binary levels on a k=16 fat-tree's 6,144
    links), and a level is then a few comparisons taken without a branch on children that share a cache
    line.  Any heap pops the same (key, link) sequence, so BSSI's order is the same as with the binary
    heap it replaced (with the heapify, BSSI's order on the controller benchmark's decision took 1.88 ms
    instead of 2.39)."""
    s, li = hs[k], hl[k]
    top = k
    while True:
        child = 4 * k + 1
        if child >= size:
            break
        if child + 3 < size:
            child = _heap_first(hs, hl, _heap_first(hs, hl, child, child + 1),
                                _heap_first(hs, hl, child + 2, child + 3))
        else:
            first = child
            for c in range(child + 1, size):
                first = _heap_first(hs, hl, first, c)
            child = first
        hs[k], hl[k] = hs[child], hl[child]
        k = child
    while k > top:
        parent = (k - 1) // 4
        if not _heap_less(s, li, hs[parent], hl[parent]):
            break
        hs[k], hl[k] = hs[parent], hl[parent]
        k = parent
    hs[k], hl[k] = s, li


# --------------------------------------------------------------------------- fair (max-min)
@jit_borrowing
def _share_less(share, a, b):
    """Does local link ``a`` come before ``b`` in (fair share, local number) order?"""
    return share[a] < share[b] or (share[a] == share[b] and a < b)


@jit_borrowing
def _sift_up(heap, pos, share, i):
    li = heap[i]
    while i > 0:
        parent = (i - 1) // 2
        above = heap[parent]
        if not _share_less(share, li, above):
            break
        heap[i] = above
        pos[above] = i
        i = parent
    heap[i] = li
    pos[li] = i


@jit_borrowing
def _sift_down(heap, pos, share, i, size):
    li = heap[i]
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        below = heap[child]
        if child + 1 < size and _share_less(share, heap[child + 1], below):
            child += 1
            below = heap[child]
        if not _share_less(share, below, li):
            break
        heap[i] = below
        pos[below] = i
        i = child
    heap[i] = li
    pos[li] = i


@jit
def _covered(active, start, stop, remaining, path_ptr, rate, sel, whole):
    """(the flows ``active[start:stop]`` a decision covers, how many): :func:`_select`'s copy in ``sel``,
    or, when the caller vouches that every active flow has bytes left and a path (``whole``:
    ``FlowView.clean``), the slice itself.  Filling writes every covered flow's rate, so nothing is
    left to zero either: on FB2010 the copy was a sixth of sincronia's ``priority_decide``."""
    if whole:
        return active[start:stop], stop - start
    return sel, _select(active, start, stop, remaining, path_ptr, rate, sel)


@jit
def fair_decide(active, remaining, path_ptr, path_links, capacity, rate, whole):
    """Per-flow max-min fairness by progressive filling (``schedulers/fair.py``).

    ``active`` must be in flow-id order: links are numbered by first use in that order and equal
    fair shares are frozen lowest number first, as in the original heap of (share, link) pairs.
    ``whole``: as in :func:`_covered`.
    """
    buffer = unset_ints(0 if whole else len(active))
    sel, m = _covered(active, 0, len(active), remaining, path_ptr, rate, buffer, whole)
    _fill(sel, m, path_ptr, path_links, capacity, rate, _unnumbered(len(capacity)))
    return m


@jit
def _unnumbered(n_global):
    """A map with nothing numbered yet, all -1: global link -> local number as :func:`_fill` expects
    it, or flow -> template number (echelon-online)."""
    local_of = ints(n_global)
    for li in range(n_global):
        local_of[li] = -1
    return local_of


@jit
def _fill(sel, m, path_ptr, path_links, capacity, rate, local_of):
    """Progressive filling of flows ``sel[:m]`` on ``capacity``; ``local_of`` is all -1 on entry and
    on return (only the links used are reset).

    Each flow's local link numbers are written once, flow after flow (``local[q_ptr[k]:q_ptr[k + 1]]``
    for ``sel[k]``), so listing each link's members and freezing a flow read them in sequence instead
    of going through the path and the global-to-local map again.

    A flow crossing a link with nothing left (``capacity <= 0``: the groups served before took it) is
    *blocked*: filling would freeze that link first, at level 0, and the flow with it, which takes 0
    from its other links and only lowers their member counts.  So a blocked flow gets rate 0 at once and
    is never listed: every other link's share is then computed from the same residual and the same count
    as before, links keep their numbers by first use over every flow (the tie order), and the rates
    are the same bit for bit, with the work of the blocked flows saved (on FB2010 with strict priority
    between coflows about 70 % of the served flows are blocked: sincronia's ``priority_decide`` 0.65x;
    docs/performance.md)."""
    total = 0
    for k in range(m):
        f = sel[k]
        total += path_ptr[f + 1] - path_ptr[f]
    # local link numbers by first use; residual and member counts per local link
    n_room = total if total < len(capacity) else len(capacity)  # at most one local number per link
    global_of = ints(n_room)
    residual = floats(n_room)
    count = ints(n_room)
    # per flow and path entry, read only where written (zeroing them took about a tenth of sincronia's
    # filling on FB2010: a fill per coflow, thousands of flows each): a flow's ``frozen`` is cleared as
    # it is listed, and only listed flows are read
    local = unset_ints(total)
    q_ptr = unset_ints(m + 1)
    q_ptr[0] = 0
    frozen = unset_ints(m)
    n_local = 0
    q = 0
    for k in range(m):
        f = sel[k]
        blocked = False
        for p in range(path_ptr[f], path_ptr[f + 1]):
            g = path_links[p]
            if local_of[g] < 0:
                local_of[g] = n_local
                global_of[n_local] = g
                residual[n_local] = capacity[g]
                n_local += 1
            if capacity[g] <= 0.0:
                blocked = True
        if blocked and SKIP_BLOCKED:  # a full link: rate 0, as filling would freeze it first, at level 0
            rate[f] = 0.0
        else:
            frozen[k] = 0
            for p in range(path_ptr[f], path_ptr[f + 1]):
                li = local_of[path_links[p]]
                count[li] += 1
                local[q] = li
                q += 1
        q_ptr[k + 1] = q
    # members of each local link, in flow order (CSR)
    member_ptr = ints(n_local + 1)
    for li in range(n_local):
        member_ptr[li + 1] = member_ptr[li] + count[li]
    fill = ints(n_local)
    members = unset_ints(total)
    for k in range(m):
        for q in range(q_ptr[k], q_ptr[k + 1]):
            li = local[q]
            members[member_ptr[li] + fill[li]] = k
            fill[li] += 1

    # The next link to freeze is the one with the smallest (fair share, local number) among links
    # with unfrozen flows.  A heap of the links keyed by their current share finds it in O(log); with
    # few links for the flows (a big switch: two links per flow, a few hundred links; a k=8 fat-tree
    # with tens of flows) a scan of the links per frozen link is cheaper.  Both pick the same link at
    # every step (the heap holds every such link under its current share, and (share, number) orders
    # them totally), so the rates are the same.  Each link is in the heap once: a freeze re-keys the
    # other links of the flows it froze, each once, after the freeze (nothing is picked in between).
    scan = n_local * n_local <= SCAN_FACTOR * total
    heap_cap = 1 if scan else n_local
    heap = ints(heap_cap)
    pos = ints(heap_cap)
    share_of = floats(heap_cap)
    stamp = ints(heap_cap)
    touched = ints(heap_cap)
    size = 0
    if not scan:
        for li in range(n_local):
            share_of[li] = residual[li] / count[li] if count[li] > 0 else INF  # only blocked flows: none
            heap[li] = li
            pos[li] = li
        size = n_local
        for i in range(n_local // 2 - 1, -1, -1):
            _sift_down(heap, pos, share_of, i, size)
    rounds = 0
    while True:
        if scan:
            li = -1
            share = 0.0
            for candidate in range(n_local):
                if count[candidate] > 0:
                    value = residual[candidate] / count[candidate]
                    if li < 0 or value < share:
                        li, share = candidate, value
            if li < 0:
                break
        else:
            if size == 0:
                break
            li = heap[0]
            size -= 1
            if size > 0:
                heap[0] = heap[size]
                _sift_down(heap, pos, share_of, 0, size)
            pos[li] = -1
            if count[li] == 0:  # its flows were frozen on other links
                continue
            share = share_of[li]
        rounds += 1
        n_touched = 0
        level = share if share >= 0.0 else 0.0
        for q in range(member_ptr[li], member_ptr[li + 1]):
            k = members[q]
            if frozen[k]:
                continue
            frozen[k] = 1
            rate[sel[k]] = level
            for r in range(q_ptr[k], q_ptr[k + 1]):
                other = local[r]
                if other == li:  # frozen now: its residual and count are not read again
                    continue
                residual[other] -= level
                count[other] -= 1
                if not scan and stamp[other] != rounds:
                    stamp[other] = rounds
                    touched[n_touched] = other
                    n_touched += 1
        count[li] = 0
        for t in range(n_touched):
            other = touched[t]
            if count[other] > 0:
                share_of[other] = residual[other] / count[other]
                _sift_up(heap, pos, share_of, pos[other])
                _sift_down(heap, pos, share_of, pos[other], size)
    for li in range(n_local):
        local_of[global_of[li]] = -1


@jit_borrowing
def _zeroed_when_blocked(sel, m, path_ptr, path_links, residual, rate):
    """True, with every rate of ``sel[:m]`` 0, when each of those flows crosses a link with nothing
    left; False at the first flow that does not (the rates written so far are 0, which :func:`_fill`
    writes over).  Such a group is what :func:`_fill` would give nothing, flow by flow (``SKIP_BLOCKED``),
    after numbering its links and building its member lists: under strict priority most groups behind
    the first few on a coflow trace are that, and a mapper's flows share their first link, so one read
    a flow decides it."""
    for k in range(m):
        f = sel[k]
        if _path_min(f, path_ptr, path_links, residual) > 0.0:
            return False
        rate[f] = 0.0
    return True


# --------------------------------------------------------------------------- group-by-group policies
@jit
def priority_decide(active, group_ptr, remaining, path_ptr, path_links, capacity, rate, whole, kept):
    """Strict priority between groups, max-min fairness inside one (``schedulers/priority.py``).

    Group ``g`` is ``active[group_ptr[g]:group_ptr[g + 1]]``, its flows in flow-id order; groups in
    service order.  Each group is filled like :func:`fair_decide` on what the groups before it left,
    then takes its rates off every link of its flows (rounding dust below EPS_RELATIVE of a link's
    capacity becomes exactly 0).  ``whole``: as in :func:`_covered`.

    The first ``kept`` groups are not filled: the caller vouches that ``rate`` holds what the filling
    would write for them (``priority.KeptClasses``: the previous decision served the very same flows
    first, on the same capacities).  Their rates are only taken off the links again, in the same order,
    so every later group sees the residual the filling would have left, bit for bit.
    """
    residual = _copied(capacity)
    local_of = _unnumbered(len(capacity))
    buffer = unset_ints(0 if whole else len(active))
    for g in range(len(group_ptr) - 1):
        a, b = group_ptr[g], group_ptr[g + 1]
        sel, m = _covered(active, a, b, remaining, path_ptr, rate, buffer, whole)
        if g >= kept:
            if SKIP_BLOCKED and _zeroed_when_blocked(sel, m, path_ptr, path_links, residual, rate):
                continue  # every flow rate 0, nothing to take off the links
            _fill(sel, m, path_ptr, path_links, residual, rate, local_of)
        held = -1  # ``_consume_holding``
        value = 0.0
        for k in range(m):
            f = sel[k]
            give = rate[f]
            if give > 0.0:
                held, value = _consume_holding(f, give, path_ptr, path_links, residual, capacity, held, value)
        if held >= 0:
            residual[held] = value


@jit
def kept_classes(served, served_ptr, before, before_ptr):
    """How many leading classes of ``served`` (class c is ``served[served_ptr[c]:served_ptr[c + 1]]``)
    list the very flows, in the same order, that the leading classes of ``before`` did: each one and
    all before it.  Stops at the first flow that differs, so a decision pays for the classes it keeps
    and one more."""
    n = min(len(served_ptr), len(before_ptr)) - 1
    c = 0
    while c < n and served_ptr[c + 1] == before_ptr[c + 1]:
        for i in range(served_ptr[c], served_ptr[c + 1]):
            if served[i] != before[i]:
                return c
        c += 1
    return c


@jit
def bssi_order(active, group_ptr, remaining, path_ptr, path_links, capacity, weights):
    """Sincronia's BSSI order of the groups (``schedulers/sincronia.py``): group indices, most urgent
    first.  Groups as in :func:`priority_decide`, in group-id order.  Links are numbered by first use
    (groups in order, flows in order, path order), which breaks ties between equally loaded links.
    """
    dem_ptr, dem_link, dem_time, n_local = group_demands(active, group_ptr, remaining, floats(0), False,
                                                         path_ptr, path_links, capacity)
    return bssi_from_demands(dem_ptr, dem_link, dem_time, n_local, weights)


@jit
def group_demands(flows, group_ptr, remaining, offset, with_offsets, path_ptr, path_links, capacity):
    """Each group's seconds on each link it crosses, as BSSI reads them: ``(dem_ptr, dem_link,
    dem_time, n_local)``, group g's links ``dem_link[dem_ptr[g]:dem_ptr[g + 1]]`` (numbered 0..n_local-1
    by first use) with its seconds in ``dem_time``.  Group g's flows are ``flows[group_ptr[g]:
    group_ptr[g + 1]]``; flows with no bytes left or no path count for nothing.

    Without offsets a group's seconds on l are its bits on l over c_l (Sincronia's demand).  With them
    (``offset`` per flow, each group's flows listed in offset order) they are ``max_j (C_j / c_l - (o_j -
    o_first))`` over its flows (``C_j`` the bits of the first j on l, ``o_first`` its first flow's
    offset), at least ``TINY_S``: the time l must give the group before its tardiness stops growing
    (``echelon``; for a Coflow the same as without).
    """
    n_groups = len(group_ptr) - 1
    n_global = len(capacity)
    local_of = _unnumbered(n_global)
    cum = floats(n_global)
    most = floats(n_global)
    seen = ints(n_global)
    # At most one demand per group and link, and per flow and link.  The arrays are zeroed at every
    # call, so they are sized by the smaller bound: a few groups on a big switch need thousands of
    # entries where their flows' paths have hundreds of thousands (zeroing those took a quarter of
    # sincronia's BSSI on FB2010).  The flows' entries are counted only where they may be the smaller.
    total = n_groups * n_global
    if total > 4 * group_ptr[n_groups]:
        entries = 0
        for k in range(group_ptr[n_groups]):
            f = flows[k]
            entries += path_ptr[f + 1] - path_ptr[f]
        if entries < total:
            total = entries
    dem_ptr = ints(n_groups + 1)
    dem_link = ints(total)
    dem_time = floats(total)
    n_local = 0
    n_dem = 0
    for g in range(n_groups):
        first = n_dem
        o_first = INF
        for k in range(group_ptr[g], group_ptr[g + 1]):
            f = flows[k]
            if remaining[f] <= EPS_BYTES or path_ptr[f + 1] == path_ptr[f]:
                continue
            if o_first == INF and with_offsets:
                o_first = offset[f]
            for p in range(path_ptr[f], path_ptr[f + 1]):
                gl = path_links[p]
                if local_of[gl] < 0:
                    local_of[gl] = n_local
                    n_local += 1
                if seen[gl] == 0:
                    seen[gl] = 1
                    dem_link[n_dem] = gl
                    n_dem += 1
                cum[gl] = cum[gl] + 8.0 * remaining[f] / capacity[gl]
                if with_offsets and cum[gl] - (offset[f] - o_first) > most[gl]:
                    most[gl] = cum[gl] - (offset[f] - o_first)
        for d in range(first, n_dem):
            gl = dem_link[d]
            if with_offsets:
                # a link the group is early on still carries its bytes: a sliver keeps it a user there
                dem_time[d] = most[gl] if most[gl] > TINY_S else TINY_S
            else:
                dem_time[d] = cum[gl]
            dem_link[d] = local_of[gl]
            cum[gl] = 0.0
            most[gl] = 0.0
            seen[gl] = 0
        dem_ptr[g + 1] = n_dem
    return dem_ptr, dem_link, dem_time, n_local


@jit_borrowing
def _bssi_candidates(dem_ptr, dem_link, n_users, load, alive):
    """Mark in ``alive`` (zeros on entry) the links BSSI's search for the most loaded one must hold;
    returns how many.  A link with one user carries that group's seconds until the group is ordered and
    nothing after, so of a group's one-user links only the first in (load, number) order can ever be the
    bottleneck: it comes before the others while the group is unordered, and they are dead once it is.
    The others are left out from the start (``BSSI_ONE_USER_FIRST``): on a k=16 fat-tree most links
    have one user (the multi-tenant cell: 896 demands on 752 links, 37 groups, per decision), and each
    left in would be re-keyed and sunk through the heap once its group is ordered."""
    n_alive = 0
    for li in range(len(alive)):
        if n_users[li] != 1 or not BSSI_ONE_USER_FIRST:
            alive[li] = 1
            n_alive += 1
    if not BSSI_ONE_USER_FIRST:
        return n_alive
    for g in range(len(dem_ptr) - 1):
        first = -1
        for d in range(dem_ptr[g], dem_ptr[g + 1]):
            li = dem_link[d]
            if n_users[li] == 1 and (first < 0 or load[li] > load[first]
                                     or (load[li] == load[first] and li < first)):
                first = li
        if first >= 0:
            alive[first] = 1
            n_alive += 1
    return n_alive


@jit
def bssi_from_demands(dem_ptr, dem_link, dem_time, n_local, weights):
    """BSSI (:func:`bssi_order`) on demands given per group: ``dem_link[dem_ptr[g]:dem_ptr[g + 1]]``
    (links numbered 0..``n_local``-1, each at most once per group) with the group's seconds on each in
    ``dem_time``.  Groups without demands go first, in index order."""
    n_groups = len(dem_ptr) - 1
    n_dem = dem_ptr[n_groups]
    # load per link and its users (groups in order), with the group's seconds on it
    load = floats(n_local)
    n_users = ints(n_local)
    for d in range(n_dem):
        load[dem_link[d]] += dem_time[d]
        n_users[dem_link[d]] += 1
    user_ptr = ints(n_local + 1)
    for li in range(n_local):
        user_ptr[li + 1] = user_ptr[li] + n_users[li]
    fill = ints(n_local)
    user_group = ints(n_dem)
    user_time = floats(n_dem)
    for g in range(n_groups):
        for d in range(dem_ptr[g], dem_ptr[g + 1]):
            li = dem_link[d]
            user_group[user_ptr[li] + fill[li]] = g
            user_time[user_ptr[li] + fill[li]] = dem_time[d]
            fill[li] += 1
    weight = floats(n_groups)
    unordered = ints(n_groups)
    out = ints(n_groups)
    n_out = 0
    left = 0
    for g in range(n_groups):
        weight[g] = weights[g]
        if dem_ptr[g + 1] > dem_ptr[g]:
            unordered[g] = 1
            left += 1
        else:  # nothing left: first, in id order
            out[n_out] = g
            n_out += 1
    # The next bottleneck is the live link with the largest load, ties to the smaller number; a link
    # whose users are all ordered is dead.  A lazy heap finds it (a stale entry, above its link's load
    # since loads only fall, is re-keyed at the current load when it reaches the top, in place: it can
    # only move down, and mostly not far); where the groups cover the links (``BSSI_SCAN_FACTOR``) a
    # scan of the links is cheaper and picks the same link at every step (the first valid entry at the
    # top is exactly that link: one entry per link, and (load, number) orders them totally), so the
    # order is the same.
    alive = ints(n_local)
    n_alive = _bssi_candidates(dem_ptr, dem_link, n_users, load, alive)
    scan = n_groups * n_alive <= BSSI_SCAN_FACTOR * n_dem
    heap_cap = 1 if scan else n_alive + 1  # one entry per link at most
    hs = floats(heap_cap)
    hl = ints(heap_cap)
    size = 0
    if not scan:  # heapified bottom-up: fewer moves than a push per link
        for li in range(n_local):
            if alive[li] == 1:
                hs[size], hl[size] = -load[li], li
                size += 1
        for k in range((size - 2) // 4, -1, -1):
            _heap_sift_down(hs, hl, k, size)
    back = n_groups
    while left > 0 and (n_alive > 0 if scan else size > 0):
        if scan:
            b = -1
            for li in range(n_local):
                if alive[li] == 1 and (b < 0 or load[li] > load[b]):
                    b = li
        else:
            neg, b = hs[0], hl[0]
            if -neg != load[b]:
                # stale: loads only fall, so an entry is at least its link's load; re-key it at the
                # current load (lazily: only links that reach the top are ever re-keyed)
                hs[0] = -load[b]
                _heap_sift_down(hs, hl, 0, size)
                continue
        # b's users that are still unordered, kept at the front of its list in group order (``fill``
        # counts them): a link that stays the bottleneck while its users are ordered one by one is
        # then read for the users it has left, not for every user it had
        last = -1
        best = 0.0
        last_time = 0.0
        kept = user_ptr[b]
        for q in range(user_ptr[b], user_ptr[b] + fill[b]):
            g = user_group[q]
            if unordered[g] == 0:
                continue
            t = user_time[q]
            user_group[kept], user_time[kept] = g, t
            kept += 1
            value = weight[g] / t
            if last < 0 or value <= best:  # ties: the larger group index goes last
                last, best, last_time = g, value, t
        fill[b] = kept - user_ptr[b]
        if last < 0:
            alive[b] = 0  # every user of b is ordered already; the link is done
            n_alive -= 1
            if not scan:
                size = _heap_pop(hs, hl, size)
            continue
        ratio = weight[last] / last_time
        for q in range(user_ptr[b], kept):
            g = user_group[q]
            if g != last:
                weight[g] -= ratio * user_time[q]
        unordered[last] = 0
        left -= 1
        back -= 1
        out[back] = last
        for d in range(dem_ptr[last], dem_ptr[last + 1]):
            load[dem_link[d]] -= dem_time[d]
        if not scan:  # b, still at the top, at its new load
            hs[0] = -load[b]
            _heap_sift_down(hs, hl, 0, size)
    # idle groups first, then the ordered ones (written from the back)
    for k in range(back, n_groups):
        out[n_out] = out[k]
        n_out += 1
    return out[:n_out]


# --------------------------------------------------------------------------- invariants
#: :func:`decision_fault`'s codes, the first fault found, in this order.
BAD_RATE = 1  # a flow's rate is negative, NaN or infinite
OVER_CAPACITY = 2  # a link's summed rate exceeds its capacity by more than the tolerance
RANKING_BAD = 3  # the ranking repeats a flow or ranks one that is not active
RATED_BAD = 4  # the flows listed as given a rate are not the active flows with a rate


@jit_borrowing
def decision_fault(active, rate, paths, rtol, ranking, scratch):
    """Every invariant ``view.check_decision`` checks, in one call: ``(code, flow, link, load)``, code 0
    when there is no fault, else the first of :data:`BAD_RATE` (the first such flow as ``active`` lists
    it), :data:`OVER_CAPACITY` (the first flow whose path meets an overloaded link, that link and its
    load), :data:`RANKING_BAD`, :data:`RATED_BAD` (no flow or link named).

    ``paths``: (path_ptr, path_links, capacity); ``ranking``: (ranked, count, rated, rated_listed), the
    last False when the decision lists no flows as rated; ``scratch``: (per link, per flow) zeros, kept
    by the caller, zeros again on return.  One walk over the active flows checks their rates, marks
    them, counts those with a rate and adds each rated flow's rate along its path (a flow at 0 adds
    nothing: on FB2010 under ``echelon`` fewer than 1 % have a rate); one more clears the marks.  Made
    afresh at every check, the per-flow array took 40 % of the checks on bench-k8; as bytes
    (``flags``) rather than 64-bit integers, the FB2010 hour with checks took 0.71x the time (its 701,486
    flows' marks fit in a core's cache; docs/performance.md).
    """
    path_ptr, path_links, capacity = paths
    ranked, count, rated, rated_listed = ranking
    load, mark = scratch
    code, bad_flow, bad_link, used = 0, -1, -1, 0.0
    walked, given = _loads_and_marks(active, rate, path_ptr, path_links, load, mark)
    if walked < len(active):
        code, bad_flow = BAD_RATE, active[walked]
    elif _overloaded(load, capacity, rtol):
        code = OVER_CAPACITY
        bad_flow, bad_link, used = _first_on_overloaded(active, path_ptr, path_links, capacity, rtol, load)
    elif not _marked_once(ranked, count, mark, 1, 2):
        code = RANKING_BAD
    elif rated_listed:
        _marked_once(ranked, count, mark, 2, 1)  # the ranked flows back to "active, not seen"
        if given != len(rated) or not _marked_once(rated, len(rated), mark, 1, 2):
            code = RATED_BAD
        else:
            for i in range(len(rated)):
                if not rate[rated[i]] > 0.0:
                    code = RATED_BAD
                    break
    for k in range(walked):
        mark[active[k]] = 0
    for li in range(len(load)):
        load[li] = 0.0
    return code, bad_flow, bad_link, used


@jit_borrowing
def _loads_and_marks(active, rate, path_ptr, path_links, load, mark):
    """:func:`decision_fault`'s walk: (how many active flows it walked, how many have a rate > 0); it stops
    at the first bad rate, so fewer than ``len(active)`` walked names that flow."""
    given = 0
    for k in range(len(active)):
        f = active[k]
        r = rate[f]
        if not r >= 0 or r == INF:
            return k, given
        mark[f] = 1
        if r > 0.0:
            given += 1
            for p in range(path_ptr[f], path_ptr[f + 1]):
                load[path_links[p]] += r
    return len(active), given


@jit_borrowing
def _overloaded(load, capacity, rtol):
    for li in range(len(load)):  # noqa: SIM110 (numba compiles no generator); links, not flows' paths
        if load[li] > capacity[li] * (1 + rtol):
            return True
    return False


@jit_borrowing
def _first_on_overloaded(active, path_ptr, path_links, capacity, rtol, load):
    """(flow, link, load): the first active flow, as listed, whose path meets an overloaded link, whatever
    its own rate, and that link."""
    for k in range(len(active)):
        f = active[k]
        for p in range(path_ptr[f], path_ptr[f + 1]):
            li = path_links[p]
            if load[li] > capacity[li] * (1 + rtol):
                return f, li, load[li]
    return -1, -1, 0.0


@jit_borrowing
def _marked_once(flows, count, mark, expected, then):
    """True when each of ``flows[:count]`` is a flow number whose mark is ``expected`` (once each: its mark
    becomes ``then`` as it is met).  False at the first that is not, marks so far left changed (the
    caller clears every active flow's mark)."""
    for k in range(count):
        f = flows[k]
        if f < 0 or f >= len(mark) or mark[f] != expected:
            return False
        mark[f] = then
    return True


@jit_borrowing
def group_rate_sums(active, group_ptr, rate, sums):
    """Per group ``g`` (``active[group_ptr[g]:group_ptr[g + 1]]``), its flows' rates summed in that order
    into ``sums[g]``."""
    for g in range(len(group_ptr) - 1):
        total = 0.0
        for k in range(group_ptr[g], group_ptr[g + 1]):
            total += rate[active[k]]
        sums[g] = total


# --------------------------------------------------------------------------- echelon-online
@jit_borrowing
def online_estimate(active, remaining, sent, part, known_size, known_offset, group, group_left,
                    min_left_fraction, est_remaining, est_offset):
    """echelon-online's estimate of each active flow's bytes left and offset (``echelon_online.py``).

    ``sent`` is aligned with ``active``; ``known_size`` and ``known_offset`` are indexed by template
    number, ``part[f]`` (``known_size < 0``: nothing learned of that template yet); ``remaining`` (read
    only to tell finished dust, which the network knows), ``group``, ``part``, ``est_remaining`` and
    ``est_offset`` are indexed by flow number; ``group_left`` by group number (what an unlearned flow of
    that group is assumed to have left).
    """
    for k in range(len(active)):
        f = active[k]
        left = 0.0
        off = 0.0
        if remaining[f] <= EPS_BYTES:
            pass
        elif known_size[part[f]] >= 0.0:
            size = known_size[part[f]]
            left = max(size - sent[k], min_left_fraction * size, 1.0)
            off = known_offset[part[f]]
        else:
            left = group_left[group[f]]
        est_remaining[f] = left
        est_offset[f] = off


@jit
def online_unnumbered(active, part):
    """The active flows whose template has no number yet (``part`` -1), in ``active``'s order: the only
    flows whose ids echelon-online reads at a decision."""
    count = 0
    for k in range(len(active)):
        if part[active[k]] < 0:
            count += 1
    out = unset_ints(count)
    count = 0
    for k in range(len(active)):
        if part[active[k]] < 0:
            out[count] = active[k]
            count += 1
    return out


# --------------------------------------------------------------------------- array helpers
def float_array(values):
    """``values`` as the kernels' float array: numpy float64 with numba, a list without."""
    return np.asarray(values, dtype=np.float64) if HAVE_NUMBA else [float(v) for v in values]


def int_array(values):
    """``values`` as the kernels' integer array: numpy int64 with numba, a list without."""
    return np.asarray(values, dtype=np.int64) if HAVE_NUMBA else [int(v) for v in values]


def grown(values, count):
    """``values`` (floats) at the start of a zeroed array of ``count`` entries."""
    out = floats(count)
    out[:len(values)] = values
    return out


def to_list(values, count):
    """The first ``count`` entries as a plain Python list (Python floats/ints for dicts and JSON)."""
    return values[:count].tolist() if HAVE_NUMBA else list(values[:count])


def gather(values, numbers):
    """``values[n]`` for each of ``numbers`` as a plain Python list (one numpy take where installed)."""
    return values[numbers].tolist() if HAVE_NUMBA else [values[n] for n in numbers]
