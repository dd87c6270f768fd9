"""What a history listing reads from a store: checkpoint rows, events, replay runs (internal).

Two readers with one interface: :class:`Reader` goes through the public
:class:`~graphtape.store.base.TapeStore` methods (every backend);
:class:`SqliteReader` asks graphtape's SQLite store for exactly the columns a
listing shows, from covering indexes, so that a listing of 10,000
checkpoints never touches a checkpoint body or an event it does not show
(``benchmarks/history.py``).
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from graphtape.store.base import RunRecord, unpack_event

__all__ = ["Ev", "KeyInfo", "Keys", "Match", "PostgresReader", "Reader", "Row", "SqliteReader", "iso", "reader_for", "row_key"]


class Row(NamedTuple):
    """The shape of a listed checkpoint row (read as plain tuples: a named one costs per row).

    ``key`` holds the row's run id, source and stored writers, which few rows
    differ in (10,000 checkpoints of one run share two or three keys): one
    string per row instead of three, decoded once per distinct key by
    :class:`Keys`. ``ns`` is there only when a listing shows subgraph
    namespaces; a root listing's rows stop at ``key``.
    """

    checkpoint_id: str
    parent_id: str | None
    step: int | None
    created_at: str | None
    key: str
    calls: str | None  # the step's calls as graphtape's saver stored them (CheckpointRow.calls); None: not known
    ns: str = ""


#: what a row key decodes to: run id, source, and the writers graphtape's saver
#: stored (``None``: not known; read them from the task events)
KeyInfo = tuple  # (str | None, str | None, tuple[str, ...] | None)
_SEP, _UNKNOWN = "\x1f", "\x1e"


def row_key(run_id: str | None, source: str | None, writers: str | None) -> str:
    """A row's key as the SQLite reader builds it in SQL (run ids and sources never hold the separator)."""
    return f"{run_id or ''}{_SEP}{source or ''}{_SEP}{_UNKNOWN if writers is None else writers}"


class Keys(dict):
    """Row key -> (run id, source, writers tuple or ``None``), decoded on first use."""

    def __missing__(self, key: str) -> KeyInfo:
        run_id, source, writers = key.split(_SEP, 2)
        info = self[key] = (run_id or None, source or None,
                            None if writers == _UNKNOWN else tuple(writers.split("|")) if writers else ())
        return info


#: (run_id, seq, kind, ts, step, node_path, task, data): task_started events
#: carry step/node_path/task (data may be None); other events carry data.
Ev = tuple
#: (thread, ns, checkpoint id, run id, step, source) of a checkpoint found by id
Match = tuple


def iso(ts: float | None) -> str | None:
    """A tape event's epoch seconds as the ISO 8601 UTC time LangGraph gives checkpoints."""
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, tz=_dt.timezone.utc).isoformat()


class Reader:
    """What a history needs from a store, through the public interface."""

    def __init__(self, store: Any):
        self.store = store
        self._copies: dict[str, dict[str, str]] = {}

    def has_checkpoints(self, thread_id: str) -> bool:
        return bool(self.store.list_checkpoints(thread_id=thread_id, limit=1))

    def rows(self, thread_id: str, all_ns: bool) -> list[tuple[Any, ...]]:
        """The thread's checkpoints as :class:`Row`-shaped tuples, oldest first."""
        rows = self.store.list_checkpoints(thread_id=thread_id, checkpoint_ns=None if all_ns else "")
        # the copies are in these rows' metadata: kept for copies(), which would list them all again
        self._copies[thread_id] = self._copies_in(r for r in rows if not r.checkpoint_ns)
        out = [
            (r.checkpoint_id, r.parent_id, r.step, r.created_at or None, row_key(r.run_id, r.source, r.writers),
             r.calls,
             *((r.checkpoint_ns,) if all_ns else ()))
            for r in rows
        ]
        out.sort(key=lambda r: r[0])
        return out

    def copies(self, thread_id: str) -> dict[str, str]:
        """Root checkpoints written outside runs as copies of another (graphtape's fork): id -> source id."""
        if thread_id in self._copies:
            return self._copies[thread_id]
        return self._copies_in(self.store.list_checkpoints(
            thread_id=thread_id, checkpoint_ns="", metadata_filter={"graphtape_run_id": None}))

    @staticmethod
    def _copies_in(rows: Iterable[Any]) -> dict[str, str]:
        found = sorted((r.checkpoint_id, str((r.metadata or {}).get("graphtape_copied_from") or ""))
                       for r in rows if r.run_id is None)
        return {cid: copied for cid, copied in found if copied}

    def events(self, run_ids: Sequence[str], kinds: Sequence[str]) -> Iterator[Ev]:
        for rid in run_ids:
            for ev in self.store.events(rid, list(kinds)):
                d = ev.data
                if ev.kind == "task_started":
                    yield (ev.run_id, ev.seq, ev.kind, ev.ts, d.get("step"), d.get("node_path"), d.get("task"), d)
                else:
                    yield (ev.run_id, ev.seq, ev.kind, ev.ts, None, None, None, d)

    def replay_runs(self) -> list[RunRecord]:
        return [r for r in self.store.list_runs(limit=None, newest_first=False) if r.replay_of]

    def saver_matches(self, prefix: str, thread_id: str | None) -> list[Match]:
        if thread_id is None:
            return []  # scanning every checkpoint body of every thread: the events are cheaper
        return [
            (r.thread_id, r.checkpoint_ns, r.checkpoint_id, r.run_id, r.step, r.source)
            for r in self.store.list_checkpoints(thread_id=thread_id)
            if r.checkpoint_id.startswith(prefix)
        ]

    def nonrun_matches(self, prefix: str) -> list[Match]:
        return [
            (r.thread_id, r.checkpoint_ns, r.checkpoint_id, r.run_id, r.step, r.source)
            for r in self.store.list_checkpoints(metadata_filter={"graphtape_run_id": None})
            if r.checkpoint_id.startswith(prefix)
        ]


class SqliteReader(Reader):
    """The same reads on graphtape's SQLite store, selecting only the columns a listing shows.

    ``gt_checkpoints`` rows hold the checkpoint body beside the listed
    columns; the store's ``list_checkpoints`` returns it (and parses the
    metadata and value addresses), which a listing does not need. Events
    are read through the index of kinds; a task event stored as plain JSON
    has its three fields picked by SQLite's ``json_extract``, a deflated one
    (most are: the preset dictionary makes them smaller) is decoded here.
    """

    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.store._query(sql, params)

    def has_checkpoints(self, thread_id: str) -> bool:
        return bool(self._q("SELECT 1 FROM gt_checkpoints WHERE thread_id=? LIMIT 1", (thread_id,)))

    def rows(self, thread_id: str, all_ns: bool) -> list[tuple[Any, ...]]:
        # every column is in the gt_checkpoints_listing index: the bodies are never read
        sql = ("SELECT checkpoint_id, parent_id, step, created_at, "
               "ifnull(run_id, '') || char(31) || ifnull(source, '') || char(31) || ifnull(writers, char(30)), calls"
               + (", checkpoint_ns FROM gt_checkpoints WHERE thread_id=? ORDER BY checkpoint_id" if all_ns else
                  " FROM gt_checkpoints WHERE thread_id=? AND checkpoint_ns='' ORDER BY checkpoint_id"))
        return self._q(sql, (thread_id,))

    def copies(self, thread_id: str) -> dict[str, str]:
        # a partial index holds only the copies
        return dict(self._q("SELECT checkpoint_id, copied_from FROM gt_checkpoints WHERE thread_id=? "
                            "AND checkpoint_ns='' AND copied_from IS NOT NULL ORDER BY checkpoint_id", (thread_id,)))

    def events(self, run_ids: Sequence[str], kinds: Sequence[str]) -> Iterator[Ev]:
        raw = "kind='task_started' AND hex(substr(data, 1, 1))='7B'"
        ids = list(run_ids)
        for i in range(0, len(ids), 200):
            chunk = ids[i:i + 200]
            rows = self._q(
                "SELECT run_id, seq, kind, ts, "
                f"CASE WHEN {raw} THEN json_extract(CAST(data AS TEXT), '$.step') END, "
                f"CASE WHEN {raw} THEN json_extract(CAST(data AS TEXT), '$.node_path') END, "
                f"CASE WHEN {raw} THEN json_extract(CAST(data AS TEXT), '$.task') END, "
                f"CASE WHEN {raw} THEN NULL ELSE data END "
                # without statistics the planner prefers the primary key (run_id, seq) and
                # reads every event of the run; the kind index reads only the wanted ones
                f"FROM gt_events INDEXED BY gt_events_kind WHERE run_id IN ({','.join('?' * len(chunk))}) "
                f"AND kind IN ({','.join('?' * len(kinds))}) ORDER BY run_id, seq",
                [*chunk, *kinds],
            )
            for row in rows:
                data = row[7]
                if data is None:
                    yield row
                else:
                    run_id, seq, kind, ts = row[:4]
                    d = unpack_event(data)
                    if kind == "task_started":
                        yield (run_id, seq, kind, ts, d.get("step"), d.get("node_path"), d.get("task"), d)
                    else:
                        yield (run_id, seq, kind, ts, None, None, None, d)

    def replay_runs(self) -> list[RunRecord]:
        ids = [r[0] for r in self._q("SELECT run_id FROM gt_runs WHERE replay_of IS NOT NULL")]
        out = [self.store.get_run(i) for i in ids]
        return sorted((r for r in out if r is not None), key=lambda r: (r.started_at, r.run_id))

    def saver_matches(self, prefix: str, thread_id: str | None) -> list[Match]:
        sql = ("SELECT thread_id, checkpoint_ns, checkpoint_id, run_id, step, source FROM gt_checkpoints "
               "WHERE checkpoint_id >= ? AND checkpoint_id < ?")
        params: list[Any] = [prefix, prefix + "\U0010ffff"]
        if thread_id is not None:
            sql += " AND thread_id=?"
            params.append(thread_id)
        return [tuple(r) for r in self._q(sql + " LIMIT 50", params)]

    def nonrun_matches(self, prefix: str) -> list[Match]:
        return []  # saver_matches already looked at every row


class PostgresReader(Reader):
    """The rows of a listing on graphtape's PostgreSQL store: the listed columns only, no bodies or metadata.

    Events and runs go through the store's methods (they already filter by
    kind on the server).
    """

    def rows(self, thread_id: str, all_ns: bool) -> list[tuple[Any, ...]]:
        sql = ("SELECT checkpoint_id, parent_id, step, created_at, "
               "coalesce(run_id, '') || chr(31) || coalesce(source, '') || chr(31) || coalesce(writers, chr(30)), "
               "calls" + (", checkpoint_ns FROM gt_checkpoints WHERE thread_id = %s ORDER BY checkpoint_id" if all_ns else
                  " FROM gt_checkpoints WHERE thread_id = %s AND checkpoint_ns = '' ORDER BY checkpoint_id"))
        return self.store._query(sql, (thread_id,))

    def copies(self, thread_id: str) -> dict[str, str]:
        return dict(self.store._query(
            "SELECT checkpoint_id, metadata ->> 'graphtape_copied_from' FROM gt_checkpoints "
            "WHERE thread_id = %s AND checkpoint_ns = '' AND run_id IS NULL "
            "AND metadata ? 'graphtape_copied_from' ORDER BY checkpoint_id", (thread_id,)))


def reader_for(store: Any) -> Reader:
    """The narrowest reader for this store: SQL that selects only listed columns where it can."""
    from graphtape.store.sqlite import SqliteTapeStore

    if isinstance(store, SqliteTapeStore):
        return SqliteReader(store)
    # Not imported here: without the postgres extra the import fails, and a store of that
    # kind exists only if its module was imported to open it.
    postgres = sys.modules.get("graphtape.store.postgres")
    if postgres is not None and isinstance(store, postgres.PostgresTapeStore):
        return PostgresReader(store)
    return Reader(store)
