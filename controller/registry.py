"""The controller's global echelon registry: jobs, EchelonFlows and flows, validated, in memory.

This is pure state (no sockets, no OpenFlow): the HTTP API and the scheduling service are thin layers on
top of it, and the SQLite store (``controller.store``) is only told what to write.  Every mutation
follows one rule so that a bad request can never leave half of itself behind:

    validate everything -> build the new records -> store.commit(...) in one transaction -> apply in memory

If validation fails a :class:`RegistryError` names the field and the problem; if the store fails the
in-memory state is untouched as well.

The registry holds jobs, EchelonFlows and flows; the persistent connections flows may run on are its
:attr:`Registry.channels` (``controller.channels``), and how all of them look as JSON is
``controller.views``.

Identifiers: a job id is global; EchelonFlow ids and flow ids are unique within their job (like task ids in
``echelonflow.model``); across jobs the scheduler and the enforcement see ``model.qualified(job, id)`` =
``"job/id"``, the same key the simulator uses, so ``Topology.path_for`` pins a flow to the same path in
both.

EchelonFlow semantics are the core's (``echelonflow.echelon``): the kind when none is declared
(:func:`~echelonflow.echelon.infer_kind`) and the reference time ``r`` from the flows' actual starts,
their declared ``start_offset_s`` (ideal start relative to the head's) and ``offset_s``
(:func:`~echelonflow.echelon.reference_time_from_starts`, which also covers flows declared without a
start offset).  A flow's ideal finish is ``d_j = r + offset_s``.

Undeclared sizes: a flow registered without ``size_bytes`` (``size_bytes`` None: what agents send when
the selected scheduler is not clairvoyant, ``echelon-online`` and ``aalo``) is scheduled on the size the
:attr:`Registry.estimator` (the service sets it to the selected scheduler) expects: ``echelon-online``
learns it from earlier iterations.  Without an estimate it is assumed to have as many bytes left as it
has sent, and at least :data:`UNDECLARED_LEFT_BYTES`.  Its finish must say how many bytes it moved.

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from controller.channels import ChannelRecord, Channels, TupleOwners
from controller.group_seen import GroupsSeen
from controller.registry_errors import ConflictError, RegistryError, check_id, check_port, found
from controller.registry_index import RegistryIndex
from controller.retention import DEFAULT as DEFAULT_RETENTION
from controller.retention import Retention
from echelonflow.echelon import KINDS, FlowStart, infer_kind, reference_time_from_starts
from echelonflow.fields import Field, array, integer, nullable, number, one_of, read, show
from echelonflow.limits import SECONDS, SIZE_BYTES, WEIGHT
from echelonflow.linkstate import LinkState
from echelonflow.model import qualified
from echelonflow.schedulers.base import ActiveFlow, Snapshot
from echelonflow.schedulers.crux import job_profile
from echelonflow.schedulers.live import LiveFlowTable, table_groups
from echelonflow.schedulers.view import FlowView, GroupView, JobProfile
from echelonflow.topology import Topology

STATES = ("declared", "active", "finished", "aborted")
#: States a flow never leaves: it delivered every byte, or its job was aborted (an agent of it died).
DONE_STATES = ("finished", "aborted")
#: Largest flow size and ideal-finish offset accepted: the project's one table of ranges.
MAX_SIZE_BYTES = int(SIZE_BYTES.high)
MAX_OFFSET_S = SECONDS.high
#: Latest time accepted for a start or finish (seconds on the controller's clock, about year 33658).
MAX_TIME_S = 1e12
#: How far a reported time may lie ahead of the controller's clock, or before its job's registration:
#: agents share the controller host's clock (Mininet), so this only absorbs rounding and a remote
#: agent's NTP error; a start hours ahead would hold its 5-tuple until then (docs/api.md, "Reported
#: times").
CLOCK_SKEW_S = 5.0
#: Least payload a flow of undeclared size counts as having left when its scheduler has no estimate.
UNDECLARED_LEFT_BYTES = 1 << 20
#: Least time between two deletions of archived jobs past their time in the store.
PURGE_EVERY_S = 60.0

check_time = number(0.0, MAX_TIME_S)
check_weight = number(WEIGHT.low, WEIGHT.high, above=WEIGHT.above)
#: A job's declared compute (seconds of GPU time over all its hosts; ``crux`` reads it): up to a year.
check_compute = nullable(number(0.0, 365 * 24 * 3600.0))
#: A flow as declared (``src``/``dst`` are then checked against the topology's hosts).
FLOW_FIELDS = (
    Field("flow_id", check_id, required=True),
    Field("src", required=True),
    Field("dst", required=True),
    Field("size_bytes", nullable(integer(1, MAX_SIZE_BYTES))),  # absent or null: undeclared
    Field("offset_s", number(0.0, MAX_OFFSET_S), default=0.0),
    Field("start_offset_s", nullable(number(0.0, MAX_OFFSET_S))),
)


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class JobRecord:
    """A job; ``registered_s`` (the controller's clock when it was registered; None for a job registered
    without a clock) bounds its flows' reported times from below, ``aborted_s`` is set for good by
    :meth:`Registry.abort_job`."""

    job_id: str
    weight: float = 1.0
    registered_s: float | None = None
    aborted_s: float | None = None
    #: The job's compute, seconds summed over its hosts (Crux's W_j); None: not declared.
    compute_s: float | None = None


@dataclass(frozen=True)
class EchelonRecord:
    job_id: str
    echelon_id: str
    kind: str | None  # "coflow" (every offset 0) or "staggered"; None until its first flows are declared

    @property
    def key(self) -> str:
        return qualified(self.job_id, self.echelon_id)


@dataclass(frozen=True)
class FlowRecord:
    """One flow; ``seq`` keeps global declaration order (stable listings and store reloads)."""

    job_id: str
    flow_id: str
    echelon_id: str
    src: str
    dst: str
    size_bytes: int | None  # None: undeclared (learned or estimated; see the module docstring)
    offset_s: float
    start_offset_s: float | None
    seq: int
    state: str = "declared"
    src_port: int | None = None
    dst_port: int | None = None
    bytes_sent: int = 0
    start_s: float | None = None
    finish_s: float | None = None
    channel_id: str | None = None  # the persistent connection it ran on (None: its own 5-tuple)

    @property
    def key(self) -> str:
        return qualified(self.job_id, self.flow_id)

    @property
    def echelon_key(self) -> str:
        return qualified(self.job_id, self.echelon_id)


class SizeEstimator(Protocol):
    """Who knows what a flow of undeclared size has left (``Scheduler`` implements it)."""

    def estimate_remaining_bytes(self, flow_id: str, sent_bytes: float) -> float | None: ...


class StoreSink:
    """What the registry needs from a store (``controller.store.Store`` implements it).

    ``commit`` must write all given rows in ONE transaction and raise without writing anything on failure.
    """

    def commit(
        self,
        jobs: Sequence[JobRecord] = (),
        echelons: Sequence[EchelonRecord] = (),
        flows: Sequence[FlowRecord] = (),
        settings: Mapping[str, str] | None = None,
        channels: Sequence[ChannelRecord] = (),
        removed_channels: Sequence[str] = (),
    ) -> None:
        raise NotImplementedError

    def archive(self, jobs: Sequence[tuple[str, float]]) -> None:
        """Mark the jobs (id, done time) as out of memory: a restart does not load them."""
        raise NotImplementedError

    def archived(self, job_id: str) -> float | None:
        """When an archived job was done (None: no such archived job)."""
        raise NotImplementedError

    def archive_echelons(self, echelons: Sequence[tuple[str, str, float]]) -> None:
        """Mark the EchelonFlows (job, id, done time) as out of memory, their job staying."""
        raise NotImplementedError

    def archived_echelon(self, job_id: str, echelon_id: str) -> float | None:
        """When an archived EchelonFlow was done (None: no such archived EchelonFlow)."""
        raise NotImplementedError

    def archived_flow(self, job_id: str, flow_id: str) -> str | None:
        """The EchelonFlow of a flow whose EchelonFlow is archived (None: no such flow)."""
        raise NotImplementedError

    def parted_jobs(self) -> list[str]:
        """The jobs not archived that have archived EchelonFlows."""
        raise NotImplementedError

    def delete_job(self, job_id: str) -> None:
        raise NotImplementedError

    def purge(self, done_before_s: float) -> int:
        """Delete the archived jobs done before ``done_before_s``; how many."""
        raise NotImplementedError


#: What ``Store.load`` returns and a registry starts from.
LoadedRows = tuple[Iterable[JobRecord], Iterable[EchelonRecord], Iterable[FlowRecord], Mapping[str, str],
                   Iterable[ChannelRecord]]


# --------------------------------------------------------------------------- registry
class Registry:
    """All jobs, EchelonFlows and flows the controller knows, with their live state."""

    def __init__(self, topology: Topology, store: StoreSink | None = None,
                 loaded: LoadedRows | None = None, retention: Retention = DEFAULT_RETENTION) -> None:
        self.topology = topology
        self.store = store
        #: How long done jobs stay in memory and in the store (``controller.retention``).
        self.retention = retention
        #: Orders, counts, recent EchelonFlows and done jobs, so reads need not walk the records.
        self.index = RegistryIndex(STATES)
        self._purged_s = float("-inf")
        self._hosts: set[str] = set(topology.hosts)
        self._capacity_bps = topology.capacity_bps()
        self.jobs: dict[str, JobRecord] = {}
        self.echelons: dict[str, EchelonRecord] = {}  # qualified echelon id -> record
        self.members: dict[str, list[str]] = {}  # qualified echelon id -> qualified flow ids
        self.flows: dict[str, FlowRecord] = {}  # qualified flow id -> record
        self.settings: dict[str, str] = {}
        self._paths: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = {}
        #: Links and switches down now (the controller's port status): flows and channels are routed
        #: around them (:meth:`repin`); not stored, a restarted controller learns them from the switches.
        self.links = LinkState()
        self._active: dict[str, None] = {}  # ordered set of active flow keys
        self._by_tuple: TupleOwners = {}  # 5-tuples in use, by flows and channels
        #: The persistent connections (controller.channels), sharing the 5-tuples and the store commit.
        self.channels = Channels(topology, self._by_tuple, self._commit, self._host)
        self._reference_s: dict[str, float] = {}
        #: Jobs in memory some of whose done EchelonFlows left it for the store (their ids stay taken).
        self.parted_jobs: set[str] = set()
        self._observed_bytes: dict[str, float] = {}
        #: Per EchelonFlow, its members' delivered bytes and its first start, kept current by every
        #: event (:meth:`group_seen`), so a decision does not walk the records.
        self._seen = GroupsSeen()
        self._next_seq = 0
        #: Estimates the remaining bytes of flows registered without a size (the service's scheduler).
        self.estimator: SizeEstimator | None = None
        #: Incremented by every mutation; lets the service skip work when nothing changed.
        self.version = 0
        #: The active flows as the schedulers' flow table, kept current by every event
        #: (:meth:`scheduling_table`), so a decision does not convert the registry first.
        self._table = LiveFlowTable(self._capacity_bps)
        self._undeclared: set[str] = set()  # active flows of undeclared size: estimates move
        #: Each job's profile for ``crux`` (:meth:`job_profile`), until its flows or the routes change.
        self._profiles: dict[str, JobProfile] = {}
        if loaded is not None:
            self._load(*loaded)

    # ------------------------------------------------------------------ loading
    def _load(self, jobs, echelons, flows, settings, channels=()) -> None:
        """Rebuild memory from stored rows (never re-written: they are the store's own content)."""
        stored_topo = settings.get("topology")
        if stored_topo is not None and stored_topo != self.topology.name:
            raise RegistryError("topology", f"the store belongs to topology {stored_topo!r}, the controller "
                                            f"runs {self.topology.name!r}; use another store path")
        self.settings.update(settings)
        index = self.index
        for job in jobs:
            self.jobs[job.job_id] = job
            index.job_added(job.job_id)
        self.channels.load(channels)
        for ech in echelons:
            self.echelons[ech.key] = ech
            self.members[ech.key] = []
            index.echelon_added(ech.job_id, ech.key)
        for flow in sorted(flows, key=lambda f: f.seq):
            self._paths[flow.key] = self._path(flow.key, flow.src, flow.dst, "flow " + flow.key)
            self.flows[flow.key] = flow
            self.members[flow.echelon_key].append(flow.key)
            index.flow_added(flow.job_id, flow.echelon_key, flow.key, flow.seq, flow.state, flow.finish_s)
            self._next_seq = max(self._next_seq, flow.seq + 1)
            self._seen.declared(flow.echelon_key, flow.key)
            if flow.start_s is not None:
                self._seen.started(flow.echelon_key, flow.start_s)
                self._seen.delivered(flow.echelon_key, flow.key, self.bytes_done(flow))
            if flow.state == "active":
                self._active[flow.key] = None
                if flow.channel_id is not None and flow.channel_id in self.channels:
                    self._on_channel(flow, self.channels[flow.channel_id])
                else:
                    self._by_tuple[self._tuple(flow)] = flow.key
            else:
                self._declare_in_table(flow)
        for job in self.jobs.values():
            if job.aborted_s is not None:
                index.job_aborted(job.job_id, job.aborted_s)
        for key in self.echelons:
            self._refresh_reference(key)
        for key in self._active:
            self._schedule(self.flows[key])

    def bind_topology_name(self) -> None:
        """Record which topology this registry (and its store) belongs to, once."""
        if self.settings.get("topology") != self.topology.name:
            self.set_setting("topology", self.topology.name)

    # ------------------------------------------------------------------ commit
    def _commit(self, jobs=(), echelons=(), flows=(), settings=None, channels=(),
                removed_channels=()) -> None:
        if self.store is not None:
            self.store.commit(jobs=jobs, echelons=echelons, flows=flows, settings=settings,
                              channels=channels, removed_channels=removed_channels)
        self.version += 1

    # ------------------------------------------------------------------ lookups
    def job(self, job_id: Any) -> JobRecord:
        check_id("job_id", job_id)
        job = self.jobs.get(job_id)
        if job is None:
            self._refuse_archived(job_id)
        return found(self.jobs, job_id, "job_id", f"no job {job_id!r}")

    def _refuse_archived_echelon(self, job_id: str, echelon_id: str) -> None:
        """A done EchelonFlow that left memory (its job live) is read from the store, never changed, and
        its id stays taken while the store holds it."""
        if self.store is None or job_id not in self.parted_jobs:
            return
        done_s = self.store.archived_echelon(job_id, echelon_id)
        if done_s is not None:
            raise ConflictError("echelon_id", f"EchelonFlow {echelon_id!r} of job {job_id!r} was done at "
                                              f"{done_s!r} and archived: it is read only (GET)")

    def _refuse_archived_flow(self, field: str, job_id: str, flow_id: str) -> None:
        if self.store is None or job_id not in self.parted_jobs:
            return
        echelon_id = self.store.archived_flow(job_id, flow_id)
        if echelon_id is not None:
            raise ConflictError(field, f"flow {flow_id!r} of job {job_id!r} belongs to EchelonFlow "
                                       f"{echelon_id!r}, done and archived: it is read only (GET)")

    def _refuse_archived(self, job_id: str) -> None:
        """A job that left memory for the store is read there (``controller.archive``), never changed."""
        done_s = None if self.store is None else self.store.archived(job_id)
        if done_s is not None:
            raise ConflictError("job_id", f"job {job_id!r} was done at {done_s!r} and archived: it is read "
                                          "only (GET), and takes no new work")

    def echelon(self, job_id: Any, echelon_id: Any) -> EchelonRecord:
        self.job(job_id)
        check_id("echelon_id", echelon_id)
        if qualified(job_id, echelon_id) not in self.echelons:
            self._refuse_archived_echelon(job_id, echelon_id)
        return found(self.echelons, qualified(job_id, echelon_id), "echelon_id",
                     f"job {job_id!r} has no EchelonFlow {echelon_id!r}")

    def flow(self, job_id: Any, flow_id: Any) -> FlowRecord:
        self.job(job_id)
        check_id("flow_id", flow_id)
        if qualified(job_id, flow_id) not in self.flows:
            self._refuse_archived_flow("flow_id", job_id, flow_id)
        return found(self.flows, qualified(job_id, flow_id), "flow_id",
                     f"job {job_id!r} has no flow {flow_id!r}")

    def flows_of(self, echelon_key: str) -> list[FlowRecord]:
        return [self.flows[k] for k in self.members.get(echelon_key, ())]

    def active_keys(self) -> list[str]:
        return list(self._active)

    def path_of(self, flow_key: str) -> tuple[str, ...]:
        """Node path (hosts included) the flow is pinned to."""
        return self._paths[flow_key][0]

    def reference_s(self, echelon_key: str) -> float | None:
        return self._reference_s.get(echelon_key)

    def bytes_done(self, flow: FlowRecord) -> float:
        """Best estimate of bytes delivered: the larger of the agent's report and the switch counters."""
        return max(float(flow.bytes_sent), self._observed_bytes.get(flow.key, 0.0))

    def remaining_bytes(self, flow: FlowRecord) -> float:
        """Payload bytes a live flow has left: its declared size less what is done, or for a flow of
        undeclared size the estimator's guess (see the module docstring)."""
        done = self.bytes_done(flow)
        if flow.size_bytes is not None:
            return max(0.0, flow.size_bytes - done)
        estimate = None if self.estimator is None else self.estimator.estimate_remaining_bytes(flow.key, done)
        return float(estimate) if estimate is not None else max(done, float(UNDECLARED_LEFT_BYTES))

    def expected_size_bytes(self, flow: FlowRecord) -> float | None:
        """The declared size, or the size the estimator expects a flow like this one to have (None: it
        has no idea)."""
        if flow.size_bytes is not None:
            return float(flow.size_bytes)
        return None if self.estimator is None else self.estimator.estimate_remaining_bytes(flow.key, 0.0)

    def _size_cap(self, flow: FlowRecord) -> int:
        """Most bytes a flow can report: its declared size, or the largest size accepted."""
        return MAX_SIZE_BYTES if flow.size_bytes is None else flow.size_bytes

    # ------------------------------------------------------------------ mutations
    def add_job(self, job_id: Any, weight: Any = 1.0, compute_s: Any = None,
                registered_s: float | None = None) -> JobRecord:
        """A new job; ``registered_s`` is the controller's clock now (the API gives it), the earliest
        time its flows may report (less :data:`CLOCK_SKEW_S`); ``compute_s`` its declared compute."""
        check_id("job_id", job_id)
        weight_f = check_weight("weight", weight)
        compute = check_compute("compute_s", compute_s)
        if job_id in self.jobs:
            raise ConflictError("job_id", f"job {job_id!r} is already registered")
        self._refuse_archived(job_id)
        record = JobRecord(job_id, weight_f, registered_s, None, None if compute is None else float(compute))
        self._commit(jobs=[record])
        self.jobs[job_id] = record
        self.index.job_added(job_id)
        return record

    def add_echelon(self, job_id: Any, echelon_id: Any, kind: Any = None,
                    flows: Any = ()) -> tuple[EchelonRecord, list[FlowRecord]]:
        """Register an EchelonFlow and (optionally) its flows in one step.  Its kind, when not given, is
        inferred from its first flows (:meth:`add_flows` when it is declared without any)."""
        self._live_job(job_id)
        check_id("echelon_id", echelon_id)
        key = qualified(job_id, echelon_id)
        if key in self.echelons:
            raise ConflictError("echelon_id", f"job {job_id!r} already has EchelonFlow {echelon_id!r}")
        self._refuse_archived_echelon(job_id, echelon_id)
        if kind is not None:
            one_of(*KINDS)("kind", kind)
        new_flows = self._parse_flows(job_id, echelon_id, flows, kind)
        if kind is None and new_flows:
            kind = infer_kind(f.offset_s for f in new_flows)
        record = EchelonRecord(job_id, echelon_id, kind)
        self._commit(echelons=[record], flows=new_flows)
        self.echelons[key] = record
        self.members[key] = []
        self.index.echelon_added(job_id, key)
        self._apply_new_flows(new_flows)
        return record, new_flows

    def add_flows(self, job_id: Any, echelon_id: Any, flows: Any) -> list[FlowRecord]:
        """Declare more flows of an existing EchelonFlow (all or none); the first ones declared decide
        the kind of an EchelonFlow registered without flows and kind."""
        ech = self.echelon(job_id, echelon_id)
        self._live_job(job_id)
        array(nonempty=True, of="of flow objects")("flows", flows)
        new_flows = self._parse_flows(job_id, echelon_id, flows, ech.kind)
        decided = []
        if ech.kind is None:
            decided = [replace(ech, kind=infer_kind(f.offset_s for f in new_flows))]
        self._commit(echelons=decided, flows=new_flows)
        for record in decided:
            self.echelons[record.key] = record
        self._apply_new_flows(new_flows)
        return new_flows

    def _live_job(self, job_id: Any) -> JobRecord:
        """The job, refusing (409) one that was aborted: aborted is for good, it takes no new work."""
        job = self.job(job_id)
        if job.aborted_s is not None:
            raise ConflictError("job_id", f"job {job_id!r} was aborted at {job.aborted_s!r}; it takes no "
                                          "new EchelonFlows or flows (register the retry as a new job)")
        return job

    def _reported_time(self, field: str, value: Any, job_id: str, now_s: float | None) -> float:
        """A time an agent reports (a start, finish or abort), checked against the controller's clock
        ``now_s`` when given: at most :data:`CLOCK_SKEW_S` ahead of it, and not earlier than the job's
        registration less the same skew (a flow cannot have run before its job was known)."""
        value_s = check_time(field, value)
        if now_s is None:
            return value_s
        if value_s > now_s + CLOCK_SKEW_S:
            raise RegistryError(field, f"{value_s!r} is {value_s - now_s:.3g} s ahead of the controller's "
                                       f"clock ({now_s!r}); at most {CLOCK_SKEW_S:g} s is allowed")
        registered_s = self.jobs[job_id].registered_s
        if registered_s is not None and value_s < registered_s - CLOCK_SKEW_S:
            raise RegistryError(field, f"{value_s!r} is {registered_s - value_s:.3g} s before job "
                                       f"{job_id!r} was registered ({registered_s!r}); at most "
                                       f"{CLOCK_SKEW_S:g} s is allowed")
        return value_s

    def flow_started(self, job_id: Any, flow_id: Any, src_port: Any, dst_port: Any,
                     start_s: Any, channel_id: Any = None, now_s: float | None = None) -> FlowRecord:
        """A flow starts on its own 5-tuple (``src_port``/``dst_port``) or on a registered channel;
        ``now_s`` (the controller's clock) bounds ``start_s`` (:meth:`_reported_time`)."""
        flow = self.flow(job_id, flow_id)
        if channel_id is not None:
            if src_port is not None or dst_port is not None:
                raise RegistryError("channel_id", "give either channel_id or src_port and dst_port, not both")
            channel = self.channels.lookup(channel_id)
            start = self._reported_time("start_s", start_s, job_id, now_s)
            return self._start_on_channel(flow, channel, start)
        sport = check_port("src_port", src_port)
        dport = check_port("dst_port", dst_port)
        start = self._reported_time("start_s", start_s, job_id, now_s)
        if flow.state != "declared":
            raise ConflictError("flow_id", f"flow {flow.key!r} is already {flow.state}")
        updated = replace(flow, state="active", src_port=sport, dst_port=dport, start_s=start)
        owner = self._by_tuple.get(self._tuple(updated))
        if owner is not None:
            holder = owner if owner.startswith("channel ") else f"active flow {owner!r}"
            raise ConflictError("src_port", f"{holder} already uses {updated.src}:{sport} -> "
                                       f"{updated.dst}:{dport}")
        self._commit(flows=[updated])
        self.flows[flow.key] = updated
        self._active[flow.key] = None
        self.index.flow_moved(flow.state, updated.state)
        self._by_tuple[self._tuple(updated)] = flow.key
        self._seen.started(flow.echelon_key, start)
        self._refresh_reference(flow.echelon_key)
        self._schedule(updated)
        return updated

    def _start_on_channel(self, flow: FlowRecord, channel: ChannelRecord, start: float) -> FlowRecord:
        if flow.state != "declared":
            raise ConflictError("flow_id", f"flow {flow.key!r} is already {flow.state}")
        if (flow.src, flow.dst) != (channel.src, channel.dst):
            raise RegistryError("channel_id", f"channel {channel.channel_id!r} connects {channel.src} -> "
                                              f"{channel.dst}, flow {flow.key!r} goes {flow.src} -> "
                                              f"{flow.dst}")
        busy = self.channels.flow_on(channel.channel_id)
        if busy is not None:
            raise ConflictError("channel_id", f"channel {channel.channel_id!r} carries active flow {busy!r}")
        updated = replace(flow, state="active", src_port=channel.src_port, dst_port=channel.dst_port,
                          start_s=start, channel_id=channel.channel_id)
        self._commit(flows=[updated])
        self.flows[flow.key] = updated
        self._active[flow.key] = None
        self.index.flow_moved(flow.state, updated.state)
        self._on_channel(updated, channel)
        self._seen.started(flow.echelon_key, start)
        self._refresh_reference(flow.echelon_key)
        self._schedule(updated)
        return updated

    def _on_channel(self, flow: FlowRecord, channel: ChannelRecord) -> None:
        """The flow runs where its channel runs: the channel's path, not the flow's own pinned one."""
        self.channels.carry(channel.channel_id, flow.key)
        route = self.channels.route(channel, self.links)
        self._paths[flow.key] = (route, Topology.links_of(route))

    def repin(self) -> tuple[list[str], list[str]]:
        """Re-route every pending and active flow and every channel for the current :attr:`links`.

        Returns the flow keys (flows on no channel) and channel ids whose path changed, so the caller
        moves what is enforced for them.  Finished and aborted flows keep the path they ran on.
        """
        flows = []
        for key, flow in self.flows.items():
            if flow.state in DONE_STATES:
                continue
            channel = self.channels.get(flow.channel_id) if flow.channel_id is not None else None
            if channel is not None and flow.state == "active":
                nodes = self.channels.route(channel, self.links)
            else:
                nodes = self._path(key, flow.src, flow.dst, "flow")[0]
            if nodes != self._paths[key][0]:
                self._paths[key] = (nodes, Topology.links_of(nodes))
                if key in self._table:
                    self._table.set_path(key, self._paths[key][1])
                if channel is None:
                    flows.append(key)
        channels = self.channels.reroute(self.links)
        self._profiles.clear()
        if flows or channels:
            self.version += 1
        return flows, channels

    def flow_progress(self, job_id: Any, flow_id: Any, bytes_sent: Any) -> FlowRecord:
        """Agent progress; lower values than already known are kept as the known maximum (reordering)."""
        flow = self.flow(job_id, flow_id)
        sent = integer(0, self._size_cap(flow))("bytes_sent", bytes_sent)
        if flow.state != "active":
            raise ConflictError("flow_id", f"flow {flow.key!r} is {flow.state}; progress needs it active")
        if sent <= flow.bytes_sent:
            return flow
        updated = replace(flow, bytes_sent=sent)
        self._commit(flows=[updated])
        self.flows[flow.key] = updated
        self._table.set_remaining(flow.key, self._wire_left(updated))
        self._delivered(updated)
        return updated

    def flow_finished(self, job_id: Any, flow_id: Any, finish_s: Any, bytes_sent: Any = None,
                      now_s: float | None = None) -> FlowRecord:
        """An active flow delivered its bytes at ``finish_s`` (None with ``now_s``: now, or the flow's
        start when that is later: a start reported within the clock skew ahead)."""
        flow = self.flow(job_id, flow_id)
        if finish_s is None and now_s is not None:
            finish_s = now_s if flow.start_s is None else max(now_s, flow.start_s)
        finish = self._reported_time("finish_s", finish_s, job_id, now_s)
        sent = flow.size_bytes
        if bytes_sent is not None:
            sent = integer(0, self._size_cap(flow))("bytes_sent", bytes_sent)
        elif sent is None:
            raise RegistryError("bytes_sent", f"missing: flow {flow.key!r} was registered without "
                                              f"size_bytes, so its finish must say how many bytes it moved")
        if flow.state != "active":
            raise ConflictError("flow_id", f"flow {flow.key!r} is {flow.state}; only an active flow finishes")
        if flow.start_s is not None and finish < flow.start_s:
            raise RegistryError("finish_s", f"{finish!r} is before the flow's start {flow.start_s!r}")
        updated = replace(flow, state="finished", finish_s=finish, bytes_sent=max(sent, flow.bytes_sent))
        self._commit(flows=[updated])
        self._retire(flow, updated)
        return updated

    def abort_job(self, job_id: Any, at_s: Any, now_s: float | None = None) -> list[FlowRecord]:
        """Release every flow of the job that has not finished (an agent of it died, the job failed):
        they become ``aborted`` at ``at_s``, their 5-tuples and channels are free again, and the
        scheduler stops seeing them (the caller's next pass removes their enforcement).  The job takes
        no new EchelonFlows or flows afterwards.  A second call finds nothing left and changes nothing.
        ``at_s`` is not before the start of any flow it ends (None with ``now_s``: now, or the latest
        such start when that is later)."""
        job = self.job(job_id)
        victims = [self.flows[key] for key in self.index.job_flows[job_id]
                   if self.flows[key].state not in DONE_STATES]
        if at_s is None and now_s is not None:
            at_s = max([now_s, *(f.start_s for f in victims if f.start_s is not None)])
        at = self._reported_time("at_s", at_s, job_id, now_s)
        if job.aborted_s is not None:
            return []
        for flow in victims:
            if flow.start_s is not None and at < flow.start_s:
                raise RegistryError("at_s", f"{at!r} is before the start {flow.start_s!r} of active flow "
                                            f"{flow.key!r}")
        updated = [replace(f, state="aborted", finish_s=at) for f in victims]
        aborted_job = replace(job, aborted_s=at)
        self._commit(jobs=[aborted_job], flows=updated)
        self.jobs[job_id] = aborted_job
        for old, new in zip(victims, updated):
            self._retire(old, new)
        self.index.job_aborted(job_id, at)
        return updated

    def job_profile(self, job_id: str) -> JobProfile:
        """The job as ``crux`` knows it (``echelonflow.schedulers.crux``): its GPU intensity, declared
        ``compute_s`` over the seconds its declared flows' wire bytes take on its most loaded link, and
        those flows' links (each flow on its pinned path, or its channel's if it started on one when
        the profile was made).  Intensity 0 without ``compute_s``; flows registered without a size count
        for nothing."""
        known = self._profiles.get(job_id)
        if known is None:
            job = self.jobs[job_id]
            flows = [self.flows[key] for key in self.index.job_flows[job_id]]
            known = self._profiles[job_id] = job_profile(
                job_id, job.compute_s or 0.0,
                ((self._paths[f.key][1], self.topology.wire_bytes(f.size_bytes))
                 for f in flows if f.size_bytes is not None), self._capacity_bps)
        return known

    # ------------------------------------------------------------------ retention
    def expire(self, now_s: float) -> list[str]:
        """Done jobs past their time in memory leave it (archived in the store, where they stay readable),
        then done EchelonFlows of the jobs that stay, likewise; archived ones past their time in the store
        are deleted from it (checked at most once a minute); the ids of the jobs that left memory
        (``controller.retention``)."""
        due = self.index.done.due(now_s, self.retention)
        if due and self.store is not None:
            self.store.archive(due)
        for job_id, _done_s in due:
            self._forget_job(job_id)
        parts = self.index.done_echelons.due(now_s, self.retention)
        if parts and self.store is not None:
            self.store.archive_echelons([(*self._echelon_ids(key), done_s) for key, done_s in parts])
        for key, _done_s in parts:
            self._forget_echelon(key)
        if self.store is not None and now_s - self._purged_s >= PURGE_EVERY_S:
            self._purged_s = now_s
            self.store.purge(now_s - self.retention.store_s)
        return [job_id for job_id, _done_s in due]

    def delete_job(self, job_id: Any) -> None:
        """Remove a done job (finished or aborted) from memory and from the store; a live one is refused
        (409: abort it first), an unknown one is a 404."""
        check_id("job_id", job_id)
        if job_id in self.jobs:
            if job_id not in self.index.done:
                raise ConflictError("job_id", f"job {job_id!r} is live (a flow of it is declared or active, "
                                              "or it has none yet): abort it first")
        elif self.store is None or self.store.archived(job_id) is None:
            found(self.jobs, job_id, "job_id", f"no job {job_id!r}")
        if self.store is not None:
            self.store.delete_job(job_id)
        if job_id in self.jobs:
            self._forget_job(job_id)
        self.version += 1

    def _forget_job(self, job_id: str) -> None:
        """A done job leaves memory with its EchelonFlows and flows (none of them active or declared)."""
        echelons = list(self.index.job_echelons[job_id])
        flows = self._drop_flows(list(self.index.job_flows[job_id]))
        for key in echelons:
            self._drop_echelon(key)
        del self.jobs[job_id]
        self._profiles.pop(job_id, None)
        self.parted_jobs.discard(job_id)
        self.index.job_removed(job_id, echelons, flows)

    def _echelon_ids(self, key: str) -> tuple[str, str]:
        ech = self.echelons[key]
        return ech.job_id, ech.echelon_id

    def _forget_echelon(self, key: str) -> None:
        """A done EchelonFlow leaves memory with its flows (all done); its job stays."""
        job_id = self.echelons[key].job_id
        flows = self._drop_flows(self.members[key])
        self._drop_echelon(key)
        self._profiles.pop(job_id, None)
        self.parted_jobs.add(job_id)
        self.index.echelon_removed(job_id, key, flows)

    def _drop_flows(self, keys: list[str]) -> list[tuple[str, str]]:
        """Done flows leave memory (the live table, records, paths); their (key, state) for the index."""
        flows = [(key, self.flows[key].state) for key in keys]
        for key, _state in flows:
            if key in self._table:
                self._table.remove(key)
            del self.flows[key]
            del self._paths[key]
        return flows

    def _drop_echelon(self, key: str) -> None:
        """An EchelonFlow whose flows left memory leaves it too (record, members, reference, table slot)."""
        del self.echelons[key]
        del self.members[key]
        self._reference_s.pop(key, None)
        self._seen.forget(key)
        self._table.drop_group(key)

    def _retire(self, flow: FlowRecord, updated: FlowRecord) -> None:
        """``flow`` (declared or active) reached a done state: apply ``updated`` and free what it held."""
        self.flows[flow.key] = updated
        self.index.flow_ended(flow.job_id, flow.echelon_key, flow.state, updated.state,
                              float(updated.finish_s))
        if flow.key in self._table:
            self._table.remove(flow.key)
        if flow.state != "active":
            return
        self._active.pop(flow.key, None)
        self._undeclared.discard(flow.key)
        if flow.channel_id is not None:  # the channel stays, idle, for the next flow
            self.channels.release(flow.channel_id)
        else:
            self._by_tuple.pop(self._tuple(flow), None)
        self._observed_bytes.pop(flow.key, None)
        self._delivered(updated)  # the agent's count from now on, no longer the counters'

    def set_setting(self, name: str, value: str) -> None:
        self._commit(settings={name: value})
        self.settings[name] = value

    def observe_bytes(self, flow_key: str, byte_count: float) -> None:
        """Switch-counter estimate of a live flow's delivered bytes (memory only; counters re-feed it)."""
        flow = self.flows.get(flow_key)
        if flow is None or flow.state != "active":
            return
        value = min(float(byte_count), float(self._size_cap(flow)))
        if value > self._observed_bytes.get(flow_key, 0.0):
            self._observed_bytes[flow_key] = value
            self._table.set_remaining(flow_key, self._wire_left(flow))
            self._delivered(flow)

    # ------------------------------------------------------------------ scheduler view
    def scheduler_view(self, now_s: float, active_order: str) -> FlowView:
        """The active flows as a scheduler's view (``Scheduler.decide``): the same flows, paths, wire
        bytes left, offsets, reference times and weights as :meth:`snapshot` gives, read from the flow
        table every event keeps current, with the declared flows each group has not started yet.

        Only flows of undeclared size are refreshed here, since what the estimator expects of them
        changes as it learns."""
        for key in self._undeclared:
            self._table.set_remaining(key, self._wire_left(self.flows[key]))
        return self._table.view(now_s, active_order, _RegistrySource(self))

    def _schedule(self, flow: FlowRecord) -> None:
        """An active flow enters the scheduling table."""
        self._table.add(flow.key, flow.echelon_key, self._paths[flow.key][1], flow.offset_s,
                        self.jobs[flow.job_id].weight, self._wire_left(flow),
                        self.topology.wire_bytes(self.bytes_done(flow)))
        if flow.size_bytes is None:
            self._undeclared.add(flow.key)

    def _delivered(self, flow: FlowRecord) -> None:
        """What ``flow`` delivered changed (a progress report, a counter reading, its end): its group's
        count and, while it is active, its row."""
        done = self.bytes_done(flow)
        self._seen.delivered(flow.echelon_key, flow.key, done)
        if flow.state == "active":
            self._table.set_sent(flow.key, self.topology.wire_bytes(done))

    def _wire_left(self, flow: FlowRecord) -> float:
        """What a flow has left on the wire: payload plus framing, as link capacities count it."""
        return self.topology.wire_bytes(self.remaining_bytes(flow))

    def snapshot(self, now_s: float) -> Snapshot:
        """Active flows with paths, remaining bytes and ideal finish times, for any ``Scheduler``, and the
        declared flows of their EchelonFlows that have not started (``Snapshot.declared``).

        Also what non-clairvoyant policies go by: each flow's delivered bytes, its group's delivered
        bytes (finished flows included) and the group's first start.
        """
        out = []
        group_sent: dict[str, float] = {}
        group_start: dict[str, float] = {}
        for key in self._active:
            group = self.flows[key].echelon_key
            if group not in group_sent:
                group_sent[group], group_start[group] = self.group_seen(group)
        for key in self._active:
            flow = self.flows[key]
            ref = self._reference_s[flow.echelon_key]
            done = self.bytes_done(flow)
            out.append(ActiveFlow(
                flow_id=key,
                echelon_id=flow.echelon_key,
                path=self._paths[key][1],
                # on the wire: payload plus framing, as link capacities count it (Topology.wire_bytes)
                remaining_bytes=self.topology.wire_bytes(self.remaining_bytes(flow)),
                ideal_finish_s=ref + flow.offset_s,
                offset_s=flow.offset_s,
                reference_s=ref,
                weight=self.jobs[flow.job_id].weight,
                sent_bytes=self.topology.wire_bytes(done),
                group_sent_bytes=group_sent[flow.echelon_key],
                group_start_s=group_start[flow.echelon_key],
            ))
        declared = []
        for group in group_sent:  # the groups of active flows: their declared flows not started yet
            ref = self._reference_s[group]
            for key in self.members[group]:
                flow = self.flows[key]
                if flow.state == "declared" and flow.size_bytes is not None:
                    declared.append(ActiveFlow(
                        flow_id=key, echelon_id=group, path=self._paths[key][1],
                        remaining_bytes=self.topology.wire_bytes(flow.size_bytes),
                        ideal_finish_s=ref + flow.offset_s, offset_s=flow.offset_s, reference_s=ref,
                        weight=self.jobs[flow.job_id].weight, group_sent_bytes=group_sent[group],
                        group_start_s=group_start[group]))
        return Snapshot(now_s=now_s, capacity_bps=self._capacity_bps, flows=out, declared=declared)

    def group_seen(self, echelon_key: str) -> tuple[float, float]:
        """What the network has seen of a started EchelonFlow: the wire bytes its flows delivered
        (finished ones included) and its first flow's start, as every event keeps them."""
        seen = self._seen
        return self.topology.wire_bytes(seen.sent_bytes(echelon_key)), seen.first_start_s(echelon_key)

    # ------------------------------------------------------------------ helpers
    def _parse_flows(self, job_id: str, echelon_id: str, specs: Any, kind: str | None) -> list[FlowRecord]:
        out: list[FlowRecord] = []
        seen: set[str] = set()
        seq = self._next_seq
        specs = list(specs) if isinstance(specs, tuple) else specs  # () from Python callers
        for i, spec in enumerate(array(of="of flow objects")("flows", specs)):
            where = f"flows[{i}]"
            flow = read(spec, FLOW_FIELDS, where)
            flow_id = flow["flow_id"]
            key = qualified(job_id, flow_id)
            if key in self.flows or flow_id in seen:
                raise ConflictError(f"{where}.flow_id", f"job {job_id!r} already has a flow {flow_id!r}")
            self._refuse_archived_flow(f"{where}.flow_id", job_id, flow_id)
            seen.add(flow_id)
            src = self._host(f"{where}.src", flow["src"])
            dst = self._host(f"{where}.dst", flow["dst"])
            if src == dst:
                raise RegistryError(f"{where}.dst", f"a flow needs two different hosts, got {src!r} twice")
            if kind == "coflow" and flow["offset_s"] != 0.0:
                raise RegistryError(f"{where}.offset_s",
                                    f"a coflow's flows all have offset 0, got {flow['offset_s']!r}")
            out.append(FlowRecord(job_id, flow_id, echelon_id, src, dst, flow["size_bytes"], flow["offset_s"],
                                  flow["start_offset_s"], seq))
            seq += 1
        return out

    def _apply_new_flows(self, flows: Sequence[FlowRecord]) -> None:
        self._profiles.clear()
        for flow in flows:
            self._paths[flow.key] = self._path(flow.key, flow.src, flow.dst, "flow")
            self.flows[flow.key] = flow
            self.members[flow.echelon_key].append(flow.key)
            self._next_seq = max(self._next_seq, flow.seq + 1)
            self.index.flow_added(flow.job_id, flow.echelon_key, flow.key, flow.seq, flow.state, None)
            self._seen.declared(flow.echelon_key, flow.key)
            self._declare_in_table(flow)

    def _declare_in_table(self, flow: FlowRecord) -> None:
        """A declared flow with its size is a member of its group in the flow table: what clairvoyant
        policies count before it starts."""
        if flow.state == "declared" and flow.size_bytes is not None:
            self._table.declare(flow.key, flow.echelon_key, self._paths[flow.key][1], flow.offset_s,
                                self.jobs[flow.job_id].weight, self._wire_left(flow))

    def _host(self, field: str, value: Any) -> str:
        if not isinstance(value, str) or value not in self._hosts:
            hosts = f"h1..h{len(self._hosts)}"
            raise RegistryError(field, f"must be a host of topology {self.topology.name} ({hosts}), "
                                       f"got {show(value)}")
        return value

    def _path(self, key: str, src: str, dst: str, what: str):
        try:
            nodes = self.topology.path_for(src, dst, key, self.links)
        except ValueError as exc:
            raise RegistryError("src", f"{what}: {exc}") from None
        return tuple(nodes), Topology.links_of(nodes)

    def ips(self, flow: FlowRecord) -> tuple[str, str]:
        """(src_ip, dst_ip) of a flow's hosts."""
        nodes = self.topology.graph.nodes
        return nodes[flow.src]["ip"], nodes[flow.dst]["ip"]

    def _tuple(self, flow: FlowRecord) -> tuple[str, str, int, int]:
        src_ip, dst_ip = self.ips(flow)
        return src_ip, dst_ip, int(flow.src_port or 0), int(flow.dst_port or 0)

    def five_tuple(self, flow_key: str) -> tuple[str, str, int, int]:
        """(src_ip, dst_ip, src_port, dst_port) of a started flow, for the enforcement match."""
        return self._tuple(self.flows[flow_key])

    def _refresh_reference(self, echelon_key: str) -> None:
        # flows_of lists in declaration order (seq), which breaks ties between equal starts.
        started = [FlowStart(f.start_s, f.start_offset_s, f.offset_s)
                   for f in self.flows_of(echelon_key) if f.start_s is not None]
        reference_s = reference_time_from_starts(started)
        if reference_s is None:
            self._reference_s.pop(echelon_key, None)
        else:
            self._reference_s[echelon_key] = reference_s
            self._table.set_reference(echelon_key, reference_s)


class _RegistrySource:
    """The registry as a view's source: flow ids from its table, groups with their first starts and
    (for non-clairvoyant policies) what was delivered, snapshots (``echelonflow.schedulers.view``)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def flow_ids(self, numbers: Sequence[int]) -> list[str]:
        return self.registry._table.ids_of(numbers)

    def groups(self, view: FlowView, seen: bool) -> GroupView:
        """Read from what every event keeps: the registry's :meth:`Registry.group_seen` per active
        group, and the table's rows for each flow's delivered bytes and the slowest link."""
        registry, table = self.registry, self.registry._table
        groups = table_groups(view)
        keys = [table.slot_ids[head] for head in groups.heads]
        kept = registry._seen
        groups.start_s = [kept.first_start_s(key) for key in keys]
        if seen:
            wire_bytes = registry.topology.wire_bytes
            groups.attained_bytes = [wire_bytes(kept.sent_bytes(key)) for key in keys]
            groups.flow_sent_bytes = table.sent_of(view.active)
            groups.slowest_bps = table.slowest_of(view.active)
        return groups

    def snapshot(self, view: FlowView) -> Any:
        return self.registry.snapshot(view.now_s)

    def job_profiles(self, view: FlowView, groups: GroupView) -> list[JobProfile] | None:
        registry = self.registry
        slot_ids = registry._table.slot_ids
        return [registry.job_profile(slot_ids[head].split("/", 1)[0]) for head in groups.heads]
