"""The switches' own counters (ports and meters) as the controller last read them, and link rates.

The app asks every connected switch for its port and meter statistics each stats interval and hands the
decoded rows here; the metrics exporter publishes them (Faucet's ``of_port_*`` / ``of_meter_*``) and the
dashboard colours each link by the rate between the last two port samples.  A reply may come in several
multipart messages (``more`` set on all but the last); a switch's table is replaced only when the last
part arrived, so a meter that was deleted disappears and a half-received table is never shown.

Link rates come from the switch end of each link: a directed link ``a -> b`` is the transmit counter of
``a``'s port to ``b`` when ``a`` is a switch, else (a host sending) the receive counter of ``b``'s port
from ``a``.  The clock is passed in, so unit tests feed counters at chosen times.

Kept Python 3.9 compatible; no os_ken import (the app decodes the OpenFlow replies).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

from echelonflow.topology import DirectedLink, Topology


@dataclass(frozen=True)
class SwitchPortCounters:
    """One port's OpenFlow counters (``OFPPortStats`` fields)."""

    tx_packets: int = 0
    rx_packets: int = 0
    tx_bytes: int = 0
    rx_bytes: int = 0
    tx_dropped: int = 0
    rx_dropped: int = 0
    tx_errors: int = 0
    rx_errors: int = 0


@dataclass(frozen=True)
class MeterCounters:
    """One meter's OpenFlow counters; band counts are summed over its bands (ours have one DROP band)."""

    flow_count: int = 0
    byte_in_count: int = 0
    packet_in_count: int = 0
    byte_band_count: int = 0
    packet_band_count: int = 0


PORT_FIELDS = tuple(f.name for f in fields(SwitchPortCounters))
METER_FIELDS = tuple(f.name for f in fields(MeterCounters))


@dataclass(frozen=True)
class _Sample:
    at_s: float
    counters: SwitchPortCounters


class SwitchStats:
    """Latest port and meter tables per switch (by dpid), with the previous port sample for rates."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        nodes = topology.graph.nodes
        self.name_of_dpid = {nodes[s]["dpid"]: s for s in topology.switches}
        self._ports: dict[int, dict[int, tuple[_Sample | None, _Sample]]] = {}
        self._meters: dict[int, dict[int, MeterCounters]] = {}
        self._partial_ports: dict[int, dict[int, SwitchPortCounters]] = {}
        self._partial_meters: dict[int, dict[int, MeterCounters]] = {}

    # ------------------------------------------------------------------ feeding
    def record_ports(self, dpid: int, at_s: float, rows: dict[int, SwitchPortCounters],
                     more: bool = False) -> None:
        """One (part of a) port-stats reply; ports that lead nowhere in the topology are ignored."""
        name = self.name_of_dpid.get(dpid)
        if name is None:
            return
        known = {self.topology.port(name, nb) for nb in self.topology.graph.neighbors(name)}
        part = self._partial_ports.setdefault(dpid, {})
        part.update({no: c for no, c in rows.items() if no in known})
        if more:
            return
        table = self._ports.setdefault(dpid, {})
        for port_no, counters in self._partial_ports.pop(dpid).items():
            previous = table.get(port_no)
            table[port_no] = (None if previous is None else previous[1], _Sample(at_s, counters))

    def record_meters(self, dpid: int, rows: dict[int, MeterCounters], more: bool = False) -> None:
        """One (part of a) meter-stats reply; the last part replaces the switch's meter table."""
        if dpid not in self.name_of_dpid:
            return
        self._partial_meters.setdefault(dpid, {}).update(rows)
        if not more:
            self._meters[dpid] = self._partial_meters.pop(dpid)

    # ------------------------------------------------------------------ reading
    def ports(self) -> Iterator[tuple[int, str, int, str, SwitchPortCounters]]:
        """(dpid, switch name, port number, neighbour name, latest counters) for every known port."""
        for dpid in sorted(self._ports):
            name = self.name_of_dpid[dpid]
            for port_no, (_prev, latest) in sorted(self._ports[dpid].items()):
                neighbour = self.topology.neighbour_on_port(name, port_no) or ""
                yield dpid, name, port_no, neighbour, latest.counters

    def meters(self) -> Iterator[tuple[int, str, int, MeterCounters]]:
        """(dpid, switch name, meter id, counters) for every meter the switches reported last."""
        for dpid in sorted(self._meters):
            for meter_id, counters in sorted(self._meters[dpid].items()):
                yield dpid, self.name_of_dpid[dpid], meter_id, counters

    def link_rates_bps(self) -> dict[DirectedLink, float]:
        """Bits per second on each directed link between its last two samples (links seen twice only)."""
        out: dict[DirectedLink, float] = {}
        for a, b in self.topology.capacity_bps():
            if self.topology.graph.nodes[a]["kind"] == "switch":
                rate = self._port_rate(a, b, "tx_bytes")
            else:
                rate = self._port_rate(b, a, "rx_bytes")
            if rate is not None:
                out[(a, b)] = rate
        return out

    def _port_rate(self, switch: str, neighbour: str, field: str) -> float | None:
        dpid = self.topology.graph.nodes[switch]["dpid"]
        pair = self._ports.get(dpid, {}).get(self.topology.port(switch, neighbour))
        if pair is None or pair[0] is None:
            return None
        previous, latest = pair
        elapsed_s = latest.at_s - previous.at_s
        if elapsed_s <= 0:
            return None
        delta = getattr(latest.counters, field) - getattr(previous.counters, field)
        return max(0.0, delta * 8.0 / elapsed_s)  # a counter reset (switch restart) reads as 0
