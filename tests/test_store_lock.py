"""One controller per registry store and per token file (controller/owner_lock.py).

Real controller processes (``ControllerProcess`` and the ``echelon controller`` CLI) on one store or one
token file: the second is refused with one line naming the file and the first's pid, and the first goes
on undisturbed (its store, its token, its clients); a first killed with SIGKILL releases both, so a
restart on them works and finds the store's content.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from controller.launcher import ControllerError, ControllerProcess, free_tcp_port, local_config
from controller.owner_lock import OwnerLock, OwnerLockError, owner_pid
from echelonflow.topology import two_hosts

#: Every test here but the two that start no controller process (the lock alone; a token file that is a
#: folder, refused by the CLI before the manager starts), which stay in the unit tier.
CONTROLLER = pytest.mark.usefixtures("require_controller")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _controller(tmp_path, name: str, store: str, token: str) -> ControllerProcess:
    workdir = tmp_path / name
    workdir.mkdir(exist_ok=True)
    return ControllerProcess(two_hosts(10e6), local_config(store=store, token_file=token, metrics_port=None),
                             ofp_port=free_tcp_port(), workdir=str(workdir))


def _read(path: str) -> str:
    with open(path, encoding="ascii") as fh:
        return fh.read()


@pytest.fixture
def first(tmp_path):
    ctl = _controller(tmp_path, "first", str(tmp_path / "registry.sqlite"), str(tmp_path / "token-a"))
    ctl.start()
    yield ctl
    ctl.stop()


def _still_serving(ctl: ControllerProcess, token_before: str, job_id: str) -> None:
    """The first controller answers, its token file is the one it wrote, and a write with it works."""
    assert ctl.proc is not None and ctl.proc.poll() is None
    assert _read(ctl.token_file) == token_before
    with ctl.client() as client:
        assert client.register_job(job_id)["job_id"] == job_id


@CONTROLLER
def test_second_controller_on_the_same_store_is_refused_naming_store_and_owner(first, tmp_path):
    token_before = _read(first.token_file)
    second = _controller(tmp_path, "second", first.store_path, str(tmp_path / "token-b"))
    with pytest.raises(ControllerError) as refused:
        second.start()
    message = str(refused.value)
    assert "\n" not in message
    assert first.store_path in message and f"pid {first.pid}" in message, message
    assert second.proc is None  # stopped and reaped
    assert not os.path.exists(tmp_path / "token-b")  # it never got as far as writing a token
    _still_serving(first, token_before, "after-second")


@CONTROLLER
def test_second_controller_on_the_same_token_file_neither_rewrites_nor_deletes_it(first, tmp_path):
    token_before = _read(first.token_file)
    second = _controller(tmp_path, "second", str(tmp_path / "other.sqlite"), first.token_file)
    with pytest.raises(ControllerError) as refused:
        second.start()
    message = str(refused.value)
    assert first.token_file in message and f"pid {first.pid}" in message, message
    second.stop()  # a second stop must not take the file either
    assert os.path.isfile(first.token_file)
    _still_serving(first, token_before, "after-second")


@CONTROLLER
def test_cli_second_controller_gets_one_line_and_exit_2(first, tmp_path):
    token_before = _read(first.token_file)
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "controller", "--topology", "two_hosts", "--ofp-port",
         str(free_tcp_port()), "--api-port", str(free_tcp_port()), "--metrics-port", str(free_tcp_port()),
         "--api-socket", str(tmp_path / "cli.sock"), "--token-file", str(tmp_path / "token-cli"),
         "--store", first.store_path],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert first.store_path in lines[0] and f"pid {first.pid}" in lines[0], lines[0]
    _still_serving(first, token_before, "after-cli")


@CONTROLLER
def test_owner_killed_with_sigkill_releases_store_and_token_so_a_restart_works(tmp_path):
    store, token = str(tmp_path / "registry.sqlite"), str(tmp_path / "token")
    ctl = _controller(tmp_path, "first", store, token)
    ctl.start()
    try:
        with ctl.client() as client:
            client.register_job("kept")
        assert owner_pid(store) == ctl.pid and owner_pid(token) == ctl.pid
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.proc.wait(10)
        assert owner_pid(store) is None and owner_pid(token) is None  # the kernel released both
    finally:
        ctl.stop()
    again = _controller(tmp_path, "again", store, token)
    again.start()
    try:
        assert owner_pid(store) == again.pid
        with again.client() as client:
            assert [job["job_id"] for job in client.jobs()] == ["kept"]
            client.register_job("after-restart")
    finally:
        again.stop()


def test_lock_is_per_resolved_path_and_names_its_owner(tmp_path):
    target = tmp_path / "registry.sqlite"
    alias = tmp_path / "alias"
    alias.symlink_to(tmp_path)
    held = OwnerLock.acquire(str(target), "registry store")
    try:
        with pytest.raises(OwnerLockError, match=f"pid {os.getpid()}"):
            OwnerLock.acquire(str(alias / "registry.sqlite"), "registry store")
        assert owner_pid(str(target)) == os.getpid()
    finally:
        held.release()
    assert owner_pid(str(target)) is None
    OwnerLock.acquire(str(target), "registry store").release()


@CONTROLLER
def test_a_refused_start_leaves_no_temporary_folder(monkeypatch):
    """A start refused for a port in use or a socket path too long removes the echelon-ctl-* folder it
    made (before, every refused start left one behind)."""
    temp = tempfile.mkdtemp(prefix="ef-", dir="/tmp")  # short: the API socket path must fit
    monkeypatch.setattr(tempfile, "tempdir", temp)  # run folders here, apart from other runs'

    def ctl_folders() -> set[str]:
        return {name for name in os.listdir(temp) if name.startswith("echelon-ctl-")}

    try:
        with pytest.raises(ControllerError, match="longer than"):
            long_socket = local_config(metrics_port=None, api_socket="/tmp/" + "s" * 120)
            ControllerProcess(two_hosts(10e6), long_socket, ofp_port=free_tcp_port()).start()
        busy = ControllerProcess(two_hosts(10e6), local_config(metrics_port=None), ofp_port=free_tcp_port())
        busy.start()
        try:
            with pytest.raises(ControllerError, match="already in use"):
                ControllerProcess(two_hosts(10e6), local_config(metrics_port=None, api_port=busy.api_port),
                                  ofp_port=free_tcp_port()).start()
            assert ctl_folders() == {os.path.basename(busy.workdir)}  # only the running controller's
        finally:
            busy.stop()
        assert ctl_folders() == set()
    finally:
        shutil.rmtree(temp, ignore_errors=True)  # also what a failed run of this test left


def test_token_file_that_is_a_directory_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "controller", "--topology", "two_hosts", "--ofp-port",
         str(free_tcp_port()), "--api-port", str(free_tcp_port()), "--metrics-port", str(free_tcp_port()),
         "--api-socket", str(tmp_path / "cli.sock"), "--token-file", str(tmp_path),
         "--store", str(tmp_path / "registry.sqlite")],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(tmp_path) in lines[0] and "directory" in lines[0], lines[0]
    assert os.path.isdir(tmp_path)
