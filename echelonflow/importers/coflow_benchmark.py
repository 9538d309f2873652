"""The Coflow-Benchmark trace format (github.com/coflow/coflow-benchmark) -> one job per coflow.

Format: line 1 is ``<ports> <coflows>``; then one line per coflow,
``<id> <arrival_ms> <#mappers> <mapper port>... <#reducers> <port>:<MB>...``, where a reducer's MB is what
it receives in total.  The trace logs shuffle sizes only at the reducers, so, as in the benchmark's own
simulator (CoflowSim), a reducer's bytes are split evenly over the coflow's mappers: one flow per
(mapper, reducer) pair.

Mapping onto this project's model:

* coflow ``id`` -> job ``id`` (the trace's id, verbatim), arriving at ``arrival_ms / 1000`` seconds; all
  its flows start at arrival (mappers are assumed done, as in CoflowSim) and form one Coflow
  (echelon ``shuffle``, kind ``coflow``), so the job's completion time is the coflow completion time;
* trace port p -> host ``h{p+1}`` (ports are numbered from 0, hosts from 1); the trace's model is one
  non-blocking switch of ``ports`` ports: the ``bigswitch`` topology;
* MB -> bytes with 1 MB = 2^20 bytes, as CoflowSim reads it.  The matching port rate is 1 Gbit/s =
  2^30 bit/s (CoflowSim's ``RACK_BITS_PER_SEC = 1024 * 1048576``), so a 1 MB flow takes exactly 1/128 s
  alone and completion times are comparable with the published CoflowSim results; with decimal units
  (10^9 bit/s) every time would be 7.4 % shorter (2^30 / 10^9 = 1.0737);
* a flow whose mapper and reducer share a port never crosses the switch (the ports are racks' uplinks):
  it is left out (FB2010: 4,911 of 706,397 flows, 0.7 % of the bytes).  A coflow left with no flow at
  all (FB2010: 3) becomes a job of one zero-second compute task on its reducer, so every coflow of the
  trace is a job and completes at its arrival.

CoflowSim's own arrival model, for comparisons with it (``benchmarks/coflowsim_compare.py``), is two
options (both off by default):

* ``ms_per_second=1024``: CoflowSim's second is 1,024 of the trace's milliseconds (its
  ``SIMULATION_SECOND_MILLIS``: the time a port takes to move 2^30 bits), so against the same port
  rate its coflows arrive 2.3 % closer together than ``arrival_ms / 1000`` puts them;
* ``admission_epoch_ms=10240``: CoflowSim admits coflows in batches at the start of each 10,240 ms
  epoch, every coflow that arrives within the epoch at once (one arriving in ``(kE, (k+1)E]`` starts
  at ``kE``; its CCT counts from there).  Coflows that arrive close together then compete from the
  same instant; on FB2010 this is what sets the short-wide coflows' CCTs (docs/baselines.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from echelonflow.errors import TraceError
from echelonflow.fields import FieldError, identifier, ranged, show
from echelonflow.fileio import read_text_bounded
from echelonflow.limits import MAX_HOSTS, SIZE_BYTES
from echelonflow.model import ComputeTask, FlowColumns, Job
from echelonflow.workloads.spec import split_bytes

BYTES_PER_MB = 2**20
#: CoflowSim's arrival model (module docstring): its second in trace milliseconds, its admission epoch.
COFLOWSIM_MS_PER_SECOND = 1024.0
COFLOWSIM_EPOCH_MS = 10240.0
#: The trace's port rate: 1 Gbit/s in CoflowSim's binary units (see the module docstring).
PORT_RATE_BPS = float(2**30)
ECHELON_ID = "shuffle"
_COFLOW_ID = identifier()
_SIZE = ranged(SIZE_BYTES, "a whole number of bytes")  # as the scenario words it
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what a count or a port may be


@dataclass(frozen=True)
class TraceSummary:
    """What an import kept and what it left out (for reports)."""

    ports: int
    coflows: int
    flows: int
    local_flows_dropped: int
    bytes_total: int
    bytes_dropped: int


def host_of(port: int) -> str:
    """Trace port p (from 0) -> host name ``h{p+1}``."""
    return f"h{port + 1}"


def load_coflow_benchmark(path: str | Path, ms_per_second: float = 1000.0,
                          admission_epoch_ms: float | None = None) -> list[Job]:
    """All coflows of the trace as jobs (module docstring); TraceError naming line and problem if bad."""
    return read_coflow_benchmark(path, ms_per_second, admission_epoch_ms)[0]


def arrival_s(arrival_ms: float, ms_per_second: float = 1000.0,
              admission_epoch_ms: float | None = None) -> float:
    """When a coflow arriving at ``arrival_ms`` starts (module docstring: CoflowSim's arrival model)."""
    if admission_epoch_ms is not None:
        arrival_ms = max(0, math.ceil(arrival_ms / admission_epoch_ms) - 1) * admission_epoch_ms
    return arrival_ms / ms_per_second


def read_coflow_benchmark(path: str | Path, ms_per_second: float = 1000.0,
                          admission_epoch_ms: float | None = None) -> tuple[list[Job], TraceSummary]:
    """The jobs and a summary of what was kept."""
    if not ms_per_second > 0 or (admission_epoch_ms is not None and not admission_epoch_ms > 0):
        raise ValueError(f"ms_per_second ({ms_per_second!r}) and admission_epoch_ms "
                         f"({admission_epoch_ms!r}) must be positive")
    source = str(path)
    text = read_text_bounded(path, "coflow trace", TraceError, encoding="ascii")
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise TraceError(f"{source} line 1: empty; expected '<ports> <coflows>'")
    header = lines[0].split()
    if len(header) != 2:
        raise TraceError(f"{source} line 1: expected '<ports> <coflows>', got {lines[0].strip()!r}")
    ports = _int(header[0], f"{source} line 1: ports", 1)
    if ports > MAX_HOSTS:  # one host per port: checked before the host names are made
        raise TraceError(f"{source} line 1: ports: {ports:,} ports, more than the {MAX_HOSTS:,} hosts a "
                         "topology may have (echelonflow/limits.py)")
    count = _int(header[1], f"{source} line 1: coflows", 1)
    body = [(n, line) for n, line in enumerate(lines[1:], start=2) if line.strip()]
    if len(body) != count:
        raise TraceError(f"{source}: the header announces {count} coflows, the file has {len(body)} lines")
    hosts = [host_of(p) for p in range(ports)]
    # one id string per (mapper, reducer) port pair for the whole trace: FB2010 repeats 21,462 pairs
    # over 700,000 flows; with the flows as columns (``FlowColumns``) its jobs take 17 MiB (tracemalloc;
    # docs/performance.md, "A trace's coflows as columns")
    flow_ids: dict[tuple[int, int], str] = {}
    jobs: list[Job] = []
    seen: set[str] = set()
    flows = dropped = bytes_total = bytes_dropped = 0
    for number, line in body:
        job, kept, local, local_bytes, total = _coflow(line.split(), hosts, f"{source} line {number}",
                                                       ms_per_second, admission_epoch_ms, flow_ids)
        if job.job_id in seen:
            raise TraceError(f"{source} line {number}: coflow {job.job_id!r}: duplicate coflow id")
        seen.add(job.job_id)
        jobs.append(job)
        flows, dropped = flows + kept, dropped + local
        bytes_total, bytes_dropped = bytes_total + total, bytes_dropped + local_bytes
    return jobs, TraceSummary(ports, len(jobs), flows, dropped, bytes_total, bytes_dropped)


def _coflow(tokens: list[str], hosts: list[str], where: str, ms_per_second: float,
            admission_epoch_ms: float | None,
            flow_ids: dict[tuple[int, int], str]) -> tuple[Job, int, int, int, int]:
    """One coflow line as a job; ``flow_ids`` (shared over the trace) keeps one id string per port pair."""
    if len(tokens) < 5:
        raise TraceError(f"{where}: expected '<id> <arrival_ms> <#mappers> <ports>... <#reducers> "
                         f"<port>:<MB>...', got {len(tokens)} fields")
    coflow_id = tokens[0]
    if "/" in coflow_id:
        raise TraceError(f"{where}: coflow id {show(coflow_id)} must not contain '/'")
    try:  # it becomes the job id, which follows the id rule
        _COFLOW_ID("coflow id", coflow_id)
    except FieldError as err:
        raise TraceError(f"{where}: {err}") from None
    where = f"{where}: coflow {coflow_id!r}"
    arrival_ms = _number(tokens[1], f"{where}: arrival_ms")
    n_mappers = _int(tokens[2], f"{where}: number of mappers", 1)
    if len(tokens) < 4 + n_mappers:
        raise TraceError(f"{where}: announces {n_mappers} mappers but the line ends after {len(tokens) - 3}")
    mappers = [_port(tokens[3 + i], hosts, f"{where}: mapper {i}") for i in range(n_mappers)]
    if len(set(mappers)) != n_mappers:
        raise TraceError(f"{where}: a mapper port is listed twice")
    n_reducers = _int(tokens[3 + n_mappers], f"{where}: number of reducers", 1)
    entries = tokens[4 + n_mappers:]
    if len(entries) != n_reducers:
        raise TraceError(f"{where}: announces {n_reducers} reducers but gives {len(entries)} port:MB entries")
    columns = FlowColumns(hosts, ECHELON_ID)  # one flow per (mapper, reducer) pair, none with dependencies
    job = Job(coflow_id, tasks=columns, arrival_s=arrival_s(arrival_ms, ms_per_second, admission_epoch_ms))
    job.echelon_kinds[ECHELON_ID] = "coflow"
    seen: set[int] = set()
    kept = local = local_bytes = total_bytes = 0
    for r, entry in enumerate(entries):
        port_text, sep, mb_text = entry.partition(":")
        if not sep:
            raise TraceError(f"{where}: reducer {r} entry {entry!r} is not PORT:MB")
        port = _port(port_text, hosts, f"{where}: reducer {r}")
        if port in seen:
            raise TraceError(f"{where}: reducer port {port} is listed twice")
        seen.add(port)
        megabytes = _number(mb_text, f"{where}: reducer {r} MB")
        total = round(megabytes * BYTES_PER_MB)
        if total < n_mappers:
            raise TraceError(f"{where}: reducer {r} receives {mb_text} MB, less than one byte per mapper")
        total_bytes += total
        for mapper, part in zip(mappers, split_bytes(total, n_mappers)):
            if mapper == port:
                local, local_bytes = local + 1, local_bytes + part
                continue
            flow_id = flow_ids.get((mapper, port))
            if flow_id is None:
                flow_id = flow_ids[(mapper, port)] = f"m{mapper}.r{port}"
            if part > SIZE_BYTES.high:  # beyond any flow's size, and beyond what a column holds
                try:
                    _SIZE(f"task {flow_id!r}: size_bytes", part)
                except FieldError as err:
                    raise TraceError(f"{where}: {err}") from None
            columns.append(flow_id, mapper, port, part)
            kept += 1
    if not kept:
        job.echelon_kinds.clear()
        job.tasks = {}
        job.add(ComputeTask("local-shuffle", hosts[mappers[0]], 0.0, (), "shuffle within one port"))
    return job, kept, local, local_bytes, total_bytes


def _int(text: str, where: str, minimum: int) -> int:
    if not _INTEGER.fullmatch(text):  # int() also takes 1_000 and other digits than ASCII ones
        raise TraceError(f"{where}: {show(text)} is not a whole number")
    if len(text) > 18:  # beyond what any count or port can be (and int() refuses 4,300 digits)
        raise TraceError(f"{where}: {show(text)} is out of range")
    value = int(text)
    if value < minimum:
        raise TraceError(f"{where}: must be at least {minimum}, got {value}")
    return value


def _number(text: str, where: str) -> float:
    try:
        if "_" in text:  # Python's float() reads 1_0 as 10; the format has no such number
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {show(text)} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise TraceError(f"{where}: must be a finite number >= 0, got {text!r}")
    return value


def _port(text: str, hosts: list[str], where: str) -> int:
    port = _int(text, f"{where} port", 0)
    if port >= len(hosts):
        raise TraceError(f"{where}: port {port} is outside the trace's ports 0..{len(hosts) - 1}")
    return port
