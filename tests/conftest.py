"""Shared test fixtures.

Fabric tests need root, Open vSwitch and Mininet.  Outside CI a machine without them skips those
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


@pytest.fixture(scope="session")
def require_fabric() -> None:
    reason = fabric_missing_reason()
    if reason:
        if IN_CI:
            pytest.fail(f"CI=true but the fabric cannot run: {reason}")
        pytest.skip(reason)
