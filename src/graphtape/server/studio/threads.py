"""Threads as the Studio API knows them: created over HTTP or found on the tape, with their status.

A thread's checkpoints and runs live in the store (written by the recorded
graph); what is kept here in memory is what the LangGraph API adds around
them: metadata given at creation, which graph the thread belongs to, and its
status. A thread that has recorded runs on the tape but is not known here
(runs made from Python, or before a restart) is found through the tape, so
nothing recorded is hidden. Keeping this registry in the store is part of the
durable-queue slice (docs/server.md).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from graphtape.server.studio.assistants import now_iso
from graphtape.server.studio.problems import Conflict, NotFound

__all__ = ["ThreadEntry", "Threads"]


@dataclass
class ThreadEntry:
    thread_id: str
    graph_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    status: str = "idle"
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)

    def touch(self, status: str | None = None) -> None:
        if status is not None:
            self.status = status
        self.updated_at = now_iso()

    def describe(self, values: Any = None, interrupts: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "metadata": self.metadata,
            "status": self.status,
            "values": values,
            "interrupts": interrupts or {},
        }


class Threads:
    """The threads of one server, by id."""

    def __init__(self, tape: Any):
        self.tape = tape
        self.entries: dict[str, ThreadEntry] = {}
        self.deleted: set[str] = set()

    def create(
        self, thread_id: str | None, metadata: dict[str, Any] | None, if_exists: str, graph_id: str | None
    ) -> ThreadEntry:
        tid = thread_id or str(uuid.uuid4())
        existing = self.entries.get(tid) or (None if thread_id is None else self._from_tape(tid))
        if existing is not None:
            if if_exists == "do_nothing":
                return existing
            raise Conflict(f"thread {tid!r} already exists; pass if_exists='do_nothing' to reuse it")
        entry = ThreadEntry(tid, graph_id=graph_id, metadata=dict(metadata or {}))
        if graph_id:
            entry.metadata.setdefault("graph_id", graph_id)
        self.entries[tid] = entry
        self.deleted.discard(tid)
        return entry

    def _from_tape(self, thread_id: str) -> ThreadEntry | None:
        if thread_id in self.deleted:
            return None
        runs = self.tape.runs(thread_id=thread_id, limit=1)
        return self._register(runs[0]) if runs else None

    def _register(self, last_run: Any) -> ThreadEntry:
        """A thread known from its newest recorded run: its graph, and its status from how that run ended."""
        status = {"interrupted": "interrupted", "failed": "error", "diverged": "error"}.get(last_run.status, "idle")
        graph = last_run.graph
        entry = ThreadEntry(last_run.thread_id, graph_id=graph, metadata={"graph_id": graph}, status=status)
        self.entries[last_run.thread_id] = entry
        return entry

    def find(self, thread_id: str) -> ThreadEntry | None:
        return self.entries.get(thread_id) or self._from_tape(thread_id)

    def get(self, thread_id: str) -> ThreadEntry:
        entry = self.find(thread_id)
        if entry is None:
            raise NotFound(f"no thread {thread_id!r}; create it with POST /threads or list them with /threads/search")
        return entry

    def delete(self, thread_id: str) -> None:
        self.get(thread_id)
        del self.entries[thread_id]
        self.deleted.add(thread_id)

    def forget(self, thread_id: str) -> None:
        """Drop a temporary thread (a stateless run's) from the API; its recorded runs stay on the tape."""
        self.entries.pop(thread_id, None)
        self.deleted.add(thread_id)

    def search(
        self, metadata: dict[str, Any] | None, status: str | None, ids: list[str] | None, limit: int, offset: int
    ) -> list[ThreadEntry]:
        for run in self.tape.runs(limit=500):  # newest first: the first run seen of a thread is its last
            if run.thread_id not in self.entries and run.thread_id not in self.deleted:
                self._register(run)
        found = [
            e
            for e in self.entries.values()
            if (status is None or e.status == status)
            and (ids is None or e.thread_id in ids)
            and all(e.metadata.get(k) == v for k, v in (metadata or {}).items())
        ]
        found.sort(key=lambda e: e.created_at, reverse=True)
        return found[offset : offset + limit]
