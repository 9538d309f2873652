"""A page's answer built and encoded an item at a time, giving the controller's hub a turn between items.

The API runs on the controller's eventlet hub (``controller.api_server``), with the scheduling rounds and
the OpenFlow handlers: building and encoding a page of 50 EchelonFlows with their flows is CPU work that
held the hub 2-16 ms on a shared machine, and a round due meanwhile waited that long.  Here each item is
rendered and encoded on its own, and once :data:`TURN_EVERY_S` of work has passed the hub gets a turn
(``cooperate``, which the HTTP server puts into the request: ``COOPERATE_KEY``), so a round waits for one
item at most, not for the page.

Between turns the registry may change: each item is looked up again (``current``) before it is rendered,
and one that left memory meanwhile (its job archived or deleted) is left out of the page, as a walk over
pages leaves out what was not present for its whole length (docs/api.md, "Pages").  The page's cursor was
cut before rendering, so the next page is unaffected.

The body is byte for byte what ``json.dumps(payload, sort_keys=True)`` gives for the whole payload
(``tests/test_api_hub.py``), so no client sees a difference.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any, Callable, TypeVar

#: Most CPU time an answer spends between two turns of the hub.
TURN_EVERY_S = 0.001

Item = TypeVar("Item")


class Encoded:
    """An answer's JSON body, encoded already: the API sends these bytes as they are."""

    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        self.body = body


def encode(value: Any) -> bytes:
    """One value as the API encodes every answer."""
    return json.dumps(value, sort_keys=True).encode()


def render(items: Iterable[Item], current: Callable[[Item], Item | None], view: Callable[[Item], Any],
           cooperate: Callable[[], None] | None) -> list[bytes]:
    """Each item still in memory (``current``: its record now, None when it left), as ``view`` shows it
    (a JSON-ready value, or its bytes encoded already), with a turn of the hub each :data:`TURN_EVERY_S`."""
    out: list[bytes] = []
    began = time.perf_counter()
    for item in items:
        if cooperate is not None and time.perf_counter() - began >= TURN_EVERY_S:
            cooperate()
            began = time.perf_counter()
        now = current(item)
        if now is None:
            continue
        shown = view(now)
        out.append(shown if isinstance(shown, bytes) else encode(shown))
    return out


def page_body(fields: Mapping[str, Any], list_key: str, items: list[bytes]) -> Encoded:
    """``{**fields, list_key: [items]}`` encoded as ``json.dumps(..., sort_keys=True)`` would, with the
    list's items encoded already."""
    parts = []
    for key in sorted([*fields, list_key]):
        value = b"[" + b", ".join(items) + b"]" if key == list_key else encode(fields[key])
        parts.append(encode(key) + b": " + value)
    return Encoded(b"{" + b", ".join(parts) + b"}")
