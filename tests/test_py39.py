"""The core and the controller on Python 3.9 with Ryu 4.34 (what the Vagrant VM runs).

The VM cannot boot here, so this is the strongest check available on the build machine: a cached venv
(``.venv39``) made from Python 3.9 by ``vagrant/venv.sh`` with the VM's pinned packages, then

* every module of ``echelonflow/``, ``controller/`` and ``topologies/`` compiles and imports,
  and ``controller.compat`` falls back to Ryu (there is no os-ken in that venv);
* the fast pure unit tests of what the controller runs (rules, enforcement, routing, registry, the API's
  checks) pass under 3.9; the rest of the core's unit tests run on 3.11 only, where they would mostly
  time interpreted kernels: a call that only 3.10+ has is caught without 3.9 by
  ``test_sources_use_no_python310_calls``, and the kernels without numba by
  ``tests/test_reference_results.py``;
* ``ryu-manager`` 4.34 loads ``controller/app.py``, listens and speaks OpenFlow 1.3 (HELLO);
* (fabric) that ryu-manager controls a real Open vSwitch + Mininet fabric: hosts ping across switches.

Python 3.9 is found at ``$ECHELON_PYTHON39``, pyenv's 3.9.18 or ``python3.9`` on PATH.  The first run
installs (~15 s from PyPI), later runs reuse the venv (the script's stamp).  Outside CI a missing
Python 3.9 skips these tests; under ``CI=true`` it fails them.
"""

from __future__ import annotations

import ast
import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from controller.launcher import free_tcp_port
from tests.conftest import find_python39, need_python39

#: One xdist worker runs these (``tests/run``'s parallel pass uses ``--dist loadgroup``): the first builds
#: the venv, and a second worker would only wait for it on vagrant/venv.sh's lock.
pytestmark = pytest.mark.xdist_group("py39")
ROOT = Path(__file__).resolve().parent.parent
VENV39 = Path(os.environ.get("ECHELON_VENV39", str(ROOT / ".venv39")))
# Packages that must run on the VM's Python (docs/CONTRACTS.md, "Python and environment").
PY39_PACKAGES = ("echelonflow", "controller", "topologies", "cli")
# Pure unit tests of what the controller runs, fast under 3.9 (no Mininet, no os-ken, no simulations).
PURE_TESTS = (
    "test_workloads.py", "test_trace.py", "test_registry.py", "test_compat.py", "test_flowmods.py",
    "test_routing.py", "test_enforcement.py", "test_topology_spec.py", "test_enforcement_api.py",
)
# Slow under 3.9 (tens of seconds) and version-independent: the body-size limit of a 10,000-op batch.
PURE_DESELECT = ("test_enforcement_api.py::test_a_full_10000_operation_batch_fits_the_body_limit",)
# Modules that need Mininet at import (not in the Python 3.9 venv): compiled, but not imported.
NEEDS_MININET = ("topologies.mininet_topo",)


def run(argv: list[str], timeout_s: float = 300.0, **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, **kwargs)  # type: ignore[call-overload]


@pytest.fixture(scope="session")
def venv39() -> Path:
    """The cached Python 3.9 + Ryu 4.34 venv, made (or found up to date) by vagrant/venv.sh."""
    python39 = need_python39()
    result = run(["bash", str(ROOT / "vagrant" / "venv.sh"), "--python", python39, "--venv", str(VENV39),
                  "--with", "test"], timeout_s=900)
    assert result.returncode == 0, f"vagrant/venv.sh failed:\n{result.stderr[-3000:]}"
    return VENV39


def py_modules(package: str) -> list[str]:
    """Dotted names of every module in ``package`` (a top-level folder of the project; ``__main__``
    modules are left out: importing one runs the program)."""
    names = []
    for path in sorted((ROOT / package).rglob("*.py")):
        if path.name == "__main__.py":
            continue
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


# --------------------------------------------------------------------------- always (no 3.9 needed)
def test_sources_parse_with_python39_grammar() -> None:
    """Fallback layer that needs no Python 3.9: the 3.9 grammar (no ``match``, no parenthesised
    context managers) accepts every file of the packages the VM runs."""
    bad = []
    for package in PY39_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            try:
                ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=(3, 9))
            except SyntaxError as exc:
                bad.append(f"{path.relative_to(ROOT)}:{exc.lineno}: {exc.msg}")
    assert not bad, "not Python 3.9 syntax:\n" + "\n".join(bad)


#: Calls that parse under 3.9 but fail only when run there: (what, the check of a Call node).
_PY310_CALLS = (
    ("zip(..., strict=...) (3.10)",
     lambda call, name: name == "zip" and any(k.arg == "strict" for k in call.keywords)),
    ("isinstance/issubclass with X | Y (3.10)",
     lambda call, name: name in ("isinstance", "issubclass") and len(call.args) == 2
     and isinstance(call.args[1], ast.BinOp)),
    ("itertools.pairwise (3.10)", lambda call, name: name == "pairwise"),
    ("int.bit_count (3.10)", lambda call, name: name == "bit_count"),
    ("anext/aiter (3.10)", lambda call, name: name in ("anext", "aiter")),
    ("bisect with key= (3.10)",
     lambda call, name: name.startswith(("bisect", "insort")) and any(k.arg == "key" for k in call.keywords)),
    ("dataclass(slots=/kw_only=) (3.10)",
     lambda call, name: name == "dataclass" and any(k.arg in ("slots", "kw_only") for k in call.keywords)),
)


def python310_calls(source: str) -> list[tuple[int, str]]:
    """(line, what) of each call in ``source`` that Python 3.9 cannot make."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = getattr(func, "id", "") or getattr(func, "attr", "")
            found.extend((node.lineno, what) for what, check in _PY310_CALLS if check(node, name))
    return found


def test_sources_use_no_python310_calls() -> None:
    """What the 3.9 grammar lets through but a 3.9 interpreter refuses when the line runs (the unit
    tests that run under 3.9 reach only part of the code)."""
    bad = [f"{path.relative_to(ROOT)}:{line}: {what}"
           for package in PY39_PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
           for line, what in python310_calls(path.read_text(encoding="utf-8"))]
    assert not bad, "calls Python 3.9 does not have:\n" + "\n".join(bad)


def test_the_python310_call_check_finds_each_kind() -> None:
    source = """
import itertools, bisect
from dataclasses import dataclass
zip(a, b, strict=True)
isinstance(x, int | str)
itertools.pairwise(a)
(5).bit_count()
anext(it)
bisect.bisect_left(a, 3, key=len)
@dataclass(slots=True)
class A: pass
zip(a, b); isinstance(x, (int, str)); bisect.insort(a, 3); dataclass(frozen=True)
"""
    assert [line for line, _what in python310_calls(source)] == [4, 5, 6, 7, 8, 9, 10]


# --------------------------------------------------------------------------- under Python 3.9
@pytest.mark.slow
def test_venv39_has_the_vm_pins_and_a_rerun_changes_nothing(venv39: Path) -> None:
    freeze = run([str(venv39 / "bin" / "python"), "-m", "pip", "freeze", "--all"]).stdout.split()
    pins = {line.split("==")[0].lower(): line for line in
            (ROOT / "vagrant" / "requirements-vm.txt").read_text().split() if "==" in line}
    installed = {line.split("==")[0].lower(): line for line in freeze}
    assert installed["ryu"] == "ryu==4.34"
    assert installed["eventlet"] == "eventlet==0.30.2"
    assert installed["setuptools"].split("==")[1].split(".")[0] < "68"
    unpinned = sorted(line for name, line in installed.items() if pins.get(name) != line)
    assert not unpinned, f"installed but not pinned in vagrant/requirements-vm.txt: {unpinned}"

    stamp = venv39 / ".echelon-stamp"
    before = (stamp.stat().st_mtime_ns, sorted(os.listdir(venv39 / "lib" / "python3.9" / "site-packages")))
    again = run(["bash", str(ROOT / "vagrant" / "venv.sh"), "--python", find_python39(),
                 "--venv", str(venv39), "--with", "test"])
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stderr
    after = (stamp.stat().st_mtime_ns, sorted(os.listdir(venv39 / "lib" / "python3.9" / "site-packages")))
    assert after == before


@pytest.mark.slow
def test_packages_compile_under_python39(venv39: Path, tmp_path: Path) -> None:
    # PYTHONPYCACHEPREFIX keeps the 3.9 byte code out of the source tree.
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path))
    result = run([str(venv39 / "bin" / "python"), "-m", "compileall", "-q", *PY39_PACKAGES],
                 cwd=ROOT, env=env)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_modules_import_under_python39_and_compat_picks_ryu(venv39: Path, tmp_path: Path) -> None:
    modules = [m for p in PY39_PACKAGES for m in py_modules(p) if not m.startswith(NEEDS_MININET)]
    script = (
        "import importlib, sys, traceback\n"
        "bad = []\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception:\n"
        "        bad.append(name + ': ' + traceback.format_exc().strip().splitlines()[-1])\n"
        "print('\\n'.join(bad))\n"
        "from controller import compat\n"
        "print('FRAMEWORK=' + compat.FRAMEWORK, 'MANAGER=' + compat.MANAGER)\n"
    )
    result = run([str(venv39 / "bin" / "python"), "-c", script], cwd=ROOT,
                 env=dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path)))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == "FRAMEWORK=ryu MANAGER=ryu-manager", result.stdout
    failures = lines[:-1]
    assert not failures, "modules that do not import under Python 3.9:\n" + "\n".join(failures)
    assert "controller.app" in modules and "echelonflow.model" in modules


@pytest.mark.slow
def test_pure_unit_tests_pass_under_python39(venv39: Path, tmp_path: Path) -> None:
    present = [f"tests/{name}" for name in PURE_TESTS]
    missing = [path for path in present if not (ROOT / path).exists()]
    assert not missing, f"pure unit test files listed but missing: {missing}"
    deselect = [arg for name in PURE_DESELECT for arg in ("--deselect", f"tests/{name}")]
    result = run([str(venv39 / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  "-m", "not fabric", *deselect, *present], cwd=ROOT, timeout_s=900,
                 env=dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path)))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout.splitlines()[-1], result.stdout[-2000:]


@pytest.mark.slow
def test_ryu_manager_is_4_34(venv39: Path) -> None:
    result = run([str(venv39 / "bin" / "ryu-manager"), "--version"])
    assert result.returncode == 0, result.stderr
    assert (result.stdout + result.stderr).strip() == "ryu-manager 4.34"


def _openflow_hello(port: int, timeout_s: float = 5.0) -> bytes:
    """Send an OpenFlow 1.3 HELLO to ``port`` and return the first message header the controller sends."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(struct.pack("!BBHI", 4, 0, 8, 7))  # version 1.3, OFPT_HELLO, length 8, xid 7
        data = b""
        while len(data) < 8:
            chunk = sock.recv(8 - len(data))
            if not chunk:
                break
            data += chunk
        return data


@pytest.mark.slow
def test_ryu_manager_loads_the_app_and_speaks_openflow(venv39: Path, tmp_path: Path,
                                                       require_controller: None) -> None:
    """``ryu-manager controller/app.py`` (the README's VM command) starts, listens, answers HELLO."""
    app = ROOT / "controller" / "app.py"
    spec = tmp_path / "topology.json"
    spec.write_text('{"kind": "dumbbell", "params": {"hosts_per_side": 2}, "rate_bps": 10000000}\n')
    port = free_tcp_port()
    log_path = tmp_path / "ryu-manager.log"
    # Own registry store, token and API address: the machine defaults (/var/lib/echelon/registry.sqlite,
    # /run/echelon/token, port 8181) may hold another run's state (a store of another topology is refused).
    env = dict(os.environ, ECHELON_TOPOLOGY=str(spec), PYTHONPYCACHEPREFIX=str(tmp_path / "pyc"),
               ECHELON_STORE=str(tmp_path / "registry.sqlite"), ECHELON_TOKEN_FILE=str(tmp_path / "token"),
               ECHELON_API_PORT=str(free_tcp_port()), ECHELON_API_SOCKET=str(tmp_path / "api.sock"))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(venv39 / "bin" / "ryu-manager"), "--ofp-tcp-listen-port", str(port), str(app)],
            cwd=str(tmp_path), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 20
        header = b""
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                header = _openflow_hello(port)
                break
            except OSError:
                time.sleep(0.2)
        assert proc.poll() is None, f"ryu-manager exited {proc.returncode}: {log_path.read_text()[-3000:]}"
        assert len(header) == 8, f"no OpenFlow reply on port {port}: {log_path.read_text()[-3000:]}"
        version, msg_type, length, _xid = struct.unpack("!BBHI", header)
        assert (version, msg_type) == (4, 0), f"expected an OpenFlow 1.3 HELLO, got {header!r}"
        assert length >= 8
    finally:
        if proc.poll() is None:
            proc.terminate()  # this pid only
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    log = log_path.read_text()
    assert "loading app" in log and "app.py" in log, log[-3000:]
    assert "echelon app up (ryu)" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.fabric
@pytest.mark.slow
def test_ryu_manager_controls_a_real_fabric(venv39: Path, require_fabric: None) -> None:
    """The same app under ryu-manager 4.34 drives real OVS switches: hosts on both sides of a dumbbell
    reach each other, an enforcement primitive over the HTTP API is acknowledged by every switch, the
    controller logs no error.  (The launcher runs the 3.9 venv's ryu-manager via ``manager=``;
    everything else is the ordinary fabric + controller path.)"""
    from controller import launcher
    from echelonflow.topology import dumbbell
    from topologies.fabric import Fabric

    topo = dumbbell(10e6, hosts_per_side=2)
    port = free_tcp_port()
    with launcher.ControllerProcess(topo, ofp_port=port, manager=str(venv39 / "bin" / "ryu-manager")) as ctl:
        with Fabric(topo, controller_port=port) as fabric:
            ctl.wait_switches(timeout_s=30)
            dst_ip = topo.graph.nodes["h3"]["ip"]
            out = fabric.host("h1").cmd(f"ping -c 3 -W 2 -i 0.2 {dst_ip}")
            assert " 0% packet loss" in out, out
            match = {"src_ip": topo.graph.nodes["h1"]["ip"], "dst_ip": dst_ip, "src_port": 40001,
                     "dst_port": 5201}
            with ctl.client() as api:
                reply = api.enforce_install("py39", match, queue=1, rate_bps=5e6, wait_s=10)
                assert reply["enforcement"]["in_force"], reply
                assert api.enforcement()["py39"]["path"] == list(topo.path_for("h1", "h3", "py39"))
                assert api.enforce_remove("py39", wait_s=10)["enforcement"]["in_force"]
        log = ctl.current_log()
        problems = ctl.log_problems()
    assert "echelon app up (ryu)" in log, log[-3000:]
    assert not problems, "\n".join(problems)
