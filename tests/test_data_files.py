"""The data the project ships: found from the code, so a clone with nothing beside it reads its traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from echelonflow.data_files import data_dir, data_path, resolve_data
from echelonflow.errors import UserError

ROOT = Path(__file__).resolve().parent.parent

#: What a clone must be able to do with nothing beside it: the bundled fb2010 scenario's trace and a
#: Chakra sample, read from a working directory that is neither the clone nor its parent.
ALONE_SCRIPT = """
import json, sys
from echelonflow.data_files import data_dir
from echelonflow.scenario import load_scenario
from echelonflow.importers.chakra import read_chakra
from echelonflow.data_files import data_path
scenario = load_scenario("fb2010")
job, _ = read_chakra("pt", data_path("chakra/pytorch/chakra.0.et"), ["h1", "h2", "h3", "h4"])
print(json.dumps({"data": str(data_dir()), "coflows": len(scenario.jobs), "flows": len(job.flows)}))
"""


def test_the_data_folder_is_the_repository_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ECHELON_DATA", raising=False)
    assert data_dir() == ROOT / "data"
    assert data_path("coflow-benchmark/FB2010-1Hr-150-0.txt").stat().st_size > 100_000
    assert resolve_data("data:chakra/pytorch/chakra.0.et") == ROOT / "data/chakra/pytorch/chakra.0.et"
    assert resolve_data("traces/mine.txt") is None


def test_override_and_missing_data_name_the_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ECHELON_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    with pytest.raises(UserError, match=r"data 'coflow-benchmark/x.txt' is missing \(looked in "):
        data_path("coflow-benchmark/x.txt")
    monkeypatch.setenv("ECHELON_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match=r"\$ECHELON_DATA '.*nowhere' is not a folder"):
        data_dir()


def test_every_shipped_file_is_named_in_the_data_readme() -> None:
    readme = (ROOT / "data" / "README.md").read_text(encoding="utf-8")
    shipped = [p for p in (ROOT / "data").rglob("*") if p.is_file() and p.parent != ROOT / "data"]
    assert shipped
    for top in sorted({p.relative_to(ROOT / "data").parts[0] for p in shipped}):
        assert f"`{top}/" in readme, f"data/README.md says nothing of data/{top}/"


def test_a_clone_with_nothing_beside_it_reads_its_data(tmp_path: Path) -> None:
    """A local git clone alone in its folder, run from yet another working directory."""
    clone = tmp_path / "alone" / "echelonflow"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True,
                   capture_output=True, timeout=120)
    assert [p.name for p in clone.parent.iterdir()] == ["echelonflow"]  # nothing beside the clone
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ECHELON_DATA"}
    env["PYTHONPATH"] = str(clone)  # the clone's code, ahead of this checkout's editable install
    result = subprocess.run([sys.executable, "-c", ALONE_SCRIPT], cwd=elsewhere, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == {"data": str(clone / "data"), "coflows": 526, "flows": found["flows"]}
    assert found["flows"] > 0
