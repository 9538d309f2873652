"""The data sets the project ships in ``data/`` (the FB2010 trace, Chakra samples): found from the code's own
location, so a clone needs nothing beside it and any working directory works.

Scenario files name such data as ``"data:coflow-benchmark/FB2010-1Hr-150-0.txt"``, a name that cannot be
mistaken for a path relative to the scenario file.  ``ECHELON_DATA`` points at another copy
(a cluster node whose checkout lives elsewhere, or a larger trace collection laid out the same way).
"""

from __future__ import annotations

import os
from pathlib import Path

from echelonflow.errors import UserError
from echelonflow.fileio import path_kind

REPO_ROOT = Path(__file__).resolve().parent.parent
PREFIX = "data:"
ENV = "ECHELON_DATA"


def data_dir() -> Path:
    """The data folder: ``$ECHELON_DATA`` when set, else the repository's ``data/``."""
    folder = Path(os.environ[ENV]) if os.environ.get(ENV) else REPO_ROOT / "data"
    if not folder.is_dir():
        source = f"${ENV}" if os.environ.get(ENV) else "the repository's data folder"
        raise UserError(f"{source} {str(folder)!r} is not a folder")
    return folder


def data_path(relative: str) -> Path:
    """A file or folder inside the data folder, e.g. ``coflow-benchmark/FB2010-1Hr-150-0.txt``."""
    folder = data_dir()
    path = folder / relative
    if path_kind(path, "data") is None:
        raise UserError(f"data {relative!r} is missing (looked in {folder})")
    return path


def resolve_data(name: str) -> Path | None:
    """The real path of a scenario's ``data:...`` name; None for any other name (a plain path)."""
    if not name.startswith(PREFIX):
        return None
    return data_path(name[len(PREFIX):].replace(os.sep, "/"))
