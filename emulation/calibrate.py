"""``echelon emulate --dilation auto``: choose the time-dilation factor by measuring the fabric.

A factor is trustworthy when this machine forwards the scenario's fabric faithfully at the dilated link
rate.  The calibration asks the fabric itself: for each factor in turn (1, 2, 4, 8, 16: smallest first,
because every doubling doubles the emulation's wall-clock time), a fresh controller and a fresh fabric
of the dilated topology, then every host pair the scenario's flows use sends at once (one TCP stream
per pair, :mod:`traffic.loadgen`; hosts shaped at the link rate as in a run, so switch ports are
backlogged where streams share a link) for a few seconds while the fidelity monitor
(:mod:`emulation.monitor`) samples.  The first factor whose window the monitor trusts (busy ports at
>= 90 % of their rate, the machine not pegged, no switch ingress lag) and whose pairs got at least half
of their max-min fair rates is chosen.  All pairs at once is
more load than most moments of a training schedule, so the choice errs on the safe side; the
emulation's own monitor still judges every phase.

The numbers of every factor tried (the monitor document, the pairs' goodput) go into the run folder
(``calibration/calibration.json`` and ``calibration/monitor-x<F>.json``) and into results.json's
``dilation``.  See docs/emulation.md, "Time dilation".
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from controller.launcher import ControllerProcess, free_tcp_port, local_config
from echelonflow import ownership
from echelonflow.dilation import CALIBRATION_FACTORS, check_factor, dilate_topology
from echelonflow.errors import UserError
from echelonflow.fileio import write_json_atomic
from echelonflow.model import Job
from echelonflow.schedulers import kernels
from echelonflow.topology import Topology
from emulation.agents import REPO_ROOT, agent_env
from emulation.monitor import FidelityMonitor, Thresholds, sample_interval_s
from topologies import ovs
from topologies.fabric import Fabric

HostPair = tuple[str, str]

#: The calibration traffic must deliver at least this share of what max-min sharing of the dilated links
#: allows it.  Where the forwarding cannot keep up with the links at all (10 Gbit/s links on a
#: userspace datapath that forwards a few), no switch port backlogs, so the monitor has no busy port to
#: judge and would trust the factor on no evidence; the goodput says what the links never got.
DELIVERED_SHARE_MIN = 0.5


class CalibrationError(UserError):
    """No factor tried was trusted, or the calibration could not run; the message says which."""


@dataclass(frozen=True)
class CalibrationSettings:
    """How long and at which factors the calibration measures (defaults: ~10 s of traffic per factor)."""

    traffic_s: float = 8.0  # every pair sends this long
    settle_s: float = 2.0  # left out at the start of the judged window: slow start, queues filling up
    factors: tuple[float, ...] = CALIBRATION_FACTORS
    queues: int = 4
    base_port: int = 47000  # the receiver of pair i listens on base_port + i


def host_pairs(jobs: Sequence[Job]) -> list[HostPair]:
    """Every (sender, receiver) pair the jobs' flows use, once each, in a stable order."""
    return sorted({(flow.src, flow.dst) for job in jobs for flow in job.flows})


def trial_summary(factor: float, rate_bps: float, doc: dict[str, Any]) -> dict[str, Any]:
    """The few numbers of one factor's monitor document that decide it (the whole document is kept too)."""
    return {"factor": factor, "rate_bps": rate_bps, "trusted": bool(doc["trusted"]),
            "reasons": list(doc["reasons"]), "slow_link_share": doc["slow_link_share"],
            "busy_port_intervals": doc["busy_port_intervals"],
            "link_ratio_median": doc["link_ratio"]["median"], "link_ratio_min": doc["link_ratio"]["min"],
            "cpu_idle_median": doc["cpu_idle"]["median"], "saturated_share": doc["saturated_share"],
            "ovs_thread_busy_p90": doc["ovs_thread_busy"]["p90"], "lagging_share": doc["lagging_share"],
            "ingress_lag_max_s": doc["ingress_lag_s"]["max"]}


def fair_share_bps(topology: Topology, pairs: Sequence[HostPair]) -> dict[HostPair, float]:
    """Each pair's max-min fair rate (TCP payload bit/s) with one stream per pair on its route.

    The calibration's streams are unscheduled traffic, so they take ``Topology.pair_path``; the rates are
    the ``fair`` scheduler's progressive filling (``kernels.fair_decide``) over the links' wire rates,
    then the payload share of a full frame."""
    capacity = topology.capacity_bps()
    link_number = {link: i for i, link in enumerate(capacity)}
    path_ptr, path_links = [0], []
    for pair in pairs:
        path_links += [link_number[link] for link in topology.links_of(topology.pair_path(*pair))]
        path_ptr.append(len(path_links))
    rate = kernels.float_array([0.0] * len(pairs))
    kernels.fair_decide(kernels.int_array(range(len(pairs))), kernels.float_array([1.0e12] * len(pairs)),
                        kernels.int_array(path_ptr), kernels.int_array(path_links),
                        kernels.float_array(list(capacity.values())), rate, False)
    return {pair: float(r) * topology.payload_fraction for pair, r in zip(pairs, rate)}


def judge_delivery(doc: dict[str, Any], topology: Topology, pairs: Sequence[HostPair]) -> None:
    """Add the goodput's verdict to a factor's monitor document (``delivered_share``; a reason and
    ``trusted`` False when the pairs got less than :data:`DELIVERED_SHARE_MIN` of their fair rates)."""
    goodput = doc.get("goodput_bps")
    if goodput is None:
        return
    allowed_bps = sum(fair_share_bps(topology, pairs).values())
    delivered_bps = sum(v or 0.0 for v in goodput.values())
    share = delivered_bps / allowed_bps if allowed_bps > 0 else None
    doc["delivered_share"] = share
    if share is not None and share < DELIVERED_SHARE_MIN:
        doc["trusted"] = False
        doc["reasons"] = [*doc.get("reasons", []), (
            f"the pairs got {delivered_bps / 1e6:.0f} of the {allowed_bps / 1e6:.0f} Mbit/s that max-min "
            f"sharing of the links allows ({share:.0%}, below {DELIVERED_SHARE_MIN:.0%}): the forwarding, "
            f"not the links, set the pace")]


def calibrate(topology: Topology, jobs: Sequence[Job], progress: Callable[[str], None],
              logs_dir: str | None = None, settings: CalibrationSettings = CalibrationSettings(),
              measure: Callable[..., dict[str, Any]] | None = None) -> dict[str, Any]:
    """The smallest factor whose calibration traffic the fidelity monitor trusts, with the measurements:
    ``{"factor", "chosen_by": "calibration", "calibration": {"pairs", "traffic_s", "trials": [...]}}``.

    Raises :class:`CalibrationError` when no factor was trusted (the measurements are still written to
    ``logs_dir/calibration``).  ``measure`` (default :func:`measure_factor`) runs one factor.
    """
    measure = measure or measure_factor
    pairs = host_pairs(jobs)
    out_dir = os.path.join(logs_dir, "calibration") if logs_dir else None
    record: dict[str, Any] = {"pairs": [list(p) for p in pairs], "traffic_s": settings.traffic_s,
                              "settle_s": settings.settle_s, "trials": []}
    documents: dict[str, Any] = {}
    if not pairs:  # nothing crosses the fabric: nothing to forward, nothing to dilate
        return {"factor": 1.0, "chosen_by": "calibration", "calibration": record}
    for factor in settings.factors:
        factor = check_factor(factor)
        dilated = dilate_topology(topology, factor)
        progress(f"calibration x{factor:g}: {len(pairs)} host pairs sending at once over {dilated.name} at "
                 f"{dilated.rate_bps / 1e6:g} Mbit/s for {settings.traffic_s} s")
        doc = measure(dilated, pairs, settings, out_dir, factor)
        judge_delivery(doc, dilated, pairs)
        trial = trial_summary(factor, dilated.rate_bps, doc)
        trial["goodput_bps"] = doc.get("goodput_bps")
        trial["delivered_share"] = doc.get("delivered_share")
        record["trials"].append(trial)
        documents[f"x{factor:g}"] = doc
        if out_dir:  # the summaries plus every factor's whole monitor document
            os.makedirs(out_dir, exist_ok=True)
            write_json_atomic(os.path.join(out_dir, "calibration.json"), dict(record, monitor=documents))
        verdict = "trusted" if trial["trusted"] else "NOT trusted: " + "; ".join(trial["reasons"])
        progress(f"calibration x{factor:g}: {verdict} (busy port intervals {trial['busy_port_intervals']}, "
                 f"below 90 % of the rate {trial['slow_link_share']:.0%}, delivered "
                 f"{_pct(trial['delivered_share'])} of the fair rates, machine idle median "
                 f"{_pct(trial['cpu_idle_median'])})")
        if trial["trusted"]:
            return {"factor": factor, "chosen_by": "calibration", "calibration": record}
    where = f"; measurements in {out_dir}" if out_dir else ""
    share = trial.get("delivered_share")
    if share and share < DELIVERED_SHARE_MIN:  # the forwarding delivers about the same at any factor
        needed = trial["factor"] * DELIVERED_SHARE_MIN / share
        where += f"; at the goodput this machine forwarded, about x{needed:.0f} would be needed"
    raise CalibrationError(
        f"no time dilation up to x{settings.factors[-1]:g} made the fabric of {topology.name} forward "
        f"{len(pairs)} host pairs faithfully (x{settings.factors[-1]:g}: {'; '.join(trial['reasons'])})"
        f"{where}; give --dilation F by hand to run anyway (the fidelity monitor will mark the runs)")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def measure_factor(topology: Topology, pairs: Sequence[HostPair], settings: CalibrationSettings,
                   out_dir: str | None, factor: float) -> dict[str, Any]:
    """One factor on the real fabric: fresh controller and fabric of ``topology`` (already dilated),
    ``pairs`` sending at once, the fidelity monitor's document of the window after ``settle_s``.

    Everything started here (controller, fabric, traffic processes) is stopped before returning, also on
    errors and Ctrl-C; fabric or controller failures become :class:`CalibrationError`.
    """
    workdir = ownership.make_run_folder("cal")
    port = free_tcp_port()
    ctl = ControllerProcess(topology, local_config(queues=settings.queues), ofp_port=port,
                            workdir=tempfile.mkdtemp(prefix="ctl-", dir=workdir))
    # the emulation's own fabric: hosts shaped at the link rate, so senders offer what a run offers
    fabric = Fabric(topology, controller_port=port, queues=settings.queues,
                    tag=f"cal{os.getpid()}x{factor:g}")
    try:
        try:
            ctl.start()
            ownership.record_processes(workdir, ctl.pid)
            fabric.start()
            ctl.wait_switches(timeout_s=30)
        except Exception as exc:  # noqa: BLE001 (Mininet, OVS and the launcher raise assorted types)
            raise CalibrationError(f"calibration x{factor:g}: the fabric or controller did not start: "
                                   f"{' '.join(str(exc).split()) or type(exc).__name__}") from None
        for src, dst in pairs:  # ARP and reactive routes before the clock, as the emulation does
            fabric.host(src).cmd(f"ping -c 1 -W 2 {fabric.host(dst).IP()}")
        with contextlib.suppress(ovs.OvsError, OSError):  # without it: drops, seen as slow links
            ovs.ensure_tx_buffer()
        ports = fabric.switch_ports
        monitor = FidelityMonitor(ports, sample_interval_s(len(ports)), ctl.pid, Thresholds().dilated(factor))
        with monitor:
            goodput_bps, start_s = run_pairs(fabric, pairs, settings, workdir)
            end_s = time.time()
        # judged from settle_s after the last client started (starting 2 x pairs processes loads the
        # machine by itself) to the clients' end
        doc = monitor.report(window=(start_s + settings.settle_s, min(end_s, start_s + settings.traffic_s)))
        doc["goodput_bps"] = goodput_bps
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
            monitor.save_intervals(os.path.join(out_dir, f"monitor-x{factor:g}.json"))
        return doc
    finally:
        try:
            fabric.stop()
        finally:
            ctl.stop()
            shutil.rmtree(workdir, ignore_errors=True)


def run_pairs(fabric: Any, pairs: Sequence[HostPair], settings: CalibrationSettings,
              workdir: str) -> tuple[dict[str, float | None], float]:
    """One TCP stream per pair, all at once for ``settings.traffic_s`` (one :mod:`traffic.loadgen`
    process per host, pid recorded and stopped by it): each pair's received bits/s (None when it
    delivered nothing) and the streams' common start (epoch s)."""
    hosts = sorted({h for pair in pairs for h in pair})
    start_s = time.time() + 2.0 + 0.05 * len(hosts)  # every process up and listening before it
    specs: dict[str, dict[str, Any]] = {h: {"listen": [], "send": [], "seconds": settings.traffic_s,
                                            "start_at": start_s} for h in hosts}
    for index, (src, dst) in enumerate(pairs):
        port = settings.base_port + index
        specs[dst]["listen"].append(port)
        specs[src]["send"].append([fabric.host(dst).IP(), port])
    env = agent_env()
    procs: dict[str, Any] = {}
    try:
        for host, spec in specs.items():
            procs[host] = fabric.host(host).popen([sys.executable, "-m", "traffic.loadgen", json.dumps(spec)],
                                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                  stderr=subprocess.DEVNULL, cwd=REPO_ROOT, env=env)
        ownership.record_processes(workdir, *(p.pid for p in procs.values()))
        received: dict[str, Any] = {}
        for host, proc in procs.items():
            try:
                out, _err = proc.communicate(timeout=start_s - time.time() + settings.traffic_s + 40)
                received[host] = json.loads(out.decode() or "{}").get("received", {})
            except (subprocess.TimeoutExpired, ValueError):
                received[host] = {}
        goodput: dict[str, float | None] = {}
        for index, (src, dst) in enumerate(pairs):
            got = received.get(dst, {}).get(str(settings.base_port + index))
            ok = got and got["seconds"] > 0
            goodput[f"{src}->{dst}"] = got["bytes"] * 8 / got["seconds"] if ok else None
        return goodput, start_s
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
