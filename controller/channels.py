"""The registry's channels: persistent connections between two agents, registered before traffic starts.

A channel is what collective libraries keep between ranks: its 5-tuple and path are installed once, when
it is registered, so a flow started on it only changes the channel's class and rate and no rule install
and no handshake lies on the flow's critical path.  One flow at a time uses a channel.

:class:`Channels` is the registry's mapping of channel id -> :class:`ChannelRecord`, with what each
carries now and where each runs while links are down.  It is apart from ``controller.registry`` (jobs,
EchelonFlows, flows) because channels outlive flows and have their own life cycle; the registry hands it
what they share: the 5-tuples in use (a channel's and a flow's must not collide), the store commit and
the topology's host check.

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Callable

from controller.paging import OrderedKeys
from controller.registry_errors import ConflictError, RegistryError, check_id, check_port, found
from echelonflow.fields import Check, show
from echelonflow.linkstate import LinkState
from echelonflow.topology import Topology

#: (src_ip, dst_ip, src_port, dst_port) -> who holds it: a flow key, or "channel <id>".
TupleOwners = dict[tuple[str, str, int, int], str]


@dataclass(frozen=True)
class ChannelRecord:
    """A persistent connection between two agents (see the module docstring)."""

    channel_id: str
    src: str
    dst: str
    src_port: int
    dst_port: int
    path: tuple[str, ...]  # node path, hosts included: one of the equal-cost paths src -> dst


class Channels(Mapping):
    """The registered channels (channel id -> :class:`ChannelRecord`), what each carries, where each runs.

    ``owners`` is the registry's table of 5-tuples in use, shared with its flows; ``commit`` is the
    registry's store commit (all or nothing, then the registry's version moves); ``host`` checks a host
    name against the topology.
    """

    def __init__(self, topology: Topology, owners: TupleOwners, commit: Callable[..., None],
                 host: Check) -> None:
        self.topology = topology
        self._owners = owners
        self._commit = commit
        self._host = host
        self._records: dict[str, ChannelRecord] = {}
        #: The channels in the order they were registered, for the API's pages (``controller.paging``).
        self.order = OrderedKeys()
        self._flow: dict[str, str] = {}  # channel id -> the active flow on it
        self._routes: dict[str, tuple[str, ...]] = {}  # channel id -> route at the last reroute

    # ------------------------------------------------------------------ the mapping
    def __getitem__(self, channel_id: str) -> ChannelRecord:
        return self._records[channel_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    # ------------------------------------------------------------------ life cycle
    def load(self, channels: Iterable[ChannelRecord]) -> None:
        """Stored channels back in memory (never re-written: they are the store's own content)."""
        for channel in channels:
            self._records[channel.channel_id] = channel
            self.order.add(channel.channel_id)
            self._owners[self.tuple_of(channel)] = f"channel {channel.channel_id}"

    def lookup(self, channel_id: Any) -> ChannelRecord:
        check_id("channel_id", channel_id)
        return found(self._records, channel_id, "channel_id", f"no channel {channel_id!r}")

    def add(self, channel_id: Any, src: Any, dst: Any, src_port: Any, dst_port: Any,
            path: Any = None) -> ChannelRecord:
        """Register a persistent connection; ``path`` (node names, hosts included) must be one of the
        equal-cost paths between the hosts (default: the host pair's route, what plain TCP takes)."""
        check_id("channel_id", channel_id)
        src_h, dst_h = self._host("src", src), self._host("dst", dst)
        if src_h == dst_h:
            raise RegistryError("dst", f"a channel needs two different hosts, got {src_h!r} twice")
        sport = check_port("src_port", src_port)
        dport = check_port("dst_port", dst_port)
        nodes = self._checked_path(src_h, dst_h, path)
        if channel_id in self._records:
            raise ConflictError("channel_id", f"channel {channel_id!r} is already registered")
        record = ChannelRecord(channel_id, src_h, dst_h, sport, dport, nodes)
        owner = self._owners.get(self.tuple_of(record))
        if owner is not None:
            raise ConflictError("src_port", f"{owner} already uses {src_h}:{sport} -> {dst_h}:{dport}")
        self._commit(channels=[record])
        self._records[channel_id] = record
        self.order.add(channel_id)
        self._owners[self.tuple_of(record)] = f"channel {channel_id}"
        return record

    def remove(self, channel_id: Any) -> ChannelRecord:
        record = self.lookup(channel_id)
        busy = self._flow.get(record.channel_id)
        if busy is not None:
            raise ConflictError("channel_id", f"channel {record.channel_id!r} carries active flow {busy!r}")
        self._commit(removed_channels=[record.channel_id])
        del self._records[record.channel_id]
        self.order.discard(record.channel_id)
        self._owners.pop(self.tuple_of(record), None)
        return record

    # ------------------------------------------------------------------ the flow on a channel
    def flow_on(self, channel_id: str) -> str | None:
        """The active flow a channel carries now, if any."""
        return self._flow.get(channel_id)

    def carry(self, channel_id: str, flow_key: str) -> None:
        """The channel carries ``flow_key`` from now on (the registry checked it was idle)."""
        self._flow[channel_id] = flow_key

    def release(self, channel_id: str) -> None:
        """The channel's flow ended: it stays, idle, for the next flow."""
        self._flow.pop(channel_id, None)

    # ------------------------------------------------------------------ where it runs
    def tuple_of(self, channel: ChannelRecord) -> tuple[str, str, int, int]:
        """(src_ip, dst_ip, src_port, dst_port): what the enforcement matches."""
        nodes = self.topology.graph.nodes
        return nodes[channel.src]["ip"], nodes[channel.dst]["ip"], channel.src_port, channel.dst_port

    def route(self, channel: ChannelRecord, links: LinkState) -> tuple[str, ...]:
        """Where a channel runs now: its registered path, or while that crosses something down in
        ``links``, another equal-cost path (chosen as ``Topology.path_for`` chooses, keyed by the
        channel)."""
        if links.passes(channel.path):
            return channel.path
        return tuple(self.topology.path_for(channel.src, channel.dst, "channel:" + channel.channel_id, links))

    def reroute(self, links: LinkState) -> list[str]:
        """Every channel's route for ``links``; the ids of those whose route changed since the last call
        (the caller moves what is enforced for them)."""
        routes = {cid: self.route(channel, links) for cid, channel in self._records.items()}
        changed = [cid for cid, route in routes.items()
                   if route != self._routes.get(cid, self._records[cid].path)]
        self._routes = routes
        return changed

    def _checked_path(self, src: str, dst: str, path: Any) -> tuple[str, ...]:
        if path is None:
            return tuple(self.topology.pair_path(src, dst))
        if not isinstance(path, list) or not all(isinstance(n, str) for n in path):
            raise RegistryError("path", f"must be an array of node names from {src} to {dst}, "
                                        f"got {show(path)}")
        allowed = [tuple(p) for p in self.topology.equal_cost_paths(src, dst)]
        if tuple(path) not in allowed:
            raise RegistryError("path", f"{'-'.join(path)} is not one of the {len(allowed)} equal-cost paths "
                                        f"{src} -> {dst} (e.g. {'-'.join(allowed[0])})")
        return tuple(path)
