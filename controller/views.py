"""The registry's records as JSON-ready objects: what the HTTP API answers with, the live view and the
metrics show, and what tests compare (:func:`dump`).

Apart from ``controller.registry`` so the registry holds state and its rules only; how a record looks on
the wire is decided here, once (``docs/api.md`` documents these shapes).

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

from typing import Any

from controller.channels import ChannelRecord
from controller.registry import STATES, EchelonRecord, FlowRecord, JobRecord, Registry


def job_view(registry: Registry, job: JobRecord) -> dict[str, Any]:
    ids = [registry.echelons[key].echelon_id for key in registry.index.job_echelons[job.job_id]]
    view: dict[str, Any] = {"job_id": job.job_id, "weight": job.weight, "registered_s": job.registered_s,
                            "aborted_s": job.aborted_s, "echelons": ids}
    if job.compute_s is not None:  # declared (``crux`` reads it)
        view["compute_s"] = job.compute_s
    return view


def echelon_view(registry: Registry, ech: EchelonRecord, with_flows: bool = True) -> dict[str, Any]:
    view: dict[str, Any] = {"job_id": ech.job_id, "echelon_id": ech.echelon_id, "kind": ech.kind,
                            "reference_s": registry.reference_s(ech.key)}
    if with_flows:
        view["flows"] = [flow_view(registry, f) for f in registry.flows_of(ech.key)]
    return view


def flow_view(registry: Registry, flow: FlowRecord) -> dict[str, Any]:
    ref = registry.reference_s(flow.echelon_key)
    src_ip, dst_ip = registry.ips(flow)
    return {
        "job_id": flow.job_id, "flow_id": flow.flow_id, "echelon_id": flow.echelon_id,
        "src": flow.src, "dst": flow.dst, "src_ip": src_ip, "dst_ip": dst_ip,
        "src_port": flow.src_port, "dst_port": flow.dst_port,
        "size_bytes": flow.size_bytes, "expected_size_bytes": registry.expected_size_bytes(flow),
        "offset_s": flow.offset_s, "start_offset_s": flow.start_offset_s,
        "state": flow.state, "bytes_sent": flow.bytes_sent, "bytes_done_estimate": registry.bytes_done(flow),
        "start_s": flow.start_s, "finish_s": flow.finish_s,
        "ideal_finish_s": None if ref is None else ref + flow.offset_s,
        "path": list(registry.path_of(flow.key)), "channel_id": flow.channel_id,
    }


def channel_view(registry: Registry, channel: ChannelRecord) -> dict[str, Any]:
    return {"channel_id": channel.channel_id, "src": channel.src, "dst": channel.dst,
            "src_port": channel.src_port, "dst_port": channel.dst_port,
            "path": list(registry.channels.route(channel, registry.links)),
            "flow": registry.channels.flow_on(channel.channel_id)}


def dump(registry: Registry) -> dict[str, Any]:
    """Everything persistent, in a canonical form (tests compare dumps for 'unchanged')."""
    return {
        "jobs": [job_view(registry, j) for j in registry.jobs.values()],
        "echelons": [echelon_view(registry, e) for e in registry.echelons.values()],
        "channels": [channel_view(registry, c) for c in registry.channels.values()],
        "settings": dict(sorted(registry.settings.items())),
    }


def counts(registry: Registry) -> dict[str, int]:
    """How many jobs and EchelonFlows memory holds, and how many flows in each state (kept by the
    registry's index, not counted here: the health check costs nothing however many flows there are)."""
    return {"jobs": len(registry.jobs), "echelons": len(registry.echelons),
            **{state: registry.index.counts[state] for state in STATES}}
