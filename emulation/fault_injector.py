"""Faults acted out during a phase (``echelon emulate --fault link:a1-e1@3s``, scenario events).

Network faults: the events are :class:`echelonflow.faults.FaultEvent` of the kinds that change the
network (``link``, ``switch``), the very list the simulator replays.  :meth:`NetworkFaults.actions`
turns them into (seconds after t0, action) pairs for :func:`emulation.agents.run_agents`'s timers; an
action takes a link down or brings it back (both interfaces administratively down or up, so each switch
sees its port go, as when a cable is pulled; a switch: all its links) and returns the line to say.
Whatever is still down when the phase ends is brought back by :meth:`NetworkFaults.restore`, so the
next phase starts on a whole fabric.

The controller fault (``controller@4s``, ``controller@4s..6s``) and the switch daemon's restart
(``ovs@3s``, ``ovs@3s..5s``) are timed the same way by :func:`restart_actions`, with the stop and the
start the rig provides (:meth:`emulation.rig.Rig.crash_controller`,
:meth:`~emulation.rig.Rig.restart_controller`, :meth:`~emulation.rig.Rig.stop_switch_daemon`,
:meth:`~emulation.rig.Rig.start_switch_daemon`).  An agent fault (``agent:h5@3s``) is a SIGKILL that
:func:`emulation.agents.run_agents` sends itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, Callable

from echelonflow.faults import FaultEvent

#: kind -> how to act an event out on a started ``topologies.fabric.Fabric``.
ACTIONS: dict[str, Callable[[Any, FaultEvent], None]] = {
    "link": lambda fabric, event: fabric.set_link(event.target[0], event.target[1], event.up),
    "switch": lambda fabric, event: fabric.set_switch(event.target[0], event.up),
}


class NetworkFaults:
    """The network events of one phase on ``fabric``; other kinds are left to their own handlers."""

    def __init__(self, fabric: Any, events: Sequence[FaultEvent]) -> None:
        self.fabric = fabric
        self.events = [e for e in events if e.kind in ACTIONS]
        self._down: dict[tuple[str, tuple[str, ...]], FaultEvent] = {}
        self._lock = threading.Lock()  # timers may fire together

    def actions(self) -> list[tuple[float, Callable[[], str]]]:
        return [(event.at_s, self._action(event)) for event in self.events]

    def _action(self, event: FaultEvent) -> Callable[[], str]:
        def act() -> str:
            started = time.monotonic()
            with self._lock:
                ACTIONS[event.kind](self.fabric, event)
                key = (event.kind, event.target)
                if event.up:
                    self._down.pop(key, None)
                else:
                    self._down[key] = event
            return f"fault: {event.describe()} (done in {1000 * (time.monotonic() - started):.0f} ms)"

        return act

    def restore(self) -> list[str]:
        """Bring back everything still down (latest first); returns the problems, if any."""
        problems = []
        with self._lock:
            for event in reversed(list(self._down.values())):
                try:
                    back = FaultEvent(event.at_s, event.kind, event.target, up=True)
                    ACTIONS[event.kind](self.fabric, back)
                except Exception as exc:  # noqa: BLE001 - a fabric being torn down may already be gone
                    problems.append(f"bringing {event.kind} {'-'.join(event.target)} back failed: {exc}")
            self._down.clear()
        return problems


def restart_actions(kind: str, events: Sequence[FaultEvent], crash: Callable[[], str],
                    restart: Callable[[], str]) -> list[tuple[float, Callable[[], str]]]:
    """A process fault of ``kind`` (``controller``, ``ovs``): ``KIND@T`` stops and restarts it at once,
    ``KIND@T..U`` stops it at T and restarts it at U."""
    mine = [e for e in events if e.kind == kind]
    actions: list[tuple[float, Callable[[], str]]] = []
    for event in mine:
        if event.up:
            actions.append((event.at_s, restart))
        elif any(e.up and e.at_s > event.at_s for e in mine):
            actions.append((event.at_s, crash))
        else:
            actions.append((event.at_s, lambda: f"{crash()}; {restart()}"))
    return actions
