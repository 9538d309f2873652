"""The tc filter watchdog (topologies/qos.py) against the real kernel, without OVS or Mininet.

Each test gets a network namespace of its own (``efwd-<pid>``) with two veth pairs: ``efwd-p1`` and
``efwd-p2`` carry the htb tree and DSCP filters the fabric's switch ports carry, their peers keep the
kernel's ``noqueue`` root.  The namespace, and with it every device in it, is deleted by name at the
end, so nothing of the machine's own (or a running fabric's) is read or touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from echelonflow.queues import tos_for_queue
from tests.conftest import need
from topologies import qos

QUEUES = 4
RATE_BPS = 10e6
SHAPED = ["efwd-p1", "efwd-p2"]
PLAIN = ["efwd-q1", "efwd-q2"]


def _missing_reason() -> str:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "tc", "mnexec"):
        if shutil.which(tool) is None:
            return f"needs {tool} on PATH"
    return ""


@pytest.fixture
def netns() -> Iterator[int]:
    """A fresh namespace with the shaped and plain veths; yields the pid of a process inside it."""
    need("the tc watchdog tests", _missing_reason())
    name = f"efwd-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    holder = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "600"])
    try:
        for shaped, plain in zip(SHAPED, PLAIN):
            subprocess.run(["ip", "-n", name, "link", "add", shaped, "type", "veth", "peer", "name", plain],
                           check=True, capture_output=True)
            for dev in (shaped, plain):
                subprocess.run(["ip", "-n", name, "link", "set", dev, "up"], check=True, capture_output=True)
            proc = qos.run_tc_batch(qos.htb_lines(shaped, RATE_BPS, QUEUES), netns_pid=holder.pid)
            assert proc.returncode == 0, proc.stderr
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def tc_json(pid: int, *command: str) -> str:
    proc = qos.run_tc_batch([" ".join(command)], netns_pid=pid, json_output=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def drop_filters(pid: int, dev: str) -> None:
    """What OVS's QoS rebuild leaves: the htb root without the DSCP filters."""
    proc = qos.run_tc_batch([f"filter del dev {dev} parent 1: prio 1"], netns_pid=pid)
    assert proc.returncode == 0, proc.stderr


WANT = {(tos_for_queue(q), q + 1) for q in range(1, QUEUES)}


def test_parsers_on_real_tc_output(netns):
    # One dump of the whole namespace names every device's root (lo is down: its noop root is not
    # listed, which is why a device missing from the dump makes the pass fail rather than pass).
    roots = qos.parse_root_qdiscs(tc_json(netns, "qdisc", "show"))
    assert roots == {"efwd-p1": "htb 1:", "efwd-p2": "htb 1:",
                     "efwd-q1": "noqueue 0:", "efwd-q2": "noqueue 0:"}
    assert qos.parse_filters(tc_json(netns, "filter", "show", "dev", "efwd-p1", "parent", "1:")) == WANT
    assert qos.parse_filters(tc_json(netns, "filter", "show", "dev", "efwd-q1", "parent", "1:")) == set()
    devs = SHAPED + PLAIN
    out = qos.run_tc_batch(qos.status_query(devs), netns_pid=netns, json_output=True)
    assert out.returncode == 0, out.stderr
    status = qos.parse_status(out.stdout, devs)
    assert status == {"efwd-p1": ("htb 1:", WANT), "efwd-p2": ("htb 1:", WANT),
                      "efwd-q1": ("noqueue 0:", set()), "efwd-q2": ("noqueue 0:", set())}
    assert list(status) == devs
    # a filter answer short (a device vanished between the dumps) -> no status at all
    assert qos.parse_status("\n".join(out.stdout.splitlines()[:-1]), devs) == {}


@pytest.mark.parametrize("legacy", [False, True], ids=["json-query", "text-query"])
def test_missing_and_repair_semantics(netns, legacy):
    """The same answers from the linear query and from the quadratic one older tc versions fall back to."""
    wd = qos.FilterWatchdog(SHAPED + ["efwd-q1"], QUEUES, netns_pid=netns)
    wd.legacy = legacy
    assert wd.missing() == ["efwd-q1"]  # no htb root: reported, never "repaired"
    assert wd.check_once() == [] and wd.reapplied == 0
    drop_filters(netns, "efwd-p2")
    assert wd.missing() == ["efwd-p2", "efwd-q1"]
    assert wd.check_once() == ["efwd-p2"] and wd.reapplied == 1
    assert wd.missing() == ["efwd-q1"]
    assert qos.parse_filters(tc_json(netns, "filter", "show", "dev", "efwd-p2", "parent", "1:")) == WANT
    # one filter of three gone (tos 0x40 -> 1:3) counts as missing too, and is repaired without duplicates
    partial = qos.run_tc_batch(["filter del dev efwd-p1 parent 1: prio 1",
                                *qos.filter_lines("efwd-p1", QUEUES)[::2]], netns_pid=netns)
    assert partial.returncode == 0, partial.stderr
    assert wd.missing() == ["efwd-p1", "efwd-q1"]
    assert wd.check_once() == ["efwd-p1"]
    rules = tc_json(netns, "filter", "show", "dev", "efwd-p1", "parent", "1:")
    assert qos.parse_filters(rules) == WANT and rules.count('"flowid"') == len(WANT)
    assert wd.legacy == legacy  # this tc's JSON parses: no fall-back


@pytest.mark.parametrize("legacy", [False, True], ids=["json-query", "text-query"])
def test_a_device_that_is_gone_fails_the_pass(netns, legacy):
    wd = qos.FilterWatchdog(SHAPED + ["efwd-gone"], QUEUES, netns_pid=netns)
    wd.legacy = legacy
    drop_filters(netns, "efwd-p1")
    assert wd.missing() is None
    assert wd.check_once() == [] and wd.reapplied == 0  # nothing repaired from a failed dump


def test_thread_restores_dropped_filters(netns):
    wd = qos.FilterWatchdog(SHAPED, QUEUES, interval_s=0.05, netns_pid=netns)
    wd.start()
    try:
        drop_filters(netns, "efwd-p1")
        deadline = time.monotonic() + 5
        while wd.reapplied == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        wd.stop()
    assert wd.reapplied >= 1
    assert wd.missing() == []
