"""A built run's records (``echelonflow.run_records``): columns over the run's jobs that read as the
dictionaries of record objects they replace (keys, order, values, look-ups, documents, copies), and
that hold no record object."""

from __future__ import annotations

import copy
import gc
import io
import json
import pickle
import random

import pytest

from echelonflow import echelon as echelon_mod
from echelonflow.dilation import contract_run
from echelonflow.model import ComputeTask, qualified
from echelonflow.results import (
    FlowResult,
    Results,
    RunResult,
    TaskResult,
    build_run_in_order,
    training_metrics,
)
from echelonflow.scenario import load_scenario


@pytest.fixture(scope="module")
def mixed_jobs():
    """Jobs of every kind a run holds: a pipeline's DAG (compute tasks, EchelonFlows with offsets) and a
    trace's coflows (columns, and the objects of the coflows within one port)."""
    small = [job for job in load_scenario("fb2010").jobs[:40] if len(job.tasks) < 3_000][:12]
    return list(load_scenario("fattree-gpipe-ring").jobs) + small


def _times(jobs, seed: int = 7) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    start_s = [job.arrival_s + rng.uniform(0.0, 10.0) for job in jobs for _ in job.tasks]
    return start_s, [s + rng.uniform(0.0, 5.0) for s in start_s]


def _plain_records(jobs, start_s, finish_s):
    """The records as dictionaries of objects, built task by task the plain way: the expectation."""
    tasks, flows, members = {}, {}, {}
    number = {}
    for job in jobs:
        for tid, task in job.tasks.items():
            qid, t = qualified(job.job_id, tid), len(number)
            number[qid] = t
            if isinstance(task, ComputeTask):
                tasks[qid] = TaskResult("compute", start_s[t], finish_s[t], host=task.host)
            else:
                tasks[qid] = TaskResult("flow", start_s[t], finish_s[t], src=task.src, dst=task.dst)
    for job in jobs:
        for echelon_id, spec in echelon_mod.echelons_of(job).items():
            eqid = qualified(job.job_id, echelon_id)
            qids = [qualified(job.job_id, fid) for fid in spec.flow_ids]
            starts_s = {fid: start_s[number[qid]] for fid, qid in zip(spec.flow_ids, qids)}
            reference_s = echelon_mod.reference_time(spec, starts_s)
            for fid, qid in zip(spec.flow_ids, qids):
                task, t = job.tasks[fid], number[qid]
                flows[qid] = FlowResult(start_s[t], finish_s[t], reference_s + spec.offsets_s[fid], task.src,
                                        task.dst, task.size_bytes, eqid)
            members[eqid] = qids
    return tasks, flows, members


def test_records_read_as_the_dictionaries_they_replace(mixed_jobs) -> None:
    start_s, finish_s = _times(mixed_jobs)
    run = build_run_in_order("echelon", mixed_jobs, start_s, finish_s)
    tasks, flows, members = _plain_records(mixed_jobs, start_s, finish_s)
    assert any(t.type == "compute" for t in tasks.values()) and len(flows) > 1_000
    assert (len(run.tasks), len(run.flows)) == (len(tasks), len(flows))
    assert list(run.tasks.items()) == list(tasks.items())  # the same keys, in the same order
    assert list(run.flows.items()) == list(flows.items())
    assert list(run.flows) == list(flows) and list(run.tasks.values()) == list(tasks.values())
    assert len(run.flows.items()) == len(flows) and next(iter(flows.items())) in run.flows.items()
    for qid, record in tasks.items():  # each look-up by id finds what the walk gave
        assert qid in run.tasks and run.tasks[qid] == record
        assert (qid in run.flows) == (qid in flows)
        assert run.flows.get(qid) == flows.get(qid)
    for eqid, qids in members.items():
        ids = run.echelonflows[eqid].flows
        assert ids == qids and list(ids) == qids and len(ids) == len(qids)
        assert (ids[0], ids[-1], ids[1:3]) == (qids[0], qids[-1], qids[1:3])
    with pytest.raises(IndexError):
        run.echelonflows[next(iter(members))].flows[len(members[next(iter(members))])]
    compute = next(qid for qid, t in tasks.items() if t.type == "compute")
    job_id = mixed_jobs[-1].job_id
    for missing in (compute, f"{job_id}/no-such-flow", "no-such-job/x", job_id, 5, None):
        assert missing not in run.flows
        with pytest.raises(KeyError):
            run.flows[missing]
    assert "no-such-job/x" not in run.tasks and 5 not in run.tasks
    # the GPU-busy fraction read off the columns (``compute_spans``) is the one read off the records
    assert run.gpu_busy_fraction is not None and run.gpu_busy_fraction > 0
    assert training_metrics(run.jobs, run.tasks) == training_metrics(run.jobs, tasks)


def test_a_built_run_reads_back_copies_and_contracts_as_its_document(mixed_jobs) -> None:
    """Its document read back holds dictionaries: equal to the run, written and contracted the same."""
    run = build_run_in_order("echelon", mixed_jobs, *_times(mixed_jobs, seed=11))
    document = run.to_json_dict()
    read_back = RunResult.from_json_dict(json.loads(json.dumps(document)))
    assert isinstance(read_back.flows, dict) and read_back == run and read_back.to_json_dict() == document
    assert list(run.task_records()) == list(read_back.task_records())  # by number, and by id
    assert copy.deepcopy(run) == run and pickle.loads(pickle.dumps(run)).to_json_dict() == document
    streamed = io.StringIO()
    Results("mixed", "simulate", [run]).write_json(streamed, per_flow=True)
    assert json.loads(streamed.getvalue())["runs"][0] == document
    assert contract_run(run, 4.0).to_json_dict() == contract_run(read_back, 4.0).to_json_dict()
    assert run.to_json_dict() == document  # contracting left the run as it was


def _records_alive() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) in (FlowResult, TaskResult))


def test_a_built_run_holds_no_record_objects(mixed_jobs) -> None:
    """A record object per task and per flow was 356 MiB of FB2010's result (docs/performance.md, "A run's
    records as columns"): a built run makes them only when they are read."""
    before = _records_alive()
    run = build_run_in_order("echelon", mixed_jobs, *_times(mixed_jobs))
    assert len(run.flows) > 1_000 and _records_alive() == before
    assert sum(record.size_bytes for record in run.flows.values()) > 0
    assert _records_alive() == before
