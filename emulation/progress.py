"""What an emulation says while it runs: one progress line per step on stderr.

Every part below the command takes a ``say`` function (one line of text in, nothing out), so tests can
record the lines and the command can stamp them with the time since it started.  The phase's verdict
lines (fidelity monitor, wire check) are written here so every phase reads the same.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, Callable

#: One progress line in, nothing out.
Say = Callable[[str], None]


def stderr_progress() -> Say:
    """Lines on stderr, each stamped with the seconds since this call (the command's start)."""
    start = time.monotonic()
    return lambda text: print(f"[{time.monotonic() - start:6.1f}s] {text}", file=sys.stderr, flush=True)


def prefixed(say: Say, prefix: str) -> Say:
    """``say`` with ``prefix`` in front of every line (``[echelon] ``, ``together: ``)."""
    return lambda text: say(prefix + text)


def say_all(say: Say, lines: Callable[[], list[str]]) -> None:
    """Say every line ``lines()`` returns (a clean-up's problems, for instance)."""
    for line in lines():
        say(line)


def say_monitor(say: Say, label: str, doc: Mapping[str, Any]) -> None:
    """One line with the phase's fidelity verdict."""
    busy = doc["ovs_thread_busy"]
    idle = doc["cpu_idle"]
    verdict = "trusted" if doc["trusted"] else "NOT trusted: " + "; ".join(doc["reasons"])
    say(f"{label}: fidelity monitor: {verdict} (switch thread median/p90 "
        f"{_pct(busy['median'])}/{_pct(busy['p90'])} of a core, machine idle median "
        f"{_pct(idle['median'])}, "
        f"{doc['busy_port_intervals']} busy port intervals, link ratio median "
        f"{_pct(doc['link_ratio']['median'])}{_unjudged_timeouts(doc)})")


def _unjudged_timeouts(doc: Mapping[str, Any]) -> str:
    """The hosts' TCP retransmission timeouts that did not make the phase untrusted (faults injected, or
    within ``tcp_timeouts_max``); the others are in the reasons already."""
    timeouts = doc.get("tcp_timeouts") or {}
    if not timeouts or any(r.startswith("TCP retransmission timeouts") for r in doc.get("reasons", [])):
        return ""
    why = "within the threshold" if doc.get("tcp_timeouts_judged") else "not judged"
    return f", TCP retransmission timeouts ({why}) " + ", ".join(f"{h} {n}" for h, n in timeouts.items())


def say_wire(say: Say, label: str, doc: Mapping[str, Any]) -> None:
    """One line with the phase's wire check."""
    bad = doc["flows_with_problems"]
    say(f"{label}: wire check: {doc['flows']} flows, {doc['packets_judged']} packets judged, "
        f"{doc['packets_mismatched']} with a mark other than assigned; {bad} flow(s) with problems"
        + (f", e.g. {doc['mismatches'][0]}" if doc["mismatches"] else ""))


def completion_times(completion_s: Mapping[str, float]) -> str:
    """``a 8.54 s, b 3.10 s``: jobs' completion times in one line."""
    return ", ".join(f"{job} {value:.2f} s" for job, value in completion_s.items())


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"
