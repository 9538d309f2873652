"""Port shaping and priority queues: OVS linux-htb QoS on switch ports, tc htb in host namespaces.

Queue semantics (the controller relies on them):

* queue 0 is the default class for unmarked traffic (ARP, TCP ACKs, anything not classified), htb
  ``prio 0``;
* queues ``1..Q-1`` are scheduling classes, queue 1 the most urgent; htb ``prio q``;
* every queue may use the whole link (ceil/max-rate = link rate) and is guaranteed a small min-rate
  (1 % of the link), so a lower class is starved only down to that floor, never to zero.

Why DSCP + tc filters: on the userspace datapath OVS accepts ``set_queue`` and builds the htb classes,
but every packet lands in the default class (docs/platform.md).  So the controller marks
``ip_dscp = echelonflow.queues.dscp_for_queue(q)`` and we add one ``tc u32`` filter per class that maps
that DSCP to htb class ``1:(q+1)``.  The kernel datapath honours ``set_queue`` natively and the filters
agree with it, so both datapaths behave the same.

Why a watchdog: OVS owns the root qdisc of a port with QoS and deletes/re-creates it whenever it
rebuilds that port's QoS (QoS row changes, port re-open, ovs-vswitchd restart).  The filters go with
the old qdisc, silently turning priority off.  :class:`FilterWatchdog` checks all ports with one
``tc -batch`` every ``interval_s`` and re-adds missing filters.

Why shape host egress too: the simulator treats host uplinks as capacity-limited links.  Without a
shaper in the host namespace a host would blast at veth speed into its edge switch, so congestion
(and drops in the single shared userspace transmit socket, docs/platform.md) would happen at the
switch instead of at the link the model says is the bottleneck.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence

from echelonflow.queues import tos_for_queue
from topologies.ovs import OWNER_KEY

MIN_RATE_FRACTION = 0.01
#: The filter watchdog waits at least this many times its last pass's duration between passes.
DUTY_WAIT = 4.0


def min_rate_bps(rate_bps: float) -> int:
    return max(8000, int(rate_bps * MIN_RATE_FRACTION))


def filter_lines(dev: str, queues: int) -> list[str]:
    """``tc -batch`` lines adding the DSCP -> class filters of one device (classes 1:2 .. 1:queues)."""
    return [
        f"filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip dsfield "
        f"0x{tos_for_queue(q):02x} 0xfc flowid 1:{q + 1}"
        for q in range(1, queues)
    ]


def htb_lines(dev: str, rate_bps: float, queues: int) -> list[str]:
    """``tc -batch`` lines building the same htb tree OVS builds (root 1:fffe, queue q = 1:(q+1))."""
    rate, floor = int(rate_bps), min_rate_bps(rate_bps)
    lines = [
        f"qdisc replace dev {dev} root handle 1: htb default 1",
        f"class add dev {dev} parent 1: classid 1:fffe htb rate {rate}bit ceil {rate}bit",
    ]
    for q in range(queues):
        lines.append(
            f"class add dev {dev} parent 1:fffe classid 1:{q + 1:x} htb rate {floor}bit ceil {rate}bit "
            f"prio {q}"
        )
    return lines + filter_lines(dev, queues)


def ovs_qos_commands(ref: str, rate_bps: float, queues: int, tag: str) -> list[list[str]]:
    """ovs-vsctl commands creating one linux-htb QoS row ``@ref`` and its queues, all tagged ``tag``.

    One QoS row per distinct link rate is shared by all ports of that rate (OVS builds a separate tc
    tree per port from it), which keeps a k=8 fat-tree at a handful of rows instead of thousands.
    """
    rate, floor = int(rate_bps), min_rate_bps(rate_bps)
    owner = f"external_ids:{OWNER_KEY}={tag}"
    queue_refs = ",".join(f"{q}=@{ref}q{q}" for q in range(queues))
    cmds = [[f"--id=@{ref}", "create", "QoS", "type=linux-htb", f"other_config:max-rate={rate}",
             f"queues={{{queue_refs}}}", owner]]
    for q in range(queues):
        cmds.append([f"--id=@{ref}q{q}", "create", "Queue", f"other_config:min-rate={floor}",
                     f"other_config:max-rate={rate}", f"other_config:priority={q}", owner])
    return cmds


def run_tc_batch(lines: Sequence[str], netns_pid: int | None = None) -> subprocess.CompletedProcess:
    """Run tc commands in one process (inside the namespace of ``netns_pid`` via mnexec if given)."""
    argv = ["tc", "-force", "-batch", "-"]
    if netns_pid is not None:
        argv = ["mnexec", "-a", str(netns_pid)] + argv
    return subprocess.run(argv, input="\n".join(lines) + "\n", text=True, capture_output=True, timeout=60)


def parse_filter_dump(text: str) -> list[tuple[str, set[tuple[int, int]]]]:
    """Split ``qdisc show``/``filter show`` batch output into per-device (qdisc kind, {(tos, class)})."""
    blocks: list[tuple[str, set[tuple[int, int]]]] = []
    flowid: int | None = None
    for line in text.splitlines():
        if line.startswith("qdisc ") and " root " in line:  # one root qdisc line per device
            parts = line.split()
            blocks.append((" ".join(parts[1:3]), set()))
            flowid = None
        elif blocks and "flowid 1:" in line:
            flowid = int(line.split("flowid 1:")[1].split()[0], 16)
        elif blocks and line.strip().startswith("match ") and flowid is not None:
            value = line.split()[1].split("/")[0]
            blocks[-1][1].add((int(value, 16) >> 16 & 0xFF, flowid))
            flowid = None
    return blocks


class FilterWatchdog:
    """Background thread that re-adds DSCP filters OVS dropped when it rebuilt a port's QoS."""

    def __init__(self, devs: Iterable[str], queues: int, interval_s: float = 0.5) -> None:
        self.devs = list(devs)
        self.queues = queues
        self.interval_s = interval_s
        self.reapplied = 0  # how many times filters had to be re-added (tests and logs read it)
        self._want = {(tos_for_queue(q), q + 1) for q in range(1, queues)}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def missing(self) -> list[str] | None:
        """Devices whose root is not an htb 1: with all DSCP filters (None if the dump failed)."""
        if not self.devs:
            return []
        status = self._status()
        if not status:
            return None
        return [dev for dev, (is_htb, complete) in status.items() if not (is_htb and complete)]

    def _status(self) -> dict[str, tuple[bool, bool]]:
        """dev -> (root is OVS's htb 1:, all filters present); {} if a device vanished mid-dump."""
        query = []
        for dev in self.devs:
            # NB: no "root" keyword: tc -batch keeps it as state and rejects the next `qdisc show`.
            query += [f"qdisc show dev {dev}", f"filter show dev {dev} parent 1:"]
        proc = run_tc_batch(query)
        blocks = parse_filter_dump(proc.stdout)
        if proc.returncode != 0 or len(blocks) != len(self.devs):
            return {}
        return {dev: (kind == "htb 1:", self._want <= have) for dev, (kind, have) in zip(self.devs, blocks)}

    def check_once(self) -> list[str]:
        """One pass: re-add filters where OVS's htb root exists without them; return those devices."""
        if not self.devs:
            return []
        fix: list[str] = []
        repaired = []
        for dev, (is_htb, complete) in self._status().items():
            if is_htb and not complete:
                fix += [f"filter del dev {dev} parent 1: prio 1"] + filter_lines(dev, self.queues)
                repaired.append(dev)
        if fix:
            run_tc_batch(fix)
            self.reapplied += len(repaired)
        return repaired

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="echelon-tc-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        wait_s = self.interval_s
        while not self._stop.wait(wait_s):
            started_s = time.monotonic()
            with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
                self.check_once()  # errors are transient (e.g. a port going away during stop): next tick
            # A pass grows with the square of the port count (every `tc qdisc show dev X` dumps all the
            # machine's qdiscs): ~2 s of CPU at k=8's 640 ports, which at a 0.5 s period took a whole
            # core from the fabric it guards.  Waiting DUTY_WAIT times the pass keeps it near 1/5 core.
            wait_s = max(self.interval_s, DUTY_WAIT * (time.monotonic() - started_s))
