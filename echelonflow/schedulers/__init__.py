"""Scheduler registry: policy name -> class; an unknown name fails at once and lists the valid ones."""

from __future__ import annotations

from echelonflow.errors import UserError
from echelonflow.schedulers.base import ActiveFlow, Decision, Scheduler, Snapshot
from echelonflow.schedulers.echelon import CoflowScheduler, EchelonScheduler
from echelonflow.schedulers.fair import FairScheduler

SCHEDULERS: dict[str, type[Scheduler]] = {
    "fair": FairScheduler,
    "coflow": CoflowScheduler,
    "echelon": EchelonScheduler,
}

__all__ = ["SCHEDULERS", "ActiveFlow", "Decision", "Scheduler", "Snapshot", "get_scheduler"]


def get_scheduler(name: str) -> Scheduler:
    """A fresh scheduler instance for ``name`` (schedulers are stateless, but never share one by accident)."""
    try:
        cls = SCHEDULERS[name]
    except (KeyError, TypeError):
        raise UserError(f"unknown scheduler {name!r}; choose one of {', '.join(SCHEDULERS)}") from None
    return cls()
