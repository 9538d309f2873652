"""The decision interval (``simulator.engine``, "Decision interval"): finishes wait for the interval since
the last decision, starts decide at once; 0 is the exact rule."""

from __future__ import annotations

import pytest

from echelonflow import echelon as echelon_mod
from echelonflow.model import FlowTask, Job
from echelonflow.schedulers import get_scheduler
from echelonflow.topology import bigswitch
from simulator import engine
from tests.instances import TOPOLOGIES, assert_same_times


def _run(topology, jobs: list[Job], name: str, interval_s: float) -> engine._Run:
    specs = {job.job_id: echelon_mod.echelons_of(job) for job in jobs}
    run = engine._Run(topology, jobs, get_scheduler(name), True, specs,
                      rule=engine.DecisionRule(interval_s=interval_s))
    run.run()
    return run


def _two_flows() -> tuple:
    topology = bigswitch(1e9, hosts=2)
    job = Job("j0")
    job.add(FlowTask("short", "h1", "h2", 1_000_000, echelon_id="e"))
    job.add(FlowTask("long", "h1", "h2", 2_000_000, echelon_id="e"))
    return topology, [job]


def test_a_finish_waits_for_the_interval_and_its_capacity_idles_until_then() -> None:
    """Two flows share h1 -> h2 fairly (C/2 each).  Exactly, the long one takes the whole link when the
    short one finishes at 16 w_short / C; with a 20 ms interval it keeps C/2 until 20 ms."""
    topology, jobs = _two_flows()
    capacity = 1e9
    short, long = (topology.wire_bytes(size) for size in (1_000_000, 2_000_000))
    exact = _run(topology, jobs, "fair", 0.0)
    first = 16 * short / capacity
    assert exact.finish_s[0] == pytest.approx(first, rel=1e-12)
    assert exact.finish_s[1] == pytest.approx(first + 8 * (long - short) / capacity, rel=1e-12)
    late = _run(topology, jobs, "fair", 0.02)
    assert late.finish_s[0] == pytest.approx(first, rel=1e-12)
    left = long - capacity / 2 * 0.02 / 8
    assert late.finish_s[1] == pytest.approx(0.02 + 8 * left / capacity, rel=1e-12)
    assert late.finish_s[1] > exact.finish_s[1]


def test_a_start_is_decided_at_once() -> None:
    """A flow that arrives inside the interval gets its rate at its arrival, not at the interval's end."""
    topology = bigswitch(1e9, hosts=3)
    first, second = Job("a"), Job("b", arrival_s=0.001)
    first.add(FlowTask("f", "h1", "h2", 1_000_000))
    second.add(FlowTask("f", "h3", "h2", 125_000))
    jobs = [first, second]
    exact = _run(topology, jobs, "sincronia", 0.0)
    late = _run(topology, jobs, "sincronia", 1.0)
    assert late.finish_s[1] == pytest.approx(exact.finish_s[1], rel=1e-9)


@pytest.mark.parametrize("name", ["coflow", "sincronia", "echelon", "fair", "fifo", "crux", "aalo"])
@pytest.mark.parametrize("kind", sorted(TOPOLOGIES))
def test_an_interval_shorter_than_every_gap_is_the_exact_rule(name, kind) -> None:
    """Below the smallest gap between two events no finish waits: every time equals the exact rule's."""
    topology = TOPOLOGIES[kind]()
    hosts = topology.hosts
    jobs = []
    for j in range(3):
        job = Job(f"j{j}", arrival_s=0.0005 * j)
        for k in range(4):
            job.add(FlowTask(f"f{k}", hosts[(j + k) % len(hosts)], hosts[(j + 2 * k + 1) % len(hosts)],
                             125_000 * (k + 1), echelon_id=f"e{k % 2}"))
        jobs.append(job)
    exact = _run(topology, jobs, name, 0.0)
    tiny = _run(topology, jobs, name, 1e-12)
    assert_same_times(tiny.finish_s, exact.finish_s)
    coarse = _run(topology, jobs, name, 0.002)  # invariants checked on every decision; every byte lands
    assert all(finish is not None for finish in coarse.finish_s)


def test_an_interval_needs_the_every_flow_rule() -> None:
    with pytest.raises(ValueError, match="every-flow"):
        engine.DecisionRule(every_flow=False, interval_s=0.01)
    with pytest.raises(ValueError, match=">= 0"):
        engine.DecisionRule(interval_s=-1.0)
