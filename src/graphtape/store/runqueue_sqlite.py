"""The run queue in an SQLite file: the tape's own file, on a connection of its own.

SQLite serves one process (:attr:`~graphtape.store.runqueue.RunQueue.single_process`):
every write takes the file's write lock with ``BEGIN IMMEDIATE``, so a claim
or an enqueue is atomic, but the file is on one machine and one writer at a
time; several server processes on one file would only queue behind each
other's locks. The Studio server refuses to start workers in a second process
on the same file (see ``graphtape.server.studio.workers``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from graphtape.errors import DatabaseLocked, StoreError
from graphtape.store.runqueue_base import Enqueued, QueuedRun
from graphtape.store.runqueue_sql import SqlRunQueue

__all__ = ["SCHEMA", "SqliteRunQueue"]

T = TypeVar("T")

#: the queue's tables, created on first use beside the tape's (which they never touch)
SCHEMA = """
CREATE TABLE IF NOT EXISTS gt_q_runs(
  pos INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT NOT NULL UNIQUE, thread_id TEXT NOT NULL, assistant_id TEXT NOT NULL, graph_id TEXT NOT NULL,
  kwargs TEXT NOT NULL, metadata TEXT NOT NULL, multitask_strategy TEXT NOT NULL, status TEXT NOT NULL,
  created_at REAL NOT NULL, updated_at REAL NOT NULL, worker TEXT, lease_expires REAL,
  attempt INTEGER NOT NULL DEFAULT 0, cancel_requested INTEGER NOT NULL DEFAULT 0, result TEXT,
  events INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS gt_q_runs_thread ON gt_q_runs(thread_id, status, pos);
CREATE INDEX IF NOT EXISTS gt_q_runs_status ON gt_q_runs(status, pos);
CREATE TABLE IF NOT EXISTS gt_q_events(
  run_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL, data TEXT NOT NULL,
  PRIMARY KEY(run_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gt_q_threads(
  thread_id TEXT PRIMARY KEY, graph_id TEXT, metadata TEXT NOT NULL, status TEXT NOT NULL,
  created_at REAL NOT NULL, updated_at REAL NOT NULL, deleted INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS gt_q_assistants(
  assistant_id TEXT PRIMARY KEY, graph_id TEXT NOT NULL, name TEXT, description TEXT, config TEXT NOT NULL,
  context TEXT NOT NULL, metadata TEXT NOT NULL, version INTEGER NOT NULL, created_at REAL NOT NULL,
  updated_at REAL NOT NULL);
"""


class SqliteRunQueue(SqlRunQueue):
    """The run queue in the SQLite file at ``path``."""

    single_process = True

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 10.0):
        self.url = f"sqlite:///{path}"
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(str(path), timeout=busy_timeout, check_same_thread=False, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            # what this connection deletes or rewrites is zeroed in the file, not left in a free page:
            # an ended run's config, stored redacted, leaves no secret behind (see _purge)
            self._conn.execute("PRAGMA secure_delete=ON")
            self._tx(lambda cur: cur.executescript(SCHEMA) and None, write=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the run queue in {path}: {exc}") from exc

    def _tx(self, fn: Callable[[Any], T], *, write: bool = True) -> T:
        with self._lock:
            try:
                if write:
                    self._conn.execute("BEGIN IMMEDIATE")
                    try:
                        out = fn(self._conn.cursor())
                        self._conn.execute("COMMIT")
                    except BaseException:
                        if self._conn.in_transaction:
                            self._conn.execute("ROLLBACK")
                        raise
                    return out
                return fn(self._conn.cursor())
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc):
                    raise DatabaseLocked(f"{self.url}: the run queue is locked by another process ({exc})") from exc
                raise StoreError(f"{self.url}: the run queue failed: {exc}") from exc

    def finish(self, run_id: str, worker: str, status: str, result: Any) -> bool:
        done = super().finish(run_id, worker, status, result)
        if done:
            self._purge()
        return done

    def request_cancel(self, run_ids: Sequence[str], cancel_result: Any = None) -> list[QueuedRun]:
        out = super().request_cancel(run_ids, cancel_result)
        if any(run.done for run in out):
            self._purge()
        return out

    def enqueue(self, run: QueuedRun, *, strategy: str = "enqueue", cancel_result: Any = None) -> Enqueued:
        out = super().enqueue(run, strategy=strategy, cancel_result=cancel_result)
        if strategy in ("interrupt", "rollback") and any(other.status == "pending" for other in out.active):
            self._purge()
        return out

    def _purge(self) -> None:
        """Empty the write-ahead log once a run has ended: its frames still hold the pages as they
        were, the ended run's secrets included, until a checkpoint copies them into the file and
        truncates the log. Best effort: while another connection reads, the log is truncated at a
        later run's end (or by SQLite's own checkpoints)."""
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
