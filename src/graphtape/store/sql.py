"""What the SQLite and PostgreSQL stores share: the reads whose SQL is the same in both.

The two SQL backends keep one schema (same tables, columns and keys; see
their migrations) and differ in the driver's placeholder, in how a list of
values is passed (``IN (?, ?, ...)`` against one array parameter
``= ANY(%s)``), in how many addresses one query asks for, and in the column
that holds a checkpoint's metadata text. A :class:`Dialect` says which;
:class:`SqlTapeStore` writes each shared query once, with ``?`` placeholders
turned into the dialect's.

What truly differs stays in the backend: writing a batch (a transaction of
``executemany`` on SQLite, one ``WITH`` statement of ``unnest`` inserts on
PostgreSQL), metadata filters (``json_extract`` against jsonb containment),
garbage collection's locking, leases (SQLite's clock against the server's),
run-id prefixes (PostgreSQL's encoded strings) and the listing of copies.
"""

from __future__ import annotations

import abc
import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Any

from graphtape.errors import StoreError
from graphtape.store.base import CheckpointRow, EventRow, RunRecord, TapeStore, WriteRow
from graphtape.store.codec import unpack_blob, unpack_event
from graphtape.store.listing import KEY_SEP, KEY_UNKNOWN, CheckpointListing

#: The columns of ``gt_runs`` in the order :func:`row_to_run` reads them.
RUN_COLUMNS = (
    "run_id, thread_id, graph, status, started_at, ended_at, parent_run_id, replay_of, mode, "
    "llm_calls, tool_calls, effect_calls, served_calls, live_calls, tokens, error, meta"
)


@dataclasses.dataclass(frozen=True)
class Dialect:
    """Where the two SQL stores' shared queries differ."""

    #: the driver's parameter placeholder: ``?`` (sqlite3) or ``%s`` (psycopg)
    param: str
    #: ``True``: a list of values is one array parameter (``col = ANY(%s)``);
    #: ``False``: one placeholder per value (``col IN (?, ?)``)
    array_params: bool
    #: addresses asked for per query (SQLite limits a statement's parameters)
    chunk: int
    #: the checkpoint columns :func:`row_to_checkpoint` reads, metadata as exact JSON text
    checkpoint_columns: str

    def sql(self, text: str) -> str:
        """Shared SQL, written with ``?`` placeholders, in this dialect."""
        return text if self.param == "?" else text.replace("?", self.param)

    def one_of(self, column: str, values: list[Any]) -> tuple[str, list[Any]]:
        """``column`` is one of ``values``: the SQL condition and its parameters."""
        if self.array_params:
            return f"{column} = ANY({self.param})", [values]
        return f"{column} IN ({','.join([self.param] * len(values))})", values


def checkpoint_filters(
    dialect: Dialect, thread_id: str | None, checkpoint_ns: str | None, before: str | None
) -> tuple[list[str], list[Any]]:
    """The conditions of ``list_checkpoints`` both SQL stores write alike, and their parameters
    (each store adds its own metadata filter and order)."""
    where: list[str] = []
    params: list[Any] = []
    for condition, value in (
        ("thread_id = ?", thread_id),
        ("checkpoint_ns = ?", checkpoint_ns),
        ("checkpoint_id < ?", before),
    ):
        if value is not None:
            where.append(dialect.sql(condition))
            params.append(value)
    return where, params


def run_filters(
    thread_id: str | None,
    status: str | None,
    graph: str | None,
    mode: str | None,
    since: float | None,
    until: float | None,
) -> tuple[list[str], list[Any]]:
    """The conditions of ``list_runs`` and ``count_runs`` (``?`` placeholders), and their parameters."""
    where: list[str] = []
    params: list[Any] = []
    for condition, value in (
        ("thread_id = ?", thread_id),
        ("status = ?", status),
        ("graph = ?", graph),
        ("mode = ?", mode),
        ("started_at >= ?", since),
        ("started_at <= ?", until),
    ):
        if value is not None:
            where.append(condition)
            params.append(value)
    return where, params


def row_to_run(row: Sequence[Any]) -> RunRecord:
    """A ``gt_runs`` row (:data:`RUN_COLUMNS`) as a record."""
    return RunRecord(
        run_id=row[0],
        thread_id=row[1],
        graph=row[2],
        status=row[3],
        started_at=row[4],
        ended_at=row[5],
        parent_run_id=row[6],
        replay_of=row[7],
        mode=row[8],
        llm_calls=row[9],
        tool_calls=row[10],
        effect_calls=row[11],
        served_calls=row[12],
        live_calls=row[13],
        tokens=row[14],
        error=row[15],
        meta=json.loads(row[16] or "{}"),
    )


def row_to_checkpoint(r: Sequence[Any]) -> CheckpointRow:
    """A ``gt_checkpoints`` row (:attr:`Dialect.checkpoint_columns`) as a record."""
    return CheckpointRow(
        r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], json.loads(r[8]), bytes(r[9]), json.loads(r[10]), r[11], r[12]
    )


def decode_blob(enc: str, data: bytes) -> bytes:
    """A stored blob's bytes (``enc``: ``raw``, ``z`` or ``d1``; see :func:`graphtape.store.codec.pack_blob`)."""
    return unpack_blob(enc, data)


class SqlTapeStore(TapeStore):
    """The reads of the SQLite and PostgreSQL stores, written once (see the module docstring)."""

    dialect: Dialect

    @abc.abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = (), *, binary: bool = False) -> list[tuple[Any, ...]]:
        """One read statement's rows. ``binary``: bytes columns are read as bytes (PostgreSQL's
        binary protocol; SQLite always does)."""

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """Where the store is, as error messages name it (a file path, a URL)."""

    # -- runs and events -------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        rows = self._query(self.dialect.sql(f"SELECT {RUN_COLUMNS} FROM gt_runs WHERE run_id = ?"), (run_id,))
        return row_to_run(rows[0]) if rows else None

    def list_runs(
        self,
        *,
        thread_id=None,
        status=None,
        limit=50,
        newest_first=True,
        graph=None,
        mode=None,
        since=None,
        until=None,
        after=None,
        offset=0,
    ) -> list[RunRecord]:
        where, params = run_filters(thread_id, status, graph, mode, since, until)
        if after is not None:
            # keyset: the runs past the previous page's last, in the listing's order; the plain range
            # on started_at lets the index start there instead of reading the runs before it
            started, run_id = after
            where.append(f"started_at {'<=' if newest_first else '>='} ?")
            where.append(f"(started_at {'<' if newest_first else '>'} ? OR (started_at = ? AND run_id > ?))")
            params += [started, started, started, run_id]
        sql = f"SELECT {RUN_COLUMNS} FROM gt_runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY started_at {'DESC' if newest_first else 'ASC'}, run_id"
        if limit is not None or offset:
            sql += " LIMIT ?"
            params.append(-1 if limit is None and self.dialect.param == "?" else limit)
        if offset:
            sql += " OFFSET ?"
            params.append(offset)
        return [row_to_run(r) for r in self._query(self.dialect.sql(sql), params)]

    def count_runs(
        self, *, thread_id=None, status=None, graph=None, mode=None, since=None, until=None, limit=None
    ) -> int:
        where, params = run_filters(thread_id, status, graph, mode, since, until)
        inner = "SELECT 1 FROM gt_runs" + (" WHERE " + " AND ".join(where) if where else "")
        if limit is not None:
            inner += " LIMIT ?"
            params.append(limit)
        return int(self._query(self.dialect.sql(f"SELECT count(*) FROM ({inner}) AS matched"), params)[0][0])

    def list_replays(self) -> list[RunRecord]:
        rows = self._query(f"SELECT {RUN_COLUMNS} FROM gt_runs WHERE replay_of IS NOT NULL ORDER BY started_at, run_id")
        return [row_to_run(r) for r in rows]

    def events(self, run_id: str, kinds: Sequence[str] | None = None) -> list[EventRow]:
        sql = self.dialect.sql("SELECT run_id, seq, kind, ts, data FROM gt_events WHERE run_id = ?")
        params: list[Any] = [run_id]
        if kinds:
            cond, values = self.dialect.one_of("kind", list(kinds))
            sql += " AND " + cond
            params.extend(values)
        sql += " ORDER BY seq"
        return [EventRow(r[0], r[1], r[2], r[3], unpack_event(r[4])) for r in self._query(sql, params, binary=True)]

    # -- blobs and chains ----------------------------------------------------------------

    def get_blobs(self, hashes: Iterable[str]) -> dict[str, bytes]:
        wanted = list(dict.fromkeys(hashes))
        out: dict[str, bytes] = {}
        chunk = self.dialect.chunk
        for i in range(0, len(wanted), chunk):
            cond, params = self.dialect.one_of("hash", wanted[i : i + chunk])
            for h, enc, data in self._query(f"SELECT hash, enc, data FROM gt_blobs WHERE {cond}", params, binary=True):
                out[h] = decode_blob(enc, data)
        return out

    def get_chain_nodes(self, ids: Iterable[str]) -> dict[str, tuple[str | None, str]]:
        wanted = list(dict.fromkeys(ids))
        out: dict[str, tuple[str | None, str]] = {}
        chunk = self.dialect.chunk
        for i in range(0, len(wanted), chunk):
            cond, params = self.dialect.one_of("id", wanted[i : i + chunk])
            for k, p, item in self._query(f"SELECT id, parent, item FROM gt_chains WHERE {cond}", params):
                out[k] = (p, item)
        return out

    def get_chain(self, head: str | None) -> list[str]:
        """The whole chain in one recursive query instead of one query per node."""
        if head is None:
            return []
        rows = self._query(
            self.dialect.sql(
                """
            WITH RECURSIVE walk(id, parent, item, depth) AS (
                SELECT id, parent, item, 0 FROM gt_chains WHERE id = ?
                UNION ALL
                SELECT c.id, c.parent, c.item, walk.depth + 1
                FROM gt_chains c JOIN walk ON c.id = walk.parent
            )
            SELECT item, parent FROM walk ORDER BY depth DESC
            """
            ),
            (head,),
        )
        if not rows or rows[0][1] is not None:
            raise StoreError(f"chain {head} is incomplete in {self.location}: the tape is damaged")
        return [r[0] for r in rows]

    # -- checkpoints -------------------------------------------------------------------------

    def get_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None
    ) -> CheckpointRow | None:
        columns = self.dialect.checkpoint_columns
        if checkpoint_id:
            rows = self._query(
                self.dialect.sql(
                    f"SELECT {columns} FROM gt_checkpoints "
                    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
                ),
                (thread_id, checkpoint_ns, checkpoint_id),
                binary=True,
            )
        else:
            rows = self._query(
                self.dialect.sql(
                    f"SELECT {columns} FROM gt_checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
                    "ORDER BY checkpoint_id DESC LIMIT 1"
                ),
                (thread_id, checkpoint_ns),
                binary=True,
            )
        return row_to_checkpoint(rows[0]) if rows else None

    def get_writes(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[WriteRow]:
        rows = self._query(
            self.dialect.sql(
                # the columns in the order WriteRow takes them
                "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, value "
                "FROM gt_writes "
                "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? ORDER BY task_id, idx"
            ),
            (thread_id, checkpoint_ns, checkpoint_id),
        )
        return [WriteRow(*r) for r in rows]

    # -- history listings --------------------------------------------------------------------

    def has_checkpoints(self, thread_id: str) -> bool:
        return bool(
            self._query(self.dialect.sql("SELECT 1 FROM gt_checkpoints WHERE thread_id = ? LIMIT 1"), (thread_id,))
        )

    def checkpoint_listing(self, thread_id: str, *, namespaces: bool = False) -> CheckpointListing:
        """The listed columns only, no bodies or metadata (SQLite reads them from its
        ``gt_checkpoint_rows``, which hold only these); the row key is built in SQL."""
        sql = (
            "SELECT checkpoint_id, parent_id, step, created_at, "
            "coalesce(run_id, '') || ? || coalesce(source, '') || ? || coalesce(writers, ?), calls"
            + (
                ", checkpoint_ns FROM gt_checkpoints WHERE thread_id = ? ORDER BY checkpoint_id"
                if namespaces
                else " FROM gt_checkpoints WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id"
            )
        )
        rows = self._query(self.dialect.sql(sql), (KEY_SEP, KEY_SEP, KEY_UNKNOWN, thread_id))
        return CheckpointListing(rows, self._copies(thread_id) if rows else {})

    @abc.abstractmethod
    def _copies(self, thread_id: str) -> dict[str, str]:
        """Root checkpoints of the thread written outside runs as copies of another: id -> source id."""
