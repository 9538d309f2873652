"""Which EchelonFlows are recent, found without walking the history: what ``/v1/echelons?recent_s=`` reads.

An EchelonFlow is recent at ``since_s`` when it started and has a flow not done (declared or active) or a
flow done (finished or aborted) at or after ``since_s`` (``controller.live_view``).  The second half is
the same as "its latest done flow ended at or after ``since_s``", so the index keeps the EchelonFlows
with a flow not done (few: they are live), and those whose flows are all done sorted by their latest
end: a read is a bisection plus what it returns.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

from bisect import bisect_left, insort


class RecentEchelons:
    """EchelonFlows by whether they have a flow not done, and by their latest flow's end."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}  # EchelonFlow -> flows not done
        self._last_end: dict[str, float] = {}  # EchelonFlow -> latest end of a done flow
        self._closed: list[tuple[float, str]] = []  # (latest end, EchelonFlow) of those all done

    def flows_added(self, key: str, count: int) -> None:
        if count <= 0:
            return
        if key not in self._open and key in self._last_end:
            self._unclose(key)
        self._open[key] = self._open.get(key, 0) + count

    def flow_done(self, key: str, end_s: float) -> None:
        """A flow of ``key`` that was not done ended at ``end_s``."""
        self._last_end[key] = max(end_s, self._last_end.get(key, end_s))
        left = self._open.get(key, 0) - 1
        if left > 0:
            self._open[key] = left
            return
        self._open.pop(key, None)
        insort(self._closed, (self._last_end[key], key))

    def done_s(self, key: str) -> float | None:
        """When ``key``'s latest flow ended, if it has flows and all are done (None: not done)."""
        return None if key in self._open else self._last_end.get(key)

    def forget(self, key: str) -> None:
        if self._open.pop(key, None) is None and key in self._last_end:
            self._unclose(key)
        self._last_end.pop(key, None)

    def recent(self, since_s: float) -> list[str]:
        """EchelonFlows with a flow not done or one done at or after ``since_s`` (started or not)."""
        start = bisect_left(self._closed, (since_s, ""))
        return [*self._open, *(key for _end, key in self._closed[start:])]

    def _unclose(self, key: str) -> None:
        entry = (self._last_end[key], key)
        index = bisect_left(self._closed, entry)
        if index < len(self._closed) and self._closed[index] == entry:
            del self._closed[index]
