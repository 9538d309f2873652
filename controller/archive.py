"""Reads of a job that left memory: it is read back from the store, whole, into a registry of its own.

A done job leaves the registry's memory after its retention (``controller.retention``) but stays in the
store until the second, longer one; ``GET /v1/jobs/{job}`` and the reads below it still answer for it.
The job's rows are loaded into a fresh :class:`~controller.registry.Registry` without a store, so every
view (``controller.views``) reads it exactly as it reads a live job: its flows' paths, reference times
and states come out the same.  Nothing there can be changed: a write to an archived job is a 409.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

from controller.registry import Registry


def read_job(registry: Registry, job_id: str) -> Registry | None:
    """A read-only registry holding only the archived job ``job_id`` (None: the store has no such
    archived job, or the registry has no store)."""
    store = registry.store
    if store is None or not isinstance(job_id, str) or store.archived(job_id) is None:
        return None
    return Registry(registry.topology, loaded=store.load(job_id))  # type: ignore[attr-defined]
