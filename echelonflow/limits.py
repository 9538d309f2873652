"""How large a topology and a workload may be: checked before anything is built.

A fat-tree with k=1000 (250 million hosts) ran 48 s to a MemoryError, the controller asked for k=400
was still building after 20 s, and ``micro_batches: 1e9`` ended in a MemoryError too: each size was
only found too large by running out of memory.  These limits are checked from the parameters alone, so
such a request is one line and exit status 2 in milliseconds.  They sit far above what this project
runs (the largest bundled topology is the k=16 fat-tree: 1,024 hosts, 320 switches, 3,072 links; the
largest workload the whole FB2010 trace: 701,489 tasks, the largest job in it 21,025), and far below
what would exhaust this machine's memory (about 1.6 GB per 700,000 simulated tasks).

Input files have their own limit (``echelonflow.fileio``: 256 MiB, ``ECHELON_MAX_INPUT_MIB``).
Every number read anywhere falls in one of the ranges at the end (:class:`Range`), the one table the
scenario, trace, grid and result readers and the controller's API share.
Documented in docs/scenario-format.md, docs/trace-format.md and docs/controller-config.md.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Hosts of one topology (a k=40 fat-tree has 16,000; k=16, the largest bundled, 1,024).
MAX_HOSTS = 16_384
#: Switches of one topology (k=40: 2,000).
MAX_SWITCHES = 16_384
#: Links (each one cable, both directions) of one topology (k=40: 48,000).
MAX_LINKS = 65_536
#: Tasks (compute and flows) one generated job may have.
MAX_TASKS_PER_JOB = 1_000_000
#: Tasks of all jobs of one scenario together (FB2010, all 526 coflows: 701,489).
MAX_TASKS_PER_SCENARIO = 4_000_000


# ------------------------------------------------------------------------------------ ranges
@dataclass(frozen=True)
class Range:
    """The values one kind of number may take wherever the project reads it: ``low`` to ``high``
    (``low`` itself excluded when ``above``; whole numbers only when ``whole``).
    ``echelonflow.fields.ranged`` turns one into a field check."""

    low: float
    high: float
    above: bool = False
    whole: bool = False


#: THE table of ranges: every number read from a scenario, trace, topology spec, sweep grid, result
#: document, API request or command line falls in one of these kinds (docs/scenario-format.md,
#: "Ranges").  Outside them the simulator's arithmetic stops meaning anything (a weight of 1e308 makes
#: the objective infinite; a rate of 1e-3 bit/s moves less per step than a double can count), so such a
#: value is one line naming the field, not a run that hangs or prints ``Infinity``.
#:
#: Times in seconds: compute durations, job arrivals, ideal-finish offsets, fault times (one week: far
#: beyond a training iteration; the FB2010 trace spans about an hour).
SECONDS = Range(0.0, 7 * 24 * 3600.0)
#: Flow sizes in bytes (1 PB: anything bigger is a unit mistake, not a training flow).
SIZE_BYTES = Range(1, 10**15, whole=True)
#: Link rates and enforced rates in bit/s (1 kbit/s to 1 Tbit/s; links above an oversubscribed layer too).
RATE_BPS = Range(1e3, 1e12)
#: A job's weight in the objective (Eq. 4).
WEIGHT = Range(0.0, 1e6, above=True)
#: How much slower the links above a fat-tree's edge or a leaf-spine's leaf layer run.
OVERSUBSCRIPTION = Range(1.0, 1000.0)
#: ``echelon emulate --dilation F``: the factor a scenario is slowed down by (``auto`` tries 1 to 16).
DILATION = Range(1.0, 64.0)
#: Timing noise in milliseconds (``--timing-noise-ms``, a sweep grid's ``timing_noise_ms``).
NOISE_MS = Range(0.0, 10_000.0)
#: Cells of one sweep grid (scenarios x parameter combinations x noise samples x schedulers), counted
#: before any is built: 10^7 cells took 4.3 GB and 25 s just to list; each cell is a whole simulation,
#: so a grid this large already means days of computing.
MAX_SWEEP_CELLS = 100_000
