"""What every API endpoint checks a request against, and the one error a refused request raises.

Shared by the registry endpoints (``controller/api.py``) and the enforcement primitives
(``controller/enforcement_api.py``) so both answer with the same ``{"error": {"field", "problem"}}``
shape and the same words.  Stdlib only, Python 3.9 compatible.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class ApiError(Exception):
    """A refused request: the HTTP ``status``, the ``field`` at fault and the ``problem`` (extra headers)."""

    def __init__(self, status: int, field: str | None, problem: str,
                 headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(problem)
        self.status = status
        self.field = field
        self.problem = problem
        self.headers = list(headers)


def fields(
    body: Any, required: tuple[str, ...], optional: tuple[str, ...] = (), prefix: str = ""
) -> dict[str, Any]:
    """The body as a dict after checking it is an object with exactly the allowed keys.

    ``prefix`` locates a nested object in error fields (``requests[3].`` or ``match.``).
    """
    if not isinstance(body, dict):
        raise ApiError(400, "body", "must be a JSON object")
    allowed = required + optional
    for name in body:
        if name not in allowed:
            raise ApiError(400, prefix + str(name), f"unknown field (allowed: {', '.join(allowed)})")
    for name in required:
        if name not in body:
            raise ApiError(400, prefix + name, "missing")
    return body
