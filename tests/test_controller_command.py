"""``echelon controller``: a bad topology is one line and exit status 2, before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

def test_command_bad_topology_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "cli", "controller", "--k", "3"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "echelon: error: fat-tree k must be an even integer >= 2, got 3"
