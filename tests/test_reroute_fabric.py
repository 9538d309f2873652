"""Links going down under a real emulation (``echelon emulate --fault link:...``): every job completes,
the controller moves the flows, and the faults are marked in the run folder.

The same one level down, a link or a whole switch going down under one enforced TCP flow (the reroute
within 1 s, every byte arriving, the rules on the new path only), runs on tests/test_faults.py's fabric.
"""

from __future__ import annotations

import csv
import json
import re

import pytest

from cli.main import main
from tests.fabric_helpers import REROUTE_TARGET_S

pytestmark = [pytest.mark.fabric, pytest.mark.slow]


def test_emulate_with_link_faults_reroutes_and_completes(require_fabric, tmp_path, capsys):
    """``echelon emulate --fault``: two links go down (one comes back) under a real emulation; every job
    completes, the controller moved channels off the failed links, and the faults are marked where a
    reader looks: results.json, the printed table's notes, results.csv and fidelity.md."""
    run_dir = tmp_path / "run"
    faults = ["--fault", "link:a1-e1@1s", "--fault", "link:a2-c3@1.5s..3s"]
    code = main(["emulate", "fattree-gpipe-ring", "--scheduler", "echelon", "--no-alone", "--no-plots",
                 *faults, "--out", str(run_dir)])
    printed = capsys.readouterr()
    assert code == 0, printed.err[-500:]
    (run,) = json.loads((run_dir / "results.json").read_text())["runs"]
    assert [(f["target"], f["at_s"], f["up"]) for f in run["faults"]] == [
        (["a1", "e1"], 1.0, False), (["a2", "c3"], 1.5, False), (["a2", "c3"], 3.0, True)]
    assert sorted(run["jobs"]) == ["gpipe", "ring"] and not run.get("failed_jobs")
    words = "link a1-e1 down at 1 s; link a2-c3 down at 1.5 s; link a2-c3 up at 3 s"
    assert f"faults injected: {words} (runs: echelon)" in printed.out.splitlines(), printed.out[-2000:]
    with open(run_dir / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["mode"], r["faults"]) for r in rows} == {("emulate", words), ("simulate", "")}
    fidelity = (run_dir / "fidelity.md").read_text()
    assert "## Faults injected" in fidelity and f"- {words}: echelon" in fidelity
    (log,) = (run_dir / "logs" / "echelon").glob("*controller.log")
    moves = re.findall(r"link (\S+) (down|up) \(port \d+\); down now: .*; moved (\d+) enforced flows in "
                       r"([\d.]+) ms", log.read_text())
    moved = {(link, way): int(count) for link, way, count, _ms in moves if int(count)}
    assert any(link in ("a1-e1", "e1-a1") and way == "down" for link, way in moved), moves
    assert any(link in ("a2-c3", "c3-a2") and way == "down" for link, way in moved), moves
    assert any(link in ("a2-c3", "c3-a2") and way == "up" for link, way in moved), moves
    assert max(float(ms) for *_rest, ms in moves) < 1000 * REROUTE_TARGET_S
    print(f"\nemulation with link faults: {len(moved)} reroutes moved flows: {moved}")
