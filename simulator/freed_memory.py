"""Hand the C heap's freed pages back to the system, once a large run is built and as it runs.

Building a run from a trace allocates and frees hundreds of megabytes of short-lived Python objects and
arrays (the jobs' rows, the columns before they are put in the scheduler's order).  glibc's ``malloc``
keeps freed heap memory for reuse, and raises its threshold for serving large blocks from ``mmap``
once such a block is freed, so the build's transients stayed resident: on FB2010's hour 33 MiB of the
388 MiB the process held once the run was built.  ``malloc_trim(0)`` returns them before the run's
state is allocated (docs/performance.md, "Memory at trace scale").  The decisions then allocate and
free arrays sized by the active flows, which the heap kept fragmented (49 MiB free inside it at the
end of sincronia's hour), so the run trims every ``engine.TRIM_EVERY_DECISIONS`` decisions too
("Memory in the run").  Where the C library has no ``malloc_trim`` (not glibc) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _libc() -> Any | None:
    name = ctypes.util.find_library("c")
    try:
        library = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return library if library is not None and hasattr(library, "malloc_trim") else None


def return_freed_memory() -> bool:
    """Give the heap's free pages back to the system; True if the C library could (glibc)."""
    library = _libc()
    if library is None:
        return False
    library.malloc_trim(0)
    return True
