"""Hostile input through the real command line: one line, exit status 2, nothing half-written or lost.

Each table is a kind of input a user can get wrong (a path, an output folder, a result document), each
row one attack with the fragment its one-line message must hold.  ``cli.main.main`` runs in this process
(as ``echelon`` would), so a Python traceback is an exception escaping here and fails the row.  Nothing
here brings up a fabric: the emulate rows fail before one would start, and a guard makes sure of it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli.main import main

TOO_LONG = "x" * 5000  # longer than any file name or path Linux takes (ENAMETOOLONG)
TWO_HOSTS = {"kind": "two_hosts", "rate_mbps": 10}


def _one_line(capsys, argv: list[str]) -> str:
    """Run ``echelon ARGV``; its one stderr line after asserting exit status 2."""
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, (status, err)
    assert err.startswith("echelon: error: ") and err.count("\n") == 1, err
    return err


def _scenario(tmp_path: Path, jobs: list) -> str:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"topology": TWO_HOSTS, "jobs": jobs}))
    return str(path)


# ------------------------------------------------------------------ paths that cannot even be looked up
@pytest.mark.parametrize("argv, fragment", [
    # each of these raised OSError (File name too long) with a traceback from Path.is_file() or .exists()
    (lambda t: ["simulate", TOO_LONG], "scenario file xxxxxxxx"),
    (lambda t: ["simulate", f"/tmp/{TOO_LONG}.json"], "(5,010 characters): cannot use this path (File name"),
    (lambda t: ["simulate", _scenario(t, [{"trace": TOO_LONG}])], "jobs[0].trace: trace file "),
    (lambda t: ["simulate", _scenario(t, [{"trace": f"data:{TOO_LONG}"}])], "jobs[0].trace: data "),
    (lambda t: ["simulate", _scenario(t, [{"id": "c", "chakra": TOO_LONG, "hosts": ["h1", "h2"]}])],
     "jobs[0].chakra: Chakra trace "),
    (lambda t: ["simulate", _scenario(t, [{"trace": str(t / "loop")}])], "(Too many levels of symbolic"),
    (lambda t: ["simulate", str(t / "loop.json")], "loop.json: cannot use this path (Too many levels"),
    (lambda t: ["sweep", str(_grid(t, [TOO_LONG])), "--out", str(t / "out")],
     "scenarios[0]: scenario file "),
    # a folder where a trace belongs was said not to exist
    (lambda t: ["simulate", _scenario(t, [{"trace": str(t)}])], "is a folder, not a trace file"),
], ids=["scenario-name", "scenario-path", "trace", "data", "chakra", "trace-loop", "scenario-loop",
        "grid-scenario", "trace-folder"])
def test_paths_that_cannot_be_looked_up_are_one_line(tmp_path: Path, capsys, argv, fragment: str) -> None:
    os.symlink("loop", tmp_path / "loop")
    os.symlink("loop.json", tmp_path / "loop.json")
    err = _one_line(capsys, argv(tmp_path))
    assert fragment in err and len(err) < 600, err


def _grid(tmp_path: Path, scenarios: list[str], **fields) -> Path:
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"scenarios": scenarios, "schedulers": ["fair"], **fields}))
    return path
