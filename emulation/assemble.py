"""The agents' documents merged into the result shape the simulator writes (``echelonflow.results``).

Compute times come from the compute's host, a flow's start from its sender and its finish from its
receiver (the moment the last byte arrived); reference times, ideal finish times, tardiness and the
objective come from ``echelonflow.results.build_run``, the simulator's own builder, so an emulated run
and a simulated one are the same document with different clocks behind them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from echelonflow.model import ComputeTask, Job, qualified
from echelonflow.results import RunResult, build_run
from emulation.errors import EmulationError
from traffic.result import AgentResult, Failure


def assemble_run(
    jobs: Sequence[Job],
    documents: Mapping[str, AgentResult],
    scheduler: str,
    alone_s: Mapping[str, float] | None = None,
    failed_jobs: Mapping[str, Failure] | None = None,
) -> RunResult:
    """The shared result shape from the agents' documents (see module docstring).

    Checks that every flow was delivered exactly (receiver count and sender confirmation equal the size);
    a job's slowdown is its completion over ``alone_s[job]`` (its completion when run alone), 1.0 if
    not given.  ``failed_jobs`` (job -> why) are left out of the timings and listed as failed (each
    failure as its one line).
    """
    start_s: dict[str, float] = {}
    finish_s: dict[str, float] = {}
    failed = {job_id: failure.line() for job_id, failure in (failed_jobs or {}).items()}
    jobs = [job for job in jobs if job.job_id not in failed]
    for job in jobs:
        for task in job.tasks.values():
            qid = qualified(job.job_id, task.task_id)
            if isinstance(task, ComputeTask):
                record = _record(documents, task.host, "tasks", qid)
                start_s[qid], finish_s[qid] = float(record["start"]), float(record["finish"])
                continue
            sent = _record(documents, task.src, "sent", qid)
            received = _record(documents, task.dst, "received", qid)
            for who, count in (("receiver", received.get("received_bytes")),
                               ("sender's confirmation", sent.get("confirmed_bytes"))):
                if count != task.size_bytes:
                    raise EmulationError(
                        f"flow {qid}: {who} counted {count} bytes, expected {task.size_bytes}")
            start_s[qid], finish_s[qid] = float(sent["start"]), float(received["finish"])
    run = build_run(scheduler, jobs, start_s, finish_s, alone_s)
    run.failed_jobs = failed or None
    return run


def fault_records(faults: Sequence[Any]) -> list[dict[str, Any]]:
    """Fault events as a result records them (``RunResult.faults``)."""
    return [{"kind": f.kind, "target": list(f.target), "at_s": f.at_s, "up": f.up} for f in faults]


def _record(documents: Mapping[str, AgentResult], host: str, section: str, qid: str) -> Mapping[str, Any]:
    """``qid``'s record in agent ``host``'s ``tasks``, ``sent`` or ``received``."""
    doc = documents.get(host)
    if doc is None:
        raise EmulationError(f"no result from agent {host} (needed for {qid})")
    record = getattr(doc, section).get(qid)
    if record is None or (section == "tasks" and "finish" not in record):
        raise EmulationError(f"agent {host} has no {section} record for {qid}")
    return record
