"""Input files in, JSON in and out: one strict reader with one-line errors and limits, atomic writers.

Reading: every JSON the project takes (scenarios, traces, sweep grids, run-specs, topology specs, result
documents, the controller's JSON settings and API bodies) goes through :func:`read_json` (files) or
:func:`loads_strict` (text), so a missing file, bad UTF-8, bad JSON or a limit passed gets the same
one-line message naming the file, whichever command met it.  Parsing is strict: ``NaN``/``Infinity``
and an object with the same key twice are refused (Python's json accepts both silently, and a
duplicated key quietly drops a value), and so is what would only fail later, far from the file, with a
traceback:

* nesting deeper than :data:`MAX_DEPTH` levels (Python's parser raises RecursionError near 1,000, and
  any recursive walk of a document nested a little less deep fails the same way later);
* an integer of magnitude 2**63 or more (``size_bytes: 10**400`` parsed, then overflowed a float), or
  a number too large for a double (``1e400`` would become infinity).

Input files (:func:`read_text_bounded`, :func:`read_bytes_bounded`) are read up to
:func:`max_input_bytes` (256 MiB unless ``ECHELON_MAX_INPUT_MIB`` says otherwise), in chunks: a larger
regular file is refused before a byte is read, a device or pipe as soon as it passed the limit, and a
text file as soon as a chunk holds a NUL byte (no text file does; ``/dev/zero`` and files linked to it
are refused after the first MiB instead of filling memory).  The largest inputs this project ships are
far below: the FB2010 trace is 0.14 MB, the k=16 multi-tenant results 1.6 MB.

Writing: results, run-specs and fabric state files are read by other processes while runs go on (another
agent, the runner, a later ``echelon report``), so every one is written to a temporary file in the same
directory and renamed over the target (rename is atomic there): a reader never sees half a file.  What
the project writes as JSON goes through :func:`dumps_strict`, which refuses ``NaN`` and ``Infinity``
as the reader does.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import Any, Callable, TextIO

from echelonflow.errors import UserError

#: Deepest nesting of arrays and objects a JSON document may have (the bundled files and results: 5).
MAX_DEPTH = 64
#: Integers must be smaller than this in magnitude (what a 64-bit signed integer holds).
MAX_INTEGER = 2**63
#: Default size limit of an input file, in MiB; the environment variable below overrides it.
DEFAULT_MAX_INPUT_MIB = 256
MAX_INPUT_ENV = "ECHELON_MAX_INPUT_MIB"
_CHUNK_BYTES = 1 << 20


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


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}...{text[-6:]} ({len(text)} characters)"


class JsonLimitError(ValueError):
    """Valid JSON beyond a limit: ``problem``, and where (``field``, e.g. ``jobs[0].size_bytes``, or None
    for the document as a whole), so the API can name the field as its field checks do."""

    def __init__(self, field: str | None, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


def _over_limit(value: Any, max_depth: int) -> tuple[Any, str] | None:
    """The first value beyond a limit and why: nesting deeper than ``max_depth``, an integer of 2**63 or
    more, a double that overflowed.  One walk without recursion (cheaper than per-number parser hooks)."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        if kind is dict or kind is list:
            if depth >= max_depth:
                return node, f"nested deeper than {max_depth} levels"
            stack.extend((item, depth + 1) for item in (node.values() if kind is dict else node))
        elif kind is int:
            if not -MAX_INTEGER < node < MAX_INTEGER:
                return node, f"integer {_short(node)} is out of range (magnitude must be below 2**63)"
        elif kind is float and math.isinf(node):  # NaN and Infinity literals are refused while parsing
            return node, "a number too large for a double (it would be infinity)"
    return None


def _field_of(value: Any, target: Any) -> str | None:
    """The dotted path (``a.b[2].c``) of ``target`` (by identity) in ``value``; only for error messages."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, where = stack.pop()
        if node is target:
            return where or None
        if isinstance(node, dict):
            stack.extend((item, f"{where}.{key}" if where else str(key)) for key, item in node.items())
        elif isinstance(node, list):
            stack.extend((item, f"{where}[{index}]") for index, item in enumerate(node))
    return None


def loads_strict(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that refuses NaN/Infinity, repeated keys, integers of 2**63 or more, doubles that
    overflow and nesting deeper than ``max_depth``; ValueError with the reason (one line), a
    :class:`JsonLimitError` naming the field for the last three."""
    try:
        value = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise ValueError(f"line {err.lineno} column {err.colno}: {err.msg}") from None
    except RecursionError:
        raise JsonLimitError(None, f"nested deeper than {max_depth} levels") from None
    found = _over_limit(value, max_depth)
    if found is not None:
        node, problem = found
        deep = problem.startswith("nested")  # a path 64 levels long would say nothing more
        raise JsonLimitError(None if deep else _field_of(value, node), problem)
    return value


def max_input_bytes() -> int:
    """The input size limit: ``ECHELON_MAX_INPUT_MIB`` MiB (a positive integer), else 256 MiB."""
    raw = os.environ.get(MAX_INPUT_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_INPUT_MIB << 20
    if not raw.isdigit() or int(raw) < 1 or len(raw) > 9:
        raise UserError(f"{MAX_INPUT_ENV} must be a whole number of MiB >= 1, got {raw!r}")
    return int(raw) << 20


def _shown_path(path: str | os.PathLike) -> str:
    """A path as a one-line message quotes it: in full, unless it is too long for any file system."""
    name = os.fspath(path)
    return name if len(name) <= 160 else f"{name[:60]}...{name[-40:]} ({len(name):,} characters)"


def path_kind(path: str | os.PathLike, what: str,
              error: Callable[[str], Exception] = UserError) -> str | None:
    """What the input path ``path`` is: ``"folder"``, ``"file"`` (a regular file) or ``"other"`` (a
    device, a pipe), or None when nothing is there; ``error`` naming ``what`` (one line) when it cannot
    even be looked up: a name longer than the file system takes, a loop of symbolic links (for which
    ``Path.is_file()`` and ``Path.exists()`` raise OSError instead of answering)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL in the name
        return None
    except OSError as exc:
        raise error(f"{what} {_shown_path(path)}: cannot use this path ({exc.strerror or exc})") from None
    return "folder" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def read_bytes_bounded(path: str | os.PathLike, what: str,
                       error: Callable[[str], Exception] = UserError, text: bool = False) -> bytes:
    """The bytes of the input file ``path`` within :func:`max_input_bytes`, or ``error`` naming the file
    and the problem in one line.  ``text``: refuse NUL bytes as soon as a chunk holds one."""
    limit = max_input_bytes()
    mib = limit >> 20
    too_big = f"{what} {path}: larger than the {mib} MiB input limit ({MAX_INPUT_ENV} raises it)"
    try:
        with open(path, "rb") as fh:
            info = os.fstat(fh.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                raise error(f"{what} {path}: {info.st_size:,} bytes, larger than the {mib} MiB input limit "
                            f"({MAX_INPUT_ENV} raises it)")
            chunks: list[bytes] = []
            total = 0
            while True:
                chunk = fh.read(_CHUNK_BYTES)
                if not chunk:
                    break
                if text and b"\0" in chunk:
                    where = total + chunk.index(0)
                    raise error(f"{what} {path}: not a text file (a NUL byte at byte {where})")
                total += len(chunk)
                if total > limit:
                    raise error(too_big)
                chunks.append(chunk)
    except OSError as exc:
        raise error(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    return b"".join(chunks)


def read_text_bounded(path: str | os.PathLike, what: str,
                      error: Callable[[str], Exception] = UserError, encoding: str = "utf-8") -> str:
    """The text of the input file ``path`` (see :func:`read_bytes_bounded`), decoded, or ``error``."""
    data = read_bytes_bounded(path, what, error, text=True)
    try:
        return codecs.decode(data, encoding)
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path}: not {encoding.upper()} text ({exc.reason} at byte {exc.start})"
                    ) from None


def read_json(path: str | os.PathLike, what: str,
              error: Callable[[str], Exception] = UserError) -> Any:
    """The decoded content of the JSON file ``path``, or ``error("<what> <path>: <problem>")``, one line.

    ``what`` names the kind of file for the reader (``"trace"``, ``"scenario"``, ``"run-spec"``, ...);
    ``error`` is the exception class the caller's users expect (a :class:`UserError` for CLI input).
    """
    text = read_text_bounded(path, what, error)
    try:
        return loads_strict(text)
    except JsonLimitError as exc:
        raise error(f"{what} {path}: {exc}") from None
    except ValueError as exc:
        raise error(f"{what} {path}: not valid JSON ({exc})") from None


def check_output_dir(path: str, what: str, kept: tuple[str, ...] = ()) -> None:
    """UserError (one line) unless ``path`` is a folder or can be made one: checked before a command
    starts work whose results it would then have nowhere to put (an existing file given as ``--out``
    would otherwise fail with FileExistsError only once the whole emulation has run; a name longer than
    the file system takes, with an OSError traceback).  ``kept``: files an earlier run left there that
    this command would overwrite (an emulation's ``results.json``): a folder holding one is refused, so
    a run that then fails or is stopped loses nothing of the earlier one."""
    probe = os.path.abspath(path)
    missing = False
    while path_kind(probe, what) is None:  # refuses a name too long for the file system, too
        probe, missing = os.path.dirname(probe), True
    if not os.path.isdir(probe):
        where = "" if probe == os.path.abspath(path) else f" ({probe} is a file)"
        raise UserError(f"{what} {path}: exists and is not a folder{where}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"{what} {path}: {probe} is not writable")
    for name in kept if not missing else ():
        if os.path.lexists(os.path.join(probe, name)):
            raise UserError(f"{what} {path}: already holds {name} of an earlier run, which this one would "
                            "overwrite; give a new folder (or remove it)")


def write_text_atomic(path: str, text: str, mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it, with permissions ``mode``
    (mkstemp's 0600 unless asked otherwise; the API token relies on it)."""
    with atomic_writer(path, mode) as fh:
        fh.write(text)


@contextlib.contextmanager
def atomic_writer(path: str, mode: int = 0o600) -> Iterator[TextIO]:
    """A text file to stream into that becomes ``path`` (renamed over it) only once the ``with`` block
    ends without an exception: a write that fails or is interrupted (Ctrl-C) leaves ``path`` as it was,
    and no temporary file."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def dumps_strict(data: Any, what: str = "output", **options: Any) -> str:
    """``json.dumps`` that never writes ``NaN`` or ``Infinity`` (which the strict reader refuses, so a
    sweep's log would lose the line and run the cell again): a :class:`UserError` naming ``what`` and
    the field instead (:func:`check_finite`).  ``options`` go to ``json.dumps``."""
    check_finite(data, what)
    return json.dumps(data, allow_nan=False, **options)


def check_finite(data: Any, what: str = "output") -> None:
    """A :class:`UserError` naming ``what`` and the field when ``data`` holds ``NaN`` or an infinity: what
    a writer streaming JSON (``json.dump(..., allow_nan=False)``) checks before its first byte."""
    bad = _first_non_finite(data)
    if bad is not None:
        field, value = bad
        raise UserError(f"{what}: {field or 'the document'} is {value!r}, not a number JSON allows")


def _first_non_finite(value: Any) -> tuple[str, float] | None:
    """(dotted path, value) of the first NaN or infinity in ``value``; only for error messages."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return where, node
        if isinstance(node, dict):
            stack.extend((item, f"{where}.{key}" if where else str(key)) for key, item in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend((item, f"{where}[{index}]") for index, item in enumerate(node))
    return None


def write_json_atomic(path: str, data: Any) -> None:
    write_text_atomic(path, dumps_strict(data, path, indent=1) + "\n")
