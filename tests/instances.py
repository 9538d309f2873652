"""Instances the scheduler and simulator tests share (one definition each, imported, never copied)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import strategies as st

from echelonflow.model import ComputeTask, FlowTask, Job
from echelonflow.schedulers import echelon_kernels as ek
from echelonflow.schedulers import get_scheduler
from echelonflow.schedulers.base import EPS_BYTES, ActiveFlow, Snapshot
from echelonflow.schedulers.kernels import ints
from echelonflow.topology import Topology, bigswitch, build, dumbbell, fattree
from simulator.engine import check_placement, simulate

#: Small topologies for random DAG workloads, by name.
TOPOLOGIES = {"bigswitch": lambda: bigswitch(1e9, hosts=6), "dumbbell": lambda: dumbbell(1e9, 3),
              "fattree": lambda: fattree(1e9, k=4)}


#: Flow sizes random DAG workloads draw from (zero-byte flows included).
SIZES_BYTES = (0, 125_000, 250_000, 250_000, 1_000_000, 3_000_000)


@st.composite
def workloads(draw) -> tuple[str, list[Job]]:
    """A small topology's name and one to three random DAGs on it (computes, flows in EchelonFlows,
    arrivals at or just after 0), for the tests that compare two ways of running the simulator."""
    kind = draw(st.sampled_from(sorted(TOPOLOGIES)))
    hosts = TOPOLOGIES[kind]().hosts
    jobs = []
    for j in range(draw(st.integers(1, 3))):
        job = Job(f"j{j}", arrival_s=draw(st.sampled_from([0.0, 0.0, 0.001, 0.004])))
        names: list[str] = []
        for k in range(draw(st.integers(1, 9))):
            deps = tuple(sorted(set(draw(st.lists(st.sampled_from(names), max_size=2))))) if names else ()
            if draw(st.integers(0, 3)) == 0:
                task = ComputeTask(f"c{k}", draw(st.sampled_from(hosts)),
                                   draw(st.sampled_from([0.0005, 0.001, 0.002])), deps)
            else:
                src, dst = draw(st.lists(st.sampled_from(hosts), min_size=2, max_size=2, unique=True))
                task = FlowTask(f"f{k}", src, dst, draw(st.sampled_from(SIZES_BYTES)), deps,
                                echelon_id=f"e{draw(st.integers(0, 2))}")
            job.add(task)
            names.append(task.task_id)
        jobs.append(job)
    return kind, jobs


def placeable(kind: str, jobs: list[Job]) -> bool:
    """Whether a drawn workload fits its topology (the simulator refuses one that does not, before any
    run: such a draw has nothing to compare)."""
    try:
        check_placement(TOPOLOGIES[kind](), jobs)
    except Exception:
        return False
    return True


def assert_same_times(got: list, expected: list) -> None:
    """Two runs' task times equal to 1e-9 relative (the simulator's exactness bar)."""
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a == pytest.approx(b, rel=1e-9, abs=0.0), (got, expected)


def random_snapshot(seed: int, n_flows: int) -> Snapshot:
    """A random decision instance: one of five topologies, 1-4 groups with their weights, offsets,
    references and bytes sent, flows with zero, fractional and whole bytes left (seeded: the same
    instance for the same seed)."""
    rng = random.Random(seed)
    kind = rng.choice(["two_hosts", "dumbbell", "fattree", "leafspine", "bigswitch"])
    topo = {
        "two_hosts": lambda: build("two_hosts", 1e6),
        "dumbbell": lambda: build("dumbbell", 1e6, hosts_per_side=rng.randint(1, 3)),
        "fattree": lambda: build("fattree", 1e6, k=rng.choice([2, 4]), oversubscription=rng.choice([1, 3])),
        "leafspine": lambda: build("leafspine", 1e6, leaves=rng.randint(2, 3), spines=rng.randint(1, 2),
                                   hosts_per_leaf=rng.randint(1, 2), oversubscription=rng.choice([1, 2.5])),
        "bigswitch": lambda: build("bigswitch", 1e6, hosts=rng.randint(2, 6)),
    }[kind]()
    hosts = topo.hosts
    now = rng.uniform(0, 5)
    flows = []
    n_groups = rng.randint(1, 4)
    refs = [now - rng.uniform(0, 3) for _ in range(n_groups)]
    weights = [rng.choice([1.0, 1.0, rng.uniform(0.1, 5)]) for _ in range(n_groups)]
    group_sent = [rng.choice([0.0, rng.uniform(0, 1e5), rng.uniform(0, 1e8)]) for _ in range(n_groups)]
    for i in range(n_flows):
        src, dst = rng.sample(hosts, 2)
        g = rng.randrange(n_groups)
        offset = rng.choice([0.0, rng.uniform(0, 4)])
        remaining = rng.choice([0.0, rng.uniform(1e-3, 1e6), float(rng.randint(1, 10**6))])
        path = Topology.links_of(topo.path_for(src, dst, f"f{i}"))
        flows.append(ActiveFlow(f"f{i}", f"g{g}", path, remaining, refs[g] + offset, offset, refs[g],
                                weight=weights[g], sent_bytes=rng.uniform(0, 1e5),
                                group_sent_bytes=group_sent[g], group_start_s=refs[g]))
    return Snapshot(now, topo.capacity_bps(), flows)


# ----------------------------------------------------------------------------- Sincronia's Fig. 1
# Sincronia's running example (SIGCOMM '18, Fig. 1): a big switch with ingress ports 1-4 (hosts h1-h4,
# senders) and egress ports 5-8 (h5-h8, receivers); five coflows at time 0: C1 of eight 1-unit flows
# (every port carries 2 units), and C2 1->5, C3 2->6, C4 3->7, C5 4->8 of 2 + eps units each.  One unit
# is 1 MB at 8 Mbit/s: one second.  What the schedulers make of it: tests/test_sincronia_fig1.py.
FIG1_UNIT_BYTES = 1_000_000
FIG1_EPS = 0.001
#: C1's flows (ingress, egress), from ingress port 4 down (the order BSSI's port tie depends on)
C1_FROM_PORT_4 = [(4, 8), (4, 7), (3, 8), (3, 6), (2, 7), (2, 5), (1, 6), (1, 5)]


def _fig1_coflow(name: str, flows: list[tuple[int, int, float]]) -> Job:
    job = Job(name)
    job.echelon_kinds["c"] = "coflow"
    for k, (src, dst, units) in enumerate(flows):
        job.add(FlowTask(f"f{k}", f"h{src}", f"h{dst}", round(units * FIG1_UNIT_BYTES), echelon_id="c"))
    return job


def fig1(c1_flows: list[tuple[int, int]] = C1_FROM_PORT_4) -> list[Job]:
    """The five coflows, C1's flows listed as ``c1_flows``."""
    jobs = [_fig1_coflow("C1", [(i, e, 1) for i, e in c1_flows])]
    return jobs + [_fig1_coflow(f"C{i + 1}", [(i, i + 4, 2 + FIG1_EPS)]) for i in (1, 2, 3, 4)]


def fig1_topology() -> Topology:
    """The big switch, idealised links (no framing), 8 hosts."""
    return build("bigswitch", 8 * FIG1_UNIT_BYTES, mtu_bytes=None, hosts=8)


def run_fig1(scheduler: str, jobs: list[Job], rescheduling: str = "every-flow") -> dict[str, float]:
    """Each coflow's completion time (s) under ``scheduler`` on :func:`fig1_topology`."""
    result = simulate(fig1_topology(), jobs, get_scheduler(scheduler), alone_runs=False,
                      rescheduling=rescheduling)
    return {job.job_id: result.jobs[job.job_id].completion_s for job in jobs}


def random_groups(seed: int) -> dict:
    """A random flow table of EchelonFlows for ``echelon``'s walk (tests/test_echelon_walk.py,
    tests/test_echelon_totals.py): some Coflows, some staggered; members finished, declared and active;
    shared links, equal offsets and sizes, flows without a path.  The table's arrays by field name, with
    ``active`` and ``now``."""
    rng = np.random.default_rng(seed)
    n_links = int(rng.integers(3, 30))
    capacity = rng.choice([1e9, 2e9, 1e10], n_links) * rng.choice([1.0, 1.0, 0.7], n_links)
    n_groups = int(rng.integers(1, 9))
    n_flows = int(rng.integers(n_groups, 120))
    group = np.sort(rng.integers(0, n_groups, n_flows))
    offset = rng.choice([0.0, 0.5, 1.0, 2.5, rng.random() * 4], n_flows)
    staggered = rng.random(n_groups) < 0.6
    offset[~staggered[group]] = 0.0  # some Coflows
    idrank = rng.permutation(n_flows)
    order = np.lexsort((idrank, offset, group))  # flows numbered group, offset, id (the table's order)
    group, offset, idrank = group[order], offset[order], idrank[order]
    lengths = rng.integers(1, min(5, n_links + 1), n_flows)
    lengths[rng.random(n_flows) < 0.05] = 0  # a flow without a path
    path_ptr = np.zeros(n_flows + 1, dtype=np.int64)
    np.cumsum(lengths, out=path_ptr[1:])
    path_links = np.concatenate([rng.choice(n_links, int(k), replace=False) for k in lengths] or [[]])
    remaining = rng.choice([0.0, 1e5, 2.5e6, 1e6], n_flows) * rng.choice([1.0, 1.0, rng.random()], n_flows)
    weight = np.array([1.0, 2.0, 0.5])[group % 3]
    members_ptr = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(group, minlength=n_groups), out=members_ptr[1:])
    members = np.arange(n_flows, dtype=np.int64)
    started = rng.random(n_flows) < 0.5
    active = np.flatnonzero(started & (remaining > 0)).astype(np.int64)
    reference = rng.random(n_groups) * 3
    return dict(active=active, remaining=remaining, group=group.astype(np.int64), offset=offset,
                reference=reference, ref_slot=group.astype(np.int64), idrank=idrank.astype(np.int64),
                weight=weight, path_ptr=path_ptr, path_links=path_links.astype(np.int64),
                capacity=capacity, members_ptr=members_ptr, members=members, now=float(rng.random() * 2))


def decide_with_and_without_totals(active, table, totals, exact_above: int, every_flow: bool = True,
                                   stale_rate: float = 0.0) -> np.ndarray:
    """``echelon_decide`` on ``table`` with ``totals`` and with none: the same rates, ranking, counts and
    listing of the flows given a rate, bit for bit, the listing naming exactly the active flows with a
    positive rate (or absent under the coflow rule); deciding at every flow event, also without the
    ranking (then empty), the same rates and listing, and, where the instance allows it (``active`` in
    increasing flow numbers, none with dust left), with every active flow's rate cleared beforehand and
    the caller saying so (``cleared``, what the simulator vouches).  ``stale_rate``: what every rate
    holds before (a decision must overwrite the active flows').  Returns the rates."""
    n = len(table.remaining)
    flows = np.asarray(active, dtype=np.int64)
    clean = (every_flow and totals is not None and bool(np.all(np.diff(flows) > 0))
             and bool(np.all(np.asarray(table.remaining)[flows] > EPS_BYTES)))
    decided = []
    # the scheduler's buffers hold the last decision's leftovers: here garbage, then each call's
    buffers = (np.full(n, 10**6, dtype=np.int64), np.full(n, np.nan),
               np.full(n + 1, -(10**6), dtype=np.int64))
    for kept, ranked, cleared in ((totals, True, False), (None, True, False), (totals, False, False),
                                  (None, False, False), (totals, True, True), (totals, False, True)):
        if not (ranked or every_flow) or (cleared and not clean):
            continue
        rates, order, served = np.full(n, stale_rate), ints(n), ints(len(table.capacity))
        if cleared:
            rates[flows] = 0.0
        count, n_served = ek.echelon_decide(active, table, 0.5, every_flow, rates, order, kept, exact_above,
                                            served, ranked, buffers, cleared)
        decided.append((ranked, rates, list(order[:count]), n_served, sorted(served[:max(n_served, 0)])))
    (_, rates, order, n_served, listed), (_, plain_rates, plain_order, *plain_listing) = decided[:2]
    assert np.array_equal(rates, plain_rates) and order == plain_order and [n_served, listed] == plain_listing
    for other_ranked, other_rates, other_order, *other_listing in decided[2:]:
        assert np.array_equal(other_rates, rates) and other_order == (order if other_ranked else [])
        assert other_listing == [n_served, listed]
    given = sorted(f for f in flows if rates[f] > 0)
    assert listed == given if every_flow else n_served == -1
    return rates
