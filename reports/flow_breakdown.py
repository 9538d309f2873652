"""Where an emulated flow's time goes: its life split into parts, and its rate against its allocation.

An emulated job is slower than the simulated one for two kinds of reasons: costs the fluid model does
not have (waking the agent, handing the first byte to the kernel, the header's trip, the receiver's
confirmation, waking the dependants) and a transfer that does not run at the rate the scheduler
allocated.  This module reads what the agents record for every flow (``traffic.agent``'s result
documents, kept in the run folder) and splits each flow's life at the points the agents time-stamp::

    dependencies done -> start          wake_s       (the agent noticed; ~1 ms)
    start -> first byte handed over     send_s       (channel taken, header written)
    first byte -> header at receiver    header_s     (one-way trip, queueing)
    header -> last byte at receiver     transfer_s   (of which drain_s: last byte queued -> arrived)
    last byte -> confirmation at sender confirm_s    (frees the channel; not on the dependants' path)
    last byte -> dependant starts       dependants_s (the dependant's own wake-up, local or remote)

and compares each flow's emulated duration (start -> last byte) with its simulated one.  Rate tracking
compares, per progress poll interval, the payload rate TCP achieved (acknowledged bytes) with the rate
the controller allocated then (wire bits, hence scaled by the topology's payload fraction).

Pure: it works on the parsed documents; :func:`load_phase` reads them from a run folder.
"""

from __future__ import annotations

import glob
import os
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from echelonflow.fileio import read_json

PARTS = ("wake_s", "send_s", "header_s", "transfer_s", "drain_s", "confirm_s", "dependants_s")


@dataclass(frozen=True)
class FlowParts:
    flow: str  # "job/flow"
    size_bytes: int
    parts_s: dict[str, float | None]  # PARTS; None where not recorded
    emulated_s: float  # start -> last byte at the receiver
    simulated_s: float | None  # the simulated flow's start -> finish


def run_folder_name(scheduler: str, repeat_index: int, repeats: int) -> str:
    """The run folder's ``logs/`` sub-folder of one emulated run (``emulation.experiment``'s rule)."""
    return scheduler if repeats == 1 else f"{scheduler}-r{repeat_index + 1}"


def load_phase(run_dir: str, run_name: str, label: str = "together") -> dict[str, dict[str, Any]]:
    """The agents' result documents of one phase (host -> document)."""
    docs = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "logs", run_name, f"{label}_out-*.json"))):
        doc = read_json(path, "agent result")
        docs[doc["host"]] = doc
    return docs


def flow_parts(docs: Mapping[str, Mapping[str, Any]], deps: Mapping[str, Sequence[str]],
               simulated_flows: Mapping[str, Mapping[str, Any]] | None = None) -> list[FlowParts]:
    """Every delivered flow of a phase, split into :data:`PARTS` (seconds).

    ``deps``: qualified task id -> qualified ids of its dependencies (the jobs' DAGs);
    ``simulated_flows``: a simulated run's ``flows`` (results format) for the duration ratio.
    """
    sent: dict[str, Mapping[str, Any]] = {}
    received: dict[str, Mapping[str, Any]] = {}
    finish: dict[str, float] = {}  # every task's finish (flows: the last byte's arrival)
    start: dict[str, float] = {}
    for doc in docs.values():
        sent.update(doc.get("sent", {}))
        received.update(doc.get("received", {}))
        for qid, task in doc.get("tasks", {}).items():
            if "finish" in task:
                finish[qid] = task["finish"]
            if "start" in task:
                start[qid] = task["start"]
    for qid, record in received.items():
        finish[qid] = record["finish"]
    woken: dict[str, list[float]] = {}  # flow -> how long after its arrival each dependant it released began
    for qid, dep_ids in deps.items():
        done = [(finish[d], d) for d in dep_ids if d in finish]
        if qid in start and done and len(done) == len(dep_ids):
            last_s, last = max(done)
            if last in received:
                woken.setdefault(last, []).append(start[qid] - last_s)
    out = []
    for qid, s in sorted(sent.items()):
        r = received.get(qid)
        if r is None or "first_byte" not in s:
            continue
        dep_done = [finish[d] for d in deps.get(qid, ()) if d in finish]
        parts: dict[str, float | None] = {
            "wake_s": s["start"] - max(dep_done) if dep_done else None,
            "send_s": s["first_byte"] - s["start"],
            "header_s": r["header"] - s["first_byte"],
            "transfer_s": r["finish"] - r["header"],
            "drain_s": r["finish"] - s["last_queued"],
            "confirm_s": s["confirmed"] - r["finish"],
            "dependants_s": min(woken[qid]) if woken.get(qid) else None,
        }
        sim = (simulated_flows or {}).get(qid)
        out.append(FlowParts(qid, int(s["size_bytes"]), parts, r["finish"] - s["start"],
                             None if sim is None else sim["finish_s"] - sim["start_s"]))
    return out


def _tracked_intervals(docs: Mapping[str, Mapping[str, Any]], payload_fraction: float
                       ) -> Iterator[tuple[float, float, float | None]]:
    """(achieved, allocated payload rate, seconds since the allocation last rose or None) per progress poll
    interval of every flow with a positive allocation in force; a flow's tail (partly idle) is left out."""
    for doc in docs.values():
        for record in doc.get("sent", {}).values():
            allocations = record.get("allocations") or []
            progress = record.get("progress") or []
            for (t1, acked1, *_), (t2, acked2, *_) in zip(progress, progress[1:]):
                rate_bps, raised_at, before = None, None, 0.0
                for allocation in allocations:
                    if allocation["t_s"] > t1:
                        break
                    if allocation["rate_bps"] != rate_bps:
                        before, rate_bps = rate_bps or 0.0, allocation["rate_bps"]
                        raised_at = allocation["t_s"] if rate_bps > before else None
                if t2 <= t1 or not rate_bps or rate_bps <= 0 or acked2 >= record["size_bytes"]:
                    continue  # no allocation yet, a paused flow, or the flow's tail (partly idle interval)
                yield ((acked2 - acked1) * 8 / (t2 - t1), rate_bps * payload_fraction,
                       None if raised_at is None else t1 - raised_at)


def rate_tracking(docs: Mapping[str, Mapping[str, Any]], payload_fraction: float) -> dict[str, float]:
    """Achieved payload rate against the allocation in force, over every progress poll interval of every
    flow that had a positive allocation: ``{"intervals", "achieved_over_allocated", "under_80_share"}``."""
    return _tracking_of(list(_tracked_intervals(docs, payload_fraction)))


def _tracking_of(intervals: Sequence[tuple[float, float, float | None]]) -> dict[str, float]:
    achieved_total = sum(i[0] for i in intervals)
    allocated_total = sum(i[1] for i in intervals)
    under = sum(1 for achieved, wanted, _ in intervals if achieved < 0.8 * wanted)
    return {"intervals": len(intervals),
            "achieved_over_allocated": achieved_total / allocated_total if allocated_total else float("nan"),
            "under_80_share": under / len(intervals) if intervals else float("nan")}


#: Buckets of :func:`rate_after_raise`: seconds since the flow's allocation last rose (upper bounds).
SINCE_RAISE_BUCKETS = ((0.1, "< 0.1 s"), (0.3, "0.1-0.3 s"), (1.0, "0.3-1 s"), (float("inf"), ">= 1 s"))


def rate_after_raise(docs: Mapping[str, Mapping[str, Any]], payload_fraction: float
                     ) -> dict[str, list[tuple[float, float]]]:
    """(achieved, allocated) per poll interval, grouped by how long ago the flow's allocation last rose
    (:data:`SINCE_RAISE_BUCKETS`; ``"lowered"`` when its last change was down).  A flow the schedule
    raises, typically from parked in the last class, should reach its new rate within a poll or two; how
    far it falls short in the first buckets is the cost of the raise on the wire (docs/emulation.md)."""
    groups: dict[str, list[tuple[float, float]]] = {label: [] for _, label in SINCE_RAISE_BUCKETS}
    groups["lowered"] = []
    for achieved, wanted, since_s in _tracked_intervals(docs, payload_fraction):
        label = ("lowered" if since_s is None
                 else next(name for limit, name in SINCE_RAISE_BUCKETS if since_s < limit))
        groups[label].append((achieved, wanted))
    return groups


def format_rate_after_raise(groups: Mapping[str, Sequence[tuple[float, float]]]) -> list[str]:
    """One line per group of :func:`rate_after_raise` (pooled as the caller likes)."""
    lines = []
    for label, pairs in groups.items():
        if pairs:
            tracking = _tracking_of([(a, w, None) for a, w in pairs])
            stalled = sum(1 for a, _ in pairs if a == 0) / len(pairs)
            lines.append(f"  {label:10s} {tracking['intervals']:5d} intervals, achieved/allocated "
                         f"{tracking['achieved_over_allocated']:.2f}, {tracking['under_80_share']:.0%} under "
                         f"80 %, {stalled:.0%} with nothing acknowledged")
    return lines


def allocation_lag(docs: Mapping[str, Mapping[str, Any]]) -> list[float]:
    """Seconds from each decision to the moment the sending agent applied it, for every allocation change
    its records carry a decision time for: the control loop's delay, which the fluid model does not have
    (the first allocation of a flow comes with its start report; later ones by the poll or the push)."""
    lags = []
    for doc in docs.values():
        for record in doc.get("sent", {}).values():
            for allocation in (record.get("allocations") or [])[1:]:
                if allocation.get("decided_s") is not None:
                    lags.append(allocation["t_s"] - allocation["decided_s"])
    return lags


def format_lag(lags: Sequence[float]) -> str:
    """One line on :func:`allocation_lag` (pooled as the caller likes)."""
    if not lags:
        return "  allocation changes heard: none with a decision time"
    return (f"  allocation changes heard {len(lags)}: decision -> applied median "
            f"{1e3 * _quantile(lags, 0.5):.1f} ms, p90 {1e3 * _quantile(lags, 0.9):.1f} ms, "
            f"max {1e3 * max(lags):.1f} ms")


def tcp_recovery(docs: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """How many flows TCP had to recover: ``{"flows", "retransmitting", "timed_out", "retransmits"}``.

    From the progress samples' retransmission counters (agents record them since they sample TCP_INFO):
    a flow ``timed_out`` if any sample saw a retransmission timeout pending (back-off > 0).  A flow that
    waits behind more urgent classes for longer than TCP's retransmission timeout (200 ms minimum) gets
    its window cut and the timer doubled, which the fluid model knows nothing of."""
    flows = retransmitting = timed_out = retransmits = 0
    for doc in docs.values():
        for record in doc.get("sent", {}).values():
            samples = [p for p in record.get("progress") or [] if len(p) >= 4]
            if not samples:
                continue
            flows += 1
            count = max(p[2] for p in samples)
            retransmits += count
            retransmitting += count > 0
            timed_out += any(p[3] > 0 for p in samples)
    return {"flows": flows, "retransmitting": retransmitting, "timed_out": timed_out,
            "retransmits": retransmits}


def retransmits_by_class_changes(docs: Mapping[str, Mapping[str, Any]], cap: int = 5) -> dict[int, list[int]]:
    """Each flow's retransmitted segments, grouped by how often its class (DSCP) changed while it ran
    (``cap`` or more in one group).  Packets still waiting in a lower class when a flow moves up are
    overtaken by the newer ones, and the receiver's duplicate acknowledgements look like loss: if
    retransmissions grow with class changes, reordering is their cause rather than drops."""
    groups: dict[int, list[int]] = {}
    for doc in docs.values():
        for record in doc.get("sent", {}).values():
            samples = [p for p in record.get("progress") or [] if len(p) >= 4]
            if not samples:
                continue
            marks = [a.get("dscp") for a in record.get("allocations") or []]
            changes = sum(1 for a, b in zip(marks, marks[1:]) if a != b)
            groups.setdefault(min(changes, cap), []).append(max(p[2] for p in samples))
    return dict(sorted(groups.items()))


def format_class_changes(groups: Mapping[int, Sequence[int]], cap: int = 5) -> list[str]:
    """One line per group of :func:`retransmits_by_class_changes`."""
    return [f"  class changes {n}{'+' if n == cap else ''}: {len(v)} flows, {statistics.mean(v):.2f} "
            f"segments retransmitted on average, {sum(1 for x in v if x) / len(v):.0%} retransmitting"
            for n, v in groups.items() if v]


def host_tcp(docs: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """The hosts' TCP counters over the phase (``traffic.tcpstats``), summed over the agents."""
    total: dict[str, int] = {}
    for doc in docs.values():
        for name, value in (doc.get("tcp") or {}).items():
            total[name] = total.get(name, 0) + int(value)
    return total


def summarise(flows: Sequence[FlowParts]) -> dict[str, dict[str, float]]:
    """Median, p90, max and sum per part, and the emulated/simulated duration ratio (median, p90)."""
    summary: dict[str, dict[str, float]] = {}
    for part in PARTS:
        values = [f.parts_s[part] for f in flows if f.parts_s.get(part) is not None]
        if values:
            summary[part] = {"median": statistics.median(values), "p90": _quantile(values, 0.9),
                             "max": max(values), "sum": sum(values), "flows": len(values)}
    ratios = [f.emulated_s / f.simulated_s for f in flows if f.simulated_s]
    if ratios:
        summary["emulated_over_simulated"] = {"median": statistics.median(ratios),
                                              "p90": _quantile(ratios, 0.9), "max": max(ratios),
                                              "flows": len(ratios)}
    return summary


def format_summary(title: str, summary: Mapping[str, Mapping[str, float]],
                   tracking: Mapping[str, float] | None = None,
                   recovery: Mapping[str, float] | None = None) -> str:
    lines = [f"{title}", f"  {'part':22s} {'median':>9s} {'p90':>9s} {'max':>9s} {'sum':>8s}"]
    for part in PARTS:
        if part in summary:
            row = summary[part]
            lines.append(f"  {part:22s} {row['median'] * 1e3:7.1f}ms {row['p90'] * 1e3:7.1f}ms "
                         f"{row['max'] * 1e3:7.1f}ms {row['sum']:7.2f}s")
    ratio = summary.get("emulated_over_simulated")
    if ratio:
        lines.append(f"  {'emulated/simulated':22s} {ratio['median']:9.2f} {ratio['p90']:9.2f} "
                     f"{ratio['max']:9.2f}")
    if tracking and tracking["intervals"]:
        lines.append(f"  achieved/allocated {tracking['achieved_over_allocated']:.2f} over "
                     f"{tracking['intervals']} poll intervals ({tracking['under_80_share']:.0%} under 80 %)")
    if recovery and recovery["flows"]:
        lines.append(f"  TCP recovery: {recovery['retransmitting']} of {recovery['flows']} flows "
                     f"retransmitted ({recovery['retransmits']} segments), {recovery['timed_out']} hit a "
                     "retransmission timeout")
    return "\n".join(lines)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
