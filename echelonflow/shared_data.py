"""Where the shared data sets live: ``../shared/data`` next to the repository, never copied into it.

Traces used by tests and experiments (the Coflow-Benchmark trace, Chakra samples) are read in place.  The
folder is found, in this order: the ``ECHELON_SHARED_DATA`` environment variable; ``../shared/data``
relative to the repository root; and, when the repository is a git worktree (``.git`` is a file naming
the main checkout's git folder), ``../shared/data`` relative to the main checkout.  Scenario files name
such data as ``"../shared/data/..."`` and :func:`resolve_shared` turns that into a real path.
"""

from __future__ import annotations

import os
from pathlib import Path

from echelonflow.errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent
PREFIX = "../shared/data/"
ENV = "ECHELON_SHARED_DATA"


def _candidates() -> list[Path]:
    found = []
    if os.environ.get(ENV):
        found.append(Path(os.environ[ENV]))
    found.append(REPO_ROOT.parent / "shared" / "data")
    dot_git = REPO_ROOT / ".git"
    if dot_git.is_file():  # a worktree: "gitdir: <main>/.git/worktrees/<name>"
        text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
        if text.startswith("gitdir:"):
            main_git = Path(text.split(":", 1)[1].strip()).parent.parent
            found.append(main_git.parent.parent / "shared" / "data")
    return found


def shared_data_dir() -> Path:
    """The shared data folder; UserError naming the places tried when there is none."""
    tried = _candidates()
    for folder in tried:
        if folder.is_dir():
            return folder
    places = ", ".join(str(p) for p in tried)
    raise UserError(f"the shared data folder is missing (tried {places}; set {ENV} to its path)")


def shared_path(relative: str) -> Path:
    """A file or folder inside the shared data folder, e.g. ``coflow-benchmark/FB2010-1Hr-150-0.txt``."""
    path = shared_data_dir() / relative
    if not path.exists():
        raise UserError(f"shared data {relative!r} is missing (looked in {shared_data_dir()})")
    return path


def resolve_shared(name: str) -> Path | None:
    """The real path of ``../shared/data/...`` (as written in scenarios); None for any other name."""
    normal = name.replace(os.sep, "/")
    if not normal.startswith(PREFIX):
        return None
    return shared_path(normal[len(PREFIX):])
