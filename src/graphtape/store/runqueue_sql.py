"""The run queue on SQL: what the SQLite and PostgreSQL queues share (statements, row shapes, the claim).

Each backend supplies its table definitions, how it opens a transaction, how
it serialises enqueues and thread-row writes on one thread (SQLite's ``BEGIN
IMMEDIATE`` already does; PostgreSQL takes a transaction-scoped advisory lock on
the thread), a thread row being written with one upsert, and
the locking clause of the claim (PostgreSQL's ``FOR UPDATE SKIP LOCKED``, so
concurrent claimers skip each other's candidate instead of waiting for it).
Statements are written with ``?`` placeholders; a backend translates them.

The claim: a run is claimable when it is the oldest active run of its thread
(``NOT EXISTS`` an older active one) and is pending or its lease expired;
the oldest such run by queue position (``pos``) wins.
"""

from __future__ import annotations

import abc
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from graphtape.store.runqueue_base import (
    AssistantRow,
    Enqueued,
    QueuedRun,
    RunEvent,
    RunQueue,
    ThreadRow,
    check_readable,
    check_thread_fields,
    decoded,
    ended_text,
    json_text,
    lease_lost,
    reset_to_pending,
)

__all__ = ["RUN_FIELDS", "SqlRunQueue"]

T = TypeVar("T")

#: the columns of gt_q_runs a row is read from, in QueuedRun's order
RUN_FIELDS = (
    "run_id",
    "thread_id",
    "assistant_id",
    "graph_id",
    "kwargs",
    "metadata",
    "multitask_strategy",
    "status",
    "created_at",
    "updated_at",
    "worker",
    "lease_expires",
    "attempt",
    "cancel_requested",
    "result",
    "events",
)
_RUN_COLS = ", ".join(RUN_FIELDS)
_THREAD_COLS = "thread_id, graph_id, metadata, status, created_at, updated_at, deleted"
_ASSISTANT_COLS = (
    "assistant_id, graph_id, name, description, config, context, metadata, version, created_at, updated_at"
)
_ACTIVE_SQL = "('pending','running')"


def _run(row: Sequence[Any]) -> QueuedRun:
    (
        rid,
        tid,
        aid,
        gid,
        kwargs,
        meta,
        strategy,
        status,
        created,
        updated,
        worker,
        lease,
        attempt,
        cancel,
        result,
        n,
    ) = row
    return QueuedRun(
        rid,
        tid,
        aid,
        gid,
        json.loads(kwargs),
        json.loads(meta),
        strategy,
        status,
        float(created),
        float(updated),
        worker,
        None if lease is None else float(lease),
        int(attempt),
        bool(cancel),
        None if result is None else json.loads(result),
        int(n),
    )


def _thread(row: Sequence[Any]) -> ThreadRow:
    tid, gid, meta, status, created, updated, deleted = row
    return ThreadRow(tid, gid, json.loads(meta), status, float(created), float(updated), bool(deleted))


def _assistant(row: Sequence[Any]) -> AssistantRow:
    aid, gid, name, desc, config, context, meta, version, created, updated = row
    return AssistantRow(
        aid,
        gid,
        name,
        desc,
        json.loads(config),
        json.loads(context),
        json.loads(meta),
        int(version),
        float(created),
        float(updated),
    )


class SqlRunQueue(RunQueue):
    """The queue's operations in SQL; subclasses connect and say how to lock."""

    #: appended to the claim's SELECT (``FOR UPDATE SKIP LOCKED`` on PostgreSQL)
    claim_lock: str = ""

    @abc.abstractmethod
    def _tx(self, fn: Callable[[Any], T], *, write: bool = True) -> T:
        """``fn(cursor)`` in one transaction (``?`` placeholders); its result."""

    def _lock_thread(self, cur: Any, thread_id: str) -> None:
        """Serialise the enqueues of one thread (within the current transaction)."""

    def _notice(self, cur: Any, what: str, run_id: str) -> None:
        """Tell listeners (:meth:`listen`) once the current transaction commits; a no-op here."""

    # -- runs ------------------------------------------------------------------------------

    def _active(self, cur: Any, thread_id: str) -> list[QueuedRun]:
        cur.execute(
            f"SELECT {_RUN_COLS} FROM gt_q_runs WHERE thread_id=? AND status IN {_ACTIVE_SQL} ORDER BY pos",
            (thread_id,),
        )
        return [_run(r) for r in cur.fetchall()]

    def _get(self, cur: Any, run_id: str) -> QueuedRun | None:
        cur.execute(f"SELECT {_RUN_COLS} FROM gt_q_runs WHERE run_id=?", (run_id,))
        row = cur.fetchone()
        return _run(row) if row is not None else None

    def _scrub(self, cur: Any, run_id: str) -> None:
        """Store the kwargs and metadata of a run that just ended redacted (:func:`ended_text`)."""
        cur.execute("SELECT kwargs, metadata FROM gt_q_runs WHERE run_id=?", (run_id,))
        row = cur.fetchone()
        if row is not None:
            kwargs, metadata = (ended_text(json.loads(v), self.redact_keys) for v in row)
            cur.execute("UPDATE gt_q_runs SET kwargs=?, metadata=? WHERE run_id=?", (kwargs, metadata, run_id))

    def _cancel(self, cur: Any, run: QueuedRun, now: float, cancel_result: Any) -> None:
        if run.status == "pending":
            cur.execute(
                "UPDATE gt_q_runs SET status='interrupted', result=?, updated_at=? WHERE run_id=? AND status='pending'",
                (json_text(cancel_result), now, run.run_id),
            )
            if cur.rowcount == 1:
                self._scrub(cur, run.run_id)
            self._notice(cur, "ended", run.run_id)
        elif run.status == "running":
            cur.execute("UPDATE gt_q_runs SET cancel_requested=1 WHERE run_id=?", (run.run_id,))
            self._notice(cur, "cancel", run.run_id)

    def enqueue(self, run: QueuedRun, *, strategy: str = "enqueue", cancel_result: Any = None) -> Enqueued:
        check_readable("the run's kwargs and metadata", run.kwargs, run.metadata)

        def go(cur: Any) -> Enqueued:
            self._lock_thread(cur, run.thread_id)
            now = time.time()
            active = self._active(cur, run.thread_id)
            if active and strategy == "reject":
                return Enqueued(None, active)
            if strategy in ("interrupt", "rollback"):
                for other in active:
                    self._cancel(cur, other, now, cancel_result)
            reset_to_pending(run, now)
            cur.execute(
                f"INSERT INTO gt_q_runs({_RUN_COLS}) VALUES ({', '.join('?' * len(RUN_FIELDS))})",
                (
                    run.run_id,
                    run.thread_id,
                    run.assistant_id,
                    run.graph_id,
                    json_text(run.kwargs),
                    json_text(run.metadata),
                    run.multitask_strategy,
                    run.status,
                    run.created_at,
                    run.updated_at,
                    None,
                    None,
                    0,
                    int(run.cancel_requested),
                    None if run.result is None else json_text(run.result),
                    0,
                ),
            )
            self._notice(cur, "queued", run.run_id)
            return Enqueued(run, active)

        return self._tx(go)

    def claim(self, worker: str, ttl: float) -> QueuedRun | None:
        def go(cur: Any) -> QueuedRun | None:
            now = time.time()
            cur.execute(
                f"SELECT r.run_id FROM gt_q_runs r WHERE r.status IN {_ACTIVE_SQL}"
                " AND (r.status='pending' OR r.lease_expires < ?)"
                " AND NOT EXISTS (SELECT 1 FROM gt_q_runs o WHERE o.thread_id=r.thread_id"
                f" AND o.status IN {_ACTIVE_SQL} AND o.pos < r.pos)"
                f" ORDER BY r.pos LIMIT 1 {self.claim_lock}",
                (now,),
            )
            row = cur.fetchone()
            if row is None:
                return None
            cur.execute(
                "UPDATE gt_q_runs SET status='running', worker=?, lease_expires=?, attempt=attempt+1, updated_at=?"
                " WHERE run_id=?",
                (worker, now + ttl, now, row[0]),
            )
            return self._get(cur, row[0])

        return self._tx(go)

    def heartbeat(self, run_id: str, worker: str, ttl: float) -> bool | None:
        def go(cur: Any) -> bool | None:
            cur.execute(
                "UPDATE gt_q_runs SET lease_expires=? WHERE run_id=? AND worker=? AND status='running'",
                (time.time() + ttl, run_id, worker),
            )
            if cur.rowcount != 1:
                return None
            cur.execute("SELECT cancel_requested FROM gt_q_runs WHERE run_id=?", (run_id,))
            row = cur.fetchone()
            return bool(row[0]) if row is not None else None

        return self._tx(go)

    def release(self, run_id: str, worker: str) -> bool:
        def go(cur: Any) -> bool:
            cur.execute(
                "UPDATE gt_q_runs SET lease_expires=0 WHERE run_id=? AND worker=? AND status='running'",
                (run_id, worker),
            )
            if cur.rowcount != 1:
                return False
            self._notice(cur, "queued", run_id)
            return True

        return self._tx(go)

    def finish(self, run_id: str, worker: str, status: str, result: Any) -> bool:
        def go(cur: Any) -> bool:
            cur.execute(
                "UPDATE gt_q_runs SET status=?, result=?, updated_at=?, lease_expires=NULL"
                " WHERE run_id=? AND worker=? AND status='running'",
                (status, json_text(result), time.time(), run_id, worker),
            )
            if cur.rowcount != 1:
                return False
            self._scrub(cur, run_id)
            self._notice(cur, "ended", run_id)
            return True

        return self._tx(go)

    def request_cancel(self, run_ids: Sequence[str], cancel_result: Any = None) -> list[QueuedRun]:
        def go(cur: Any) -> list[QueuedRun]:
            now = time.time()
            out = []
            for rid in run_ids:
                run = self._get(cur, rid)
                if run is None:
                    continue
                self._cancel(cur, run, now, cancel_result)
                after = self._get(cur, rid)
                if after is not None:
                    out.append(after)
            return out

        return self._tx(go)

    def get(self, run_id: str) -> QueuedRun | None:
        return self._tx(lambda cur: self._get(cur, run_id), write=False)

    def list_runs(
        self,
        *,
        thread_id: str | None = None,
        statuses: Sequence[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[QueuedRun]:
        where: list[str] = []
        params: list[Any] = []
        if thread_id is not None:
            where.append("thread_id=?")
            params.append(thread_id)
        if statuses is not None:
            if not statuses:
                return []
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            params.extend(statuses)
        sql = f"SELECT {_RUN_COLS} FROM gt_q_runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY pos DESC"
        if limit is not None or offset:
            sql += " LIMIT ? OFFSET ?"
            params.extend([limit if limit is not None else 1 << 62, max(offset, 0)])

        def go(cur: Any) -> list[QueuedRun]:
            cur.execute(sql, tuple(params))
            return decoded(_run, cur.fetchall(), "run")

        return self._tx(go, write=False)

    def delete_run(self, run_id: str) -> bool:
        def go(cur: Any) -> bool:
            cur.execute("DELETE FROM gt_q_events WHERE run_id=?", (run_id,))
            cur.execute("DELETE FROM gt_q_runs WHERE run_id=?", (run_id,))
            return bool(cur.rowcount == 1)

        return self._tx(go)

    # -- events ----------------------------------------------------------------------------

    def append(self, run_id: str, worker: str, event: str, data: str) -> int:
        def go(cur: Any) -> int:
            cur.execute(
                "UPDATE gt_q_runs SET events=events+1 WHERE run_id=? AND worker=? AND status='running'",
                (run_id, worker),
            )
            if cur.rowcount != 1:
                raise lease_lost(run_id, worker)
            cur.execute("SELECT events FROM gt_q_runs WHERE run_id=?", (run_id,))
            seq = int(cur.fetchone()[0])
            cur.execute(
                "INSERT INTO gt_q_events(run_id, seq, event, data) VALUES (?,?,?,?)", (run_id, seq, event, data)
            )
            self._notice(cur, "event", run_id)
            return seq

        return self._tx(go)

    def events(self, run_id: str, after: int = 0, limit: int | None = None) -> list[RunEvent]:
        sql = "SELECT seq, event, data FROM gt_q_events WHERE run_id=? AND seq>? ORDER BY seq"
        params: tuple[Any, ...] = (run_id, after)
        if limit is not None:
            sql += " LIMIT ?"
            params += (limit,)

        def go(cur: Any) -> list[RunEvent]:
            cur.execute(sql, params)
            return [RunEvent(run_id, int(seq), event, data) for seq, event, data in cur.fetchall()]

        return self._tx(go, write=False)

    # -- threads ---------------------------------------------------------------------------

    def _put_thread(self, cur: Any, row: ThreadRow) -> None:
        # one upsert, not DELETE + INSERT: two transactions writing one new thread's row at once
        # (two replicas starting runs on it) would both find no row and the second INSERT would
        # fail on the primary key instead of updating the row the first one wrote
        cur.execute(
            f"INSERT INTO gt_q_threads({_THREAD_COLS}) VALUES (?,?,?,?,?,?,?) ON CONFLICT(thread_id) DO UPDATE SET"
            " graph_id=excluded.graph_id, metadata=excluded.metadata, status=excluded.status,"
            " created_at=excluded.created_at, updated_at=excluded.updated_at, deleted=excluded.deleted",
            (
                row.thread_id,
                row.graph_id,
                json_text(row.metadata),
                row.status,
                row.created_at or time.time(),
                row.updated_at or time.time(),
                int(row.deleted),
            ),
        )

    def _get_thread(self, cur: Any, thread_id: str) -> ThreadRow | None:
        cur.execute(f"SELECT {_THREAD_COLS} FROM gt_q_threads WHERE thread_id=?", (thread_id,))
        row = cur.fetchone()
        return _thread(row) if row is not None else None

    def create_thread(self, row: ThreadRow) -> tuple[ThreadRow, bool]:
        check_readable("the thread's metadata", row.metadata)

        def go(cur: Any) -> tuple[ThreadRow, bool]:
            self._lock_thread(cur, row.thread_id)
            found = self._get_thread(cur, row.thread_id)
            if found is not None and not found.deleted:
                return found, False
            now = time.time()
            row.created_at = row.created_at or now
            row.updated_at = row.updated_at or now
            self._put_thread(cur, row)
            return row, True

        return self._tx(go)

    def put_thread(self, row: ThreadRow) -> None:
        def go(cur: Any) -> None:
            self._lock_thread(cur, row.thread_id)
            self._put_thread(cur, row)

        self._tx(go)

    def update_thread(self, thread_id: str, **fields: Any) -> ThreadRow | None:
        check_thread_fields(fields)
        check_readable("the thread's metadata", fields.get("metadata"))

        def go(cur: Any) -> ThreadRow | None:
            # read, change and write under the thread's lock: a change made meanwhile by another
            # process (a run's status, a metadata patch) is not overwritten with the older row
            self._lock_thread(cur, thread_id)
            row = self._get_thread(cur, thread_id)
            if row is None:
                return None
            for name, value in fields.items():
                setattr(row, name, value)
            row.updated_at = time.time()
            self._put_thread(cur, row)
            return row

        return self._tx(go)

    def get_thread(self, thread_id: str) -> ThreadRow | None:
        return self._tx(lambda cur: self._get_thread(cur, thread_id), write=False)

    def list_threads(self) -> list[ThreadRow]:
        def go(cur: Any) -> list[ThreadRow]:
            cur.execute(f"SELECT {_THREAD_COLS} FROM gt_q_threads ORDER BY created_at DESC")
            return decoded(_thread, cur.fetchall(), "thread")

        return self._tx(go, write=False)

    # -- assistants ------------------------------------------------------------------------

    def put_assistant(self, row: AssistantRow) -> None:
        check_readable("the assistant's config, context and metadata", row.config, row.context, row.metadata)

        def go(cur: Any) -> None:
            cur.execute("DELETE FROM gt_q_assistants WHERE assistant_id=?", (row.assistant_id,))
            now = time.time()
            cur.execute(
                f"INSERT INTO gt_q_assistants({_ASSISTANT_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    row.assistant_id,
                    row.graph_id,
                    row.name,
                    row.description,
                    json_text(row.config),
                    json_text(row.context),
                    json_text(row.metadata),
                    row.version,
                    row.created_at or now,
                    row.updated_at or now,
                ),
            )

        self._tx(go)

    def get_assistant(self, assistant_id: str) -> AssistantRow | None:
        def go(cur: Any) -> AssistantRow | None:
            cur.execute(f"SELECT {_ASSISTANT_COLS} FROM gt_q_assistants WHERE assistant_id=?", (assistant_id,))
            row = cur.fetchone()
            return _assistant(row) if row is not None else None

        return self._tx(go, write=False)

    def list_assistants(self) -> list[AssistantRow]:
        def go(cur: Any) -> list[AssistantRow]:
            cur.execute(f"SELECT {_ASSISTANT_COLS} FROM gt_q_assistants ORDER BY created_at, assistant_id")
            return [_assistant(r) for r in cur.fetchall()]

        return self._tx(go, write=False)

    def delete_assistant(self, assistant_id: str) -> bool:
        def go(cur: Any) -> bool:
            cur.execute("DELETE FROM gt_q_assistants WHERE assistant_id=?", (assistant_id,))
            return bool(cur.rowcount == 1)

        return self._tx(go)
