"""Which persistent connections an agent keeps, and handing them to flows one at a time.

A flow runs on a channel to its destination over the path it is pinned to: the simulator's and the
controller's ``Topology.path_for`` under a scheduler that enforces, the host pair's route
(``Topology.pair_path``) under plain TCP (``fair``).  So a channel is keyed by (destination, path), and
an agent needs as many channels per key as flows of that key can be in flight at once.  The orchestrator
knows that from the simulated run of the same scenario (:func:`channel_plan`); the agent opens that many
before t0 and opens more on demand if the emulated timing overlaps more flows (each such open costs a
handshake and a controller round trip on that flow's critical path, and is counted in the agent's
result document).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from traffic.transfer import Channel

#: (destination host, node path or None when paths are not known)
ChannelKey = tuple[str, Any]


def max_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """The largest number of [start, finish) intervals in progress at one time."""
    events = sorted([(s, 1) for s, _ in intervals] + [(f, -1) for _, f in intervals])
    depth = best = 0
    for _, step in events:  # at equal times a finish (-1) sorts first: back-to-back flows do not overlap
        depth += step
        best = max(best, depth)
    return best


def channel_plan(flows: Mapping[str, Any], path_of: Callable[[str, str, str], Sequence[str]]
                 ) -> dict[str, list[dict[str, Any]]]:
    """Per source host: ``[{"dst", "path", "count"}]`` with ``count`` the most flows of that (source,
    destination, path) in flight at once in a run's result (``flows``: qualified id -> an object with
    ``src``, ``dst``, ``start_s``, ``finish_s``, e.g. a simulated ``RunResult.flows``).

    ``path_of(src, dst, flow_key)`` is the path each flow takes, as the agents will choose it.
    """
    groups: dict[tuple[str, str, tuple[str, ...]], list[tuple[float, float]]] = {}
    for key, flow in flows.items():
        path = tuple(path_of(flow.src, flow.dst, key))
        groups.setdefault((flow.src, flow.dst, path), []).append((flow.start_s, flow.finish_s))
    plan: dict[str, list[dict[str, Any]]] = {}
    for (src, dst, path), intervals in sorted(groups.items()):
        count = max(1, max_overlap(intervals))
        plan.setdefault(src, []).append({"dst": dst, "path": list(path), "count": count})
    return plan


class ChannelPool:
    """This agent's channels by (destination, path); :meth:`acquire` hands out an idle one.

    ``open_channel(key)`` creates, registers and connects a new channel (the agent supplies it, so the
    pool knows nothing of sockets or the controller).
    """

    def __init__(self, open_channel: Callable[[ChannelKey], Channel]) -> None:
        self._open_channel = open_channel
        self._idle: dict[ChannelKey, list[Channel]] = {}
        self._all: list[Channel] = []
        self._lock = threading.Lock()
        #: channels opened after the run started (the plan had too few): each cost a flow a handshake
        self.opened_late = 0

    def open(self, key: ChannelKey, count: int) -> None:
        """Open ``count`` channels for ``key`` now (before the run)."""
        for _ in range(count):
            channel = self._open_channel(key)
            with self._lock:
                self._all.append(channel)
                self._idle.setdefault(key, []).append(channel)

    def acquire(self, key: ChannelKey) -> Channel:
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                return idle.pop()
            self.opened_late += 1
        channel = self._open_channel(key)
        with self._lock:
            self._all.append(channel)
        return channel

    def release(self, key: ChannelKey, channel: Channel) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append(channel)

    def discard(self, channel: Channel) -> None:
        """A channel whose flow failed: never hand it out again."""
        channel.close()

    @property
    def channels(self) -> list[Channel]:
        with self._lock:
            return list(self._all)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
