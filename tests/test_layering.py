"""The house's layering: which top-level package may import which, and the core without the frameworks.

The core (``echelonflow/``: DAGs, EchelonFlows, schedulers, the topology; ``simulator/``) must import
and work on a machine with neither os-ken/Ryu nor Mininet, and no two top-level packages may import each
other (directly or round a longer loop), so each part can be read, tested and replaced from below.
Both checks read the real source tree: a new module or a new import is covered without editing this file.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx

from tests.helpers import PACKAGES

ROOT = Path(__file__).resolve().parent.parent
#: What each package may import besides itself.  The core imports nothing of ours; everything else
#: builds on it.  Anything not listed here is a layering change and should be decided, not drifted into.
ALLOWED = {
    "echelonflow": set(),
    "simulator": {"echelonflow"},
    "topologies": {"echelonflow"},
    "controller": {"echelonflow"},
    "reports": {"echelonflow"},
    # the agents' runtime: what runs inside a Mininet host talks to the controller's API client only
    "traffic": {"echelonflow", "controller"},
    # the orchestration: fabric, controller, agents, the simulator beside them, the reports after them
    "emulation": {"echelonflow", "simulator", "topologies", "controller", "traffic", "reports"},
    "cli": {"echelonflow", "simulator", "topologies", "controller", "traffic", "emulation", "reports"},
}
FRAMEWORKS = ("os_ken", "ryu", "mininet")
#: The controller's modules that need its framework at import: the os-ken/Ryu app and the one module
#: that imports the framework (compat), and the HTTP server on eventlet's hub.  Everything else of the
#: controller is pure and imports without them (tests and the agents' API client rely on that).
CONTROLLER_FRAMEWORK_MODULES = ("controller.app", "controller.compat", "controller.api_server")
#: Packages that are not parts of the system: the tests (a package so their conftest wins over a
#: dependency's own ``tests`` under Python 3.9) import anything.
NOT_PARTS = {"tests"}


def imported_packages(package: str) -> dict[str, set[str]]:
    """Our top-level packages imported anywhere in ``package`` (also inside functions) -> importing files."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in PACKAGES and top != package:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def dispatched_packages() -> dict[str, set[str]]:
    """The packages whose sub-command modules the CLI imports by name (``cli.main.COMMAND_MODULES``)."""
    from cli.main import COMMAND_MODULES

    return {name.split(".")[0]: {"cli/main.py"} for name in COMMAND_MODULES if not name.startswith("cli.")}


def test_every_package_is_covered():
    present = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} - NOT_PARTS
    assert present == set(PACKAGES), "a top-level package was added or removed: place it in ALLOWED"


def test_no_import_cycle_between_top_level_packages():
    graph = nx.DiGraph()
    graph.add_nodes_from(PACKAGES)
    unexpected = []
    for package in PACKAGES:
        found = imported_packages(package)
        if package == "cli":
            found.update(dispatched_packages())
        for target, files in found.items():
            graph.add_edge(package, target)
            if target not in ALLOWED[package]:
                unexpected.append(f"{package} -> {target} ({', '.join(sorted(files))})")
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"import cycles between packages: {cycles}"
    assert not unexpected, "imports across the layering:\n" + "\n".join(unexpected)


BLOCKER = f"""
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {FRAMEWORKS!r} + tuple(EXTRA_BLOCKED):
            raise ImportError("blocked by test_layering: " + name)
        return None

EXTRA_BLOCKED = []
sys.meta_path.insert(0, Block())
"""

WALK = BLOCKER + """
import pkgutil, importlib
packages = sys.argv[1].split(",")
skip = tuple(sys.argv[2].split(",")) if sys.argv[2] else ()
EXTRA_BLOCKED.extend(sys.argv[3].split(",") if len(sys.argv) > 3 and sys.argv[3] else [])
seen = []
for package in packages:
    module = importlib.import_module(package)
    seen.append(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if not info.name.startswith(skip):
            importlib.import_module(info.name)
            seen.append(info.name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {frameworks!r})
assert not loaded, loaded
print(len(seen))
""".replace("{frameworks!r}", repr(FRAMEWORKS))


def run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def count_modules(package: str, skip: tuple[str, ...] = ()) -> int:
    return sum(1 for p in (ROOT / package).rglob("*.py")
               if not any(str(p.relative_to(ROOT)).replace("/", ".").startswith(s) for s in skip))


def test_the_core_and_the_edges_import_without_os_ken_or_mininet():
    """Every module of the core, the simulator, the reports and the Mininet/OVS helpers imports with the
    frameworks blocked (only the Mininet Topo classes, which are Mininet subclasses, need it at load)."""
    packages = ("echelonflow", "simulator", "reports", "topologies")
    skip = ("topologies.mininet_topo",)
    proc = run_python(WALK, ",".join(packages), ",".join(skip))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) == sum(count_modules(p, skip) for p in packages)


def test_the_agents_runtime_and_the_emulation_import_without_os_ken_eventlet_or_mininet():
    """Every module of ``traffic/`` (what runs inside a Mininet host: standard library and our own code
    only) and of ``emulation/`` (Mininet is imported when a fabric starts, not before) imports with the
    frameworks and eventlet blocked, so ``echelon simulate`` and the agents never pay for them."""
    packages = ("traffic", "emulation")
    proc = run_python(WALK, ",".join(packages), "", "eventlet")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) == sum(count_modules(p) for p in packages)


def test_the_controllers_pure_modules_import_without_its_framework():
    """Every controller module but the app, compat and the eventlet server imports with os-ken, Ryu,
    Mininet and eventlet blocked: routing, enforcement, the registry, the service, the API and its client
    are tested and used (by agents, the launcher, the CLI) without a framework."""
    proc = run_python(WALK, "controller", ",".join(CONTROLLER_FRAMEWORK_MODULES), "eventlet")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) == count_modules("controller", CONTROLLER_FRAMEWORK_MODULES)


def test_every_controller_module_imports_with_its_framework():
    """The framework modules too, where the framework is installed (os-ken here; the Python 3.9 venv's
    Ryu under tests/test_py39.py): none of them fails at import for anything but a missing framework."""
    code = """
import importlib, pkgutil, sys
import controller
names = [info.name for info in pkgutil.walk_packages(controller.__path__, "controller.")]
for name in names:
    importlib.import_module(name)
print(len(names) + 1)
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) == count_modules("controller")


def test_a_fabric_without_mininet_says_so_in_one_line():
    code = BLOCKER + """
from echelonflow.topology import two_hosts
from topologies.fabric import Fabric, FabricError
try:
    Fabric(two_hosts(10e6), controller_port=None).start()
except FabricError as exc:
    print(exc)
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    message = proc.stdout.strip()
    assert "\n" not in message
    expected = "mininet Python module is not importable" if os.geteuid() == 0 else "needs root"
    assert expected in message, message
