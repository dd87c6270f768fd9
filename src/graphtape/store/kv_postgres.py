"""LangGraph store items in the tape's PostgreSQL schema: the table ``gt_kv``.

The URL is the tape store's (``postgresql://user@host/db?schema=NAME``): the
table goes in the same schema, beside the tape's tables, with a version row
of its own (``gt_kv_schema``); the tape's ``gt_schema`` and migrations are
not touched. Creation happens once under a transaction-scoped advisory lock
(another key than the tape's), so processes opening a fresh database at the
same moment do not race on ``CREATE TABLE``.

Why it is built this way:

* ``ns`` and ``key`` are ``COLLATE "C"``: byte order, the order SQLite and
  Python sort in, so namespace ranges and the search order are the same on
  every backend whatever the database's locale.
* Values are ``text`` holding the JSON as written, not ``jsonb``, which
  rewrites numbers (``1e2`` comes back ``100``) and reorders keys; filters
  are evaluated by :mod:`graphtape.store.kv_base` anyway.
* The tape store's connection pool when opened from it (:func:`graphtape.store.kv.kv_store_for`
  given the tape store: its connections carry the password the URL shown
  leaves out), else a pool of its own (1 to 4 connections, autocommit). A write is one transaction, rows written in
  ``(ns, key)`` order so concurrent batches lock in the same order, and
  retried whole (three attempts in all) after a deadlock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from langgraph.store.base import TTLConfig

from graphtape.errors import DatabaseLocked, SchemaTooNew, StoreError
from graphtape.store import kv_sql
from graphtape.store.kv_base import KVStore, Row, Write

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as _exc:  # pragma: no cover - depends on the installation
    raise StoreError(
        f"the PostgreSQL store needs psycopg 3 and psycopg-pool ({_exc}); pip install 'graphtape[postgres]'"
    ) from _exc

from graphtape.store.postgres_pool import open_pool
from graphtape.store.postgres_schema import one_line, parse_url

__all__ = ["KV_MIGRATION_LOCK", "MIGRATIONS", "PostgresKVStore"]

#: Key of the advisory lock held while creating the table ("gtkvmigr").
KV_MIGRATION_LOCK = 0x67746B766D696772

MIGRATIONS: list[str] = [
    """
    CREATE TABLE gt_kv (
        ns text COLLATE "C" NOT NULL,
        key text COLLATE "C" NOT NULL,
        value text NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        expires_at double precision,
        ttl_minutes double precision,
        PRIMARY KEY (ns, key)
    );
    CREATE INDEX gt_kv_updated ON gt_kv (updated_at);
    CREATE INDEX gt_kv_expires ON gt_kv (expires_at) WHERE expires_at IS NOT NULL;
    """,
]


def _pg(query: str) -> str:
    """A statement of :mod:`graphtape.store.kv_sql` with psycopg's placeholders."""
    return kv_sql.in_dialect(query, "%s")


_LIVE = _pg(kv_sql.LIVE)
_DELETE = _pg(kv_sql.DELETE)
_UPSERT = _pg(kv_sql.UPSERT)
_TOUCH = _pg(kv_sql.TOUCH)
_HAS_EXPIRED = _pg(kv_sql.HAS_EXPIRED)
_SWEEP = _pg(kv_sql.SWEEP)
_ATTEMPTS = 3

T = TypeVar("T")


class PostgresKVStore(KVStore):
    """LangGraph store items in a PostgreSQL schema (``postgresql://user@host:5432/db?schema=graphtape``)."""

    def __init__(
        self,
        url: str,
        *,
        ttl: TTLConfig | None = None,
        clock_fn: Callable[[], float] | None = None,
        max_size: int = 4,
        connect_timeout: float = 10.0,
        pool: ConnectionPool | None = None,
    ):
        """``pool``: the tape store's pool to share (its connections' search path is the schema already),
        left open by :meth:`close`; without one the store opens a pool of its own."""
        super().__init__(ttl=ttl, clock_fn=clock_fn)
        self._conninfo, self.schema, self.url = parse_url(url)
        self._owned = pool is None
        if pool is not None:
            self._pool = pool
            try:
                with pool.connection() as conn:
                    self._search_path = sql.Identifier(self.schema).as_string(conn)
                    self._migrate(conn)
            except (psycopg.Error, PoolTimeout) as exc:
                raise self._translate(exc) from None
            return
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": max(1, round(connect_timeout))}
        try:
            with psycopg.connect(self._conninfo, **kwargs) as conn:
                self._search_path = sql.Identifier(self.schema).as_string(conn)
                self._migrate(conn)
        except psycopg.Error as exc:
            raise self._translate(exc) from None
        try:
            self._pool = open_pool(
                self._conninfo,
                kwargs=kwargs,
                max_size=max_size,
                configure=self._configure,
                name=f"graphtape-kv:{self.schema}",
                connect_timeout=connect_timeout,
            )
        except (psycopg.Error, PoolTimeout) as exc:
            raise self._translate(exc) from None

    def _configure(self, conn: psycopg.Connection) -> None:
        conn.execute("SELECT set_config('search_path', %s, false)", (self._search_path,))

    def _translate(self, exc: BaseException) -> StoreError:
        diag = getattr(exc, "diag", None)
        msg = " ".join((diag.message_primary or "").split()) if diag is not None else ""
        msg = msg or one_line(exc)
        if isinstance(exc, (pg_errors.DeadlockDetected, pg_errors.SerializationFailure, pg_errors.LockNotAvailable)):
            return DatabaseLocked(f"{self.url}: concurrent writers of the LangGraph store collided ({msg}); retry")
        if isinstance(exc, PoolTimeout):
            return StoreError(f"no connection to {self.url} in time (server down, or every connection busy)")
        if isinstance(exc, psycopg.OperationalError):
            return StoreError(
                f"cannot reach PostgreSQL at {self.url}: {msg}; check that the server is running and the URL is right"
            )
        return StoreError(f"PostgreSQL error on {self.url} (LangGraph store): {msg}")

    def _migrate(self, conn: psycopg.Connection) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (KV_MIGRATION_LOCK,))
            if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
            conn.execute("SELECT set_config('search_path', %s, true)", (self._search_path,))
            (table,) = conn.execute(
                "SELECT to_regclass(format('%%I.gt_kv_schema', %s::text))", (self.schema,)
            ).fetchone() or (None,)
            if table is None:
                conn.execute("CREATE TABLE gt_kv_schema (version integer NOT NULL)")
                conn.execute("INSERT INTO gt_kv_schema (version) VALUES (0)")
            row = conn.execute("SELECT version FROM gt_kv_schema").fetchone()
            version = row[0] if row else 0
            if version > len(MIGRATIONS):
                raise SchemaTooNew(
                    f"{self.url} has LangGraph store schema v{version} but this graphtape knows "
                    f"v{len(MIGRATIONS)}; upgrade graphtape to use it"
                )
            for index in range(version, len(MIGRATIONS)):
                conn.execute(MIGRATIONS[index])
            if version < len(MIGRATIONS):
                conn.execute("UPDATE gt_kv_schema SET version = %s", (len(MIGRATIONS),))

    def _run(self, fn: Callable[[psycopg.Connection], T]) -> T:
        """``fn(conn)`` in one transaction, retried whole after a deadlock."""
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                with self._pool.connection() as conn, conn.transaction():
                    return fn(conn)
            except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure) as exc:
                if attempt == _ATTEMPTS:
                    raise self._translate(exc) from None
                time.sleep(0.01 * attempt)
            except (psycopg.Error, PoolTimeout) as exc:
                raise self._translate(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _select(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._run(lambda conn: conn.execute(query, params).fetchall())

    # -- KVStore -------------------------------------------------------------------

    def _rows(self, addresses: Sequence[tuple[str, str]], now: float) -> list[Row]:
        found = self._select(
            f"SELECT {kv_sql.COLUMNS} FROM gt_kv JOIN unnest(%s::text[], %s::text[]) AS a(a_ns, a_key) "
            f"ON ns = a_ns AND key = a_key WHERE {_LIVE}",
            ([a[0] for a in addresses], [a[1] for a in addresses], now),
        )
        return [Row(*r) for r in found]

    def _rows_under(self, prefix: str, now: float, limit: int | None) -> list[Row]:
        query, params = kv_sql.rows_under_query(prefix, now, limit)
        return [Row(*r) for r in self._select(_pg(query), params)]

    def _namespaces(self, prefix: str, now: float) -> list[str]:
        query, params = kv_sql.namespaces_query(prefix, now)
        return [r[0] for r in self._select(_pg(query), params)]

    def _apply(self, writes: Sequence[Write], now: float) -> None:
        ordered = sorted(writes, key=lambda w: (w.namespace.encode(), w.key.encode()))

        def apply(conn: psycopg.Connection) -> None:
            with conn.cursor() as cur:
                for w in ordered:
                    if w.value is None:
                        cur.execute(_DELETE, (w.namespace, w.key))
                    else:
                        cur.execute(_UPSERT, kv_sql.upsert_params(w, now))

        self._run(apply)

    def _touch(self, rows: Sequence[Row], now: float) -> None:
        ordered = sorted(rows, key=lambda r: (r.namespace.encode(), r.key.encode()))

        def touch(conn: psycopg.Connection) -> None:
            with conn.cursor() as cur:
                cur.executemany(_TOUCH, [(now, r.namespace, r.key, now) for r in ordered])

        self._run(touch)

    def _sweep(self, now: float) -> int:
        if not self._select(_HAS_EXPIRED, (now,)):
            return 0
        return self._run(lambda conn: conn.execute(_SWEEP, (now,)).rowcount)

    def close(self) -> None:
        if self._owned:
            self._pool.close()
