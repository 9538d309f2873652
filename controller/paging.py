"""Pages of the controller's lists: keys kept in a stable order, and the opaque cursor that walks them.

Every list the API serves (jobs, EchelonFlows, flows, channels) is read a page at a time, so a read costs
in proportion to what it returns however long the controller has run.  Each list keeps its keys in an
:class:`OrderedKeys`: an append-only run of (ordinal, key) with increasing ordinals, where a removed key
leaves a tombstone that is swept once tombstones are half the run.  A page starts after an ordinal found
by bisection, so it never scans what came before it; a key added while a client walks the list gets a
larger ordinal than any before, so the walk meets every key present for its whole length exactly once.

The cursor is the last ordinal a page returned and that item's key, with the list's name and this
process's epoch, in URL-safe base64: opaque to clients, and refused (400 naming ``cursor``) when it belongs
to another list.  Ordinals restart with the process, but a restarted controller loads its lists in the
order they were registered (the store's), so a cursor of an earlier process continues after the item it
names when that item is still in memory; when it is not (archived or deleted meanwhile) the cursor is
refused, naming ``cursor``: start again without one.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

from controller.validation import ApiError, count

#: Items a page holds when the request gives no ``limit``, and the most it may ask for: a page is served
#: in one go on the controller's hub, so its cost is what a scheduling round may wait (docs/api.md).
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
#: The most of a list whose items are heavy (``/v1/echelons``: each EchelonFlow with its flows).
MAX_HEAVY_LIMIT = 50
#: Which process made a cursor (ordinals restart with the process).
EPOCH = secrets.token_hex(4)
#: Longest cursor accepted: the base64 of the epoch, list, ordinal and the longest key (a flow's
#: ``job/flow``, 257 characters).
MAX_CURSOR_CHARS = 512

read_limit = count(1, MAX_LIMIT)
read_heavy_limit = count(1, MAX_HEAVY_LIMIT)


class OrderedKeys:
    """Keys in the order they were added, each with an increasing ordinal; removal is O(1) amortized."""

    def __init__(self) -> None:
        self._ordinals: list[int] = []
        self._keys: list[Hashable] = []
        self._live: dict[Hashable, int] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._live

    def add(self, key: Hashable, ordinal: int | None = None) -> int:
        """Append ``key`` (again, if it was removed) with ``ordinal`` (default: one past the last), which
        must exceed every ordinal given before."""
        if ordinal is None:
            ordinal = self._next
        if ordinal < self._next:
            raise ValueError(f"ordinal {ordinal} is not after {self._next - 1}")
        self._next = ordinal + 1
        self._ordinals.append(ordinal)
        self._keys.append(key)
        self._live[key] = ordinal
        return ordinal

    def discard(self, key: Hashable) -> None:
        if self._live.pop(key, None) is not None and len(self._keys) > 2 * len(self._live) + 64:
            self._sweep()

    def ordinal(self, key: Hashable) -> int:
        return self._live[key]

    def after(self, ordinal: int) -> Iterator[tuple[int, Hashable]]:
        """(ordinal, key) of the live keys after ``ordinal``, in order (do not add or remove meanwhile)."""
        live = self._live
        for index in range(bisect_right(self._ordinals, ordinal), len(self._keys)):
            key = self._keys[index]
            if live.get(key) == self._ordinals[index]:
                yield self._ordinals[index], key

    def __iter__(self) -> Iterator[Hashable]:
        return (key for _ordinal, key in self.after(-1))

    def _sweep(self) -> None:
        pairs = [(o, k) for o, k in zip(self._ordinals, self._keys) if self._live.get(k) == o]
        self._ordinals = [o for o, _k in pairs]
        self._keys = [k for _o, k in pairs]


class Cursor:
    """Reads and writes the cursors of one list (``name``: ``jobs``, ``flows``, ...)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def encode(self, ordinal: int, key: Hashable) -> str:
        raw = f"{EPOCH}:{self.name}:{ordinal}:{key}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def decode(self, text: str | None, order: OrderedKeys) -> int:
        """The ordinal in ``order`` a page starts after (-1: the first page); a cursor from elsewhere, or
        of an earlier process whose item left memory, is a 400."""
        if text is None:
            return -1
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            epoch, name, ordinal, key = raw.split(":", 3)
            value = int(ordinal)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise ApiError(400, "cursor", f"not a cursor this API gave, got {text[:40]!r}") from None
        if name != self.name:
            raise ApiError(400, "cursor", f"a cursor of the {name!r} list, not of {self.name!r}")
        if epoch == EPOCH:
            return value
        if key in order:  # an earlier process's: the same item, numbered anew
            return order.ordinal(key)
        raise ApiError(400, "cursor", f"from before a controller restart, and {key[:80]!r}, the item it "
                                      "continues after, left memory since; start again without a cursor")


def read_cursor(name: str, text: str) -> str:
    """The query reader's check of ``cursor``: a non-empty token (decoded by the list that reads it)."""
    if not text or len(text) > MAX_CURSOR_CHARS:
        raise ApiError(400, name, f"must be a cursor this API gave, got {text[:40]!r}")
    return text


def page(items: Iterable[tuple[int, Hashable, Any]], limit: int, cursor: Cursor,
         keep: Callable[[Any], bool] | None = None) -> tuple[list[Any], str | None]:
    """Up to ``limit`` items of ``items`` (ordinal, key, item) that ``keep`` accepts, and the cursor of
    the next page (None when none is left: the walk looked one item further to know)."""
    out: list[Any] = []
    last: tuple[int, Hashable] = (-1, "")
    for ordinal, key, item in items:
        if keep is not None and not keep(item):
            continue
        if len(out) == limit:
            return out, cursor.encode(*last)
        out.append(item)
        last = (ordinal, key)
    return out, None
