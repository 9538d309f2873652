"""Which links and switches of a topology are out of service: the one "down set" both sides route around.

A network that loses a link or a switch keeps running on the equal-cost paths that remain.  The
simulator replays that from a scenario's ``events`` and the controller learns it from the switches
(port status, disconnects); both keep a :class:`LinkState` and ask ``Topology.path_for(..., down=state)``
for a flow's path, so they move the same flows to the same alternative paths.

A link is down when either end's port is down (a switch reports each end separately, and a cable pulled
at one end is down for both directions), or when a switch it touches is down.

Pure and Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

from collections.abc import Sequence


class LinkState:
    """The ports (node, neighbour) and switches currently down; everything else is up."""

    def __init__(self) -> None:
        self._down_ends: set[tuple[str, str]] = set()
        self._down_switches: set[str] = set()
        #: Incremented by every change, so a holder of paths can tell that it must re-pin.
        self.version = 0

    # ----------------------------------------------------------------- changes (True: something changed)
    def set_port(self, node: str, neighbour: str, up: bool) -> bool:
        """The port of ``node`` towards ``neighbour`` went down or came back."""
        return self._toggle(self._down_ends, (node, neighbour), up)

    def set_link(self, a: str, b: str, up: bool) -> bool:
        """Both ends of the link ``a``-``b`` at once (a scenario event, a cable)."""
        changed = self.set_port(a, b, up)
        return self.set_port(b, a, up) or changed

    def set_switch(self, switch: str, up: bool) -> bool:
        return self._toggle(self._down_switches, switch, up)

    def _toggle(self, down: set, item: object, up: bool) -> bool:
        if up == (item not in down):
            return False
        if up:
            down.discard(item)
        else:
            down.add(item)
        self.version += 1
        return True

    # ----------------------------------------------------------------- questions
    @property
    def clear(self) -> bool:
        """Nothing is down."""
        return not self._down_ends and not self._down_switches

    def link_up(self, a: str, b: str) -> bool:
        return ((a, b) not in self._down_ends and (b, a) not in self._down_ends
                and a not in self._down_switches and b not in self._down_switches)

    def passes(self, path: Sequence[str]) -> bool:
        """Whether every node and link of a node path is in service."""
        if self.clear:
            return True
        return all(self.link_up(a, b) for a, b in zip(path[:-1], path[1:]))

    def down_links(self) -> list[tuple[str, str]]:
        """Links with at least one end down, each once (names in sorted order)."""
        return sorted({tuple(sorted(end)) for end in self._down_ends})  # type: ignore[misc]

    def down_switches(self) -> list[str]:
        return sorted(self._down_switches)

    def describe(self) -> str:
        """``links a1-e1, c1-a3; switches c2`` (or ``nothing down``), for logs and errors."""
        parts = []
        if self._down_ends:
            parts.append("links " + ", ".join(f"{a}-{b}" for a, b in self.down_links()))
        if self._down_switches:
            parts.append("switches " + ", ".join(self.down_switches()))
        return "; ".join(parts) or "nothing down"
