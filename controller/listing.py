"""The API's lists, a page at a time: which records a page of jobs, EchelonFlows, flows or channels holds.

Each function walks one of the registry's orders (``controller.registry_index``) from the page's cursor
(``controller.paging``), filters on the way, and stops one record past the page, so what a read costs
follows what it returns and what memory holds, never the controller's history.  Active flows are read
from the registry's set of active flows (live, so small), sorted by declaration.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from controller.paging import Cursor, OrderedKeys, page
from controller.registry import EchelonRecord, FlowRecord, JobRecord, Registry

JOBS, ECHELONS, FLOWS, CHANNELS = Cursor("jobs"), Cursor("echelons"), Cursor("flows"), Cursor("channels")


def _records(order: OrderedKeys, after: int, table: Mapping[str, Any]):
    return ((ordinal, key, table[key]) for ordinal, key in order.after(after))


def jobs(registry: Registry, limit: int, cursor: str | None) -> tuple[list[JobRecord], str | None]:
    order = registry.index.jobs
    return page(_records(order, JOBS.decode(cursor, order), registry.jobs), limit, JOBS)


def echelons(registry: Registry, limit: int, cursor: str | None, job_id: str | None = None,
             keep: Callable[[EchelonRecord], bool] | None = None) -> tuple[list[EchelonRecord], str | None]:
    """EchelonFlows (of one job), those ``keep`` accepts."""
    order = registry.index.echelons if job_id is None else registry.index.job_echelons[job_id]
    return page(_records(order, ECHELONS.decode(cursor, order), registry.echelons), limit, ECHELONS, keep)


def recent_echelons(registry: Registry, since_s: float, limit: int,
                    cursor: str | None) -> tuple[list[EchelonRecord], str | None]:
    """The EchelonFlows that started and have a flow not done or one done at or after ``since_s``
    (``controller.recent``), in the order they were registered."""
    order = registry.index.echelons
    after = ECHELONS.decode(cursor, order)
    keys = [key for key in registry.index.recent.recent(since_s) if registry.reference_s(key) is not None]
    numbered = sorted((order.ordinal(key), key) for key in keys)
    return page(((o, k, registry.echelons[k]) for o, k in numbered if o > after), limit, ECHELONS)


def flows(registry: Registry, limit: int, cursor: str | None, job_id: str | None = None,
          state: str | None = None) -> tuple[list[FlowRecord], str | None]:
    """Flows (of one job, in one state) in declaration order."""
    order = registry.index.flows if job_id is None else registry.index.job_flows[job_id]
    after = FLOWS.decode(cursor, order)  # a flow's ordinal is its seq, in every order of flows
    if state == "active" and job_id is None:
        live = sorted((registry.flows[key].seq, key) for key in registry.active_keys())
        return page(((seq, key, registry.flows[key]) for seq, key in live if seq > after), limit, FLOWS)
    keep = None if state is None else (lambda flow: flow.state == state)
    return page(_records(order, after, registry.flows), limit, FLOWS, keep)


def channels(registry: Registry, limit: int, cursor: str | None) -> tuple[list[Any], str | None]:
    """Channels in the order they were registered."""
    channels = registry.channels
    return page(_records(channels.order, CHANNELS.decode(cursor, channels.order), channels), limit, CHANNELS)
