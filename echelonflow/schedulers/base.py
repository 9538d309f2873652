"""The one scheduler interface, called unchanged by the simulator and by the controller.

A scheduler sees a snapshot (links, active flows with their paths, remaining bytes, EchelonFlow
membership and ideal finish times, the current time) and returns a decision (a rate and a priority
rank per flow).  It performs nothing itself: the simulator turns rates into fluid progress, the
controller turns ranks into switch queues and rates into OpenFlow meters.

Units: rates and capacities in bits per second, sizes in bytes, times in seconds.
Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

LinkId = Hashable  # a directed link, e.g. ("s1", "s2"); only equality and hashing are used

#: Flows with at most this many bytes left count as finished (floating-point dust): rate 0, last ranks.
EPS_BYTES = 1e-9


@dataclass(frozen=True)
class ActiveFlow:
    """One flow that is currently sending (or ready to send)."""

    flow_id: str
    echelon_id: str  # the EchelonFlow (or Coflow) it belongs to
    path: tuple[LinkId, ...]  # directed links from source to destination
    remaining_bytes: float
    ideal_finish_s: float  # absolute d_j = reference time + offset
    offset_s: float  # o_j = d_j - r, the arrangement function's value for this flow
    reference_s: float  # r, the actual start of the EchelonFlow's head flow
    weight: float = 1.0  # per-job weight of Eq. 4 (informational for now)


@dataclass(frozen=True)
class Snapshot:
    """Everything a scheduler may look at."""

    now_s: float
    capacity_bps: Mapping[LinkId, float]
    flows: Sequence[ActiveFlow]


@dataclass
class Decision:
    """Per-flow rate (bits/s) and priority rank (0 = most urgent; equal ranks share a class)."""

    rate_bps: dict[str, float] = field(default_factory=dict)
    rank: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {fid: {"rate_bps": self.rate_bps[fid], "rank": self.rank.get(fid, 0)} for fid in self.rate_bps}


class Scheduler:
    """Base class: subclasses set ``name`` and implement :meth:`decide`.

    ``enforces`` tells the controller whether decisions should be pushed into the network at all:
    ``fair`` stands for plain TCP sharing, so it enforces nothing and stays a true baseline.
    """

    name: str = ""
    enforces: bool = True

    def decide(self, snapshot: Snapshot) -> Decision:
        raise NotImplementedError
