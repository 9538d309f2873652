"""The one error a refused API request raises, and the reader of a request's query parameters.

Built on the project's one field checker (:mod:`echelonflow.fields`), so the registry endpoints
(``controller/api.py``), the enforcement primitives (``controller/enforcement_api.py``) and the files
the tools read all word problems the same way; the API answers ``{"error": {"field", "problem"}}``.
Stdlib only, Python 3.9 compatible.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Callable
from urllib.parse import parse_qsl

from echelonflow.fields import Field, FieldError, read

#: environ key under which the HTTP server puts an :class:`ApiError` for a request it refuses before the
#: app reads it (conflicting ``Content-Length``, an unsupported ``Transfer-Encoding``): the app answers it.
REFUSED_KEY = "echelon.refused"
#: environ key of a callable the app calls with its body limit in bytes before reading a chunked body:
#: the server then refuses (413) a chunk-size line that announces more, before waiting for its bytes.
BODY_LIMIT_KEY = "echelon.body_limit"
#: environ key of a callable that gives the server's hub a turn: the app calls it while it builds a long
#: answer, so a scheduling round due meanwhile is not kept waiting (``controller.encoded``).
COOPERATE_KEY = "echelon.cooperate"


class ApiError(FieldError):
    """A refused request: the HTTP ``status``, the ``field`` at fault and the ``problem`` (extra headers)."""

    def __init__(self, status: int, field: str | None, problem: str,
                 headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(field or "", problem)
        self.status = status
        self.headers = list(headers)


# --------------------------------------------------------------------------- query parameters
#: Parses one query parameter's text (its name given for the error) into its value.
QueryParser = Callable[[str, str], Any]
_DIGITS = re.compile(r"[0-9]{1,18}")
_DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")


def count(low: int, high: int) -> QueryParser:
    """A count: decimal digits only (``1.5``, ``1e2``, ``+3`` and ``0x10`` are refused), low..high."""

    def parse(name: str, text: str) -> int:
        value = int(text) if _DIGITS.fullmatch(text) else None
        if value is None or not low <= value <= high:
            raise ApiError(400, name, f"must be an integer in {low}..{high} (digits only), got {text!r}")
        return value

    return parse


def seconds(low: float, high: float, above: bool = False) -> QueryParser:
    """A duration in seconds: a plain decimal number (an exponent allowed; no ``nan``, ``inf`` or
    ``1_0``) in [low, high], or (low, high] with ``above``."""

    def parse(name: str, text: str) -> float:
        value = float(text) if _DECIMAL.fullmatch(text) else None
        if value is None or not (low < value if above else low <= value) or value > high:
            span = f"({low:g}, {high:g}]" if above else f"[{low:g}, {high:g}]"
            raise ApiError(400, name, f"must be a number of seconds in {span}, got {text!r}")
        return value

    return parse


def choice(*options: str) -> QueryParser:
    def parse(name: str, text: str) -> str:
        if text not in options:
            raise ApiError(400, name, f"must be one of {', '.join(options)}, got {text!r}")
        return text

    return parse


def read_query(query_string: str, declared: Sequence[Field]) -> dict[str, Any]:
    """The request's query parameters as its endpoint declares them (each a :class:`Field` whose check
    parses the text), read by the same :func:`~echelonflow.fields.read` as request bodies: an undeclared
    name is refused, a declared one that is absent takes its default; each name at most once."""
    values: dict[str, str] = {}
    if query_string:  # Python 3.9's strict parse_qsl refuses the empty string
        try:
            pairs = parse_qsl(query_string, keep_blank_values=True, strict_parsing=True, max_num_fields=16)
        except ValueError as exc:
            raise ApiError(400, "query", f"malformed query string: {exc}") from None
        for name, text in pairs:
            if not name:
                raise ApiError(400, "query", "a parameter without a name")
            if name in values:
                raise ApiError(400, name, "give it once")
            if not declared:
                raise ApiError(400, name, "unknown query parameter (this endpoint takes none)")
            values[name] = text
    try:
        return read(values, declared, what="a query")
    except FieldError as err:
        problem = err.problem.replace("unknown field", "unknown query parameter")
        raise ApiError(400, err.field, problem) from None
