"""Atomic file writes: a reader (another agent, the runner, a later `echelon report`) never sees half a file.

Results, run-specs and fabric state files are read by other processes while runs go on, so every one is
written to a temporary file in the same directory and renamed over the target (rename is atomic there).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any


def write_text_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")
