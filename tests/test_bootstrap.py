"""``bootstrap.sh`` installs the project into the virtualenv only when its stamp says it must.

The stamp (``.echelon-stamp``) names the extras installed and a digest of ``pyproject.toml``.  A
virtualenv set up for the tests (``tests/run``) holds everything the runtime needs, so ``./echelon demo``
after it installs nothing; a runtime-only one gets the test extras when ``--test`` asks for them; a
changed ``pyproject.toml`` installs again.  The real script runs here as root against a virtualenv whose
``python`` only records how it was called, so what bootstrap decided is read from those calls (the
Debian packages are the machine's: ``tests/run`` installed them before any test runs).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import need, need_tool

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = "controller,experiments,fast,sweep"
#: the virtualenv's ``python``: appends its arguments to ``calls.log`` beside ``bin/``
RECORDING_PYTHON = '#!/bin/sh\necho "$*" >> "$(dirname "$0")/../calls.log"\n'


def _pyproject_digest() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]


def _stamped_venv(tmp_path: Path, stamp: str) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(RECORDING_PYTHON)
    python.chmod(0o755)
    (venv / ".echelon-stamp").write_text(stamp + "\n")
    return venv


def _bootstrap(venv: Path, *args: str) -> list[str]:
    """Run bootstrap.sh on ``venv``; returns the calls its ``python`` got, one string each."""
    need("bootstrap.sh", "" if os.geteuid() == 0 else "bootstrap.sh runs as root")
    need_tool("dpkg-query")
    done = subprocess.run(["bash", str(ROOT / "bootstrap.sh"), *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, ECHELON_VENV=str(venv)))
    assert done.returncode == 0, done.stderr[-2000:]
    log = venv / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("extras", [RUNTIME, RUNTIME + ",test"])
def test_a_virtualenv_stamped_for_the_runtime_or_the_tests_serves_the_runtime_as_it_is(tmp_path, extras):
    stamp = f"{extras} {_pyproject_digest()}"
    venv = _stamped_venv(tmp_path, stamp)
    assert _bootstrap(venv) == ["-m simulator.precompile"]
    assert (venv / ".echelon-stamp").read_text().strip() == stamp


def test_the_tests_ask_a_runtime_virtualenv_for_the_test_extras(tmp_path):
    venv = _stamped_venv(tmp_path, f"{RUNTIME} {_pyproject_digest()}")
    calls = _bootstrap(venv, "--test")
    assert f"-m pip install -q -e {ROOT}[{RUNTIME},test]" in calls, calls
    assert calls[-1] == "-m simulator.precompile"
    assert (venv / ".echelon-stamp").read_text().strip() == f"{RUNTIME},test {_pyproject_digest()}"


def test_a_changed_pyproject_installs_again(tmp_path):
    venv = _stamped_venv(tmp_path, f"{RUNTIME},test {'0' * 16}")
    calls = _bootstrap(venv)
    assert f"-m pip install -q -e {ROOT}[{RUNTIME}]" in calls, calls
    assert (venv / ".echelon-stamp").read_text().strip() == f"{RUNTIME} {_pyproject_digest()}"


def test_the_set_up_and_test_scripts_are_shellcheck_clean():
    """The scripts a newcomer runs first (the VM's have their own check in test_vagrant.py)."""
    shellcheck = need_tool("shellcheck")
    scripts = [str(ROOT / name) for name in ("bootstrap.sh", "echelon", "tests/run", ".ci/run")]
    done = subprocess.run([shellcheck, "--severity=style", *scripts], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
