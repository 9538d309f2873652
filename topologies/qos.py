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
import json
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


def run_tc_batch(lines: Sequence[str], netns_pid: int | None = None,
                 json_output: bool = False) -> subprocess.CompletedProcess:
    """Run tc commands in one process (inside the namespace of ``netns_pid`` via mnexec if given).

    ``json_output`` (``tc -j``) prints each command's answer as one JSON array on its own line, empty
    ones included: the only per-command separator tc has, which is what lets the watchdog tell whose
    filters are whose without a per-device ``qdisc show`` between them.
    """
    argv = ["tc", "-force", "-batch", "-"]
    if json_output:
        argv.insert(1, "-json")
    if netns_pid is not None:
        argv = ["mnexec", "-a", str(netns_pid)] + argv
    return subprocess.run(argv, input="\n".join(lines) + "\n", text=True, capture_output=True, timeout=60)


def _first_wins(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """JSON object hook keeping a repeated key's first value (tc repeats ``match`` in one object)."""
    obj: dict[str, object] = {}
    for key, value in pairs:
        obj.setdefault(key, value)
    return obj


def parse_root_qdiscs(text: str) -> dict[str, str]:
    """``tc -json qdisc show`` of the whole namespace -> {device: "kind handle"} of each root qdisc.

    A device whose root tc does not list (e.g. the ``noop`` of a device that is down) is absent.
    """
    roots = (q for q in json.loads(text) if isinstance(q, dict) and q.get("root") and "dev" in q)
    return {q["dev"]: f"{q.get('kind')} {q.get('handle')}" for q in roots}


def parse_filters(text: str) -> set[tuple[int, int]]:
    """One ``tc -json filter show dev X parent 1:`` answer -> {(tos, htb minor)} of its u32 filters.

    Per filter the first match key's top byte (the TOS byte of a ``match ip dsfield``) and the
    ``flowid 1:N`` it sends to; u32's hash-table entries and filters to other majors are skipped.
    """
    found: set[tuple[int, int]] = set()
    for rule in json.loads(text, object_pairs_hook=_first_wins):
        options = rule.get("options", {}) if isinstance(rule, dict) else None
        if not isinstance(options, dict):
            raise ValueError(f"unexpected tc filter JSON: {str(rule)[:100]}")
        flowid, match = str(options.get("flowid", "")), options.get("match")
        if flowid.startswith("1:") and isinstance(match, dict) and "value" in match:
            found.add((int(match["value"], 16) >> 16 & 0xFF, int(flowid[2:], 16)))
    return found


def status_query(devs: Sequence[str]) -> list[str]:
    """``tc -json -batch`` lines of one watchdog pass: one whole-namespace qdisc dump, then per device
    its filters.  Linear in the port count: the kernel answers every qdisc dump, ``dev X`` or not, with
    all the namespace's qdiscs (tc filters by device in userspace), so one qdisc dump per device cost
    ports^2 (2 s a pass at k=8's 640 ports, docs/emulation.md); a filter dump reads only its device."""
    # NB: no "root" keyword: tc -batch keeps it as state and rejects the next `qdisc show`.
    return ["qdisc show"] + [f"filter show dev {dev} parent 1:" for dev in devs]


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


def legacy_status_query(devs: Sequence[str]) -> list[str]:
    """The quadratic text query (``qdisc show dev X`` + filters per device, :func:`parse_filter_dump`):
    only for a tc whose JSON cannot be parsed (older iproute2 printed u32 keys as text inside it)."""
    query = []
    for dev in devs:
        # NB: no "root" keyword: tc -batch keeps it as state and rejects the next `qdisc show`.
        query += [f"qdisc show dev {dev}", f"filter show dev {dev} parent 1:"]
    return query


def parse_status(text: str, devs: Sequence[str]) -> dict[str, tuple[str, set[tuple[int, int]]]]:
    """Output of :func:`status_query` -> {dev: (root "kind handle", {(tos, class)})}, in ``devs``
    order; {} unless every device has a root qdisc and a filter answer (one vanished mid-dump)."""
    lines = text.splitlines()
    if len(lines) != 1 + len(devs):
        return {}
    roots = parse_root_qdiscs(lines[0])
    if not all(dev in roots for dev in devs):
        return {}
    return {dev: (roots[dev], parse_filters(line)) for dev, line in zip(devs, lines[1:])}


class FilterWatchdog:
    """Background thread that re-adds DSCP filters OVS dropped when it rebuilt a port's QoS.

    ``netns_pid``: check devices in that process's network namespace instead of this one (the
    fabric's switch ports live in the root namespace; the tests use a namespace of their own).
    """

    def __init__(self, devs: Iterable[str], queues: int, interval_s: float = 0.5,
                 netns_pid: int | None = None) -> None:
        self.devs = list(devs)
        self.queues = queues
        self.interval_s = interval_s
        self.netns_pid = netns_pid
        self.reapplied = 0  # how many times filters had to be re-added (tests and logs read it)
        self.legacy = False  # True once this tc's JSON did not parse: text query from then on
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
        if not self.legacy:
            proc = run_tc_batch(status_query(self.devs), self.netns_pid, json_output=True)
            if proc.returncode != 0:
                return {}
            try:
                status = parse_status(proc.stdout, self.devs)
            except ValueError:
                self.legacy = True
            else:
                return {dev: (kind == "htb 1:", self._want <= have) for dev, (kind, have) in status.items()}
        proc = run_tc_batch(legacy_status_query(self.devs), self.netns_pid)
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
            run_tc_batch(fix, self.netns_pid)
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
            # A pass once grew with the square of the port count (2 s of CPU at k=8's 640 ports, a whole
            # core at a 0.5 s period); it is linear now (status_query), but the guard stays: waiting
            # DUTY_WAIT times the pass keeps the watchdog near 1/5 core whatever a pass costs.
            wait_s = max(self.interval_s, DUTY_WAIT * (time.monotonic() - started_s))
