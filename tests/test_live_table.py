"""The registry's live flow table decides exactly as a decision on its snapshot does, whatever happened.

The controller decides on ``Registry.scheduler_view()`` (its flow table, kept current by every event)
instead of converting a ``Snapshot`` each round.  These tests drive a real registry through random
sequences of declarations, starts (own 5-tuple or channel), progress reports, switch-counter readings,
finishes, aborted jobs, link failures and repairs (re-routing), and after every event compare the
table's decision with the scheduler's decision on ``registry.snapshot(now)`` (its declared flows
included): every rate and every rank equal, for every scheduler that decides on the flows alone
(echelon-varys in every group ordering), compiled and interpreted.  Enough events happen for dead
rows to be compacted and labels to be renumbered.  What the registry keeps for the non-clairvoyant and
arrival-ordered policies (first starts, delivered bytes per group and per flow, the slowest link) is
checked after every event against the same figures recomputed from the flow records.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from controller.registry import Registry, _RegistrySource
from controller.service import SchedulingService
from controller.store import open_registry
from echelonflow.schedulers import SCHEDULERS, get_scheduler, kernels, live
from echelonflow.schedulers.base import FlowEvent
from echelonflow.schedulers.echelon import ORDERINGS, EchelonVarysScheduler
from echelonflow.schedulers.live import COMPACT_SLACK, GROUP_SLACK, LiveFlowTable, OrderLabels
from echelonflow.schedulers.view import decision_on_snapshot
from echelonflow.topology import fattree
from tests.helpers import RecordingSink

ROOT = Path(__file__).resolve().parent.parent


#: Not compared with snapshots: coflow-static fixes a group's key the first time it orders the group,
#: in the table that lives as long as it does (``FlowTable.admission_key``); a snapshot's table is new.
REMEMBERS_GROUPS = ("coflow-static",)


def schedulers():
    out = [get_scheduler(name) for name in SCHEDULERS if name not in ("echelon-varys", *REMEMBERS_GROUPS)]
    return out + [EchelonVarysScheduler(order_by=o) for o in ORDERINGS]


class LearningEstimator:
    """What a learning policy expects a flow of undeclared size to have left: changes as it learns."""

    def __init__(self) -> None:
        self.expected_bytes = 0.0  # 0: no idea yet

    def estimate_remaining_bytes(self, flow_id: str, sent_bytes: float) -> float | None:
        return None if self.expected_bytes == 0 else max(0.0, self.expected_bytes - sent_bytes)


def random_run(seed: int, events: int, check: Callable[[Registry, float, str], list[str]] | None = None,
               reg: Registry | None = None) -> list[str]:
    """Drive a registry (a fresh one on a k=4 fat-tree by default) through ``events`` random events,
    calling ``check`` (default :func:`compare`) after each; the mismatches found (empty: none)."""
    rng = random.Random(seed)
    reg = reg if reg is not None else Registry(fattree(20e6, 4))
    topo = reg.topology
    reg.estimator = estimator = LearningEstimator()
    hosts = topo.hosts
    now = 0.0
    port = 10000
    declared: list[tuple[str, str]] = []  # (job, flow) not started yet
    mismatches: list[str] = []
    for job in range(3):
        reg.add_job(f"j{job}", rng.choice([1.0, 2.0, 0.5]))
    for cid in range(4):
        src, dst = rng.sample(hosts, 2)
        reg.channels.add(f"c{cid}", src, dst, 30000 + cid, 5000)
    n_groups = 0
    for step in range(events):
        now += rng.uniform(0.0, 0.05)
        active = reg.active_keys()
        kind = rng.random()
        if kind < 0.15 or not declared:
            job = f"j{rng.randrange(3)}"
            if reg.jobs[job].aborted_s is not None:  # aborted for good: its retry is a new job
                job = f"{job}r{step}"
                reg.add_job(job, rng.choice([1.0, 2.0, 0.5]))
            ech = f"e{n_groups}"
            n_groups += 1
            coflow = rng.random() < 0.3
            flows = []
            for i in range(rng.randint(1, 6)):
                src, dst = rng.sample(hosts, 2)
                spec = {"flow_id": f"{ech}f{rng.randrange(10**6)}-{i}", "src": src, "dst": dst,
                        "offset_s": 0.0 if coflow else rng.choice([0.0, 0.1, 0.1, 0.25, rng.uniform(0, 1)])}
                if rng.random() < 0.9:
                    spec["size_bytes"] = rng.randint(1, 5_000_000)
                flows.append(spec)
            reg.add_echelon(job, ech, flows=flows)
            declared += [(job, f["flow_id"]) for f in flows]
        elif kind < 0.45:
            job, fid = declared.pop(rng.randrange(len(declared)))
            flow = reg.flows[f"{job}/{fid}"]
            idle = [c for c in reg.channels.values() if (c.src, c.dst) == (flow.src, flow.dst)
                    and reg.channels.flow_on(c.channel_id) is None]
            if idle and rng.random() < 0.7:
                reg.flow_started(job, fid, None, None, now, channel_id=idle[0].channel_id)
            else:
                port += 1
                reg.flow_started(job, fid, port, 5201, now)
        elif kind < 0.6 and active:
            flow = reg.flows[rng.choice(active)]
            cap = flow.size_bytes or 10_000_000
            reg.flow_progress(flow.job_id, flow.flow_id, min(cap, flow.bytes_sent + rng.randint(0, cap // 2)))
        elif kind < 0.7 and active:
            key = rng.choice(active)
            reg.observe_bytes(key, rng.uniform(0, 6_000_000))
        elif kind < 0.85 and active:
            flow = reg.flows[rng.choice(active)]
            sent = flow.bytes_sent + 1
            if flow.size_bytes is not None:
                sent = None if rng.random() < 0.5 else min(flow.size_bytes, sent)
            reg.flow_finished(flow.job_id, flow.flow_id, now, sent)
        elif kind < 0.88:
            job = rng.choice(list(reg.jobs))
            reg.abort_job(job, now)
            declared = [(j, f) for j, f in declared if j != job]
        elif kind < 0.91:
            estimator.expected_bytes = rng.choice([0.0, rng.uniform(1e5, 5e6)])
        elif kind < 0.95:
            a, b = rng.choice([e for e in topo.graph.edges if not e[0].startswith("h")
                               and not e[1].startswith("h")])
            reg.links.set_link(a, b, rng.random() < 0.4)
            reg.repin()
        mismatches += (check or compare)(reg, now, f"seed {seed} step {step}")
    return mismatches


def compare(reg: Registry, now: float, where: str) -> list[str]:
    out = []
    for sched in schedulers():
        snapshot_decision = decision_on_snapshot(sched, reg.snapshot(now))
        view = reg.scheduler_view(now, sched.active_order)
        table_decision = view.decision_of(sched.decide(view))
        for part in ("rate_bps", "rank"):
            want, got = getattr(snapshot_decision, part), getattr(table_decision, part)
            if want != got:
                out.append(f"{where} {sched.name}/{getattr(sched, 'order_by', '')} {part}: "
                           f"snapshot {want} table {got}")
    return out


@pytest.mark.parametrize("seed", range(6))
def test_table_decides_like_the_snapshot_after_every_event(seed: int) -> None:
    assert random_run(seed, 250) == []


def from_records(reg: Registry, view) -> tuple[list, list, list, float]:
    """Each active group's first start and delivered wire bytes, each active flow's delivered wire
    bytes and the slowest link on their paths, recomputed from the flow records as a snapshot of
    them would give them: per group, summed over its started flows in declaration order."""
    starts, attained = [], []
    ids = view.flow_ids(view.active)
    for key in dict.fromkeys(reg.flows[fid].echelon_key for fid in ids):
        started = [f for f in reg.flows_of(key) if f.start_s is not None]
        starts.append(min(f.start_s for f in started))
        attained.append(reg.topology.wire_bytes(sum(reg.bytes_done(f) for f in started)))
    flows = [reg.flows[fid] for fid in ids]
    sent = [reg.topology.wire_bytes(reg.bytes_done(f)) for f in flows]
    capacity = reg.topology.capacity_bps()
    slowest = min((capacity[link] for f in flows for link in reg._paths[f.key][1]), default=float("inf"))
    return starts, attained, sent, slowest


def kept_inputs_are_current(reg: Registry, now: float, where: str) -> list[str]:
    view = reg.scheduler_view(now, "group")
    groups = _RegistrySource(reg).groups(view, seen=True)
    kept = (groups.start_s, groups.attained_bytes, kernels.to_list(groups.flow_sent_bytes, len(view.active)),
            groups.slowest_bps)
    want = from_records(reg, view)
    names = ("first starts", "group bytes", "flow bytes", "slowest link")
    return [f"{where}: {name} kept {got} recomputed {expected}"
            for name, got, expected in zip(names, kept, want) if got != expected]


@pytest.mark.parametrize("seed", range(4))
def test_kept_group_inputs_follow_every_event(seed: int) -> None:
    """Starts, progress reports, counter readings, finishes, aborts and re-routes all reach the group
    inputs the registry keeps: after every event they equal the ones the records give."""
    rounds = []

    def check(reg: Registry, now: float, where: str) -> list[str]:
        rounds.append(len(reg.active_keys()))
        return kept_inputs_are_current(reg, now, where)

    assert random_run(100 + seed, 300, check) == []
    assert max(rounds) > 5


def test_kept_group_inputs_count_progress_finishes_and_counters() -> None:
    """One group by hand: what a progress report, a counter reading above it and a finish change."""
    reg = Registry(fattree(20e6, 4))
    reg.add_job("j", 1.0)
    reg.add_echelon("j", "e", flows=[{"flow_id": f"f{i}", "src": "h1", "dst": f"h{5 + i}",
                                      "size_bytes": 10**6} for i in range(3)])
    reg.flow_started("j", "f1", 9000, 5201, 2.0)
    reg.flow_started("j", "f0", 9001, 5201, 3.0)
    wire = reg.topology.wire_bytes
    assert reg.group_seen("j/e") == (0.0, 2.0)
    reg.flow_progress("j", "f0", 1000)
    reg.observe_bytes("j/f1", 2500.5)
    assert reg.group_seen("j/e") == (wire(1000.0 + 2500.5), 2.0)
    reg.flow_finished("j", "f1", 4.0, 2000)  # the agent's count replaces the counters'
    assert reg.group_seen("j/e") == (wire(1000.0 + 2000.0), 2.0)
    view = reg.scheduler_view(5.0, "group")
    groups = _RegistrySource(reg).groups(view, seen=True)
    assert (groups.start_s, groups.attained_bytes) == ([2.0], [wire(3000.0)])
    assert kernels.to_list(groups.flow_sent_bytes, 1) == [wire(1000.0)]
    assert kept_inputs_are_current(reg, 5.0, "by hand") == []


@pytest.mark.parametrize("name", [name for name in SCHEDULERS if name not in REMEMBERS_GROUPS])
def test_service_enforces_the_same_on_the_table_as_on_snapshots(name: str) -> None:
    """Two services on one registry, one deciding on the live table, one (its scheduler's ``decide``
    replaced on the instance by a decision on the view's snapshot) on snapshots: after every event the
    same queues, and the same installs, updates and removals pushed to the switches."""
    reg = Registry(fattree(20e6, 4))
    now = [0.0]
    table_port, snapshot_port = RecordingSink(), RecordingSink()
    by_table = SchedulingService(reg, table_port, now=lambda: now[0])
    by_snapshot = SchedulingService(reg, snapshot_port, now=lambda: now[0])
    by_snapshot.scheduler = get_scheduler(name)
    on_snapshots = get_scheduler(name)
    by_snapshot.scheduler.decide = lambda view: view.allocation_of(decision_on_snapshot(on_snapshots,
                                                                                   view.snapshot()))
    by_table.scheduler = get_scheduler(name)
    rounds = []

    def check(registry: Registry, at_s: float, where: str) -> list[str]:
        now[0] = at_s
        rounds.append(by_table.reschedule("test").active_flows)
        by_snapshot.reschedule("test")
        out = []
        if by_table.state.queue != by_snapshot.state.queue:
            out.append(f"{where}: queues {by_table.state.queue} != {by_snapshot.state.queue}")
        if table_port.calls != snapshot_port.calls:
            out.append(f"{where}: pushed {table_port.calls} != {snapshot_port.calls}")
        table_port.calls, snapshot_port.calls = [], []
        return out

    assert random_run(21, 150, check, reg) == []
    assert max(rounds) > 5  # rounds with several active flows were compared


def test_a_registry_reloaded_from_its_store_has_the_same_table(tmp_path: Path) -> None:
    """After a controller restart the table is rebuilt from the stored flows (channels included) and
    decides as the snapshot does."""
    path = str(tmp_path / "registry.sqlite")
    reg = open_registry(fattree(20e6, 4), path)
    seen = []

    def stop_when_busy(registry: Registry, at_s: float, where: str) -> list[str]:
        seen.append(len(registry.active_keys()))
        return []

    random_run(5, 120, stop_when_busy, reg)
    assert seen[-1] > 3
    again = open_registry(fattree(20e6, 4), path)
    table = again.scheduler_view(10.0, "id")
    assert set(table.flow_ids(table.active)) == set(reg.active_keys())
    assert compare(again, 10.0, "reloaded") == []


class KeptOnline:
    """A check for :func:`random_run`: one ``echelon-online`` decides on the registry after every event,
    keeping its template per flow number from one decision to the next (``FlowTable.rows``), and
    learns sizes as it goes (a finish reported for some active flows: an id is its own template); a
    fresh one told the same decides on the same view with nothing kept.  Both must give every rate and
    rank equal."""

    def __init__(self, seed: int) -> None:
        self.kept = get_scheduler("echelon-online")
        self.rng = random.Random(seed)
        self.decisions = 0

    def __call__(self, reg: Registry, now: float, where: str) -> list[str]:
        for key in reg.active_keys():
            if self.rng.random() < 0.2:
                flow = reg.flows[key]
                self.kept.observe(FlowEvent("finish", key, f"{flow.job_id}/{flow.echelon_id}", flow.src,
                                            flow.dst, now, self.rng.uniform(1e4, 6e6)))
        view = reg.scheduler_view(now, self.kept.active_order)
        got = view.decision_of(self.kept.decide(view))
        fresh = get_scheduler("echelon-online")
        fresh.learned, fresh._changed = dict(self.kept.learned), set(self.kept.learned)
        fresh.group_start_s, fresh.flow_start_s = dict(self.kept.group_start_s), dict(self.kept.flow_start_s)
        view = reg.scheduler_view(now, fresh.active_order)
        want = view.decision_of(fresh.decide(view))
        self.decisions += bool(len(view.active))
        return [f"{where} echelon-online {part}: fresh {getattr(want, part)} kept {getattr(got, part)}"
                for part in ("rate_bps", "rank") if getattr(want, part) != getattr(got, part)]


@pytest.mark.parametrize("seed", range(3))
def test_echelon_online_keeps_its_templates_through_new_rows_reroutes_and_compaction(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows added, re-routed (a new row) and compacted (renumbered: a new ``rows`` token) between
    decisions: what ``echelon-online`` keeps per flow number decides as a fresh instance does."""
    monkeypatch.setattr(live, "COMPACT_SLACK", 2)  # compact after a few finishes
    check = KeptOnline(seed)
    reg = Registry(fattree(20e6, 4))
    tokens = [reg._table.rows]

    def counted(reg: Registry, now: float, where: str) -> list[str]:
        if reg._table.rows is not tokens[-1]:
            tokens.append(reg._table.rows)
        return check(reg, now, where)

    assert random_run(seed, 400, counted, reg) == []
    assert check.decisions > 200 and len(tokens) >= 3  # it decided, across compactions


def test_dead_rows_are_compacted_and_decisions_stay_equal() -> None:
    """Many more finishes than live flows (and hundreds of groups): the table grows its arrays,
    compacts, and still decides like the snapshot."""
    table_rows = []
    rng = random.Random(7)
    topo = fattree(20e6, 4)
    reg = Registry(topo)
    reg.add_job("j", 1.0)
    n = 10 * (3 * COMPACT_SLACK // 10)
    for g in range(n // 10):
        reg.add_echelon("j", f"e{g}", flows=[
            {"flow_id": f"f{i:05d}", "src": "h1", "dst": f"h{2 + i % 15}", "size_bytes": 1000 + i,
             "offset_s": rng.choice([0.0, 0.5])} for i in range(10 * g, 10 * g + 10)])
    for i in range(n):
        reg.flow_started("j", f"f{i:05d}", 10000 + i % 50000, 5201 + i // 50000, 1.0)
        if i >= 20:
            reg.flow_finished("j", f"f{i - 20:05d}", 1.5)
        live = len(reg._table.row_of)  # declared and active rows
        table_rows.append(len(reg._table.row_ids) - 2 * live)
    assert max(table_rows) < COMPACT_SLACK + 2  # compacted: never more dead rows than live ones + slack
    assert len(reg._table) == 20
    assert compare(reg, 2.0, "after compaction") == []


def test_order_labels_sort_like_their_strings_through_renumbering() -> None:
    labels = OrderLabels()
    rng = random.Random(3)
    renumbered = 0
    keys: set[str] = set()
    # "k1", then "k0" < "k09" < "k099" < ... each between the last one and "k1": halves the gap each time
    squeeze = ["k1"] + ["k0" + "9" * i for i in range(40)]
    for step in range(3000):
        if step >= len(squeeze) and rng.random() < 0.3:
            key = rng.choice(sorted(keys))
            keys.discard(key)
            labels.remove(key)
            continue
        key = squeeze[step] if step < len(squeeze) else f"k{rng.randrange(10**6)}"
        if key in keys:
            continue
        keys.add(key)
        renumbered += labels.add(key)
        assert labels.keys == sorted(keys)
        assert labels.labels == sorted(labels.labels) and len(set(labels.labels)) == len(keys)
    assert renumbered > 0  # the renumbering path ran


def test_a_flow_cannot_enter_the_table_twice() -> None:
    table = LiveFlowTable({("a", "b"): 1e9})
    table.add("f", "g", [("a", "b")], 0.0, 1.0, 10.0)
    with pytest.raises(ValueError, match="already"):
        table.add("f", "g", [("a", "b")], 0.0, 1.0, 10.0)


# Same comparison with numba made unimportable: the table's lists and the interpreted kernels.
_INTERPRETED = """
import json, sys
sys.modules["numba"] = None
sys.path.insert(0, {root!r})
from echelonflow.schedulers import kernels
assert not kernels.HAVE_NUMBA
from tests.test_live_table import random_run
print(json.dumps(random_run(11, 200) + random_run(12, 200)))
"""


@pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="this venv runs interpreted kernels already")
def test_interpreted_table_decides_like_the_snapshot() -> None:
    child = subprocess.run([sys.executable, "-c", _INTERPRETED.format(root=str(ROOT))], capture_output=True,
                           text=True, timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert child.returncode == 0, child.stderr[-2000:]
    assert json.loads(child.stdout) == []


def test_groups_of_forgotten_jobs_leave_the_table_and_decisions_stay_equal() -> None:
    """Thousands of jobs come and go (each done job leaves memory, ``Registry.expire``) while a few stay
    live: the table's group slots follow the live groups, not every group there ever was, and it still
    decides like the snapshot."""
    from controller.retention import Retention

    rng = random.Random(11)
    reg = Registry(fattree(20e6, 4), retention=Retention(memory_jobs=3, memory_s=1e9, store_s=1e9))
    reg.add_job("live", 1.0)
    reg.add_echelon("live", "e", flows=[{"flow_id": f"l{i}", "src": "h1", "dst": f"h{9 + i}",
                                          "size_bytes": 10**6, "offset_s": 0.1 * i} for i in range(3)])
    reg.flow_started("live", "l0", 9000, 5201, 0.5)
    slots = []
    for j in range(3 * COMPACT_SLACK):
        job = f"j{j}"
        reg.add_job(job, 1.0)
        reg.add_echelon(job, "e", flows=[{"flow_id": f"f{i}", "src": f"h{1 + i}", "dst": "h16",
                                          "size_bytes": 1000 + rng.randrange(1000)} for i in range(2)])
        for i in range(2):
            reg.flow_started(job, f"f{i}", 10000 + i, 5201, 1.0 + j)
        for i in range(2):
            reg.flow_finished(job, f"f{i}", 1.5 + j)
        reg.expire(2.0 + j)
        slots.append(len(reg._table.slot_ids))
    assert list(reg.jobs)[0] == "live" and len(reg.jobs) == 4
    assert max(slots) < 2 * 5 + GROUP_SLACK + 2  # dropped slots are swept: bounded by the live ones
    assert compare(reg, 3.0 * COMPACT_SLACK, "after many forgotten jobs") == []
    reg.flow_started("live", "l1", 9001, 5201, 3.0 * COMPACT_SLACK)
    assert compare(reg, 3.0 * COMPACT_SLACK + 1, "a live group after the sweep") == []
