"""The result document shared by ``echelon simulate`` and ``echelon emulate``, and its one builder.

One shape for both, so reports and comparisons never care where numbers came from; the format is
documented in ``docs/results-format.md``.  Every time is in seconds from the run's start (``_s``)::

    {"scenario": NAME, "mode": "simulate" | "emulate", "runs": [
        {"scheduler": NAME,
         "jobs": {JOB: {"completion_s": s, "slowdown": x}},
         "echelonflows": {"job/ech": {"tardiness_s": s, "kind": str, "flows": ["job/flow", ...]}},
         "flows": {"job/flow": {"start_s": s, "finish_s": s, "ideal_finish_s": s, "src": h, "dst": h,
                                "size_bytes": n, "echelon": "job/ech"}},
         "tasks": {"job/task": {"type": "compute", "host": h, "start_s": s, "finish_s": s}
                             | {"type": "flow", "src": h, "dst": h, "start_s": s, "finish_s": s}},
         "objective_s": sum of EchelonFlow tardiness times the job's weight (Eq. 4),
         "jct_mean_s": s, "jct_p95_s": s, "gpu_busy_fraction": x (absent without compute tasks)}]}

Without per-flow records (``to_json_dict(per_flow=False)``, ``echelon simulate --json``'s default) a
run has no ``flows`` or ``tasks``, each EchelonFlow a ``flow_count`` instead of its ``flows`` and the run a
``summary`` (:func:`run_summary`); :meth:`Results.write_json` streams the per-flow document and
:meth:`Results.write_task_records` the records as JSON lines.

:func:`build_run_in_order` is the only place that turns task start and finish times into these numbers
(reference times, ideal finish times, tardiness, the objective, completion and slowdown, and through
:func:`training_metrics` the mean and 95th-percentile completion and the GPU-busy fraction): the simulator
feeds it simulated times by task number, the emulation runner the agents' measured ones by id through
:func:`build_run`.  :func:`format_table` renders the one human table that compares schedulers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import IO, Any

from echelonflow import echelon as echelon_mod
from echelonflow.echelon import EchelonSpec
from echelonflow.errors import UserError
from echelonflow.faults import FAULT_KINDS
from echelonflow.fields import (
    Field,
    FieldError,
    array,
    boolean,
    identifier,
    integer,
    mapping,
    nullable,
    number,
    one_of,
    ranged,
    read,
    record,
    show,
    text,
)
from echelonflow.limits import DILATION, SECONDS, SIZE_BYTES
from echelonflow.model import Job, qualified
from echelonflow.run_records import (
    FlowRecords,
    FlowResult,
    RunTasks,
    TaskRecords,
    TaskResult,
    compute_spans,
    float_column,
    tasks_with_flows,
)

#: Keys of the format before units were in the names (a run folder written then cannot be read).
_OLD_RUN_KEYS = {"objective"}
#: The rescheduling rules a document may name (absent: every flow start and finish was a decision).
_RESCHEDULING = ("every-flow", "coflow")


class OldFormatError(UserError):
    """A result document in the format before unit-named keys."""


@dataclass
class JobResult:
    completion_s: float
    slowdown: float
    #: No schedule completes the job faster (``echelonflow.bounds``); absent where nobody computed it.
    lower_bound_s: float | None = None

    def to_json_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.lower_bound_s is None:
            del out["lower_bound_s"]
        return out


@dataclass
class EchelonResult:
    tardiness_s: float
    kind: str
    #: Its flows' ``job/flow`` ids (a built run reads them off its records: :class:`FlowIds`).
    flows: Sequence[str] = field(default_factory=list)
    #: How many flows it has, where a document without per-flow records was read (``flows`` empty then).
    flow_count: int | None = None

    def to_json_dict(self, per_flow: bool = True) -> dict[str, Any]:
        if per_flow:
            return {"tardiness_s": self.tardiness_s, "kind": self.kind, "flows": list(self.flows)}
        count = len(self.flows) if self.flow_count is None else self.flow_count
        return {"tardiness_s": self.tardiness_s, "kind": self.kind, "flow_count": count}


#: Keys only an emulated run has (None: absent from the document): which repeat of its scheduler it is,
#: the fidelity monitor's verdict and numbers, the wire check of a captured run, the faults injected
#: (``echelon emulate --fault``) and the jobs that failed (job -> one line why; absent from ``jobs``).
EMULATION_RUN_KEYS = ("repeat", "trusted", "fidelity_monitor", "wire_check", "faults", "failed_jobs")


#: A run's training metrics (:func:`training_metrics`), from its jobs and tasks; absent where undefined.
TRAINING_KEYS = ("jct_mean_s", "jct_p95_s", "gpu_busy_fraction")


@dataclass
class RunResult:
    """One scheduler's run of a scenario."""

    scheduler: str
    jobs: dict[str, JobResult] = field(default_factory=dict)
    echelonflows: dict[str, EchelonResult] = field(default_factory=dict)
    #: Per-flow and per-task records by ``job/task`` id: a built run's are columns over its jobs
    #: (:mod:`echelonflow.run_records`), a document's dictionaries; both read the same.
    flows: Mapping[str, FlowResult] = field(default_factory=dict)
    tasks: Mapping[str, TaskResult] = field(default_factory=dict)
    objective_s: float = 0.0
    #: What users train for (:func:`training_metrics`): None when the run has no job (or no compute task).
    jct_mean_s: float | None = None
    jct_p95_s: float | None = None
    gpu_busy_fraction: float | None = None
    repeat: int | None = None
    trusted: bool | None = None
    fidelity_monitor: dict[str, Any] | None = None
    wire_check: dict[str, Any] | None = None
    faults: list[dict[str, Any]] | None = None
    failed_jobs: dict[str, str] | None = None
    #: Each job's completion when it ran alone (the slowdowns' reference; None: not measured).  Kept for
    #: whoever needs the times again (an emulation without its own alone phases), not written out.
    alone_s: dict[str, float] | None = field(default=None, compare=False, repr=False)

    def to_json_dict(self, per_flow: bool = True) -> dict[str, Any]:
        """The run as a document; without ``per_flow`` no ``flows`` or ``tasks`` records and no flow
        lists, a ``summary`` instead (what a user opens first; a few MB for FB2010's 700,000 flows)."""
        out = self._head(per_flow)
        if per_flow:
            out["flows"] = {k: v.to_json_dict() for k, v in self.flows.items()}
            out["tasks"] = {k: v.to_json_dict() for k, v in self.tasks.items()}
        out.update(self._tail(per_flow))
        return out

    def _head(self, per_flow: bool) -> dict[str, Any]:
        """The keys before the per-flow records."""
        return {"scheduler": self.scheduler,
                "jobs": {k: v.to_json_dict() for k, v in self.jobs.items()},
                "echelonflows": {k: v.to_json_dict(per_flow) for k, v in self.echelonflows.items()}}

    def _tail(self, per_flow: bool) -> dict[str, Any]:
        """The keys after the per-flow records."""
        out: dict[str, Any] = {} if per_flow else {"summary": run_summary(self)}
        out["objective_s"] = self.objective_s
        out.update({key: getattr(self, key) for key in TRAINING_KEYS if getattr(self, key) is not None})
        out.update({key: getattr(self, key) for key in EMULATION_RUN_KEYS if getattr(self, key) is not None})
        return out

    def task_records(self) -> Iterable[dict[str, Any]]:
        """One record per task (``--flows FILE``'s lines): its ``tasks`` entry under ``task``, with the
        ``flows`` entry's ideal finish, size and EchelonFlow for a flow."""
        for qid, task, flow in tasks_with_flows(self.tasks, self.flows):
            record = {"scheduler": self.scheduler}
            if self.repeat is not None:
                record["repeat"] = self.repeat
            record["task"] = qid
            record.update(task.to_json_dict())
            if flow is not None:
                record.update(ideal_finish_s=flow.ideal_finish_s, size_bytes=flow.size_bytes,
                              echelon=flow.echelon)
            yield record

    def job_tardiness_s(self, job_id: str) -> list[float]:
        """Tardiness of each of ``job_id``'s EchelonFlows (keys are ``job/echelon``; job ids have no '/')."""
        return [e.tardiness_s for key, e in self.echelonflows.items() if key.split("/", 1)[0] == job_id]

    @classmethod
    def from_json_dict(cls, data: dict[str, Any], where: str = "") -> RunResult:
        """The run ``data`` holds, checked against the documented schema (``where``: its path in the
        document, for the one-line error)."""
        if isinstance(data, dict) and _OLD_RUN_KEYS & set(data):
            raise OldFormatError(
                "written in the older format without units in its keys ('objective', 'completion_time', "
                "...); re-run the simulation or emulation to write the current format"
            )
        read(data, RUN_FIELDS, where, "a run object")
        try:
            run = cls(
                scheduler=data["scheduler"],
                jobs={k: JobResult(**v) for k, v in data["jobs"].items()},
                echelonflows={k: EchelonResult(**v) for k, v in data["echelonflows"].items()},
                # a document without per-flow records (``echelon simulate --json``'s default) has none
                flows={k: FlowResult(**v) for k, v in data.get("flows", {}).items()},
                tasks={k: TaskResult(**v) for k, v in data.get("tasks", {}).items()},
                objective_s=data["objective_s"],
                **{key: data[key] for key in EMULATION_RUN_KEYS if key in data},
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise UserError(f"result run is malformed ({type(exc).__name__}: {exc})") from None
        if all(key in data for key in TRAINING_KEYS[:2]):  # written with them (and without per-flow records)
            for key in TRAINING_KEYS:
                setattr(run, key, data.get(key))
        else:  # a document written before the training metrics existed: from its own jobs and tasks
            run.set_training_metrics()
        return run

    def set_training_metrics(self) -> None:
        """Fill :data:`TRAINING_KEYS` from the run's jobs and tasks (:func:`training_metrics`)."""
        self.jct_mean_s, self.jct_p95_s, self.gpu_busy_fraction = training_metrics(self.jobs, self.tasks)


def percentile_nearest_rank(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile: the smallest value with at least ``share`` of ``values`` at or below
    it (one of the values, no interpolation: with 20 jobs the p95 is the second slowest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def training_metrics(jobs: Mapping[str, JobResult],
                     tasks: Mapping[str, TaskResult]) -> tuple[float | None, float | None, float | None]:
    """(mean job completion, its 95th percentile (nearest rank), GPU-busy fraction) of a run.

    GPU-busy fraction (docs/scheduler-design.md, "What users train for"): the compute time of every job
    with compute tasks (each compute task's measured ``finish_s - start_s``) over the GPU time those jobs
    held, each job holding every host it computes on from its arrival to its completion (hosts x
    ``completion_s``).  Only the network decides it: the compute is the same under every scheduler, so a
    scheduler raises the fraction exactly by finishing the GPU-heavy jobs sooner.  None without a compute
    task (Coflow-Benchmark jobs are flows only); completions None without a job.
    """
    if not jobs:
        return None, None, None
    completions = [job.completion_s for job in jobs.values()]
    compute_s: dict[str, float] = {}
    hosts: dict[str, set[str]] = {}
    for job_id, host, spent_s in compute_spans(tasks):
        compute_s[job_id] = compute_s.get(job_id, 0.0) + spent_s
        hosts.setdefault(job_id, set()).add(host)
    held_s = sum(len(hosts[job_id]) * jobs[job_id].completion_s for job_id in compute_s if job_id in jobs)
    busy_s = sum(spent for job_id, spent in compute_s.items() if job_id in jobs)
    gpu = busy_s / held_s if held_s > 0 else None
    return sum(completions) / len(completions), percentile_nearest_rank(completions, 0.95), gpu


def _spread(values: Sequence[float]) -> dict[str, float] | None:
    """Mean, median, 99th percentile (nearest rank) and maximum of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {"mean": math.fsum(ordered) / n, "median": median,
            "p99": ordered[max(0, math.ceil(0.99 * n) - 1)], "max": ordered[-1]}


def run_summary(run: RunResult) -> dict[str, Any]:
    """A run at a glance (derived from ``jobs`` and ``echelonflows``, so a document read back gives the
    same): how many jobs, EchelonFlows and flows, and the spread of the jobs' completion and the
    EchelonFlows' tardiness."""
    flows = sum(len(e.flows) if e.flow_count is None else e.flow_count for e in run.echelonflows.values())
    return {"jobs": len(run.jobs), "echelonflows": len(run.echelonflows), "flows": flows,
            "completion_s": _spread([job.completion_s for job in run.jobs.values()]),
            "tardiness_s": _spread([e.tardiness_s for e in run.echelonflows.values()])}


def job_completion_s(job: Job, finish_s: Mapping[str, float]) -> float:
    """How long ``job`` took from its arrival to its last task's finish (``finish_s`` keyed by
    ``job/task``); 0 for a job without tasks."""
    return completion_after_arrival_s(job, (finish_s[qualified(job.job_id, tid)] for tid in job.tasks))


def completion_after_arrival_s(job: Job, finish_s: Iterable[float]) -> float:
    """How long ``job`` took from its arrival to the last of its tasks' ``finish_s``; 0 without tasks.

    The one rule behind :func:`job_completion_s` and :func:`build_run_in_order`, so a caller holding
    times by id and one holding them by task number get the same completion to the bit."""
    last_s = max(finish_s, default=None)
    return 0.0 if last_s is None else last_s - job.arrival_s


def build_run(
    scheduler: str,
    jobs: Sequence[Job],
    start_s: Mapping[str, float],
    finish_s: Mapping[str, float],
    alone_s: Mapping[str, float] | None = None,
    echelons: Mapping[str, Mapping[str, EchelonSpec]] | None = None,
) -> RunResult:
    """The result of one run from when each task started and finished (keys ``job/task``, seconds).

    The times are put in task order and handed to :func:`build_run_in_order`, which computes
    everything (see there).  Plain floats: a caller may hand numpy scalars, whose comparisons give
    numpy booleans JSON refuses.
    """
    order = [qualified(job.job_id, tid) for job in jobs for tid in job.tasks]
    return build_run_in_order(scheduler, jobs, [float(start_s[qid]) for qid in order],
                              [float(finish_s[qid]) for qid in order], alone_s, echelons)


def build_run_in_order(
    scheduler: str,
    jobs: Sequence[Job],
    start_s: Sequence[float],
    finish_s: Sequence[float],
    alone_s: Mapping[str, float] | None = None,
    echelons: Mapping[str, Mapping[str, EchelonSpec]] | None = None,
) -> RunResult:
    """The result of one run from each task's start and finish (seconds), listed job by job in
    ``jobs`` order and within a job in ``job.tasks`` order: the simulator's task numbers.

    Times by number, not by ``job/task`` id, because on a trace of 700,000 flows two dictionaries
    keyed by id cost more memory than the result itself (docs/performance.md, "Memory"); for the same
    reason the run's records are columns over ``jobs`` and these times (:mod:`echelonflow.run_records`).

    For every EchelonFlow the reference time r comes from its flows' actual starts
    (:func:`echelonflow.echelon.reference_time`), each flow is due at r + o_j and the EchelonFlow's
    tardiness is its worst flow's lateness (Eq. 2); the objective is their sum weighted by each job's
    ``weight`` (Eq. 4).  A job's completion counts from its arrival; its
    slowdown is its completion over ``alone_s[job]`` (its completion when it ran alone), 1.0 without
    one.  ``echelons`` (job id -> :func:`~echelonflow.echelon.echelons_of`) saves recomputing the
    groups when the caller has them.
    """
    run = RunResult(scheduler)
    numbered = RunTasks(jobs)
    start_s, finish_s = float_column(start_s), float_column(finish_s)
    flows = FlowRecords(numbered, start_s, finish_s)
    weights: list[float] = []  # each EchelonFlow's job weight, in run.echelonflows order (Eq. 4)
    for job, base, end in zip(numbered.jobs, numbered.bases, numbered.bases[1:]):
        number = {tid: base + k for k, tid in enumerate(job.tasks)}
        specs = echelons[job.job_id] if echelons is not None else echelon_mod.echelons_of(job)
        for echelon_id, spec in specs.items():
            eqid = qualified(job.job_id, echelon_id)
            numbers = {fid: number[fid] for fid in spec.flow_ids}
            run.echelonflows[eqid] = _echelon_result(flows, eqid, spec, numbers)
            weights.append(job.weight)
        done_s = completion_after_arrival_s(job, finish_s[base:end])
        base_s = (alone_s or {}).get(job.job_id, done_s)
        run.jobs[job.job_id] = JobResult(done_s, done_s / base_s if base_s > 0 else 1.0)
    run.flows, run.tasks = flows, TaskRecords(numbered, start_s, finish_s)
    run.alone_s = {job_id: float(time_s) for job_id, time_s in alone_s.items()} if alone_s else None
    run.objective_s = echelon_mod.total_tardiness((e.tardiness_s for e in run.echelonflows.values()), weights)
    run.set_training_metrics()
    return run


def _echelon_result(flows: FlowRecords, eqid: str, spec: EchelonSpec,
                    number: Mapping[str, int]) -> EchelonResult:
    """One EchelonFlow's records added to ``flows`` (``number``: its flow ids -> task numbers, in the
    spec's flow order), and its result."""
    start_s, finish_s = flows.start_s, flows.finish_s
    reference_s = echelon_mod.reference_time(spec, {f: start_s[t] for f, t in number.items()})
    assert reference_s is not None  # every flow of a finished run has started
    ids = flows.add(eqid, number.values(), [reference_s + offset_s for offset_s in spec.offsets_s.values()])
    finishes_s = {f: finish_s[t] for f, t in number.items()}
    tardiness_s = echelon_mod.echelon_tardiness(spec, finishes_s, reference_s)
    return EchelonResult(tardiness_s, spec.kind, ids)


@dataclass
class Results:
    """A scenario's runs, one per scheduler."""

    scenario: str
    mode: str
    runs: list[RunResult] = field(default_factory=list)
    # An emulation run on a time-dilated scenario (``echelonflow.dilation``): the factor, how it was chosen
    # and, when measured, the calibration; the runs' times are already in the undilated time scale.
    dilation: dict[str, Any] | None = None
    # A simulation also run under timing noise (``simulator.noise``): the jitter, the sample count and,
    # per scheduler, the spread of every job's completion and of the objective over the samples.
    timing_noise: dict[str, Any] | None = None
    # A simulation under another rescheduling rule than the exact one (``simulator.engine``: "coflow",
    # Varys's); absent means every flow start and finish was a decision.
    rescheduling: str | None = None

    def to_json_dict(self, per_flow: bool = True) -> dict[str, Any]:
        """The document; ``per_flow`` false: without per-flow records (:meth:`RunResult.to_json_dict`)."""
        out = {"scenario": self.scenario, "mode": self.mode,
               "runs": [r.to_json_dict(per_flow) for r in self.runs]}
        out.update(self._extras())
        return out

    def _extras(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.dilation is not None:
            out["dilation"] = self.dilation
        if self.timing_noise is not None:
            out["timing_noise"] = self.timing_noise
        if self.rescheduling is not None:
            out["rescheduling"] = self.rescheduling
        return out

    def write_json(self, stream: IO[str], per_flow: bool = False) -> None:
        """The document onto ``stream``, indented; with ``per_flow`` streamed record by record, so that
        writing 700,000 flows (FB2010) never holds their records, or their ids, beside the run (a built
        run's records are made as they are read).  Same JSON as :meth:`to_json_dict`."""
        if not per_flow:
            json.dump(self.to_json_dict(per_flow=False), stream, indent=1, allow_nan=False)
            stream.write("\n")
            return
        dumps = partial(json.dumps, allow_nan=False)
        stream.write(f'{{\n "scenario": {dumps(self.scenario)},\n "mode": {dumps(self.mode)},\n "runs": [')
        for n, run in enumerate(self.runs):
            stream.write(",\n  {" if n else "\n  {")
            stream.write(f"\n   \"scheduler\": {dumps(run.scheduler)},")
            stream.write(f"\n   \"jobs\": {dumps({k: v.to_json_dict() for k, v in run.jobs.items()})},")
            # each EchelonFlow's id list, like each record, exists only while it is written
            streamed = {"echelonflows": run.echelonflows, "flows": run.flows, "tasks": run.tasks}
            for key, entries in streamed.items():
                stream.write(f"\n   {dumps(key)}: {{")
                for k, (qid, entry) in enumerate(entries.items()):
                    stream.write(f"{',' if k else ''}\n    {dumps(qid)}: {dumps(entry.to_json_dict())}")
                stream.write("\n   },")
            tail = run._tail(True)
            stream.write(",".join(f"\n   {dumps(key)}: {dumps(value)}" for key, value in tail.items()))
            stream.write("\n  }")
        stream.write("\n ]")
        for key, value in self._extras().items():
            stream.write(f",\n {dumps(key)}: {dumps(value)}")
        stream.write("\n}\n")

    def write_task_records(self, stream: IO[str]) -> int:
        """Every run's task records (:meth:`RunResult.task_records`) as JSON lines; returns how many."""
        count = 0
        for run in self.runs:
            for line in run.task_records():
                stream.write(json.dumps(line, allow_nan=False))
                stream.write("\n")
                count += 1
        return count

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> Results:
        """The document ``data``, checked against docs/results-format.md: a
        :class:`~echelonflow.fields.FieldError` names the first field that does not fit (``runs[0].jobs
        ['fig2'].completion_s: must be a number, got 'soon'``)."""
        top = read(data, DOCUMENT_FIELDS, what="a JSON object")
        runs = [RunResult.from_json_dict(r, f"runs[{i}]") for i, r in enumerate(top["runs"])]
        repeats: dict[str, list[int | None]] = {}
        for index, run in enumerate(runs):  # the tables, the CSV and the plots tell runs apart by these
            earlier = repeats.setdefault(run.scheduler, [])
            if earlier and (run.repeat is None or None in earlier or run.repeat in earlier):
                raise FieldError(f"runs[{index}]", f"a second run of scheduler {run.scheduler!r} with repeat "
                                                   f"{show(run.repeat)}; runs of one scheduler are told "
                                                   "apart by distinct repeat numbers")
            earlier.append(run.repeat)
        return cls(top["scenario"], top["mode"], runs, top["dilation"], top["timing_noise"],
                   top["rescheduling"])


# ------------------------------------------------------------------ the documented schema
def _task(field: str, value: Any) -> dict[str, Any]:
    """A ``tasks`` entry: a compute task's fields or a flow task's, by its ``type``."""
    if isinstance(value, Mapping) and "type" in value:
        one_of("compute", "flow")(f"{field}.type", value["type"])
        return read(value, COMPUTE_TASK_FIELDS if value["type"] == "compute" else FLOW_TASK_FIELDS, field)
    return read(value, (Field("type", required=True),), field, "a task object")


_TIME = number(what="a number of seconds")  # finite; a tardiness may be negative
_OBJECT = mapping()


def _task_id(field: str, value: Any) -> str:
    """A key of a run's ``flows`` and ``tasks``: ``job/task`` (the tables and plots split it there)."""
    job, slash, task = value.partition("/") if isinstance(value, str) else ("", "", "")
    if not (job and slash and task):
        raise FieldError(field, f"must be a task id like 'job/task', got {show(value)}")
    return value


#: A fault the emulation injected (``emulation.assemble.fault_records``), read back for the tables.
FAULT_FIELDS = (Field("kind", one_of(*FAULT_KINDS), required=True),
                Field("target", array(text()), default=[]),
                Field("at_s", ranged(SECONDS, "a number of seconds"), required=True),
                Field("up", boolean(), default=False))


def _dilation(field: str, value: Any) -> dict[str, Any]:
    """A document's ``dilation``: its factor and how it was chosen checked (the tables print them), the
    calibration's own record kept as it is."""
    value = _OBJECT(field, value)
    ranged(DILATION, "a dilation factor")(f"{field}.factor", value.get("factor"))
    text()(f"{field}.chosen_by", value.get("chosen_by"))
    confirmation = array(of="of verdict objects")(f"{field}.confirmation", value.get("confirmation", []))
    for index, verdict in enumerate(confirmation):
        where = f"{field}.confirmation[{index}]"
        ranged(DILATION, "a dilation factor")(f"{where}.factor", _OBJECT(where, verdict).get("factor"))
        boolean()(f"{where}.trusted", verdict.get("trusted"))
    return value


JOB_FIELDS = (Field("completion_s", _TIME, required=True), Field("slowdown", number(0.0), required=True),
              Field("lower_bound_s", nullable(number(0.0, what="a number of seconds"))))
ECHELON_FIELDS = (Field("tardiness_s", _TIME, required=True),
                  Field("kind", one_of(*echelon_mod.KINDS), required=True),
                  Field("flows", array(text(), of="of flow ids"), default=[]),
                  Field("flow_count", nullable(integer(0))))
FLOW_FIELDS = (Field("start_s", _TIME, required=True), Field("finish_s", _TIME, required=True),
               Field("ideal_finish_s", _TIME, required=True), Field("src", text(), required=True),
               Field("dst", text(), required=True),
               Field("size_bytes", ranged(SIZE_BYTES, "a whole number of bytes"), required=True),
               Field("echelon", text(), required=True))
COMPUTE_TASK_FIELDS = (Field("type", required=True), Field("host", text(), required=True),
                       Field("start_s", _TIME, required=True), Field("finish_s", _TIME, required=True))
FLOW_TASK_FIELDS = (Field("type", required=True), Field("src", text(), required=True),
                    Field("dst", text(), required=True), Field("start_s", _TIME, required=True),
                    Field("finish_s", _TIME, required=True))
#: One run (docs/results-format.md); the emulation's own keys hold the machine's measurements, whose
#: inner shape is the emulation's (objects, checked as objects).
RUN_FIELDS = (
    Field("scheduler", identifier(), required=True),  # it names the run's timeline file
    Field("jobs", mapping(item=record(JOB_FIELDS, "a job result object")), required=True),
    Field("echelonflows", mapping(item=record(ECHELON_FIELDS, "an EchelonFlow result object")),
          required=True),
    # a compact document (``echelon simulate --json``'s default) has no per-flow records, a summary instead
    Field("flows", mapping(_task_id, record(FLOW_FIELDS, "a flow result object")), default={}),
    Field("tasks", mapping(_task_id, _task), default={}),
    Field("summary", nullable(_OBJECT)),
    Field("objective_s", _TIME, required=True),
    Field("jct_mean_s", nullable(number(0.0, what="a number of seconds"))),
    Field("jct_p95_s", nullable(number(0.0, what="a number of seconds"))),
    Field("gpu_busy_fraction", nullable(number(0.0, 1.0))),
    Field("repeat", nullable(integer(0))),
    Field("trusted", nullable(boolean())),
    Field("fidelity_monitor", nullable(_OBJECT)),
    Field("wire_check", nullable(_OBJECT)),
    Field("faults", nullable(array(record(FAULT_FIELDS, "a fault object"), of="of fault objects"))),
    Field("failed_jobs", nullable(mapping(item=text()))),
)
#: The whole document: the runs, and what a run folder adds (status, summary, fidelity: bookkeeping and
#: numbers ``echelon report`` recomputes).
DOCUMENT_FIELDS = (
    Field("scenario", text(), required=True),
    Field("mode", one_of("simulate", "emulate"), required=True),
    Field("runs", array(of="of run objects"), required=True),
    Field("dilation", nullable(_dilation)),
    Field("timing_noise", nullable(_OBJECT)),
    Field("rescheduling", nullable(one_of(*_RESCHEDULING))),
    Field("status", nullable(_OBJECT)),
    Field("summary", nullable(_OBJECT)),
    Field("fidelity", nullable(_OBJECT)),
)


def format_table(results: Results) -> str:
    """One table comparing schedulers: per job completion and slowdown, EchelonFlow tardiness sum/max; per
    scheduler an ``(all)`` row with the mean job completion beside the objective."""
    header = ["scheduler", "job", "completion_s", "slowdown", "tardiness_sum_s", "tardiness_max_s"]
    rows: list[list[str]] = []
    for run in results.runs:
        for job_id, job in run.jobs.items():
            tard = run.job_tardiness_s(job_id)
            rows.append(
                [
                    run.scheduler,
                    job_id,
                    f"{job.completion_s:.3f}",
                    f"{job.slowdown:.3f}",
                    f"{sum(tard):.3f}" if tard else "-",
                    f"{max(tard):.3f}" if tard else "-",
                ]
            )
        mean = "-" if run.jct_mean_s is None else f"{run.jct_mean_s:.3f}"
        rows.append([run.scheduler, "(all)", mean, "", f"{run.objective_s:.3f}", ""])
    rule = f", {results.rescheduling} rescheduling rule" if results.rescheduling else ""
    table = render_table(f"scenario {results.scenario} ({results.mode}{rule})", header, rows)
    return f"{table}\n{ALL_ROW_NOTE}"


#: What the ``(all)`` rows of :func:`format_table` hold.
ALL_ROW_NOTE = "(all): completion_s = mean job completion (JCT), tardiness_sum_s = objective (Eq. 4)"


def render_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``title``, then left-aligned columns as wide as their widest cell, a dashed rule under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [title]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    return "\n".join(lines)
