"""Shared test fixtures.

Fabric tests need root, Open vSwitch and Mininet; browser tests need Debian's chromium, its chromedriver
and selenium (all installed by ``bootstrap.sh --test``).  Outside CI a machine without them skips those
tests with the reason; under ``CI=true`` a missing prerequisite is a failure, because a skipped
suite proves nothing.
"""

from __future__ import annotations

import os
import shutil

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


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
        pytest.skip(reason)


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
