"""Chakra import: every shared sample becomes a job that simulates; malformed traces fail in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from echelonflow.data_files import data_path
from echelonflow.errors import TraceError
from echelonflow.importers.chakra import read_chakra
from echelonflow.model import ComputeTask, FlowTask
from echelonflow.schedulers import get_scheduler
from echelonflow.topology import build
from simulator.engine import simulate
from tests.conftest import need

try:
    from chakra.schema.protobuf import et_def_pb2 as et_def
except ImportError:  # skipped outside CI, a failure under CI=true
    need("mlc-chakra", "mlc-chakra is not installed (bash bootstrap.sh --test installs it)")
    raise
ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20
RATE_BPS = 8e9  # 1 GB/s: 1 MiB takes 1.048576 ms


def hosts(n: int) -> list[str]:
    return [f"h{i + 1}" for i in range(n)]


@pytest.mark.parametrize("kind, n, steps", [
    ("all_reduce", 4, 6), ("all_reduce", 8, 14), ("all_gather", 4, 3), ("all_gather", 8, 7),
    ("reduce_scatter", 4, 3), ("reduce_scatter", 8, 7), ("all_to_all", 4, 1), ("all_to_all", 8, 1)])
def test_astra_sim_microbenchmarks_expand_into_our_collectives(kind: str, n: int, steps: int) -> None:
    folder = data_path(f"chakra/astra-sim/microbenchmarks/{kind}/{n}npus_1MB")
    job, summary = read_chakra("mb", folder, hosts(n))
    assert summary.ranks == n and summary.collective_kinds == {kind: 1}
    flows = job.flows
    per_flow = -(-MIB // n)
    if kind == "all_to_all":
        assert len(flows) == n * (n - 1) and {(f.src, f.dst) for f in flows} == {
            (a, b) for a in hosts(n) for b in hosts(n) if a != b}
    else:  # a ring: every step, worker i sends one chunk to worker i+1
        assert len(flows) == n * steps
        assert {(f.src, f.dst) for f in flows} == {(hosts(n)[i], hosts(n)[(i + 1) % n]) for i in range(n)}
    assert {f.size_bytes for f in flows} == {per_flow}
    assert {f.echelon_id for f in flows} == {"c0"} and job.echelon_kinds == {"c0": "coflow"}
    # on a non-blocking switch a ring step takes one chunk time; all-to-all sends n-1 chunks per uplink
    chunks = n - 1 if kind == "all_to_all" else steps
    result = simulate(build("bigswitch", RATE_BPS, mtu_bytes=None, hosts=n), [job], get_scheduler("echelon"))
    assert result.jobs["mb"].completion_s == pytest.approx(chunks * 8 * per_flow / RATE_BPS, rel=1e-6)


def test_ring_all_reduce_written_as_send_recv_and_compute() -> None:
    folder = data_path("chakra/astra-sim/custom_ring_allreduce_8npus_1MB")
    job, summary = read_chakra("ring", folder, hosts(8))
    assert (summary.ranks, summary.flows, summary.computes, summary.collectives) == (8, 112, 56, 0)
    sends = {(f.src, f.dst) for f in job.flows}
    assert sends == {(f"h{i + 1}", f"h{(i + 1) % 8 + 1}") for i in range(8)}  # rank r -> r+1
    assert {f.size_bytes for f in job.flows} == {131072}
    # 14 ring steps of 128 KiB with a 7 us reduction between receive and the next send
    result = simulate(build("bigswitch", RATE_BPS, mtu_bytes=None, hosts=8), [job], get_scheduler("fair"))
    step_s = 8 * 131072 / RATE_BPS
    assert result.jobs["ring"].completion_s == pytest.approx(14 * step_s + 7 * 7e-6, rel=1e-6)


def test_one_pytorch_rank_replicated_over_four_hosts() -> None:
    job, summary = read_chakra("pt", data_path("chakra/pytorch/chakra.0.et"), hosts(4))
    assert summary.ranks == 4 and summary.nodes == 4 * 3664
    assert summary.collective_kinds == {"broadcast": 2, "all_reduce": 5}
    computes = [t for t in job.tasks.values() if isinstance(t, ComputeTask)]
    assert len(computes) == 4 * 3643 and {t.host for t in computes} == set(hosts(4))
    assert all(isinstance(job.tasks[t], FlowTask) for t in job.tasks if t.startswith("c"))
    result = simulate(build("fattree", 10e9, k=4), [job], get_scheduler("echelon"))
    busiest_s = max(sum(t.duration_s for t in computes if t.host == h) for h in hosts(4))
    assert result.jobs["pt"].completion_s >= busiest_s * (1 - 1e-9)  # one GPU per host: at least its work


# ------------------------------------------------------------------------------------------ malformed
def _message(message) -> bytes:
    body = message.SerializeToString()
    prefix, value = bytearray(), len(body)
    while True:
        prefix.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(prefix) + body


def _node(node_id: int, kind: int, deps=(), **attrs) -> bytes:
    node = et_def.Node(id=node_id, name=f"n{node_id}", type=kind, data_deps=list(deps))
    for name, value in attrs.items():
        node.attr.append(et_def.AttributeProto(name=name, int64_val=value))
    return _message(node)


def _write(path: Path, *nodes: bytes) -> Path:
    path.write_bytes(_message(et_def.GlobalMetadata(version="0.0.4")) + b"".join(nodes))
    return path


def _raw(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _send(node_id, dst, size=1000, deps=()):
    return _node(node_id, 5, deps, comm_dst=dst, comm_size=size, comm_tag=0)


def _recv(node_id, src, size=1000, deps=()):
    return _node(node_id, 6, deps, comm_src=src, comm_size=size, comm_tag=0)


def _pair(tmp_path: Path, rank0: list, rank1: list) -> Path:
    folder = tmp_path / "pair"
    folder.mkdir()
    _write(folder / "t.0.et", *rank0)
    _write(folder / "t.1.et", *rank1)
    return folder


def test_point_to_point_pairs_and_their_dependencies(tmp_path: Path) -> None:
    folder = _pair(tmp_path, [_node(1, 4, duration_micros=0), _send(2, 1, deps=[1])],
                   [_recv(1, 0), _node(2, 4, [1])])
    job, _ = read_chakra("p", folder, ["h1", "h2"])
    (flow,) = job.flows
    assert (flow.src, flow.dst, flow.size_bytes, flow.deps) == ("h1", "h2", 1000, ("r0.n1",))
    assert job.tasks["r1.n2"].deps == (flow.task_id,)


@pytest.mark.parametrize("case, build_files, problem", [
    ("empty", lambda p: _raw(p, b""), "empty file"),
    ("cut", lambda p: _raw(p, _message(et_def.GlobalMetadata()) + b"\x64abc"), "cut short"),
    ("varint", lambda p: _raw(p, b"\xff\xff\xff\xff\xff\xff"), "bad length prefix"),
    ("garbage", lambda p: _raw(p, _message(et_def.GlobalMetadata()) + b"\x02\x0f\xff"),
     "message 1 (after the metadata) is not a Chakra protobuf message"),
    ("invalid", lambda p: _write(p, _node(3, 0)), "node 3 (n3): node type is INVALID_NODE"),
    ("duplicate", lambda p: _write(p, _node(3, 4), _node(3, 4)), "node 3 (n3): duplicate node id"),
    ("cycle", lambda p: _write(p, _node(1, 4, [2]), _node(2, 4, [1])), "dependency cycle"),
    ("unknown collective", lambda p: _write(p, _node(1, 7, comm_type=42, comm_size=8)),
     "node 1 (n1): unknown comm_type 42"),
    ("collective size", lambda p: _write(p, _node(1, 7, comm_type=0, comm_size=-5)),
     "node 1 (n1): comm_size must be a positive number of bytes"),
    ("send to itself", lambda p: _write(p, _send(1, 0)), "node 1 (n1): comm_dst 0 is not another rank"),
])
def test_malformed_single_files(tmp_path: Path, case: str, build_files, problem: str) -> None:
    path = build_files(tmp_path / "bad.et")
    with pytest.raises(TraceError) as caught:
        read_chakra("bad", path, ["h1", "h2"])
    message = str(caught.value)
    assert problem in message and str(path) in message and "\n" not in message, message


@pytest.mark.parametrize("rank0, rank1, problem", [
    ([_send(1, 1)], [_node(1, 4)], "t.0.et: node 1 (n1): no matching receive (rank 0 -> rank 1, tag 0"),
    ([_node(1, 4)], [_recv(1, 0)], "t.1.et: node 1 (n1): no matching send"),
    ([_send(1, 1, size=10)], [_recv(1, 0, size=20)], "receives 20 bytes but its send"),
    ([_node(1, 5, comm_dst=1)], [_recv(1, 0)], "t.0.et: node 1 (n1): comm_size must be a positive number"),
    ([_node(1, 7, comm_type=0, comm_size=8)], [], "t.1.et: 0 collective nodes, other ranks have 1"),
    ([_node(1, 7, comm_type=0, comm_size=8)], [_node(1, 7, comm_type=2, comm_size=8)],
     "t.1.et: node 1 (n1): collective all_reduce of 8 bytes on rank 0"),
])
def test_malformed_rank_pairs(tmp_path: Path, rank0, rank1, problem: str) -> None:
    with pytest.raises(TraceError) as caught:
        read_chakra("bad", _pair(tmp_path, rank0, rank1), ["h1", "h2"])
    assert problem in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def _typed(node_id: int, kind: int, **attrs) -> bytes:
    """A node whose attributes are (protobuf field, value): a string, double, bool or list where an
    integer belongs."""
    node = et_def.Node(id=node_id, name=f"n{node_id}", type=kind)
    for name, (field, value) in attrs.items():
        attr = et_def.AttributeProto(name=name)
        if field.endswith("_list"):
            getattr(attr, field).values.extend(value)
        else:
            setattr(attr, field, value)
        node.attr.append(attr)
    return _message(node)


_INT = ("int64_val", 1000)


@pytest.mark.parametrize("node, problem", [
    # each failed with a ValueError or TypeError traceback, or (1.7, true) was silently truncated
    (_typed(1, 5, comm_dst=("string_val", "one"), comm_size=_INT), "attribute 'comm_dst' must be a whole "
     "number, got 'one'"),
    (_typed(1, 5, comm_dst=("double_val", 1.7), comm_size=_INT), "attribute 'comm_dst' must be a whole "
     "number, got 1.7"),
    (_typed(1, 5, comm_dst=("int64_list", [1]), comm_size=_INT), "attribute 'comm_dst' must be a whole "
     "number, got a list (Int64List)"),
    (_typed(1, 5, comm_dst=("int64_val", 1), comm_size=_INT, comm_tag=("string_val", "x")),
     "attribute 'comm_tag' must be a whole number, got 'x'"),
    (_typed(1, 7, comm_type=("int64_list", [0]), comm_size=_INT), "attribute 'comm_type' must be a whole "
     "number, got a list (Int64List)"),
    (_typed(1, 7, comm_type=("bool_val", True), comm_size=_INT), "attribute 'comm_type' must be a whole "
     "number, got true"),
    (_typed(1, 7, comm_size=_INT), "node 1 (n1): missing attribute 'comm_type'"),
], ids=["dst-string", "dst-double", "dst-list", "tag-string", "type-list", "type-bool", "type-missing"])
def test_attributes_of_the_wrong_type_are_one_line(tmp_path: Path, node: bytes, problem: str) -> None:
    path = _write(tmp_path / "bad.et", node)
    with pytest.raises(TraceError) as caught:
        read_chakra("bad", path, ["h1", "h2"])
    message = str(caught.value)
    assert problem in message and "bad.et: node 1 (n1)" in message and "\n" not in message, message


def test_a_folder_of_two_traces_or_a_rank_twice_is_refused(tmp_path: Path) -> None:
    """Files of two traces (a.0.et, b.1.et) were taken for one job, and t.00.et silently stood for t.0.et."""
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    _write(mixed / "a.0.et", _node(1, 4))
    _write(mixed / "b.1.et", _node(1, 4))
    with pytest.raises(TraceError, match=r"mixed: per-rank files of 2 traces in one folder \(a, b\)"):
        read_chakra("bad", mixed, hosts(2))
    twice = tmp_path / "twice"
    twice.mkdir()
    _write(twice / "t.0.et", _node(1, 4))
    _write(twice / "t.00.et", _node(1, 4))
    with pytest.raises(TraceError, match="twice: two files for rank 0: t.0.et and t.00.et"):
        read_chakra("bad", twice, hosts(2))


def test_folders_need_every_rank_and_one_host_each(tmp_path: Path) -> None:
    folder = _pair(tmp_path, [_node(1, 4)], [_node(1, 4)])
    with pytest.raises(TraceError, match="2 ranks but 3 hosts given"):
        read_chakra("bad", folder, hosts(3))
    (folder / "t.1.et").rename(folder / "t.2.et")
    with pytest.raises(TraceError, match="rank 1 has no file"):
        read_chakra("bad", folder, hosts(2))
    with pytest.raises(TraceError, match="no per-rank Chakra files"):
        read_chakra("bad", tmp_path, hosts(2))


def test_scenario_entry_and_cli_error(tmp_path: Path) -> None:
    from echelonflow.scenario import load_scenario

    entry = {"id": "ar", "chakra": "data:chakra/astra-sim/microbenchmarks/all_reduce/4npus_1MB",
             "hosts": ["h1", "h5", "h9", "h13"], "arrival_s": 0.5, "weight": 2}
    doc = {"topology": {"kind": "fattree", "k": 4, "rate_mbps": 100}, "jobs": [entry]}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    (job,) = load_scenario(str(tmp_path / "s.json")).jobs
    assert (job.job_id, job.arrival_s, job.weight, len(job.flows)) == ("ar", 0.5, 2.0, 24)
    bad = dict(entry, hosts=["h1", "h5"])
    (tmp_path / "bad.json").write_text(json.dumps({**doc, "jobs": [bad]}))
    proc = subprocess.run([sys.executable, "-m", "cli", "simulate", str(tmp_path / "bad.json")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "jobs[0].chakra" in proc.stderr
    assert "4 ranks but 2 hosts" in proc.stderr
