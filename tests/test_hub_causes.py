"""The stall benchmark's attribution of a late round (``benchmarks/hub_causes.py``): what it records in a
real eventlet hub of its own thread, and how it splits a late wake among the causes."""

from __future__ import annotations

import gc
import threading
import time
from typing import Callable

import eventlet
import pytest

from benchmarks.hub_causes import Recorder, attribute, run_queue_wait_s


def in_own_hub(*tasks: Callable[[], None]) -> Recorder:
    """Run ``tasks`` as green threads of a fresh OS thread (its own hub, as the benchmark's server),
    with a recorder installed there; returns the recorder."""
    recorder = Recorder()
    failed: list[BaseException] = []

    def main() -> None:
        recorder.install()
        try:
            for thread in [eventlet.spawn(task) for task in tasks]:
                thread.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failed.append(exc)
        finally:
            recorder.uninstall()

    thread = threading.Thread(target=main)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the hub's thread did not finish its tasks within 30 s"
    assert not failed, failed
    return recorder


def hog_the_hub() -> None:
    """Burns 5 ms without yielding, then yields."""
    end = time.perf_counter() + 0.005
    while time.perf_counter() < end:
        pass
    eventlet.sleep(0)


def test_a_green_thread_holding_the_hub_is_recorded_with_what_it_ran():
    recorder = in_own_hub(hog_the_hub, lambda: eventlet.sleep(0.001))
    longest = max(recorder.holds, key=lambda hold: hold[1] - hold[0])
    assert longest[1] - longest[0] >= 0.005
    assert longest[2].startswith("hog_the_hub")


def collect_in_another_thread() -> None:
    other = threading.Thread(target=gc.collect)  # a full collection, in no hub's thread
    other.start()
    other.join()


def test_collections_in_the_hub_thread_are_recorded_with_their_generation_and_no_other_thread_s():
    recorder = in_own_hub(lambda: gc.collect(1), collect_in_another_thread)
    generations = [generation for *_, generation in recorder.gcs]
    assert 1 in generations and 2 not in generations
    assert all(end >= start for start, end, _ in recorder.gcs)


def test_the_run_queue_wait_of_a_thread_is_read_from_the_kernel_and_never_decreases():
    tid = threading.get_native_id()
    first = run_queue_wait_s(tid)
    assert 0 <= first <= run_queue_wait_s(tid)


def test_a_late_wake_is_split_among_run_queue_wait_collections_and_holds():
    recorder = Recorder()
    recorder.gcs.append((0.021, 0.024, 2))  # 3 ms of it after the round was due at 0.020
    recorder.holds.append((0.019, 0.026, "render"))  # 6 ms of it after 0.020
    rounds = [(0.0, 0.030, 1.0, 1.004),  # due at 0.020, woke at 0.030: 10 ms late, 4 ms on a run queue
              (0.040, 0.0601, 2.0, 2.0)]  # 0.1 ms late: on time
    causes = attribute(rounds, 0.02, recorder)
    assert causes["late_rounds"] == 1
    assert causes["late_delay_ms"] == [10.0]
    assert causes["late_share_run_queue"] == pytest.approx(0.4)
    assert causes["late_share_gc"] == pytest.approx(0.3)
    assert causes["late_share_hold"] == pytest.approx(0.6)
    assert causes["late_detail"][0]["held_by"] == ["render"]
    assert causes["gc_collections"] == [0, 0, 1]
    assert causes["gc_gen2_ms"] == [3.0]
