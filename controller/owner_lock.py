"""One controller per registry store and per token file: an exclusive lock held for the owner's life.

Two controllers on one store would both serve and both acknowledge conflicting writes, leaving the
store a mix of both; two on one token file would overwrite each other's token (the first's clients get
401) and the second would delete the file under the first when it stops.  So the controller takes,
before it opens the store or writes the token, an exclusive ``flock`` on a lock file beside each
(``registry.sqlite.lock``, ``token.lock``) and keeps it until its process ends; a second controller
asking for either is refused with one line naming the file and the owner's pid, which the owner writes
into the lock file.

Why an advisory ``flock`` on a file beside, not SQLite's ``locking_mode = EXCLUSIVE``: the token file is
no database, and one mechanism serves both; SQLite's exclusive mode only takes its lock at the first
read or write and answers a second opener with a bare "database is locked" that cannot name the owner;
and SQLite's locks are POSIX record locks, which a process loses when it closes *any* descriptor of the
file (a second ``sqlite3.connect`` in the same process would drop them).  A ``flock`` belongs to the
open file description: the kernel releases it when the owner dies, even by SIGKILL, so a restart on the
same store after a crash just works, and nothing stale is left to clean up (the lock file stays, empty
of meaning once unlocked; it is never deleted, because deleting a lock file races with its next owner).

Paths are resolved (``os.path.realpath``) first, so ``./x`` and a symlink to ``x`` are one lock.  Advisory
means only controllers built from this code respect it; that is the case it guards.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from echelonflow.errors import UserError

LOCK_SUFFIX = ".lock"


class OwnerLockError(UserError):
    """Another live process owns the file, or its lock file cannot be made (the message says which)."""


def lock_path(target: str) -> str:
    """The lock file that guards ``target`` (beside its resolved path)."""
    return os.path.realpath(target) + LOCK_SUFFIX


class OwnerLock:
    """An exclusive ``flock`` on ``target``'s lock file, taken by :meth:`acquire` and held until
    :meth:`release` or the end of the process."""

    def __init__(self, target: str, fd: int) -> None:
        self.target = target
        self.path = lock_path(target)
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, target: str, what: str) -> OwnerLock:
        """Own ``target`` (``what`` names it in messages, e.g. ``"registry store"``), or raise
        :class:`OwnerLockError` naming the owner's pid, without waiting."""
        path = lock_path(target)
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise OwnerLockError(f"{what} {target}: cannot create its lock file {path}: "
                                 f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_pid(fd)
            os.close(fd)
            who = f"pid {owner}" if owner is not None else "a process that has not written its pid yet"
            raise OwnerLockError(f"{what} {target} is in use by another controller ({who}); "
                                 "stop it first or give another path") from None
        except OSError as exc:
            os.close(fd)
            raise OwnerLockError(f"{what} {target}: cannot lock {path}: {exc.strerror or exc}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(target, fd)

    def release(self) -> None:
        """Give the lock up (closing the descriptor unlocks it).  Idempotent."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def owner_pid(target: str) -> int | None:
    """The pid of the live process holding ``target``'s lock, or None when nobody holds it.

    Probes with a shared lock taken and dropped at once, so it can tell "free" from "held" without
    keeping anything; a controller starting at that very instant may see the lock busy and is refused,
    which is the safe side."""
    try:
        fd = os.open(lock_path(target), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def own_store_and_token(store_path: str, token_file: str) -> list[OwnerLock]:
    """The locks of a controller's registry store (none for SQLite's ``:memory:``) and token file, both
    or neither (the first is released if the second is refused)."""
    locks: list[OwnerLock] = []
    try:
        if store_path != ":memory:":
            locks.append(OwnerLock.acquire(store_path, "registry store"))
        locks.append(OwnerLock.acquire(token_file, "API token file"))
    except OwnerLockError:
        for lock in locks:
            lock.release()
        raise
    return locks
