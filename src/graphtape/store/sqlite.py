"""The embedded default store: one SQLite file, safe for several processes.

Why these settings:

* WAL journal, so readers (``graphtape runs`` in another terminal, the
  studio) never block the recording process and vice versa.
* ``synchronous=NORMAL``: in WAL mode a commit is durable against a process
  crash (what a flight recorder must survive) without an fsync per commit;
  only a power loss can drop the last commits.
* Writes use ``BEGIN IMMEDIATE`` so a second writer waits on the busy
  timeout instead of failing half way; past the timeout it gets
  :class:`~graphtape.errors.DatabaseLocked`.
* Schema changes are an ordered list of migrations; ``PRAGMA user_version``
  is the index of the last one applied. A file from a newer graphtape is
  refused rather than corrupted.

LangGraph's checkpoints written by graphtape's saver live in the same file
(``gt_checkpoint_rows``, with their bodies, metadata and values in
``gt_checkpoint_data``; ``gt_writes``), written in the same transaction as
the tape events of their super-step.

Why over 500 lines: a fifth of it is the migrations (the schema's history,
never edited), the rest one method per interface operation that SQLite does
its own way; the reads it shares with PostgreSQL are in :mod:`graphtape.store.sql`.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from graphtape.errors import DatabaseLocked, LeaseLost, SchemaTooNew, StoreError
from graphtape.events import refs as event_refs
from graphtape.store import journal
from graphtape.store.base import RUN_UPDATABLE, ArchiveEntry, CheckpointRow, EventRow, StoreNotFound, WriteBatch
from graphtape.store.codec import dump_meta, pack_blob, pack_event_plain, pack_event_templated, unpack_event
from graphtape.store.gc import mark_live
from graphtape.store.listing import CheckpointMatch, ListedEvent, listed_event
from graphtape.store.sql import RUN_COLUMNS, Dialect, SqlTapeStore, checkpoint_filters, decode_blob, row_to_checkpoint

_log = logging.getLogger(__name__)

MIGRATIONS: list[str] = [
    # 1: the initial schema
    """
    CREATE TABLE gt_runs (
        run_id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        graph TEXT NOT NULL,
        status TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL,
        parent_run_id TEXT,
        replay_of TEXT,
        mode TEXT NOT NULL,
        llm_calls INTEGER NOT NULL DEFAULT 0,
        tool_calls INTEGER NOT NULL DEFAULT 0,
        effect_calls INTEGER NOT NULL DEFAULT 0,
        served_calls INTEGER NOT NULL DEFAULT 0,
        live_calls INTEGER NOT NULL DEFAULT 0,
        tokens INTEGER NOT NULL DEFAULT 0,
        error TEXT,
        meta TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX gt_runs_started ON gt_runs(started_at);
    CREATE INDEX gt_runs_thread ON gt_runs(thread_id, started_at);
    CREATE TABLE gt_events (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        ts REAL NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE gt_blobs (
        hash TEXT PRIMARY KEY,
        enc TEXT NOT NULL,
        data BLOB NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE gt_chains (
        id TEXT PRIMARY KEY,
        parent TEXT,
        item TEXT NOT NULL
    ) WITHOUT ROWID;
    """,
    # 2: graphtape's own LangGraph checkpoint saver
    """
    CREATE TABLE gt_checkpoints (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        parent_id TEXT,
        run_id TEXT,
        step INTEGER,
        source TEXT,
        created_at TEXT NOT NULL,
        metadata TEXT NOT NULL,
        body BLOB NOT NULL,
        channel_values TEXT NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    ) WITHOUT ROWID;
    CREATE INDEX gt_checkpoints_run ON gt_checkpoints(run_id);
    CREATE TABLE gt_writes (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        task_path TEXT NOT NULL,
        channel TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    ) WITHOUT ROWID;
    """,
    # 3: leases (one writer per thread) with fencing tokens
    """
    CREATE TABLE gt_leases (
        name TEXT PRIMARY KEY,
        owner TEXT,
        expires_at REAL NOT NULL,
        token INTEGER NOT NULL
    ) WITHOUT ROWID;
    """,
    # 4: narrow indexes so a history listing reads only what it shows: checkpoint
    # metadata without the bodies, and events of the wanted kinds without the rest
    """
    CREATE INDEX gt_checkpoints_listing ON gt_checkpoints(
        thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, step, source, created_at);
    CREATE INDEX gt_events_kind ON gt_events(run_id, kind, seq);
    """,
    # 5: the writers of each checkpoint and the calls of its step (known when it is
    # written), so that a history listing is one scan of one covering index; and the checkpoint a copy outside any
    # run came from (graphtape's fork), in a partial index that holds only the copies
    """
    ALTER TABLE gt_checkpoints ADD COLUMN writers TEXT;
    ALTER TABLE gt_checkpoints ADD COLUMN calls TEXT;
    ALTER TABLE gt_checkpoints ADD COLUMN copied_from TEXT;
    UPDATE gt_checkpoints SET copied_from = json_extract(metadata, '$.graphtape_copied_from')
        WHERE run_id IS NULL AND json_extract(metadata, '$.graphtape_copied_from') IS NOT NULL;
    DROP INDEX gt_checkpoints_listing;
    CREATE INDEX gt_checkpoints_listing ON gt_checkpoints(
        thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, step, source, created_at, writers, calls);
    CREATE INDEX gt_checkpoints_copies ON gt_checkpoints(thread_id, checkpoint_ns, checkpoint_id, copied_from)
        WHERE copied_from IS NOT NULL;
    """,
    # 6: the index of archived threads (graphtape archive): where each went
    """
    CREATE TABLE gt_archives (
        thread_id TEXT PRIMARY KEY,
        file TEXT NOT NULL,
        archived_at REAL NOT NULL,
        size INTEGER NOT NULL,
        digest TEXT NOT NULL,
        runs INTEGER NOT NULL
    ) WITHOUT ROWID;
    """,
    # 7: events keyed by a small integer per run and per kind instead of the 36-character run id
    # and the kind's name, in the rows and again in the index of kinds (half the bytes of an event
    # row and four fifths of its index entry); the view gt_events shows them as they were
    """
    CREATE TABLE gt_run_keys (
        run_key INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE
    );
    CREATE TABLE gt_event_kinds (
        code INTEGER PRIMARY KEY,
        kind TEXT NOT NULL UNIQUE
    );
    CREATE TABLE gt_event_rows (
        run_key INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        kind INTEGER NOT NULL,
        ts REAL NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (run_key, seq)
    ) WITHOUT ROWID;
    INSERT INTO gt_run_keys(run_id) SELECT DISTINCT run_id FROM gt_events ORDER BY run_id;
    INSERT INTO gt_event_kinds(kind) SELECT DISTINCT kind FROM gt_events ORDER BY kind;
    INSERT INTO gt_event_rows(run_key, seq, kind, ts, data)
        SELECT k.run_key, e.seq, c.code, e.ts, e.data
        FROM gt_events e JOIN gt_run_keys k ON k.run_id = e.run_id JOIN gt_event_kinds c ON c.kind = e.kind
        ORDER BY k.run_key, e.seq;
    DROP INDEX gt_events_kind;
    DROP TABLE gt_events;
    CREATE INDEX gt_event_rows_kind ON gt_event_rows(run_key, kind, seq);
    CREATE VIEW gt_events(run_id, seq, kind, ts, data) AS
        SELECT k.run_id, e.seq, c.kind, e.ts, e.data
        FROM gt_event_rows e JOIN gt_run_keys k ON k.run_key = e.run_key JOIN gt_event_kinds c ON c.code = e.kind;
    """,
    # 8: no query reads checkpoints by run (a run's checkpoints are found from the listing or its
    # events), and the index cost a page write per super-step
    """
    DROP INDEX gt_checkpoints_run;
    """,
    # 9: addresses (graphtape's 32-hex-digit hashes) stored as their 16 bytes, in blob keys and in chain
    # nodes (id, parent, item); any other address stays text. gt_key is registered by the store (SQLite
    # 3.40 has no unhex). The views gt_blobs and gt_chains show them as hex, as they were
    """
    CREATE TABLE gt_blob_rows (
        hash BLOB PRIMARY KEY,
        enc TEXT NOT NULL,
        data BLOB NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO gt_blob_rows(hash, enc, data) SELECT gt_key(hash), enc, data FROM gt_blobs ORDER BY 1;
    DROP TABLE gt_blobs;
    CREATE VIEW gt_blobs(hash, enc, data) AS
        SELECT CASE WHEN typeof(hash) = 'blob' THEN lower(hex(hash)) ELSE hash END, enc, data FROM gt_blob_rows;
    CREATE TABLE gt_chain_rows (
        id BLOB PRIMARY KEY,
        parent BLOB,
        item BLOB NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO gt_chain_rows(id, parent, item) SELECT gt_key(id), gt_key(parent), gt_key(item) FROM gt_chains
        ORDER BY 1;
    DROP TABLE gt_chains;
    CREATE VIEW gt_chains(id, parent, item) AS
        SELECT CASE WHEN typeof(id) = 'blob' THEN lower(hex(id)) ELSE id END,
            CASE WHEN typeof(parent) = 'blob' THEN lower(hex(parent)) ELSE parent END,
            CASE WHEN typeof(item) = 'blob' THEN lower(hex(item)) ELSE item END
        FROM gt_chain_rows;
    """,
    # 10: the run key is the run row's own key (gt_run_keys and gt_runs' index of run ids were two more
    # copies of every run id). A run whose events came before its row (or without one) has a row with
    # only its id (thread_id NULL), which the view gt_runs leaves out
    """
    CREATE TABLE gt_run_rows (
        run_key INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE,
        thread_id TEXT,
        graph TEXT,
        status TEXT,
        started_at REAL,
        ended_at REAL,
        parent_run_id TEXT,
        replay_of TEXT,
        mode TEXT,
        llm_calls INTEGER NOT NULL DEFAULT 0,
        tool_calls INTEGER NOT NULL DEFAULT 0,
        effect_calls INTEGER NOT NULL DEFAULT 0,
        served_calls INTEGER NOT NULL DEFAULT 0,
        live_calls INTEGER NOT NULL DEFAULT 0,
        tokens INTEGER NOT NULL DEFAULT 0,
        error TEXT,
        meta TEXT NOT NULL DEFAULT '{}'
    );
    INSERT INTO gt_run_rows(run_key, run_id, thread_id, graph, status, started_at, ended_at, parent_run_id,
        replay_of, mode, llm_calls, tool_calls, effect_calls, served_calls, live_calls, tokens, error, meta)
        SELECT k.run_key, k.run_id, r.thread_id, r.graph, r.status, r.started_at, r.ended_at, r.parent_run_id,
            r.replay_of, r.mode, coalesce(r.llm_calls, 0), coalesce(r.tool_calls, 0), coalesce(r.effect_calls, 0),
            coalesce(r.served_calls, 0), coalesce(r.live_calls, 0), coalesce(r.tokens, 0), r.error,
            coalesce(r.meta, '{}')
        FROM gt_run_keys k LEFT JOIN gt_runs r ON r.run_id = k.run_id ORDER BY k.run_key;
    INSERT INTO gt_run_rows(run_id, thread_id, graph, status, started_at, ended_at, parent_run_id, replay_of, mode,
        llm_calls, tool_calls, effect_calls, served_calls, live_calls, tokens, error, meta)
        SELECT run_id, thread_id, graph, status, started_at, ended_at, parent_run_id, replay_of, mode,
            llm_calls, tool_calls, effect_calls, served_calls, live_calls, tokens, error, meta
        FROM gt_runs WHERE run_id NOT IN (SELECT run_id FROM gt_run_keys) ORDER BY started_at, run_id;
    DROP VIEW gt_events;
    DROP TABLE gt_run_keys;
    DROP TABLE gt_runs;
    CREATE INDEX gt_runs_started ON gt_run_rows(started_at);
    CREATE INDEX gt_runs_thread ON gt_run_rows(thread_id, started_at);
    CREATE VIEW gt_runs(run_id, thread_id, graph, status, started_at, ended_at, parent_run_id, replay_of, mode,
        llm_calls, tool_calls, effect_calls, served_calls, live_calls, tokens, error, meta) AS
        SELECT run_id, thread_id, graph, status, started_at, ended_at, parent_run_id, replay_of, mode,
            llm_calls, tool_calls, effect_calls, served_calls, live_calls, tokens, error, meta
        FROM gt_run_rows WHERE thread_id IS NOT NULL;
    CREATE VIEW gt_events(run_id, seq, kind, ts, data) AS
        SELECT k.run_id, e.seq, c.kind, e.ts, e.data
        FROM gt_event_rows e JOIN gt_run_rows k ON k.run_key = e.run_key JOIN gt_event_kinds c ON c.code = e.kind;
    """,
    # v11: no table changes. A checkpoint's channel value may now be a chained message list (a blob
    # {"$chain": head, "items": "serde"}, see graphtape.runtime.saver_values), which a graphtape that
    # knows v10 would misread: the version tells it that the file is newer than it is, and it refuses
    # to open it instead of failing on the first such value.
    """
    SELECT 1
    """,
    # 12: a checkpoint's row split in two. Its body (a few KB with many nodes: every channel's version,
    # and the versions each node has seen), metadata and channel values go to gt_checkpoint_data, keyed by
    # an increasing integer: a super-step appends them to the table's last page. In the WITHOUT ROWID
    # table a row keeps at most about 1,000 bytes on its b-tree page and spilled the rest into an overflow
    # page of its own, and the covering listing index repeated the listed columns: a step dirtied about 6
    # pages for its checkpoint. What is left in gt_checkpoint_rows is what a history listing reads (the
    # listing index goes). The view gt_checkpoints shows the rows as they were (a LEFT JOIN on the data's
    # key: a query that takes no column of the data does not read it). Triggers delete a row's data with it.
    """
    CREATE TABLE gt_checkpoint_data (
        id INTEGER PRIMARY KEY,
        metadata TEXT NOT NULL,
        channel_values TEXT NOT NULL,
        body BLOB NOT NULL
    );
    CREATE TABLE gt_checkpoint_rows (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        parent_id TEXT,
        run_id TEXT,
        step INTEGER,
        source TEXT,
        created_at TEXT NOT NULL,
        writers TEXT,
        calls TEXT,
        copied_from TEXT,
        data_id INTEGER NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    ) WITHOUT ROWID;
    CREATE TEMP TABLE gt_data_ids AS SELECT thread_id, checkpoint_ns, checkpoint_id,
        row_number() OVER (ORDER BY thread_id, checkpoint_ns, checkpoint_id) AS id FROM gt_checkpoints;
    INSERT INTO gt_checkpoint_data(id, metadata, channel_values, body)
        SELECT i.id, c.metadata, c.channel_values, c.body
        FROM gt_checkpoints c JOIN temp.gt_data_ids i USING (thread_id, checkpoint_ns, checkpoint_id)
        ORDER BY i.id;
    INSERT INTO gt_checkpoint_rows(thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, step, source,
        created_at, writers, calls, copied_from, data_id)
        SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_id, c.run_id, c.step, c.source, c.created_at,
            c.writers, c.calls, c.copied_from, i.id
        FROM gt_checkpoints c JOIN temp.gt_data_ids i USING (thread_id, checkpoint_ns, checkpoint_id)
        ORDER BY c.thread_id, c.checkpoint_ns, c.checkpoint_id;
    DROP TABLE temp.gt_data_ids;
    DROP TABLE gt_checkpoints;
    CREATE INDEX gt_checkpoints_copies ON gt_checkpoint_rows(thread_id, checkpoint_ns, checkpoint_id, copied_from)
        WHERE copied_from IS NOT NULL;
    CREATE VIEW gt_checkpoints(thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, step, source, created_at,
        metadata, body, channel_values, writers, calls, copied_from) AS
        SELECT r.thread_id, r.checkpoint_ns, r.checkpoint_id, r.parent_id, r.run_id, r.step, r.source, r.created_at,
            d.metadata, d.body, d.channel_values, r.writers, r.calls, r.copied_from
        FROM gt_checkpoint_rows r LEFT JOIN gt_checkpoint_data d ON d.id = r.data_id;
    CREATE TRIGGER gt_checkpoint_rows_deleted AFTER DELETE ON gt_checkpoint_rows BEGIN
        DELETE FROM gt_checkpoint_data WHERE id = old.data_id;
    END;
    CREATE TRIGGER gt_checkpoint_rows_rewritten AFTER UPDATE OF data_id ON gt_checkpoint_rows
        WHEN old.data_id IS NOT new.data_id BEGIN
        DELETE FROM gt_checkpoint_data WHERE id = old.data_id;
    END;
    """,
    # v13: no table changes. A task's start and end and a checkpoint's event may now be stored in event
    # format 3 (graphtape.store.codec.pack_event_templated), which a graphtape that knows v12 would
    # misread: the version makes it refuse the file instead.
    """
    SELECT 1
    """,
    # 14: the runs list answered from indexes, whatever the store's size (chosen from EXPLAIN QUERY PLAN
    # on a store of 100,000 runs). The listing's order (started_at DESC, run_id) is one index, so a page,
    # an OFFSET and a keyset cursor read only their rows (the index on started_at alone had SQLite sort
    # every tie group, and fetch each row an OFFSET skips); a filter by status or graph starts at its
    # runs. Each index ends with thread_id, which the view gt_runs tests, so a count is read from the
    # index alone. The listing index serves started_at ranges as the old one did.
    """
    DROP INDEX gt_runs_started;
    CREATE INDEX gt_runs_listing ON gt_run_rows(started_at DESC, run_id, thread_id);
    CREATE INDEX gt_runs_status ON gt_run_rows(status, started_at, thread_id);
    CREATE INDEX gt_runs_graph ON gt_run_rows(graph, started_at, thread_id);
    """,
]

#: Blobs larger than this are stored deflated when that makes them smaller (see
#: :func:`graphtape.store.codec.pack_blob`: cheap enough for a checkpoint value that
#: changes every step). A chat message is a few hundred bytes and deflates to about
#: half, a value envelope around one address to the address; and a row of this table
#: larger than about 1,000 bytes (a quarter page) spills into an overflow page that is
#: mostly left empty. Smaller blobs (a counter, ``null``) are not worth the call.
COMPRESS_OVER = 40

#: The SQL the SQLite store shares with the PostgreSQL store (see :mod:`graphtape.store.sql`).
DIALECT = Dialect(
    param="?",
    array_params=False,
    chunk=500,
    checkpoint_columns="thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, step, source, created_at, "
    "metadata, body, channel_values, writers, calls",
)


#: A checkpoint's metadata, channel values and body, appended (its id is the row's ``data_id``; see migration 12).
_INSERT_DATA = "INSERT INTO gt_checkpoint_data(metadata, channel_values, body) VALUES (?,?,?)"
_CHECKPOINT_ROW_COLUMNS = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, step, source, created_at, writers, calls, "
    "copied_from, data_id"
)
#: A checkpoint's row; one written again is updated in place (an INSERT OR REPLACE would delete the old
#: row without the trigger that deletes its data: SQLite runs delete triggers for a REPLACE only with
#: recursive triggers on).
_UPSERT_CHECKPOINT = (
    f"INSERT INTO gt_checkpoint_rows({_CHECKPOINT_ROW_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT(thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
    + ", ".join(f"{c}=excluded.{c}" for c in _CHECKPOINT_ROW_COLUMNS.split(", ")[3:])
)

#: What a run row written over a row holding only the run's id takes (see migration 10).
_TAKE_PLACEHOLDER = ", ".join(f"{c.strip()}=excluded.{c.strip()}" for c in RUN_COLUMNS.split(",")[1:])


def _statements(script: str) -> Iterator[str]:
    """A migration's statements, one by one (a trigger's body holds semicolons of its own; a script
    is not run with ``executescript``, which would commit the migration's transaction half way)."""
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                yield pending
            pending = ""
    if pending.strip(" \n;"):
        raise StoreError(f"a migration ends inside a statement: {pending.strip()[:60]!r}")


def _key(address: str | None) -> bytes | str | None:
    """An address as stored: the 16 bytes of graphtape's 32-hex-digit hashes (half the bytes in
    every key and index entry); anything else (an address from a test, a future form) as its text.
    Only lowercase hex is turned into bytes, so :func:`_address` gives back the same string."""
    if address is None or len(address) != 32:
        return address
    try:
        raw = bytes.fromhex(address)
    except ValueError:
        return address
    return raw if len(raw) == 16 and raw.hex() == address else address


def _address(stored: bytes | str) -> str:
    """An address as the store interface gives it (see :func:`_key`)."""
    return stored.hex() if isinstance(stored, bytes) else stored


def _parent(stored: bytes | str | None) -> str | None:
    """A chain node's parent address (``None`` at the chain's first node)."""
    return None if stored is None else _address(stored)


def _insert_blobs_and_chains(
    cur: sqlite3.Cursor, blob_rows: list[tuple[Any, ...]], chains: dict[str, tuple[str | None, str]]
) -> None:
    """Blobs (packed) and chain nodes, each only if absent (content addressed): a write's, an import's."""
    if blob_rows:
        cur.executemany("INSERT OR IGNORE INTO gt_blob_rows(hash, enc, data) VALUES (?,?,?)", blob_rows)
    if chains:
        cur.executemany(
            "INSERT OR IGNORE INTO gt_chain_rows(id, parent, item) VALUES (?,?,?)",
            [(_key(k), _key(p), _key(i)) for k, (p, i) in chains.items()],
        )


def _copied_from(c: CheckpointRow) -> str | None:
    """The checkpoint a copy outside any run was made from (graphtape's fork), as a listed column."""
    if c.run_id is not None:
        return None
    value = c.metadata.get("graphtape_copied_from")
    return str(value) if value else None


class SqliteTapeStore(SqlTapeStore):
    """A tape in one SQLite file (``sqlite:///path/to/file.db``)."""

    dialect = DIALECT
    finds_checkpoints_by_prefix = True  # the small checkpoint rows hold the ids (see find_checkpoints)
    #: a run's last batch gives its thread's lease up in the same transaction (see write)
    releases_in_write = True
    #: deleting runs moves their threads' free leases on (see _delete_events)
    bumps_leases_on_delete = True

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 10.0, create: bool = True):
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}" + (f"?busy_timeout={busy_timeout:g}" if busy_timeout != 10.0 else "")
        self.busy_timeout = busy_timeout
        if create:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the folder for {self.path}: {exc.strerror}") from exc
        elif not self.path.is_file():
            raise StoreNotFound(
                f"no tape store at {self.path}: the file does not exist; check --url or GRAPHTAPE_URL "
                "(a store is created by recording a run, or by graphtape import)"
            )
        self._lock = threading.RLock()
        #: set when a call journal could not be created beside the file (see open_journal)
        self._no_journal = False
        #: event kind -> its code in gt_event_rows (codes never change; see _kind_codes)
        self._kinds: dict[str, int] = {}
        try:
            if create:
                target, uri = str(self.path), False
            else:  # mode=rw: SQLite must not create the file if it vanished meanwhile
                target, uri = f"{self.path.resolve().as_uri()}?mode=rw", True
            self._conn = sqlite3.connect(
                target, timeout=busy_timeout, check_same_thread=False, isolation_level=None, uri=uri
            )
            self._conn.create_function("gt_key", 1, _key, deterministic=True)  # for migration 9
            if not create:
                self._check_is_store()
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=OFF")
            self._migrate()
            self.import_journals()
        except sqlite3.DatabaseError as exc:
            self._close_quietly()
            raise self._translate(exc) from exc
        except BaseException:
            self._close_quietly()
            raise

    def _close_quietly(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()

    def _check_is_store(self) -> None:
        """Refuse a database that graphtape never initialised (before anything is written to it).

        A read-only command pointed at another application's database must not
        add graphtape's tables to it, nor switch its journal to WAL.
        """
        if self._conn.execute("PRAGMA user_version").fetchone()[0] > 0:
            return
        tables = [
            r[0]
            for r in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        if tables:
            shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
            raise StoreNotFound(
                f"{self.path} is not a graphtape store (it holds other tables: {shown}); "
                "point --url or GRAPHTAPE_URL at a tape store"
            )
        raise StoreNotFound(f"{self.path} holds no tape yet (an empty database); record a run into it first")

    # -- plumbing ----------------------------------------------------------

    def _translate(self, exc: sqlite3.Error) -> StoreError:
        msg = str(exc)
        if "locked" in msg or "busy" in msg:
            return DatabaseLocked(
                f"{self.path} is locked by another process (waited {self.busy_timeout:g}s); "
                f"retry when it finishes, or wait longer: add ?busy_timeout={max(30, 3 * self.busy_timeout):g} "
                "(seconds) to the store URL"
            )
        if "not a database" in msg or "malformed" in msg:
            return StoreError(f"{self.path} is not a graphtape database (or is damaged): {msg}")
        return StoreError(f"SQLite error on {self.path}: {msg}")

    def _migrate(self) -> None:
        with self._lock:
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version > len(MIGRATIONS):
                raise SchemaTooNew(
                    f"{self.path} has tape schema v{version} but this graphtape knows v{len(MIGRATIONS)}; "
                    "upgrade graphtape to read it"
                )
            if version == len(MIGRATIONS):
                return
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                # Re-read inside the write lock: another process may have migrated.
                version = self._conn.execute("PRAGMA user_version").fetchone()[0]
                for index in range(version, len(MIGRATIONS)):
                    for statement in _statements(MIGRATIONS[index]):
                        self._conn.execute(statement)
                    self._conn.execute(f"PRAGMA user_version={index + 1}")
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    @property
    def schema_version(self) -> int:
        with self._lock:
            return self._conn.execute("PRAGMA user_version").fetchone()[0]

    # -- writes --------------------------------------------------------------

    def write(self, batch: WriteBatch, *, fence: tuple[str, int] | None = None) -> None:
        if not batch:
            return
        new_kinds: dict[str, int] = {}
        # Rows are packed before the transaction (and the store's lock) is taken: a super-step's
        # events and blobs are packed here, and another writer of the file (or a read of this
        # store from the run's thread) need not wait for that.
        blob_rows = [(_key(h), *pack_blob(data, over=COMPRESS_OVER)) for h, data in batch.blobs.items()]
        pack = pack_event_plain if batch.plain_events else pack_event_templated
        event_bodies = [pack(e.data) for e in batch.events]
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise self._translate(exc) from exc
            try:
                cur = self._conn.cursor()
                run_ids = {e.run_id for e in batch.events}
                #: run id -> its key, when read with the fence
                run_keys: dict[str, int] = {}
                if fence is not None:
                    if len(run_ids) == 1 and not batch.new_runs:
                        # A run's batch (every completed call writes one): the fence and the run's key in
                        # one statement instead of two. Not with a new run row, which comes first.
                        (run_id,) = run_ids
                        token, key = cur.execute(
                            "SELECT (SELECT token FROM gt_leases WHERE name=?), "
                            "(SELECT run_key FROM gt_run_rows WHERE run_id=?)",
                            (fence[0], run_id),
                        ).fetchone()
                        if key is not None:
                            run_keys[run_id] = int(key)
                    else:
                        row = cur.execute("SELECT token FROM gt_leases WHERE name=?", (fence[0],)).fetchone()
                        token = None if row is None else row[0]
                    if token != fence[1]:
                        raise LeaseLost(
                            f"lease {fence[0]} now belongs to another process (our token {fence[1]}, "
                            f"current {'none' if token is None else token}); this run must stop: the thread moved on"
                        )
                _insert_blobs_and_chains(cur, blob_rows, batch.chains)
                for run in batch.new_runs:
                    # a row holding only the id (events came first) takes the run; a run row refuses
                    cur.execute(
                        f"INSERT INTO gt_run_rows({RUN_COLUMNS}) VALUES ({','.join('?' * 17)}) "
                        f"ON CONFLICT(run_id) DO UPDATE SET {_TAKE_PLACEHOLDER} WHERE gt_run_rows.thread_id IS NULL",
                        (
                            run.run_id,
                            run.thread_id,
                            run.graph,
                            run.status,
                            run.started_at,
                            run.ended_at,
                            run.parent_run_id,
                            run.replay_of,
                            run.mode,
                            run.llm_calls,
                            run.tool_calls,
                            run.effect_calls,
                            run.served_calls,
                            run.live_calls,
                            run.tokens,
                            run.error,
                            dump_meta(run.meta),
                        ),
                    )
                    if cur.rowcount == 0:
                        raise sqlite3.IntegrityError(f"UNIQUE constraint failed: run {run.run_id} exists")
                if batch.events:
                    for r in run_ids - run_keys.keys():
                        run_keys[r] = self._run_key(cur, r)
                    codes = self._kind_codes(cur, {e.kind for e in batch.events}, new_kinds)
                    cur.executemany(
                        "INSERT INTO gt_event_rows(run_key, seq, kind, ts, data) VALUES (?,?,?,?,?)",
                        [
                            (run_keys[e.run_id], e.seq, codes[e.kind], e.ts, body)
                            for e, body in zip(batch.events, event_bodies)
                        ],
                    )
                for c in batch.checkpoints:
                    # the data appended to its table, then the row (see migration 12); a checkpoint
                    # written again (a copy, an import) takes the old one's place, and a trigger
                    # deletes the old data
                    data_id = cur.execute(_INSERT_DATA, (dump_meta(c.metadata), dump_meta(c.values), c.body)).lastrowid
                    cur.execute(
                        _UPSERT_CHECKPOINT,
                        (
                            c.thread_id,
                            c.checkpoint_ns,
                            c.checkpoint_id,
                            c.parent_id,
                            c.run_id,
                            c.step,
                            c.source,
                            c.created_at,
                            c.writers,
                            c.calls,
                            _copied_from(c),
                            data_id,
                        ),
                    )
                if batch.writes:
                    # special writes (errors, interrupts, resumes) replace, the others are first-wins
                    grouped: dict[bool, list[tuple[Any, ...]]] = {True: [], False: []}
                    for w in batch.writes:
                        grouped[w.replace].append(
                            (
                                w.thread_id,
                                w.checkpoint_ns,
                                w.checkpoint_id,
                                w.task_id,
                                w.idx,
                                w.task_path,
                                w.channel,
                                w.value,
                            )
                        )
                    for replace, write_rows in grouped.items():
                        if write_rows:
                            verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
                            cur.executemany(
                                f"{verb} INTO gt_writes(thread_id, checkpoint_ns, checkpoint_id, task_id, idx, "
                                "task_path, channel, value) VALUES (?,?,?,?,?,?,?,?)",
                                write_rows,
                            )
                for run_id, fields in batch.run_updates:
                    bad = set(fields) - RUN_UPDATABLE
                    if bad:
                        raise StoreError(f"cannot update run columns {sorted(bad)}")
                    values = [dump_meta(v) if k == "meta" else v for k, v in fields.items()]
                    sets = ", ".join(f"{k}=?" for k in fields)
                    cur.execute(
                        f"UPDATE gt_run_rows SET {sets} WHERE run_id=? AND thread_id IS NOT NULL", (*values, run_id)
                    )
                for name, owner in batch.releases:
                    # as release_lease: the row (and its token) stays, so the next holder's token is larger
                    cur.execute("UPDATE gt_leases SET owner=NULL, expires_at=0 WHERE name=? AND owner=?", (name, owner))
                self._conn.execute("COMMIT")
                self._kinds.update(new_kinds)  # only once committed: a rolled-back code may be given again
            except sqlite3.Error as exc:
                self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.IntegrityError):
                    raise StoreError(
                        f"write refused by {self.path}: {exc} (is this run already in the store?)"
                    ) from exc
                raise self._translate(exc) from exc
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    # -- event keys ----------------------------------------------------------------

    @staticmethod
    def _run_key(cur: sqlite3.Cursor, run_id: str) -> int:
        """The run's key in ``gt_event_rows``: its run row's, or a row holding only its id when
        its events come first (inside the write's transaction). Not cached: another process may
        delete the run and a later import give it another key; a lookup on a hot page costs a
        few microseconds per batch."""
        row = cur.execute("SELECT run_key FROM gt_run_rows WHERE run_id=?", (run_id,)).fetchone()
        if row is not None:
            return int(row[0])
        cur.execute("INSERT INTO gt_run_rows(run_id) VALUES (?)", (run_id,))
        return int(cur.lastrowid or 0)

    def _kind_codes(self, cur: sqlite3.Cursor, kinds: set[str], new: dict[str, int]) -> dict[str, int]:
        """The codes of event kinds, from the cache (a code never changes) or given now (in the
        write's transaction: ``new`` joins the cache when it commits)."""
        out = {}
        for kind in kinds:
            code = self._kinds.get(kind)
            if code is None:
                cur.execute("INSERT OR IGNORE INTO gt_event_kinds(kind) VALUES (?)", (kind,))
                code = new[kind] = cur.execute("SELECT code FROM gt_event_kinds WHERE kind=?", (kind,)).fetchone()[0]
            out[kind] = code
        return out

    def _kind_names(self, codes: set[int]) -> dict[int, str]:
        """Code -> kind for the codes read (the table is read again when another process added one)."""
        names = {v: k for k, v in self._kinds.items()}
        if not set(codes) <= names.keys():
            self._load_kinds()
            names = {v: k for k, v in self._kinds.items()}
        return names

    def _load_kinds(self) -> None:
        self._kinds = {k: c for c, k in self._query("SELECT code, kind FROM gt_event_kinds")}

    def _codes_of(self, kinds: Sequence[str]) -> list[int]:
        """The codes of the wanted kinds that the store has (a kind never written has none)."""
        if not set(kinds) <= self._kinds.keys():
            self._load_kinds()
        return [self._kinds[k] for k in kinds if k in self._kinds]

    # -- reads -------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any] = (), *, binary: bool = False) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc

    @property
    def location(self) -> str:
        return str(self.path)

    def get_blobs(self, hashes: Iterable[str]) -> dict[str, bytes]:
        wanted = list(dict.fromkeys(hashes))
        out: dict[str, bytes] = {}
        for i in range(0, len(wanted), DIALECT.chunk):
            keys = [_key(h) for h in wanted[i : i + DIALECT.chunk]]
            sql = f"SELECT hash, enc, data FROM gt_blob_rows WHERE hash IN ({','.join('?' * len(keys))})"
            for h, enc, data in self._query(sql, keys):
                out[_address(h)] = decode_blob(enc, data)
        return out

    def get_chain_nodes(self, ids: Iterable[str]) -> dict[str, tuple[str | None, str]]:
        wanted = list(dict.fromkeys(ids))
        out: dict[str, tuple[str | None, str]] = {}
        for i in range(0, len(wanted), DIALECT.chunk):
            keys = [_key(k) for k in wanted[i : i + DIALECT.chunk]]
            sql = f"SELECT id, parent, item FROM gt_chain_rows WHERE id IN ({','.join('?' * len(keys))})"
            for k, p, item in self._query(sql, keys):
                out[_address(k)] = (_parent(p), _address(item))
        return out

    def get_chain(self, head: str | None) -> list[str]:
        """The whole chain in one recursive query instead of one query per node."""
        if head is None:
            return []
        rows = self._query(
            """
            WITH RECURSIVE walk(id, parent, item, depth) AS (
                SELECT id, parent, item, 0 FROM gt_chain_rows WHERE id = ?
                UNION ALL
                SELECT c.id, c.parent, c.item, walk.depth + 1
                FROM gt_chain_rows c JOIN walk ON c.id = walk.parent
            )
            SELECT item, parent FROM walk ORDER BY depth DESC
            """,
            (_key(head),),
        )
        if not rows or rows[0][1] is not None:
            raise StoreError(f"chain {head} is incomplete in {self.location}: the tape is damaged")
        return [_address(r[0]) for r in rows]

    def events(self, run_id: str, kinds: Sequence[str] | None = None) -> list[EventRow]:
        sql = (
            "SELECT seq, kind, ts, data FROM gt_event_rows "
            "WHERE run_key = (SELECT run_key FROM gt_run_rows WHERE run_id = ?)"
        )
        params: list[Any] = [run_id]
        if kinds:
            codes = self._codes_of(kinds)
            if not codes:
                return []
            sql += f" AND kind IN ({','.join('?' * len(codes))})"
            params.extend(codes)
        rows = self._query(sql + " ORDER BY seq", params)
        names = self._kind_names({r[1] for r in rows})
        return [EventRow(run_id, seq, names[code], ts, unpack_event(data)) for seq, code, ts, data in rows]

    def find_runs(self, prefix: str, limit: int = 2) -> list[str]:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._query(
            "SELECT run_id FROM gt_runs WHERE run_id LIKE ? ESCAPE '\\' ORDER BY run_id LIMIT ?",
            (escaped + "%", limit),
        )
        return [r[0] for r in rows]

    # -- checkpoints ---------------------------------------------------------------

    def list_checkpoints(
        self, *, thread_id=None, checkpoint_ns=None, before=None, limit=None, metadata_filter=None
    ) -> list[CheckpointRow]:
        where, params = checkpoint_filters(DIALECT, thread_id, checkpoint_ns, before)
        structured = {}
        for key, value in (metadata_filter or {}).items():
            if isinstance(value, (dict, list)):
                structured[key] = value  # compared in Python: JSON text order is not equality
                continue
            where.append("json_extract(metadata, ?) IS ?")
            params.append(f"$.{json.dumps(key)}")
            params.append(value)
        sql = f"SELECT {DIALECT.checkpoint_columns} FROM gt_checkpoints"
        if where:
            sql += " WHERE " + " AND ".join(where)
        # With thread and namespace fixed, the primary key gives the order (no
        # temporary B-tree); otherwise order by id across threads.
        sql += " ORDER BY checkpoint_id DESC"
        if limit is not None and not structured:
            sql += " LIMIT ?"
            params.append(limit)
        rows = [row_to_checkpoint(r) for r in self._query(sql, params)]
        if structured:
            rows = [r for r in rows if all(r.metadata.get(k) == v for k, v in structured.items())]
            if limit is not None:
                rows = rows[:limit]
        return rows

    def delete_checkpoints(self, keys: Sequence[tuple[str, str, str]]) -> None:
        if not keys:
            return
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany(
                    "DELETE FROM gt_checkpoint_rows WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?", keys
                )
                self._conn.executemany(
                    "DELETE FROM gt_writes WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?", keys
                )
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise self._translate(exc) from exc

    def _transaction(self, fn):
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    out = fn(self._conn.cursor())
                    self._conn.execute("COMMIT")
                    return out
                except BaseException:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc

    def delete_runs(self, run_ids: Sequence[str]) -> None:
        ids = [(r,) for r in run_ids]
        if not ids:
            return

        def go(cur):
            self._delete_events(cur, ids)

        self._transaction(go)

    @staticmethod
    def _delete_events(cur: sqlite3.Cursor, ids: list[tuple[str]]) -> None:
        """Delete the runs' events and their rows (the run row holds the events' key).

        The lease token of each run's thread is moved on first, when the lease
        is free (a holder's token must stay: its writes are fenced with it),
        so a recorder's next run on the thread sees that the thread's runs
        changed (``TapeStore.bumps_leases_on_delete``).
        """
        now = time.time()
        cur.executemany(
            "UPDATE gt_leases SET token=token+1 WHERE name=(SELECT 'thread:' || thread_id FROM gt_run_rows "
            "WHERE run_id=?) AND (owner IS NULL OR expires_at<=?)",
            [(rid, now) for (rid,) in ids],
        )
        cur.executemany(
            "DELETE FROM gt_event_rows WHERE run_key = (SELECT run_key FROM gt_run_rows WHERE run_id=?)", ids
        )
        cur.executemany("DELETE FROM gt_run_rows WHERE run_id=?", ids)

    def remove_thread(self, thread_id: str, run_ids: Sequence[str], *, archived: ArchiveEntry | None = None) -> None:
        ids = [(r,) for r in run_ids]

        def go(cur):
            self._delete_events(cur, ids)
            cur.execute("DELETE FROM gt_checkpoint_rows WHERE thread_id=?", (thread_id,))
            cur.execute("DELETE FROM gt_writes WHERE thread_id=?", (thread_id,))
            if archived is not None:
                cur.execute(
                    "INSERT OR REPLACE INTO gt_archives (thread_id, file, archived_at, size, digest, runs) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (thread_id, archived.file, archived.archived_at, archived.size, archived.digest, archived.runs),
                )

        self._transaction(go)

    def archived_threads(self, thread_id: str | None = None) -> list[ArchiveEntry]:
        where, params = ("WHERE thread_id=?", (thread_id,)) if thread_id is not None else ("", ())
        rows = self._query(
            f"SELECT thread_id, file, archived_at, size, digest, runs FROM gt_archives {where} "
            "ORDER BY archived_at DESC, thread_id",
            params,
        )
        return [ArchiveEntry(*row) for row in rows]

    def forget_archive(self, thread_id: str) -> None:
        self._transaction(lambda cur: cur.execute("DELETE FROM gt_archives WHERE thread_id=?", (thread_id,)))

    def collect_garbage(self) -> tuple[int, int]:
        def go(cur):
            blobs: set[str] = set()
            chains: set[str] = set()
            names = {c: k for c, k in cur.execute("SELECT code, kind FROM gt_event_kinds")}
            for code, data in cur.execute("SELECT kind, data FROM gt_event_rows"):
                event_refs(names[code], unpack_event(data), blobs, chains)
            for (values,) in cur.execute("SELECT channel_values FROM gt_checkpoint_data"):
                blobs.update(json.loads(values).values())
            blobs.update(v for (v,) in cur.execute("SELECT value FROM gt_writes"))
            nodes = {
                _address(k): (_parent(p), _address(i))
                for k, p, i in cur.execute("SELECT id, parent, item FROM gt_chain_rows")
            }

            def fetch(hashes: list[str]) -> dict[str, bytes]:
                rows = cur.execute(
                    f"SELECT hash, enc, data FROM gt_blob_rows WHERE hash IN ({','.join('?' * len(hashes))})",
                    [_key(h) for h in hashes],
                ).fetchall()
                return {_address(h): decode_blob(enc, d) for h, enc, d in rows}

            blobs, live_chains = mark_live(blobs, chains, nodes, fetch)
            dead_chains = [(_key(k),) for k in nodes if k not in live_chains]
            dead_blobs = [(h,) for (h,) in cur.execute("SELECT hash FROM gt_blob_rows") if _address(h) not in blobs]
            cur.executemany("DELETE FROM gt_chain_rows WHERE id=?", dead_chains)
            cur.executemany("DELETE FROM gt_blob_rows WHERE hash=?", dead_blobs)
            return len(dead_blobs), len(dead_chains)

        return self._transaction(go)

    # -- call journals (see graphtape.store.journal) -----------------------------------

    def open_journal(self, run_id: str, fence: tuple[str, int] | None) -> journal.CallJournal | None:
        if not journal.supported() or self._no_journal:  # pragma: no cover - Windows
            return None
        try:
            return journal.CallJournal(journal.journal_dir(self.path), run_id, fence)
        except OSError as exc:
            # once per store: a folder that cannot be written stays so
            self._no_journal = True
            _log.warning("graphtape: no call journal beside %s (%s); each call is written at once", self.path, exc)
            return None

    def import_journals(self) -> int:
        """Write the rows of every journal whose writer died, if its lease token is still the lease's.

        Called when the store opens, before a lease is taken and when a lease
        is found free: the moments a reader or a new writer would otherwise
        miss calls a dead process had completed. A journal that cannot be
        imported now (the file is busy, or the disk full) stays for the next
        attempt; the error is logged, not raised: the caller's own work does
        not depend on it.
        """
        added = 0
        for path, fd, rows in journal.dead_journals(journal.journal_dir(self.path)):
            try:
                if rows is not None:
                    added += self._import_journal(rows)
            except (StoreError, sqlite3.Error, ValueError, KeyError, TypeError) as exc:
                os.close(fd)
                _log.warning("graphtape: could not import the call journal %s yet: %s", path, exc)
                continue
            journal.discard(path, fd)
        return added

    def _import_journal(self, rows: journal.JournalRows) -> int:
        lease, token = rows.header.get("lease"), rows.header.get("token")
        new_kinds: dict[str, int] = {}

        def go(cur: sqlite3.Cursor) -> int:
            if lease is not None:
                row = cur.execute("SELECT token FROM gt_leases WHERE name=?", (lease,)).fetchone()
                if row is None or row[0] != token:
                    return 0  # the thread moved on: the dead writer's writes would have been refused
            blob_rows = [(_key(h), *pack_blob(data, over=COMPRESS_OVER)) for h, data in rows.blobs.items()]
            _insert_blobs_and_chains(cur, blob_rows, rows.chains)
            if not rows.events:
                return 0
            run_keys = {r: self._run_key(cur, r) for r in {e[0] for e in rows.events}}
            codes = self._kind_codes(cur, {e[2] for e in rows.events}, new_kinds)
            before = self._conn.total_changes
            cur.executemany(
                "INSERT OR IGNORE INTO gt_event_rows(run_key, seq, kind, ts, data) VALUES (?,?,?,?,?)",
                [
                    (run_keys[run_id], seq, codes[kind], ts, pack_event_templated(unpack_event(body)))
                    for run_id, seq, kind, ts, body in rows.events
                ],
            )
            return self._conn.total_changes - before

        added = self._transaction(go)
        self._kinds.update(new_kinds)
        return int(added)

    def acquire_lease(self, name: str, owner: str, ttl: float) -> int | None:
        self.import_journals()

        def go(cur):
            now = time.time()
            row = cur.execute("SELECT owner, expires_at, token FROM gt_leases WHERE name=?", (name,)).fetchone()
            if row is None:
                cur.execute(
                    "INSERT INTO gt_leases(name, owner, expires_at, token) VALUES (?,?,?,1)", (name, owner, now + ttl)
                )
                return 1
            held_by, expires_at, token = row
            if held_by == owner and expires_at > now:
                cur.execute("UPDATE gt_leases SET expires_at=? WHERE name=?", (now + ttl, name))
                return token
            if held_by is not None and expires_at > now:
                return None
            cur.execute(
                "UPDATE gt_leases SET owner=?, expires_at=?, token=? WHERE name=?", (owner, now + ttl, token + 1, name)
            )
            return token + 1

        return self._transaction(go)

    def release_lease(self, name: str, owner: str) -> None:
        # The row (and its token) stays, so the next holder's token is larger.
        self._transaction(
            lambda cur: cur.execute(
                "UPDATE gt_leases SET owner=NULL, expires_at=0 WHERE name=? AND owner=?", (name, owner)
            )
        )

    def lease_holder(self, name: str) -> tuple[str, float, int] | None:
        rows = self._query("SELECT owner, expires_at, token FROM gt_leases WHERE name=?", (name,))
        if not rows or rows[0][0] is None or rows[0][1] <= time.time():
            # a free lease: its last writer may have died with calls in its journal
            self.import_journals()
            return None
        return rows[0][0], rows[0][1], rows[0][2]

    def delete_thread(self, thread_id: str) -> None:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.execute("DELETE FROM gt_checkpoint_rows WHERE thread_id=?", (thread_id,))
                self._conn.execute("DELETE FROM gt_writes WHERE thread_id=?", (thread_id,))
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise self._translate(exc) from exc

    # -- history listings and retention -------------------------------------------------

    def _copies(self, thread_id: str) -> dict[str, str]:
        # a partial index holds only the copies
        return dict(
            self._query(
                "SELECT checkpoint_id, copied_from FROM gt_checkpoint_rows WHERE thread_id=? "
                "AND checkpoint_ns='' AND copied_from IS NOT NULL ORDER BY checkpoint_id",
                (thread_id,),
            )
        )

    def listed_events(self, run_ids: Sequence[str], kinds: Sequence[str]) -> Iterator[ListedEvent]:
        """Through the index of kinds; a task event stored as plain JSON has its three listed
        fields picked by SQLite's ``json_extract``, a deflated one (most are: the preset
        dictionary makes them smaller) is decoded here."""
        codes = self._codes_of(kinds)
        if not codes:
            return
        names = self._kind_names(set(codes))
        started = self._kinds.get("task_started", -1)
        raw = f"e.kind={started:d} AND hex(substr(e.data, 1, 1))='7B'"
        ids = list(run_ids)
        for i in range(0, len(ids), 200):
            chunk = ids[i : i + 200]
            rows = self._query(
                "SELECT k.run_id, e.seq, e.kind, e.ts, "
                f"CASE WHEN {raw} THEN json_extract(CAST(e.data AS TEXT), '$.step') END, "
                f"CASE WHEN {raw} THEN json_extract(CAST(e.data AS TEXT), '$.node_path') END, "
                f"CASE WHEN {raw} THEN json_extract(CAST(e.data AS TEXT), '$.task') END, "
                f"CASE WHEN {raw} THEN NULL ELSE e.data END "
                # without statistics the planner prefers the primary key (run_key, seq) and
                # reads every event of the run; the kind index reads only the wanted ones
                "FROM gt_run_rows k JOIN gt_event_rows e INDEXED BY gt_event_rows_kind ON e.run_key = k.run_key "
                f"WHERE k.run_id IN ({','.join('?' * len(chunk))}) "
                f"AND e.kind IN ({','.join('?' * len(codes))}) ORDER BY k.run_id, e.seq",
                [*chunk, *codes],
            )
            for run_id, seq, code, ts, step, node_path, task, data in rows:
                if data is None:
                    yield (run_id, seq, names[code], ts, step, node_path, task, None)
                else:
                    yield listed_event(run_id, seq, names[code], ts, unpack_event(data))

    def find_checkpoints(
        self, prefix: str, *, thread_id: str | None = None, outside_runs: bool = False
    ) -> list[CheckpointMatch]:
        if outside_runs:  # rare (a history asks only stores without the index below): the metadata decides
            return super().find_checkpoints(prefix, thread_id=thread_id, outside_runs=True)
        # an id range over the small checkpoint rows (no bodies), whatever the thread
        sql = (
            "SELECT thread_id, checkpoint_ns, checkpoint_id, run_id, step, source FROM gt_checkpoint_rows "
            "WHERE checkpoint_id >= ? AND checkpoint_id < ?"
        )
        params: list[Any] = [prefix, prefix + "\U0010ffff"]
        if thread_id is not None:
            sql += " AND thread_id=?"
            params.append(thread_id)
        return [tuple(r) for r in self._query(sql + " LIMIT 50", params)]

    def used_bytes(self) -> int | None:
        """Bytes of the file's pages in use (free pages excluded)."""
        try:
            page_size = self._query("PRAGMA page_size")[0][0]
            pages = self._query("PRAGMA page_count")[0][0]
            free = self._query("PRAGMA freelist_count")[0][0]
        except StoreError:
            return None
        return int((pages - free) * page_size)

    def close(self) -> None:
        with self._lock:
            conn = getattr(self, "_conn", None)
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
