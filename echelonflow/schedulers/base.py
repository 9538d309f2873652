"""The one scheduler interface, called unchanged by the simulator and by the controller.

A scheduler sees the flows (links, active flows with their paths, remaining bytes, EchelonFlow
membership and ideal finish times, the current time) and returns a decision (a rate and a priority
rank per flow): on arrays through a view (``schedulers/view.py``, the one entry point), or, for a
simple policy, on a :class:`Snapshot`.  It performs nothing itself: the simulator turns rates into
fluid progress, the controller turns ranks into switch queues and rates into OpenFlow meters.

Clairvoyant policies (``fair``, ``coflow``, ``echelon``, ``fifo``, ``sincronia``) may read everything.
Non-clairvoyant ones (``clairvoyant = False``: ``aalo``, ``echelon-online``) promise to read only what a
network sees without being told: ids, paths, weights, bytes already sent (``sent_bytes``,
``group_sent_bytes``) and when the group started (``group_start_s``), never ``remaining_bytes`` or the
ideal-finish fields.  A policy that learns (``echelon-online``) also gets every flow start, progress
report and finish through :meth:`Scheduler.observe`, which is all an agent reports without declarations,
and tells the controller what a flow registered without a size has left
(:meth:`Scheduler.estimate_remaining_bytes`).

Units: rates and capacities in bits per second, sizes in bytes, times in seconds.
Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from echelonflow.schedulers.columns import LinkNumbering

LinkId = Hashable  # a directed link, e.g. ("s1", "s2"); only equality and hashing are used

#: Flows with at most this many bytes left count as finished (floating-point dust): rate 0, last ranks.
EPS_BYTES = 1e-9


@dataclass(frozen=True)
class ActiveFlow:
    """One flow that is currently sending (or ready to send)."""

    flow_id: str
    echelon_id: str  # the EchelonFlow (or Coflow) it belongs to
    path: tuple[LinkId, ...]  # directed links from source to destination
    remaining_bytes: float  # all byte counts here are wire bytes (payload + framing, Topology.wire_bytes)
    ideal_finish_s: float  # absolute d_j = reference time + offset
    offset_s: float  # o_j = d_j - r, the arrangement function's value for this flow
    reference_s: float  # r, the actual start of the EchelonFlow's head flow
    weight: float = 1.0  # the job's weight (Eq. 4's w_i; > 0)
    sent_bytes: float = 0.0  # bytes of this flow delivered so far (attained service)
    group_sent_bytes: float = 0.0  # bytes delivered by every flow of its group, finished ones included
    group_start_s: float = 0.0  # when the group's first flow started (a coflow's arrival)


@dataclass(frozen=True)
class Snapshot:
    """Everything a scheduler may look at.

    ``declared``: flows of the active flows' EchelonFlows that were declared with their size and have
    not started (``remaining_bytes`` their whole size): what a clairvoyant policy may count before
    they start (``echelon`` does; the others read only ``flows``).
    """

    now_s: float
    capacity_bps: Mapping[LinkId, float]
    flows: Sequence[ActiveFlow]
    declared: Sequence[ActiveFlow] = ()


@dataclass(frozen=True)
class FlowEvent:
    """What an agent reports about one flow: its start, its progress or its finish with the bytes moved."""

    kind: str  # "start", "progress" (the controller's agents only) or "finish"
    flow_id: str  # qualified "job/flow"
    echelon_id: str  # qualified "job/echelon"
    src: str
    dst: str
    time_s: float
    size_bytes: float = 0.0  # payload bytes the flow moved (finish: all of them; progress: so far)


@dataclass
class Decision:
    """Per-flow rate (bits/s) and priority rank (0 = most urgent; equal ranks share a class).

    ``valid_until_s``: the policy would decide differently at that time even with no arrival or
    departure (Aalo's queue thresholds); the simulator asks again then, the controller's periodic round
    covers it anyway.
    """

    rate_bps: dict[str, float] = field(default_factory=dict)
    rank: dict[str, int] = field(default_factory=dict)
    valid_until_s: float = math.inf

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {fid: {"rate_bps": self.rate_bps[fid], "rank": self.rank.get(fid, 0)} for fid in self.rate_bps}


class Scheduler:
    """Base class: subclasses set ``name`` and implement :meth:`decide` (on arrays) or
    :meth:`decide_snapshot` (on a snapshot; the default :meth:`decide` builds one for it).

    ``enforces`` tells the controller whether decisions should be pushed into the network at all:
    ``fair`` stands for plain TCP sharing, so it enforces nothing and stays a true baseline.
    ``active_order`` is how :meth:`decide` wants ``view.active`` ordered ("id": flow id; "group": group
    id, then flow id; "group-offset": group id, offset, flow id): the simulator numbers its flows so
    and the controller's table keeps them so, so a kernel never sorts.
    """

    name: str = ""
    enforces: bool = True
    clairvoyant: bool = True
    #: Is the simulator's coflow rescheduling rule (decide at flow starts and coflow completions only)
    #: faithful to this policy?  Only if the policy itself holds its rates until a coflow event, as
    #: Varys does: MADD finishes a coflow's flows together and Varys re-decides on coflow arrival and
    #: departure.  A policy that re-decides when any flow finishes (greedy or fair rates) would hand
    #: that flow's bandwidth on at once; under the coflow rule it idles until the next coflow event
    #: (docs/performance.md, "The coflow rescheduling rule").
    coflow_rule_faithful: bool = False
    active_order: str = "id"
    #: The decision depends only on which flows are active, their paths and their groups' first starts
    #: (never on bytes left or sent, nor on the clock), and a flow alone on its links changes no other
    #: flow's rate (progressive filling, per-link shares).  The simulator then skips the decision after
    #: finishes of flows that leave their links empty: it would give every other flow the same rate,
    #: bit for bit (docs/performance.md, "Decisions that change nothing").
    blind_to_bytes: bool = False
    _links: LinkNumbering | None = None

    def decide(self, view: Any) -> Any:
        """The one entry point: rates into ``view.rate``, an :class:`~echelonflow.schedulers.view.
        Allocation` back (``echelonflow/schedulers/view.py``).  Default: :meth:`decide_snapshot` on the
        view's snapshot."""
        return view.allocation_of(self.decide_snapshot(view.snapshot()))

    def decide_snapshot(self, snapshot: Snapshot) -> Decision:
        """A decision on a snapshot, by flow id: what a simple policy implements instead of
        :meth:`decide`."""
        raise NotImplementedError(f"scheduler {self.name!r} implements neither decide nor decide_snapshot")

    def links(self) -> LinkNumbering:
        """This scheduler's link numbering for views built from snapshots (kept between them: numbering
        the links of a path is most of a snapshot's conversion)."""
        if self._links is None:
            from echelonflow.schedulers.columns import LinkNumbering  # columns imports this module

            self._links = LinkNumbering()
        return self._links

    def observe(self, event: FlowEvent) -> None:
        """A flow started, progressed or finished (default: ignored; learning policies override it)."""

    def estimate_remaining_bytes(self, flow_id: str, sent_bytes: float) -> float | None:
        """Payload bytes a flow registered without a size has left after ``sent_bytes``, as this policy
        expects it (None: no idea; the controller's registry then guesses)."""
        return None
