"""What the network has seen of each EchelonFlow, kept current as its flows start, progress and finish.

Policies that order groups by when they arrived (``fifo-priority``, ``crux``, ``sincronia``'s ties) or
by what they delivered (``aalo``, ``echelon-online``) read, per group of active flows, its first flow's
start and the payload bytes its flows delivered, finished ones included (``GroupView``).  Gathering that
from the flow records at every decision walked every member of every active group in Python: 9-26 ms
of a decision at 10,000 flows on a k=16 fat-tree (docs/performance.md).  Kept here per event, a
decision pays a look-up per active group, and a sum for each group a flow of which delivered more since.

The delivered bytes are summed over the group's members in declaration order, 0 for those that have
not started: adding 0.0 changes no floating-point sum, so this is to the last bit the sum over the
started members in declaration order that the records give.

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations


class GroupsSeen:
    """Per EchelonFlow (qualified id), each member's delivered payload bytes, in declaration order,
    and its first flow's start."""

    def __init__(self) -> None:
        self._delivered: dict[str, dict[str, float]] = {}  # group -> flow -> payload bytes delivered
        self._first_start_s: dict[str, float] = {}
        self._sums: dict[str, float] = {}  # group -> its members' sum, while no member changed

    def declared(self, group_id: str, flow_id: str) -> None:
        """A new member (declared, nothing delivered): members are listed in the order they come."""
        self._delivered.setdefault(group_id, {})[flow_id] = 0.0
        self._sums.pop(group_id, None)

    def delivered(self, group_id: str, flow_id: str, payload_bytes: float) -> None:
        """What a member has delivered now (the registry's best estimate, ``Registry.bytes_done``)."""
        self._delivered[group_id][flow_id] = payload_bytes
        self._sums.pop(group_id, None)

    def started(self, group_id: str, start_s: float) -> None:
        first = self._first_start_s.get(group_id)
        if first is None or start_s < first:
            self._first_start_s[group_id] = start_s

    def forget(self, group_id: str) -> None:
        """The group left memory with all its flows."""
        self._delivered.pop(group_id, None)
        self._first_start_s.pop(group_id, None)
        self._sums.pop(group_id, None)

    def sent_bytes(self, group_id: str) -> float:
        """Payload bytes the group's flows delivered, finished ones included."""
        total = self._sums.get(group_id)
        if total is None:
            total = self._sums[group_id] = sum(self._delivered[group_id].values())
        return total

    def first_start_s(self, group_id: str) -> float:
        """When the group's first flow started (KeyError: none has)."""
        return self._first_start_s[group_id]
