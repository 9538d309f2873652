"""EchelonFlow grouping, zero-communication schedule, offsets and tardiness (echelonflow.echelon)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echelonflow.echelon import (
    FlowStart,
    FlowTimes,
    compute_order_key,
    echelon_tardiness,
    echelons_of,
    flow_tardiness,
    ideal_finish_times,
    ideal_schedule,
    infer_kind,
    reference_time,
    reference_time_from_starts,
    total_tardiness,
)
from echelonflow.errors import UserError
from echelonflow.model import ComputeTask, FlowTask, Job


def fig2_job() -> Job:
    """Paper Fig. 2 built by hand: worker 1 computes 3 micro-batches, each followed by a flow to worker 2."""
    job = Job("fig2")
    for m in range(3):
        job.add(ComputeTask(f"w1.c{m}", "h1", 1.0, (f"w1.c{m - 1}",) if m else ()))
    for m in range(3):
        job.add(FlowTask(f"f{m}", "h1", "h2", 2, (f"w1.c{m}",), "e"))
        job.add(ComputeTask(f"w2.c{m}", "h2", 1.0, (f"f{m}",) + ((f"w2.c{m - 1}",) if m else ())))
    return job


def test_fig2_offsets_and_head() -> None:
    spec = echelons_of(fig2_job())["e"]
    assert spec.kind == "staggered"
    assert spec.flow_ids == ("f0", "f1", "f2")
    assert spec.head == "f0"
    assert spec.offsets_s == {"f0": 0.0, "f1": 1.0, "f2": 2.0}
    assert spec.ideal_start_s == {"f0": 1.0, "f1": 2.0, "f2": 3.0}


def test_fig2_zero_communication_schedule() -> None:
    schedule = ideal_schedule(fig2_job())
    assert schedule["w1.c2"] == (2.0, 3.0)
    assert schedule["f1"] == (2.0, 2.0)
    assert schedule["w2.c0"] == (1.0, 2.0)
    assert schedule["w2.c2"] == (3.0, 4.0)


def test_fig2_tardiness_matches_paper_table() -> None:
    """Fig. 2 finishes (B = 1): fair 4.5/6.5/7, Coflow 7/7/7, EchelonFlow 5/6/7, with r = 1."""
    spec = echelons_of(fig2_job())["e"]
    r = reference_time(spec, {"f0": 1.0, "f1": 2.0, "f2": 3.0})
    assert r == 1.0
    fair = {"f0": 4.5, "f1": 6.5, "f2": 7.0}
    coflow = {"f0": 7.0, "f1": 7.0, "f2": 7.0}
    echelon = {"f0": 5.0, "f1": 6.0, "f2": 7.0}
    assert [flow_tardiness(fair[f], r, spec.offsets_s[f]) for f in spec.flow_ids] == [3.5, 4.5, 4.0]
    assert echelon_tardiness(spec, fair, r) == 4.5
    assert echelon_tardiness(spec, coflow, r) == 6.0
    assert echelon_tardiness(spec, echelon, r) == 4.0


def test_tie_rule_declaration_order_on_a_host() -> None:
    job = Job("tie")
    job.add(ComputeTask("b", "h1", 1.0))
    job.add(ComputeTask("a", "h1", 1.0))
    schedule = ideal_schedule(job)
    assert schedule["b"] == (0.0, 1.0)
    assert schedule["a"] == (1.0, 2.0)
    assert compute_order_key(job) == {"b": 0, "a": 1}


def test_instant_is_settled_before_a_host_picks() -> None:
    """A zero-time flow finishing when the host frees makes its (earlier-declared) consumer eligible."""
    job = Job("settle")
    job.add(ComputeTask("x", "h2", 1.0, ("f",)))  # declared first on h2, ready at t=1 via f
    job.add(ComputeTask("c1", "h1", 1.0))
    job.add(ComputeTask("y", "h2", 1.0))  # ready at 0, runs 0..1
    job.add(ComputeTask("w", "h2", 1.0))  # ready at 0 but declared after x
    job.add(FlowTask("f", "h1", "h2", 10, ("c1",)))
    schedule = ideal_schedule(job)
    assert schedule["y"] == (0.0, 1.0)
    assert schedule["x"] == (1.0, 2.0)
    assert schedule["w"] == (2.0, 3.0)


def test_deadline_propagates_along_flow_chains_and_negative_offsets_clamp() -> None:
    job = Job("chain")
    job.add(FlowTask("y", "h1", "h3", 1, (), "e"))  # head: consumed at 0
    job.add(ComputeTask("b0", "h3", 3.0, ("y",)))
    job.add(FlowTask("x1", "h1", "h2", 1, (), "e"))
    job.add(FlowTask("x2", "h2", "h3", 1, ("x1",), "e"))
    job.add(ComputeTask("c", "h3", 1.0, ("x2", "b0")))  # starts at 3
    assert ideal_finish_times(job) == {"y": 0.0, "x1": 3.0, "x2": 3.0}
    assert echelons_of(job)["e"].offsets_s == {"y": 0.0, "x1": 3.0, "x2": 3.0}

    late_head = Job("clamp")
    late_head.add(ComputeTask("busy", "h2", 5.0))
    late_head.add(FlowTask("h", "h1", "h2", 1, (), "e"))
    late_head.add(ComputeTask("use_h", "h2", 1.0, ("h",)))  # waits for busy: starts at 5
    late_head.add(ComputeTask("pre", "h1", 1.0))
    late_head.add(FlowTask("g", "h1", "h3", 1, ("pre",), "e"))
    late_head.add(ComputeTask("use_g", "h3", 1.0, ("g",)))  # starts at 1, before the head's d = 5
    spec = echelons_of(late_head)["e"]
    assert spec.flow_ids == ("h", "g")
    assert spec.offsets_s == {"h": 0.0, "g": 0.0}


def test_flow_without_consumer_is_due_at_its_own_start() -> None:
    job = Job("sink")
    job.add(ComputeTask("c", "h1", 2.5))
    job.add(FlowTask("f", "h1", "h2", 1, ("c",)))
    assert ideal_finish_times(job) == {"f": 2.5}


def test_grouping_kinds_and_explicit_offsets() -> None:
    job = fig2_job()
    job.add(FlowTask("solo", "h2", "h1", 5, ("w2.c2",)))  # no echelon id: its own group
    specs = echelons_of(job)
    assert set(specs) == {"e", "solo"}
    assert specs["solo"].flow_ids == ("solo",) and specs["solo"].kind == "coflow"
    assert sorted(f for s in specs.values() for f in s.flow_ids) == sorted(f.task_id for f in job.flows)

    job.echelon_kinds["e"] = "coflow"  # Eq. 5: a labelled coflow has every d_j = r
    assert echelons_of(job)["e"].offsets_s == {"f0": 0.0, "f1": 0.0, "f2": 0.0}
    job.echelon_kinds["e"] = "staggered"
    job.explicit_offsets_s.update({"f0": 0.0, "f1": 0.25, "f2": 4.0})
    spec = echelons_of(job)["e"]
    assert spec.kind == "staggered"
    assert spec.offsets_s == {"f0": 0.0, "f1": 0.25, "f2": 4.0}


def test_bad_kind_and_id_collision_are_user_errors() -> None:
    job = fig2_job()
    job.echelon_kinds["e"] = "echelon"
    with pytest.raises(UserError, match="kind 'echelon'"):
        echelons_of(job)
    clash = fig2_job()
    clash.add(FlowTask("e", "h2", "h1", 5, ("w2.c2",)))  # no echelon, but named like echelon "e"
    with pytest.raises(UserError, match="task .e.: flow without an echelon has the same id as echelon .e."):
        echelons_of(clash)


def test_cycle_and_unknown_dependency_are_user_errors() -> None:
    job = Job("cyc")
    job.add(ComputeTask("a", "h1", 1.0, ("b",)))
    job.add(ComputeTask("b", "h1", 1.0, ("a",)))
    with pytest.raises(UserError, match="cycle"):
        ideal_schedule(job)
    missing = Job("miss")
    missing.add(ComputeTask("a", "h1", 1.0, ("nope",)))
    with pytest.raises(UserError, match="unknown dependency 'nope'"):
        echelons_of(missing)


def test_flow_times_is_a_read_only_mapping_in_flow_order() -> None:
    times = FlowTimes(("f2", "f0", "f1"), (0.5, 0.0, 2.0))
    assert times == {"f0": 0.0, "f1": 2.0, "f2": 0.5} and times != {"f0": 0.0, "f1": 2.0}
    assert list(times) == ["f2", "f0", "f1"] and len(times) == 3
    assert list(times.items()) == [("f2", 0.5), ("f0", 0.0), ("f1", 2.0)]
    assert times.values() == (0.5, 0.0, 2.0)
    assert times["f1"] == 2.0 and times.get("f9") is None and "f0" in times and "f9" not in times
    with pytest.raises(KeyError):
        times["f9"]
    with pytest.raises(TypeError):
        times["f0"] = 1.0  # type: ignore[index]
    assert repr(times) == "FlowTimes({'f2': 0.5, 'f0': 0.0, 'f1': 2.0})"


def test_reference_time_rules() -> None:
    spec = echelons_of(fig2_job())["e"]  # ideal starts 1, 2, 3
    assert reference_time(spec, {}) is None
    assert reference_time(spec, {"f1": 2.5}) == 1.5  # head not started yet: anchored by f1
    assert reference_time(spec, {"f0": 4.0, "f1": 2.5}) == 1.5  # a late head does not move r back
    assert reference_time(spec, {"f0": 1.2, "f1": 5.0}) == 1.2


def test_reference_time_for_flows_declared_without_start_offsets() -> None:
    """The controller's flows may lack the ideal-start offset: only the first to start then anchors r,
    with its ideal-finish offset (values worked by hand)."""
    assert reference_time_from_starts([]) is None
    assert reference_time_from_starts([FlowStart(11.0, None, 1.0)]) == 10.0  # head not started: 11 - 1
    # a late head (0 offset, starts at 12) does not move r: later starters without start offsets
    # take no part
    assert reference_time_from_starts([FlowStart(11.0, None, 1.0), FlowStart(12.0, None, 0.0)]) == 10.0
    # prefetched all at 30, needed at 30, 31, 32: the first listed of the equal starts anchors r = 30
    # (a min over start - offset would give 28)
    prefetched = [FlowStart(30.0, None, 0.0), FlowStart(30.0, None, 1.0), FlowStart(30.0, None, 2.0)]
    assert reference_time_from_starts(prefetched) == 30.0
    assert reference_time_from_starts(prefetched[::-1]) == 28.0  # listed first = the one due last
    # a declared start offset always takes part: 20.5 - 0.5, below the first starter's 21 - 0
    assert reference_time_from_starts([FlowStart(21.0, None, 0.0), FlowStart(20.5, 0.5, 3.0)]) == 20.0
    assert reference_time_from_starts([FlowStart(21.0, 0.0, 0.0), FlowStart(23.0, 1.0, 3.0)]) == 21.0


def test_kind_is_coflow_only_when_every_offset_is_zero() -> None:
    assert infer_kind([0.0, 0.0]) == "coflow" and infer_kind([]) == "coflow"
    assert infer_kind([0.0, 1e-9]) == "staggered"


def test_tardiness_helpers() -> None:
    assert flow_tardiness(3.0, 1.0, 0.5) == 1.5
    assert flow_tardiness(1.0, 1.0, 2.0) == -2.0
    assert total_tardiness([4.0, 6.0]) == 10.0
    assert total_tardiness([4.0, 6.0], [2.0, 0.5]) == 11.0
    with pytest.raises(ValueError, match="2 values but 1 weights"):
        total_tardiness([1.0, 2.0], [1.0])
    spec = echelons_of(fig2_job())["e"]
    assert echelon_tardiness(spec, {"f1": 3.0}, 1.0) == 1.0  # only finished flows count
    with pytest.raises(ValueError, match="no flow has finished"):
        echelon_tardiness(spec, {}, 1.0)


@st.composite
def random_jobs(draw):
    """Random DAGs: each task may depend on any earlier-declared task."""
    count = draw(st.integers(1, 14))
    job = Job("rand")
    hosts = ["h1", "h2", "h3"]
    for index in range(count):
        deps = tuple(sorted(draw(st.sets(st.integers(0, index - 1), max_size=3)))) if index else ()
        dep_ids = tuple(f"t{d}" for d in deps)
        if draw(st.booleans()):
            duration = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0]))
            job.add(ComputeTask(f"t{index}", draw(st.sampled_from(hosts)), duration, dep_ids))
        else:
            src, dst = draw(st.permutations(hosts))[:2]
            job.add(FlowTask(f"t{index}", src, dst, 10, dep_ids, draw(st.sampled_from(["", "g1", "g2"]))))
    return job


@settings(max_examples=150, deadline=None)
@given(random_jobs())
def test_schedule_and_offsets_invariants(job: Job) -> None:
    schedule = ideal_schedule(job)
    assert set(schedule) == set(job.tasks)
    for task in job.tasks.values():
        start, finish = schedule[task.task_id]
        for dep in task.deps:
            assert start >= schedule[dep][1] - 1e-9
        if isinstance(task, FlowTask):
            assert start == finish
        else:
            assert finish == pytest.approx(start + task.duration_s)
    by_host: dict = {}
    for task in job.computes:
        if task.duration_s > 0:
            by_host.setdefault(task.host, []).append(schedule[task.task_id])
    for spans in by_host.values():
        spans.sort()
        for (_, end), (begin, _) in zip(spans, spans[1:]):
            assert begin >= end - 1e-9  # one compute at a time per host
    due = ideal_finish_times(job, schedule)
    specs = echelons_of(job)
    seen = [f for spec in specs.values() for f in spec.flow_ids]
    assert sorted(seen) == sorted(f.task_id for f in job.flows)
    for spec in specs.values():
        assert spec.offsets_s[spec.head] == 0.0
        assert all(v >= 0 for v in spec.offsets_s.values())
        starts = [spec.ideal_start_s[f] for f in spec.flow_ids]
        assert starts == sorted(starts)
        # read in flow order (as the runs do) or by flow id (as tests and the emulation do): the same
        assert list(spec.ideal_start_s.values()) == starts and tuple(spec.offsets_s) == spec.flow_ids
        for fid in spec.flow_ids:
            assert due[fid] >= schedule[fid][0] - 1e-9
