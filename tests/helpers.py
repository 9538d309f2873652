"""What the test modules share, one helper per need (no test module imports another's helpers).

* :data:`ROOT`: the checkout the tests run from;
* :func:`echelon_argv` and :func:`run_echelon`: the ``echelon`` command as a user runs it, on this
  checkout's code (``python -m cli`` from :data:`ROOT`, with :data:`ROOT` first on ``PYTHONPATH`` so
  every process it starts, such as the traffic agents, runs the same code);
* :func:`loopback` and :func:`run_local_agents`: traffic agents as plain processes on
  this machine, hosts on 127.0.0.x addresses (no fabric).

Fixtures live in ``tests/conftest.py``.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from echelonflow.model import Job

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The project's top-level packages (the layering and contracts tests walk them).
PACKAGES = ("echelonflow", "simulator", "topologies", "controller", "traffic", "emulation", "reports", "cli")


def echelon_env() -> dict[str, str]:
    """The environment ``echelon`` runs in: ours, with this checkout first on ``PYTHONPATH``."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))


def echelon_argv(*args: str) -> list[str]:
    """``echelon ARGS`` as a command line (for a test that watches the process as it runs)."""
    return [sys.executable, "-m", "cli", *args]


def run_echelon(*args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """``echelon ARGS`` run to its end: exit status, stdout and stderr as text."""
    return subprocess.run(echelon_argv(*args), cwd=ROOT, env=echelon_env(), capture_output=True, text=True,
                          timeout=timeout_s)


# ------------------------------------------------------------------------------ agents without a fabric
def xdist_worker_number() -> int:
    """This test process's number among pytest-xdist's workers (``gw3`` -> 3; 0 without xdist), so that
    fixed port ranges differ between workers running at once."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


#: Data ports of agents run on loopback, one per run (a port a finished run's sockets linger on is not
#: taken again), in a range of 300 per xdist worker.
_PORTS = itertools.count(47100 + 300 * xdist_worker_number())


def loopback(hosts: Sequence[str]) -> dict[str, str]:
    """Each host on its own 127.0.0.x address."""
    return {h: f"127.0.0.{10 + i}" for i, h in enumerate(hosts)}


def run_local_agents(jobs: Sequence[Job], tmp_path: Any, popen: Any = None,
                     ready_timeout_s: float | None = None, kill_agents: dict[str, float] | None = None,
                     **spec: Any) -> Any:
    """The agents of ``jobs`` as processes on this machine (``emulation.agents.run_agents``); ``spec``:
    run-spec fields (``registry``, ``data_port``, ...) over a fresh data port and a 30 s run timeout."""
    from emulation.agents import agent_hosts, local_popen, run_agents
    from traffic.runspec import RunSpec

    spec.setdefault("data_port", next(_PORTS))
    spec.setdefault("run_timeout_s", 30.0)
    template = RunSpec(hosts_ip=loopback(agent_hosts(jobs)), jobs=list(jobs), **spec)
    return run_agents(template, str(tmp_path), popen or local_popen, ready_timeout_s=ready_timeout_s,
                      kill_agents=kill_agents)


# ------------------------------------------------------------------------------ the controller's parts
class RecordingSink:
    """An enforcement sink (``controller.service.EnforcementSink``) that records what it is told, in
    order, and fails for the flows in ``fail_for`` as an unreachable switch would."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.fail_for: set[str] = set()

    def install(self, flow_id, match, path, queue, rate_bps):
        self._maybe_fail(flow_id)
        self.calls.append(("install", flow_id, match, tuple(path), queue, rate_bps))

    def update(self, flow_id, queue=None, rate_bps=None, clear_rate=False):
        self._maybe_fail(flow_id)
        self.calls.append(("update", flow_id, queue, rate_bps, clear_rate))

    def remove(self, flow_id):
        self._maybe_fail(flow_id)
        self.calls.append(("remove", flow_id))

    def repath(self, flow_id, path):
        self._maybe_fail(flow_id)
        self.calls.append(("repath", flow_id, tuple(path)))

    def _maybe_fail(self, flow_id):
        if flow_id in self.fail_for:
            raise OSError(f"switch unreachable for {flow_id}")

    def take(self) -> list[tuple]:
        """The calls so far, forgotten here."""
        calls, self.calls = self.calls, []
        return calls

    def told(self) -> list[tuple[str, str]]:
        """The calls so far as (kind, flow id): what was done to which flow."""
        return [call[:2] for call in self.calls]


class Clock:
    """A clock that says ``now`` until told otherwise (a service's ``now``)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
