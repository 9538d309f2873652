"""The exact rule's cost: FB2010 prefixes (offline or with the trace's arrivals) and multi-tenant fat-trees.

Run: ``.venv/bin/python benchmarks/exact_rule_scaling.py [--coflows N]... [--own-arrivals]
[--multitenant K]... [--scheduler NAME]... [--interval-ms MS]... [--held-order] [--order-changes]
[--rate-changes] [--reuse] [--checks] [--progress-s S]``.

* ``--coflows N``: the first N coflows of FB2010 (0: the whole hour), every arrival at 0 (offline)
  unless ``--own-arrivals`` keeps the trace's.  Default when nothing is asked: 100 coflows, offline.
* ``--multitenant K``: the scheduler matrix's heaviest multi-tenant cell on a k=K fat-tree
  (``benchmarks/matrix/multitenant-k8.json`` and ``-k16.json``: 12 jobs on k=8, 48 on k=16, 2 iterations,
  load 1.0, 1:1, seed 1).

Schedulers (default coflow, sincronia, echelon) run in this process under the exact rule (a decision at
every flow start and finish), without alone runs and without the decision checks (``--checks``: with them,
as ``simulate()`` and the matrix run by default), after an untimed fig2 run that loads the compiled
kernels.  ``--interval-ms`` adds runs under a decision interval
(``simulator.engine``, "Decision interval"; 0 is the exact rule, the default) and, where the exact run of
the same workload and scheduler came first, their error against it: average and 99th-percentile
completion time and the largest error of one job (coflow).  ``--held-order`` adds, for the schedulers
that only order groups (``sincronia``, ``fifo``, ``aalo``, ...), a run under the exact rule whose group
order is computed only when the decision's set of groups changes (as Varys and Sincronia re-order online
at coflow arrivals and departures) and held between, with its error against the exact run.
``--order-changes`` counts, on every exact run, the decisions whose ranking puts the groups it shares with
the previous decision in another order (and of those, how many had the very same groups): how much an
order kept between group events would miss. ``--rate-changes`` counts, on every exact run, the active
flows whose rate a decision changes from the previous one's (:class:`RateChanges`): a bound on what an
incremental decision could save. ``--reuse`` counts, on every exact run of a policy that ranks its groups,
the ranked flows in the groups an exact shortcut could skip (:class:`GroupReuse`): those served before the
first group that changed, and those of groups where nothing moved. Prints per run its rule (the decision
interval in ms, 0 for the exact rule, or ``held``), the wall time and CPU time (``time.process_time``: on
a shared machine the steadier of the two), the simulator's decisions (and those skipped as changing
nothing), the flows, the average and 99th-percentile completion time (CCT for coflows, JCT for jobs) and
the process's peak resident memory so far. ``--progress-s`` prints a running simulation's clock every S
seconds of wall time, to see how far a run that is cut off got.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from echelonflow import echelon as echelon_mod  # noqa: E402
from echelonflow.errors import UserError  # noqa: E402
from echelonflow.scenario import Scenario, load_scenario, parse_scenario, resolve  # noqa: E402
from echelonflow.schedulers import check_names, get_scheduler  # noqa: E402
from echelonflow.schedulers.base import Scheduler  # noqa: E402
from echelonflow.schedulers.priority import GroupOrderScheduler  # noqa: E402
from echelonflow.schedulers.view import Allocation, FlowView, GroupView  # noqa: E402
from simulator import engine  # noqa: E402

#: The matrix's multi-tenant cell per fat-tree k: (jobs, iterations), at load 1.0, 1:1, seed 1.
MULTITENANT = {8: (12, 2), 16: (48, 2)}


def multitenant(k: int) -> Scenario:
    """The bundled multitenant-k8 scenario redrawn as the matrix's heaviest cell on a k=``k`` fat-tree."""
    path = resolve("multitenant-k8")
    document = json.loads(path.read_text())
    jobs, iterations = MULTITENANT[k]
    document["topology"].update(k=k, oversubscription=1)
    document["jobs"][0]["multi_tenant"].update(jobs=jobs, iterations=iterations, load=1.0, seed=1)
    return parse_scenario(document, path)


class OrderChanges:
    """Wraps a scheduler's ``decide`` to count the decisions whose group order differs from the last one's
    on the groups both have (``changed``), and those among them with the same groups (``same_groups``)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.changed = self.same_groups = 0
        self._last: list[int] = []
        self._decide = scheduler.decide
        scheduler.decide = self.decide  # type: ignore[method-assign]

    def decide(self, view: FlowView) -> Allocation:
        allocation = self._decide(view)
        ranked = np.asarray(allocation.ranked[:allocation.count], dtype=np.int64)
        groups = list(dict.fromkeys(view.table.arrays().group[ranked].tolist()))
        shared = set(groups) & set(self._last)
        if [g for g in groups if g in shared] != [g for g in self._last if g in shared]:
            self.changed += 1
            self.same_groups += set(groups) == set(self._last)
        self._last = groups
        return allocation


class RateChanges:
    """Wraps a scheduler's ``decide`` to count, over every decision, the active flows (``active``), those
    with a positive rate (``positive``), and those whose rate is not the one the previous decision gave
    them: to the last bit (``changed_bits``) and by more than ``RATE_RTOL`` relative
    (``changed``; a flow new to the decision counts as changed in both).  What an incremental decision
    could skip is bounded by the flows whose rates stay: it must still write every changed one."""

    RATE_RTOL = 1e-9

    def __init__(self, scheduler: Scheduler) -> None:
        self.decisions = self.active = self.positive = self.changed_bits = self.changed = 0
        self._last = np.zeros(0)
        self._decide = scheduler.decide
        scheduler.decide = self.decide  # type: ignore[method-assign]

    def decide(self, view: FlowView) -> Allocation:
        allocation = self._decide(view)
        active = np.asarray(view.active, dtype=np.int64)
        rate = np.asarray(view.rate, dtype=float)
        if len(self._last) != len(rate):
            self._last = np.full(len(rate), np.nan)
        new, old = rate[active], self._last[active]
        self.decisions += 1
        self.active += len(active)
        self.positive += int(np.count_nonzero(new > 0))
        self.changed_bits += int(np.count_nonzero(~(old == new)))  # NaN (new to the decision) counts
        with np.errstate(invalid="ignore"):
            same = np.abs(old - new) <= self.RATE_RTOL * np.maximum(np.abs(old), np.abs(new))
        self.changed += int(np.count_nonzero(~same))
        self._last = np.full(len(rate), np.nan)
        self._last[active] = new
        return allocation

    def summary(self) -> str:
        share = max(self.active, 1)
        return (f"rates changed at {self.changed / share:.1%} of {self.active:,} flow-decisions "
                f"({self.changed_bits / share:.1%} in the last bit), positive {self.positive / share:.1%}")


class GroupReuse:
    """Wraps a scheduler's ``decide`` to count what exact shortcuts could skip, in flows of the groups a
    decision ranks (its ranking lists each group's flows together, groups in service order):

    * ``prefix``: the flows of the groups before the first place where the decision's sequence of groups
      (each with the same flows) differs from the previous decision's.  Served with strict priority
      those groups get the same rates as before, so an exact decision can start its serving there
      (issue 31's "recompute from the first affected position of the order"; ``priority.KeptClasses``
      does, for the policies served class by class).
    * ``still``: the flows of the groups that had the same flows in the previous decision and none of
      them a rate there, so nothing of theirs moved since: their bytes left, and so their demands,
      are what they were (a kept per-group sum could skip them).
    * ``resumable``: where the first changed group is the same group at the same place, only with
      flows gone, its flows whose previous rate is above 0 and below the least previous rate of those
      gone.  Progressive filling freezes flows level by level, lowest first, and a gone flow froze
      at the first step that picked one of its links: the steps before it are the same without it, so
      a filling resumed there would keep these flows' rates.  Counted among the flows with a rate.

    ``ranked``: all the flows the decisions ranked, the base of ``prefix`` and ``still``; ``rated``:
    those with a rate, the base of ``rated_prefix`` (``prefix``'s flows with a rate) and
    ``resumable``."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.ranked = self.prefix = self.still = 0
        self.rated = self.rated_prefix = self.resumable = 0
        self._last: list[tuple[int, int, int]] = []  # (group, flows, sum of flow numbers) in order
        self._last_ranked = np.zeros(0, dtype=np.int64)
        self._last_starts = np.zeros(0, dtype=np.int64)
        self._rate = np.zeros(0)  # per flow number: its rate in the previous decision (0: none)
        self._decide = scheduler.decide
        scheduler.decide = self.decide  # type: ignore[method-assign]

    def decide(self, view: FlowView) -> Allocation:
        allocation = self._decide(view)
        ranked = np.asarray(allocation.ranked[:allocation.count], dtype=np.int64)
        rate = np.asarray(view.rate, dtype=float)
        if len(self._rate) != len(rate):
            self._rate = np.zeros(len(rate))
        before_rate = self._rate[ranked]
        slots = view.table.arrays().group[ranked]
        starts = np.flatnonzero(np.r_[True, slots[1:] != slots[:-1]]) if len(ranked) else np.zeros(0, int)
        sizes = np.diff(np.r_[starts, len(ranked)])
        sums = np.add.reduceat(ranked, starts) if len(ranked) else np.zeros(0, int)
        moved = np.add.reduceat((before_rate > 0).astype(np.int64), starts) if len(ranked) else sizes
        sequence = list(zip(slots[starts].tolist(), sizes.tolist(), sums.tolist()))
        before = {entry[0]: entry for entry in self._last}
        same_place = 0
        while (same_place < min(len(sequence), len(self._last))
               and sequence[same_place] == self._last[same_place]):
            same_place += 1
        has_rate = rate[ranked] > 0
        first_changed = int(starts[same_place]) if same_place < len(sequence) else len(ranked)
        self.ranked += len(ranked)
        self.prefix += first_changed
        self.rated += int(np.count_nonzero(has_rate))
        self.rated_prefix += int(np.count_nonzero(has_rate[:first_changed]))
        self.still += sum(size for entry, size, m in zip(sequence, sizes.tolist(), moved.tolist())
                          if m == 0 and before.get(entry[0]) == entry)
        shared = same_place < min(len(sequence), len(self._last))
        if shared and sequence[same_place][0] == self._last[same_place][0]:
            self.resumable += self._resumable(ranked[first_changed:first_changed + sizes[same_place]],
                                              same_place)
        self._last, self._last_ranked, self._last_starts = sequence, ranked, starts
        self._rate = np.zeros(len(rate))
        self._rate[ranked] = rate[ranked]
        return allocation

    def _resumable(self, flows: np.ndarray, place: int) -> int:
        """Of ``flows`` (the group at ``place``, whose flows changed), those a resumed filling keeps:
        none if flows joined it; else those with a previous rate above 0 and below every gone one's."""
        first = self._last_starts[place]
        old = self._last_ranked[first:first + self._last[place][1]]
        if not np.isin(flows, old).all():
            return 0
        gone = old[~np.isin(old, flows)]
        if not len(gone):
            return 0
        least = self._rate[gone].min()
        kept = self._rate[flows]
        return int(np.count_nonzero((kept > 0) & (kept < least)))

    def summary(self) -> str:
        share, rated = max(self.ranked, 1), max(self.rated, 1)
        return (f"of {self.ranked:,} ranked flow-decisions: {self.prefix / share:.1%} before the first "
                f"changed group, {self.still / share:.1%} in groups with no flow moved; of the "
                f"{self.rated:,} with a rate: {self.rated_prefix / rated:.1%} before the first changed "
                f"group, {self.resumable / rated:.1%} frozen before its first gone flow")


def hold_order(scheduler: GroupOrderScheduler) -> None:
    """Make ``scheduler`` compute its group order only when a decision's groups differ from those the
    order was computed for, and reuse it otherwise."""
    compute = scheduler.order
    held: dict[str, Any] = {"heads": None, "order": None}

    def order(view: FlowView, groups: GroupView) -> list[int]:
        heads = tuple(groups.heads)
        if heads != held["heads"]:
            held.update(heads=heads, order=compute(view, groups))
        return held["order"]

    scheduler.order = order  # type: ignore[method-assign]


def workloads(args: argparse.Namespace) -> list[tuple[str, Scenario, list]]:
    """(label, scenario, jobs) for every run asked for."""
    out = []
    if args.coflows or not args.multitenant:
        fb2010 = load_scenario("fb2010")
        for count in args.coflows or [100]:
            chosen = fb2010.jobs[:count] if count > 0 else fb2010.jobs
            if args.own_arrivals:
                jobs, how = list(chosen), "arrivals"
            else:
                jobs, how = [dataclasses.replace(job, arrival_s=0.0) for job in chosen], "offline"
            out.append((f"fb2010[:{len(jobs)}] {how}", fb2010, jobs))
    for k in args.multitenant or []:
        scenario = multitenant(k)
        out.append((f"multitenant k={k}", scenario, list(scenario.jobs)))
    return out


def parse_args() -> argparse.Namespace:
    """The command line, checked: one line naming a bad argument, before any run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coflows", type=int, action="append", default=None,
                        help="the first N coflows of FB2010 (0: all of them); repeatable")
    parser.add_argument("--own-arrivals", action="store_true",
                        help="keep FB2010's arrival times instead of setting every arrival to 0")
    parser.add_argument("--multitenant", type=int, action="append", choices=sorted(MULTITENANT),
                        help="the matrix's multi-tenant cell on a k=K fat-tree; repeatable")
    parser.add_argument("--scheduler", action="append", default=None)
    parser.add_argument("--interval-ms", type=float, action="append", default=None,
                        help="decision interval in ms (0: the exact rule, the default); repeatable")
    parser.add_argument("--held-order", action="store_true",
                        help="also run each group-ordering scheduler with its order held between "
                             "group events")
    parser.add_argument("--order-changes", action="store_true",
                        help="count the exact runs' decisions that re-order the groups they share with "
                             "the decision before")
    parser.add_argument("--rate-changes", action="store_true",
                        help="count, on every exact run, the active flows whose rate differs from the "
                             "previous decision's (what an incremental decision would have to rewrite)")
    parser.add_argument("--reuse", action="store_true",
                        help="count, on every exact run, the ranked flows before the first changed group "
                             "and in groups where nothing moved (what exact shortcuts could skip)")
    parser.add_argument("--checks", action="store_true",
                        help="check every decision (simulate()'s default) to time what the checks cost")
    parser.add_argument("--progress-s", type=float, default=0.0,
                        help="every this many seconds of wall time, print the running simulation's clock, "
                             "decisions and active flows")
    args = parser.parse_args()
    if any(count < 0 for count in args.coflows or []):
        parser.error("--coflows takes a count of 0 (the whole trace) or more")
    if any(not 0 <= interval < math.inf for interval in args.interval_ms or []):
        parser.error("--interval-ms takes 0 (the exact rule) or more, finite")
    if not 0 <= args.progress_s <= 86400:  # setitimer takes no infinity (OverflowError); NaN is refused too
        parser.error("--progress-s takes 0 (no progress lines) to 86400 seconds")
    try:  # a misspelt scheduler is one line before any run, not a traceback after the first workload
        check_names(args.scheduler or [])
    except UserError as err:
        parser.error(str(err))
    return args


def main() -> int:
    args = parse_args()
    current: list[engine._Run] = []
    if args.progress_s > 0:
        def report(_signum, _frame) -> None:
            if current:
                run = current[0]
                print(f"  ... t={run.now_s:.3f}s decisions={run.decisions} active={len(run.active)} "
                      f"cpu={time.process_time():.0f}s", flush=True)
        signal.signal(signal.SIGALRM, report)
        signal.setitimer(signal.ITIMER_REAL, args.progress_s, args.progress_s)
    warm = load_scenario("fig2")
    names = args.scheduler or ["coflow", "sincronia", "echelon"]
    for name in names:
        engine.simulate(warm.topology, warm.jobs, get_scheduler(name))
    intervals = args.interval_ms or [0.0]
    print(f"{'workload':<26} {'scheduler':<10} {'rule':>5} {'wall_s':>8} {'cpu_s':>8} {'decisions':>9} "
          f"{'skipped':>7} {'flows':>7} {'avg_ct_s':>10} {'p99_ct_s':>10} {'peak_MiB':>8}  error vs exact",
          flush=True)
    for label, scenario, jobs in workloads(args):
        specs = {job.job_id: echelon_mod.echelons_of(job) for job in jobs}
        flows = sum(len(job.flows) for job in jobs)
        for name in names:
            variants = [(interval_ms, False) for interval_ms in intervals]
            if args.held_order and isinstance(get_scheduler(name), GroupOrderScheduler):
                variants.append((0.0, True))
            exact: np.ndarray | None = None
            for interval_ms, held in variants:
                scheduler = get_scheduler(name)
                if held:
                    hold_order(scheduler)
                exact_run = interval_ms == 0 and not held
                changes = OrderChanges(scheduler) if args.order_changes and exact_run else None
                rates = RateChanges(scheduler) if args.rate_changes and exact_run else None
                reuse = GroupReuse(scheduler) if args.reuse and exact_run else None
                run, wall, cpu, times = _timed(scenario, jobs, scheduler, specs, interval_ms, args.checks,
                                               current)
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                error = ""
                if exact_run:
                    exact = times
                elif exact is not None:
                    error = _error(times, exact)
                if changes is not None:
                    error = (f"order changed at {changes.changed} decisions "
                             f"({changes.same_groups} with the same groups)")
                if rates is not None:
                    error = "; ".join(filter(None, [error, rates.summary()]))
                if reuse is not None:
                    error = "; ".join(filter(None, [error, reuse.summary()]))
                rule = "held" if held else f"{interval_ms:g}"
                print(f"{label:<26} {name:<10} {rule:>5} {wall:>8.1f} {cpu:>8.1f} {run.decisions:>9} "
                      f"{run.skipped:>7} {flows:>7} {times.mean():>10.5f} {np.percentile(times, 99):>10.5f} "
                      f"{peak:>8.0f}  {error}", flush=True)
    return 0


def _timed(scenario: Scenario, jobs: list, scheduler: Scheduler, specs: dict, interval_ms: float,
           checks: bool, current: list) -> tuple[engine._Run, float, float, np.ndarray]:
    """One together run: (the run, its wall and CPU seconds, each job's completion after its arrival)."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    with engine._collector_paused():
        run = engine._Run(scenario.topology, jobs, scheduler, checks, specs,
                          rule=engine.DecisionRule(interval_s=interval_ms / 1e3))
        current[:] = [run]
        run.run()
        current.clear()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    times = np.array([engine.completion_after_arrival_s(job, run.finish_s[base:base + len(job.tasks)])
                      for job, base in zip(jobs, run.numbered.bases)])
    return run, wall, cpu, times


def _error(times: np.ndarray, exact: np.ndarray) -> str:
    """Relative error of the average and the 99th percentile, and the largest of one job (whose exact
    time is above 0), against the exact rule's times."""
    average = times.mean() / exact.mean() - 1
    p99 = np.percentile(times, 99) / np.percentile(exact, 99) - 1
    timed = exact > 0
    worst = np.abs(times[timed] / exact[timed] - 1).max() if timed.any() else 0.0
    return f"avg {average:+.2e} p99 {p99:+.2e} worst job {worst:.2e}"


if __name__ == "__main__":
    sys.exit(main())
