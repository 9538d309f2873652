"""The controller's start-up heap kept out of full garbage collections (``controller/heap.py``): what is
alive when it settles is no longer visited by a collection, what comes after still is; and the
controller app and the standalone server settle once they have started."""

from __future__ import annotations

import gc
import re
import time

from controller.heap import settle
from controller.launcher import ControllerProcess, free_tcp_port, local_config
from echelonflow.topology import two_hosts

SETTLED = re.compile(r"start-up heap settled: (\d+) objects")


class Record:
    """A container the collector tracks, as a registry record is."""


def tracked(obj: object) -> bool:
    """Whether a collection of any generation visits ``obj`` (the permanent generation is not listed)."""
    return any(candidate is obj for candidate in gc.get_objects())


def test_what_is_alive_at_settle_leaves_the_collections_and_what_comes_after_stays_in_them():
    before = Record()
    assert tracked(before)
    try:
        frozen = settle()
        after = Record()
        assert frozen >= 1 and frozen == gc.get_freeze_count()
        assert not tracked(before)
        assert tracked(after)
    finally:
        gc.unfreeze()  # the rest of the test session's objects back in the collections
    assert tracked(before)


def settled_in(log_path: str, started: str) -> int:
    """How many objects the process in ``log_path`` froze, once its log says ``started``; 0 for none."""
    deadline = time.monotonic() + 20
    with open(log_path, encoding="utf-8", errors="replace") as log:
        text = ""
        while started not in text and time.monotonic() < deadline:
            time.sleep(0.05)
            text += log.read()
        found = SETTLED.search(text)
    return int(found.group(1)) if found else 0


def test_the_standalone_server_settles_its_heap_once_it_has_started(tmp_path, registry_server):
    # the modules, the topology, the kernels: not a handful
    assert settled_in(str(tmp_path / "api.log"), "serving on") > 10_000


def test_the_controller_app_settles_its_heap_once_it_has_started(require_controller):
    ctl = ControllerProcess(two_hosts(10e6), local_config(metrics_port=None), ofp_port=free_tcp_port())
    ctl.start()
    try:
        assert settled_in(ctl.log_path, "start-up heap settled") > 10_000
    finally:
        ctl.stop()
