"""The one error a refused API request raises, and the check of a request body's fields.

Built on the project's one field checker (:mod:`echelonflow.fields`), so the registry endpoints
(``controller/api.py``), the enforcement primitives (``controller/enforcement_api.py``) and the files
the tools read all word problems the same way; the API answers ``{"error": {"field", "problem"}}``.
Stdlib only, Python 3.9 compatible.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from echelonflow.fields import Field, FieldError, read


class ApiError(FieldError):
    """A refused request: the HTTP ``status``, the ``field`` at fault and the ``problem`` (extra headers)."""

    def __init__(self, status: int, field: str | None, problem: str,
                 headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(field or "", problem)
        self.status = status
        self.headers = list(headers)


def fields(
    body: Any, required: tuple[str, ...], optional: tuple[str, ...] = (), prefix: str = ""
) -> dict[str, Any]:
    """The body as a dict after checking it is an object with exactly the allowed keys.

    ``prefix`` locates a nested object in error fields (``requests[3]`` or ``match``); a body that is
    not an object is refused as ``body`` (or as the nested object's place).
    """
    if not isinstance(body, dict):
        raise ApiError(400, prefix or "body", "must be a JSON object")
    declared = [Field(name, required=True) for name in required] + [Field(name) for name in optional]
    read(body, declared, prefix)
    return body
