"""docs/CONTRACTS.md names every module of the project's packages, and only modules that exist.

It is where a newcomer learns who owns what, so a module added without a line there (or removed while
its line stays) fails here.  The convention the test reads: in the "Layout" section each package has a
bullet starting with its folder (``- `echelonflow/```), naming its modules in backticks by their path
inside the package; a sub-bullet that starts with a sub-folder (``- `workloads/` ...``) names that
folder's modules by their own file names.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_layering import PACKAGES

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
