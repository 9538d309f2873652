"""What the test modules share, one helper per need (no test module imports another's helpers).

* :data:`ROOT`: the checkout the tests run from;
* :func:`echelon_argv` and :func:`run_echelon`: the ``echelon`` command as a user runs it, on this
  checkout's code (``python -m cli`` from :data:`ROOT`, with :data:`ROOT` first on ``PYTHONPATH`` so
  every process it starts, such as the traffic agents, runs the same code);
* :func:`loopback` and :func:`run_local_agents`: traffic agents as plain processes on
  this machine, hosts on 127.0.0.x addresses (no fabric);
* :func:`agent_records`: agents' result files with given TCP retransmission timeouts, written as the
  agents write them (the fidelity monitor's TCP check reads them);
* :func:`example_scheduler_class` and :func:`overcommit_class`: the "Adding a scheduler" example policy,
  loaded from its file, and a broken variant of it that the decision checks must catch.

Fixtures live in ``tests/conftest.py``.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from echelonflow.model import Job

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The "Adding a scheduler" example (docs/scheduler-design.md), a policy in one file.
EXAMPLE_SCHEDULER = os.path.join(ROOT, "docs", "examples", "smallest_flow_first.py")

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
def unix_socket_listening(path: str) -> bool:
    """Whether a server listens on the Unix socket ``path``, not only bound it: the file appears at its
    bind, and a connect before its listen is refused (a test under load met that window)."""
    if not os.path.exists(path):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def xdist_worker_number() -> int:
    """This test process's number among pytest-xdist's workers (``gw3`` -> 3; 0 without xdist), so that
    fixed port ranges differ between workers running at once."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


#: Data ports of agents run on loopback, one per run (a port a finished run's sockets linger on is not
#: taken again), in a range of 300 per xdist worker (60 ranges: the last ends below 65,536).
_PORTS = itertools.count(47100 + 300 * (xdist_worker_number() % 60))


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


#: /proc/net/snmp and /proc/net/netstat as the kernel writes them (pairs of names and values lines).
SNMP_TEXT = ("Ip: Forwarding DefaultTTL InReceives\nIp: 1 64 {segs}\n"
             "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn OutSegs RetransSegs\n"
             "Tcp: 1 200 120000 -1 {segs} {retrans}\n")
NETSTAT_TEXT = ("TcpExt: SyncookiesSent TCPTimeouts TCPSpuriousRTOs TCPLossProbes TCPFastRetrans\n"
                "TcpExt: 0 {timeouts} 0 {probes} 0\nIpExt: InOctets\nIpExt: 99\n")


def agent_records(tmp_path: Any, timeouts_by_host: dict[str, int], killed: Sequence[str] = ()
                  ) -> dict[str, dict[str, int] | None]:
    """Host -> the ``tcp`` record of its agent's result with ``timeouts_by_host`` retransmission
    timeouts, made as an agent makes it: its namespace's /proc/net tables read at its start and at its
    end (``traffic.tcpstats``), the difference saved in its result file and read back as the orchestrator
    reads it.  ``killed`` hosts recorded no counters (a killed agent's result)."""
    from traffic import tcpstats
    from traffic.result import AgentResult, load_result, save_result

    records = {}
    for host, timeouts in timeouts_by_host.items():
        readings = []
        for stage, (segs, fired) in (("start", (1000, 7)), ("end", (4184, 7 + timeouts))):
            folder = tmp_path / host / stage
            folder.mkdir(parents=True)
            (folder / "snmp").write_text(SNMP_TEXT.format(segs=segs, retrans=fired + 2))
            (folder / "netstat").write_text(NETSTAT_TEXT.format(timeouts=fired, probes=fired // 2))
            readings.append(tcpstats.read_counters(str(folder)))
        tcp = None if host in killed else tcpstats.difference(*readings)
        path = str(tmp_path / f"together_out-{host}.json")
        save_result(AgentResult(host, 1_765_000_000.0, "crux", tcp=tcp), path)
        records[host] = load_result(path)
    return {host: record.tcp for host, record in records.items()}


def example_scheduler_class() -> Any:
    """The example policy's class, loaded from its file as a user's own module would be."""
    spec = importlib.util.spec_from_file_location("smallest_flow_first", EXAMPLE_SCHEDULER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SmallestFlowFirst


def overcommit_class() -> Any:
    """The example policy giving every flow twice the fastest link's capacity: a broken policy, for the
    decision checks (the simulator's and the controller's ``check_decisions``) to catch."""

    class Overcommit(example_scheduler_class()):
        name = "overcommit"

        def decide_snapshot(self, snapshot):
            decision = super().decide_snapshot(snapshot)
            decision.rate_bps = {fid: 2 * max(snapshot.capacity_bps.values()) for fid in decision.rate_bps}
            return decision

    return Overcommit
