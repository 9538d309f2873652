"""Shared test fixtures.

Fabric tests need root, Open vSwitch and Mininet; browser tests need Debian's chromium, its chromedriver
and selenium (all installed by ``bootstrap.sh --test``).  Outside CI a machine without them skips those
tests with the reason; under ``CI=true`` a missing prerequisite is a failure, because a skipped
suite proves nothing.
"""

from __future__ import annotations

import os
import shutil
import signal

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"

# A suite started as a background job (``cmd &`` in a script) inherits SIGINT ignored, and so would
# every process the tests start; the tests of what Ctrl-C does need it delivered, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def fabric_missing_reason() -> str:
    """Why a real fabric cannot run here, or '' if it can."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ovs-vsctl", "ovs-ofctl", "mnexec", "tc", "ethtool"):
        if shutil.which(tool) is None:
            return f"needs {tool} on PATH"
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "needs the mininet Python module"
    return ""


def need(what: str, reason: str) -> None:
    """Skip because ``reason`` (outside CI), or fail (``CI=true``: a skipped suite proves nothing)."""
    if reason:
        if IN_CI:
            pytest.fail(f"CI=true but {what} cannot run: {reason}")
        pytest.skip(reason, allow_module_level=True)


def need_tool(name: str) -> str:
    """The path of the program ``name``, or skip (fail under ``CI=true``) because it is not installed."""
    path = shutil.which(name)
    need(name, "" if path else f"{name} is not installed (bash bootstrap.sh --test installs it)")
    return path or ""


#: Where this project's machines keep a Python 3.9 (pyenv's), besides $ECHELON_PYTHON39 and PATH.
PYTHON39_CANDIDATES = ("/root/.pyenv/versions/3.9.18/bin/python3.9",)


def find_python39() -> str:
    """A Python 3.9 interpreter ($ECHELON_PYTHON39, pyenv's 3.9.18 or python3.9 on PATH), or ''."""
    candidates = [os.environ.get("ECHELON_PYTHON39", ""), *PYTHON39_CANDIDATES,
                  shutil.which("python3.9") or ""]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), "")


def need_python39() -> str:
    """A Python 3.9 interpreter, or skip (fail under ``CI=true``)."""
    python39 = find_python39()
    need("Python 3.9", "" if python39 else "no Python 3.9 interpreter (set ECHELON_PYTHON39)")
    return python39


@pytest.fixture(scope="session")
def require_fabric() -> None:
    need("the fabric", fabric_missing_reason())


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def browser_missing_reason() -> str:
    """Why a real browser cannot run here, or '' if it can."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"needs {path} (Debian's chromium and chromium-driver; bootstrap.sh --test installs them)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "needs selenium in the venv (bootstrap.sh --test installs it)"
    return ""


@pytest.fixture(scope="session")
def require_browser() -> None:
    need("the browser", browser_missing_reason())
