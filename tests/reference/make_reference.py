"""Record the simulator's results on every bundled scenario under every scheduler (regression fixtures).

Run: ``.venv/bin/python tests/reference/make_reference.py [SCENARIO...]``.  Writes
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


def reference_names() -> list[str]:
    return [name for name in bundled_names() if name not in TOO_BIG]


def record(name: str) -> Path:
    scenario = load_scenario(name)
    results = Results(scenario.name, "simulate")
    for sched in SCHEDULERS:
        results.runs.append(simulate(scenario.topology, scenario.jobs, get_scheduler(sched)))
    out = HERE / f"{name}.json.gz"
    text = json.dumps(results.to_json_dict(), sort_keys=True, separators=(",", ":"))
    with gzip.GzipFile(out, "wb", mtime=0) as handle:  # mtime 0: same results, same bytes
        handle.write(text.encode())
    return out


def main() -> int:
    for name in sys.argv[1:] or reference_names():
        print(record(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
