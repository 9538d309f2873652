"""The result document shared by ``echelon simulate`` and ``echelon emulate``.

One shape for both, so reports and comparisons never care where numbers came from::

    {"scenario": NAME, "mode": "simulate" | "emulate", "runs": [
        {"scheduler": NAME,
         "jobs": {JOB: {"completion_time": s, "slowdown": x}},
         "echelonflows": {"job/ech": {"tardiness": s, "kind": str, "flows": ["job/flow", ...]}},
         "flows": {"job/flow": {"start": s, "finish": s, "ideal_finish": s, "src": h, "dst": h,
                                "size_bytes": n, "echelon": "job/ech"}},
         "tasks": {"job/task": {"type": "compute", "host": h, "start": s, "finish": s}
                             | {"type": "flow", "src": h, "dst": h, "start": s, "finish": s}},
         "objective": sum of EchelonFlow tardiness (Eq. 4)}]}

Times are seconds from the run's start (jobs start at 0).  :func:`format_table` renders the one
human table that compares schedulers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from echelonflow.errors import UserError


@dataclass
class JobResult:
    completion_time: float
    slowdown: float

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EchelonResult:
    tardiness: float
    kind: str
    flows: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FlowResult:
    start: float
    finish: float
    ideal_finish: float
    src: str
    dst: str
    size_bytes: int
    echelon: str

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TaskResult:
    """A compute task has ``host``; a flow task has ``src`` and ``dst``."""

    type: str
    start: float
    finish: float
    host: str | None = None
    src: str | None = None
    dst: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.type == "compute":
            out["host"] = self.host
        else:
            out["src"], out["dst"] = self.src, self.dst
        out["start"], out["finish"] = self.start, self.finish
        return out


@dataclass
class RunResult:
    """One scheduler's run of a scenario."""

    scheduler: str
    jobs: dict[str, JobResult] = field(default_factory=dict)
    echelonflows: dict[str, EchelonResult] = field(default_factory=dict)
    flows: dict[str, FlowResult] = field(default_factory=dict)
    tasks: dict[str, TaskResult] = field(default_factory=dict)
    objective: float = 0.0

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "scheduler": self.scheduler,
            "jobs": {k: v.to_json_dict() for k, v in self.jobs.items()},
            "echelonflows": {k: v.to_json_dict() for k, v in self.echelonflows.items()},
            "flows": {k: v.to_json_dict() for k, v in self.flows.items()},
            "tasks": {k: v.to_json_dict() for k, v in self.tasks.items()},
            "objective": self.objective,
        }

    def job_tardiness_s(self, job_id: str) -> list[float]:
        """Tardiness of each of ``job_id``'s EchelonFlows (keys are ``job/echelon``; job ids have no '/')."""
        return [e.tardiness for key, e in self.echelonflows.items() if key.split("/", 1)[0] == job_id]

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> RunResult:
        try:
            return cls(
                scheduler=data["scheduler"],
                jobs={k: JobResult(**v) for k, v in data["jobs"].items()},
                echelonflows={k: EchelonResult(**v) for k, v in data["echelonflows"].items()},
                flows={k: FlowResult(**v) for k, v in data["flows"].items()},
                tasks={k: TaskResult(**v) for k, v in data["tasks"].items()},
                objective=data["objective"],
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise UserError(f"result run is malformed ({type(exc).__name__}: {exc})") from None


@dataclass
class Results:
    """A scenario's runs, one per scheduler."""

    scenario: str
    mode: str
    runs: list[RunResult] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "mode": self.mode, "runs": [r.to_json_dict() for r in self.runs]}

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> Results:
        if not isinstance(data, dict):
            raise UserError("result document must be a JSON object")
        for key in ("scenario", "mode", "runs"):
            if key not in data:
                raise UserError(f"result document has no {key!r} field")
        if not isinstance(data["runs"], list):
            raise UserError("result field 'runs' must be a list")
        return cls(data["scenario"], data["mode"], [RunResult.from_json_dict(r) for r in data["runs"]])


def format_table(results: Results) -> str:
    """One table comparing schedulers: per job completion and slowdown, EchelonFlow tardiness sum/max."""
    header = ["scheduler", "job", "completion_s", "slowdown", "tardiness_sum_s", "tardiness_max_s"]
    rows: list[list[str]] = []
    for run in results.runs:
        for job_id, job in run.jobs.items():
            tard = run.job_tardiness_s(job_id)
            rows.append(
                [
                    run.scheduler,
                    job_id,
                    f"{job.completion_time:.3f}",
                    f"{job.slowdown:.3f}",
                    f"{sum(tard):.3f}" if tard else "-",
                    f"{max(tard):.3f}" if tard else "-",
                ]
            )
        rows.append([run.scheduler, "(all)", "", "", f"{run.objective:.3f}", ""])
    return render_table(f"scenario {results.scenario} ({results.mode})", header, rows)


def render_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``title``, then left-aligned columns as wide as their widest cell, a dashed rule under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [title]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    return "\n".join(lines)
