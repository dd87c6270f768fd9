"""Threads as the Studio API knows them: kept in the store's run queue, or found on the tape.

A thread's checkpoints and runs live in the store (written by the recorded
graph); what the LangGraph API adds around them (metadata given at creation,
which graph the thread belongs to, its status) is a row of the run queue's
thread registry (:mod:`graphtape.store.runqueue`), so every server process on
one store sees the same threads. A thread with recorded runs on the tape but
no row (runs made from Python) is found through the tape, so nothing
recorded is hidden; it gets a row the first time the API changes it. A
deleted thread keeps a row marked deleted, which hides its recorded runs.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from graphtape.jsontext import json_depth
from graphtape.server.studio.assistants import assistant_id_for, now_iso
from graphtape.server.studio.problems import Conflict, NotFound
from graphtape.store.runqueue import RunQueue, ThreadRow
from graphtape.store.runqueue_base import MAX_STORED_DEPTH, json_text

__all__ = ["SORT_FIELDS", "ThreadEntry", "Threads", "iso", "page", "time_key"]

log = logging.getLogger(__name__)


#: the fields ``POST /threads/search`` sorts by (LangGraph's ``sort_by``); by default ``updated_at``, newest first
SORT_FIELDS = ("thread_id", "status", "created_at", "updated_at", "state_updated_at")

_NEVER = datetime.datetime.min.replace(tzinfo=datetime.UTC)


def iso(ts: float) -> str:
    """A Unix time as the API shows times (ISO 8601, UTC)."""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat()


def time_key(value: str | None) -> datetime.datetime:
    """An ISO 8601 time of the API as a sort key (the strings do not sort as times: a whole second
    has no fraction); a missing or unreadable one sorts first."""
    try:
        parsed = datetime.datetime.fromisoformat(value) if value else _NEVER
    except ValueError:
        return _NEVER
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)


def page(entries: list[ThreadEntry], key: Any, descending: bool, limit: int, offset: int) -> list[ThreadEntry]:
    """One page of ``entries`` sorted by ``key`` (ties by thread id, in the same direction)."""
    ordered = sorted(entries, key=lambda e: (key(e), e.thread_id), reverse=descending)
    return ordered[offset : offset + limit]


@dataclass
class ThreadEntry:
    thread_id: str
    graph_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    status: str = "idle"
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)

    @classmethod
    def from_row(cls, row: ThreadRow) -> ThreadEntry:
        return cls(row.thread_id, row.graph_id, row.metadata, row.status, iso(row.created_at), iso(row.updated_at))

    def describe(
        self,
        values: Any = None,
        interrupts: dict[str, Any] | None = None,
        *,
        error: dict[str, Any] | None = None,
        state_updated_at: str | None = None,
    ) -> dict[str, Any]:
        """The thread as LangGraph's server answers it: ``values`` and ``interrupts`` (by task id) of
        its latest checkpoint, the ``error`` of its last run when that failed, and
        ``state_updated_at``, when its latest checkpoint was written."""
        return {
            "thread_id": self.thread_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "state_updated_at": state_updated_at or self.updated_at,
            "metadata": self.metadata,
            "status": self.status,
            "config": {},
            "values": values,
            "interrupts": interrupts or {},
            "error": error,
        }


class Threads:
    """The threads of every server process on one store, by id."""

    def __init__(self, tape: Any, queue: RunQueue):
        self.tape = tape
        self.queue = queue

    def create(
        self, thread_id: str | None, metadata: dict[str, Any] | None, if_exists: str, graph_id: str | None
    ) -> ThreadEntry:
        tid = thread_id or str(uuid.uuid4())
        if thread_id is not None and self.queue.get_thread(tid) is None:
            recorded = self._from_tape(tid)
            if recorded is not None:
                if if_exists == "do_nothing":
                    return recorded
                raise Conflict(f"thread {tid!r} already exists; pass if_exists='do_nothing' to reuse it")
        meta = dict(metadata or {})
        if graph_id:
            meta.setdefault("graph_id", graph_id)
        row, created = self.queue.create_thread(ThreadRow(tid, graph_id, meta))
        if not created:
            if if_exists == "do_nothing":
                return ThreadEntry.from_row(row)
            raise Conflict(f"thread {tid!r} already exists; pass if_exists='do_nothing' to reuse it")
        return ThreadEntry.from_row(row)

    def _from_tape(self, thread_id: str) -> ThreadEntry | None:
        runs = self.tape.runs(thread_id=thread_id, limit=1)
        return self._recorded(runs[0]) if runs else None

    @staticmethod
    def _recorded(last_run: Any) -> ThreadEntry:
        """A thread known from its newest recorded run: its graph, and its status from how that run ended."""
        status = {"interrupted": "interrupted", "failed": "error", "diverged": "error"}.get(last_run.status, "idle")
        graph = last_run.graph
        started = iso(last_run.started_at)
        # the graph's own assistant ran it (as far as the API can tell): a front end configured with
        # that assistant's UUID finds the thread as it finds the ones its runs made
        metadata = {"graph_id": graph, "assistant_id": assistant_id_for(graph)}
        return ThreadEntry(last_run.thread_id, graph, metadata, status, started, started)

    def find(self, thread_id: str) -> ThreadEntry | None:
        row = self.queue.get_thread(thread_id)
        if row is not None:
            return None if row.deleted else ThreadEntry.from_row(row)
        return self._from_tape(thread_id)

    def get(self, thread_id: str) -> ThreadEntry:
        entry = self.find(thread_id)
        if entry is None:
            raise NotFound(f"no thread {thread_id!r}; create it with POST /threads or list them with /threads/search")
        return entry

    def update(self, entry: ThreadEntry, **fields: Any) -> ThreadEntry:
        """Change ``status``, ``graph_id`` or ``metadata`` of a thread (``entry`` too) and store them."""
        for name, value in fields.items():
            setattr(entry, name, value)
        row = self.queue.update_thread(entry.thread_id, **fields)
        if row is None:  # known from the tape only: its first row
            self.queue.create_thread(ThreadRow(entry.thread_id, entry.graph_id, entry.metadata, entry.status))
            row = self.queue.update_thread(entry.thread_id, **fields)
        if row is not None:
            entry.updated_at = iso(row.updated_at)
        return entry

    def set_status(self, thread_id: str, status: str) -> None:
        """The thread's status after a run started or ended (a no-op for a deleted thread)."""
        row = self.queue.get_thread(thread_id)
        if row is None:
            entry = self._from_tape(thread_id)
            if entry is not None:
                self.update(entry, status=status)
        elif not row.deleted:
            self.queue.update_thread(thread_id, status=status)

    def last_error(self, thread_id: str) -> dict[str, Any] | None:
        """``{"error": type, "message": ...}`` of the thread's newest run, if that run failed."""
        queued = self.queue.list_runs(thread_id=thread_id, limit=1)
        if queued:
            result = queued[0].result
            failure = result.get("__error__") if isinstance(result, dict) else None
            return failure if isinstance(failure, dict) and queued[0].status == "error" else None
        recorded = self.tape.runs(thread_id=thread_id, limit=1)  # a thread recorded from Python
        if recorded and recorded[0].status in ("failed", "diverged") and recorded[0].error:
            kind, _, message = recorded[0].error.partition(":")  # "Type: first line of the message"
            return {"error": kind, "message": message.strip()}
        return None

    def delete(self, thread_id: str) -> None:
        entry = self.get(thread_id)
        self.update(entry, deleted=True)

    def forget(self, thread_id: str) -> None:
        """Drop a temporary thread (a stateless run's) from the API; its recorded runs stay on the tape."""
        entry = self.find(thread_id)
        if entry is not None:
            self.update(entry, deleted=True)

    def search(
        self,
        metadata: dict[str, Any] | None,
        status: str | None,
        ids: list[str] | None,
        limit: int,
        offset: int,
        sort_by: str = "updated_at",
        descending: bool = True,
    ) -> list[ThreadEntry]:
        """A page of the threads that match, sorted by a field of their row (``state_updated_at``
        is read from each thread's latest checkpoint: the route sorts by it, with :meth:`matching`)."""
        if sort_by in ("created_at", "updated_at"):
            key: Any = lambda e: time_key(getattr(e, sort_by))  # noqa: E731
        elif sort_by in ("thread_id", "status"):
            key = lambda e: getattr(e, sort_by)  # noqa: E731
        else:
            raise ValueError(f"threads sort by one of {', '.join(SORT_FIELDS[:-1])} here, not {sort_by!r}")
        return page(self.matching(metadata, status, ids), key, descending, limit, offset)

    def matching(self, metadata: dict[str, Any] | None, status: str | None, ids: list[str] | None) -> list[ThreadEntry]:
        """Every thread (with a row or recorded only) whose status, id and metadata match, unsorted."""
        rows = {row.thread_id: row for row in self.queue.list_threads()}
        entries = [ThreadEntry.from_row(row) for row in rows.values() if not row.deleted and _readable(row)]
        seen = set(rows)
        for run in self.tape.runs(limit=500):  # newest first: the first run seen of a thread is its last
            if run.thread_id not in seen:
                seen.add(run.thread_id)
                entries.append(self._recorded(run))
        return [
            e
            for e in entries
            if (status is None or e.status == status)
            and (ids is None or e.thread_id in ids)
            and all(e.metadata.get(k) == v for k, v in (metadata or {}).items())
        ]


def _readable(row: ThreadRow) -> bool:
    """Whether the thread's row can be answered as JSON: a row stored with metadata nested deeper
    than the API serialises (before such values were refused) is left out of listings, with a
    warning, instead of failing every listing after it."""
    if json_depth(json_text(row.metadata)) <= MAX_STORED_DEPTH:
        return True
    log.warning(
        "graphtape studio: thread %s is left out of listings: its metadata nests deeper than %d levels "
        "and cannot be answered as JSON; delete it (DELETE /threads/%s) or fix its row in the store",
        row.thread_id,
        MAX_STORED_DEPTH,
        row.thread_id,
    )
    return False
