"""What a history listing reads from a store: checkpoint rows, events, replay runs (internal).

Every read is a method of the store interface
(:class:`~graphtape.store.base.TapeStore`): generic defaults built on its
primitives, which a backend overrides to read only the listed columns (the
SQL stores select them from covering indexes, so that a listing of 10,000
checkpoints never touches a checkpoint body or an event it does not show:
``benchmarks/history.py``). This module only names those shapes for the
history and keeps what one listing reads once.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Sequence
from typing import Any

from graphtape.store.base import RunRecord, TapeStore
from graphtape.store.listing import CheckpointMatch, KeyInfo, ListedCheckpoint, ListedEvent, RowKeys, row_key

__all__ = ["Ev", "KeyInfo", "Keys", "Match", "Reader", "Row", "iso", "reader_for", "row_key"]

#: the names the history uses for the store's listing shapes
Row = ListedCheckpoint
Keys = RowKeys
Ev = ListedEvent
Match = CheckpointMatch


def iso(ts: float | None) -> str | None:
    """A tape event's epoch seconds as the ISO 8601 UTC time LangGraph gives checkpoints."""
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).isoformat()


class Reader:
    """What a history needs from a store; the copies come with the rows, so they are kept."""

    def __init__(self, store: TapeStore):
        self.store = store
        self._copies: dict[str, dict[str, str]] = {}

    def has_checkpoints(self, thread_id: str) -> bool:
        return self.store.has_checkpoints(thread_id)

    def rows(self, thread_id: str, all_ns: bool) -> list[tuple[Any, ...]]:
        """The thread's checkpoints as :class:`Row`-shaped tuples, oldest first."""
        listing = self.store.checkpoint_listing(thread_id, namespaces=all_ns)
        self._copies[thread_id] = listing.copies
        return listing.rows

    def copies(self, thread_id: str) -> dict[str, str]:
        """Root checkpoints written outside runs as copies of another (graphtape's fork): id -> source id."""
        if thread_id not in self._copies:
            self.rows(thread_id, False)
        return self._copies[thread_id]

    def events(self, run_ids: Sequence[str], kinds: Sequence[str]) -> Iterator[Ev]:
        return self.store.listed_events(run_ids, kinds)

    def replay_runs(self) -> list[RunRecord]:
        return self.store.list_replays()

    def saver_matches(self, prefix: str, thread_id: str | None) -> list[Match]:
        """Checkpoints of graphtape's saver matching ``prefix``: of the thread, or of every
        thread where the store finds ids cheaply (else none: the tape's events are cheaper)."""
        if thread_id is None and not self.store.finds_checkpoints_by_prefix:
            return []
        return self.store.find_checkpoints(prefix, thread_id=thread_id)

    def nonrun_matches(self, prefix: str) -> list[Match]:
        """Checkpoints written outside runs matching ``prefix`` (when :meth:`saver_matches` did not look)."""
        if self.store.finds_checkpoints_by_prefix:
            return []  # saver_matches already looked at every row
        return self.store.find_checkpoints(prefix, outside_runs=True)


def reader_for(store: TapeStore) -> Reader:
    """The listing reader of a store."""
    return Reader(store)
