"""Instances the scheduler and simulator tests share (one definition each, imported, never copied)."""

from __future__ import annotations

import random

import pytest

from echelonflow.schedulers.base import ActiveFlow, Snapshot
from echelonflow.topology import Topology, bigswitch, build, dumbbell, fattree

#: Small topologies for random DAG workloads, by name.
TOPOLOGIES = {"bigswitch": lambda: bigswitch(1e9, hosts=6), "dumbbell": lambda: dumbbell(1e9, 3),
              "fattree": lambda: fattree(1e9, k=4)}


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
