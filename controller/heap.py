"""The controller's start-up heap kept out of the garbage collector's full collections.

Python's cyclic garbage collector now and then collects its oldest generation (once the objects that
survived into it grew by a quarter since the last such collection), and that collection visits every
container object of the process, inside whatever code happened to allocate: on the controller's one
eventlet hub, a scheduling round due meanwhile waits for it.  Most of those objects are the start-up's:
the modules, the topology and its paths, the scheduler's compiled kernels (numba and LLVM alone bring
over 100,000), the registry loaded from the store.  They live as long as the process, so scanning them
frees nothing, yet it is most of the work: a full collection took 31-55 ms of CPU on a controller grown
to 2,000 jobs, and one that came while the API was polled stalled a round 74-117 ms on a loaded machine
(docs/results.md, "Where a late round's delay comes from").  What starts one is growth in what lives
long (imports made late, tables that fill up); the retention of done jobs keeps the registry's own churn
from it, so it is rare, but each one scanned the whole start-up.

:func:`settle`, called once the controller has started (its first round done, so the kernels are
loaded), collects once and moves what survived to the permanent generation (``gc.freeze``): later full
collections scan only what was allocated since (0.4-4.4 ms of CPU on the same grown controller).  A
frozen object is still freed by reference counting when it is dropped (the registry's records hold no
cycles); only a reference cycle among frozen objects would stay.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

import gc
import logging

LOG = logging.getLogger("echelon.heap")


def settle() -> int:
    """Collect, then freeze every object that survived; returns (and logs) how many are frozen now."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    LOG.info("start-up heap settled: %d objects kept out of full garbage collections", frozen)
    return frozen
