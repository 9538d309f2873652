"""Fuzzing the HTTP API with seeded random bodies: never a 5xx, and a refused request changes nothing.

Stdlib ``random`` with fixed seeds (reproducible, no extra dependency): each write endpoint gets bodies
built from its own valid body by replacing, dropping or adding fields with awkward JSON values (huge
integers, NaN-free floats, ids with newlines, deep nesting, wrong types).  A 4xx must leave the registry
(its dump and version) and the enforcement port untouched; a 2xx may change them.
"""

from __future__ import annotations

import copy
import random

import pytest

from controller import views
from controller.client import ApiClientError
from tests.api_helpers import ServedApi, flows

AWKWARD = [None, True, False, 0, -1, 1, 2**31, 10**400, -(10**400), 1e308, -0.0, 0.5, "", " ", "a\n",
           "h1", "h99", "j1", "f1", "x" * 300, [], [1, 2], {}, {"a": 1}, [[[[[]]]]], "é", "\u0000"]
VALID = {
    ("POST", "/jobs"): {"job_id": "k1", "weight": 1.0},
    ("POST", "/jobs/j1/echelons"): {"echelon_id": "e9", "flows": flows(("g1", "h1", "h5", 1000))},
    ("POST", "/jobs/j1/echelons/e1/flows"): {"flows": flows(("g2", "h3", "h7", 500))},
    ("POST", "/jobs/j1/flows/f1/start"): {"src_port": 40001, "dst_port": 5202},
    ("POST", "/jobs/j1/flows/f2/progress"): {"bytes_sent": 10},
    ("POST", "/jobs/j1/flows/f2/finish"): {"finish_s": 1.0},
    ("PUT", "/scheduler"): {"scheduler": "fair"},
}


def _value(rng: random.Random, depth: int = 0):
    if depth < 2 and rng.random() < 0.2:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 2 and rng.random() < 0.1:
        return {rng.choice(["flow_id", "src", "dst", "size_bytes", "zz"]): _value(rng, depth + 1)}
    return rng.choice(AWKWARD)


def _mutate(rng: random.Random, body):
    body = copy.deepcopy(body)
    for _ in range(rng.randint(1, 3)):
        target = body
        inner = body.get("flows")
        if isinstance(inner, list) and inner and isinstance(inner[0], dict) and rng.random() < 0.5:
            target = inner[0]
        if rng.random() < 0.1:
            return _value(rng)  # not an object at all
        key = rng.choice(sorted(map(str, target)) + ["extra"])
        if rng.random() < 0.2 and key in target:
            del target[key]
        else:
            target[key] = _value(rng)
    return body


@pytest.mark.parametrize("seed_value", range(4))
def test_random_bodies_never_5xx_and_refusals_change_nothing(tmp_path, seed_value):
    rng = random.Random(seed_value)
    served = ServedApi(tmp_path)
    try:
        served.seed()
        statuses: dict[int, int] = {}
        for _ in range(150):
            (method, path), valid = rng.choice(sorted(VALID.items()))
            body = _mutate(rng, valid)
            before, version = copy.deepcopy(views.dump(served.registry)), served.registry.version
            calls = list(served.sink.calls)
            try:
                served.unix.request(method, path, body, auth=True)
                status = 200
            except ApiClientError as err:
                status = err.status
                assert 400 <= status < 500, (method, path, body, err)
                assert err.problem and "\n" not in err.problem
                unchanged = views.dump(served.registry) == before and served.registry.version == version
                assert unchanged, (path, body)
                assert served.sink.calls == calls, (path, body)
            statuses[status] = statuses.get(status, 0) + 1
        assert sum(n for s, n in statuses.items() if s >= 400) > 50, statuses  # the fuzz does reach refusals
    finally:
        served.stop()
