"""A body over the limit gets its 413, never a connection reset (lingering close, controller/api_server.py).

A plain urllib client (it sends ``Connection: close`` and writes the whole body before it reads) POSTs
2 MiB to ``/v1/jobs`` of a real controller, over and over, with a declared length and chunked: the
server answers 413 before it has read the body, and closing at once with unread bytes made the kernel
send a reset that the still-writing client got instead (the 413 came through in 1 of 3 tries).
"""

from __future__ import annotations

import collections
import urllib.error
import urllib.request

import pytest

from controller.auth import read_token
from controller.launcher import ControllerProcess, free_tcp_port, local_config
from echelonflow.topology import two_hosts

TWO_MIB = 2 << 20
TRIES = 40


@pytest.fixture(scope="module")
def controller(require_controller):
    ctl = ControllerProcess(two_hosts(10e6), local_config(metrics_port=None), ofp_port=free_tcp_port())
    ctl.start()
    yield ctl
    ctl.stop()


def _post(url: str, token: str, data) -> object:
    """The status the client read, or the name of what it got instead (a reset, a broken pipe)."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    request = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, OSError) as err:
        return f"{type(err).__name__}: {getattr(err, 'reason', err)}"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_oversize_post_always_reads_its_413(controller, chunked):
    url, token = f"{controller.api_url}/v1/jobs", read_token(controller.token_file)
    body = b"x" * TWO_MIB
    outcomes = collections.Counter(
        _post(url, token, iter([body[i:i + 65536] for i in range(0, TWO_MIB, 65536)]) if chunked else body)
        for _ in range(TRIES))
    assert outcomes == {413: TRIES}, outcomes
    with controller.client(tcp=True) as client:  # and the server serves on
        job_id = f"after-{'chunked' if chunked else 'length'}"
        assert client.register_job(job_id)["job_id"] == job_id


def test_a_refusal_before_the_body_is_read_also_lingers(controller):
    """401 (no token) on a 2 MiB body: refused before the body is read, so the same close applies."""
    url = f"{controller.api_url}/v1/jobs"
    outcomes = collections.Counter(_post(url, "wrong", b"x" * TWO_MIB) for _ in range(TRIES // 2))
    assert outcomes == {401: TRIES // 2}, outcomes
