"""The one module that imports the controller's framework picks os-ken or Ryu, and the rest agrees."""

from __future__ import annotations

from controller import compat


def test_compat_loads_one_framework_consistently():
    """os-ken where it is installed (this machine), ryu 4.34 otherwise (the VM, the Python 3.9 venv)."""
    expected = {"os_ken": ("osken-manager", "OSKenApp"), "ryu": ("ryu-manager", "RyuApp")}
    assert compat.FRAMEWORK in expected
    manager, base = expected[compat.FRAMEWORK]
    assert manager == compat.MANAGER
    assert compat.BaseApp.__name__ == base
    assert compat.ofproto_v1_3.OFP_VERSION == 4
