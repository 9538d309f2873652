"""MLCommons Chakra execution traces (``.et``, PyPI ``mlc-chakra``) -> one job DAG over N ranks.

A Chakra trace is one file per rank: a stream of varint32-length-prefixed protobuf messages, first a
``GlobalMetadata``, then one ``Node`` each (schema ``et_def.proto``, decoded here with the package's
generated classes).  Mapping onto this project's model, rank r running on ``hosts[r]``:

* ``COMP_NODE`` -> a compute task of ``duration_micros`` on the rank's host;
* ``COMM_SEND_NODE`` (``comm_dst``, ``comm_tag``, ``comm_size``) and the matching ``COMM_RECV_NODE`` on
  the destination (``comm_src``, same tag; the k-th send of a (src, dst, tag) triple pairs with the k-th
  receive) -> one flow, which starts when the send's dependencies are done (the sender decides when
  data moves); the send is done with the flow, the receive once the flow and the receive's own
  dependencies are (a ring's receive waits for the rank's own previous send, so waiting for the
  receive before sending would deadlock the ring);
* ``COMM_COLL_NODE`` -> the k-th collective node of every rank together form collective k, expanded by
  the project's collective generators over all ranks in rank order: ring all-reduce (2(n-1) steps of
  size/n), all-gather and reduce-scatter (n-1 steps of size/n), all-to-all (size/n to every other rank),
  broadcast and scatter (a chain of full-size flows from rank 0), reduce and gather (a chain towards
  rank 0), barrier (a one-byte ring all-gather).  ``comm_size`` is the bytes per rank.  Each collective is
  one Coflow (the paper's Table 1);
* other node types (memory load/store, metadata), and collective nodes without a ``comm_size`` (PyTorch
  traces record the CPU-side ``c10d::`` call as such a node, next to the NCCL kernel node that carries
  the size), cost nothing: they complete when their dependencies do.

Order comes from ``data_deps``.  ``ctrl_deps`` are not used: Chakra's PyTorch converter writes an
operator's enclosing parent there, and the parent lists the child back (924 two-node cycles in the
shared sample), which is containment, not order.  A dependency on a node id that is not in the file,
or on the node itself, is dropped and counted (converted traces may reference operators the converter
left out).  PATH is one ``.et`` file, replicated on every host given, or a folder of per-rank files
``<name>.<rank>.et`` (ranks 0..N-1, one host each, one trace: two files for one rank or two names are
refused).  A file that cannot be used is one line naming the file, the node and the problem, also an
integer attribute (``comm_src``, ``comm_dst``, ``comm_tag``, ``comm_type``) given as a string, a float,
a boolean or a list.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echelonflow.echelon import check_job
from echelonflow.errors import TraceError, UserError
from echelonflow.fields import show
from echelonflow.fileio import path_kind, read_bytes_bounded
from echelonflow.model import ComputeTask, FlowTask, Job
from echelonflow.workloads.collectives import allreduce_steps, gather_steps, ring
from echelonflow.workloads.spec import chunk_bytes

COMP, SEND, RECV, COLL = 4, 5, 6, 7
INVALID = 0
#: comm_type values of et_def.proto's CollectiveCommType.
COLLECTIVES = {0: "all_reduce", 1: "reduce", 2: "all_gather", 3: "gather", 4: "scatter", 5: "broadcast",
               6: "all_to_all", 7: "reduce_scatter", 8: "reduce_scatter", 9: "barrier"}
_RANK_FILE = re.compile(r"^(?P<stem>.+)\.(?P<rank>\d+)\.et$")


@dataclass
class _Node:
    """The parts of a Chakra node this importer uses."""

    node_id: int
    name: str
    type: int
    deps: list[int]
    duration_s: float
    attrs: dict[str, Any]

    def describe(self) -> str:
        return f"node {self.node_id} ({self.name})" if self.name else f"node {self.node_id}"


@dataclass
class ChakraSummary:
    """What an import built and what it left out."""

    ranks: int
    nodes: int
    computes: int = 0
    flows: int = 0
    collectives: int = 0
    dropped_deps: int = 0
    collective_kinds: dict[str, int] = field(default_factory=dict)


def load_chakra(job_id: str, path: str | Path, hosts: Sequence[str]) -> Job:
    """The job described by the trace at ``path`` (file or folder) on ``hosts`` (rank r -> hosts[r])."""
    return read_chakra(job_id, path, hosts)[0]


def read_chakra(job_id: str, path: str | Path, hosts: Sequence[str]) -> tuple[Job, ChakraSummary]:
    """The job and a summary (module docstring)."""
    ranks = _rank_nodes(Path(path), len(hosts))
    return _Builder(job_id, ranks, list(hosts)).build()


# ------------------------------------------------------------------------------------------ reading
def _rank_nodes(path: Path, n_hosts: int) -> list[tuple[str, list[_Node]]]:
    """(file name, nodes) per rank."""
    if n_hosts < 1:
        raise TraceError(f"{path}: a Chakra job needs at least one host")
    if path_kind(path, "Chakra trace", TraceError) == "folder":
        files: dict[int, Path] = {}
        stems: set[str] = set()
        for child in sorted(path.iterdir()):
            match = _RANK_FILE.match(child.name)
            if match:
                rank = int(match.group("rank"))
                if rank in files:  # t.0.et and t.00.et: one would silently stand for the other
                    raise TraceError(f"{path}: two files for rank {rank}: {files[rank].name} and "
                                     f"{child.name}")
                files[rank] = child
                stems.add(match.group("stem"))
        if not files:
            raise TraceError(f"{path}: no per-rank Chakra files (<name>.<rank>.et) in this folder")
        if len(stems) > 1:  # the ranks of two traces would be taken for one job
            raise TraceError(f"{path}: per-rank files of {len(stems)} traces in one folder "
                             f"({', '.join(sorted(stems)[:3])}); keep one trace per folder")
        missing = [r for r in range(len(files)) if r not in files]
        if missing:
            raise TraceError(f"{path}: rank {missing[0]} has no file (ranks must be 0..{len(files) - 1})")
        if len(files) != n_hosts:
            raise TraceError(f"{path}: {len(files)} ranks but {n_hosts} hosts given (one host per rank)")
        return [(str(files[r]), read_nodes(files[r])) for r in range(len(files))]
    nodes = read_nodes(path)  # one rank's trace, the same on every host
    return [(str(path), nodes) for _ in range(n_hosts)]


def read_nodes(path: Path) -> list[_Node]:
    """Decode one ``.et`` file: the metadata message, then every node (TraceError naming the problem)."""
    try:
        from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
        from google.protobuf.message import DecodeError
    except ImportError as exc:
        raise UserError(f"reading Chakra traces needs mlc-chakra and protobuf ({exc}); run bootstrap.sh"
                        ) from None
    data = read_bytes_bounded(path, "Chakra trace", TraceError)
    nodes: list[_Node] = []
    seen: set[int] = set()
    offset, index = 0, -1
    while offset < len(data):
        what = "the metadata message" if index < 0 else f"message {index + 1} (after {_last(nodes)})"
        length, offset = _varint(data, offset, path, what)
        if offset + length > len(data):
            raise TraceError(f"{path}: {what} is cut short ({length} bytes announced, "
                             f"{len(data) - offset} left)")
        message = GlobalMetadata() if index < 0 else Node()
        try:
            message.ParseFromString(data[offset:offset + length])
        except DecodeError as exc:
            raise TraceError(f"{path}: {what} is not a Chakra protobuf message ({exc})") from None
        offset += length
        index += 1
        if isinstance(message, GlobalMetadata):
            continue
        node = _node(message, path)
        if node.node_id in seen:
            raise TraceError(f"{path}: {node.describe()}: duplicate node id")
        seen.add(node.node_id)
        nodes.append(node)
    if index < 0:
        raise TraceError(f"{path}: empty file (no Chakra metadata message)")
    return nodes


def _last(nodes: list[_Node]) -> str:
    return nodes[-1].describe() if nodes else "the metadata"


def _varint(data: bytes, offset: int, path: Path, what: str) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if offset >= len(data):
            raise TraceError(f"{path}: {what}: the file ends inside a length prefix")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift > 35:
            raise TraceError(f"{path}: {what}: bad length prefix (not a varint32)")


def _node(message: Any, path: Path) -> _Node:
    attrs: dict[str, Any] = {}
    for attr in message.attr:
        kind = attr.WhichOneof("value")
        if kind is not None:
            attrs[attr.name] = getattr(attr, kind)
    node = _Node(int(message.id), str(message.name), int(message.type),
                 list(dict.fromkeys(message.data_deps)),
                 float(message.duration_micros) / 1e6, attrs)
    if node.type == INVALID:
        raise TraceError(f"{path}: {node.describe()}: node type is INVALID_NODE (0)")
    return node


# ------------------------------------------------------------------------------------------ building
class _Builder:
    """Turns per-rank nodes into one job (see the module docstring)."""

    def __init__(self, job_id: str, ranks: list[tuple[str, list[_Node]]], hosts: list[str]) -> None:
        self.job = Job(job_id)
        self.ranks = ranks
        self.hosts = hosts
        self.n = len(ranks)
        self.by_id = [{node.node_id: node for node in nodes} for _, nodes in ranks]
        self.done: list[dict[int, tuple[str, ...]]] = [{} for _ in ranks]  # rank -> node -> completing tasks
        self.recv_flow: dict[tuple[int, int], str] = {}  # (rank, receive node) -> the flow it receives
        self.summary = ChakraSummary(self.n, sum(len(nodes) for _, nodes in ranks))
        for by_id in self.by_id:  # a node listing itself (seen in converted PyTorch traces) means nothing
            for node_id, node in by_id.items():
                if node_id in node.deps:
                    node.deps = [d for d in node.deps if d != node_id]
                    self.summary.dropped_deps += 1

    def where(self, rank: int, node: _Node) -> str:
        return f"{self.ranks[rank][0]}: {node.describe()}"

    def build(self) -> tuple[Job, ChakraSummary]:
        pairs = self._match_point_to_point()
        collectives = self._match_collectives()
        for rank, (_, nodes) in enumerate(self.ranks):
            for node in nodes:
                if node.type == COMP:
                    self.done[rank][node.node_id] = (f"r{rank}.n{node.node_id}",)
        for (rank, node_id), flow_id in pairs.items():
            if self.by_id[rank][node_id].type == SEND:
                self.done[rank][node_id] = (flow_id,)
            else:
                self.recv_flow[(rank, node_id)] = flow_id
        for k, members in enumerate(collectives):
            self._name_collective(k, members)
        for rank, (_, nodes) in enumerate(self.ranks):
            for node in nodes:
                if node.type == COMP:
                    task = ComputeTask(f"r{rank}.n{node.node_id}", self.hosts[rank], node.duration_s,
                                       self._deps(rank, node), node.name[:80])
                    self.job.add(task)
                    self.summary.computes += 1
        self._add_flows(pairs)
        for k, members in enumerate(collectives):
            self._expand_collective(k, members)
        check_job(self.job, f"{self.ranks[0][0]}: job {self.job.job_id!r}", TraceError)
        if not self.job.tasks:
            raise TraceError(f"{self.ranks[0][0]}: the trace has no compute or communication node")
        return self.job, self.summary

    # ---------------------------------------------------------------- completion of any node
    def _deps(self, rank: int, node: _Node) -> tuple[str, ...]:
        out: dict[str, None] = {}
        for dep in node.deps:
            for task_id in self._completion(rank, dep):
                out[task_id] = None
        return tuple(out)

    def _completion(self, rank: int, node_id: int) -> tuple[str, ...]:
        """The tasks whose completion means node ``node_id`` of ``rank`` is done (iterative: long chains
        of free nodes must not hit the recursion limit)."""
        done = self.done[rank]
        if node_id in done:
            return done[node_id]
        if node_id not in self.by_id[rank]:
            self.summary.dropped_deps += 1
            return ()
        stack, visiting = [node_id], {node_id}
        while stack:
            current = stack[-1]
            pending = [d for d in self.by_id[rank][current].deps
                       if d not in done and d in self.by_id[rank] and d not in visiting]
            cycle = [d for d in self.by_id[rank][current].deps if d in visiting and d not in done]
            if cycle:
                node = self.by_id[rank][current]
                raise TraceError(f"{self.where(rank, node)}: dependency cycle through node {cycle[0]}")
            if pending:
                stack.append(pending[0])
                visiting.add(pending[0])
                continue
            stack.pop()
            visiting.discard(current)
            merged: dict[str, None] = {}
            if (rank, current) in self.recv_flow:
                merged[self.recv_flow[(rank, current)]] = None
            for dep in self.by_id[rank][current].deps:
                for task_id in done.get(dep, ()):
                    merged[task_id] = None
            done[current] = tuple(merged)
        return done[node_id]

    # ---------------------------------------------------------------- point to point
    def _int_attr(self, rank: int, node: _Node, key: str, default: int | None = None) -> int:
        """Attribute ``key`` as a whole number: a string, list, float or boolean value is one line
        naming the node (``int()`` failed with a traceback on some and silently truncated others)."""
        if key not in node.attrs:
            if default is None:
                raise TraceError(f"{self.where(rank, node)}: missing attribute {key!r}")
            return default
        value = node.attrs[key]
        if not isinstance(value, int) or isinstance(value, bool):
            # a list attribute is a protobuf message, whose repr spans lines: named by its type
            scalar = isinstance(value, (str, float, bool, bytes))
            got = show(value) if scalar else f"a list ({type(value).__name__})"
            raise TraceError(f"{self.where(rank, node)}: attribute {key!r} must be a whole number, got {got}")
        return value

    def _peer(self, rank: int, node: _Node, key: str) -> int:
        peer = self._int_attr(rank, node, key)
        if not 0 <= peer < self.n or peer == rank:
            raise TraceError(f"{self.where(rank, node)}: {key} {peer} is not another rank (0..{self.n - 1})")
        return peer

    def _size(self, rank: int, node: _Node) -> int:
        size = node.attrs.get("comm_size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise TraceError(f"{self.where(rank, node)}: comm_size must be a positive number of bytes, "
                             f"got {size!r}")
        return size

    def _match_point_to_point(self) -> dict[tuple[int, int], str]:
        """(rank, node id) of every send and receive -> the id of the flow they form."""
        sends: dict[tuple[int, int, int], list[_Node]] = {}
        recvs: dict[tuple[int, int, int], list[_Node]] = {}
        for rank, (_, nodes) in enumerate(self.ranks):
            for node in nodes:
                if node.type == SEND:
                    tag = self._int_attr(rank, node, "comm_tag", 0)
                    key = (rank, self._peer(rank, node, "comm_dst"), tag)
                    sends.setdefault(key, []).append(node)
                elif node.type == RECV:
                    tag = self._int_attr(rank, node, "comm_tag", 0)
                    key = (self._peer(rank, node, "comm_src"), rank, tag)
                    recvs.setdefault(key, []).append(node)
        pairs: dict[tuple[int, int], str] = {}
        self._pairs: list[tuple[int, _Node, int, _Node]] = []
        for key in sorted(set(sends) | set(recvs)):
            src, dst, tag = key
            out, into = sends.get(key, []), recvs.get(key, [])
            if len(out) != len(into):
                rank, node, side = (src, out[len(into)], "receive") if len(out) > len(into) else (
                    dst, into[len(out)], "send")
                raise TraceError(f"{self.where(rank, node)}: no matching {side} (rank {src} -> rank {dst}, "
                                 f"tag {tag}: {len(out)} sends, {len(into)} receives)")
            for send, recv in zip(out, into):
                size, recv_size = self._size(src, send), self._size(dst, recv)
                if size != recv_size:
                    raise TraceError(f"{self.where(dst, recv)}: receives {recv_size} bytes but its send "
                                     f"({send.describe()} on rank {src}) sends {size}")
                flow_id = f"p2p.r{src}.n{send.node_id}"
                pairs[(src, send.node_id)] = pairs[(dst, recv.node_id)] = flow_id
                self._pairs.append((src, send, dst, recv))
        return pairs

    def _add_flows(self, pairs: dict[tuple[int, int], str]) -> None:
        for src, send, dst, _recv in self._pairs:
            flow_id = pairs[(src, send.node_id)]
            self.job.add(FlowTask(flow_id, self.hosts[src], self.hosts[dst], self._size(src, send),
                                  self._deps(src, send), flow_id, send.name[:80]))
            self.summary.flows += 1

    # ---------------------------------------------------------------- collectives
    def _match_collectives(self) -> list[list[_Node]]:
        """Collective k = the k-th sized collective node of every rank (same type and size everywhere)."""
        per_rank = [[node for node in nodes if node.type == COLL and "comm_size" in node.attrs]
                    for _, nodes in self.ranks]
        counts = {len(nodes) for nodes in per_rank}
        if len(counts) > 1:
            rank = min(range(self.n), key=lambda r: len(per_rank[r]))
            fewest, most = len(per_rank[rank]), max(counts)
            raise TraceError(f"{self.ranks[rank][0]}: {fewest} collective nodes, other ranks have {most} "
                             "(every rank must take part in every collective)")
        collectives = [list(group) for group in zip(*per_rank)]
        for members in collectives:
            first = members[0]
            kind = self._int_attr(0, first, "comm_type")
            if kind not in COLLECTIVES:
                raise TraceError(f"{self.where(0, first)}: unknown comm_type {kind!r} "
                                 f"(known: {', '.join(f'{k} {v}' for k, v in COLLECTIVES.items())})")
            size = self._size(0, first)
            for rank, node in enumerate(members[1:], start=1):
                if self._int_attr(rank, node, "comm_type") != kind or self._size(rank, node) != size:
                    raise TraceError(f"{self.where(rank, node)}: collective {COLLECTIVES[kind]} of {size} "
                                     f"bytes on rank 0 ({first.describe()}), but comm_type "
                                     f"{node.attrs.get('comm_type')!r} of {node.attrs.get('comm_size')!r} "
                                     "bytes here")
        return collectives

    def _name_collective(self, k: int, members: list[_Node]) -> None:
        """Which tasks complete collective k on each rank (named before any task exists)."""
        kind = COLLECTIVES[members[0].attrs["comm_type"]]
        n, prefix = self.n, f"c{k}"
        for rank, node in enumerate(members):
            if n == 1:
                done: tuple[str, ...] = ()
            elif kind == "all_to_all":
                done = tuple(f"{prefix}.w{j}.to{rank}" for j in range(n) if j != rank)
            elif kind in ("broadcast", "scatter"):
                done = (f"{prefix}.s{max(rank - 1, 0)}",)
            elif kind in ("reduce", "gather"):
                done = (f"{prefix}.s{n - 2}",) if rank == 0 else (f"{prefix}.s{n - 1 - rank}",)
            else:
                steps = allreduce_steps(n) if kind == "all_reduce" else gather_steps(n)
                done = (f"{prefix}.s{steps - 1}.w{(rank - 1) % n}",)
            self.done[rank][node.node_id] = done

    def _expand_collective(self, k: int, members: list[_Node]) -> None:
        kind = COLLECTIVES[members[0].attrs["comm_type"]]
        n, prefix = self.n, f"c{k}"
        size = 1 if kind == "barrier" else self._size(0, members[0])
        starts = [self._deps(rank, node) for rank, node in enumerate(members)]
        self.summary.collectives += 1
        self.summary.collective_kinds[kind] = self.summary.collective_kinds.get(kind, 0) + 1
        if n == 1:
            return
        label = f"{kind} {members[0].name}"[:80]
        before = len(self.job.tasks)
        if kind == "all_to_all":
            part = chunk_bytes(size, n)
            for i in range(n):
                for j in range(n):
                    if i != j:
                        self.job.add(FlowTask(f"{prefix}.w{i}.to{j}", self.hosts[i], self.hosts[j], part,
                                              starts[i], prefix, label))
        elif kind in ("broadcast", "scatter", "reduce", "gather"):
            order = list(range(n)) if kind in ("broadcast", "scatter") else list(range(n - 1, -1, -1))
            previous: tuple[str, ...] = ()
            for step in range(n - 1):
                a, b = order[step], order[step + 1]
                deps = tuple(dict.fromkeys([*starts[a], *starts[b], *previous]))
                flow_id = f"{prefix}.s{step}"
                self.job.add(FlowTask(flow_id, self.hosts[a], self.hosts[b], size, deps, prefix, label))
                previous = (flow_id,)
        else:
            steps = allreduce_steps(n) if kind == "all_reduce" else gather_steps(n)
            ring(self.job, prefix, self.hosts, chunk_bytes(size, n), steps, starts, prefix, label)
        self.job.echelon_kinds[prefix] = "coflow"
        self.summary.flows += len(self.job.tasks) - before
