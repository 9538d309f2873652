"""The Varys-family baselines as CoflowSim runs them: ``coflow``, ``fifo`` and ``port-fair``.

Every expected number here is worked by hand in the docstrings (docs/baselines.md states the rules).
The step they add to MADD and back-fill, the even per-link split of spare capacity among the coflows MADD
had to skip, is what keeps the capacity busy under the coflow rescheduling rule.
"""

from __future__ import annotations

import pytest

from echelonflow.model import FlowTask, Job
from echelonflow.schedulers import get_scheduler
from echelonflow.schedulers.base import ActiveFlow, Snapshot
from echelonflow.schedulers.live import LiveFlowTable
from echelonflow.schedulers.view import decision_on_snapshot
from echelonflow.topology import bigswitch
from simulator.engine import simulate

MB = 1_000_000
C = 8.0  # bits/s: one byte per second per link


def up(host: str) -> tuple[str, str]:
    return (host, "s")


def down(host: str) -> tuple[str, str]:
    return ("s", host)


def flow(fid: str, src: str, dst: str, remaining: float, reference: float = 0.0) -> ActiveFlow:
    group = fid.split("/")[0]
    return ActiveFlow(fid, group, (up(src), down(dst)), remaining, reference, 0.0, reference)


def skipped_instance(reference_b: float = 0.0) -> Snapshot:
    """A (a1 h1->h2, 1 B: Gamma 1 s) and B (2 B per flow; 8 B into h3: Gamma 8 s) on 1 B/s ports.

    SEBF puts A first; MADD gives a1 the whole of h1's uplink and h2's downlink.  B's b1 needs h1's
    uplink, which is full, so MADD skips B.  Spare split among B's flows whose links all have room
    (b1 has none): h4's uplink carries b2 and b3, h3's downlink b2, b6 and b7, so b2 = min(1/2, 1/3),
    b3 = min(1/2, 1/1), b6 = b7 = min(1/1, 1/3).  Back-fill then finds room only for b3: h4's uplink
    has 1 - 1/3 - 1/2 = 1/6 left (h5's downlink 1/2), so b3 = 1/2 + 1/6 = 2/3.
    """
    links = [up(h) for h in ("h1", "h4", "h6", "h7")] + [down(h) for h in ("h2", "h3", "h5")]
    flows = [flow("A/a1", "h1", "h2", 1.0), flow("B/b1", "h1", "h3", 2.0, reference_b),
             flow("B/b2", "h4", "h3", 2.0, reference_b), flow("B/b3", "h4", "h5", 2.0, reference_b),
             flow("B/b6", "h6", "h3", 2.0, reference_b), flow("B/b7", "h7", "h3", 2.0, reference_b)]
    return Snapshot(1.0, dict.fromkeys(links, C), flows)


EXPECTED_BYTES_PER_S = {"A/a1": 1.0, "B/b1": 0.0, "B/b2": 1 / 3, "B/b3": 2 / 3, "B/b6": 1 / 3, "B/b7": 1 / 3}


def test_coflow_splits_spare_capacity_evenly_among_the_flows_of_skipped_coflows() -> None:
    decision = decision_on_snapshot(get_scheduler("coflow"), skipped_instance())
    assert {f: r / 8 for f, r in decision.rate_bps.items()} == pytest.approx(EXPECTED_BYTES_PER_S, abs=1e-12)
    assert decision.rank["A/a1"] == 0


def test_fifo_is_madd_in_arrival_order_with_the_same_split() -> None:
    """B arriving after A (reference 0.5 s): FIFO's order is SEBF's here, so the rates are the same.

    B arriving first (-0.5 s) gets MADD on full ports: Gamma 8 s on h3's downlink, 2/8 B/s per flow.
    A then has 3/4 of h1's uplink: Gamma 4/3 s, a1 = 3/4.  Back-fill in order (B's flows, then a1):
    only b3 finds room, min(h4's uplink 1/2, h5's downlink 3/4), so b3 = 1/4 + 1/2.
    """
    decision = decision_on_snapshot(get_scheduler("fifo"), skipped_instance(reference_b=0.5))
    assert {f: r / 8 for f, r in decision.rate_bps.items()} == pytest.approx(EXPECTED_BYTES_PER_S, abs=1e-12)
    decision = decision_on_snapshot(get_scheduler("fifo"), skipped_instance(-0.5))
    rates = {f: r / 8 for f, r in decision.rate_bps.items()}
    assert rates == pytest.approx({"B/b1": 1 / 4, "B/b2": 1 / 4, "B/b3": 3 / 4, "B/b6": 1 / 4, "B/b7": 1 / 4,
                                   "A/a1": 3 / 4}, abs=1e-12)


def test_port_fair_takes_the_smallest_per_link_share_and_redistributes_nothing() -> None:
    """Links a (10 bits/s) and b (4 bits/s); "long" crosses both, "short" b, "other" a.  Two flows on
    each link: long = min(10/2, 4/2) = 2, short = 4/2 = 2, other = 10/2 = 5 (max-min ``fair`` gives
    "other" the 8 that long leaves on a)."""
    a, b = ("x", "y"), ("y", "z")
    flows = [ActiveFlow("long", "g1", (a, b), 10, 0, 0, 0), ActiveFlow("short", "g2", (b,), 10, 0, 0, 0),
             ActiveFlow("other", "g3", (a,), 10, 0, 0, 0)]
    snapshot = Snapshot(0.0, {a: 10.0, b: 4.0}, flows)
    assert decision_on_snapshot(get_scheduler("port-fair"), snapshot).rate_bps == pytest.approx(
        {"long": 2.0, "short": 2.0, "other": 5.0})
    assert decision_on_snapshot(get_scheduler("fair"), snapshot).rate_bps == pytest.approx(
        {"long": 2.0, "short": 2.0, "other": 8.0})


def two_coflows() -> list[Job]:
    """A (a1 h1->h2 4 MB) and B (b1 h5->h2 1 MB, b2 h3->h4 3 MB, b3 h3->h6 3 MB), all starting at 0, on
    1 MB/s ports.  A goes first (Gamma 4 s against B's 6 s on h3's uplink) and fills h2's downlink, so
    MADD skips B (b1 ends there)."""
    a = Job("A")
    a.add(FlowTask("a1", "h1", "h2", 4 * MB, (), "shuffle"))
    b = Job("B")
    b.add(FlowTask("b1", "h5", "h2", 1 * MB, (), "shuffle"))
    b.add(FlowTask("b2", "h3", "h4", 3 * MB, (), "shuffle"))
    b.add(FlowTask("b3", "h3", "h6", 3 * MB, (), "shuffle"))
    return [a, b]


def test_under_the_coflow_rule_the_split_keeps_a_skipped_coflows_ports_busy() -> None:
    """With the split, b2 and b3 share h3's uplink at 0.5 MB/s until A completes at 4 s (1 MB left each);
    then B alone: Gamma 2 s on h3's uplink, b1 raised by back-fill to 1 MB/s; B completes at 6 s.
    Greedy back-fill alone would give b2 all of h3's uplink; b2 would finish at 3 s and the uplink idle
    until A completes at 4 s, then b3's 3 MB alone: B at 7 s."""
    topology = bigswitch(8e6, 6)
    second = 1 / topology.payload_fraction  # links carry frames: every time stretches alike
    run = simulate(topology, two_coflows(), get_scheduler("coflow"), alone_runs=False, rescheduling="coflow")
    assert run.jobs["A"].completion_s / second == pytest.approx(4.0)
    assert run.jobs["B"].completion_s / second == pytest.approx(6.0)
    finish = {qid: task.finish_s / second for qid, task in run.tasks.items()}
    assert finish == pytest.approx({"A/a1": 4.0, "B/b1": 5.0, "B/b2": 6.0, "B/b3": 6.0})


def race_on_one_downlink(late: str, late_mb: int, late_at_s: float, names: tuple[str, ...]) -> dict:
    """CCT per scheduler (coflow rule; seconds of payload at 1 MB/s) of two one-flow coflows into h2: "big"
    (4 MB from h1) at 0 and ``late`` (``late_mb`` MB from h3) at ``late_at_s``."""
    topology = bigswitch(8e6, 3)
    second = 1 / topology.payload_fraction  # links carry frames: every time stretches alike
    cct = {}
    for name in names:
        big, other = Job("big"), Job(late, arrival_s=late_at_s * second)
        big.add(FlowTask("f", "h1", "h2", 4 * MB, (), "shuffle"))
        other.add(FlowTask("f", "h3", "h2", late_mb * MB, (), "shuffle"))
        run = simulate(topology, [big, other], get_scheduler(name), alone_runs=False, rescheduling="coflow")
        cct[name] = {job: result.completion_s / second for job, result in run.jobs.items()}
    return cct


def test_fifo_serves_coflows_in_arrival_order_coflow_smallest_bottleneck_first() -> None:
    """One downlink (h2's) of 1 MB/s: "big" (4 MB from h1) arrives at 0, "small" (1 MB from h3) at 1 s.
    FIFO keeps big first (small waits: its only link is full, so no split either): big completes at
    4 s, small at 5 s (CCT 4 s).  coflow puts small first at 1 s (1 s against big's 3 s left): small
    completes at 2 s (CCT 1 s), big at 5 s."""
    cct = race_on_one_downlink("small", 1, 1.0, ("fifo", "coflow"))
    assert cct["fifo"] == pytest.approx({"big": 4.0, "small": 4.0})
    assert cct["coflow"] == pytest.approx({"big": 5.0, "small": 1.0})


def test_coflow_static_keeps_the_key_a_coflow_had_when_admitted() -> None:
    """One downlink (h2's) of 1 MB/s: "big" (4 MB from h1) at 0, "mid" (2 MB from h3) at 3 s, when big
    has 1 MB left.  coflow orders on the bytes left (big's 1 s before mid's 2 s): big completes at 4 s,
    mid at 6 s (CCT 3 s).  coflow-static, like CoflowSim, keeps big's admission key (4 s): mid first,
    complete at 5 s (CCT 2 s), big at 6 s."""
    cct = race_on_one_downlink("mid", 2, 3.0, ("coflow", "coflow-static"))
    assert cct["coflow"] == pytest.approx({"big": 4.0, "mid": 3.0})
    assert cct["coflow-static"] == pytest.approx({"big": 6.0, "mid": 2.0})


def test_coflow_static_keeps_the_key_on_the_controllers_live_table() -> None:
    """The controller's table outlives a decision, so the key fixed at the first one is kept (the same
    two coflows as above, as the registry would feed them); a table built per snapshot has no memory."""
    link = ("h2-port", "h2")
    table = LiveFlowTable({link: 8e6})
    static, dynamic = get_scheduler("coflow-static"), get_scheduler("coflow")

    def first(scheduler, now_s: float) -> str:
        view = table.view(now_s, scheduler.active_order)
        rank = view.decision_of(scheduler.decide(view)).rank
        return min(rank, key=rank.get)

    table.add("big/f", "big", [link], 0.0, 1.0, 4 * MB)
    table.set_reference("big", 0.0)
    assert first(static, 0.0) == "big/f"
    table.set_remaining("big/f", 1 * MB)
    table.add("mid/f", "mid", [link], 0.0, 1.0, 2 * MB)
    table.set_reference("mid", 3.0)
    assert first(dynamic, 3.0) == "big/f"
    assert first(static, 3.0) == "mid/f"
    snapshot = Snapshot(3.0, {link: 8e6}, [ActiveFlow("big/f", "big", (link,), 1 * MB, 0.0, 0.0, 0.0),
                                          ActiveFlow("mid/f", "mid", (link,), 2 * MB, 3.0, 0.0, 3.0)])
    rank = decision_on_snapshot(static, snapshot).rank
    assert min(rank, key=rank.get) == "big/f"
