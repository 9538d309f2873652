"""Record the simulator's results on every bundled scenario under every scheduler (regression fixtures).

Run: ``.venv/bin/python tests/reference/make_reference.py [SCENARIO...]`` (no argument: every one, and
the prefixes of ``PREFIX_JOBS``).  Writes
``tests/reference/<scenario>.json.gz``, one result document (``echelonflow.results`` shape) per bundled
scenario.  These files pin the simulator's output: ``tests/test_reference_results.py`` re-simulates each
scenario and requires every number to match (relative 1e-9), so a speed-up can never change a result
unnoticed.  Regenerate only when a change of *semantics* is intended, and say so in the commit.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from echelonflow.results import Results  # noqa: E402
from echelonflow.scenario import bundled_names, load_scenario  # noqa: E402
from echelonflow.schedulers import SCHEDULERS, get_scheduler  # noqa: E402
from simulator.engine import simulate  # noqa: E402

HERE = Path(__file__).resolve().parent
#: Bundled scenarios too large to re-simulate in every test run (the benchmarks time them instead).
TOO_BIG = {"fb2010": "706,397 flows: benchmarks/fb2010.py runs it"}
#: Too-big scenarios pinned on their first N jobs instead (``<name>-first<N>.json.gz``).
PREFIX_JOBS = {"fb2010": 10}


def reference_names() -> list[str]:
    return [name for name in bundled_names() if name not in TOO_BIG]


def prefix_file(name: str, first: int) -> str:
    return f"{name}-first{first}"


def record(name: str, first: int | None = None) -> Path:
    """Every scheduler on the scenario (only its first ``first`` jobs when given)."""
    scenario = load_scenario(name)
    jobs = scenario.jobs[:first] if first else scenario.jobs
    results = Results(scenario.name, "simulate")
    for sched in SCHEDULERS:
        results.runs.append(simulate(scenario.topology, jobs, get_scheduler(sched)))
    out = HERE / f"{prefix_file(name, first) if first else name}.json.gz"
    text = json.dumps(results.to_json_dict(), sort_keys=True, separators=(",", ":"))
    with gzip.GzipFile(out, "wb", mtime=0) as handle:  # mtime 0: same results, same bytes
        handle.write(text.encode())
    return out


def main() -> int:
    for name in sys.argv[1:] or reference_names():
        print(record(name))
    if not sys.argv[1:]:
        for name, first in PREFIX_JOBS.items():
            print(record(name, first))
    return 0


if __name__ == "__main__":
    sys.exit(main())
