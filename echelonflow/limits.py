"""How large a topology and a workload may be: checked before anything is built.

A fat-tree with k=1000 (250 million hosts) ran 48 s to a MemoryError, the controller asked for k=400
was still building after 20 s, and ``micro_batches: 1e9`` ended in a MemoryError too: each size was
only found too large by running out of memory.  These limits are checked from the parameters alone, so
such a request is one line and exit status 2 in milliseconds.  They sit far above what this project
runs (the largest bundled topology is the k=16 fat-tree: 1,024 hosts, 320 switches, 3,072 links; the
largest workload the whole FB2010 trace: 701,489 tasks, the largest job in it 21,025), and far below
what would exhaust this machine's memory (about 1.6 GB per 700,000 simulated tasks).

Input files have their own limit (``echelonflow.fileio``: 256 MiB, ``ECHELON_MAX_INPUT_MIB``).
Documented in docs/scenario-format.md, docs/trace-format.md and docs/controller-config.md.
"""

from __future__ import annotations

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
