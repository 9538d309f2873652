"""Scheduler registry: policy name -> class; an unknown name fails at once and lists the valid ones."""

from __future__ import annotations

from collections.abc import Iterable

from echelonflow.errors import UserError
from echelonflow.schedulers.aalo import AaloScheduler
from echelonflow.schedulers.base import ActiveFlow, Decision, FlowEvent, Scheduler, Snapshot
from echelonflow.schedulers.crux import CruxScheduler
from echelonflow.schedulers.echelon import EchelonScheduler, EchelonVarysScheduler
from echelonflow.schedulers.echelon_online import EchelonOnlineScheduler
from echelonflow.schedulers.fair import FairScheduler
from echelonflow.schedulers.fifo import FifoPriorityScheduler
from echelonflow.schedulers.sincronia import SincroniaScheduler
from echelonflow.schedulers.varys import (
    CoflowScheduler,
    CoflowStaticScheduler,
    FifoScheduler,
    PortFairScheduler,
)

SCHEDULERS: dict[str, type[Scheduler]] = {
    "fair": FairScheduler,
    "coflow": CoflowScheduler,
    "echelon": EchelonScheduler,
    "fifo": FifoScheduler,
    "sincronia": SincroniaScheduler,
    "aalo": AaloScheduler,
    "echelon-online": EchelonOnlineScheduler,
    "echelon-varys": EchelonVarysScheduler,
    "port-fair": PortFairScheduler,
    "coflow-static": CoflowStaticScheduler,
    "fifo-priority": FifoPriorityScheduler,
    "crux": CruxScheduler,
}

__all__ = [
    "SCHEDULERS", "ActiveFlow", "Decision", "FlowEvent", "Scheduler", "Snapshot",
    "check_names", "coflow_rule_warning", "get_scheduler",
]


def _unknown(name: object) -> UserError:
    return UserError(f"unknown scheduler {name!r}; choose one of {', '.join(SCHEDULERS)}")


def check_names(names: Iterable[str]) -> list[str]:
    """``names`` (e.g. repeated ``--scheduler`` options) in first-seen order without repeats.

    Raises UserError at the first unknown name, so a command fails before it loads or starts anything.
    """
    unique = list(dict.fromkeys(names))
    for name in unique:
        if name not in SCHEDULERS:
            raise _unknown(name)
    return unique


def get_scheduler(name: str) -> Scheduler:
    """A fresh scheduler instance for ``name`` (schedulers are stateless, but never share one by accident)."""
    try:
        cls = SCHEDULERS[name]
    except (KeyError, TypeError):
        raise _unknown(name) from None
    return cls()


def coflow_rule_warning(names: Iterable[str]) -> str | None:
    """The one line to show when the coflow rescheduling rule runs schedulers it is not faithful to
    (``Scheduler.coflow_rule_faithful``), or None when it is faithful to all of ``names``.

    A warning, not a refusal: the rule is how Varys and CoflowSim run, and reproducing a number taken
    under it (or measuring what it costs a greedy allocator) is legitimate; comparing schedulers under it
    is not (docs/performance.md, "The coflow rescheduling rule")."""
    unfaithful = [name for name in dict.fromkeys(names)  # an unknown name is refused where it is checked
                  if name in SCHEDULERS and not SCHEDULERS[name].coflow_rule_faithful]
    if not unfaithful:
        return None
    faithful = ", ".join(name for name, cls in SCHEDULERS.items() if cls.coflow_rule_faithful)
    return (f"warning: the coflow rescheduling rule is not faithful to {', '.join(unfaithful)}: it holds "
            f"their rates until a coflow starts or completes, so the bandwidth of every flow that finishes "
            f"earlier idles (it is faithful to {faithful} only); compare them under every-flow")
