"""Assistants made over HTTP, kept in the store's run queue so that every server process sees them.

:class:`~graphtape.server.studio.assistants.Assistants` keeps the assistants
made over HTTP in its ``custom`` mapping; the Studio replaces that dict with a
:class:`StoredAssistants`, a mapping over the queue's assistant rows
(:mod:`graphtape.store.runqueue`). An entry read from it is rebuilt on the
graph this process serves (so it follows a reloaded graph) and is a
:class:`StoredAssistantEntry`, which writes itself back when a field the API
changes is set (a ``PATCH`` sets them one by one): the routes handle it like
any other entry.

Rejected: a cache of the rows in each process: another process's patch or
delete would not be seen; the rows are small and read by id.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator, MutableMapping
from typing import Any

from graphtape.server.studio.assistants import AssistantEntry, Assistants
from graphtape.server.studio.threads import iso
from graphtape.store.runqueue import AssistantRow, RunQueue

__all__ = ["StoredAssistantEntry", "StoredAssistants"]

#: the fields of an entry that its row keeps
_STORED = frozenset({"name", "description", "config", "context", "metadata", "version", "updated_at"})


def _ts(text: str) -> float:
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return time.time()


def _row(entry: AssistantEntry) -> AssistantRow:
    return AssistantRow(
        entry.assistant_id,
        entry.graph_id,
        entry.name,
        entry.description,
        dict(entry.config or {}),
        dict(entry.context or {}),
        dict(entry.metadata or {}),
        entry.version,
        _ts(entry.created_at),
        _ts(entry.updated_at),
    )


class StoredAssistantEntry(AssistantEntry):
    """An assistant read from the store; setting one of its stored fields saves it."""

    _queue: RunQueue | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in _STORED and self._queue is not None:
            self._queue.put_assistant(_row(self))


class StoredAssistants(MutableMapping[str, AssistantEntry]):
    """The assistants made over HTTP, by id, in the run queue's store."""

    def __init__(self, queue: RunQueue, assistants: Assistants):
        self.queue = queue
        self.assistants = assistants

    def _entry(self, row: AssistantRow | None) -> AssistantEntry | None:
        base = self.assistants.entries.get(row.graph_id) if row is not None else None
        if row is None or base is None:  # a graph this process does not serve
            return None
        entry = StoredAssistantEntry(
            base.graph_id,
            base.graph,
            base.recorded,
            created_at=iso(row.created_at),
            custom_id=row.assistant_id,
            name=row.name,
            description=row.description,
            config=row.config,
            context=row.context,
            metadata=row.metadata,
            version=row.version,
            updated_at=iso(row.updated_at),
            load_error=base.load_error,
        )
        object.__setattr__(entry, "_queue", self.queue)
        return entry

    def __getitem__(self, assistant_id: str) -> AssistantEntry:
        entry = self._entry(self.queue.get_assistant(assistant_id))
        if entry is None:
            raise KeyError(assistant_id)
        return entry

    def __contains__(self, assistant_id: object) -> bool:
        return isinstance(assistant_id, str) and self._entry(self.queue.get_assistant(assistant_id)) is not None

    def __setitem__(self, assistant_id: str, entry: AssistantEntry) -> None:
        self.queue.put_assistant(_row(entry))

    def __delitem__(self, assistant_id: str) -> None:
        if not self.queue.delete_assistant(assistant_id):
            raise KeyError(assistant_id)

    def __iter__(self) -> Iterator[str]:
        return iter([row.assistant_id for row in self.queue.list_assistants()])

    def __len__(self) -> int:
        return len(self.queue.list_assistants())

    def values(self) -> Any:
        """Every assistant of a served graph (one read)."""
        found = (self._entry(row) for row in self.queue.list_assistants())
        return [e for e in found if e is not None]
