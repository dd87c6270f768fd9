"""The run queue in PostgreSQL: tables ``gt_q_*`` in the tape's schema, on a pool of its own.

Claiming is ``SELECT ... FOR UPDATE SKIP LOCKED``: several worker processes
claim at once and each skips the rows the others are locking, never waiting
on them. Enqueues on one thread are serialised by a transaction-scoped
advisory lock on the thread's id, so "reject if the thread is busy" cannot
let two runs in at once; the thread's row is read and written under the same
lock (and written with one upsert), so replicas racing on a new thread give a
409 or a queued run, never a duplicate-key error. The tables are created on first use under an
advisory lock (concurrent ``CREATE TABLE IF NOT EXISTS`` can collide).

Each change other processes may wait for is also a ``NOTIFY`` on the schema's
channel (delivered when its transaction commits), which
:meth:`PostgresRunQueue.listen` hears on a connection of its own: waiting
workers and viewers wake at once instead of at their next poll.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import sql
from psycopg_pool import PoolTimeout

from graphtape.errors import StoreError
from graphtape.store.postgres_pool import open_pool
from graphtape.store.runqueue_base import listen_in_background
from graphtape.store.runqueue_sql import SqlRunQueue

if TYPE_CHECKING:
    from graphtape.store.postgres import PostgresTapeStore

__all__ = ["SCHEMA", "PostgresRunQueue"]

T = TypeVar("T")

#: the queue's tables, created on first use beside the tape's (which they never touch)
SCHEMA = [
    """CREATE TABLE IF NOT EXISTS gt_q_runs(
  pos BIGSERIAL PRIMARY KEY,
  run_id TEXT NOT NULL UNIQUE, thread_id TEXT NOT NULL, assistant_id TEXT NOT NULL, graph_id TEXT NOT NULL,
  kwargs TEXT NOT NULL, metadata TEXT NOT NULL, multitask_strategy TEXT NOT NULL, status TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, worker TEXT,
  lease_expires DOUBLE PRECISION, attempt INTEGER NOT NULL DEFAULT 0, cancel_requested INTEGER NOT NULL DEFAULT 0,
  result TEXT, events INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX IF NOT EXISTS gt_q_runs_thread ON gt_q_runs(thread_id, status, pos)",
    "CREATE INDEX IF NOT EXISTS gt_q_runs_active ON gt_q_runs(pos) WHERE status IN ('pending','running')",
    """CREATE TABLE IF NOT EXISTS gt_q_events(
  run_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY(run_id, seq))""",
    """CREATE TABLE IF NOT EXISTS gt_q_threads(
  thread_id TEXT PRIMARY KEY, graph_id TEXT, metadata TEXT NOT NULL, status TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, deleted INTEGER NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS gt_q_assistants(
  assistant_id TEXT PRIMARY KEY, graph_id TEXT NOT NULL, name TEXT, description TEXT, config TEXT NOT NULL,
  context TEXT NOT NULL, metadata TEXT NOT NULL, version INTEGER NOT NULL, created_at DOUBLE PRECISION NOT NULL,
  updated_at DOUBLE PRECISION NOT NULL)""",
]

_PLACEHOLDER = re.compile(r"\?")


class PostgresRunQueue(SqlRunQueue):
    """The run queue in the PostgreSQL schema ``schema`` of the database ``conninfo`` names."""

    claim_lock = "FOR UPDATE OF r SKIP LOCKED"

    def __init__(self, conninfo: str, schema: str, url: str, *, max_size: int = 4, connect_timeout: float = 10.0):
        self.url = url
        self.schema = schema
        self._conninfo = conninfo
        #: the NOTIFY channel of this schema's queue
        self.channel = "gt_q_" + hashlib.sha1(schema.encode()).hexdigest()[:16]
        self._statements: dict[str, str] = {}
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=max(1, round(connect_timeout))) as conn:
                self._search_path = sql.Identifier(schema).as_string(conn)
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
                conn.execute("SELECT set_config('search_path', %s, false)", (self._search_path,))
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext('graphtape run queue schema'))")
                    for statement in SCHEMA:
                        conn.execute(statement)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the run queue in {url}: {' '.join(str(exc).split())}") from None
        try:
            self._pool = open_pool(
                conninfo,
                kwargs={"autocommit": True, "application_name": "graphtape-queue"},
                max_size=max_size,
                configure=self._configure,
                name=f"graphtape-queue:{schema}",
                connect_timeout=connect_timeout,
            )
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"cannot connect the run queue to {url}: {exc}") from None

    @classmethod
    def for_store(cls, store: PostgresTapeStore) -> PostgresRunQueue:
        return cls(store._conninfo, store.schema, store.url)

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT set_config('search_path', %s, false)", (self._search_path,))

    def _sql(self, text: str) -> str:
        out = self._statements.get(text)
        if out is None:
            out = self._statements[text] = _PLACEHOLDER.sub("%s", text)
        return out

    def _tx(self, fn: Callable[[Any], T], *, write: bool = True) -> T:
        try:
            with self._pool.connection() as conn:
                cur = _Cursor(conn.cursor(), self._sql)
                if not write:
                    return fn(cur)
                with conn.transaction():
                    return fn(cur)
        except PoolTimeout as exc:
            raise StoreError(f"no connection to {self.url} for the run queue ({exc}); check the server") from None
        except psycopg.Error as exc:
            raise StoreError(f"{self.url}: the run queue failed: {' '.join(str(exc).split())}") from None

    def _lock_thread(self, cur: Any, thread_id: str) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(?))", ("gt_q thread " + thread_id,))

    def _notice(self, cur: Any, what: str, run_id: str) -> None:
        cur.execute("SELECT pg_notify(?, ?)", (self.channel, f"{what}:{run_id}"))

    def listen(self, on_notice: Callable[[str, str], None]) -> Callable[[], None] | None:
        """``LISTEN`` on the schema's channel from a thread with a connection of its own."""

        def listen(stop: threading.Event) -> None:
            with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10) as conn:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                while not stop.is_set():
                    for notice in conn.notifies(timeout=0.5):
                        what, _, run_id = notice.payload.partition(":")
                        on_notice(what, run_id)

        return listen_in_background(f"graphtape-queue-listen:{self.schema}", listen)

    def close(self) -> None:
        self._pool.close()


class _Cursor:
    """A psycopg cursor taking the queue's ``?`` placeholders."""

    def __init__(self, cur: Any, translate: Callable[[str], str]):
        self._cur = cur
        self._translate = translate

    def execute(self, text: str, params: Any = ()) -> Any:
        return self._cur.execute(self._translate(text), params)

    def fetchone(self) -> Any:
        return self._cur.fetchone()

    def fetchall(self) -> Any:
        return self._cur.fetchall()

    @property
    def rowcount(self) -> int:
        return int(self._cur.rowcount)
