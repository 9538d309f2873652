"""Skipping the decisions that change nothing changes no result (``simulator.engine``, "Skipped
decisions"): on random DAG workloads, every scheduler, every task's start and finish equal to the loop
that decides at every event."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from echelonflow import echelon as echelon_mod
from echelonflow.model import FlowTask, Job
from echelonflow.schedulers import SCHEDULERS, get_scheduler
from echelonflow.topology import bigswitch
from simulator import engine
from tests.instances import TOPOLOGIES, assert_same_times, placeable, workloads


def _times(kind: str, jobs: list[Job], name: str, skip: bool) -> tuple[list, list, int]:
    topology = TOPOLOGIES[kind]()
    specs = {job.job_id: echelon_mod.echelons_of(job) for job in jobs}
    run = engine._Run(topology, jobs, get_scheduler(name), True, specs)
    run.skip_unchanged = skip
    run.skipping = skip and bool(run.scheduler.blind_to_bytes)
    run.run()
    return run.start_s, run.finish_s, run.skipped


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_every_scheduler_gives_the_same_times_with_and_without_skipping(workload) -> None:
    kind, jobs = workload
    if not placeable(kind, jobs):
        return
    for name in SCHEDULERS:
        start, finish, skipped = _times(kind, jobs, name, True)
        start_all, finish_all, none = _times(kind, jobs, name, False)
        assert none == 0
        assert skipped == 0 or SCHEDULERS[name].blind_to_bytes
        assert_same_times(start, start_all)
        assert_same_times(finish, finish_all)


@pytest.mark.parametrize("name", ["fair", "port-fair", "fifo-priority"])
def test_a_flow_finishing_alone_on_its_links_is_not_decided_again(name) -> None:
    """Two pairs of hosts on a big switch, a short and a long flow each, one EchelonFlow: the short
    ones finish alone on their ports (no decision), then the long ones (the last: nothing is left)."""
    job = Job("j")
    for k, (src, dst) in enumerate([("h1", "h2"), ("h3", "h4")]):
        job.add(FlowTask(f"short{k}", src, dst, 125_000 * (k + 1), echelon_id="e"))
        job.add(FlowTask(f"long{k}", f"h{5 + 2 * k}", f"h{6 + 2 * k}", 1_250_000 * (k + 1), echelon_id="e"))
    topology = bigswitch(1e9, hosts=8)
    specs = {"j": echelon_mod.echelons_of(job)}
    runs = {}
    for skip in (True, False):
        run = engine._Run(topology, [job], get_scheduler(name), True, specs)
        run.skipping = skip
        run.run()
        runs[skip] = run
    assert runs[True].skipped == 4 and runs[False].skipped == 0
    assert runs[True].decisions == 1 and runs[False].decisions == 4  # the last finish leaves nothing
    assert runs[True].finish_s == runs[False].finish_s
