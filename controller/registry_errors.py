"""What the registry refuses: its errors (each with the HTTP status the API answers) and the field checks
its records share.

Apart from ``controller.registry`` so that the channels (``controller.channels``), which the registry
holds, refuse requests the same way without importing the registry back.

Kept Python 3.9 compatible: the controller imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from echelonflow.fields import FieldError, identifier, integer

Record = TypeVar("Record")

check_id = identifier()
check_port = integer(1, 65535)


class RegistryError(FieldError):
    """A request the registry refuses; ``field`` and ``problem`` say what and why, ``status`` is HTTP's."""

    def __init__(self, field: str, problem: str, status: int = 400) -> None:
        super().__init__(field, problem)
        self.status = status


class NotFoundError(RegistryError):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(field, problem, 404)


class ConflictError(RegistryError):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(field, problem, 409)


def found(records: Mapping[str, Record], key: str, field: str, missing: str) -> Record:
    """``records[key]``, or the 404 that names ``field`` and says what is ``missing``."""
    try:
        return records[key]
    except KeyError:
        raise NotFoundError(field, missing) from None
