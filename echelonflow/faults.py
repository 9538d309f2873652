"""Faults to inject into a run: what goes down (or comes back), and when.

One event type serves every way in: the emulator's ``--fault KIND:TARGET@TIME[..TIME]`` option
(:func:`parse_fault`), a scenario's ``events`` list (:func:`read_events`, docs/scenario-format.md) and
the simulator, which replays the network kinds on a :class:`~echelonflow.linkstate.LinkState`.

Kinds live in :data:`FAULT_KINDS` and are added with :func:`register_kind`: each says how its target is
written on the command line and in a scenario, how it is checked against the topology, and whether it
changes the network (``link``, ``switch``: both sides route around it) or something the emulator alone
acts on (a process, say).  Times are seconds from the start of the run (the agents' t0).

Pure and Python 3.9 compatible.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from echelonflow.errors import UserError
from echelonflow.fields import Field, FieldError, array, ranged, read, show, text
from echelonflow.limits import SECONDS
from echelonflow.linkstate import LinkState
from echelonflow.model import FlowColumns
from echelonflow.topology import Topology


class FaultSpecError(UserError):
    """A ``--fault`` value that cannot be parsed or does not fit the topology (one line)."""


@dataclass(frozen=True)
class FaultEvent:
    """At ``at_s``, ``target`` of ``kind`` goes down (``up`` False) or comes back (``up`` True)."""

    at_s: float
    kind: str
    target: tuple[str, ...]
    up: bool = False

    @property
    def network(self) -> bool:
        """Whether the event changes the paths flows can take (the simulator replays only these)."""
        return FAULT_KINDS[self.kind].network

    def apply(self, links: LinkState) -> bool:
        """Change ``links`` as the event says; True when something changed.  Network kinds only."""
        if self.kind == "link":
            return links.set_link(self.target[0], self.target[1], self.up)
        if self.kind == "switch":
            return links.set_switch(self.target[0], self.up)
        raise ValueError(f"a {self.kind} fault does not change the network")

    def describe(self) -> str:
        """``link a1-e1 down at 3 s`` (``controller down at 4 s``: a kind without target)."""
        what = " ".join([self.kind, "-".join(self.target)] if self.target else [self.kind])
        return f"{what} {'up' if self.up else 'down'} at {self.at_s:g} s"

    def to_json(self) -> dict[str, Any]:
        """The event as a scenario's ``events`` entry (what :func:`read_events` reads back)."""
        value: Any = list(self.target) if len(self.target) > 1 else self.target[0] if self.target else True
        return {"at_s": self.at_s, f"{self.kind}_{'up' if self.up else 'down'}": value}


@dataclass(frozen=True)
class FaultKind:
    """How one kind of fault is written and checked.

    ``parse_target`` turns the command line's TARGET text into the target tuple, ``read_target`` a
    scenario value (field name, JSON value) into it; ``check`` returns the problem of a target on a
    topology, or None.  Both parsers raise ``ValueError`` with the problem.
    """

    name: str
    example: str
    parse_target: Callable[[str], tuple[str, ...]]
    read_target: Callable[[str, Any], tuple[str, ...]]
    check: Callable[[Topology, tuple[str, ...]], str | None]
    network: bool = False
    target_free: bool = False  # written KIND@TIME: one thing of its kind (the controller)
    one_way: bool = False  # goes down and never comes back (a killed process): no DOWN..UP


FAULT_KINDS: dict[str, FaultKind] = {}


def register_kind(kind: FaultKind) -> None:
    FAULT_KINDS[kind.name] = kind


# ----------------------------------------------------------------------------- the network kinds
def _link_from_text(value: str) -> tuple[str, ...]:
    ends = value.split("-")
    if len(ends) != 2 or not all(ends):
        raise ValueError(f"a link is two node names joined by '-', e.g. a1-e1, got {value!r}")
    return ends[0], ends[1]


def _link_from_json(field: str, value: Any) -> tuple[str, ...]:
    ends = array(text(), of="of two node names")(field, value)
    if len(ends) != 2:
        raise FieldError(field, f"must be two node names, e.g. [\"a1\", \"e1\"], got {show(value)}")
    return ends[0], ends[1]


def _check_link(topology: Topology, target: tuple[str, ...]) -> str | None:
    a, b = target
    for node in (a, b):
        if node not in topology.graph:
            return f"topology {topology.name} has no node {node!r}"
    if not topology.graph.has_edge(a, b):
        return f"topology {topology.name} has no link {a}-{b}"
    return None


def _switch_from_text(value: str) -> tuple[str, ...]:
    if not value or "-" in value:
        raise ValueError(f"a switch is one switch name, e.g. a1, got {value!r}")
    return (value,)


def _check_switch(topology: Topology, target: tuple[str, ...]) -> str | None:
    (name,) = target
    if name not in topology.graph or topology.graph.nodes[name]["kind"] != "switch":
        return f"topology {topology.name} has no switch {name!r}"
    return None


register_kind(FaultKind("link", "link:a1-e1@3s", _link_from_text, _link_from_json, _check_link, network=True))
register_kind(FaultKind("switch", "switch:c1@3s..5s", _switch_from_text,
                        lambda field, value: (text()(field, value),), _check_switch, network=True))


# ----------------------------------------------------------------------------- the process kinds
# Acted on by the emulator alone (emulation/fault_injector.py, emulation/agents.py): the simulator has no
# processes to kill.
def _host_from_text(value: str) -> tuple[str, ...]:
    if not value or "-" in value:
        raise ValueError(f"an agent is named by its host, e.g. h5, got {value!r}")
    return (value,)


def _check_host(topology: Topology, target: tuple[str, ...]) -> str | None:
    (name,) = target
    if name not in topology.hosts:
        return f"topology {topology.name} has no host {name!r}"
    return None


def _no_target(kind: str) -> Callable[[str, Any], tuple[str, ...]]:
    """A scenario's ``<kind>_down: true``: the one thing of its kind, so no target."""
    def read_target(field: str, value: Any) -> tuple[str, ...]:
        if value is not True:
            raise FieldError(field, f"must be true (the {kind} fault has no target), got {show(value)}")
        return ()

    return read_target


#: ``agent:h5@3s``: that host's traffic agent is killed (SIGKILL) then; its jobs fail, the others go on.
register_kind(FaultKind("agent", "agent:h5@3s", _host_from_text, lambda field, value: (text()(field, value),),
                        _check_host, one_way=True))
#: ``controller@4s``: the controller is killed (SIGKILL) then and restarted on the same registry store at
#: once; ``controller@4s..6s`` restarts it at 6 s.  The switches keep forwarding meanwhile.
register_kind(FaultKind("controller", "controller@4s", lambda value: (), _no_target("controller"),
                        lambda topology, target: None, target_free=True))
#: ``ovs@3s``: ovs-vswitchd, the one daemon behind every bridge of the machine, is stopped then and started
#: again at once (``ovs@3s..5s``: started at 5 s).  Every switch loses its flows, meters and datapath
#: ports at the same instant and reconnects to the controller, which installs them again.
register_kind(FaultKind("ovs", "ovs@3s", lambda value: (), _no_target("ovs"),
                        lambda topology, target: None, target_free=True))


# ----------------------------------------------------------------------------- command line
_TIME = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(s|ms)?$")


def _seconds(value: str) -> float:
    match = _TIME.match(value)
    if match is None:
        raise ValueError(f"a time is seconds like 3s, 2.5s or 500ms, got {value!r}")
    seconds = float(match.group(1)) / (1000.0 if match.group(2) == "ms" else 1.0)
    if not SECONDS.low <= seconds <= SECONDS.high:  # also refuses an infinite one
        raise ValueError(f"a time must be from {SECONDS.low:g} to {SECONDS.high:g} s, got {value!r}")
    return seconds


def parse_fault(spec: str, topology: Topology | None = None) -> list[FaultEvent]:
    """``KIND:TARGET@TIME`` (down at TIME) or ``KIND:TARGET@DOWN..UP`` (and back at UP).

    Checked against ``topology`` when given; any problem raises :class:`FaultSpecError` naming the spec.
    """
    try:
        return _parse_fault(spec, topology)
    except ValueError as exc:
        raise FaultSpecError(f"fault {spec!r}: {exc}") from None


def _parse_fault(spec: str, topology: Topology | None) -> list[FaultEvent]:
    head, at, when = spec.partition("@")
    kind_name, colon, target_text = head.partition(":")
    kind = FAULT_KINDS.get(kind_name)
    shape = "must look like KIND:TARGET@TIME, e.g. link:a1-e1@3s (or controller@4s, ovs@3s)"
    if not at:
        raise ValueError(shape)
    if kind is None:
        kinds = ", ".join(f"{k.name} ({k.example})" for k in FAULT_KINDS.values())
        raise ValueError(f"unknown kind {kind_name!r}; kinds: {kinds}")
    if not (colon or kind.target_free):
        raise ValueError(shape)
    if colon and kind.target_free:
        raise ValueError(f"the {kind.name} fault has no target: write it like {kind.example}")
    target = kind.parse_target(target_text)
    down_text, dots, up_text = when.partition("..")
    down_s = _seconds(down_text)
    events = [FaultEvent(down_s, kind.name, target)]
    if dots and kind.one_way:
        raise ValueError(f"a killed {kind.name} does not come back: give one time, like {kind.example}")
    if dots:
        up_s = _seconds(up_text)
        if up_s <= down_s:
            raise ValueError(f"it must come back after it went down, got {down_s:g} s..{up_s:g} s")
        events.append(FaultEvent(up_s, kind.name, target, up=True))
    if topology is not None:
        problem = kind.check(topology, target)
        if problem is not None:
            raise ValueError(problem)
    return events


# ----------------------------------------------------------------------------- scenario files
def read_events(value: Any, topology: Topology, field: str = "events") -> list[FaultEvent]:
    """A scenario's ``events``: ``[{"at_s": 3, "link_down": ["a1", "e1"]}, {"at_s": 5, "switch_up": "c1"}]``.

    Each entry has ``at_s`` and exactly one ``<kind>_down`` or ``<kind>_up``; returned in time order
    (entries at the same time keep their order).  Raises :class:`~echelonflow.fields.FieldError`.
    """
    actions = {f"{name}_{way}": (kind, way == "up") for name, kind in FAULT_KINDS.items()
               for way in ("down", "up")}
    declared = (Field("at_s", ranged(SECONDS, "a number of seconds"), required=True),
                *(Field(name) for name in actions))
    events = []
    for index, entry in enumerate(array(of="of event objects")(field, value)):
        where = f"{field}[{index}]"
        fields = read(entry, declared, where)
        given = [name for name in actions if fields[name] is not None]
        if len(given) != 1:
            raise FieldError(where, f"needs exactly one of {', '.join(actions)}, got "
                                    f"{', '.join(given) or 'none'}")
        kind, up = actions[given[0]]
        target = kind.read_target(f"{where}.{given[0]}", fields[given[0]])
        problem = kind.check(topology, target)
        if problem is not None:
            raise FieldError(f"{where}.{given[0]}", problem)
        events.append(FaultEvent(fields["at_s"], kind.name, target, up))
    return sorted(events, key=lambda e: e.at_s)


def check_no_partition(topology: Topology, events: Sequence[FaultEvent],
                       pairs: Mapping[tuple[str, str], str], field: str = "events") -> None:
    """Refuse network events that leave a host pair a job uses without any equal-cost path.

    Rerouting is what is modelled (the simulator and the fabric move flows to paths still up); a flow
    with nowhere to go would wait for a repair that may never come, so such a scenario is refused up
    front.  ``pairs`` maps (src, dst) to a label naming a flow that uses it; ``field`` names where
    the events came from in the :class:`~echelonflow.fields.FieldError`.
    """
    links = LinkState()
    for event in sorted(events, key=lambda e: e.at_s):
        if not event.network or not event.apply(links) or event.up:
            continue
        for (src, dst), label in pairs.items():
            if not any(links.passes(p) for p in topology.equal_cost_paths(src, dst)):
                raise FieldError(field, f"{event.describe()} leaves {src} -> {dst} ({label}) without a path "
                                f"({links.describe()}); faults reroute flows, they may not cut hosts off")


def flow_pairs(jobs: Iterable[Any]) -> dict[tuple[str, str], str]:
    """(src, dst) -> ``job/flow`` of the first flow of every host pair the jobs use."""
    out: dict[tuple[str, str], str] = {}
    for job in jobs:
        if isinstance(job.tasks, FlowColumns):  # off the columns: a task object per flow cost FB2010 2 s
            columns, hosts = job.tasks, job.tasks.hosts
            for task_id, src, dst in zip(columns.ids, columns.src, columns.dst):
                out.setdefault((hosts[src], hosts[dst]), f"{job.job_id}/{task_id}")
            continue
        for task in job.tasks.values():
            if hasattr(task, "src"):
                out.setdefault((task.src, task.dst), f"{job.job_id}/{task.task_id}")
    return out
