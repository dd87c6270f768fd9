"""LangGraph store items in the tape's SQLite file: the table ``gt_kv``.

The file is shared with the tape (WAL, so readers never wait on writers);
the table, its indexes and its version row (``gt_kv_schema``, the tape's
``PRAGMA user_version`` being the tape's) are created on first use, under
``BEGIN IMMEDIATE`` like every write here, so two processes opening the same
file at once create them once. Namespaces are compared as text in SQLite's
default BINARY collation: byte order of UTF-8, which is code point order,
the order Python sorts strings in, so a namespace range scan and the search
order agree with :mod:`graphtape.store.kv_base`'s.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from langgraph.store.base import TTLConfig

from graphtape.errors import DatabaseLocked, SchemaTooNew, StoreError
from graphtape.store import kv_sql
from graphtape.store.kv_base import KVStore, Row, Write

__all__ = ["MIGRATIONS", "SqliteKVStore"]

#: The table's history; the index of the last one applied is the row of ``gt_kv_schema``.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE gt_kv (
        ns TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        expires_at REAL,
        ttl_minutes REAL,
        PRIMARY KEY (ns, key)
    ) WITHOUT ROWID;
    CREATE INDEX gt_kv_updated ON gt_kv(updated_at);
    CREATE INDEX gt_kv_expires ON gt_kv(expires_at) WHERE expires_at IS NOT NULL
    """,
]


class SqliteKVStore(KVStore):
    """LangGraph store items in an SQLite file (``sqlite:///path/to/tape.db``)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 10.0,
        ttl: TTLConfig | None = None,
        clock_fn: Callable[[], float] | None = None,
    ):
        super().__init__(ttl=ttl, clock_fn=clock_fn)
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder for {self.path}: {exc.strerror}") from exc
        try:
            self._conn = sqlite3.connect(
                str(self.path), timeout=busy_timeout, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        try:
            # as the tape store sets them, whichever of the two opens the file first
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.Error as exc:
            self._conn.close()
            raise self._translate(exc) from exc
        except BaseException:
            self._conn.close()
            raise

    def _translate(self, exc: sqlite3.Error) -> StoreError:
        msg = str(exc)
        if "locked" in msg or "busy" in msg:
            return DatabaseLocked(
                f"{self.path} is locked by another process (waited {self.busy_timeout:g}s); retry when it "
                "finishes, or add ?busy_timeout=SECONDS to the store URL"
            )
        return StoreError(f"SQLite error on {self.path} (LangGraph store): {msg}")

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed whole, or rolled back."""
        with self._reading() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _version(self, conn: sqlite3.Connection) -> int:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='gt_kv_schema'").fetchone() is None:
            return 0
        row = conn.execute("SELECT version FROM gt_kv_schema").fetchone()
        return row[0] if row else 0

    def _migrate(self) -> None:
        with self._reading() as conn:
            if self._version(conn) == len(MIGRATIONS):
                return
        with self._writing() as conn:
            version = self._version(conn)  # again, under the write lock: another process may have done it
            if version > len(MIGRATIONS):
                raise SchemaTooNew(
                    f"{self.path} has LangGraph store schema v{version} but this graphtape knows "
                    f"v{len(MIGRATIONS)}; upgrade graphtape to use it"
                )
            if version == 0:
                conn.execute("CREATE TABLE IF NOT EXISTS gt_kv_schema (version INTEGER NOT NULL)")
                conn.execute("INSERT INTO gt_kv_schema(version) VALUES (0)")
            for index in range(version, len(MIGRATIONS)):
                for statement in MIGRATIONS[index].split(";"):
                    if statement.strip():
                        conn.execute(statement)
            conn.execute("UPDATE gt_kv_schema SET version = ?", (len(MIGRATIONS),))

    # -- KVStore -------------------------------------------------------------------

    def _rows(self, addresses: Sequence[tuple[str, str]], now: float) -> list[Row]:
        rows: list[Row] = []
        with self._reading() as conn:
            for ns, key in addresses:
                found = conn.execute(
                    f"SELECT {kv_sql.COLUMNS} FROM gt_kv WHERE ns = ? AND key = ? AND {kv_sql.LIVE}", (ns, key, now)
                ).fetchone()
                if found is not None:
                    rows.append(Row(*found))
        return rows

    def _rows_under(self, prefix: str, now: float, limit: int | None) -> list[Row]:
        query, params = kv_sql.rows_under_query(prefix, now, limit)
        with self._reading() as conn:
            return [Row(*r) for r in conn.execute(query, params)]

    def _namespaces(self, prefix: str, now: float) -> list[str]:
        query, params = kv_sql.namespaces_query(prefix, now)
        with self._reading() as conn:
            return [r[0] for r in conn.execute(query, params)]

    def _apply(self, writes: Sequence[Write], now: float) -> None:
        with self._writing() as conn:
            for w in writes:
                if w.value is None:
                    conn.execute(kv_sql.DELETE, (w.namespace, w.key))
                else:
                    conn.execute(kv_sql.UPSERT, kv_sql.upsert_params(w, now))

    def _touch(self, rows: Sequence[Row], now: float) -> None:
        with self._writing() as conn:
            conn.executemany(kv_sql.TOUCH, [(now, r.namespace, r.key, now) for r in rows])

    def _sweep(self, now: float) -> int:
        with self._reading() as conn:  # a read first: most batches have nothing to sweep, and need no write lock
            if conn.execute(kv_sql.HAS_EXPIRED, (now,)).fetchone() is None:
                return 0
        with self._writing() as conn:
            return conn.execute(kv_sql.SWEEP, (now,)).rowcount

    def close(self) -> None:
        with self._lock:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
