"""A trace's coflows held as columns (``model.FlowColumns``): read as the tasks they hold, specified,
simulated and reported as the same jobs with their tasks as objects, and not made into objects by a run."""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle

import pytest

from echelonflow.echelon import check_job, echelons_of
from echelonflow.model import (
    ComputeTask,
    FlowColumns,
    FlowTask,
    Job,
    find_cycle,
    task_id_at,
    task_sequence,
)
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from simulator import engine


def _columns() -> FlowColumns:
    columns = FlowColumns(["h1", "h2", "h3"], "shuffle")
    for task_id, src, dst, size in (("m1.r0", 1, 0, 100), ("a", 0, 2, 5), ("m0.r2", 0, 2, 7)):
        columns.append(task_id, src, dst, size)
    return columns


def _as_objects(job: Job) -> Job:
    """``job`` with its tasks as a dictionary of task objects, as every job held them before columns."""
    return dataclasses.replace(job, tasks={task.task_id: task for task in job.tasks.values()},
                               echelon_kinds=dict(job.echelon_kinds))


def test_columns_read_as_the_flow_tasks_they_hold() -> None:
    columns = _columns()
    expected = {"m1.r0": FlowTask("m1.r0", "h2", "h1", 100, (), "shuffle"),
                "a": FlowTask("a", "h1", "h3", 5, (), "shuffle"),
                "m0.r2": FlowTask("m0.r2", "h1", "h3", 7, (), "shuffle")}
    assert list(columns) == list(expected) and len(columns) == 3
    assert list(columns.values()) == list(expected.values())
    assert list(columns.items()) == list(expected.items())
    assert columns == expected  # a mapping's equality, both ways
    assert expected == columns
    for task_id, task in expected.items():
        assert columns[task_id] == task and task_id in columns
    for missing in ("zz", "m0", "", 3, None):
        assert missing not in columns
        with pytest.raises(KeyError):
            columns[missing]
    tasks = task_sequence(columns)
    assert [tasks[k] for k in range(len(tasks))] == list(expected.values())
    assert [task_id_at(tasks, k) for k in range(3)] == list(expected)
    plain = task_sequence(expected)
    assert [task_id_at(plain, k) for k in range(3)] == list(expected)
    for copied in (pickle.loads(pickle.dumps(columns)), copy.deepcopy(columns)):  # forked runs, noise
        assert type(copied) is FlowColumns and copied == expected and copied["a"] == expected["a"]


def test_a_job_of_columns_is_read_only_and_needs_one_echelon() -> None:
    job = Job("c", tasks=_columns())
    with pytest.raises(TypeError, match="job 'c': its tasks are a trace's columns"):
        job.add(ComputeTask("x", "h1", 1.0))
    with pytest.raises(ValueError, match="need an echelon id"):
        FlowColumns(["h1"], "")
    assert job.hosts == ["h2", "h1", "h3"] and [f.task_id for f in job.flows] == ["m1.r0", "a", "m0.r2"]
    assert find_cycle(job) == [] and job.dependants() == {"m1.r0": [], "a": [], "m0.r2": []}
    check_job(job)


@pytest.fixture(scope="module")
def fb2010_head():
    scenario = load_scenario("fb2010")
    return scenario, list(scenario.jobs[:40])


def test_a_traces_coflows_are_columns_with_the_specs_of_their_objects(fb2010_head) -> None:
    """The spec made off the columns (``echelon._columns_spec``) is the general path's, field by field."""
    _scenario, jobs = fb2010_head
    coflows = [job for job in jobs if isinstance(job.tasks, FlowColumns)]
    assert len(coflows) >= 35  # the others are the coflows within one port: one compute task each
    for job in jobs:
        objects = _as_objects(job)
        assert objects.tasks == job.tasks
        fast, general = echelons_of(job), echelons_of(objects)
        assert list(fast) == list(general)
        for echelon_id, spec in fast.items():
            other = general[echelon_id]
            assert (spec.kind, spec.flow_ids) == (other.kind, other.flow_ids)
            assert list(spec.offsets_s.values()) == list(other.offsets_s.values())
            assert list(spec.ideal_start_s.values()) == list(other.ideal_start_s.values())
    relabelled = dataclasses.replace(coflows[0], echelon_kinds={"shuffle": "bogus"})
    with pytest.raises(Exception, match="has kind 'bogus'"):
        echelons_of(relabelled)


@pytest.mark.parametrize("name", ["echelon", "sincronia", "fair"])
def test_a_run_of_columns_is_the_run_of_their_objects(fb2010_head, name: str) -> None:
    scenario, jobs = fb2010_head
    head = [dataclasses.replace(job, arrival_s=0.0) for job in jobs if len(job.tasks) < 4_000][:16]
    assert sum(len(job.tasks) for job in head) > 1_000
    runs = [engine.simulate(scenario.topology, workload, get_scheduler(name), alone_runs=False)
            for workload in (head, [_as_objects(job) for job in head])]
    assert runs[0].to_json_dict() == runs[1].to_json_dict()


def _flow_tasks_alive() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is FlowTask)


def test_a_run_makes_no_lasting_task_objects_of_columns(fb2010_head) -> None:
    """The run reads a trace's flows off their columns (``_Run.task``) and keeps numbers, not the
    tasks: holding them was 60 MiB of FB2010's peak (docs/performance.md, "A trace's coflows as columns")."""
    scenario, jobs = fb2010_head
    jobs = [job for job in jobs if len(job.tasks) < 4_000][:16]
    specs = {job.job_id: echelons_of(job) for job in jobs}
    before = _flow_tasks_alive()
    run = engine._Run(scenario.topology, jobs, get_scheduler("echelon"), True, specs)
    flows = len(run.flow_task)
    assert flows > 1_000
    assert _flow_tasks_alive() == before
    run.run()
    assert _flow_tasks_alive() == before
    assert run.qid(run.flow_task[0]) == f"{jobs[0].job_id}/{jobs[0].tasks.ids[0]}"
