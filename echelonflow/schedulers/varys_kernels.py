"""The inner loops of the Varys-family baselines (``coflow``, ``fifo``, ``port-fair``) over flat arrays.

Layout, compilation and the bit-for-bit agreement of compiled and interpreted runs are as in
``schedulers/kernels.py``, whose shared helpers (``_select``, ``_consume``, ``_path_min``,
``_backfill``) these kernels import; their bottleneck without offsets is their own
(:func:`_load_bottleneck`).  They are kept apart from ``echelon_kernels`` so that
EchelonFlow's own scheduler can change without moving the baselines it is compared with.

The reference for every rule here is the simulator of the Varys authors, CoflowSim
(github.com/coflow/coflowsim, ``CoflowSimulator.updateRatesDynamicAlpha`` and
``FlowSimulator.fairShare``); docs/baselines.md says what each baseline does and how closely it
matches CoflowSim on the FB2010 trace.

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

from echelonflow.schedulers.kernels import (
    EPS_BYTES,
    INF,
    _backfill,
    _consume,
    _consume_holding,
    _copied,
    _path_min,
    _select,
    floats,
    ints,
    jit,
    jit_borrowing,
    stable_argsort,
    unset_floats,
    unset_ints,
)

#: ``order_by`` codes of :func:`varys_decide`: smallest effective bottleneck first (Varys's SEBF, on
#: the bytes left), arrival order (the group's reference time; CoflowSim's FIFO), or SEBF on the bytes
#: a group had when it was first ordered, kept from then on (CoflowSim's SEBF: its ``alpha``).
ORDER_SEBF, ORDER_ARRIVAL, ORDER_SEBF_ADMITTED = 0, 1, 2


@jit
def varys_decide(active, table, order_by, rate, order, admission_key, whole):
    """Varys's rates for the ``active`` flows of ``table`` (the flow table's arrays,
    ``columns.TableArrays``); returns how many flows were ranked into ``order``.

    ``active`` must list each group's flows contiguously, groups in group-id order, and inside a group
    in ``idrank`` order (flow id).  Flows with no bytes left or no path get rate 0 and no rank.
    ``whole``: the caller vouches that every active flow has bytes left and a path
    (``FlowView.clean``), so ``active`` itself is the list of flows covered; every covered flow's rate
    is written below (MADD, or the spare split for a skipped group), so none is zeroed first.

    1. Groups are ordered by ``order_by`` (SEBF: ``max_l C_l / c_l`` on full capacity, divided by the
       job's weight; arrival: the group's reference time; SEBF at admission: ``admission_key`` at the
       group's reference slot, set to the SEBF key the first time it is -1); ties by group id.
    2. MADD, group by group: every flow of a group gets ``bits / Gamma`` where ``Gamma`` is the group's
       bottleneck time on the capacity the groups before it left, so all its flows finish together.
       A group with a flow on a link that has nothing left is skipped.
    3. The skipped groups share what is left: each of their flows whose links all have capacity
       left gets, on each link, an equal share of that link's residual among such flows, and takes
       the smallest share along its path (CoflowSim's ``updateRatesFairShare``).  Without this step
       one or two flows per link would take all the spare capacity in step 4 and, under the coflow
       rescheduling rule, leave it idle once they finish.
    4. Whatever is still free is back-filled greedily, flow by flow in the global order.
    """
    remaining, group, reference, ref_slot = table.remaining, table.group, table.reference, table.ref_slot
    weight = table.weight
    path_ptr, path_links, capacity = table.path_ptr, table.path_links, table.capacity
    # the flows covered (``kernels._select``), where each group's run starts and each flow's bits, in
    # one walk over the active flows
    n = len(active)
    sel = active if whole else unset_ints(n)
    bits = unset_floats(n)
    starts = unset_ints(n + 1)
    m = 0
    n_groups = 0
    for k in range(n):
        f = active[k]
        if not whole:
            rate[f] = 0.0
            if remaining[f] <= EPS_BYTES or path_ptr[f + 1] == path_ptr[f]:
                continue
            sel[m] = f
        if m == 0 or group[f] != group[sel[m - 1]]:
            starts[n_groups] = m
            n_groups += 1
        bits[m] = 8.0 * remaining[f]
        m += 1
    starts[n_groups] = m
    n_links = len(capacity)
    cumulative = floats(n_links)
    touched = ints(n_links)
    keys = floats(n_groups)
    raw_key = floats(n_groups)  # SEBF's key before the weight: the group's bottleneck on full capacity
    for g in range(n_groups):
        a, b = starts[g], starts[g + 1]
        raw_key[g] = -1.0  # not computed (arrival order, or a key kept from admission)
        if order_by == ORDER_ARRIVAL:
            keys[g] = reference[ref_slot[sel[a]]]
            continue
        slot = ref_slot[sel[a]]
        if order_by == ORDER_SEBF_ADMITTED and admission_key[slot] >= 0.0:
            keys[g] = admission_key[slot]
            continue
        key = raw_key[g] = _load_bottleneck(sel, bits, a, b, path_ptr, path_links, capacity, cumulative,
                                            touched)
        # the weight of the group's last flow by id, as echelon_decide reads it (a group's flows are
        # listed by id, so its last one)
        keys[g] = key / weight[sel[b - 1]]
        if order_by == ORDER_SEBF_ADMITTED:
            admission_key[slot] = keys[g]
    group_order = stable_argsort(keys, n_groups)

    residual = _copied(capacity)
    skipped = ints(n_groups)
    n_skipped = 0
    pos = 0
    for gi in range(n_groups):
        g = group_order[gi]
        a, b = starts[g], starts[g + 1]
        for k in range(a, b):
            order[pos] = sel[k]
            pos += 1
        if gi == 0 and raw_key[g] >= 0.0:
            gamma = raw_key[g]  # nothing taken yet: the residual is the capacity its key was computed on
        else:
            gamma = _load_bottleneck(sel, bits, a, b, path_ptr, path_links, residual, cumulative, touched)
        if gamma == INF:
            skipped[n_skipped] = g
            n_skipped += 1
            continue
        for k in range(a, b):
            f = sel[k]
            want = bits[k] / gamma if gamma > 0 else INF
            spare = _path_min(f, path_ptr, path_links, residual)
            give = want if want <= spare else spare
            if give <= 0:
                rate[f] = 0.0
                continue
            rate[f] = give
            _consume(f, give, path_ptr, path_links, residual, capacity)

    if n_skipped > 0:
        _split_spare(sel, starts, skipped, n_skipped, path_ptr, path_links, residual, capacity, rate)

    _backfill(order, m, path_ptr, path_links, residual, capacity, rate)
    return m


@jit_borrowing
def _load_bottleneck(sel, bits, start, stop, path_ptr, path_links, cap, cumulative, touched):
    """``kernels._bottleneck`` with no slack: the largest ``C_l / c_l`` over the links of sel[start:stop]
    (``C_l`` the bits the flows put on link l), infinity if one has no capacity.  Every flow has bits
    (> 0), so a link's running sum only grows and its largest prefix is its total: one division per
    link at the end instead of one per flow and link, the same value bit for bit.  ``cumulative`` is all
    zeros on entry and on return."""
    n_touched = 0
    blocked = False
    for k in range(start, stop):
        b = bits[k]
        f = sel[k]
        for p in range(path_ptr[f], path_ptr[f + 1]):
            li = path_links[p]
            if cap[li] <= 0.0:
                blocked = True
                break
            c = cumulative[li]
            if c == 0.0:
                touched[n_touched] = li
                n_touched += 1
            cumulative[li] = c + b
        if blocked:
            break
    worst = -INF
    for t in range(n_touched):
        li = touched[t]
        value = cumulative[li] / cap[li]
        if value > worst:
            worst = value
        cumulative[li] = 0.0
    return INF if blocked else worst


@jit
def _split_spare(sel, starts, skipped, n_skipped, path_ptr, path_links, residual, capacity, rate):
    """Step 3 of :func:`varys_decide`: the flows of the ``skipped`` groups whose every link has some
    residual each get ``min over their links of residual / (such flows on the link)``, all shares taken
    from the residual as it was before this step (so no link is over-committed), then consumed; the
    others get rate 0 (written here: :func:`varys_decide` may not have zeroed them).  The
    eligible flows are listed on the first walk; each link's share is divided once from the residual
    before anything is taken, so one more walk over them gives each flow its rate and takes it off."""
    count = ints(len(residual))
    eligible = unset_ints(len(sel))
    n_eligible = 0
    for s in range(n_skipped):
        g = skipped[s]
        for k in range(starts[g], starts[g + 1]):
            f = sel[k]
            if _path_min(f, path_ptr, path_links, residual) <= 0:
                rate[f] = 0.0
                continue
            eligible[n_eligible] = f
            n_eligible += 1
            for p in range(path_ptr[f], path_ptr[f + 1]):
                count[path_links[p]] += 1
    share = _even_shares(residual, count)
    held = -1  # the link whose residual is in ``value`` (``_consume_holding``)
    value = 0.0
    for e in range(n_eligible):  # the shares are fixed already: each flow's rate, then its consumption
        f = eligible[e]
        give = _path_min(f, path_ptr, path_links, share)
        rate[f] = give
        if give > 0:
            held, value = _consume_holding(f, give, path_ptr, path_links, residual, capacity, held, value)
    if held >= 0:
        residual[held] = value


@jit
def _even_shares(available, count):
    """Per link, ``available / count`` where ``count`` > 0 (else 0): each of the counted flows' even share
    of the link, divided once per link; a flow's share is the least over its links (``_path_min``)."""
    share = floats(len(available))
    for li in range(len(available)):
        if count[li] > 0:
            share[li] = available[li] / count[li]
    return share


@jit
def port_fair_decide(active, remaining, path_ptr, path_links, capacity, rate):
    """CoflowSim's FAIR: each flow gets ``min over its links of capacity / (active flows on it)``;
    ranks none (returns 0).

    Nothing is redistributed: what a flow cannot use on one link because another link of its path
    gives it less stays free (max-min fairness, ``kernels.fair_decide``, would hand it to the others).
    """
    sel = ints(len(active))
    m = _select(active, 0, len(active), remaining, path_ptr, rate, sel)
    count = ints(len(capacity))
    for k in range(m):
        f = sel[k]
        for p in range(path_ptr[f], path_ptr[f + 1]):
            count[path_links[p]] += 1
    share = _even_shares(capacity, count)
    for k in range(m):
        f = sel[k]
        rate[f] = _path_min(f, path_ptr, path_links, share)
    return 0
