"""Workload generators: small cases checked by hand (flows, bytes, dependency shape, grouping, offsets)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest

from echelonflow.echelon import echelons_of, ideal_schedule
from echelonflow.errors import UserError
from echelonflow.model import ComputeTask, FlowTask, Job, find_cycle, unknown_deps
from echelonflow.workloads import GENERATORS, generate

H3 = ["h1", "h2", "h3"]


def flows_by_echelon(job: Job) -> dict:
    out: dict = {}
    for flow in job.flows:
        out.setdefault(flow.echelon_id, []).append(flow)
    return out


def example_params(name: str) -> dict:
    sizes = {p.name: 6000 for p in GENERATORS[name].params if p.name.endswith("bytes")}
    sizes.pop("link_bytes_per_s", None)
    return sizes


@pytest.mark.parametrize("name", sorted(GENERATORS))
@pytest.mark.parametrize("iterations", [1, 2])
def test_every_generator_gives_a_valid_grouped_dag(name: str, iterations: int) -> None:
    hosts = ["h1", "h2"] if name == "fig2" else ["h1", "h2", "h3", "h4"]
    params = example_params(name)
    if name != "fig2":
        params["iterations"] = iterations
    job = generate(name, "j", hosts, params)
    assert unknown_deps(job) == []
    assert find_cycle(job) == []
    assert job.flows and all(f.echelon_id for f in job.flows)
    assert all(f.src != f.dst and f.src in hosts and f.dst in hosts for f in job.flows)
    assert set(job.echelon_kinds) == {f.echelon_id for f in job.flows}
    specs = echelons_of(job)
    assert {eid: s.kind for eid, s in specs.items()} == job.echelon_kinds
    assert generate(name, "j", hosts, params) == job  # deterministic


@pytest.mark.parametrize("name", sorted(set(GENERATORS) - {"fig2"}))
def test_iterations_chain(name: str) -> None:
    """Iteration 1's compute waits for iteration 0's results: two iterations take longer than one."""
    params = example_params(name)
    one = generate(name, "j", H3, {**params, "iterations": 1})
    two = generate(name, "j", H3, {**params, "iterations": 2})
    makespan_one = max(f for _, f in ideal_schedule(one).values())
    makespan_two = max(f for _, f in ideal_schedule(two).values())
    assert makespan_two == pytest.approx(2 * makespan_one)
    first_i1 = [t for t in two.computes if t.task_id.startswith("i1.") and not t.deps]
    assert first_i1 == []


def test_ring_allreduce_three_workers_one_bucket() -> None:
    job = GENERATORS["ring_allreduce"]("r", H3, bytes=3000)
    assert len(job.flows) == 2 * (3 - 1) * 3 == 12
    assert {f.size_bytes for f in job.flows} == {1000}
    for flow in job.flows:
        i = H3.index(flow.src)
        assert flow.dst == H3[(i + 1) % 3]
    tasks = job.tasks
    assert tasks["i0.b0.s0.w1"].deps == ("i0.w1.bwd0",)
    # step 2 of worker 1: what it received in step 1 (from worker 0) and its own step-1 send
    assert tasks["i0.b0.s2.w1"].deps == ("i0.b0.s1.w0", "i0.b0.s1.w1")
    spec = echelons_of(job)["i0.b0"]
    assert spec.kind == "coflow" and len(spec.flow_ids) == 12
    assert set(spec.offsets_s.values()) == {0.0}


def test_ring_allreduce_buckets_and_next_forward() -> None:
    job = GENERATORS["ring_allreduce"]("r", ["h1", "h2"], bytes=1001, buckets=2, iterations=2)
    groups = flows_by_echelon(job)
    assert sorted(groups) == ["i0.b0", "i0.b1", "i1.b0", "i1.b1"]
    assert [f.size_bytes for f in groups["i0.b0"]] == [251] * 4  # bucket 501 bytes / 2 workers, rounded up
    assert [f.size_bytes for f in groups["i0.b1"]] == [250] * 4
    assert job.tasks["i0.b1.s0.w0"].deps == ("i0.w0.bwd1",)
    # worker 0's next forward waits for its last backward piece and the last flow of every bucket it receives
    assert job.tasks["i1.w0.fwd"].deps == ("i0.w0.bwd1", "i0.b0.s1.w1", "i0.b1.s1.w1")


def test_parameter_server_two_workers() -> None:
    job = GENERATORS["parameter_server"]("ps", H3, bytes=5000, aggregate_s=0.5)
    pushes = [f for f in job.flows if f.echelon_id == "i0.push"]
    pulls = [f for f in job.flows if f.echelon_id == "i0.pull"]
    assert [(f.src, f.dst, f.size_bytes) for f in pushes] == [("h2", "h1", 5000), ("h3", "h1", 5000)]
    assert [(f.src, f.dst, f.size_bytes) for f in pulls] == [("h1", "h2", 5000), ("h1", "h3", 5000)]
    assert len(job.flows) == 4
    aggregate = job.tasks["i0.ps.aggregate"]
    assert isinstance(aggregate, ComputeTask) and aggregate.host == "h1"
    assert aggregate.deps == ("i0.w1.push", "i0.w2.push")
    assert all(f.deps == ("i0.ps.aggregate",) for f in pulls)
    assert job.echelon_kinds == {"i0.push": "coflow", "i0.pull": "coflow"}


def test_gpipe_two_stages_three_micro_batches() -> None:
    job = GENERATORS["gpipe"](
        "g", ["h1", "h2"], micro_batches=3, activation_bytes=700, forward_s=0.5, backward_s=1.0
    )
    acts = [f for f in job.flows if f.echelon_id == "i0.fwd.s0"]
    grads = [f for f in job.flows if f.echelon_id == "i0.bwd.s0"]
    assert len(acts) == 3 and len(grads) == 3 and len(job.flows) == 6
    assert all((f.src, f.dst, f.size_bytes) == ("h1", "h2", 700) for f in acts)
    assert all((f.src, f.dst, f.size_bytes) == ("h2", "h1", 700) for f in grads)
    specs = echelons_of(job)
    fwd = specs["i0.fwd.s0"]
    assert fwd.kind == "staggered"
    assert [fwd.offsets_s[f] for f in fwd.flow_ids] == [0.0, 0.5, 1.0]  # Eq. 6 with T = forward_s
    bwd = specs["i0.bwd.s0"]
    assert bwd.flow_ids == ("i0.g0.m2", "i0.g0.m1", "i0.g0.m0")  # GPipe backward: reverse order
    assert [bwd.offsets_s[f] for f in bwd.flow_ids] == [0.0, 1.0, 2.0]  # T = backward_s
    # all forwards before any backward on each stage
    assert job.tasks["i0.s1.b2"].deps == ("i0.s1.f2",)
    assert job.tasks["i0.s0.b2"].deps == ("i0.s0.f2", "i0.g0.m2")


def test_gpipe_offsets_follow_the_consuming_stage() -> None:
    """Stage 2 is the consumer of stage 1's activations: offsets are multiples of its forward time."""
    job = GENERATORS["gpipe"]("g", H3, micro_batches=4, activation_bytes=10, forward_s=0.25)
    spec = echelons_of(job)["i0.fwd.s1"]
    assert [spec.offsets_s[f] for f in spec.flow_ids] == [0.0, 0.25, 0.5, 0.75]


def stage_order(job: Job, host: str) -> list:
    schedule = ideal_schedule(job)
    tasks = [t for t in job.computes if t.host == host]
    return [t.task_id.split(".")[-1] for t in sorted(tasks, key=lambda t: schedule[t.task_id][0])]


def test_1f1b_orders_and_flows() -> None:
    job = GENERATORS["1f1b"]("p", H3, micro_batches=4, activation_bytes=10)
    assert stage_order(job, "h1") == ["f0", "f1", "f2", "b0", "f3", "b1", "b2", "b3"]
    assert stage_order(job, "h2") == ["f0", "f1", "b0", "f2", "b1", "f3", "b2", "b3"]
    assert stage_order(job, "h3") == ["f0", "b0", "f1", "b1", "f2", "b2", "f3", "b3"]
    assert job.tasks["i0.s0.b0"].deps == ("i0.s0.f2", "i0.g0.m0")  # the order is an explicit dep
    gpipe = GENERATORS["gpipe"]("p", H3, micro_batches=4, activation_bytes=10)
    assert sorted(f.task_id for f in job.flows) == sorted(f.task_id for f in gpipe.flows)
    # 1F1B's arrangement is not Eq. 6: stage 1 consumes micro-batch 2 only after a backward
    spec = echelons_of(job)["i0.fwd.s0"]
    offsets = [spec.offsets_s[f] for f in spec.flow_ids]
    gaps = {round(b - a, 9) for a, b in zip(offsets, offsets[1:])}
    assert len(gaps) > 1


def test_fig2_is_exactly_the_paper_example() -> None:
    job = GENERATORS["fig2"]("fig2", ["h1", "h2"], link_bytes_per_s=1000)
    expected = [
        ComputeTask("i0.s0.f0", "h1", 1.0, ()),
        FlowTask("i0.a0.m0", "h1", "h2", 2000, ("i0.s0.f0",), "i0.fwd.s0"),
        ComputeTask("i0.s0.f1", "h1", 1.0, ("i0.s0.f0",)),
        FlowTask("i0.a0.m1", "h1", "h2", 2000, ("i0.s0.f1",), "i0.fwd.s0"),
        ComputeTask("i0.s0.f2", "h1", 1.0, ("i0.s0.f1",)),
        FlowTask("i0.a0.m2", "h1", "h2", 2000, ("i0.s0.f2",), "i0.fwd.s0"),
        ComputeTask("i0.s1.f0", "h2", 1.0, ("i0.a0.m0",)),
        ComputeTask("i0.s1.f1", "h2", 1.0, ("i0.s1.f0", "i0.a0.m1")),
        ComputeTask("i0.s1.f2", "h2", 1.0, ("i0.s1.f1", "i0.a0.m2")),
    ]
    strip = [dataclasses.replace(t, label="") for t in job.tasks.values()]
    assert strip == expected
    spec = echelons_of(job)["i0.fwd.s0"]
    assert spec.offsets_s == {"i0.a0.m0": 0.0, "i0.a0.m1": 1.0, "i0.a0.m2": 2.0}
    assert spec.ideal_start_s["i0.a0.m0"] == 1.0


def test_megatron_two_hosts_two_layers() -> None:
    job = GENERATORS["megatron"]("m", ["h1", "h2"], layers=2, activation_bytes=3000)
    groups = flows_by_echelon(job)
    assert sorted(groups) == ["i0.l0.bwd", "i0.l0.fwd", "i0.l1.bwd", "i0.l1.fwd"]
    assert all(len(flows) == 2 * (2 - 1) * 2 for flows in groups.values())
    assert {f.size_bytes for f in job.flows} == {1500}
    assert set(job.echelon_kinds.values()) == {"coflow"}
    # layer 1's forward on host 0 waits for layer 0's compute and the all-reduce flow it receives last
    assert job.tasks["i0.l1.fwd.w0"].deps == ("i0.l0.fwd.w0", "i0.l0.fwd.s1.w1")
    assert job.tasks["i0.l1.bwd.w1"].deps == ("i0.l1.fwd.w1", "i0.l1.fwd.s1.w0")


def test_fsdp_all_gathers_form_one_staggered_echelon() -> None:
    job = GENERATORS["fsdp"]("z", H3, layers=2, param_bytes=3000, forward_s=1.0, backward_s=2.0)
    groups = flows_by_echelon(job)
    assert sorted(groups) == ["i0.ag", "i0.rs.l0", "i0.rs.l1"]
    assert len(groups["i0.ag"]) == 2 * 2 * (3 - 1) * 3  # 2L all-gathers of (n-1) steps x n workers
    assert len(groups["i0.rs.l0"]) == (3 - 1) * 3
    assert {f.size_bytes for f in job.flows} == {1000}
    specs = echelons_of(job)
    ag = specs["i0.ag"]
    assert ag.kind == "staggered"
    by_gather: dict = {}
    for fid in ag.flow_ids:
        by_gather.setdefault(fid.rsplit(".", 2)[0], set()).add(ag.offsets_s[fid])
    # Eq. 7: forward layer 0 at r, +T_fwd for layer 1, then backward layer 1, then +T_bwd for layer 0
    assert by_gather == {
        "i0.ag.fwd.l0": {0.0},
        "i0.ag.fwd.l1": {1.0},
        "i0.ag.bwd.l1": {2.0},
        "i0.ag.bwd.l0": {4.0},
    }
    assert specs["i0.rs.l1"].kind == "coflow"
    # prefetch: layer 1's all-gather starts after layer 0's is received, not after layer 0's compute
    assert job.tasks["i0.ag.fwd.l1.s0.w0"].deps == ("i0.ag.fwd.l0.s1.w2",)
    assert job.tasks["i0.rs.l1.s0.w2"].deps == ("i0.l1.bwd.w2",)


def test_fsdp_without_prefetch_waits_for_compute() -> None:
    job = GENERATORS["fsdp"]("z", H3, layers=2, param_bytes=3000, prefetch=False, iterations=2)
    assert job.tasks["i0.ag.fwd.l1.s0.w0"].deps == ("i0.l0.fwd.w0",)
    # next iteration's all-gather of a layer needs that layer's updated shard (its reduce-scatter)
    assert job.tasks["i1.ag.fwd.l0.s0.w1"].deps == ("i0.rs.l0.s1.w0", "i0.l0.bwd.w1")


# ------------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "name, hosts, params, fragment",
    [
        ("allreduce", H3, {}, "unknown generator 'allreduce' (valid: 1f1b, fig2, fsdp, gpipe, megatron"),
        ("gpipe", H3, {"activation_bytes": 1, "stages": 3},
         "stages: unknown field (allowed: iterations, micro_batches,"),
        ("gpipe", H3, {}, "activation_bytes: missing"),
        (
            "gpipe",
            H3,
            {"activation_bytes": True},
            "activation_bytes: must be an integer >= 1, got true",
        ),
        ("gpipe", H3, {"activation_bytes": 1.5}, "activation_bytes: must be an integer >= 1, got 1.5"),
        ("gpipe", H3, {"activation_bytes": "10"}, "activation_bytes: must be an integer >= 1, got '10'"),
        (
            "gpipe",
            H3,
            {"activation_bytes": 10, "forward_s": -1},
            "forward_s: must be a number >= 0, got -1",
        ),
        (
            "gpipe",
            H3,
            {"activation_bytes": 10, "forward_s": math.nan},
            "forward_s: must be a number >= 0, got nan",
        ),
        (
            "gpipe",
            H3,
            {"activation_bytes": 10, "forward_s": math.inf},
            "forward_s: must be a number >= 0, got inf",
        ),
        ("gpipe", H3, {"activation_bytes": 10, "forward_only": 1},
         "forward_only: must be true or false, got 1"),
        ("gpipe", H3, {"activation_bytes": 10, "micro_batches": 0},
         "micro_batches: must be an integer >= 1, got 0"),
        ("ring_allreduce", H3, {"bytes": 0}, "bytes: must be an integer >= 1, got 0"),
        ("ring_allreduce", H3, {"bytes": 2, "buckets": 3}, "'bytes' (2) must be at least 'buckets' (3)"),
        ("fig2", H3, {}, "hosts: needs exactly 2 hosts, got 3"),
        ("megatron", ["h1"], {"activation_bytes": 5}, "hosts: needs at least 2 hosts, got 1"),
        ("fsdp", ["h1", "h2", "h1"], {"param_bytes": 5}, "hosts: lists host 'h1' twice"),
        ("fsdp", "h1h2", {"param_bytes": 5}, "hosts: must be an array of host names, got 'h1h2'"),
        ("fsdp", H3, [("param_bytes", 5)], "must be an object of parameters, got [('param_bytes', 5)]"),
    ],
)
def test_bad_input_names_job_generator_parameter_and_problem(name, hosts, params, fragment) -> None:
    with pytest.raises(UserError) as err:
        generate(name, "job7", hosts, params)
    message = str(err.value)
    assert "job 'job7'" in message
    assert fragment in message
    if name in GENERATORS:
        assert f"generator {name!r}" in message


def test_direct_call_is_checked_too() -> None:
    with pytest.raises(UserError, match="byte: unknown field"):
        GENERATORS["parameter_server"]("j", H3, byte=10)
    with pytest.raises(UserError, match="id: must not contain '/', got 'a/b'"):
        GENERATORS["parameter_server"]("a/b", H3, bytes=10)


def test_describe_lists_every_parameter() -> None:
    for generator in GENERATORS.values():
        text = generator.describe()
        assert all(p.name in text for p in generator.params)
    assert "hosts: exactly 2" in GENERATORS["fig2"].describe()


PURE_MODULES = ["echelonflow.echelon", "echelonflow.trace", "echelonflow.workloads", "echelonflow.model"]


def test_core_modules_import_without_os_ken_or_mininet() -> None:
    """The pure core must load where neither exists (the blocked imports fail if anything pulls them in)."""
    code = (
        "import sys\n"
        "for name in ('os_ken', 'ryu', 'mininet'):\n"
        "    sys.modules[name] = None\n"
        f"for module in {PURE_MODULES!r}:\n"
        "    __import__(module)\n"
        "print('ok')\n"
    )
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
