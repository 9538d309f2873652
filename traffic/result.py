"""What an agent leaves behind: its result document (:class:`AgentResult`) and, when it failed, why
(:class:`Failure`: a cause, the agent it is about, and the detail).

The agent writes one result file (``output_path`` of its run-spec); the orchestrator reads it back
(:func:`load_result`), and decides by a failure's *cause* what happened: an agent that failed by itself,
one that gave up because a peer failed (``aborted``: the peer is the root cause), one stopped by SIGTERM
(``interrupted``), and, seen only by the orchestrator, one that died (``died``: killed by a signal).  The
document's fields are declared once (:data:`RESULT_FIELDS`, :data:`FAILURE_FIELDS`) and read by the
project's one field checker (``echelonflow.fields``); ``status`` and ``error`` are written for people
reading the file and follow from ``failure``.

Standard library and the core only: this runs inside every Mininet host, on Python 3.9 too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from echelonflow.fields import (
    Field,
    FieldError,
    array,
    mapping,
    nullable,
    number,
    one_of,
    read,
    record,
    text,
)
from echelonflow.fileio import read_json, write_json_atomic

#: The agent failed by itself (a transfer, a control message, the registry, its deadline): the detail.
FAILED = "failed"
#: The agent gave up because its peer ``host`` failed (told by that peer): not a root cause.
ABORTED = "aborted"
#: The agent was stopped by SIGTERM or Ctrl-C: whoever stopped it deals with the run.
INTERRUPTED = "interrupted"
#: The agent died (killed by a signal, or stopped by SIGTERM mid-run), as the orchestrator saw it.
DIED = "died"
CAUSES = (FAILED, ABORTED, INTERRUPTED, DIED)


@dataclass(frozen=True)
class Failure:
    """Why an agent, or a job of it, failed: ``cause`` (one of :data:`CAUSES`), ``host`` (the agent the
    failure is about: for ``aborted`` the peer that failed first) and ``detail``."""

    cause: str
    host: str
    detail: str = ""

    def line(self) -> str:
        """The failure as one line for people (progress lines, results.json's ``failed_jobs``)."""
        if self.cause == ABORTED:
            return f"aborted: agent {self.host} failed: {self.detail}"
        if self.cause == INTERRUPTED:
            return INTERRUPTED
        if self.cause == DIED:
            return f"agent {self.host} died {self.detail}"
        return self.detail

    def __str__(self) -> str:
        return self.line()

    def to_json_dict(self) -> dict[str, str]:
        return {"cause": self.cause, "host": self.host, "detail": self.detail}


FAILURE_FIELDS = (
    Field("cause", one_of(*CAUSES), required=True),
    Field("host", text(), required=True),
    Field("detail", text(nonempty=False), default=""),
)


@dataclass(frozen=True)
class AgentResult:
    """One agent's result: every task's times in seconds after t0 (``tasks``: its computes and flows;
    ``sent`` and ``received``: its flows' records), what it still waited for (``pending``), the jobs a
    peer's death failed here (job -> why), its channels and TCP counters, and ``failure`` (None: ok)."""

    host: str
    t0_s: float
    scheduler: str = ""
    failure: Failure | None = None
    failed_jobs: dict[str, str] = field(default_factory=dict)
    pending: list = field(default_factory=list)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    sent: dict[str, dict[str, Any]] = field(default_factory=dict)
    received: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: persistent connections: how many, and how many the plan lacked (each cost a flow a handshake)
    channels: dict[str, int] | None = None
    #: this host's TCP counters over the run (its own network namespace)
    tcp: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def to_json_dict(self) -> dict[str, Any]:
        """The result file's document (``channels`` and ``tcp`` only when measured)."""
        out: dict[str, Any] = {
            "host": self.host,
            "t0_s": self.t0_s,
            "scheduler": self.scheduler,
            "status": "ok" if self.ok else "error",
            "error": None if self.failure is None else self.failure.line(),
            "failure": None if self.failure is None else self.failure.to_json_dict(),
            "failed_jobs": dict(self.failed_jobs),
            "pending": list(self.pending),
            "tasks": self.tasks,
            "sent": self.sent,
            "received": self.received,
        }
        for name in ("channels", "tcp"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


_RECORDS = mapping(text(), mapping(), what="an object (task -> record)")
RESULT_FIELDS = (
    Field("host", text(), required=True),
    Field("t0_s", number(0.0, what="an epoch time in seconds"), required=True),
    Field("scheduler", text(nonempty=False), default=""),
    Field("status", one_of("ok", "error")),  # follows from failure
    Field("error", nullable(text(nonempty=False))),  # follows from failure
    Field("failure", nullable(record(FAILURE_FIELDS))),
    Field("failed_jobs", mapping(text(), text(nonempty=False)), default={}),
    Field("pending", array(text()), default=[]),
    Field("tasks", _RECORDS, default={}),
    Field("sent", _RECORDS, default={}),
    Field("received", _RECORDS, default={}),
    Field("channels", nullable(mapping())),
    Field("tcp", nullable(mapping())),
)


def parse_result(doc: Any) -> AgentResult:
    """An agent's result document, checked; :class:`~echelonflow.fields.FieldError` names what is wrong."""
    fields = read(doc, RESULT_FIELDS, what="an agent result object")
    del fields["status"], fields["error"]
    for name in ("failed_jobs", "pending", "tasks", "sent", "received"):  # defaults are shared: copies
        fields[name] = type(fields[name])(fields[name])
    failure = fields.pop("failure")
    return AgentResult(**fields, failure=None if failure is None else Failure(**failure))


def load_result(path: str) -> AgentResult:
    """The result file an agent wrote; ValueError (one line naming the file) if it is missing or bad."""
    doc = read_json(path, "agent result", ValueError)
    try:
        return parse_result(doc)
    except FieldError as exc:
        raise ValueError(f"agent result {path}: {exc}") from None


def save_result(result: AgentResult, path: str) -> None:
    write_json_atomic(path, result.to_json_dict())
