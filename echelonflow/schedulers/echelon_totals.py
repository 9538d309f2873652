"""Each uniform group's bits left per link, kept exactly from one ``echelon`` decision to the next.

``echelon`` reads a group whose live members share one offset (every Coflow) and that has more than
``echelon_kernels.EXACT_ABOVE`` of them off its links' exact totals (rule 1's key, BSSI's demands and
the estimates; smaller groups are summed in member order, docs/scheduler-design.md says why).  Walking
every member of such groups was most of a decision on coflow traces (FB2010: some 24,000 members walked
per decision for the 1 % of flows that moved since the one before).  The totals are sums of integers
(1/256-bit units, :data:`UNITS_PER_BIT`), so a total kept by adding each member's change is the total
walked afresh, bit for bit, whatever the order: this module keeps them, and ``_walk_groups`` reads a
kept group instead of walking it, with the same numbers (``tests/test_echelon_totals.py``).

What is kept, for a table whose flows, paths and members stay put (``FlowTable.layout``): per group slot
that lists more than that many members, all those with a path at one offset, its links (entries), each
entry's units and count of live members, and the entry's members in member order with a pointer to the
first live one (a walk meets a group's links in the order of their first live member and path position:
BSSI numbers links so, and breaks ties by that number).  A decision refreshes only the groups it
covers, and of each only the members a decision gave a rate since its last refresh (the kernel lists
them, :func:`mark_moved`: in the simulator bytes move by rates alone), comparing each one's bytes left
with the value last seen; a member that changed moves its entries' sums.

Same conventions as ``kernels.py``; kept Python 3.9 compatible.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from echelonflow.schedulers.echelon_runs import open_end_bits, runs_of
from echelonflow.schedulers.kernels import (
    EPS_BYTES,
    _unnumbered,
    flags,
    floats,
    ints,
    jit,
    jit_borrowing,
    small_ints,
    stable_argsort,
)

#: A uniform group's bits on a link are summed exactly, as integers counting 1/256 bit: a sum of
#: integers does not depend on the order of its terms, so a total kept up to date by adding and
#: subtracting one flow's change is the total walked afresh, bit for bit.  A flow holds at most 2**62
#: units (2**54 bits, some 2.2 PB: twice the largest flow any input may declare, ``limits.SIZE_BYTES``,
#: wire overhead included); a total is two integers, ``hi * 2**62 + lo``, so no sum overflows.
UNITS_PER_BIT = 256.0
BASE = 4611686018427387904  # 2**62
BASE_FLOAT = 4611686018427387904.0


class CoflowTotals(NamedTuple):
    """The kept totals (module docstring).  ``kept[slot]``: 1 if the slot's group is kept.  A slot's
    entries are ``ent_ptr[slot]:ent_ptr[slot + 1]``; entry ``ent`` is link ``ent_link[ent]`` with
    ``ent_hi[ent] * 2**62 + ent_lo[ent]`` units and ``ent_live[ent]`` live members, listed by member
    position (member order, then path order) at ``ep_pos[ep_ptr[ent]:ep_ptr[ent + 1]]``, the first live
    one at ``ent_first[ent]``.
    Per path entry p of a kept member: its place ``ep_of[p]`` among its entry's, and its entry: where
    the kept slots times the links are no more than the path entries (FB2010: 74 x 300 against 1.4
    million), ``ent_map[map_base[slot] + link]`` per kept slot and link, else ``ent_of[p]``
    (:func:`_entry`); no place's path index is kept (:func:`_in_path_order`): 10 MiB less on
    FB2010.  Per flow: the bytes left last seen and whether it was live (its units are those of the
    bytes last seen while live, else 0: recomputed, not kept, 8 bytes a flow less).  Per kept slot,
    the flows a decision gave a rate since the slot's last refresh (:func:`mark_moved`):
    ``moved_head[slot]`` is 0 or the first one + 1, and ``moved_next[f]`` is 0 (not listed), 1 (the
    last) or the next one + 2.  ``in_order[slot]``: 1 if
    the kept slot's members all have a path, one reference slot and one weight, and are numbered in
    member order (:func:`_in_member_order`).  For such slots, the runs of members that share a link
    (``run_last``, ``run_of``, ``run_links``, ``run_stop``: ``echelon_runs.runs_of``) and the links at
    their other end (``ends_ptr``, ``ends``, ``end_place``, ``bits_at``, ``bits``:
    ``echelon_runs.open_end_bits``; a member's bit follows its liveness, :func:`refresh`).
    ``live_flows[members_ptr[slot]:][:live_count[slot]]``: a kept slot's members that were live when
    last listed, in member order (-1: a member came back to life since, list them afresh;
    :func:`live_members`).  ``link_order[ent_ptr[slot]:][:link_count[slot]]``: a kept slot's entries
    with a live member in the order :func:`sort_live_links` sorts them (-1: none kept, or a member died or
    came back to life since: sort them afresh)."""

    kept: Any
    slot_live: Any
    ent_ptr: Any
    ent_link: Any
    ent_hi: Any
    ent_lo: Any
    ent_live: Any
    ent_first: Any
    ep_ptr: Any
    ep_pos: Any
    ep_of: Any
    ent_of: Any
    ent_map: Any
    map_base: Any
    last: Any
    alive: Any
    moved_head: Any
    moved_next: Any
    in_order: Any
    run_last: Any
    run_of: Any
    run_links: Any
    run_stop: Any
    ends_ptr: Any
    ends: Any
    end_place: Any
    bits_at: Any
    bits: Any
    live_flows: Any
    live_count: Any
    link_order: Any
    link_count: Any


@jit
def _units(remaining_bytes):
    """A flow's bits left in the exact units of :data:`UNITS_PER_BIT`, rounded to the nearest unit."""
    scaled = 8.0 * remaining_bytes * UNITS_PER_BIT
    if scaled >= BASE_FLOAT:
        raise ValueError("a flow has 2**54 bits or more left: beyond what echelon sums exactly")
    return int(scaled + 0.5)


@jit
def _added(hi, lo, units):
    """The total ``hi * 2**62 + lo`` (``0 <= lo < 2**62``) plus ``units`` (``|units| < 2**62``), in the
    same form."""
    lo = lo + units
    if lo >= BASE:
        return hi + 1, lo - BASE
    if lo < 0:
        return hi - 1, lo + BASE
    return hi, lo


@jit
def bits_of(hi, lo):
    """A total's bits as a float: a function of the exact total alone, however it was summed."""
    return (hi * BASE_FLOAT + lo) / UNITS_PER_BIT


@jit_borrowing
def _statically_uniform(members_ptr, members, offset, path_ptr, slot):
    """1 if every member of ``slot`` with a path has one offset (and there is one): its live members
    then always share it, whatever has finished."""
    have = 0
    first = 0.0
    for e in range(members_ptr[slot], members_ptr[slot + 1]):
        f = members[e]
        if path_ptr[f + 1] == path_ptr[f]:
            continue
        if have == 0:
            first = offset[f]
            have = 1
        elif offset[f] != first:
            return 0
    return have


@jit_borrowing
def _in_member_order(members_ptr, members, ref_slot, weight, path_ptr, slot):
    """1 if every member of ``slot`` has a path, one reference slot and one weight, and the flow numbers
    increase along its members.  For a kept (uniform) slot its active flows then share one due time and,
    listed by flow number, are in earliest-due-first order (member order: offset, then flow id), which
    is what lets a decision copy them as they come (``echelon_kernels._edf_core``) and read the group's
    weight off any one of them."""
    lo, hi = members_ptr[slot], members_ptr[slot + 1]
    for e in range(lo, hi):
        f = members[e]
        if (path_ptr[f + 1] == path_ptr[f] or ref_slot[f] != ref_slot[members[lo]]
                or weight[f] != weight[members[lo]]):
            return 0
        if e > lo and f <= members[e - 1]:
            return 0
    return 1


@jit
def _kept_slots(members_ptr, members, offset, path_ptr, exact_above):
    """Which slots to keep (uniform, listing more than ``exact_above`` members), and how many path
    entries the kept members have."""
    n_slots = len(members_ptr) - 1
    kept = ints(n_slots)
    bound = 0
    for s in range(n_slots):
        big = members_ptr[s + 1] - members_ptr[s] > exact_above
        kept[s] = _statically_uniform(members_ptr, members, offset, path_ptr, s) if big else 0
        if kept[s] == 1:
            for e in range(members_ptr[s], members_ptr[s + 1]):
                f = members[e]
                bound += path_ptr[f + 1] - path_ptr[f]
    return kept, bound


@jit
def _link_entries(members_ptr, members, path_ptr, path_links, n_links, kept, bound):
    """Each kept slot's links (entries) in order of first use: ``(ent_ptr, ent_link, member path
    entries per entry)``."""
    n_slots = len(members_ptr) - 1
    ent_ptr = ints(n_slots + 1)
    ent_link = ints(bound)
    count = ints(bound)
    index_of = _unnumbered(n_links)
    n_ent = 0
    for s in range(n_slots):
        if kept[s] == 1:
            first = n_ent
            for e in range(members_ptr[s], members_ptr[s + 1]):
                f = members[e]
                for p in range(path_ptr[f], path_ptr[f + 1]):
                    li = path_links[p]
                    if index_of[li] < 0:
                        index_of[li] = n_ent
                        ent_link[n_ent] = li
                        n_ent += 1
                    count[index_of[li]] += 1
            for ent in range(first, n_ent):
                index_of[ent_link[ent]] = -1
        ent_ptr[s + 1] = n_ent
    # copies: the kept totals would otherwise hold buffers sized for every path entry (11 MiB on FB2010)
    return ent_ptr, ent_link[:n_ent].copy(), count[:n_ent].copy()


@jit
def _entry_maps(kept, ent_ptr, ent_link, n_links, n_path_entries):
    """``(ent_of, ent_map, map_base)``: how a kept member's path entry finds its entry (the class
    docstring), one of the first two empty: a table per kept slot and link where it is no larger than
    one per path entry."""
    n_kept = 0
    for s in range(len(kept)):
        n_kept += kept[s]
    map_base = ints(len(kept))
    if n_kept * n_links > n_path_entries:
        return small_ints(n_path_entries), small_ints(0), map_base
    ent_map = small_ints(n_kept * n_links)
    base = 0
    for s in range(len(kept)):
        if kept[s] == 1:
            map_base[s] = base
            for ent in range(ent_ptr[s], ent_ptr[s + 1]):
                ent_map[base + ent_link[ent]] = ent
            base += n_links
    return small_ints(0), ent_map, map_base


@jit_borrowing
def _entry(ent_of, ent_map, base, p, link):
    """The entry of a kept member's path entry ``p`` (on ``link``), its slot's map at ``base``."""
    if len(ent_of) > 0:
        return ent_of[p]
    return ent_map[base + link]


@jit
def _build(table, exact_above):
    members_ptr, members, offset, ref_slot = table.members_ptr, table.members, table.offset, table.ref_slot
    remaining, path_ptr, path_links = table.remaining, table.path_ptr, table.path_links
    n_links = len(table.capacity)
    kept, bound = _kept_slots(members_ptr, members, offset, path_ptr, exact_above)
    in_order = ints(len(kept))
    for s in range(len(kept)):
        if kept[s] == 1:
            in_order[s] = _in_member_order(members_ptr, members, ref_slot, table.weight, path_ptr, s)
    run_last, run_of, run_links, run_stop = runs_of(table, in_order)
    ends_ptr, ends, end_place, bits_at, bits = open_end_bits(table, in_order, run_last, run_of, len(run_stop))
    ep_of = small_ints(len(path_links))
    ent_ptr, ent_link, count = _link_entries(members_ptr, members, path_ptr, path_links, n_links, kept, bound)
    n_ent = len(ent_link)
    ep_ptr = ints(n_ent + 1)
    for ent in range(n_ent):
        ep_ptr[ent + 1] = ep_ptr[ent] + count[ent]
        count[ent] = 0
    ep_pos = small_ints(ep_ptr[n_ent])
    n_flows = len(remaining)
    last = floats(n_flows)
    alive = flags(n_flows)
    ent_of, ent_map, map_base = _entry_maps(kept, ent_ptr, ent_link, n_links, len(path_links))
    index_of = _unnumbered(n_links)  # per kept slot in turn: link -> its entry
    slot_live = ints(len(kept))
    live_flows = ints(len(members))
    ent_hi = ints(n_ent)
    ent_lo = ints(n_ent)
    ent_live = ints(n_ent)
    ent_first = ints(n_ent)
    for s in range(len(kept)):  # each kept member listed under its entries, its units summed there
        if kept[s] == 0:
            continue
        for ent in range(ent_ptr[s], ent_ptr[s + 1]):
            index_of[ent_link[ent]] = ent
        for e in range(members_ptr[s], members_ptr[s + 1]):
            f = members[e]
            last[f] = remaining[f]
            if path_ptr[f + 1] == path_ptr[f]:
                continue
            live = 1 if remaining[f] > EPS_BYTES else 0
            alive[f] = live
            units = _units(remaining[f]) if live == 1 else 0
            if live == 1:
                live_flows[members_ptr[s] + slot_live[s]] = f
            slot_live[s] += live
            for p in range(path_ptr[f], path_ptr[f + 1]):
                ent = index_of[path_links[p]]
                k = ep_ptr[ent] + count[ent]
                count[ent] += 1
                ep_pos[k] = e
                ep_of[p] = k
                if len(ent_of) > 0:
                    ent_of[p] = ent
                ent_hi[ent], ent_lo[ent] = _added(ent_hi[ent], ent_lo[ent], units)
                ent_live[ent] += live
        for ent in range(ent_ptr[s], ent_ptr[s + 1]):
            index_of[ent_link[ent]] = -1
    for ent in range(n_ent):
        k = ep_ptr[ent]
        while k < ep_ptr[ent + 1] and alive[members[ep_pos[k]]] == 0:
            k += 1
        ent_first[ent] = k
    return CoflowTotals(kept, slot_live, ent_ptr, ent_link, ent_hi, ent_lo, ent_live, ent_first, ep_ptr,
                        ep_pos, ep_of, ent_of, ent_map, map_base, last, alive, ints(len(kept)),
                        small_ints(n_flows), in_order, run_last, run_of, run_links, run_stop, ends_ptr,
                        ends, end_place, bits_at, bits, live_flows, slot_live.copy(), small_ints(n_ent),
                        _unnumbered(len(kept)))


def coflow_totals(table: Any, exact_above: int) -> CoflowTotals | None:
    """The totals of every uniform group of ``table`` (``columns.TableArrays`` with members) that lists
    more than ``exact_above`` members (``echelon_kernels.EXACT_ABOVE``: read off them while more than that
    many are live), as its flows stand now; None when there is none."""
    totals = _build(table, exact_above)
    return totals if any(totals.kept) else None


@jit_borrowing
def refresh(totals, slot, members, remaining, path_ptr, path_links):
    """Bring kept group ``slot`` up to date: each member a decision gave a rate since the last refresh
    (the only ones whose bytes left can have changed: the simulator moves bytes by rates alone) whose
    bytes left differ from those last seen moves its entries' units and live counts (and the first live
    member of each entry), and its bit among its run's live ones (``echelon_runs.open_end_bits``).
    Sums of integers and a first live member do not depend on the order the changes come in, so the
    totals are those of comparing every member, as before."""
    last, alive = totals.last, totals.alive
    ep_of, ep_ptr, ep_pos = totals.ep_of, totals.ep_ptr, totals.ep_pos
    ent_of, ent_map, base = totals.ent_of, totals.ent_map, totals.map_base[slot]
    ent_hi, ent_lo = totals.ent_hi, totals.ent_lo
    ent_live, ent_first = totals.ent_live, totals.ent_first
    moved_next = totals.moved_next
    listed = totals.moved_head[slot]
    totals.moved_head[slot] = 0
    while listed != 0:
        f = listed - 1
        listed = moved_next[f] - 1
        moved_next[f] = 0
        r = remaining[f]
        seen = last[f]
        if r == seen:
            continue
        last[f] = r
        if path_ptr[f + 1] == path_ptr[f]:
            continue
        live = 1 if r > EPS_BYTES else 0
        was = alive[f]
        delta = (_units(r) if live == 1 else 0) - (_units(seen) if was == 1 else 0)
        alive[f] = live
        if was != live and totals.in_order[slot] == 1 and totals.bits_at[totals.run_of[f]] >= 0:
            at = totals.bits_at[totals.run_of[f]] + (totals.end_place[f] >> 6)  # its run's live bits
            bit = 1 << (totals.end_place[f] & 63)
            totals.bits[at] = totals.bits[at] | bit if live == 1 else totals.bits[at] & ~bit
        if was == 0 and live == 1:
            totals.live_count[slot] = -1  # not among those listed (``live_members``): list them afresh
        if was != live:
            totals.link_count[slot] = -1  # first live members move: sort the links afresh (sort_live_links)
        totals.slot_live[slot] += live - was
        for p in range(path_ptr[f], path_ptr[f + 1]):
            ent = _entry(ent_of, ent_map, base, p, path_links[p])
            ent_hi[ent], ent_lo[ent] = _added(ent_hi[ent], ent_lo[ent], delta)
            if was == 1 and live == 0:
                ent_live[ent] -= 1
                if ent_first[ent] == ep_of[p]:
                    k = ep_of[p] + 1
                    while k < ep_ptr[ent + 1] and alive[members[ep_pos[k]]] == 0:
                        k += 1
                    ent_first[ent] = k
            elif was == 0 and live == 1:
                ent_live[ent] += 1
                if ep_of[p] < ent_first[ent]:
                    ent_first[ent] = ep_of[p]


@jit_borrowing
def live_members(totals, slot, members_ptr, members):
    """``(lo, hi)``: kept ``slot``'s live members, brought up to date (:func:`refresh`), are
    ``totals.live_flows[lo:hi]`` in member order.  A kept group with few members left live is walked
    member by member (``echelon_kernels._walk_groups``); listing only the live ones, dropping those that
    finished since the last listing, costs what is live, where its members span all that ever were
    (FB2010's large Coflows: some 9,000 members a decision for a few hundred live)."""
    base = members_ptr[slot]
    flows, alive = totals.live_flows, totals.alive
    n = 0
    if totals.live_count[slot] < 0:
        for e in range(base, members_ptr[slot + 1]):
            if alive[members[e]] == 1:
                flows[base + n] = members[e]
                n += 1
    else:
        for j in range(base, base + totals.live_count[slot]):
            if alive[flows[j]] == 1:
                flows[base + n] = flows[j]
                n += 1
    totals.live_count[slot] = n
    return base, base + n


@jit_borrowing
def mark_moved(totals, slot, f):
    """Flow ``f`` of group ``slot`` was given a rate: if the group is kept, list the flow for its next
    :func:`refresh` (once)."""
    if totals.kept[slot] == 0 or totals.moved_next[f] != 0:
        return
    totals.moved_next[f] = totals.moved_head[slot] + 1
    totals.moved_head[slot] = f + 1


@jit_borrowing
def _path_index(f, link, path_ptr, path_links):
    """Where ``link`` first is along flow ``f``'s path (0 for its first link)."""
    for p in range(path_ptr[f], path_ptr[f + 1]):
        if path_links[p] == link:
            return p - path_ptr[f]
    return -1


@jit_borrowing
def _in_path_order(table, ents, lo, hi, e, ent_link):
    """Put ``ents[lo:hi]``, links whose first live member is member position ``e``, in the order of
    their links along its path (insertion sort: at most a path's length of them)."""
    f = table.members[e]
    path_ptr, path_links = table.path_ptr, table.path_links
    for a in range(lo + 1, hi):
        ent = ents[a]
        at = _path_index(f, ent_link[ent], path_ptr, path_links)
        b = a
        while b > lo and _path_index(f, ent_link[ents[b - 1]], path_ptr, path_links) > at:
            ents[b] = ents[b - 1]
            b -= 1
        ents[b] = ent


@jit
def sort_live_links(totals, slot, table):
    """Sort kept group ``slot``'s entries with a live member into the order a walk of its live members
    meets them (``totals.link_order``), if a member died or came back to life since the last sort
    (``link_count[slot] < 0``); :func:`live_links` reads them.  The sort allocates, so it is a function
    of its own: the read, once per decision and kept group, can then borrow the totals' arrays
    (``kernels.jit_borrowing``) and the sort runs only when the order changed."""
    n = totals.link_count[slot]
    if n >= 0:
        return
    ent_live, ent_first, ep_pos = totals.ent_live, totals.ent_first, totals.ep_pos
    lo, hi = totals.ent_ptr[slot], totals.ent_ptr[slot + 1]
    sorted_ents = totals.link_order
    listed = ints(hi - lo)
    keys = ints(hi - lo)
    n = 0
    for ent in range(lo, hi):
        if ent_live[ent] > 0:
            listed[n] = ent
            keys[n] = ep_pos[ent_first[ent]]
            n += 1
    order = stable_argsort(keys, n)
    for i in range(n):
        sorted_ents[lo + i] = listed[order[i]]
    # by first live member alone, then links that share one in its path's order (a walk meets them
    # so), where a path index per place would take 4 bytes a path entry
    i = 0
    while i < n:
        j = i + 1
        while j < n and keys[order[j]] == keys[order[i]]:
            j += 1
        if j - i > 1:
            _in_path_order(table, sorted_ents, lo + i, lo + j, keys[order[i]], totals.ent_link)
        i = j
    totals.link_count[slot] = n


@jit_borrowing
def live_links(totals, slot, table, link_out, hi_out, lo_out, start):
    """Write kept group ``slot``'s links with a live member, in the order a walk of its live members
    meets them (sorted by :func:`sort_live_links` first), and their totals, to
    ``link_out``/``hi_out``/``lo_out`` from ``start``.  Returns (the end, the first live member's flow
    number; -1 when none)."""
    lo, n = totals.ent_ptr[slot], totals.link_count[slot]
    sorted_ents = totals.link_order
    for i in range(n):
        ent = sorted_ents[lo + i]
        link_out[start + i] = totals.ent_link[ent]
        hi_out[start + i] = totals.ent_hi[ent]
        lo_out[start + i] = totals.ent_lo[ent]
    first = -1
    if n > 0:
        first = table.members[totals.ep_pos[totals.ent_first[sorted_ents[lo]]]]
    return start + n, first


@jit_borrowing
def kept_and_live(totals, slot, table, exact_above):
    """For a kept ``slot``, brought up to date (:func:`refresh`), with more than ``exact_above`` live
    members: how many links it has (an upper bound on those live); else -1 (walk it)."""
    if totals.kept[slot] == 0:
        return -1
    refresh(totals, slot, table.members, table.remaining, table.path_ptr, table.path_links)
    if totals.slot_live[slot] <= exact_above:
        return -1
    return totals.ent_ptr[slot + 1] - totals.ent_ptr[slot]
