"""The allocation watch behind ``GET /v1/allocations``: who is woken, when, and with which number."""

from __future__ import annotations

import threading
import time

from controller.allocation_watch import AllocationWatch


def test_only_hosts_whose_flows_changed_are_woken():
    watch = AllocationWatch()
    watch.watch("h1")
    watch.watch("h2")
    watch.update({"j/a": ("h1", (1, 5e6)), "j/b": ("h2", (2, None))})
    assert watch.host_seq == {"h1": 1, "h2": 1}
    watch.update({"j/a": ("h1", (1, 5e6)), "j/b": ("h2", (2, 3e6))})  # only b's meter changed
    assert watch.host_seq == {"h1": 1, "h2": 2}
    watch.update({"j/a": ("h1", (1, 5e6)), "j/b": ("h2", (2, 3e6))})  # nothing changed: nobody woken
    assert watch.seq == 2
    watch.update({"j/a": ("h1", (1, 5e6))})  # b ended: its host needs no word (its agent saw the finish)
    assert watch.host_seq == {"h1": 1, "h2": 2}


def test_a_waiter_returns_at_the_change_or_after_its_timeout():
    watch = AllocationWatch()
    assert watch.wait("h1", 0, 0.0) == 0  # the first call registers the host
    got, returned_at = [], []
    waiting = threading.Event()
    timeout_s = 30.0  # a return by timeout would come this long after the wait began

    def waiter():
        waiting.set()
        got.append(watch.wait("h1", 0, timeout_s))
        returned_at.append(time.monotonic())

    thread = threading.Thread(target=waiter)
    thread.start()
    assert waiting.wait(10)
    watch.update({"j/a": ("h2", (1, None))})  # another host's flow: h1 keeps waiting
    time.sleep(0.2)
    assert thread.is_alive() and not got
    changed_at = time.monotonic()
    watch.update({"j/a": ("h2", (1, None)), "j/b": ("h1", (1, None))})
    thread.join(timeout_s / 2)
    # woken by the change: after it, and long before its own timeout could have ended the wait
    assert got == [2] and changed_at <= returned_at[0] < changed_at + timeout_s / 2
    started = time.monotonic()
    assert watch.wait("h1", 2, 0.3) == 2  # nothing newer: the whole timeout, then the same number
    assert time.monotonic() - started >= 0.29
    assert watch.wait("h1", 1, 5.0) == 2  # already newer than 1: at once
