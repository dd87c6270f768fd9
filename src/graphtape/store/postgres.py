"""The shared store: tapes in PostgreSQL, for several processes on several hosts.

``postgresql://user@host:5432/dbname?schema=NAME`` (``postgres://`` works
too). Everything libpq accepts in a URL is passed through; ``schema`` is
ours and names the PostgreSQL schema that holds graphtape's tables
(default ``graphtape``). It is created if missing and is the
``search_path`` of every pooled connection, so one database can hold several
independent stores (tests use one schema each and drop it afterwards).

Why it is built this way (the SQLite store is the reference for every
behaviour; this module only says where PostgreSQL differs):

* **One pool, sync, thread-safe.** A ``psycopg_pool.ConnectionPool``
  (1 to 8 connections) in autocommit mode: reads are single statements and
  never leave a transaction idle; every write is one transaction, so a batch
  is all or nothing.
* **A batch is one statement**: one ``INSERT`` per table, all in one
  ``WITH``, the fence checked by the main query; a table's rows go as a
  ``VALUES`` list of scalars when there are a few (a super-step's batch),
  as ``SELECT FROM unnest(arrays)`` when there are more. A
  single statement is its own transaction, so there is no BEGIN/COMMIT, one
  round trip, and psycopg adapts one query: 0.6 ms a batch on the project's
  2-vCPU machine against 1.05 ms for a pipelined transaction of one statement
  per table (and a third of the client CPU).
* **Bytes stay bytes.** Blobs, checkpoint bodies and event bodies are
  ``bytea`` sent and read in binary, never hex-escaped text. Every
  parameter of a batch is sent in binary: psycopg dumps a text array in
  text format by quoting each element with a regular expression, which cost
  a third of a step's client time (0.39 ms of dumping per step against
  0.12 ms in binary). Blobs over 1 KB
  are deflated at level 1 by us (as SQLite does, ``enc='z'``) and their
  columns (and event bodies) are ``STORAGE EXTERNAL`` so PostgreSQL does not
  compress them a second time with pglz: LangGraph's ``PostgresSaver``
  spends most of its time on large states in pglz plus the stdlib ``json``
  encoder, and an already deflated value gains nothing from pglz anyway.
  Checkpoint bodies are the exception (migration 6): they are small msgpack
  maps of channel versions that grow with the graph, never deflated by us
  (the readers shared with SQLite take them as they are), so the server
  compresses them, with lz4 where it has it: half the WAL of a super-step.
* **Byte order for ids.** Key columns are ``COLLATE "C"``: checkpoint ids
  sort (and ``before=`` compares) byte-wise as in SQLite whatever the
  database's locale, and a ``LIKE 'prefix%'`` on run ids can use the index.
* **Metadata twice**: the exact JSON text (what is read back) and a
  ``jsonb`` copy that a history filter tests by containment
  (``metadata @> filter``) on the server, without reading bodies. Reading
  the jsonb back would not be exact: it turns ``1e23`` into an integer and
  cannot hold ``\u0000``. Metadata is a few hundred bytes; the copy is cheap.
* **Any Python string fits.** PostgreSQL ``text`` cannot hold NUL, which
  SQLite stores happily (an exception message quoting binary data has one).
  A string containing NUL, or starting with the marker U+FDD0 (a Unicode
  noncharacter), is stored as the marker followed by its JSON form and
  decoded on the way out; every other string is stored as it is. Only such
  strings sort differently from SQLite.
* **No deadlocks between writers.** Content-addressed rows (blobs, chain
  nodes) are shared by every thread, and two transactions inserting the same
  keys in different orders wait on each other. Every batch inserts its rows
  sorted by key, so concurrent writers always lock in the same order. A
  deadlock or serialization failure that still happens is retried (the
  transaction was rolled back whole, so a retry is safe).
* **Fencing under a share lock.** A fenced write checks its token with
  ``gt_check_fence``, which reads the lease row ``FOR SHARE``: a takeover (an
  ``UPDATE`` of that row) must wait for the write to commit, so no write of a
  stale owner can land after the new owner got its token. The function fails
  the statement with its own SQLSTATE, turned into ``LeaseLost``.
* **The database's clock for leases** (``clock_timestamp()``): hosts' clocks
  drift, the server's is the one clock every contender shares.
* **Migrations under an advisory lock.** Processes that open a fresh
  database at the same moment would race on ``CREATE SCHEMA``/``CREATE
  TABLE``; a transaction-scoped advisory lock makes one of them migrate and
  the others find the work done. The version is the row of ``gt_schema``; a
  store from a newer graphtape is refused, not altered.
* **Durability is the server's.** A commit waits for the WAL flush as
  PostgreSQL is configured. ``?options=-c%20synchronous_commit%3Doff`` in the
  URL (passed to libpq) gives what the SQLite store's ``synchronous=NORMAL``
  gives: a crash of the recording process loses nothing, a crash of the
  server can lose the last fraction of a second, and the fsync leaves every
  commit (about 0.2-0.5 ms each on the project's machine). Taking a lease is
  committed synchronously whatever the URL says (see ``acquire_lease``).
* **Lock waits are bounded.** ``lock_timeout`` (default 10 s, the SQLite
  store's busy timeout) turns a stuck wait into
  :class:`~graphtape.errors.DatabaseLocked` instead of a hang.

Rejected: psycopg's async pool (the saver bridges async to sync already, and
one code path is one set of bugs); ``COPY`` for batches (it cannot skip
existing content-addressed rows; ``INSERT ... SELECT FROM unnest(arrays)``
sends a whole column in one parameter and can); server-side compression of
blobs with lz4 (not available on every managed PostgreSQL, and would hide the
cost in the server; checkpoint bodies use it when it is there, see above).

The schema, the SQL text shared by statements, the value encodings and the URL
parsing live in :mod:`graphtape.store.postgres_schema`.

The pool starts background threads: open the store after forking, not before.

Why over 500 lines: a sixth of it is the notes above; the rest is one method
per interface operation that PostgreSQL does its own way (the schema and
encodings are in :mod:`graphtape.store.postgres_schema`, the reads shared
with SQLite in :mod:`graphtape.store.sql`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from graphtape.errors import DatabaseLocked, LeaseLost, SchemaTooNew, StoreError

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as _exc:  # pragma: no cover - depends on the installation
    raise StoreError(
        f"the PostgreSQL store needs psycopg 3 and psycopg-pool ({_exc}); pip install 'graphtape[postgres]'"
    ) from _exc

from graphtape.events import refs as event_refs
from graphtape.store.base import RUN_UPDATABLE, ArchiveEntry, CheckpointRow, RunRecord, StoreNotFound, WriteBatch
from graphtape.store.codec import dump_meta, pack_event, pack_event_plain, unpack_event
from graphtape.store.gc import mark_live
from graphtape.store.postgres_schema import (
    ACQUIRE_LEASE,
    CHECKPOINT_COLUMNS,
    CHECKPOINT_COLUMNS_IN,
    MARK,
    WRITE_COLUMNS,
    as_columns,
    decode,
    encode,
    encode_params,
    jsonb_text,
    nullable_float,
    one_line,
)

# The public names moved with the schema; ``X as X`` keeps them importable from here.
from graphtape.store.postgres_schema import COMPRESS_OVER as COMPRESS_OVER
from graphtape.store.postgres_schema import DEFAULT_SCHEMA as DEFAULT_SCHEMA
from graphtape.store.postgres_schema import FENCE_SQLSTATE as FENCE_SQLSTATE
from graphtape.store.postgres_schema import MIGRATION_LOCK as MIGRATION_LOCK
from graphtape.store.postgres_schema import MIGRATIONS as MIGRATIONS
from graphtape.store.postgres_schema import parse_url as parse_url
from graphtape.store.sql import RUN_COLUMNS, Dialect, SqlTapeStore, checkpoint_filters, decode_blob, row_to_checkpoint

#: Blobs of at least this many bytes keep their deflated form in memory (see ``_deflated``), up to
#: DEFLATE_MEMO_BYTES of deflated bytes per store.
DEFLATE_MEMO_OVER = 16 * 1024
DEFLATE_MEMO_BYTES = 8 * 1024 * 1024

#: Deadlocks and serialization failures are retried this many times in all.
WRITE_ATTEMPTS = 3

#: A batch's rows for one table go as scalar parameters up to this many rows, as arrays beyond
#: (see ``write``).
VALUES_ROWS = 8

#: The SQL the PostgreSQL store shares with the SQLite store (see :mod:`graphtape.store.sql`);
#: readers fetch 2000 addresses per query.
DIALECT = Dialect(param="%s", array_params=True, chunk=2000, checkpoint_columns=CHECKPOINT_COLUMNS)

T = TypeVar("T")

#: Batches without array parameters go with PostgreSQL's own ``$n`` placeholders (see ``numbered_query``).
RAW_BATCHES = True


@functools.lru_cache(maxsize=256)
def numbered_query(query: str) -> str:
    """A batch's ``%b`` query with PostgreSQL's ``$1, $2, ...`` placeholders, for a ``RawCursor``.

    psycopg converts a ``%b`` query to ``$n`` form with a regular expression
    and caches the result only for queries of at most 50 parameters; a
    super-step's batch (a checkpoint, its writes and events) has 50 to 60, so
    every step paid the conversion again: 0.67 ms of client CPU per step on
    the project's loaded 2-vCPU machine, a quarter of the client's share of
    a step. A store has a handful of batch shapes, so the conversion is
    cached here. Parameters then go in psycopg's automatic format: bytes,
    numbers and ``None`` in binary as before, strings as text of unknown
    type, which PostgreSQL types from the column they go into (an
    ``INSERT ... VALUES`` or ``SET`` target, a ``::jsonb`` cast, or
    ``gt_check_fence``'s arguments). Array parameters (a big batch's
    ``unnest`` columns) would go as quoted text arrays, so such batches keep
    psycopg's conversion and binary format.
    """
    pieces = query.split("%b")
    if any("%" in piece for piece in pieces):
        raise StoreError(f"internal: a batch query has a placeholder other than %b: {query[:200]}")
    out = [pieces[0]]
    for n, piece in enumerate(pieces[1:], 1):
        out.append(f"${n}")
        out.append(piece)
    return "".join(out)


class PostgresTapeStore(SqlTapeStore):
    """Tapes in a PostgreSQL schema (``postgresql://user@host:5432/db?schema=graphtape``)."""

    dialect = DIALECT
    #: a run's last batch gives its thread's lease up in the same statement (see write)
    releases_in_write = True

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        lock_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        pool_timeout: float = 30.0,
        create: bool = True,
    ):
        self._conninfo, self.schema, self.url = parse_url(url)
        self.lock_timeout = lock_timeout
        self.pool_timeout = pool_timeout
        self._closed = False
        # address -> deflated bytes of recently written large blobs (see _deflated)
        self._deflate_memo: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._deflate_memo_bytes = 0
        self._deflate_lock = threading.Lock()
        self._close_lock = threading.Lock()
        params = conninfo_to_dict(self._conninfo)
        self._kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in params:
            self._kwargs["connect_timeout"] = max(1, round(connect_timeout))
        if "application_name" not in params:
            self._kwargs["application_name"] = "graphtape"
        self._search_path: str | None = None
        # Connect and migrate on one plain connection first: an unreachable
        # server or a bad password fails here at once with libpq's reason,
        # where a pool would retry in the background until its timeout.
        try:
            with psycopg.connect(self._conninfo, **self._kwargs) as conn:
                self._search_path = self._search_path_for(conn)
                if not create:
                    self._check_exists(conn)
                self._migrate(conn)
        except psycopg.Error as exc:
            raise self._translate(exc) from None
        self._pool: ConnectionPool = ConnectionPool(
            self._conninfo,
            kwargs=self._kwargs,
            min_size=min_size,
            max_size=max_size,
            open=False,
            configure=self._configure,
            timeout=pool_timeout,
            name=f"graphtape:{self.schema}",
        )
        try:
            self._pool.open(wait=True, timeout=max(connect_timeout, 1.0))
        except (psycopg.Error, PoolTimeout) as exc:
            self._pool.close()
            raise self._translate(exc) from None

    # -- plumbing ----------------------------------------------------------------

    def _search_path_for(self, conn: psycopg.Connection) -> str:
        # Our schema alone (pg_catalog is always searched): were our tables
        # missing, a statement must fail rather than find another store's
        # tables further down the path (a graphtape store in ``public``, say).
        return sql.Identifier(self.schema).as_string(conn)

    def _configure(self, conn: psycopg.Connection) -> None:
        """Every pooled connection: our schema first, lock waits bounded."""
        conn.execute(
            "SELECT set_config('search_path', %s, false), set_config('lock_timeout', %s, false)",
            (self._search_path, f"{max(1, round(self.lock_timeout * 1000))}ms"),
        )

    def _translate(self, exc: BaseException) -> StoreError:
        """A psycopg or pool error as a one-line StoreError that says what to do."""
        diag = getattr(exc, "diag", None)
        # the server's primary message only: its DETAIL/CONTEXT lines name internals (index tuples, pids)
        msg = " ".join((diag.message_primary or "").split()) if diag is not None else ""
        msg = msg or one_line(exc)
        if isinstance(exc, PoolTimeout):
            return StoreError(
                f"no connection to {self.url} within {self.pool_timeout:g}s (server down, or every pooled "
                "connection busy); check the server, or open the store with a larger max_size"
            )
        if isinstance(exc, (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)):
            return DatabaseLocked(
                f"{self.url}: concurrent writers kept colliding ({msg}, {WRITE_ATTEMPTS} attempts); retry the operation"
            )
        if isinstance(exc, pg_errors.LockNotAvailable):
            return DatabaseLocked(
                f"{self.url} is locked by another process (waited {self.lock_timeout:g}s): {msg}; "
                "retry when it finishes, or raise lock_timeout"
            )
        if isinstance(exc, pg_errors.IntegrityError):
            return StoreError(f"write refused by {self.url}: {msg} (is this run already in the store?)")
        if isinstance(exc, pg_errors.UndefinedTable):
            return StoreError(f"{self.url} has lost its graphtape tables ({msg}); reopen the store to recreate them")
        if isinstance(exc, pg_errors.InsufficientPrivilege):
            return StoreError(
                f"not allowed on {self.url}: {msg}; grant the user rights on schema {self.schema} and its "
                "tables, or have a user who may create them open the store once"
            )
        if isinstance(exc, psycopg.OperationalError):
            return StoreError(
                f"cannot reach PostgreSQL at {self.url}: {msg}; check that the server is running and "
                "the URL (host, port, user, database) is right"
            )
        return StoreError(f"PostgreSQL error on {self.url}: {msg}")

    def _check_exists(self, conn: psycopg.Connection) -> None:
        """Refuse to go on (and so to create anything) when the schema holds no graphtape store."""
        found = conn.execute("SELECT to_regclass(format('%%I.gt_schema', %s::text))", (self.schema,)).fetchone()
        if found is None or found[0] is None:
            raise StoreNotFound(
                f"no tape store at {self.url}: schema {self.schema!r} has no graphtape tables; check --url or "
                "GRAPHTAPE_URL (a store is created by recording a run, or by graphtape import)"
            )

    def _migrate(self, conn: psycopg.Connection) -> None:
        """Bring the schema to the current version, once, whoever else is opening it.

        Nothing is created that exists already, and existence is checked
        before any ``CREATE``: PostgreSQL checks the privilege to create
        before ``IF NOT EXISTS``, and a user who may only read and write an
        up-to-date store (the usual grant on a managed database) must still
        be able to open it.
        """
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            # Under the lock: whoever came first has created everything below.
            if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
            conn.execute("SELECT set_config('search_path', %s, true)", (self._search_path,))
            # one row, NULL when the table is missing
            (table,) = conn.execute(
                "SELECT to_regclass(format('%%I.gt_schema', %s::text))", (self.schema,)
            ).fetchone() or (None,)
            if table is None:
                conn.execute("CREATE TABLE gt_schema (version integer NOT NULL)")
                conn.execute("INSERT INTO gt_schema(version) VALUES (0)")
            row = conn.execute("SELECT version FROM gt_schema").fetchone()
            if row is None:
                raise StoreError(f"{self.url}: the table gt_schema has no row; it is not a graphtape store")
            version = row[0]
            if version > len(MIGRATIONS):
                raise SchemaTooNew(
                    f"{self.url} has tape schema v{version} but this graphtape knows v{len(MIGRATIONS)}; "
                    "upgrade graphtape to read it"
                )
            for index in range(version, len(MIGRATIONS)):
                conn.execute(MIGRATIONS[index])  # several statements, no parameters: one simple query
            if version < len(MIGRATIONS):
                conn.execute("UPDATE gt_schema SET version = %s", (len(MIGRATIONS),))

    @property
    def schema_version(self) -> int:
        row = self._query("SELECT version FROM gt_schema")
        return row[0][0] if row else 0

    @property
    def location(self) -> str:
        return self.url

    def _query(self, query: Any, params: Any = None, *, binary: bool = False) -> list[tuple[Any, ...]]:
        """One read statement. A pooled connection the server dropped is replaced and the read tried again."""
        for attempt in (1, 2):
            try:
                with self._pool.connection() as conn:
                    rows = conn.execute(query, encode_params(params), binary=binary).fetchall()
                return [tuple(map(decode, row)) for row in rows]
            except psycopg.OperationalError as exc:
                if attempt == 1 and not isinstance(exc, pg_errors.QueryCanceled) and self._is_disconnect(exc):
                    continue
                raise self._translate(exc) from None
            except (psycopg.Error, PoolTimeout) as exc:
                raise self._translate(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _is_disconnect(exc: psycopg.OperationalError) -> bool:
        return exc.sqlstate is None or exc.sqlstate.startswith("08") or exc.sqlstate in ("57P01", "57P02", "57P03")

    def _transaction(
        self, fn: Callable[[psycopg.Connection], T], *, fence: tuple[str, int] | None = None, transaction: bool = True
    ) -> T:
        """Run ``fn(conn)`` in one transaction; retried whole after a deadlock or serialization failure.

        ``transaction=False`` is for ``fn`` that run a single statement, which
        is a transaction by itself on an autocommit connection.
        """
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                with self._pool.connection() as conn:
                    with conn.transaction() if transaction else contextlib.nullcontext():
                        return fn(conn)
            except psycopg.Error as exc:
                if fence is not None and exc.sqlstate == FENCE_SQLSTATE:
                    current = exc.diag.message_primary or "none"
                    raise LeaseLost(
                        f"lease {fence[0]} now belongs to another process (our token {fence[1]}, "
                        f"current {current}); this run must stop: the thread moved on"
                    ) from None
                if not isinstance(exc, (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)):
                    raise self._translate(exc) from None
                if attempt < WRITE_ATTEMPTS:
                    time.sleep(0.01 * attempt)
                    continue
                raise self._translate(exc) from None
            except PoolTimeout as exc:
                raise self._translate(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    # -- writes -------------------------------------------------------------------

    def _deflated(self, address: str, data: bytes) -> bytes:
        """``data`` deflated at level 1, remembered for large blobs that come back.

        A large value that never changes is sent again by every run that
        carries it (its input, the checkpoint of its first step, its output):
        its address may have been collected since, so the row must be sent,
        but deflating 200 KB again cost 0.8-2.6 ms of client CPU each time, four
        times a run. The address names the content and deflating is
        deterministic, so the bytes remembered are the bytes a new deflate
        would give. Bounded by DEFLATE_MEMO_BYTES of deflated bytes,
        least recently used out first.
        """
        if len(data) < DEFLATE_MEMO_OVER:
            return zlib.compress(data, 1)
        with self._deflate_lock:
            hit = self._deflate_memo.get(address)
            if hit is not None:
                self._deflate_memo.move_to_end(address)
                return hit
        packed = zlib.compress(data, 1)
        if len(packed) <= DEFLATE_MEMO_BYTES // 4:
            with self._deflate_lock:
                if address not in self._deflate_memo:
                    self._deflate_memo[address] = packed
                    self._deflate_memo_bytes += len(packed)
                while self._deflate_memo_bytes > DEFLATE_MEMO_BYTES:
                    _, old = self._deflate_memo.popitem(last=False)
                    self._deflate_memo_bytes -= len(old)
        return packed

    def write(self, batch: WriteBatch, *, fence: tuple[str, int] | None = None) -> None:
        """The whole batch as one statement (see the module docstring).

        The main query (the fence check) runs first; PostgreSQL then runs the
        ``WITH`` parts to completion, last to first. Every writer sends its
        parts in the same order and each part's rows sorted by key, so
        writers lock shared rows in one order; and a failed fence aborts the
        statement, so nothing of it is written.

        The parts of one statement all see the same snapshot, so nothing may
        touch a row twice: the batch is normalised first, with the semantics
        of applying it row by row (updates of a run created in this batch are
        folded into its row; several updates of one run are merged; for a
        checkpoint or a replacing write the last row of a key wins, for a
        first-wins write the first, and a key that a replacing write sets is
        not also inserted first-wins).
        """
        if not batch:
            return
        bad = {k for _, fields in batch.run_updates for k in fields} - RUN_UPDATABLE
        if bad:
            raise StoreError(f"cannot update run columns {sorted(bad)}")
        merged: dict[str, dict[str, Any]] = {}
        for run_id, fields in batch.run_updates:
            merged.setdefault(run_id, {}).update(fields)
        new_runs: list[RunRecord] = []
        for run in batch.new_runs:
            if run.run_id in merged:  # created and updated in this batch: insert it updated
                run = dataclasses.replace(run, **merged.pop(run.run_id))
            new_runs.append(run)
        # Rows are sorted by key (see the module docstring: no deadlocks between writers).
        blobs = sorted(
            (h, "z", self._deflated(h, d)) if len(d) > COMPRESS_OVER else (h, "raw", bytes(d))
            for h, d in batch.blobs.items()
        )
        chains = sorted((k, p, i) for k, (p, i) in batch.chains.items())
        runs = sorted(
            (
                (
                    r.run_id,
                    r.thread_id,
                    r.graph,
                    r.status,
                    float(r.started_at),
                    nullable_float(r.ended_at),
                    r.parent_run_id,
                    r.replay_of,
                    r.mode,
                    int(r.llm_calls),
                    int(r.tool_calls),
                    int(r.effect_calls),
                    int(r.served_calls),
                    int(r.live_calls),
                    int(r.tokens),
                    r.error,
                    dump_meta(r.meta),
                )
                for r in new_runs
            ),
            key=lambda row: row[0],
        )
        # arrays hold one Python type: ints and floats are not mixed in a float8[]
        pack = pack_event_plain if batch.plain_events else pack_event
        events = sorted((e.run_id, int(e.seq), e.kind, float(e.ts), pack(e.data)) for e in batch.events)
        checkpoints = sorted(
            {
                (c.thread_id, c.checkpoint_ns, c.checkpoint_id): (
                    c.thread_id,
                    c.checkpoint_ns,
                    c.checkpoint_id,
                    c.parent_id,
                    c.run_id,
                    None if c.step is None else int(c.step),
                    c.source,
                    c.created_at,
                    meta_text := dump_meta(c.metadata),
                    jsonb_text(c.metadata, meta_text),
                    bytes(c.body),
                    dump_meta(c.values),
                    c.writers,
                    c.calls,
                )
                for c in batch.checkpoints
            }.items()
        )
        replaced: dict[tuple, tuple] = {}
        kept: dict[tuple, tuple] = {}
        for w in batch.writes:
            key = (w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, int(w.idx))
            row = (*key, w.task_path, w.channel, w.value)
            if w.replace:
                replaced[key] = row  # last wins
            else:
                kept.setdefault(key, row)  # first wins
        kept = {k: v for k, v in kept.items() if k not in replaced}

        parts: list[str] = []
        params: list[Any] = []

        def part(query: str, extra: Sequence[Any] = ()) -> None:
            parts.append(f"w{len(parts)} AS ({query})")
            params.extend(extra)

        def insert(target: str, types: Sequence[str], rows: Sequence[Sequence[Any]], conflict: str = "") -> None:
            """Insert ``rows`` into ``target`` ("table(columns)"); ``types`` are the columns' SQL types.

            Up to VALUES_ROWS rows go as a ``VALUES`` list of scalar
            parameters: psycopg dumps an array parameter about seven times
            slower than a scalar, and a super-step's batch has one or two
            rows per table (30 arrays were half of its client time). More
            rows go as one array per column through ``unnest``, so a big
            batch stays one short statement with few parameters.
            """
            if len(rows) <= VALUES_ROWS:
                one = "(" + ", ".join("%b::jsonb" if t == "jsonb" else "%b" for t in types) + ")"
                query = f"INSERT INTO {target} VALUES {', '.join([one] * len(rows))}"
                params.extend([encode(v) for row in rows for v in row])
            else:
                names = [f"c{i}" for i in range(len(types))]
                select = ", ".join(f"{n}::jsonb" if t == "jsonb" else n for n, t in zip(names, types))
                arrays = ", ".join(f"%b::{'text' if t == 'jsonb' else t}[]" for t in types)
                query = f"INSERT INTO {target} SELECT {select} FROM unnest({arrays}) AS u({', '.join(names)})"
                params.extend(as_columns(rows))
            part(f"{query} {conflict}" if conflict else query)

        if blobs:
            insert("gt_blobs(hash, enc, data)", ("text", "text", "bytea"), blobs, "ON CONFLICT DO NOTHING")
        if chains:
            insert("gt_chains(id, parent, item)", ("text",) * 3, chains, "ON CONFLICT DO NOTHING")
        if runs:
            insert(
                f"gt_runs({RUN_COLUMNS})",
                ("text",) * 4 + ("float8",) * 2 + ("text",) * 3 + ("bigint",) * 6 + ("text",) * 2,
                runs,
            )
        if events:
            insert("gt_events(run_id, seq, kind, ts, data)", ("text", "bigint", "text", "float8", "bytea"), events)
        if checkpoints:
            insert(
                f"gt_checkpoints({CHECKPOINT_COLUMNS_IN})",
                ("text",) * 5 + ("bigint",) + ("text",) * 3 + ("jsonb", "bytea") + ("text",) * 3,
                [row for _, row in checkpoints],
                "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
                "parent_id = EXCLUDED.parent_id, run_id = EXCLUDED.run_id, step = EXCLUDED.step, "
                "source = EXCLUDED.source, created_at = EXCLUDED.created_at, "
                "metadata_text = EXCLUDED.metadata_text, metadata = EXCLUDED.metadata, "
                "body = EXCLUDED.body, channel_values = EXCLUDED.channel_values, "
                "writers = EXCLUDED.writers, calls = EXCLUDED.calls",
            )
        for rows, conflict in (
            (
                replaced,
                "DO UPDATE SET task_path = EXCLUDED.task_path, channel = EXCLUDED.channel, value = EXCLUDED.value",
            ),
            (kept, "DO NOTHING"),
        ):
            if rows:
                insert(
                    f"gt_writes({WRITE_COLUMNS})",
                    ("text",) * 4 + ("integer",) + ("text",) * 3,
                    [rows[k] for k in sorted(rows)],
                    f"ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {conflict}",
                )
        for run_id in sorted(merged):
            fields = merged[run_id]
            if fields:
                sets = ", ".join(f"{k} = %b" for k in fields)  # names checked against RUN_UPDATABLE above
                part(
                    f"UPDATE gt_runs SET {sets} WHERE run_id = %b",
                    encode_params([*(dump_meta(v) if k == "meta" else v for k, v in fields.items()), run_id]),
                )
        for name, owner in sorted(batch.releases):
            # as release_lease: the row and its token stay (the fence check reads the token only)
            part(
                "UPDATE gt_leases SET owner = NULL, expires_at = 0 WHERE name = %b AND owner = %b",
                encode_params([name, owner]),
            )
        if not parts:
            return
        main = "SELECT gt_check_fence(%b, %b)" if fence is not None else "SELECT 1"
        if fence is not None:
            params.extend([encode(fence[0]), int(fence[1])])
        query = "WITH " + ", ".join(parts) + " " + main
        if RAW_BATCHES and not any(type(p) is list for p in params):
            numbered = numbered_query(query)
            self._transaction(
                lambda conn: psycopg.RawCursor(conn).execute(numbered, params), fence=fence, transaction=False
            )
        else:
            self._transaction(lambda conn: conn.execute(query, params), fence=fence, transaction=False)

    # -- reads ---------------------------------------------------------------------

    def find_runs(self, prefix: str, limit: int = 2) -> list[str]:
        found: list[str] = []
        if encode(prefix) is prefix:
            escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            found = [
                r[0]
                for r in self._query(
                    "SELECT run_id FROM gt_runs WHERE run_id LIKE %s ESCAPE '\\' ORDER BY run_id LIMIT %s",
                    (escaped + "%", limit),
                )
            ]
        # ids stored encoded (see encode) sort together after the marker; an empty index range normally
        marked = [
            r[0]
            for r in self._query(
                f"SELECT run_id FROM gt_runs WHERE run_id >= '{MARK}' AND run_id < '{chr(ord(MARK) + 1)}'"
            )
            if r[0].startswith(prefix)
        ]
        return sorted(found + marked)[:limit]

    # -- checkpoints -------------------------------------------------------------------

    def list_checkpoints(
        self, *, thread_id=None, checkpoint_ns=None, before=None, limit=None, metadata_filter=None
    ) -> list[CheckpointRow]:
        where, params = checkpoint_filters(DIALECT, thread_id, checkpoint_ns, before)
        if metadata_filter:
            # Containment is one server-side test for every key. It is looser
            # than equality in two places, tightened here: a nested object or
            # list must be equal, not merely contained; and a key asked to be
            # None also matches rows without that key (as ``dict.get`` does).
            contained = {k: v for k, v in metadata_filter.items() if v is not None}
            if contained:
                where.append("metadata @> %s::jsonb")
                params.append(jsonb_text(contained))
            for key, value in metadata_filter.items():
                if value is None:
                    where.append("coalesce(metadata -> %s, 'null'::jsonb) = 'null'::jsonb")
                    params.append(key)
                elif isinstance(value, (dict, list)):
                    where.append("metadata -> %s = %s::jsonb")
                    params.extend([key, jsonb_text(value)])
        query = f"SELECT {CHECKPOINT_COLUMNS} FROM gt_checkpoints"
        if where:
            query += " WHERE " + " AND ".join(where)
        # Newest first by id across threads and namespaces too; ties (a copied
        # thread keeps its ids) in the SQLite store's order.
        query += (
            " ORDER BY checkpoint_id DESC"
            if thread_id is not None and checkpoint_ns is not None
            else " ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC"
        )
        if limit is not None:
            query += " LIMIT %s"
            params.append(limit)
        return [row_to_checkpoint(r) for r in self._query(query, params, binary=True)]

    def delete_checkpoints(self, keys: Sequence[tuple[str, str, str]]) -> None:
        if not keys:
            return
        columns = as_columns(sorted(set(map(tuple, keys))))

        def go(conn: psycopg.Connection) -> None:
            for table in ("gt_checkpoints", "gt_writes"):
                conn.execute(
                    f"DELETE FROM {table} t USING unnest(%s::text[], %s::text[], %s::text[]) AS k(th, ns, id) "
                    "WHERE t.thread_id = k.th AND t.checkpoint_ns = k.ns AND t.checkpoint_id = k.id",
                    columns,
                )

        self._transaction(go)

    def delete_thread(self, thread_id: str) -> None:
        def go(conn: psycopg.Connection) -> None:
            conn.execute("DELETE FROM gt_checkpoints WHERE thread_id = %s", (encode(thread_id),))
            conn.execute("DELETE FROM gt_writes WHERE thread_id = %s", (encode(thread_id),))

        self._transaction(go)

    # -- retention ------------------------------------------------------------------------

    def delete_runs(self, run_ids: Sequence[str]) -> None:
        ids = sorted({encode(r) for r in run_ids})
        if not ids:
            return

        def go(conn: psycopg.Connection) -> None:
            conn.execute("DELETE FROM gt_events WHERE run_id = ANY(%s)", (ids,))
            conn.execute("DELETE FROM gt_runs WHERE run_id = ANY(%s)", (ids,))

        self._transaction(go)

    def remove_thread(self, thread_id: str, run_ids: Sequence[str], *, archived: ArchiveEntry | None = None) -> None:
        ids = sorted({encode(r) for r in run_ids})
        thread = encode(thread_id)

        def go(conn: psycopg.Connection) -> None:
            conn.execute("DELETE FROM gt_events WHERE run_id = ANY(%s)", (ids,))
            conn.execute("DELETE FROM gt_runs WHERE run_id = ANY(%s)", (ids,))
            conn.execute("DELETE FROM gt_checkpoints WHERE thread_id = %s", (thread,))
            conn.execute("DELETE FROM gt_writes WHERE thread_id = %s", (thread,))
            if archived is not None:
                conn.execute(
                    "INSERT INTO gt_archives (thread_id, file, archived_at, size, digest, runs) "
                    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (thread_id) DO UPDATE SET file = excluded.file, "
                    "archived_at = excluded.archived_at, size = excluded.size, digest = excluded.digest, "
                    "runs = excluded.runs",
                    encode_params(
                        [thread_id, archived.file, archived.archived_at, archived.size, archived.digest, archived.runs]
                    ),
                )

        self._transaction(go)

    def archived_threads(self, thread_id: str | None = None) -> list[ArchiveEntry]:
        where, params = ("WHERE thread_id = %s", (thread_id,)) if thread_id is not None else ("", ())
        rows = self._query(
            f"SELECT thread_id, file, archived_at, size, digest, runs FROM gt_archives {where} "
            "ORDER BY archived_at DESC, thread_id",
            params,
        )
        return [ArchiveEntry(*row) for row in rows]

    def forget_archive(self, thread_id: str) -> None:
        self._transaction(
            lambda conn: conn.execute("DELETE FROM gt_archives WHERE thread_id = %s", (encode(thread_id),)),
            transaction=False,
        )

    def collect_garbage(self) -> tuple[int, int]:
        """Mark and sweep in one transaction, with writers held off.

        A writer whose new event refers to a blob that already exists inserts
        nothing into ``gt_blobs`` (the blob is there), so a sweep that does not
        see that uncommitted event would delete a blob about to be used. The
        tables are therefore locked ``SHARE ROW EXCLUSIVE`` (in the order
        writers touch them, so the two cannot deadlock): writers wait for the
        collection, readers do not.
        """

        def go(conn: psycopg.Connection) -> tuple[int, int]:
            conn.execute(
                "LOCK TABLE gt_blobs, gt_chains, gt_events, gt_checkpoints, gt_writes IN SHARE ROW EXCLUSIVE MODE"
            )
            blobs: set[str] = set()
            chains: set[str] = set()
            with conn.cursor(name="graphtape_gc_events", binary=True) as events:
                events.itersize = 5000
                events.execute("SELECT kind, data FROM gt_events")
                for kind, data in events:
                    event_refs(decode(kind), unpack_event(data), blobs, chains)
            for (values,) in conn.execute("SELECT DISTINCT channel_values FROM gt_checkpoints"):
                blobs.update(json.loads(values).values())
            blobs.update(decode(v) for (v,) in conn.execute("SELECT DISTINCT value FROM gt_writes"))
            nodes = {
                decode(k): (decode(p), decode(i)) for k, p, i in conn.execute("SELECT id, parent, item FROM gt_chains")
            }

            def fetch(hashes: list[str]) -> dict[str, bytes]:
                rows = conn.execute(
                    "SELECT hash, enc, data FROM gt_blobs WHERE hash = ANY(%s)", encode_params([hashes]), binary=True
                )
                return {decode(h): decode_blob(enc, data) for h, enc, data in rows}

            blobs, live_chains = mark_live(blobs, chains, nodes, fetch)
            dead_chains = sorted(encode(k) for k in nodes if k not in live_chains)
            dead_blobs = sorted(h for (h,) in conn.execute("SELECT hash FROM gt_blobs") if decode(h) not in blobs)
            if dead_chains:
                conn.execute("DELETE FROM gt_chains WHERE id = ANY(%s)", (dead_chains,))
            if dead_blobs:
                conn.execute("DELETE FROM gt_blobs WHERE hash = ANY(%s)", (dead_blobs,))
            return len(dead_blobs), len(dead_chains)

        return self._transaction(go)

    # -- leases ------------------------------------------------------------------------------

    def acquire_lease(self, name: str, owner: str, ttl: float) -> int | None:
        """One upsert: insert a fresh lease, renew our own, take a free or expired one, else nothing.

        Always committed synchronously, even where the URL turned
        ``synchronous_commit`` off for speed: a new token lost in a server
        crash would be handed out a second time, to a second owner, and two
        owners with one token defeat fencing.
        """

        rows = self._transaction(
            lambda conn: conn.execute(
                ACQUIRE_LEASE, {"name": encode(name), "owner": encode(owner), "ttl": float(ttl)}
            ).fetchall(),
            transaction=False,  # one statement (the synchronous commit is set inside it)
        )
        return rows[0][0] if rows else None

    def release_lease(self, name: str, owner: str) -> None:
        # The row (and its token) stays, so the next holder's token is larger.
        self._transaction(
            lambda conn: conn.execute(
                "UPDATE gt_leases SET owner = NULL, expires_at = 0 WHERE name = %s AND owner = %s",
                (encode(name), encode(owner)),
            ),
            transaction=False,  # one statement: its own transaction, one round trip
        )

    def lease_holder(self, name: str) -> tuple[str, float, int] | None:
        rows = self._query(
            "SELECT owner, expires_at, token FROM gt_leases WHERE name = %s AND owner IS NOT NULL "
            "AND expires_at > extract(epoch FROM clock_timestamp())",
            (name,),
        )
        return (rows[0][0], rows[0][1], rows[0][2]) if rows else None

    # -- history listings ------------------------------------------------------------------------

    def _copies(self, thread_id: str) -> dict[str, str]:
        return dict(
            self._query(
                "SELECT checkpoint_id, metadata ->> 'graphtape_copied_from' FROM gt_checkpoints "
                "WHERE thread_id = %s AND checkpoint_ns = '' AND run_id IS NULL "
                "AND metadata ? 'graphtape_copied_from' ORDER BY checkpoint_id",
                (thread_id,),
            )
        )

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()
