"""docs/CONTRACTS.md names every module of the project's packages, and only modules that exist; the
test tiers of docs/testing.md hold (a unit-tier test over its time budget fails, naming itself); no
function of the packages is over 80 lines or 8 parameters (the numba kernels aside), naming itself.

It is where a newcomer learns who owns what, so a module added without a line there (or removed while
its line stays) fails here.  The convention the test reads: in the "Layout" section each package has a
bullet starting with its folder (``- `echelonflow/```), naming its modules in backticks by their path
inside the package; a sub-bullet that starts with a sub-folder (``- `workloads/` ...``) names that
folder's modules by their own file names.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.conftest import TIERS, UNIT, over_budget, tier_markers
from tests.helpers import PACKAGES

ROOT = Path(__file__).resolve().parent.parent
CONTRACTS = ROOT / "docs" / "CONTRACTS.md"
#: Files every package has that say nothing a reader must look up (listing them is allowed).
UNLISTED = {"__init__.py", "__main__.py"}
_PY = re.compile(r"`([A-Za-z0-9_/]+\.py)`")


def layout_section(text: str) -> str:
    start = text.index("## Layout")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def listed_modules(section: str) -> dict[str, set[str]]:
    """package -> the module paths (inside the package) its bullet names."""
    listed: dict[str, set[str]] = {}
    package, folder = None, ""
    for line in section.splitlines():
        top = re.match(r"- `([a-z_]+)/`", line)
        sub = re.match(r"  - `([a-z_]+/)`", line)
        if top:
            package, folder = top.group(1), ""
        elif line.startswith("  - "):
            folder = sub.group(1) if sub else ""
        elif not line.startswith(" "):
            package, folder = (None, "") if line.strip() else (package, folder)
        if package is None:
            continue
        for name in _PY.findall(line):
            listed.setdefault(package, set()).add(name if "/" in name else folder + name)
    return listed


def modules_of(package: str) -> set[str]:
    base = ROOT / package
    return {str(path.relative_to(base)) for path in base.rglob("*.py")}


def test_every_module_is_listed_in_contracts_and_every_listed_module_exists():
    listed = listed_modules(layout_section(CONTRACTS.read_text(encoding="utf-8")))
    assert set(listed) == set(PACKAGES), "a package has no bullet in docs/CONTRACTS.md's Layout"
    for package in PACKAGES:
        present = modules_of(package)
        missing = sorted(m for m in present - listed[package] if Path(m).name not in UNLISTED)
        stale = sorted(listed[package] - present)
        assert not missing, f"{package}/: not in docs/CONTRACTS.md: {missing}"
        assert not stale, f"{package}/: docs/CONTRACTS.md names modules that do not exist: {stale}"


def test_the_reader_of_the_layout_finds_sub_folders_and_misses():
    section = """## Layout
- `pkg/` core: `a.py`, `b/c.py`;
  - first: `d.py` (with `e/`);
  - `sub/` things: `f.py`, `__init__.py`
- `other/` `g.py`
  and `h.py`

prose `i.py`
"""
    assert listed_modules(section) == {"pkg": {"a.py", "b/c.py", "d.py", "sub/f.py", "sub/__init__.py"},
                                       "other": {"g.py", "h.py"}}


# ---------------------------------------------------------------------------------------- test tiers
TESTING = ROOT / "docs" / "testing.md"

_TIER_PROBE = '''
import time

import pytest


def _burn(cpu_s):
    end = time.process_time() + cpu_s
    while time.process_time() < end:
        pass


def test_burns_cpu():
    _burn(0.6)


def test_sleeps():
    time.sleep(2.0)


@pytest.mark.slow
def test_slow_and_marked_so():
    _burn(0.6)


def test_in_the_controller_tier(require_controller):
    _burn(0.6)


def test_cheap():
    pass


@pytest.mark.reference
def test_full_size():
    pass
'''


def _run_probe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """pytest on ``_TIER_PROBE`` with this suite's conftest and a unit-tier budget of 0.3 s."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (tmp_path / "test_probe.py").write_text(_TIER_PROBE)
    env = dict(os.environ, ECHELON_UNIT_BUDGET_S="0.3",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", "no:xdist",
            "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)


def test_a_unit_tier_test_over_its_budget_fails_naming_itself(tmp_path):
    """The quick tier's time guard: a unit-tier test over its CPU budget (or idle for six times that
    of wall time) fails with its name and time; the same work marked ``slow`` or in another tier passes, and a
    reference test is left out unless asked for."""
    result = _run_probe(tmp_path)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "2 failed, 3 passed, 1 deselected" in out, out
    failed = sorted(line.split()[1] for line in out.splitlines() if line.startswith("FAILED"))
    assert failed == ["test_probe.py::test_burns_cpu", "test_probe.py::test_sleeps"], out
    assert "test_probe.py::test_burns_cpu is in the unit tier (tests/run --quick) but took 0." in out
    assert "s of wall time (only 0.0 s of CPU: waiting or sleeping?)" in out

    full = _run_probe(tmp_path, "--full", "-m", "reference")
    assert full.returncode == 0 and "1 passed, 5 deselected" in full.stdout, full.stdout


def test_a_starved_test_is_not_taken_for_an_idle_one():
    assert over_budget(cpu_s=2.0, wall_s=25.0) == ""  # ten-fold stretched by a busy machine: on CPU 8 %
    assert "waiting or sleeping" in over_budget(cpu_s=0.5, wall_s=65.0)
    assert "of CPU" in over_budget(cpu_s=10.5, wall_s=11.0)
    assert over_budget(cpu_s=30.0, wall_s=99.0, budget_s=0) == ""  # ECHELON_UNIT_BUDGET_S=0: off


def test_tiers_follow_the_fixtures_a_test_uses():
    assert tier_markers({"tmp_path"}, set()) == {"unit"}
    assert tier_markers({"fabric", "require_fabric"}, set()) == {"fabric"}
    assert tier_markers({"require_fabric", "require_controller"}, {"slow"}) == {"fabric", "controller",
                                                                               "slow"}
    assert tier_markers({"venv39"}, set()) == {"py39"}
    assert tier_markers({"require_browser"}, {"reference"}) == {"browser", "reference"}
    assert tier_markers(set(), {"parametrize"}) == {"unit"}


def test_every_tier_is_described_in_docs_testing():
    text = TESTING.read_text(encoding="utf-8")
    for marker in [*TIERS, UNIT]:
        assert f"`{marker}`" in text, f"docs/testing.md does not describe the tier marker {marker!r}"
    for command in ("tests/run --quick", "tests/run --full", "tests/run "):
        assert command in text, command


# ------------------------------------------------------------------------------ function size
#: The longest function (``def`` line to its last line) and the longest parameter list (``self``/``cls``
#: not counted; keyword-only ones counted; ``*args``/``**kwargs`` not) the project's packages may have.
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 8
#: The numba kernels take their arrays one by one (numba compiles functions of plain arrays).
KERNELS = "echelonflow/schedulers/*kernels*.py"
#: Known offenders, by ``path:qualified name`` -> why they are still allowed.  Shrink it; never grow it.
OVERSIZE_ALLOWED = {
    # a numba kernel outside the kernels' folder: its arrays come one by one, like KERNELS'
    "simulator/fluid.py:advance": "a numba kernel: its arrays one by one",
}


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every function of a module with its qualified name (``Class.method``, ``outer.inner``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def oversize(source: str) -> list[str]:
    """``name: why`` for each function of ``source`` over :data:`MAX_FUNCTION_LINES` lines or
    :data:`MAX_PARAMETERS` parameters."""
    found = []
    for name, node in _functions(ast.parse(source)):
        args = node.args
        params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        if params[:1] in (["self"], ["cls"]):
            params = params[1:]
        lines = node.end_lineno - node.lineno + 1
        if lines > MAX_FUNCTION_LINES:
            found.append(f"{name}: {lines} lines (at most {MAX_FUNCTION_LINES})")
        if len(params) > MAX_PARAMETERS:
            found.append(f"{name}: {len(params)} parameters (at most {MAX_PARAMETERS})")
    return found


def test_no_function_is_over_80_lines_or_8_parameters():
    """Every package, the tests and the benchmarks."""
    kernels = {path.relative_to(ROOT) for path in ROOT.glob(KERNELS)}
    found, allowed_seen = [], set()
    for package in (*PACKAGES, "tests", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative in kernels:
                continue
            for problem in oversize(path.read_text(encoding="utf-8")):
                key = f"{relative}:{problem.split(':')[0]}"
                if key in OVERSIZE_ALLOWED:
                    allowed_seen.add(key)
                else:
                    found.append(f"{relative}:{problem}")
    advice = "split into named steps, or group parameters into a settings object:\n"
    assert not found, advice + "\n".join(found)
    shrunk = set(OVERSIZE_ALLOWED) - allowed_seen
    assert not shrunk, f"allowed but no longer oversize (take them off OVERSIZE_ALLOWED): {sorted(shrunk)}"


def test_the_size_check_names_long_functions_and_long_parameter_lists():
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    source = (f"def long():\n{body}\n\n"
              "class C:\n    def many(self, a, b, c, d, e, f, g, *, h, i, **rest):\n        pass\n\n"
              "    def eight(self, a, b, c, d, e, f, g, h, *args):\n        def inner():\n            pass\n")
    assert oversize(source) == ["long: 81 lines (at most 80)", "C.many: 9 parameters (at most 8)"]


# ------------------------------------------------------------------------------ one name, one meaning
def test_no_two_classes_of_the_packages_share_a_name():
    """A class name means one thing across the packages (two ``RegistryError``s, one for a refused
    request and one for an unreachable registry, had a reader catch the wrong one)."""
    where: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, f"one class name, several classes: {shared}"


# ------------------------------------------------------------------------------ links between the docs
def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (lower case, punctuation dropped, spaces -> -)."""
    anchors = set()
    for line in text.splitlines():
        heading = re.match(r"#+ (.*)", line)
        if heading:
            anchors.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return anchors


def test_links_into_the_docs_name_headings_that_exist_and_carry_no_date():
    """A link's anchor names a heading of its file, and no date: a heading dated with its measurement
    changes name with the next one, and every link to it breaks silently."""
    problems = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*\.md)#([^)\s]+)\)", doc.read_text(encoding="utf-8")):
            linked = doc.parent / target
            where = f"{doc.relative_to(ROOT)} -> {target}#{anchor}"
            if not linked.exists():
                problems.append(f"{where}: no such file")
            elif anchor not in heading_anchors(linked.read_text(encoding="utf-8")):
                problems.append(f"{where}: no such heading")
            if re.search(r"\d{4}-\d{2}-\d{2}", anchor):
                problems.append(f"{where}: a dated anchor")
    assert not problems, "\n".join(problems)


def test_the_anchor_reader_follows_github():
    text = "# FB2010 against Sincronia's simulator\n## Core and simulator (`benchmarks/`)\n"
    assert heading_anchors(text) == {"fb2010-against-sincronias-simulator", "core-and-simulator-benchmarks"}


def test_no_test_module_imports_another_test_modules_helpers():
    """What two test modules share lives in a helper module (tests/helpers.py, tests/api_helpers.py,
    tests/controller_helpers.py, tests/instances.py, conftest), so editing a test never breaks another."""
    found = set()
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.test_"):
                found.add((path.stem, node.module.split(".", 1)[1]))
    assert not found, f"move shared helpers out of test modules: {sorted(found)}"
