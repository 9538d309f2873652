"""Reads of a job that left memory: it is read back from the store, whole, into a registry of its own.

A done job leaves the registry's memory after its retention (``controller.retention``) but stays in the
store until the second, longer one; ``GET /v1/jobs/{job}`` and the reads below it still answer for it.
The job's rows are loaded into a fresh :class:`~controller.registry.Registry` without a store, so every
view (``controller.views``) reads it exactly as it reads a live job: its flows' paths, reference times
and states come out the same.  Nothing there can be changed: a write to an archived job is a 409.

A done EchelonFlow of a job that stays live leaves memory the same way (``controller.retention``): it is
read back likewise, its job's row with it, into a registry holding that EchelonFlow alone.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

from controller.registry import Registry
from echelonflow.model import qualified


def read_job(registry: Registry, job_id: str) -> Registry | None:
    """A read-only registry holding only the archived job ``job_id`` (None: the store has no such
    archived job, or the registry has no store)."""
    store = registry.store
    if store is None or not isinstance(job_id, str) or store.archived(job_id) is None:
        return None
    return Registry(registry.topology, loaded=store.load(job_id))  # type: ignore[attr-defined]


def read_echelon(registry: Registry, job_id: str, echelon_id: str) -> Registry | None:
    """A read-only registry holding the archived EchelonFlow ``echelon_id`` of the job ``job_id`` in
    memory (None: the store has no such archived EchelonFlow, or it is in memory)."""
    store = registry.store
    if (store is None or not isinstance(echelon_id, str) or qualified(job_id, echelon_id) in registry.echelons
            or store.archived_echelon(job_id, echelon_id) is None):
        return None
    return Registry(registry.topology, loaded=store.load(job_id, echelon_id))  # type: ignore[attr-defined]


def read_flow(registry: Registry, job_id: str, flow_id: str) -> Registry | None:
    """Likewise for the flow ``flow_id``: its archived EchelonFlow (None: no such archived flow)."""
    store = registry.store
    if store is None or not isinstance(flow_id, str) or qualified(job_id, flow_id) in registry.flows:
        return None
    echelon_id = store.archived_flow(job_id, flow_id)
    return None if echelon_id is None else read_echelon(registry, job_id, echelon_id)
