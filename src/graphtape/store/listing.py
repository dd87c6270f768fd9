"""The shapes a history listing reads from a store, and how a listed call is written.

A listing of 10,000 checkpoints must not deserialise 10,000 checkpoint bodies,
so the store hands it plain tuples of exactly the listed columns
(:meth:`~graphtape.store.base.TapeStore.checkpoint_listing`,
:meth:`~graphtape.store.base.TapeStore.listed_events`,
:meth:`~graphtape.store.base.TapeStore.find_checkpoints`). The tuples are
described here once; a ``NamedTuple`` per row would cost per row, so the
types below document the positions and the readers index them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class ListedCheckpoint(NamedTuple):
    """The shape of a listed checkpoint row (rows are plain tuples of these positions).

    ``key`` holds the row's run id, source and stored writers, which few rows
    differ in (10,000 checkpoints of one run share two or three keys): one
    string per row instead of three, decoded once per distinct key by
    :class:`RowKeys`. ``ns`` is there only when a listing shows subgraph
    namespaces; a root listing's rows stop at ``calls``.
    """

    checkpoint_id: str
    parent_id: str | None
    step: int | None
    created_at: str | None
    key: str
    calls: str | None  # the step's calls as graphtape's saver stored them (CheckpointRow.calls); None: not known
    ns: str = ""


class CheckpointListing(NamedTuple):
    """A thread's checkpoints as a listing reads them (see :meth:`TapeStore.checkpoint_listing`)."""

    #: :class:`ListedCheckpoint`-shaped tuples, oldest first
    rows: list[tuple[Any, ...]]
    #: root checkpoints written outside runs as copies of another (graphtape's fork): id -> source id
    copies: dict[str, str]


#: (run_id, seq, kind, ts, step, node_path, task, data): ``task_started`` events
#: carry step/node_path/task (their data may be None); other events carry data.
ListedEvent = tuple
#: (thread, ns, checkpoint id, run id, step, source) of a checkpoint found by id
CheckpointMatch = tuple
#: what a row key decodes to: run id, source, and the writers graphtape's saver
#: stored (``None``: not known; read them from the task events)
KeyInfo = tuple  # (str | None, str | None, tuple[str, ...] | None)

#: separates the parts of a row key; marks writers that are not known. Run ids
#: and sources never hold them. SQL backends build keys with these characters.
KEY_SEP, KEY_UNKNOWN = "\x1f", "\x1e"


def row_key(run_id: str | None, source: str | None, writers: str | None) -> str:
    """A row's key (SQL backends build the same string in SQL)."""
    return f"{run_id or ''}{KEY_SEP}{source or ''}{KEY_SEP}{KEY_UNKNOWN if writers is None else writers}"


class RowKeys(dict):
    """Row key -> (run id, source, writers tuple or ``None``), decoded on first use."""

    def __missing__(self, key: str) -> KeyInfo:
        run_id, source, writers = key.split(KEY_SEP, 2)
        info = self[key] = (
            run_id or None,
            source or None,
            None if writers == KEY_UNKNOWN else tuple(writers.split("|")) if writers else (),
        )
        return info


def listed_event(run_id: str, seq: int, kind: str, ts: float, data: dict[str, Any]) -> ListedEvent:
    """An event as a listing reads it (:data:`ListedEvent`), from its decoded body."""
    if kind == "task_started":
        return (run_id, seq, kind, ts, data.get("step"), data.get("node_path"), data.get("task"), data)
    return (run_id, seq, kind, ts, None, None, None, data)


def listed_call(kind: str, data: dict[str, Any]) -> list[Any]:
    """A call as a history lists it, in the form of ``CheckpointRow.calls``: built from the call
    event's data by the recording session (stored) and by the history (from events) alike."""
    return [
        kind,
        data.get("name") or data.get("model"),
        data.get("source") or "live",
        data.get("call_id"),
        data.get("node_path"),
        1 if data.get("error") else 0,
    ]


def call_levels(
    task: str, step: Any, step_of: Callable[[str], Any], *, depth: int | None = None
) -> list[tuple[str, int]]:
    """The (checkpoint namespace, step) of each level a call belongs to, outermost first.

    ``task`` is the call's task namespace (``a:<id>|b:<id>``), ``step`` its
    own task's step, ``step_of(task namespace)`` the step of an enclosing
    task (``None`` if unknown). A call in a subgraph belongs to the
    subgraph's step and to the step of every task that ran the subgraph.
    ``depth``: at most that many levels (1: the root only).
    """
    if not task or task == "(root)":
        return [("", step)] if isinstance(step, int) else []
    segments = task.split("|")
    levels = []
    for d in range(len(segments) if depth is None else min(depth, len(segments))):
        at = step_of("|".join(segments[: d + 1]))
        if at is None and d == len(segments) - 1:
            at = step
        if isinstance(at, int):
            levels.append(("|".join(segments[:d]), at))
    return levels
