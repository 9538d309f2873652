"""The registry's indexes: what the API's reads and the retention find without walking every record.

The registry (``controller.registry``) tells this object every change of its records; it keeps

* the order of jobs, EchelonFlows and flows (globally and per job) for pages (``controller.paging``),
* how many flows are in each state (``GET /v1/health``),
* the recent EchelonFlows (``controller.recent``),
* which jobs and which EchelonFlows are done and since when (``controller.retention``).

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

from controller.paging import OrderedKeys
from controller.recent import RecentEchelons
from controller.retention import Done

DONE = ("finished", "aborted")


class RegistryIndex:
    """Orders, counts and done jobs, kept current by the registry's every change."""

    def __init__(self, states: tuple[str, ...]) -> None:
        self.jobs = OrderedKeys()
        self.echelons = OrderedKeys()
        self.flows = OrderedKeys()  # ordinal: the flow's seq
        self.job_echelons: dict[str, OrderedKeys] = {}
        self.job_flows: dict[str, OrderedKeys] = {}
        self.counts = dict.fromkeys(states, 0)
        self.recent = RecentEchelons()
        self.done = Done()
        self.done_echelons = Done()
        self._open_flows: dict[str, int] = {}  # job -> flows not done
        self._last_end: dict[str, float] = {}  # job -> latest end of a done flow

    def job_added(self, job_id: str) -> None:
        self.jobs.add(job_id)
        self.job_echelons[job_id] = OrderedKeys()
        self.job_flows[job_id] = OrderedKeys()
        self._open_flows[job_id] = 0

    def echelon_added(self, job_id: str, key: str) -> None:
        self.job_echelons[job_id].add(key, self.echelons.add(key))

    def flow_added(self, job_id: str, echelon_key: str, key: str, seq: int, state: str,
                   end_s: float | None) -> None:
        """A flow declared (or loaded in ``state``, done at ``end_s``)."""
        self.flows.add(key, seq)
        self.job_flows[job_id].add(key, seq)
        self.counts[state] += 1
        self.recent.flows_added(echelon_key, 1)
        self._open_flows[job_id] += 1
        self.done.undone(job_id)
        self.done_echelons.undone(echelon_key)
        if state in DONE:
            self._flow_done(job_id, echelon_key, float(end_s or 0.0))

    def flow_moved(self, old_state: str, new_state: str) -> None:
        self.counts[old_state] -= 1
        self.counts[new_state] += 1

    def flow_ended(self, job_id: str, echelon_key: str, old_state: str, new_state: str,
                   end_s: float) -> None:
        """A declared or active flow reached ``new_state`` (finished or aborted) at ``end_s``."""
        self.flow_moved(old_state, new_state)
        self._flow_done(job_id, echelon_key, end_s)

    def _flow_done(self, job_id: str, echelon_key: str, end_s: float) -> None:
        self.recent.flow_done(echelon_key, end_s)
        echelon_done_s = self.recent.done_s(echelon_key)
        if echelon_done_s is not None:
            self.done_echelons.done(echelon_key, echelon_done_s)
        self._open_flows[job_id] -= 1
        self._last_end[job_id] = max(end_s, self._last_end.get(job_id, end_s))
        if self._open_flows[job_id] == 0:
            self.done.done(job_id, self._last_end[job_id])

    def job_aborted(self, job_id: str, at_s: float) -> None:
        """Aborted: done at ``at_s`` whatever its flows (its unfinished ones were ended first)."""
        self.done.done(job_id, max(at_s, self._last_end.get(job_id, at_s)))

    def echelon_removed(self, job_id: str, key: str, flows: list[tuple[str, str]]) -> None:
        """A done EchelonFlow left memory with its flows ((key, state) pairs); its job stays."""
        self._flows_removed(flows)
        for flow_key, _state in flows:
            self.job_flows[job_id].discard(flow_key)
        self.echelons.discard(key)
        self.job_echelons[job_id].discard(key)
        self.recent.forget(key)
        self.done_echelons.undone(key)

    def job_removed(self, job_id: str, echelon_keys: list[str], flows: list[tuple[str, str]]) -> None:
        """The job left memory with its EchelonFlows and its flows ((key, state) pairs)."""
        self._flows_removed(flows)
        for key in echelon_keys:
            self.echelons.discard(key)
            self.recent.forget(key)
            self.done_echelons.undone(key)
        self.jobs.discard(job_id)
        for table in (self.job_echelons, self.job_flows, self._open_flows, self._last_end):
            table.pop(job_id, None)
        self.done.undone(job_id)

    def _flows_removed(self, flows: list[tuple[str, str]]) -> None:
        """Flows ((key, state) pairs) left memory: out of the global order and the state counts."""
        for key, state in flows:
            self.flows.discard(key)
            self.counts[state] -= 1
