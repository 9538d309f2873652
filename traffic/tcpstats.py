"""The kernel's TCP counters of this network namespace (``/proc/net/snmp``, ``/proc/net/netstat``).

Every Mininet host is its own namespace, so an agent reading them at its start and end gets exactly its
host's TCP story: segments sent and retransmitted, and why they were retransmitted (a timeout, fast
retransmit after duplicate acknowledgements, a tail-loss probe) or whether a timeout was spurious (the
segment was only delayed, e.g. queued behind more urgent classes).  The fluid model has none of this, so
a flow that lost its window to a timeout shows up here rather than as a mystery in its duration.
"""

from __future__ import annotations

from collections.abc import Mapping

#: (file, section, counter) read; the names are the kernel's.
COUNTERS = (
    ("snmp", "Tcp", "OutSegs"),
    ("snmp", "Tcp", "RetransSegs"),
    ("netstat", "TcpExt", "TCPTimeouts"),
    ("netstat", "TcpExt", "TCPSpuriousRTOs"),
    ("netstat", "TcpExt", "TCPFastRetrans"),
    ("netstat", "TcpExt", "TCPLossProbes"),
    ("netstat", "TcpExt", "TCPSlowStartRetrans"),
    ("netstat", "TcpExt", "TCPDSACKRecv"),
    ("netstat", "TcpExt", "TCPDSACKUndo"),
    ("netstat", "TcpExt", "TCPFullUndo"),
    ("netstat", "TcpExt", "TCPPartialUndo"),
    ("netstat", "TcpExt", "TCPLossUndo"),
    ("netstat", "TcpExt", "TCPSACKReorder"),
    ("netstat", "TcpExt", "TCPTSReorder"),
)


def parse_proc_table(text: str) -> dict[str, dict[str, int]]:
    """``/proc/net/snmp``-style text (pairs of "Section: names" / "Section: values" lines) as numbers."""
    out: dict[str, dict[str, int]] = {}
    lines = text.splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        section, _, name_part = names.partition(":")
        value_section, _, value_part = values.partition(":")
        if section != value_section:
            continue
        row = out.setdefault(section, {})
        for name, value in zip(name_part.split(), value_part.split()):
            try:
                row[name] = int(value)
            except ValueError:
                continue
    return out


def read_counters(proc_net: str = "/proc/net") -> dict[str, int]:
    """The :data:`COUNTERS` of the calling process's namespace (absent ones left out)."""
    tables = {}
    for name in {file for file, _, _ in COUNTERS}:
        try:
            with open(f"{proc_net}/{name}", encoding="ascii") as fh:
                tables[name] = parse_proc_table(fh.read())
        except OSError:
            tables[name] = {}
    return {counter: tables[file][section][counter] for file, section, counter in COUNTERS
            if counter in tables[file].get(section, {})}


def difference(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """What happened between two :func:`read_counters` readings."""
    return {name: after[name] - before[name] for name in after if name in before}
