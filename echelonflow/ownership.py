"""Who owns a run's temporary folder and the processes started for it, written down inside the folder.

A run killed with SIGKILL runs no clean-up code: its controller and agents die with it (they are started
with a parent-death signal, see :data:`PDEATHSIG`), but its temporary folders (token, registry store,
logs) stay, and a child started from a thread that is gone, or by an older build, may still be running.
So every temporary folder a run creates (``echelon-*`` under the system's temporary directory) gets an
``owner.json`` naming the owning process and every process started for it, each as pid plus kernel start
time (a reused pid is never mistaken for it).  ``echelon fabric clean`` (:func:`clean_abandoned`) ends
the recorded processes of folders whose owner is dead, by pid, and removes those folders.

Standard library only (the controller's launcher, the emulation runner and the fabric clean-up share
it); nothing here is found or stopped by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from typing import Any

from echelonflow.fileio import write_json_atomic

OWNER_FILE = "owner.json"
TEMP_PREFIX = "echelon-"
#: Prefix for a child's command line: it gets SIGTERM when the process (thread) that started it dies,
#: also by SIGKILL (``setpriv`` from util-linux sets PR_SET_PDEATHSIG, which survives the exec).  The
#: kernel sends it when the *thread* that forked the child ends, not the process: start such children
#: with :func:`spawn`.
PDEATHSIG = ["setpriv", "--pdeathsig", "TERM"] if shutil.which("setpriv") else []

ProcRecord = dict  # {"pid": int, "start": int | None}


class _Spawner:
    """Forks children from one thread that lives as long as the process.

    A child carrying :data:`PDEATHSIG` gets SIGTERM when the thread that forked it ends.  The emulation
    restarts a killed controller from a fault's timer thread, which ends right after: its successor was
    sent SIGTERM 2-4 s after it started serving, and every run after a controller fault went on without
    a controller (a flow the successor had just paused was never resumed: the run stalled for 30 s).
    Forked from here, a child's parent-death signal comes with the process's end, as meant.
    """

    def __init__(self) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="echelon-spawner", daemon=True)
                self._thread.start()
        answer: dict[str, Any] = {}
        done = threading.Event()
        self._requests.put((argv, kwargs, answer, done))
        done.wait()
        if "error" in answer:
            raise answer["error"]
        return answer["proc"]

    def _serve(self) -> None:
        while True:
            argv, kwargs, answer, done = self._requests.get()
            try:
                answer["proc"] = subprocess.Popen(argv, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                answer["error"] = exc
            finally:
                done.set()


_SPAWNER = _Spawner()


def spawn(argv: list[str], **popen_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(argv, **popen_kwargs)`` forked from a thread that lives as long as this process,
    so a child started with :data:`PDEATHSIG` from any thread (a timer's, a worker's) dies with the
    process and not with that thread."""
    return _SPAWNER.popen(list(argv), **popen_kwargs)


def process_start(pid: int) -> int | None:
    """Kernel start time of ``pid`` (clock ticks since boot), or None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    # comm (field 2) may contain spaces/parens: fields after the last ')' are fixed.
    return int(text.rsplit(")", 1)[1].split()[19])


def proc_record(pid: int) -> ProcRecord:
    return {"pid": pid, "start": process_start(pid)}


def same_process(record: ProcRecord) -> bool:
    """Is the process recorded as {pid, start} still the same one (not a reused pid)?"""
    return process_start(int(record["pid"])) == record.get("start")


def kill_recorded(records: Iterable[ProcRecord], grace_s: float = 2.0) -> int:
    """SIGHUP+SIGTERM (then SIGKILL) the recorded processes that are still the same process; return count."""
    alive = [r for r in records if same_process(r)]
    for r in alive:
        with contextlib.suppress(OSError):
            os.kill(int(r["pid"]), signal.SIGHUP)
            os.kill(int(r["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(same_process(r) for r in alive):
        time.sleep(0.05)
    for r in alive:
        if same_process(r):
            with contextlib.suppress(OSError):
                os.kill(int(r["pid"]), signal.SIGKILL)
    return len(alive)


def stop_children(procs: Iterable[Any], grace_s: float) -> None:
    """SIGTERM our child processes (``subprocess.Popen``) still running, SIGKILL those not gone after
    ``grace_s`` (one deadline for all), and reap them: a child that ignores SIGTERM cannot hang a run."""
    live = [p for p in procs if p is not None and p.poll() is None]
    for proc in live:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in live:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=5.0)


def make_run_folder(kind: str) -> str:
    """A new temporary folder ``echelon-<kind>-*`` owned (per its ``owner.json``) by this process."""
    folder = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{kind}-")
    record_processes(folder)
    return folder


def record_processes(folder: str, *pids: int) -> None:
    """Write down in ``folder/owner.json`` that this process owns ``folder`` and started ``pids``."""
    me = proc_record(os.getpid())
    data = read_owner(folder)
    if data is None or data.get("owner") != me:
        data = {"owner": me, "processes": []}
    data["processes"] += [proc_record(pid) for pid in pids]
    write_json_atomic(os.path.join(folder, OWNER_FILE), data)


def read_owner(folder: str) -> dict | None:
    try:
        with open(os.path.join(folder, OWNER_FILE), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and isinstance(data.get("owner"), dict) and isinstance(
        data.get("processes"), list)
    return data if ok else None


def clean_abandoned(root: str | None = None) -> dict[str, int]:
    """End the recorded processes of every ``echelon-*`` folder under ``root`` whose owner is dead, and
    remove those folders (nested folders' records count: a run keeps its controller's folder inside its
    own).  Folders without an owner record, or with a live owner, are left alone."""
    root = root or tempfile.gettempdir()
    totals = {"folders": 0, "processes": 0}
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return totals
    for name in names:
        folder = os.path.join(root, name)
        top = read_owner(folder) if name.startswith(TEMP_PREFIX) else None
        if top is None or same_process(top["owner"]):
            continue
        for inner, _dirs, files in os.walk(folder):
            if OWNER_FILE in files:
                record = read_owner(inner)
                if record is not None:
                    totals["processes"] += kill_recorded(record["processes"])
        shutil.rmtree(folder, ignore_errors=True)
        totals["folders"] += 1
    return totals
