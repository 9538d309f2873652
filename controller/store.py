"""SQLite persistence of the registry, so jobs and live flows survive a controller restart.

The registry validates a mutation, hands the resulting rows to :meth:`Store.commit` (one transaction: all
rows or none), and only then changes memory; :meth:`Store.load` returns the rows a new registry starts
from.  Rows are whole records written with upserts, so a commit never depends on what is already stored.

Default location ``/var/lib/echelon/registry.sqlite`` (directory created 0700, file 0600: it holds the
cluster's traffic plan).  Switch byte counters are not stored: after a restart the switches report them
again.  A flow of undeclared size (``size_bytes`` None) is stored with size 0, which no declared flow has
(sizes start at 1), so stores written before undeclared sizes existed need no migration; likewise an
EchelonFlow whose kind is not decided yet (declared without flows) is stored with kind ``''``.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from controller.channels import ChannelRecord
from controller.registry import EchelonRecord, FlowRecord, JobRecord, Registry, StoreSink
from controller.retention import DEFAULT as DEFAULT_RETENTION
from controller.retention import Retention

DEFAULT_PATH = "/var/lib/echelon/registry.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    weight REAL NOT NULL,
    registered_s REAL,
    aborted_s REAL,
    compute_s REAL
);
CREATE TABLE IF NOT EXISTS echelons (
    job_id TEXT NOT NULL REFERENCES jobs(job_id),
    echelon_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    PRIMARY KEY (job_id, echelon_id)
);
CREATE TABLE IF NOT EXISTS flows (
    job_id TEXT NOT NULL,
    flow_id TEXT NOT NULL,
    echelon_id TEXT NOT NULL,
    src TEXT NOT NULL,
    dst TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    offset_s REAL NOT NULL,
    start_offset_s REAL,
    seq INTEGER NOT NULL,
    state TEXT NOT NULL,
    src_port INTEGER,
    dst_port INTEGER,
    bytes_sent INTEGER NOT NULL,
    start_s REAL,
    finish_s REAL,
    channel_id TEXT,
    PRIMARY KEY (job_id, flow_id),
    FOREIGN KEY (job_id, echelon_id) REFERENCES echelons(job_id, echelon_id)
);
CREATE TABLE IF NOT EXISTS channels (
    channel_id TEXT PRIMARY KEY,
    src TEXT NOT NULL,
    dst TEXT NOT NULL,
    src_port INTEGER NOT NULL,
    dst_port INTEGER NOT NULL,
    path TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

FLOW_COLUMNS = ("job_id", "flow_id", "echelon_id", "src", "dst", "size_bytes", "offset_s", "start_offset_s",
                "seq", "state", "src_port", "dst_port", "bytes_sent", "start_s", "finish_s", "channel_id")
#: ``size_bytes`` of a flow registered without a size (declared sizes are >= 1).
UNDECLARED_SIZE = 0
#: ``kind`` of an EchelonFlow declared without flows (decided by its first ones).
UNDECIDED_KIND = ""
#: Columns added to a table after stores were first written: added to an older store when it is opened.
ADDED_COLUMNS = (("flows", "channel_id", "TEXT"), ("jobs", "registered_s", "REAL"),
                 ("jobs", "aborted_s", "REAL"), ("jobs", "compute_s", "REAL"), ("jobs", "archived_s", "REAL"),
                 ("echelons", "archived_s", "REAL"))
#: Archived jobs and EchelonFlows by when they were done (what the retention deletes first), made after
#: the columns.
INDEXES = ("CREATE INDEX IF NOT EXISTS jobs_archived ON jobs (archived_s) WHERE archived_s IS NOT NULL",
           "CREATE INDEX IF NOT EXISTS echelons_archived ON echelons (archived_s) "
           "WHERE archived_s IS NOT NULL")
#: The rows a registry loads: those of jobs in memory (``archived_s`` null), not of archived ones, and of
#: their EchelonFlows in memory.
LIVE_JOBS = "SELECT job_id FROM jobs WHERE archived_s IS NULL"
ARCHIVED_ECHELONS = "SELECT job_id, echelon_id FROM echelons WHERE archived_s IS NOT NULL"
CHANNEL_COLUMNS = ("channel_id", "src", "dst", "src_port", "dst_port", "path")


class StoreError(Exception):
    """The database cannot be opened or written (path, permissions, corruption)."""


class Store(StoreSink):
    """One SQLite file; ``commit`` is atomic, ``load`` returns everything in declaration order."""

    def __init__(self, path: str = DEFAULT_PATH) -> None:
        self.path = path
        if path != ":memory:":
            directory = os.path.dirname(os.path.abspath(path))
            try:
                os.makedirs(directory, mode=0o700, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                os.close(fd)
            except OSError as exc:
                raise StoreError(f"cannot create registry store {path!r}: {exc.strerror}") from None
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, so one commit() is one transaction.
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.executescript(SCHEMA)
            for table, column, sql_type in ADDED_COLUMNS:
                columns = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
                if column not in columns:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}")
            for index in INDEXES:
                self._db.execute(index)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open registry store {path!r}: {exc}") from None

    def close(self) -> None:
        self._db.close()

    def commit(
        self,
        jobs: Sequence[JobRecord] = (),
        echelons: Sequence[EchelonRecord] = (),
        flows: Sequence[FlowRecord] = (),
        settings: Mapping[str, str] | None = None,
        channels: Sequence[ChannelRecord] = (),
        removed_channels: Sequence[str] = (),
    ) -> None:
        self._write([
            ("INSERT INTO jobs (job_id, weight, registered_s, aborted_s, compute_s) VALUES (?, ?, ?, ?, ?) "
             "ON CONFLICT (job_id) DO UPDATE SET weight = excluded.weight, "
             "registered_s = excluded.registered_s, aborted_s = excluded.aborted_s, "
             "compute_s = excluded.compute_s",
             [(j.job_id, j.weight, j.registered_s, j.aborted_s, j.compute_s) for j in jobs]),
            ("INSERT INTO echelons (job_id, echelon_id, kind) VALUES (?, ?, ?) "
             "ON CONFLICT (job_id, echelon_id) DO UPDATE SET kind = excluded.kind",
             [(e.job_id, e.echelon_id, UNDECIDED_KIND if e.kind is None else e.kind) for e in echelons]),
            ("INSERT OR REPLACE INTO flows ({}) VALUES ({})".format(
                ", ".join(FLOW_COLUMNS), ", ".join("?" * len(FLOW_COLUMNS))),
             [_flow_row(f) for f in flows]),
            ("INSERT OR REPLACE INTO settings (name, value) VALUES (?, ?)", list((settings or {}).items())),
            ("INSERT OR REPLACE INTO channels ({}) VALUES ({})".format(
                ", ".join(CHANNEL_COLUMNS), ", ".join("?" * len(CHANNEL_COLUMNS))),
             [(c.channel_id, c.src, c.dst, c.src_port, c.dst_port, json.dumps(list(c.path)))
              for c in channels]),
            ("DELETE FROM channels WHERE channel_id = ?", [(c,) for c in removed_channels]),
        ])

    def load(self, job_id: str | None = None, echelon_id: str | None = None) -> tuple[
            list[JobRecord], list[EchelonRecord], list[FlowRecord], dict[str, str], list[ChannelRecord]]:
        """The rows of the jobs in memory (not archived) and of their EchelonFlows in memory, or of the
        one job ``job_id`` (archived or not, every EchelonFlow of it the store holds, with no settings:
        what ``controller.archive`` reads), or of its one EchelonFlow ``echelon_id``."""
        db = self._db
        if job_id is None:
            which, args = f"IN ({LIVE_JOBS})", ()
            parts = f" AND (job_id, echelon_id) NOT IN ({ARCHIVED_ECHELONS})"
        else:
            which, args = "= ?", (job_id,)
            parts = "" if echelon_id is None else " AND echelon_id = ?"
        part_args = args + (() if echelon_id is None else (echelon_id,))
        try:
            jobs = [JobRecord(*row) for row in
                    db.execute("SELECT job_id, weight, registered_s, aborted_s, compute_s FROM jobs "
                               f"WHERE job_id {which} ORDER BY rowid", args)]
            echelons = [EchelonRecord(job, echelon_id, None if kind == UNDECIDED_KIND else kind)
                        for job, echelon_id, kind in
                        db.execute(f"SELECT job_id, echelon_id, kind FROM echelons WHERE job_id {which}"
                                   f"{parts} ORDER BY rowid", part_args)]
            flows = [_flow_record(row) for row in
                     db.execute("SELECT {} FROM flows WHERE job_id {}{} ORDER BY seq".format(
                         ", ".join(FLOW_COLUMNS), which, parts), part_args)]
            if job_id is not None:
                return jobs, echelons, flows, {}, []
            settings = dict(db.execute("SELECT name, value FROM settings"))
            rows = db.execute("SELECT {} FROM channels ORDER BY rowid".format(", ".join(CHANNEL_COLUMNS)))
            channels = [ChannelRecord(cid, src, dst, sport, dport, tuple(json.loads(path)))
                        for cid, src, dst, sport, dport, path in rows]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot read registry store {self.path!r}: {exc}") from None
        return jobs, echelons, flows, settings, channels

    # ------------------------------------------------------------------ retention (controller.retention)
    def archive(self, jobs: Sequence[tuple[str, float]]) -> None:
        self._write([("UPDATE jobs SET archived_s = ? WHERE job_id = ?", [(at, job) for job, at in jobs])])

    def archive_echelons(self, echelons: Sequence[tuple[str, str, float]]) -> None:
        self._write([("UPDATE echelons SET archived_s = ? WHERE job_id = ? AND echelon_id = ?",
                      [(at, job, echelon) for job, echelon, at in echelons])])

    def archived(self, job_id: str) -> float | None:
        return self._one("SELECT archived_s FROM jobs WHERE job_id = ?", (job_id,))

    def archived_echelon(self, job_id: str, echelon_id: str) -> float | None:
        return self._one("SELECT archived_s FROM echelons WHERE job_id = ? AND echelon_id = ?",
                         (job_id, echelon_id))

    def archived_flow(self, job_id: str, flow_id: str) -> str | None:
        """The EchelonFlow of the flow ``flow_id`` when that EchelonFlow is archived (None: no such flow)."""
        return self._one("SELECT echelon_id FROM flows WHERE job_id = ? AND flow_id = ? "
                         f"AND (job_id, echelon_id) IN ({ARCHIVED_ECHELONS})", (job_id, flow_id))

    def parted_jobs(self) -> list[str]:
        try:
            return [job for (job,) in self._db.execute("SELECT DISTINCT job_id FROM echelons WHERE "
                                                       f"archived_s IS NOT NULL AND job_id IN ({LIVE_JOBS})")]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot read registry store {self.path!r}: {exc}") from None

    def _one(self, sql: str, args: tuple) -> Any:
        """The first column of the one row ``sql`` finds (None: no row)."""
        try:
            row = self._db.execute(sql, args).fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot read registry store {self.path!r}: {exc}") from None
        return None if row is None else row[0]

    def delete_job(self, job_id: str) -> None:
        self._write([(f"DELETE FROM {table} WHERE job_id = ?", [(job_id,)])
                     for table in ("flows", "echelons", "jobs")])

    def purge(self, done_before_s: float) -> int:
        at = repr(float(done_before_s))
        old = f"SELECT job_id FROM jobs WHERE archived_s < {at}"
        old_parts = f"SELECT job_id, echelon_id FROM echelons WHERE archived_s < {at}"
        before = self._db.total_changes
        self._write([(f"DELETE FROM flows WHERE (job_id, echelon_id) IN ({old_parts})", [()]),
                     (f"DELETE FROM echelons WHERE archived_s < {at}", [()]),
                     *((f"DELETE FROM {table} WHERE job_id IN ({old})", [()])
                       for table in ("flows", "echelons", "jobs"))])
        return self._db.total_changes - before

    def _write(self, statements: Sequence[tuple[str, Sequence[tuple]]]) -> None:
        """Statements (each with its rows of parameters) in one transaction."""
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                for sql, rows in statements:
                    db.executemany(sql, rows)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"registry store {self.path!r}: write failed: {exc}") from None


def _flow_row(flow: FlowRecord) -> tuple:
    return tuple(UNDECLARED_SIZE if c == "size_bytes" and flow.size_bytes is None else getattr(flow, c)
                 for c in FLOW_COLUMNS)


def _flow_record(row: Sequence) -> FlowRecord:
    values = dict(zip(FLOW_COLUMNS, row))
    if values["size_bytes"] == UNDECLARED_SIZE:
        values["size_bytes"] = None
    return FlowRecord(**values)


def open_registry(topology, path: str = DEFAULT_PATH, retention: Retention = DEFAULT_RETENTION):
    """A :class:`Registry` backed by the store at ``path``, holding the jobs stored there that were not
    archived (``controller.retention``)."""
    store = Store(path)
    registry = Registry(topology, store=store, loaded=store.load(), retention=retention)
    registry.parted_jobs.update(store.parted_jobs())
    registry.bind_topology_name()
    return registry
