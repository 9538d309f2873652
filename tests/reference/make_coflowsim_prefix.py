"""Record the first 100 FB2010 coflows' CCTs of the CoflowSim-matched baselines (a regression fixture).

Run: ``.venv/bin/python tests/reference/make_coflowsim_prefix.py`` after
``.venv/bin/python benchmarks/coflowsim_compare.py --coflowsim DIR --max-coflows 100`` has put
CoflowSim's own CCTs for the same coflows into ``benchmarks/results/coflowsim/results.json``.  Writes
``tests/reference/fb2010-first100-coflowsim.json``: our simulator's CCT per coflow for ``coflow``,
``coflow-static`` and ``fifo`` (coflow rule) and ``port-fair`` (exact rule), all with CoflowSim's
arrival model, beside CoflowSim's SEBF, FIFO and FAIR CCTs for the same coflows (numbers it printed, not
its code).
``tests/test_coflowsim_match.py`` re-simulates and compares.  Regenerate only when a change of these
baselines' semantics is intended, and say so in the commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.coflowsim_compare import PAIRS  # noqa: E402
from benchmarks.fb2010 import fb2010  # noqa: E402
from echelonflow.schedulers import get_scheduler  # noqa: E402
from simulator.engine import simulate  # noqa: E402

FIRST = 100
OUT = Path(__file__).resolve().parent / f"fb2010-first{FIRST}-coflowsim.json"


def simulate_prefix(name: str) -> dict[str, float]:
    """CCT per coflow that crosses the switch, first FIRST coflows, CoflowSim's arrivals."""
    scenario = fb2010(coflowsim_arrivals=True)
    jobs = scenario.jobs[:FIRST]
    result = simulate(scenario.topology, jobs, get_scheduler(name), check_invariants=False, alone_runs=False,
                      rescheduling=PAIRS[name][1])
    return {job.job_id: result.jobs[job.job_id].completion_s for job in jobs if job.flows}


def main() -> int:
    results_json = ROOT / "benchmarks/results/coflowsim/results.json"
    compared = json.loads(results_json.read_text())[f"{FIRST} coflows"]
    doc = {
        "provenance": (
            "ours: tests/reference/make_coflowsim_prefix.py (simulator.engine.simulate, first 100 coflows of "
            "fb2010 with CoflowSim's arrival model, no invariant checks, no alone runs); coflowsim: the CCTs "
            "CoflowSim (github.com/coflow/coflowsim, built with javac 17) printed for the same 100 coflows, "
            "as benchmarks/coflowsim_compare.py --max-coflows 100 recorded them, divided by its "
            "1,024-ms second"
        ),
        "rescheduling": {name: rule for name, (_, rule) in PAIRS.items()},
        "ours": {name: simulate_prefix(name) for name in PAIRS},
        "coflowsim": {policy: compared[name]["coflowsim"]["cct_s"] for name, (policy, _) in PAIRS.items()},
    }
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
