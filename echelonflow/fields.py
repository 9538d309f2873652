"""One way to check the fields of a document, and one shape for what is wrong with them.

Every input the project reads from a user or another process is a JSON-like document: API request
bodies (the registry, the enforcement primitives), trace, scenario and topology-spec files,
the controller's configuration.  Each declares its fields once (:class:`Field`: name, check, required or
default) and reads them with :func:`read`, which refuses anything but an object with exactly the
declared fields; values go through the same few checks (:func:`integer`, :func:`number`, :func:`text`,
:func:`identifier`, :func:`boolean`, :func:`one_of`, ...), and numbers of a kind the project knows
(seconds, bytes, rates, weights) through :func:`ranged` and the one table of ranges in
``echelonflow.limits``.  So every refusal is a :class:`FieldError`
with one shape: the dotted path of the field (``flows[3].size_bytes``, ``registry.poll_interval_s``)
and a problem worded the same way everywhere ("must be an integer between 1 and 65535, got 70000"),
printed as one line ``<field>: <problem>`` after whatever names the document (a file, a job, a task).
The HTTP API sends the two parts as ``{"error": {"field", "problem"}}``.

Why not a schema library: the checks must phrase problems for people (no schema paths, no type
names), guard against values JSON allows but Python mishandles (``10**400``, booleans that are
integers), run inside Mininet hosts with the standard library only, and stay Python 3.9 compatible.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from echelonflow.errors import UserError
from echelonflow.limits import Range

#: Ids of jobs, EchelonFlows and flows in the controller's registry, and of jobs, tasks and EchelonFlows
#: in traces and scenarios, which become the registry's (used with ``fullmatch``: a pattern ending in "$"
#: would also accept the id followed by a newline).
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
#: How much of a refused value a problem quotes (a refused value must not flood a one-line error).
SHOW_CHARS = 40

Check = Callable[[str, Any], Any]


class FieldError(UserError):
    """A refused field: ``field`` (dotted path, '' for the document itself) and ``problem``.

    ``status`` is the HTTP status the API answers with (400 unless a subclass says otherwise);
    ``str(err)`` is the one line ``field: problem``.
    """

    status = 400

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


def join(prefix: str, name: str) -> str:
    """``prefix`` + ``name`` as a dotted path (``flows[3]`` + ``size_bytes`` -> ``flows[3].size_bytes``)."""
    if not prefix:
        return name
    if not name:
        return prefix
    return prefix + name if name.startswith("[") else f"{prefix}.{name}"


def show(value: Any) -> str:
    """A refused value as a problem quotes it: a short repr, or what it is when that says more."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and abs(value) >= 10**15:
        return f"a {len(str(abs(value)))}-digit integer"
    if isinstance(value, (list, dict)) and len(repr(value)) > SHOW_CHARS:
        return "an array" if isinstance(value, list) else "an object"
    text = repr(value)
    return text if len(text) <= SHOW_CHARS else text[: SHOW_CHARS - 3] + "..."


# ------------------------------------------------------------------------------------------ values
def _bound(value: float) -> str:
    """A bound as people write it: 65535, 0.5, 1e+15 (integers in full up to a billion)."""
    return str(value) if isinstance(value, int) and abs(value) < 10**9 else f"{value:g}"


def _range_text(low: float | None, high: float | None, above: bool) -> str:
    if low is not None and high is not None and not above:
        return f" between {_bound(low)} and {_bound(high)}"
    parts = []
    if low is not None:
        parts.append(f"{'>' if above else '>='} {_bound(low)}")
    if high is not None:
        parts.append(f"<= {_bound(high)}")
    return " " + " and ".join(parts) if parts else ""


def integer(low: int | None = None, high: int | None = None, what: str = "an integer") -> Check:
    """A whole number (an integral float such as 5.0 is accepted) within [low, high]."""

    def check(field: str, value: Any) -> int:
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not whole:
            raise FieldError(field, f"must be {what}{_range_text(low, high, False)}, got {show(value)}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise FieldError(field, f"must be {what}{_range_text(low, high, False)}, got {show(value)}")
        return int(value)

    return check


def number(low: float | None = None, high: float | None = None, above: bool = False,
           what: str = "a number") -> Check:
    """A finite number within [low, high] (``above``: strictly greater than ``low``); never a boolean."""

    def check(field: str, value: Any) -> float:
        expected = f"must be {what}{_range_text(low, high, above)}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FieldError(field, f"{expected}, got {show(value)}")
        try:
            result = float(value)
        except OverflowError:  # an integer literal beyond a float's range, e.g. 10**400
            raise FieldError(field, f"{expected}, got {show(value)}") from None
        if not math.isfinite(result):
            raise FieldError(field, f"{expected}, got {show(value)}")
        too_low = low is not None and (result <= low if above else result < low)
        if too_low or (high is not None and result > high):
            raise FieldError(field, f"{expected}, got {show(value)}")
        return result

    return check


def ranged(kind: Range, what: str = "") -> Check:
    """A number of one kind of the project's table of ranges (``echelonflow.limits``: ``SECONDS``,
    ``SIZE_BYTES``, ``RATE_BPS``, ...), worded as ``what`` ("a number of seconds")."""
    if kind.whole:
        return integer(int(kind.low), int(kind.high), what or "an integer")
    return number(kind.low, kind.high, kind.above, what or "a number")


def text(nonempty: bool = True, without: str = "") -> Check:
    """A string (non-empty unless told otherwise), containing none of the characters in ``without``."""

    def check(field: str, value: Any) -> str:
        if not isinstance(value, str) or (nonempty and not value.strip()):
            what = "a non-empty string" if nonempty else "a string"
            raise FieldError(field, f"must be {what}, got {show(value)}")
        bad = [c for c in without if c in value]
        if bad:
            raise FieldError(field, f"must not contain {bad[0]!r}, got {show(value)}")
        return value

    return check


def identifier(pattern: re.Pattern[str] = ID_PATTERN,
               rule: str = "1-128 of A-Z a-z 0-9 . _ : -, starting with a letter or digit") -> Check:
    """A string matching ``pattern`` in full (``rule`` says the pattern in words)."""

    def check(field: str, value: Any) -> str:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise FieldError(field, f"must be an id ({rule}), got {show(value)}")
        return value

    return check


def boolean() -> Check:
    def check(field: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise FieldError(field, f"must be true or false, got {show(value)}")
        return value

    return check


def one_of(*options: Any) -> Check:
    def check(field: str, value: Any) -> Any:
        if isinstance(value, bool) or value not in options:
            raise FieldError(field, f"must be one of {', '.join(map(str, options))}, got {show(value)}")
        return value

    return check


def array(item: Check | None = None, nonempty: bool = False, of: str = "") -> Check:
    """A list (non-empty if asked), each element checked by ``item`` at ``field[i]``; ``of`` names the
    elements in the problem ("of flow objects")."""

    def check(field: str, value: Any) -> list[Any]:
        if not isinstance(value, list) or (nonempty and not value):
            kind = "a non-empty array" if nonempty else "an array"
            raise FieldError(field, f"must be {kind}{' ' + of if of else ''}, got {show(value)}")
        return value if item is None else [item(f"{field}[{i}]", v) for i, v in enumerate(value)]

    return check


def mapping(key: Check | None = None, item: Check | None = None, what: str = "an object") -> Check:
    """An object whose keys and values are checked by ``key`` and ``item`` (at ``field[key]``)."""

    def check(field: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise FieldError(field, f"must be {what}, got {show(value)}")
        out = {}
        for name, element in value.items():
            place = f"{field}[{name!r}]"
            out[key(place, name) if key else name] = item(place, element) if item else element
        return out

    return check


def nullable(check: Check) -> Check:
    """``check``, or ``None`` for JSON null (an optional field given as null)."""
    return lambda field, value: None if value is None else check(field, value)


def anything() -> Check:
    return lambda field, value: value


# ------------------------------------------------------------------------------------------ objects
@dataclass(frozen=True)
class Field:
    """One declared field of an object: its name, its check, and whether it must be there."""

    name: str
    check: Check = anything()
    required: bool = False
    default: Any = None


def read(doc: Any, declared: Sequence[Field], where: str = "", what: str = "an object") -> dict[str, Any]:
    """``doc``'s declared fields, checked; absent optional ones get their default (nested objects are
    fields checked by :func:`record`).

    ``doc`` must be an object with no undeclared field and every required one; ``where`` is the
    object's own path, prefixed to every field in errors.  The first problem found raises
    :class:`FieldError` (unknown fields first, then missing ones, then values in declaration order).
    """
    if not isinstance(doc, Mapping):
        raise FieldError(where, f"must be {what}, got {show(doc)}")
    names = [f.name for f in declared]
    for name in doc:
        if name not in names:
            raise FieldError(join(where, str(name)), f"unknown field (allowed: {', '.join(names)})")
    for spec in declared:
        if spec.required and spec.name not in doc:
            raise FieldError(join(where, spec.name), "missing")
    return {spec.name: spec.check(join(where, spec.name), doc[spec.name]) if spec.name in doc
            else spec.default for spec in declared}


def record(declared: Sequence[Field], what: str = "an object") -> Check:
    """A nested object with the ``declared`` fields, read by :func:`read` at the field's own path (so a
    problem inside it is named ``registry.poll_interval_s`` or ``channels[2].count``)."""
    return lambda field, value: read(value, declared, field, what)
