"""JSON files in and out: one strict reader with one-line errors, atomic writers.

Reading: every JSON file the project takes (traces, scenarios, run-specs, topology specs, result
documents) goes through :func:`read_json`, so a missing file, bad UTF-8 or bad JSON gets the same
one-line message naming the file, whichever command met it.  Parsing is strict: ``NaN``/``Infinity``
and an object with the same key twice are refused (Python's json accepts both silently, and a
duplicated key quietly drops a value).

Writing: results, run-specs and fabric state files are read by other processes while runs go on (another
agent, the runner, a later ``echelon report``), so every one is written to a temporary file in the same
directory and renamed over the target (rename is atomic there): a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable

from echelonflow.errors import UserError


class _JsonContentError(ValueError):
    """Valid JSON syntax that the strict reader refuses (a constant or a repeated key)."""


def _reject_constant(name: str) -> Any:
    raise _JsonContentError(f"{name} is not a number JSON allows")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _JsonContentError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def loads_strict(text: str) -> Any:
    """``json.loads`` that refuses NaN/Infinity and repeated keys; ValueError with the reason."""
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise ValueError(f"line {err.lineno} column {err.colno}: {err.msg}") from None


def read_json(path: str | os.PathLike, what: str,
              error: Callable[[str], Exception] = UserError) -> Any:
    """The decoded content of the JSON file ``path``, or ``error("<what> <path>: <problem>")``, one line.

    ``what`` names the kind of file for the reader (``"trace"``, ``"scenario"``, ``"run-spec"``, ...);
    ``error`` is the exception class the caller's users expect (a :class:`UserError` for CLI input).
    """
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise error(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return loads_strict(text)
    except ValueError as exc:
        raise error(f"{what} {path}: not valid JSON ({exc})") from None


def write_text_atomic(path: str, text: str, mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it, with permissions ``mode``
    (mkstemp's 0600 unless asked otherwise; the API token relies on it)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")
