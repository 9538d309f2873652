"""Where a late scheduling round's delay comes from, measured inside the hub's own thread.

``bench_api_weeks.py --stalls-only`` records how late a green thread that asks for a round every 20 ms
wakes.  Three things can make it late, and this module records each with timestamps so that a late wake
can be split between them afterwards (:func:`attribute`):

* **the hub held**: another green thread (a read, the WSGI server, anything) ran past the instant the
  round was due; ``greenlet.settrace`` timestamps every switch in the hub's thread;
* **the garbage collector**: ``gc.callbacks`` timestamps every collection made in that thread, with its
  generation (a collection runs inside whatever code allocated, so it also counts inside a hold);
* **the operating system**: the thread was ready to run but had no core.  Linux counts that per thread
  (``/proc/self/task/<tid>/schedstat``, second field: nanoseconds spent waiting on a run queue), which
  splits "the process was busy" from "the process was waiting for the machine" without any guess.

Only a wake later than :data:`LATE_S` is attributed; its delay is split into the run-queue wait during
its sleep, and the collections and holds that overlap the stretch from the instant it was due to the
wake (a hold includes what the OS took from it, so the parts can overlap: each is an upper bound of its
share).
"""

from __future__ import annotations

import gc
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

#: A wake this late is attributed (the issue's target).
LATE_S = 0.005
#: Holds shorter than this are not kept (every request switches a few times).
HOLD_KEPT_S = 0.0005


def run_queue_wait_s(tid: int) -> float:
    """Seconds thread ``tid`` of this process has spent ready to run but waiting for a core."""
    with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as fh:
        return int(fh.read().split()[1]) / 1e9


def where(frame: Any, depth: int = 40) -> str:
    """The green thread's frames outside eventlet and greenlet, outermost last: what it was doing."""
    names = []
    while frame is not None and depth:
        path = frame.f_code.co_filename
        if "eventlet" not in path and "greenlet" not in path:
            names.append(frame.f_code.co_name)
        frame, depth = frame.f_back, depth - 1
    return " < ".join(names[:6]) or "eventlet"


@dataclass
class Recorder:
    """Installed in the hub's thread (:meth:`install` from a green thread there)."""

    tid: int = 0
    gcs: list[tuple[float, float, int]] = field(default_factory=list)  # start, end, generation
    holds: list[tuple[float, float, str]] = field(default_factory=list)  # start, end, where
    _gc_began: float = 0.0
    _since: float | None = None
    _hub: Any = None

    def install(self) -> None:
        import eventlet.hubs
        import greenlet

        self.tid = threading.get_native_id()
        self._hub = eventlet.hubs.get_hub().greenlet
        gc.callbacks.append(self._on_gc)
        greenlet.settrace(self._on_switch)

    def uninstall(self) -> None:
        import greenlet

        greenlet.settrace(None)
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def clear(self) -> None:
        self.gcs.clear()
        self.holds.clear()

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_native_id() != self.tid:
            return
        if phase == "start":
            self._gc_began = time.perf_counter()
        else:
            self.gcs.append((self._gc_began, time.perf_counter(), info["generation"]))

    def _on_switch(self, event: str, args: tuple[Any, Any]) -> None:
        now = time.perf_counter()
        origin, target = args
        if origin is not self._hub and self._since is not None and now - self._since >= HOLD_KEPT_S:
            self.holds.append((self._since, now, where(origin.gr_frame)))
        self._since = None if target is self._hub else now


def overlap_s(spans: list[tuple[float, float, Any]], start: float, end: float) -> float:
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b, _ in spans)


def attribute(rounds: list[tuple[float, float, float, float]], period_s: float, recorder: Recorder
              ) -> dict[str, Any]:
    """Split the late wakes' delay among the causes.  ``rounds``: (asked, woke, run-queue wait at
    asked, at woke) per round, perf_counter seconds."""
    late = []
    for asked, woke, wait0, wait1 in rounds:
        due = asked + period_s
        if woke - due < LATE_S:
            continue
        late.append({"delay": woke - due, "os": wait1 - wait0, "gc": overlap_s(recorder.gcs, due, woke),
                     "hold": overlap_s(recorder.holds, due, woke),
                     "held_by": [w for a, b, w in recorder.holds if a < woke and b > due]})
    total = sum(r["delay"] for r in late)
    sites: dict[str, float] = {}
    for a, b, w in recorder.holds:
        sites[w] = max(sites.get(w, 0.0), b - a)
    gen2 = [b - a for a, b, g in recorder.gcs if g == 2]
    return {
        "late_rounds": len(late), "late_delay_ms": [round(1000 * r["delay"], 2) for r in late],
        "late_share_run_queue": sum(min(r["os"], r["delay"]) for r in late) / total if total else None,
        "late_share_gc": sum(r["gc"] for r in late) / total if total else None,
        "late_share_hold": sum(r["hold"] for r in late) / total if total else None,
        "late_detail": [{k: (round(1000 * v, 2) if isinstance(v, float) else v) for k, v in r.items()}
                        for r in sorted(late, key=lambda r: -r["delay"])[:8]],
        "run_queue_wait_ms_p50": 1000 * statistics.median([w1 - w0 for *_, w0, w1 in rounds]) if rounds
        else None,
        "gc_collections": [sum(1 for *_, g in recorder.gcs if g == n) for n in range(3)],
        "gc_max_ms": 1000 * max((b - a for a, b, _ in recorder.gcs), default=0.0),
        "gc_gen2_ms": [round(1000 * s, 2) for s in gen2],
        "holds_over_1ms": sum(1 for a, b, _ in recorder.holds if b - a >= 0.001),
        "hold_max_ms": 1000 * max((b - a for a, b, _ in recorder.holds), default=0.0),
        "hold_sites_max_ms": {w: round(1000 * s, 2)
                              for w, s in sorted(sites.items(), key=lambda kv: -kv[1])[:6]},
    }
