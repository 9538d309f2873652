"""The loops of the EchelonFlow schedulers, over flat arrays (compiled by numba where installed).

Two algorithms share one prologue (each group's active flows in earliest-due-first order):

* :func:`echelon_decide`, the ``echelon`` scheduler (``schedulers/echelon.py`` and
  ``docs/scheduler-design.md`` say why it is built so): groups ordered by the residual bottleneck of
  everything they have left, declared flows that have not started included (or by BSSI with offsets
  unless list-schedule estimates clearly prefer Smith's); then, in that order, each group's flows as soon as
  possible in earliest-due-first order (under the coflow rescheduling rule, which does not decide at
  every flow finish, a Coflow's flows share max-min and a staggered EchelonFlow's go just in time, so
  that no capacity idles between decisions); then back-fill;
* :func:`jit_decide`, the paper's sketch taken literally (``echelon-varys``, and ``coflow`` until it
  has a module of its own): Varys's smallest-effective-bottleneck-first order on the active flows,
  just-in-time rates (MADD for a Coflow) for every group, back-fill.

Same conventions as ``kernels.py`` (flow numbers, ``path_ptr``/``path_links``, rates in bits/s, bytes,
seconds; compiled and interpreted runs agree bit for bit).  The flow table's arrays come as one
argument, ``table`` (``columns.TableArrays``), read by name.  Kept Python 3.9 compatible.
"""

from __future__ import annotations

import math

from echelonflow.schedulers.echelon_totals import (
    _added,
    _units,
    bits_of,
    kept_and_live,
    live_links,
    live_members,
    mark_moved,
    refresh,
    sort_live_links,
)
from echelonflow.schedulers.kernels import (
    INF,
    TINY_S,
    _backfill,
    _bottleneck,
    _consume,
    _copied,
    _fill,
    _path_min,
    _unnumbered,
    bssi_from_demands,
    floats,
    group_demands,
    ints,
    jit,
    jit_borrowing,
    stable_argsort,
    unset_ints,
)

EPS_BYTES = 1e-9
#: BSSI's order is kept unless Smith's is estimated better by more than this fraction under both
#: estimates.  The estimates are list schedules (each link serving groups one after another), so near
#: ties say little; they go to BSSI's order (for Coflows, Sincronia's 4-approximation).  Measured, not
#: derived: 0.02 kept every matrix cell within 1 % of the best other scheduler, 0.05 did not
#: (docs/scheduler-design.md, Rule 1b).
BSSI_MARGIN = 0.02
#: A uniform group (its live members, those with bytes left and a path, at one offset) with more live
#: members than this is read off its links' exact totals (``echelon_totals.py``; the simulator keeps
#: them between decisions); a smaller one sums its members' bits in member order, as every group did
#: before.  Both are the rule's sums; they differ in the last bits, which can break exact ties between
#: identical groups the other way (summing multitenant-k8's groups of up to 112 flows exactly swapped
#: two identical all-reduces: +3.6 % on its objective, by a tie), while a small group's walk costs
#: little.  The training scenarios' groups have at most 480 flows; FB2010's 74 coflows above 1,024 hold
#: 684,027 of its 701,486 flows, and walking them was most of a decision.
EXACT_ABOVE = 1024
#: ``order_by`` codes of :func:`jit_decide` (names in schedulers.echelon.ORDERINGS).
ORDER_BOTTLENECK, ORDER_TARDINESS, ORDER_VOLUME = 0, 1, 2


@jit
def _edf_groups(active, table, use_offsets, rate, sel, due, starts):
    """The flows a decision covers (``_select``) into ``sel``, each group's run contiguous and in
    earliest-due-first order (equal due times by ``idrank``), due times into ``due``, the runs' starts
    into ``starts``.  ``active`` must list each group's flows contiguously, groups in group-id order
    (sorted by due already where it can: the insertion sort then only checks).  Returns (flows, groups).
    """
    m, n_groups, _ = _edf_core(active, table, use_offsets, rate, sel, due, starts, ints(0), False)
    return m, n_groups


@jit_borrowing
def _run_end(active, group, k, g):
    """The end of group ``g``'s run in ``active`` that starts at ``k`` (groups in group-id order)."""
    lo, hi = k + 1, len(active)
    while lo < hi:
        mid = (lo + hi) // 2
        if group[active[mid]] <= g:
            lo = mid + 1
        else:
            hi = mid
    return lo


@jit_borrowing
def _increasing(values, a, b):
    """Whether ``values[a:b]`` strictly increase."""
    for k in range(a + 1, b):  # noqa: SIM110 (numba compiles the loop, not a generator)
        if values[k] <= values[k - 1]:
            return False
    return True


@jit
def _edf_core(active, table, use_offsets, rate, sel, due, starts, in_order, cleared):
    """:func:`_edf_groups`, where ``in_order[slot]`` is 1 for a group whose flows with bytes left the
    caller vouches all have a path, share one due time and are listed in earliest-due-first order when
    listed by flow number (a kept Coflow of the simulator's table, ``echelon_totals._in_member_order``;
    empty: none).  Such a group's run is copied reading only each flow's bytes left, and only its first
    flow's due time is written: deciding at every flow event, nothing reads the others (they are the
    first one's).  On a coflow trace that run is nearly every active flow, and reading six more columns
    of each was about a fifth of ``echelon``'s FB2010 hour (docs/performance.md, "A kept Coflow's flows
    copied").  A run not in increasing flow numbers is taken flow by flow, like every other group.

    ``cleared``: the caller also vouches that ``active`` is in increasing flow numbers and that every
    active flow has more than EPS_BYTES left and rate 0 (the simulator: ``FlowView.clean`` and
    ``rated_before``).  A vouched run is then not read at all: while no flow before it was left out, its
    flows sit in ``active`` where ``sel`` would hold them.  Returns (flows, groups, whether the caller
    should read ``active`` as ``sel``: nothing was left out or re-ordered, and the runs were never
    copied).  Otherwise the runs not copied (all before the first flow left out, where the two agree)
    are copied at the end.  On FB2010 the copy was about a third of echelon's hour
    (docs/performance.md, "What the simulator vouches").
    """
    group, offset, reference, ref_slot, idrank = (table.group, table.offset, table.reference, table.ref_slot,
                                                  table.idrank)
    remaining, path_ptr = table.remaining, table.path_ptr
    vouched = len(in_order) > 0
    # one pass: the flows _select would cover, their due times, the runs' starts and whether any run is
    # out of order (on a coflow trace a decision covers thousands of flows: four passes over them cost
    # a third of echelon's decision)
    m = 0
    n_groups = 0
    last_group = -1
    unsorted = False
    n = len(active)
    by_flow_until = 0  # a vouched run found out of flow-number order is taken flow by flow up to here
    uncopied = 0  # cleared: sel[:uncopied] is not written; it would be active[:uncopied]
    k = 0
    while k < n:
        f = active[k]
        g = group[f]
        if vouched and k >= by_flow_until and g != last_group and in_order[g] == 1:
            end = _run_end(active, group, k, g)
            head = m
            in_flow_order = True
            if cleared:  # nothing to read: the run sits in ``active`` where ``sel`` would hold it
                if m == k:
                    uncopied = end
                else:
                    sel[m:m + end - k] = active[k:end]
                m += end - k
            else:
                previous = -1
                for j in range(k, end):
                    f = active[j]
                    if f <= previous:
                        in_flow_order = False
                        break
                    previous = f
                    rate[f] = 0.0
                    if remaining[f] > EPS_BYTES:
                        sel[m] = f
                        m += 1
            if in_flow_order:
                if m > head:
                    starts[n_groups] = head
                    n_groups += 1
                    last_group = g
                    first = active[k] if cleared else sel[head]
                    due[head] = reference[ref_slot[first]] + (offset[first] if use_offsets else 0.0)
                k = end
                continue
            m = head
            by_flow_until = end
            f = active[k]
        rate[f] = 0.0
        k += 1
        if remaining[f] <= EPS_BYTES or path_ptr[f + 1] == path_ptr[f]:
            continue
        d = reference[ref_slot[f]] + (offset[f] if use_offsets else 0.0)
        if m == 0 or g != last_group:
            starts[n_groups] = m
            n_groups += 1
            last_group = g
        elif d < due[m - 1] or (d == due[m - 1] and idrank[f] < idrank[sel[m - 1]]):
            unsorted = True
        sel[m] = f
        due[m] = d
        m += 1
    starts[n_groups] = m
    if uncopied > 0:
        if m == n and not unsorted:
            return m, n_groups, True
        sel[:uncopied] = active[:uncopied]
    if not unsorted:
        return m, n_groups, False
    for g in range(n_groups):
        a, b = starts[g], starts[g + 1]
        if vouched and in_order[group[sel[a]]] == 1 and _increasing(sel, a, b):
            continue  # in order as listed (a copied run's other due times are not written)
        ok = True
        for k in range(a + 1, b):
            if due[k] < due[k - 1] or (due[k] == due[k - 1] and idrank[sel[k]] < idrank[sel[k - 1]]):
                ok = False
                break
        if ok:
            continue
        for k in range(a + 1, b):
            f, d = sel[k], due[k]
            j = k - 1
            while j >= a and (due[j] > d or (due[j] == d and idrank[sel[j]] > idrank[f])):
                sel[j + 1] = sel[j]
                due[j + 1] = due[j]
                j -= 1
            sel[j + 1] = f
            due[j + 1] = d
    return m, n_groups, False


@jit_borrowing
def _uniform_span(lo, hi, members, sel, whole, remaining, offset, path_ptr):
    """(live members, 1 if they all share one offset else 0) of a group listed at ``[lo:hi]``
    (``members`` when ``whole``, else ``sel``): a live member has bytes left and a path."""
    live = 0
    same = 1
    first = 0.0
    for e in range(lo, hi):
        f = members[e] if whole else sel[e]
        if remaining[f] <= EPS_BYTES or path_ptr[f + 1] == path_ptr[f]:
            continue
        if live == 0:
            first = offset[f]
        elif offset[f] != first:
            same = 0
        live += 1
    return live, same


@jit_borrowing
def _group_weight(sel, a, b, idrank, weight):
    """The weight of the group ``sel[a:b]``, read off its flow with the largest id (any flow would do:
    every flow of a group carries its job's weight; this one is the original code's choice)."""
    last = sel[a]
    for k in range(a + 1, b):
        if idrank[sel[k]] > idrank[last]:
            last = sel[k]
    return weight[last]


@jit
def _listed(from_live, whole, members, sel, totals):
    """The array a walked group's span indexes (``_walk_groups``'s ``spans``): the kept live members
    (``from_live``), the table's members (``whole``) or the decision's flows."""
    if totals is not None:  # noqa: SIM102 (numba prunes a branch on ``totals is None`` alone)
        if from_live == 1:
            return totals.live_flows
    return members if whole else sel


@jit_borrowing
def _vouched(totals, slot):
    """Is ``slot`` a kept group whose members all have a path, one due time and one weight and are
    numbered in member order (``echelon_totals._in_member_order``, checked once per table layout)?
    Its weight is then any one flow's, where :func:`_group_weight` walks all of them."""
    if totals is None:
        return False
    return totals.in_order[slot] == 1


@jit
def _per_weight(key, w):
    """Smith's rule: time per weight; a negative key (the group is early) is made more negative."""
    return key / w if key >= 0 else key * w


# --------------------------------------------------------------------------- echelon
# Rule 1's three readings of what a group has left are defined one at a time by _residual_bottleneck,
# _bssi_groups and _estimated_tardiness, plain Python that no decision runs: echelon_decide gets the
# same numbers from one walk (_walk_groups, _estimates_walked), which tests/test_echelon_walk.py compares
# with these definitions bit for bit.  A change of the rule changes both.
@jit_borrowing
def _left_span(slot, a, b, members_ptr, whole):
    """Where group ``slot``'s flows are listed for what it has left: ``members[lo:hi]`` when the caller
    gave members (``whole``), else its active flows ``sel[a:b]``."""
    if whole:
        return members_ptr[slot], members_ptr[slot + 1]
    return a, b


def _link_totals(lo, hi, members, sel, whole, table):
    """A uniform group's links (in order of first use by its live members, as a walk meets them) and
    its bits left on each, summed exactly (:data:`UNITS_PER_BIT`), as ``(links, bits)``."""
    remaining, path_ptr, path_links = table.remaining, table.path_ptr, table.path_links
    units: dict = {}
    for e in range(lo, hi):
        f = members[e] if whole else sel[e]
        if remaining[f] <= EPS_BYTES or path_ptr[f + 1] == path_ptr[f]:
            continue
        for p in range(path_ptr[f], path_ptr[f + 1]):
            li = int(path_links[p])
            units[li] = units.get(li, 0) + _units(remaining[f])  # Python's integers: exact, unbounded
    return list(units), [bits_of(*divmod(total, 2**62)) for total in units.values()]


def _read_exactly(lo, hi, members, sel, whole, table, exact_above):
    """For a uniform group listed at ``[lo:hi]`` with more than ``exact_above`` live members (the rule
    reads such a group off its links' exact totals, :data:`EXACT_ABOVE`): ``(the offset its live members
    share, its links, its bits on each)`` (:func:`_link_totals`); None for any other group."""
    remaining, offset, path_ptr = table.remaining, table.offset, table.path_ptr
    live, same = _uniform_span(lo, hi, members, sel, whole, remaining, offset, path_ptr)
    if same == 0 or live <= exact_above:
        return None
    shared = next(offset[f] for f in (members[e] if whole else sel[e] for e in range(lo, hi))
                  if remaining[f] > EPS_BYTES and path_ptr[f + 1] > path_ptr[f])
    return (shared, *_link_totals(lo, hi, members, sel, whole, table))


def _residual_bottleneck(slot, sel, a, b, table, cumulative, touched, exact_above=EXACT_ABOVE):
    """max over links l and earliest-due prefixes j of ``C_j / c_l - o_j`` over what group ``slot``
    has left: every flow of ``members[members_ptr[slot]:members_ptr[slot + 1]]`` (listed by offset)
    with bytes left and a path, declared flows that have not started included; without members
    (``members_ptr`` empty) its active flows ``sel[a:b]``.  A uniform group (every such flow at one
    offset) with more than ``exact_above`` of them is read off its links' exact totals
    (:func:`_link_totals`, :data:`EXACT_ABOVE`): its largest prefix on each link is the whole.
    ``cumulative`` is zeros on entry and exit.
    """
    remaining, offset, path_ptr, path_links = table.remaining, table.offset, table.path_ptr, table.path_links
    capacity, members_ptr, members = table.capacity, table.members_ptr, table.members
    worst = -INF
    n_touched = 0
    whole = len(members_ptr) > 0
    lo, hi = _left_span(slot, a, b, members_ptr, whole)
    exact = _read_exactly(lo, hi, members, sel, whole, table, exact_above)
    if exact is not None:
        o, links, bits = exact
        for li, c in zip(links, bits):
            worst = max(worst, c / capacity[li] - o)
        return worst
    for e in range(lo, hi):
        f = members[e] if whole else sel[e]
        if remaining[f] <= EPS_BYTES or path_ptr[f + 1] == path_ptr[f]:
            continue
        bits = 8.0 * remaining[f]
        for p in range(path_ptr[f], path_ptr[f + 1]):
            li = path_links[p]
            c = cumulative[li]
            if c == 0.0:
                touched[n_touched] = li
                n_touched += 1
            c = c + bits
            cumulative[li] = c
            value = c / capacity[li] - offset[f]
            if value > worst:
                worst = value
    for t in range(n_touched):
        cumulative[touched[t]] = 0.0
    return worst


def _bssi_groups(sel, starts, n_groups, table, exact_above=EXACT_ABOVE):
    """Sincronia's BSSI order of the decision's groups on what they have left (as for
    :func:`_residual_bottleneck`), with their offsets (``kernels.group_demands``: a group's seconds on
    link l are ``max_j (C_j / c_l - (o_j - o_first))``); a uniform group of more than ``exact_above`` live
    members has its exact total over c_l instead (at least ``TINY_S``, its links listed in the same order
    of first use).  Returns group indices, most urgent first.
    """
    group, idrank, weight, members_ptr, members = (table.group, table.idrank, table.weight, table.members_ptr,
                                                   table.members)
    remaining, offset, path_ptr, capacity = table.remaining, table.offset, table.path_ptr, table.capacity
    whole = len(members_ptr) > 0
    count = 0
    for g in range(n_groups):
        lo, hi = _left_span(group[sel[starts[g]]], starts[g], starts[g + 1], members_ptr, whole)
        count += hi - lo
    flows = ints(count)
    ptr = ints(n_groups + 1)
    w = floats(n_groups)
    n = 0
    for g in range(n_groups):
        a, b = starts[g], starts[g + 1]
        w[g] = _group_weight(sel, a, b, idrank, weight)
        lo, hi = _left_span(group[sel[a]], a, b, members_ptr, whole)
        for e in range(lo, hi):
            flows[n] = members[e] if whole else sel[e]
            n += 1
        ptr[g + 1] = n
    dem_ptr, dem_link, dem_time, n_local = group_demands(flows, ptr, remaining, offset, True, path_ptr,
                                                         table.path_links, capacity)
    for g in range(n_groups):
        lo, hi = _left_span(group[sel[starts[g]]], starts[g], starts[g + 1], members_ptr, whole)
        exact = _read_exactly(lo, hi, members, sel, whole, table, exact_above)
        if exact is not None:
            _, links, bits = exact
            for d, (li, c) in enumerate(zip(links, bits), start=dem_ptr[g]):
                t = c / capacity[li]
                dem_time[d] = t if t > TINY_S else TINY_S
    return bssi_from_demands(dem_ptr, dem_link, dem_time, n_local, w)


def _estimated_tardiness(group_order, n_groups, sel, starts, due, table, now, ahead, held, cum, need,
                         touched, exact_above=EXACT_ABOVE):
    """Two estimates of the weighted tardiness of what is left if the groups went in ``group_order``,
    each link serving them one after another (list schedules; only for choosing between candidate
    orders).  Returns ``(served, held)``.

    Member j of group g ends at ``max_l (A_l + C_{j,l} / c_l)``: ``C_{j,l}`` the group's bits on l up
    to j (members in offset order), ``A_l`` the seconds the groups before g hold on l; its tardiness is
    ``now + that - due_j``, the group's the largest of its members' (at least 0).  The two differ in
    what a group ahead of its arrangement holds: *served*, everything it has left (as
    :func:`echelon_decide` serves it, as soon as possible); *held*, only what it must send before its
    due times, ``max_j (C_{j,l} / c_l - (due_j - now))`` (what the groups after it could have at no
    cost to it).  ``ahead``, ``held``, ``cum``, ``need``: zeros on entry, zeros on exit.
    """
    group, idrank, weight, remaining, offset = (table.group, table.idrank, table.weight, table.remaining,
                                                table.offset)
    path_ptr, path_links, capacity = table.path_ptr, table.path_links, table.capacity
    members_ptr, members = table.members_ptr, table.members
    whole = len(members_ptr) > 0
    total_served = 0.0
    total_held = 0.0
    for gi in range(n_groups):
        g = group_order[gi]
        a, b = starts[g], starts[g + 1]
        reference = due[a] - offset[sel[a]]
        lo, hi = _left_span(group[sel[a]], a, b, members_ptr, whole)
        worst_served = 0.0
        worst_held = 0.0
        n_touched = 0
        exact = _read_exactly(lo, hi, members, sel, whole, table, exact_above)
        if exact is not None:
            # every member due at once: the group ends on each link with its exact total there
            o, links, bits = exact
            due_f = reference + o
            slack = max(due_f - now, 0.0)
            finish_served = 0.0
            finish_held = 0.0
            for li, c in zip(links, bits):
                t = c / capacity[li]
                finish_served = max(finish_served, ahead[li] + t)
                finish_held = max(finish_held, held[li] + t)
                ahead[li] = ahead[li] + t
                held[li] = held[li] + max(t - slack, 0.0)
            worst_served = max(now + finish_served - due_f, 0.0)
            worst_held = max(now + finish_held - due_f, 0.0)
            lo = hi  # nothing left to walk
        for e in range(lo, hi):
            f = members[e] if whole else sel[e]
            if remaining[f] <= EPS_BYTES or path_ptr[f + 1] == path_ptr[f]:
                continue
            due_f = reference + offset[f]
            slack = due_f - now
            if slack < 0.0:
                slack = 0.0
            finish_served = 0.0
            finish_held = 0.0
            for p in range(path_ptr[f], path_ptr[f + 1]):
                li = path_links[p]
                if cum[li] == 0.0:
                    touched[n_touched] = li
                    n_touched += 1
                cum[li] = cum[li] + 8.0 * remaining[f] / capacity[li]
                if ahead[li] + cum[li] > finish_served:
                    finish_served = ahead[li] + cum[li]
                if held[li] + cum[li] > finish_held:
                    finish_held = held[li] + cum[li]
                if cum[li] - slack > need[li]:
                    need[li] = cum[li] - slack
            late_served = now + finish_served - due_f
            if late_served > worst_served:
                worst_served = late_served
            late_held = now + finish_held - due_f
            if late_held > worst_held:
                worst_held = late_held
        for t in range(n_touched):
            li = touched[t]
            ahead[li] = ahead[li] + cum[li]
            held[li] = held[li] + need[li]
            need[li] = 0.0
            cum[li] = 0.0
        w = _group_weight(sel, a, b, idrank, weight)
        total_served += worst_served * w
        total_held += worst_held * w
    for li in range(len(ahead)):
        ahead[li] = 0.0
        held[li] = 0.0
    return total_served, total_held


@jit_borrowing
def _summed_exactly(lo, hi, members, sel, whole, table, gl_link, gl_hi, gl_lo, n_gl, hi_on, lo_on, seen):
    """A uniform group's links in order of first use by its live members, from ``gl_link[n_gl]`` on,
    with its exact total on each (``gl_hi``/``gl_lo``; ``echelon_totals``).  ``hi_on``, ``lo_on`` and
    ``seen`` (per link) are zeros on entry and exit.  Returns (the end, its first live member)."""
    remaining, path_ptr, path_links = table.remaining, table.path_ptr, table.path_links
    first = n_gl
    rep = -1
    for e in range(lo, hi):
        f = members[e] if whole else sel[e]
        if remaining[f] <= EPS_BYTES or path_ptr[f + 1] == path_ptr[f]:
            continue
        if rep < 0:
            rep = f
        u = _units(remaining[f])
        for p in range(path_ptr[f], path_ptr[f + 1]):
            li = path_links[p]
            if seen[li] == 0:
                seen[li] = 1
                gl_link[n_gl] = li
                n_gl += 1
            hi_on[li], lo_on[li] = _added(hi_on[li], lo_on[li], u)
    for d in range(first, n_gl):
        li = gl_link[d]
        gl_hi[d] = hi_on[li]
        gl_lo[d] = lo_on[li]
        hi_on[li] = 0
        lo_on[li] = 0
        seen[li] = 0
    return n_gl, rep


@jit_borrowing
def _one_offset(m_flow, lo, hi, offset):
    """1 if the walked members ``m_flow[lo:hi]`` (at least one) share one offset, else 0."""
    for k in range(lo + 1, hi):
        if offset[m_flow[k]] != offset[m_flow[lo]]:
            return 0
    return 1 if hi > lo else 0


@jit
def _walk_groups(sel, starts, n_groups, table, totals, exact_above):
    """Rule 1's three readings of what each group has left, in one walk over its members (each flow
    with bytes left, each link of its path): the same operations in the same order as
    :func:`_residual_bottleneck`, :func:`_bssi_groups` and the per-link seconds of
    :func:`_estimated_tardiness`, so every number is theirs bit for bit (``tests/test_echelon_walk.py``).
    Those three define the rule and walked the members four times per decision (bench-k8 at 20
    iterations: some 1,800 members for 40 active flows).  A uniform group (its live members at one
    offset) with more than ``exact_above`` of them is read off its links' exact totals
    (:data:`EXACT_ABOVE`): summed here, or, for a group ``totals`` keeps (``echelon_totals.py``; None:
    none), brought up to date from what changed since the last decision.

    Returns ``(keys, w, order_bssi, uniform, m_flow, m_ptr, e_link, e_cum, g_mptr, g_lptr, gl_link,
    gl_cum)``: each group's Smith key (its residual bottleneck per weight), weight, BSSI's group order,
    whether it is uniform, and for the estimates the members walked (``m_flow[g_mptr[g]:g_mptr[g + 1]]``;
    a uniform group's first live member only), each one's links and cumulative seconds on them
    (``e_link``/``e_cum[m_ptr[k]:m_ptr[k + 1]]``; none for a uniform group) and each group's links with
    its total seconds on them (``gl_link``/``gl_cum[g_lptr[g]:g_lptr[g + 1]]``).
    """
    group, idrank, weight, remaining, offset = (table.group, table.idrank, table.weight, table.remaining,
                                                table.offset)
    path_ptr, path_links, capacity = table.path_ptr, table.path_links, table.capacity
    members_ptr, members = table.members_ptr, table.members
    whole = len(members_ptr) > 0
    n_global = len(capacity)
    # a group read off kept totals lists one member and at most its links; the others what they have left
    kept_links = ints(n_groups)
    # where each walked group's members are listed, spans[g]:spans[g + n_groups]: in ``members`` (``sel``
    # without them), or for a kept group with few left live, its live members (``from_live``;
    # ``echelon_totals.live_members``)
    spans = ints(2 * n_groups)
    from_live = ints(n_groups)
    for g in range(n_groups):
        kept_links[g] = -1
        lo, hi = _left_span(group[sel[starts[g]]], starts[g], starts[g + 1], members_ptr, whole)
        spans[g], spans[g + n_groups] = lo, hi
    # numba compiles away a branch on ``totals is None`` alone (None: nothing kept), not a combined one
    if totals is not None:  # noqa: SIM102
        if whole:
            for g in range(n_groups):
                slot = group[sel[starts[g]]]
                kept_links[g] = kept_and_live(totals, slot, table, exact_above)
                if kept_links[g] < 0 and totals.kept[slot] == 1:
                    spans[g], spans[g + n_groups] = live_members(totals, slot, members_ptr, members)
                    from_live[g] = 1
    n_members = 0
    n_entries = 0
    big = False  # a group summed exactly here (kept, or listing more than exact_above)
    for g in range(n_groups):
        if kept_links[g] >= 0:
            big = True
            n_members += 1
            n_entries += kept_links[g]
            continue
        lo, hi = spans[g], spans[g + n_groups]
        big = big or hi - lo > exact_above
        listed = _listed(from_live[g], whole, members, sel, totals)
        for e in range(lo, hi):
            f = listed[e]
            if remaining[f] <= EPS_BYTES or path_ptr[f + 1] == path_ptr[f]:
                continue
            n_members += 1
            n_entries += path_ptr[f + 1] - path_ptr[f]
    keys = floats(n_groups)
    w = floats(n_groups)
    uniform = ints(n_groups)
    m_flow = ints(n_members)
    m_ptr = ints(n_members + 1)
    e_link = ints(n_entries)
    e_cum = floats(n_entries)
    g_mptr = ints(n_groups + 1)
    g_lptr = ints(n_groups + 1)
    gl_link = ints(n_entries)
    gl_cum = floats(n_entries)
    exact_entries = n_entries if big else 0
    gl_hi = ints(exact_entries)
    gl_lo = ints(exact_entries)
    dem_link = ints(n_entries)
    dem_time = floats(n_entries)
    bits_on = floats(n_global)  # per link: the group's bits so far (the residual bottleneck's sum)
    cum = floats(n_global)  # per link: its seconds so far (BSSI's demand and the estimates' sum)
    most = floats(n_global)
    hi_on = ints(n_global if big else 0)  # per link: a uniform group's exact total (echelon_totals)
    lo_on = ints(n_global if big else 0)
    seen = ints(n_global)
    local_of = _unnumbered(n_global)
    n_local = 0
    n_m = 0
    n_e = 0
    n_gl = 0
    for g in range(n_groups):
        a, b = starts[g], starts[g + 1]
        slot = group[sel[a]]
        w[g] = weight[sel[a]] if _vouched(totals, slot) else _group_weight(sel, a, b, idrank, weight)
        lo, hi = spans[g], spans[g + n_groups]
        worst = -INF
        first = n_gl
        exact = False
        rep = -1
        if kept_links[g] >= 0:
            if totals is not None:  # always, here: kept_links are -1 without totals
                sort_live_links(totals, slot, table)
                n_gl, rep = live_links(totals, slot, table, gl_link, gl_hi, gl_lo, n_gl)
            exact = True
        elif hi - lo > exact_above:  # only a group listing that many can have that many live
            live, same = _uniform_span(lo, hi, members, sel, whole, remaining, offset, path_ptr)
            if live > exact_above and same == 1:
                n_gl, rep = _summed_exactly(lo, hi, members, sel, whole, table, gl_link, gl_hi, gl_lo, n_gl,
                                            hi_on, lo_on, seen)
                exact = True
        if exact:
            uniform[g] = 1
            o = offset[rep]
            m_flow[n_m] = rep
            n_m += 1
            m_ptr[n_m] = n_e
            for d in range(first, n_gl):
                li = gl_link[d]
                if local_of[li] < 0:
                    local_of[li] = n_local
                    n_local += 1
                t = bits_of(gl_hi[d], gl_lo[d]) / capacity[li]
                if t - o > worst:
                    worst = t - o
                dem_time[d] = t if t > TINY_S else TINY_S
                dem_link[d] = local_of[li]
                gl_cum[d] = t
        else:
            o_first = INF
            listed = _listed(from_live[g], whole, members, sel, totals)
            for e in range(lo, hi):
                f = listed[e]
                if remaining[f] <= EPS_BYTES or path_ptr[f + 1] == path_ptr[f]:
                    continue
                if o_first == INF:
                    o_first = offset[f]
                bits = 8.0 * remaining[f]
                m_flow[n_m] = f
                for p in range(path_ptr[f], path_ptr[f + 1]):
                    li = path_links[p]
                    c = bits_on[li] + bits
                    bits_on[li] = c
                    value = c / capacity[li] - offset[f]
                    if value > worst:
                        worst = value
                    if local_of[li] < 0:
                        local_of[li] = n_local
                        n_local += 1
                    if seen[li] == 0:
                        seen[li] = 1
                        gl_link[n_gl] = li
                        n_gl += 1
                    t = cum[li] + 8.0 * remaining[f] / capacity[li]
                    cum[li] = t
                    if t - (offset[f] - o_first) > most[li]:
                        most[li] = t - (offset[f] - o_first)
                    e_link[n_e] = li
                    e_cum[n_e] = t
                    n_e += 1
                n_m += 1
                m_ptr[n_m] = n_e
            for d in range(first, n_gl):
                li = gl_link[d]
                # a link the group is early on still carries its bytes: a sliver keeps it a user there
                dem_time[d] = most[li] if most[li] > TINY_S else TINY_S
                dem_link[d] = local_of[li]
                gl_cum[d] = cum[li]
                bits_on[li] = 0.0
                cum[li] = 0.0
                most[li] = 0.0
                seen[li] = 0
            uniform[g] = _one_offset(m_flow, g_mptr[g], n_m, offset)
        g_mptr[g + 1] = n_m
        g_lptr[g + 1] = n_gl
        keys[g] = _per_weight(worst, w[g])
    order_bssi = bssi_from_demands(g_lptr, dem_link, dem_time, n_local, w) if n_groups > 1 else ints(0)
    return keys, w, order_bssi, uniform, m_flow, m_ptr, e_link, e_cum, g_mptr, g_lptr, gl_link, gl_cum


@jit_borrowing
def _estimates_walked(group_order, n_groups, sel, starts, due, offset, w, now, m_flow, m_ptr, e_link,
                      e_cum, g_mptr, g_lptr, gl_link, gl_cum, uniform, ahead, held, need):
    """:func:`_estimated_tardiness` on what :func:`_walk_groups` kept: the same numbers, without
    walking the members' paths again.  ``ahead``, ``held``, ``need``: zeros on entry and on exit.

    A uniform group (``uniform``: its live members at one offset) is read off its links' totals
    (``gl_cum``) instead of its members: they share one due time and slack, a member's cumulative seconds
    on a link only grow along the members (each adds a non-negative time), and ``now + x - due`` and ``x
    - slack`` are non-decreasing in ``x`` in floating point too, so every maximum the member walk takes
    is the value at the link's last member, its total: the same numbers bit for bit; for a group read
    off exact totals, the rule's own definition (:func:`_estimated_tardiness`).  One pass over the
    group's links."""
    total_served = 0.0
    total_held = 0.0
    for gi in range(n_groups):
        g = group_order[gi]
        a = starts[g]
        reference = due[a] - offset[sel[a]]
        worst_served = 0.0
        worst_held = 0.0
        # one reading per member (its links and cumulative seconds), or for a uniform group one reading
        # of the group's links and totals, at the due time its members share
        totals = uniform[g] and g_mptr[g + 1] > g_mptr[g]
        readings = 1 if totals else g_mptr[g + 1] - g_mptr[g]
        links = gl_link if totals else e_link
        cums = gl_cum if totals else e_cum
        for r in range(readings):
            k = g_mptr[g] + r
            due_f = reference + offset[m_flow[k]]
            slack = due_f - now
            if slack < 0.0:
                slack = 0.0
            finish_served = 0.0
            finish_held = 0.0
            lo, hi = (g_lptr[g], g_lptr[g + 1]) if totals else (m_ptr[k], m_ptr[k + 1])
            for q in range(lo, hi):
                li = links[q]
                t = cums[q]
                if ahead[li] + t > finish_served:
                    finish_served = ahead[li] + t
                if held[li] + t > finish_held:
                    finish_held = held[li] + t
                if t - slack > need[li]:
                    need[li] = t - slack
            late_served = now + finish_served - due_f
            if late_served > worst_served:
                worst_served = late_served
            late_held = now + finish_held - due_f
            if late_held > worst_held:
                worst_held = late_held
        for d in range(g_lptr[g], g_lptr[g + 1]):
            li = gl_link[d]
            ahead[li] = ahead[li] + gl_cum[d]
            held[li] = held[li] + need[li]
            need[li] = 0.0
        total_served += worst_served * w[g]
        total_held += worst_held * w[g]
    for li in range(len(ahead)):
        ahead[li] = 0.0
        held[li] = 0.0
    return total_served, total_held


@jit_borrowing
def _past_run(sel, k, b, end):
    """The first position from k on whose flow number is at least ``end`` (b if none; ``sel[k:b]``
    increasing): galloping, then halving, so stepping over a run of L flows reads about 2 log L."""
    lo = k
    hi = k
    step = 1
    while hi < b and sel[hi] < end:
        lo = hi + 1
        hi += step
        step *= 2
    if hi > b:
        hi = b
    while lo < hi:
        mid = (lo + hi) >> 1
        if sel[mid] < end:
            lo = mid + 1
        else:
            hi = mid
    return lo


@jit_borrowing
def _note_served(served, n_served, f):
    """List flow f among those given a rate (``served``); -1 stays -1 (not listed), and a full buffer
    makes it -1 (the caller then finds them itself)."""
    if n_served < 0 or n_served == len(served):
        return -1
    served[n_served] = f
    return n_served + 1


@jit_borrowing
def _serve_runs(sel, a, b, totals, slot, table, residual, rate, served, n_served, place, open_words):
    """Serve a vouched kept Coflow's flows ``sel[a:b]`` one after another on ``residual``, as the
    every-flow rule does, skipping what would get nothing (``echelon_runs``): each run of flows whose run
    link is full (residual only falls, so every flow of the run would get nothing, and its rate is 0
    already), and, where the slot's runs agree on an order of their other-end links, every flow whose
    other-end link is full (only flows whose bit is in both the run's live bits, brought up to date by
    ``refresh``, and ``open_bits`` are visited, in member order).  A link that fills leaves
    ``open_bits``, which so always holds every link with room (and maybe some full ones).  On FB2010
    the runs skipped are 86 % of the flows a decision covers and the full other ends 98 % of the rest
    (docs/performance.md, "Runs of flows on a full link stepped over" and "Flows whose other end is
    full skipped").  ``place``: all -1, for the slot's links' places (returned so); ``open_words``:
    scratch of a bit per link (``open_bits``).  Returns ``n_served`` with the flows given a rate listed
    (:func:`_note_served`).  It borrows the kept totals (``kernels.jit_borrowing``): counting references
    on their 32 arrays at each call took more than the runs skipped here saved."""
    path_ptr, path_links, capacity = table.path_ptr, table.path_links, table.capacity
    refresh(totals, slot, table.members, table.remaining, path_ptr, path_links)
    run_of, run_links, run_stop = totals.run_of, totals.run_links, totals.run_stop
    bits_at, bits, end_place = totals.bits_at, totals.bits, totals.end_place
    k = a
    if bits_at[run_of[sel[a]]] < 0:  # the runs disagree on an order of their other ends: flow by flow
        while k < b:
            f = sel[k]
            run = run_links[run_of[f]]
            end = _past_run(sel, k + 1, b, run_stop[run_of[f]])
            while k < end and residual[run] > 0.0:
                f = sel[k]
                k += 1
                spare = _path_min(f, path_ptr, path_links, residual)
                if spare > 0:
                    rate[f] = spare
                    _consume(f, spare, path_ptr, path_links, residual, capacity)
                    mark_moved(totals, slot, f)
                    n_served = _note_served(served, n_served, f)
            k = end
        return n_served
    lo, hi = totals.ends_ptr[slot], totals.ends_ptr[slot + 1]
    ends = totals.ends
    open_bits = open_words[:(hi - lo + 63) >> 6]  # the slot's other-end links with room
    for w in range(len(open_bits)):
        open_bits[w] = 0
    n_open = 0
    for i in range(lo, hi):
        if residual[ends[i]] > 0.0:
            open_bits[(i - lo) >> 6] |= 1 << ((i - lo) & 63)
            n_open += 1
    if n_open == 0:  # every member's other end is full: none gets anything (FB2010 offline: a slot in six)
        return n_served
    for i in range(lo, hi):
        place[ends[i]] = i - lo
    # run by run: one whose link is full, or whose live members' other ends are all full, is passed
    # over without a look at its flows
    for r in range(run_of[sel[a]], run_of[sel[b - 1]] + 1):
        run = run_links[r]
        c = _next_open(bits, bits_at[r], open_bits, 0) if residual[run] > 0.0 else -1
        while c >= 0 and residual[run] > 0.0:
            # the first flow of run r whose place is c or later (later when c's member is live but not
            # started: f then gets what its path has, nothing if its own other end is full)
            k = _first_at(sel, k, b, run_of, end_place, r, c)
            if k == b or run_of[sel[k]] != r:
                break
            f = sel[k]
            k += 1
            spare = _path_min(f, path_ptr, path_links, residual)
            if spare > 0:
                rate[f] = spare
                _consume(f, spare, path_ptr, path_links, residual, capacity)
                mark_moved(totals, slot, f)
                n_served = _note_served(served, n_served, f)
                for p in range(path_ptr[f], path_ptr[f + 1]):
                    li = path_links[p]
                    if residual[li] <= 0.0 and place[li] >= 0:
                        open_bits[place[li] >> 6] &= ~(1 << (place[li] & 63))
            c = _next_open(bits, bits_at[r], open_bits, end_place[f] + 1)
    for i in range(lo, hi):
        place[ends[i]] = -1
    return n_served


@jit_borrowing
def _next_open(bits, base, open_bits, c):
    """The first place at or after ``c`` whose bit is set in both the run's ``bits[base:]`` and
    ``open_bits``; -1 if none."""
    w = c >> 6
    if w >= len(open_bits):
        return -1
    word = bits[base + w] & open_bits[w] & ~((1 << (c & 63)) - 1)
    while word == 0:
        w += 1
        if w == len(open_bits):
            return -1
        word = bits[base + w] & open_bits[w]
    low = word & -word
    return (w << 6) + (63 if low < 0 else int(math.log2(float(low))))


@jit_borrowing
def _first_at(sel, k, b, run_of, end_place, r, c):
    """The first position from k on (below ``b``) whose flow is in run ``r`` at place ``c`` or later, or in
    a later run (``b`` if none): a vouched slot's flows, in member order, go run by run and along each
    run place by place, so (run, place) increases along ``sel[k:b]``.  Galloping, then halving: one
    search per flow served, where finding the run's first and last flow and then the place took three
    (docs/performance.md, "Where echelon's hour goes now")."""
    lo = k
    hi = k
    step = 1
    while hi < b and (run_of[sel[hi]] < r or (run_of[sel[hi]] == r and end_place[sel[hi]] < c)):
        lo = hi + 1
        hi += step
        step *= 2
    if hi > b:
        hi = b
    while lo < hi:
        mid = (lo + hi) >> 1
        if run_of[sel[mid]] < r or (run_of[sel[mid]] == r and end_place[sel[mid]] < c):
            lo = mid + 1
        else:
            hi = mid
    return lo


@jit
def echelon_decide(active, table, now, every_flow, rate, order, totals, exact_above, served, ranked, buffers,
                   cleared):
    """The ``echelon`` scheduler (module docstring; ``schedulers/echelon.py``).  Returns ``(count,
    n_served)``: the count of ranked flows written to ``order`` (most urgent first; 0 when not
    ``ranked``, which only ``every_flow`` allows: the coflow rule's back-fill reads the order), and how
    many flows got a rate, listed in ``served`` (-1: not listed: under the coflow rule, or more than
    ``served`` holds; deciding at every flow event each flow given a rate fills a link, so a buffer of
    one entry per link holds them all).  Flows with no bytes left or no path get rate 0 and no rank.
    ``buffers``: three arrays the caller keeps between decisions (flow numbers, due times and the
    groups' starts: at least the table's flow count, one more for the starts); a decision writes what
    it reads, so their contents do not matter.  Allocated per decision, they cost the FB2010 hour 8 MiB
    of fragmented heap at its peak (docs/performance.md, "Memory at trace scale").  ``cleared``: the
    caller vouches ``_edf_core``'s conditions (every active flow's rate 0, none dust, ``active`` in
    flow-number order), so a kept Coflow's run is not read before it is served.

    ``table``: the flow table's arrays (``columns.TableArrays``).  Its ``members_ptr``/``members``: per
    group slot, every flow of the group in offset order (declared, active or finished; what is finished
    has no bytes left), or empty when the caller knows only the active flows.  ``every_flow``: the
    caller decides again at every flow start and finish; when it does not (the coflow rescheduling
    rule), a Coflow's flows share its paths max-min fairly and a staggered EchelonFlow's get
    just-in-time rates instead of going one after another, so that no capacity idles between decisions.
    """
    remaining, offset, path_ptr, path_links, capacity = (table.remaining, table.offset, table.path_ptr,
                                                         table.path_links, table.capacity)
    group = table.group
    n = len(active)
    sel, due, starts = buffers[0][:n], buffers[1][:n], buffers[2][:n + 1]
    # deciding at every flow event, kept Coflows' runs are copied as they come (``_edf_core``)
    in_order = ints(0)
    if totals is not None:  # noqa: SIM102 (numba compiles away a branch on ``totals is None`` alone)
        if every_flow:
            in_order = totals.in_order
    m, n_groups, as_active = _edf_core(active, table, True, rate, sel, due, starts, in_order, cleared)
    if as_active:
        sel = active
    n_links = len(capacity)
    # scratch of the coflow rule's just-in-time rates and max-min filling (``every_flow`` needs none)
    scratch = 0 if every_flow else n_links
    cumulative = floats(scratch)
    touched = ints(scratch)
    residual = _copied(capacity)
    place = _unnumbered(n_links if every_flow and len(in_order) > 0 else 0)  # for ``_serve_runs``
    open_words = unset_ints((len(place) + 63) >> 6)  # its other-end links with room, one bit each

    group_order = ints(n_groups)  # one group (or none): nothing to order
    if n_groups > 1:
        # Smith's order, and the same groups in Sincronia's order generalised to offsets: BSSI's kept
        # unless both list-schedule estimates say Smith's is better by more than BSSI_MARGIN
        # (docs/scheduler-design.md, Rule 1b); one walk over the members gives all three readings
        (keys, w, other, uniform, m_flow, m_ptr, e_link, e_cum, g_mptr, g_lptr, gl_link,
         gl_cum) = _walk_groups(sel, starts, n_groups, table, totals, exact_above)
        group_order = stable_argsort(keys, n_groups)
        ahead = floats(n_links)
        held = floats(n_links)
        need = floats(n_links)
        smith_served, smith_held = _estimates_walked(
            group_order, n_groups, sel, starts, due, offset, w, now, m_flow, m_ptr, e_link, e_cum, g_mptr,
            g_lptr, gl_link, gl_cum, uniform, ahead, held, need)
        bssi_served, bssi_held = _estimates_walked(
            other, n_groups, sel, starts, due, offset, w, now, m_flow, m_ptr, e_link, e_cum, g_mptr,
            g_lptr, gl_link, gl_cum, uniform, ahead, held, need)
        keep = 1.0 + BSSI_MARGIN
        if bssi_served < smith_served * keep or bssi_held < smith_held * keep:
            group_order = other
    # each flow's bits, for the just-in-time rates of staggered groups under the coflow rule only
    bits = floats(0 if every_flow else m)
    if not every_flow:
        for k in range(m):
            bits[k] = 8.0 * remaining[sel[k]]
    local_of = _unnumbered(scratch)
    pos = 0
    n_served = 0 if every_flow else -1
    for gi in range(n_groups):
        g = group_order[gi]
        a, b = starts[g], starts[g + 1]
        if every_flow:
            # deciding at every flow start and finish, every group goes as soon as possible, one flow
            # after another (earliest due first), staggered or not
            if ranked:
                for k in range(a, b):
                    order[pos] = sel[k]
                    pos += 1
            if totals is not None:  # noqa: SIM102 (numba prunes a branch on ``totals is None`` alone)
                if len(in_order) > 0 and in_order[group[sel[a]]] == 1:
                    n_served = _serve_runs(sel, a, b, totals, group[sel[a]], table, residual, rate, served,
                                           n_served, place, open_words)
                    continue
            for k in range(a, b):
                f = sel[k]
                spare = _path_min(f, path_ptr, path_links, residual)
                if spare > 0:
                    rate[f] = spare
                    _consume(f, spare, path_ptr, path_links, residual, capacity)
                    if totals is not None:
                        mark_moved(totals, group[f], f)
                    n_served = _note_served(served, n_served, f)
            continue
        staggered = False
        for k in range(a, b):
            order[pos] = sel[k]
            pos += 1
            if offset[sel[k]] != offset[sel[a]]:
                staggered = True
        t_star = INF
        if staggered:
            # just in time, between decisions that come only at flow starts and group completions: every
            # flow lands at d_j + t*, t* the least tardiness left on what remains, so the whole group
            # keeps moving (infinite when a link of the group is full already: its flows go at once)
            t_star = _bottleneck(sel, bits, due, now, a, b, path_ptr, path_links, residual, cumulative,
                                 touched)
        if t_star < INF:
            for k in range(a, b):
                f = sel[k]
                horizon = due[k] + t_star - now
                want = bits[k] / horizon if horizon > 0 else INF
                spare = _path_min(f, path_ptr, path_links, residual)
                give = want if want <= spare else spare
                if give > 0:
                    rate[f] = give
                    _consume(f, give, path_ptr, path_links, residual, capacity)
        elif staggered:
            for k in range(a, b):  # as soon as possible, one flow after another (earliest due first)
                f = sel[k]
                spare = _path_min(f, path_ptr, path_links, residual)
                if spare > 0:
                    rate[f] = spare
                    _consume(f, spare, path_ptr, path_links, residual, capacity)
        else:
            _fill(sel[a:b], b - a, path_ptr, path_links, residual, rate, local_of)
            for k in range(a, b):
                f = sel[k]
                if rate[f] > 0.0:
                    _consume(f, rate[f], path_ptr, path_links, residual, capacity)
    if not every_flow:
        # Deciding at every flow event, every group went one flow after another, each flow taking the
        # least residual on its path, which leaves that link at exactly 0 (``_consume``); residual only
        # falls, so every ranked flow has a full link and back-filling would give nothing: skipped.
        _backfill(order, m, path_ptr, path_links, residual, capacity, rate)
        if totals is not None:  # the flows that got a rate move: the kept totals' next refresh reads them
            for k in range(m):
                if rate[sel[k]] > 0.0:
                    mark_moved(totals, group[sel[k]], sel[k])
    return pos, n_served


# --------------------------------------------------------------------------- the paper's sketch
@jit
def jit_decide(active, table, now, use_offsets, order_by, rate, order):
    """The paper's Varys adaptation, with the ideal-finish offsets as its one knob (``echelon-varys``;
    with ``use_offsets`` false it is Varys without CoflowSim's spare split): groups by ``order_by`` on
    their active flows, just-in-time rates ``b_j / (d_j + t* - now)`` group by group against what
    earlier groups left, back-fill.  Returns the count of ranked flows written to ``order``."""
    remaining, offset, idrank, weight = table.remaining, table.offset, table.idrank, table.weight
    path_ptr, path_links, capacity = table.path_ptr, table.path_links, table.capacity
    n = len(active)
    sel = ints(n)
    due = floats(n)
    starts = ints(n + 1)
    m, n_groups = _edf_groups(active, table, use_offsets, rate, sel, due, starts)
    bits = floats(m)
    offs = floats(m)
    for k in range(m):
        f = sel[k]
        bits[k] = 8.0 * remaining[f]
        offs[k] = offset[f] if use_offsets else 0.0

    n_links = len(capacity)
    cumulative = floats(n_links)
    touched = ints(n_links)
    residual = _copied(capacity)

    keys = floats(n_groups)
    no_slack = floats(m)
    if order_by == ORDER_BOTTLENECK:
        base, shift = offs, 0.0
    elif order_by == ORDER_VOLUME:
        base, shift = no_slack, 0.0
    else:
        base, shift = due, now
    for g in range(n_groups):
        a, b = starts[g], starts[g + 1]
        key = _bottleneck(sel, bits, base, shift, a, b, path_ptr, path_links, capacity, cumulative, touched)
        keys[g] = _per_weight(key, _group_weight(sel, a, b, idrank, weight))
    group_order = stable_argsort(keys, n_groups)

    pos = 0
    for gi in range(n_groups):
        g = group_order[gi]
        a, b = starts[g], starts[g + 1]
        for k in range(a, b):
            order[pos] = sel[k]
            pos += 1
        t_star = _bottleneck(sel, bits, due, now, a, b, path_ptr, path_links, residual, cumulative, touched)
        if t_star == INF:
            continue
        for k in range(a, b):
            f = sel[k]
            horizon = due[k] + t_star - now
            want = bits[k] / horizon if horizon > 0 else INF
            spare = _path_min(f, path_ptr, path_links, residual)
            give = want if want <= spare else spare
            if give <= 0:
                continue
            rate[f] = give
            _consume(f, give, path_ptr, path_links, residual, capacity)
    _backfill(order, m, path_ptr, path_links, residual, capacity, rate)
    return m
