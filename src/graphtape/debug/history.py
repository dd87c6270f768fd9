"""The history of a run or a thread: its checkpoints, who wrote them, the calls of each step, its branches.

A listing never deserialises a checkpoint. It is built from two cheap
sources:

* the checkpoint rows of graphtape's saver (``gt_checkpoints``): id, parent,
  namespace, step, source, run and time are plain columns; or, for runs
  recorded beside another saver, the tape's ``checkpoint`` events;
* the tape's task and call events: ``task_started`` says which node ran in
  which step (and namespace), call events say which LLM, tool and effect
  calls a step made.

A step's tasks produce the checkpoint of the same step: the tasks tagged
``langgraph_step == n`` in namespace ``ns`` wrote checkpoint ``n`` of
``ns``. A run that resumes an interrupted step finishes tasks the previous
run started; those are counted as writers of the checkpoint too.

On the SQLite store the listing runs two narrow queries (the columns it
shows, task fields extracted by SQLite's JSON functions) instead of the
store's general methods, which read checkpoint bodies and decode every
event; other stores go through the public :class:`TapeStore` interface.

Branches are a tree of runs: a thread's runs that continue one another form
one branch; a run that starts elsewhere than the tip of its branch (LangGraph
time travel, ``update_state``) starts a ``fork`` branch under the checkpoint
it started from; replays (and graphtape's forks, which are replays in a new
thread) are ``replay``/``fork`` branches under the run they replay. A label
and a note can be attached to any run (:func:`label_run`); a branch shows the
latest label of its runs.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as _dt
import gc
import itertools
import operator
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from graphtape.errors import GraphtapeError, RunNotFound
from graphtape.store.base import EventRow, RunRecord, WriteBatch, unpack_event

if TYPE_CHECKING:
    from graphtape.tape import Tape

__all__ = [
    "Branch",
    "BranchRun",
    "CheckpointRef",
    "History",
    "HistoryEntry",
    "build_history",
    "checkpoint_state",
    "is_internal_channel",
    "label_run",
    "locate_checkpoint",
]

#: Event kind of a run label; the latest label event of a run wins.
LABEL_KIND = "label"
#: Label events are appended at sequence numbers from here on, so that a label
#: written while the run is still recording (by another process) can never
#: take a sequence number the recording session will use.
LABEL_SEQ_BASE = 1 << 40

CALL_KINDS = ("llm_call", "tool_call", "effect_call")
_TASK_KINDS = ("task_started", "task_interrupted", "task_failed")
_MIN_PREFIX = 8

#: Channels LangGraph keeps for itself: not part of the state a user wrote.
_INTERNAL_PREFIXES = ("branch:", "join:", "__pregel_", "start:")
_INTERNAL_CHANNELS = frozenset({
    "__start__", "__interrupt__", "__resume__", "__error__", "__error_source_node__", "__return__",
    "__no_writes__", "__snapshot_bumps__", "__input__",
})


def is_internal_channel(name: str) -> bool:
    """Whether a checkpoint channel is LangGraph bookkeeping (``branch:to:x``, ``__start__``, ...)."""
    return name in _INTERNAL_CHANNELS or name.startswith(_INTERNAL_PREFIXES)


# ---------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------


class HistoryEntry(NamedTuple):
    """One checkpoint in a history.

    ``writers`` are the node paths of the tasks whose writes made this
    checkpoint (``["__start__"]`` for the one made from a run's input);
    ``calls`` the LLM/tool/effect calls made during that step, at any depth
    (``{"kind", "name", "source", "call_id", "node_path"}``); ``next`` the
    nodes that ran from it (the writers of its first child), or the tasks
    pending on it when the run stopped there; ``None`` when unknown.
    ``within`` is, for a subgraph checkpoint, the root-level checkpoint that
    the subgraph's task produced.

    A named tuple of tuples: a listing of 10,000 checkpoints makes 10,000 of
    them, a tuple is made in one step where an object sets thirteen
    attributes, and equal writer lists can be one shared (immutable) tuple.
    """

    checkpoint_id: str
    parent_id: str | None
    thread_id: str
    ns: str
    step: int | None
    source: str | None
    created_at: str | None
    run_id: str | None
    writers: tuple[str, ...]
    calls: tuple[dict[str, Any], ...]
    next: tuple[str, ...] | None = None
    within: str | None = None
    copied_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "checkpoint_id": self.checkpoint_id,
            "parent_id": self.parent_id,
            "thread_id": self.thread_id,
            "ns": self.ns,
            "step": self.step,
            "source": self.source,
            "created_at": self.created_at,
            "run_id": self.run_id,
            "writers": list(self.writers),
            "calls": [dict(c) for c in self.calls],
        }
        if self.next is not None:
            d["next"] = list(self.next)
        if self.within is not None:
            d["within"] = self.within
        if self.copied_from is not None:
            d["copied_from"] = self.copied_from
        return d


@dataclasses.dataclass
class BranchRun:
    """A run as it appears in the branch tree."""

    run_id: str
    thread_id: str
    status: str
    mode: str
    started_at: float
    ended_at: float | None = None
    parent_run_id: str | None = None
    replay_of: str | None = None
    label: str | None = None
    note: str | None = None
    labeled_at: float | None = None
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Branch:
    """A line of runs that continue one another, and the branches that leave it.

    ``kind`` is ``main`` (a thread's first line), ``fork`` (started from an
    earlier checkpoint, an edited state or graphtape's fork) or ``replay``.
    ``from_run``/``from_checkpoint`` say where it leaves its parent branch;
    ``via`` lists the checkpoints written outside any run on the way
    (``update_state``, copies), oldest first.
    """

    id: str
    kind: str
    thread_id: str
    runs: list[BranchRun] = dataclasses.field(default_factory=list)
    from_run: str | None = None
    from_checkpoint: str | None = None
    via: list[str] = dataclasses.field(default_factory=list)
    children: list[Branch] = dataclasses.field(default_factory=list)

    @property
    def label(self) -> str | None:
        labeled = [r for r in self.runs if r.labeled_at is not None]
        return max(labeled, key=lambda r: r.labeled_at or 0).label if labeled else None

    @property
    def note(self) -> str | None:
        labeled = [r for r in self.runs if r.labeled_at is not None]
        return max(labeled, key=lambda r: r.labeled_at or 0).note if labeled else None

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]

    def walk(self) -> Iterator[Branch]:
        yield self
        for child in self.children:
            yield from child.walk()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "thread_id": self.thread_id,
            "label": self.label,
            "note": self.note,
            "from_run": self.from_run,
            "from_checkpoint": self.from_checkpoint,
            "via": list(self.via),
            "runs": [r.to_dict() for r in self.runs],
            "children": [c.to_dict() for c in self.children],
        }


@dataclasses.dataclass
class History:
    """The checkpoints of a run or thread (oldest first) and the tree of branches around it."""

    target: str
    kind: str  # "run" | "thread"
    thread_id: str
    run_id: str | None
    namespaces: bool
    entries: list[HistoryEntry]
    branches: list[Branch]
    runs: dict[str, BranchRun]
    source: str  # "saver" (graphtape's checkpoint rows) or "events" (the tape, beside another saver)

    def __iter__(self) -> Iterator[HistoryEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> HistoryEntry:
        return self.entries[index]

    def entry(self, checkpoint_id: str) -> HistoryEntry:
        """The entry with this checkpoint id (or unique prefix)."""
        found = [e for e in self.entries if e.checkpoint_id.startswith(checkpoint_id)]
        exact = [e for e in found if e.checkpoint_id == checkpoint_id]
        if exact:
            return exact[0]
        if len(found) == 1:
            return found[0]
        if found:
            raise RunNotFound(f"checkpoint prefix {checkpoint_id!r} is ambiguous in this history; give more characters")
        raise RunNotFound(f"no checkpoint {checkpoint_id!r} in the history of {self.kind} {self.target}")

    def branch_of(self, run_id: str) -> Branch | None:
        for root in self.branches:
            for b in root.walk():
                if run_id in b.run_ids:
                    return b
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "thread_id": self.thread_id,
            "run_id": self.run_id,
            "namespaces": self.namespaces,
            "source": self.source,
            "entries": [e.to_dict() for e in self.entries],
            "branches": [b.to_dict() for b in self.branches],
        }


@dataclasses.dataclass
class CheckpointRef:
    """Where a checkpoint lives: thread, namespace, and whether graphtape's saver holds it."""

    checkpoint_id: str
    thread_id: str
    ns: str
    run_id: str | None
    step: int | None
    source: str | None
    in_saver: bool

    def config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": self.ns,
                                 "checkpoint_id": self.checkpoint_id}}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------
# reading: the public store interface, and a narrow path on SQLite
# ---------------------------------------------------------------------------


class _Row(NamedTuple):
    """The shape of a listed checkpoint row (read as plain tuples: a named one costs per row).

    ``key`` holds the row's run id, source and stored writers, which few rows
    differ in (10,000 checkpoints of one run share two or three keys): one
    string per row instead of three, decoded once per distinct key by
    :class:`_Keys`. ``ns`` is there only when a listing shows subgraph
    namespaces; a root listing's rows stop at ``key``.
    """

    checkpoint_id: str
    parent_id: str | None
    step: int | None
    created_at: str | None
    key: str
    ns: str = ""


#: what a row key decodes to: run id, source, and the writers graphtape's saver
#: stored (``None``: not known; read them from the task events)
_KeyInfo = tuple  # (str | None, str | None, tuple[str, ...] | None)
_SEP, _UNKNOWN = "\x1f", "\x1e"


def _row_key(run_id: str | None, source: str | None, writers: str | None) -> str:
    """A row's key as the SQLite reader builds it in SQL (run ids and sources never hold the separator)."""
    return f"{run_id or ''}{_SEP}{source or ''}{_SEP}{_UNKNOWN if writers is None else writers}"


class _Keys(dict):
    """Row key -> (run id, source, writers tuple or ``None``), decoded on first use."""

    def __missing__(self, key: str) -> _KeyInfo:
        run_id, source, writers = key.split(_SEP, 2)
        info = self[key] = (run_id or None, source or None,
                            None if writers == _UNKNOWN else tuple(writers.split("|")) if writers else ())
        return info


#: (run_id, seq, kind, ts, step, node_path, task, data): task_started events
#: carry step/node_path/task (data may be None); other events carry data.
_Ev = tuple
#: (thread, ns, checkpoint id, run id, step, source) of a checkpoint found by id
_Match = tuple


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, tz=_dt.timezone.utc).isoformat()


class _Reader:
    """What a history needs from a store, through the public interface."""

    def __init__(self, store: Any):
        self.store = store

    def has_checkpoints(self, thread_id: str) -> bool:
        return bool(self.store.list_checkpoints(thread_id=thread_id, limit=1))

    def rows(self, thread_id: str, all_ns: bool) -> list[tuple[Any, ...]]:
        """The thread's checkpoints as :class:`_Row`-shaped tuples, oldest first."""
        rows = self.store.list_checkpoints(thread_id=thread_id, checkpoint_ns=None if all_ns else "")
        out = [
            (r.checkpoint_id, r.parent_id, r.step, r.created_at or None, _row_key(r.run_id, r.source, r.writers),
             *((r.checkpoint_ns,) if all_ns else ()))
            for r in rows
        ]
        out.sort(key=lambda r: r[0])
        return out

    def copies(self, thread_id: str) -> dict[str, str]:
        """Root checkpoints written outside runs as copies of another (graphtape's fork): id -> source id."""
        rows = self.store.list_checkpoints(thread_id=thread_id, checkpoint_ns="",
                                           metadata_filter={"graphtape_run_id": None})
        found = sorted((r.checkpoint_id, str((r.metadata or {}).get("graphtape_copied_from") or ""))
                       for r in rows if r.run_id is None)
        return {cid: copied for cid, copied in found if copied}

    def events(self, run_ids: Sequence[str], kinds: Sequence[str]) -> Iterator[_Ev]:
        for rid in run_ids:
            for ev in self.store.events(rid, list(kinds)):
                d = ev.data
                if ev.kind == "task_started":
                    yield (ev.run_id, ev.seq, ev.kind, ev.ts, d.get("step"), d.get("node_path"), d.get("task"), d)
                else:
                    yield (ev.run_id, ev.seq, ev.kind, ev.ts, None, None, None, d)

    def replay_runs(self) -> list[RunRecord]:
        return [r for r in self.store.list_runs(limit=None, newest_first=False) if r.replay_of]

    def saver_matches(self, prefix: str, thread_id: str | None) -> list[_Match]:
        if thread_id is None:
            return []  # scanning every checkpoint body of every thread: the events are cheaper
        return [
            (r.thread_id, r.checkpoint_ns, r.checkpoint_id, r.run_id, r.step, r.source)
            for r in self.store.list_checkpoints(thread_id=thread_id)
            if r.checkpoint_id.startswith(prefix)
        ]

    def nonrun_matches(self, prefix: str) -> list[_Match]:
        return [
            (r.thread_id, r.checkpoint_ns, r.checkpoint_id, r.run_id, r.step, r.source)
            for r in self.store.list_checkpoints(metadata_filter={"graphtape_run_id": None})
            if r.checkpoint_id.startswith(prefix)
        ]


class _SqliteReader(_Reader):
    """The same reads on graphtape's SQLite store, selecting only the columns a listing shows.

    ``gt_checkpoints`` rows hold the checkpoint body beside the listed
    columns; the store's ``list_checkpoints`` returns it (and parses the
    metadata and value addresses), which a listing does not need. Task
    events are small JSON; SQLite's ``json_extract`` reads their three
    fields without a Python round trip (deflated events are decoded here).
    """

    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.store._query(sql, params)

    def has_checkpoints(self, thread_id: str) -> bool:
        return bool(self._q("SELECT 1 FROM gt_checkpoints WHERE thread_id=? LIMIT 1", (thread_id,)))

    def rows(self, thread_id: str, all_ns: bool) -> list[tuple[Any, ...]]:
        # every column is in the gt_checkpoints_listing index: the bodies are never read
        sql = ("SELECT checkpoint_id, parent_id, step, created_at, "
               "ifnull(run_id, '') || char(31) || ifnull(source, '') || char(31) || ifnull(writers, char(30))"
               + (", checkpoint_ns FROM gt_checkpoints WHERE thread_id=? ORDER BY checkpoint_id" if all_ns else
                  " FROM gt_checkpoints WHERE thread_id=? AND checkpoint_ns='' ORDER BY checkpoint_id"))
        return self._q(sql, (thread_id,))

    def copies(self, thread_id: str) -> dict[str, str]:
        # a partial index holds only the copies
        return dict(self._q("SELECT checkpoint_id, copied_from FROM gt_checkpoints WHERE thread_id=? "
                            "AND checkpoint_ns='' AND copied_from IS NOT NULL ORDER BY checkpoint_id", (thread_id,)))

    def events(self, run_ids: Sequence[str], kinds: Sequence[str]) -> Iterator[_Ev]:
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

    def saver_matches(self, prefix: str, thread_id: str | None) -> list[_Match]:
        sql = ("SELECT thread_id, checkpoint_ns, checkpoint_id, run_id, step, source FROM gt_checkpoints "
               "WHERE checkpoint_id >= ? AND checkpoint_id < ?")
        params: list[Any] = [prefix, prefix + "\U0010ffff"]
        if thread_id is not None:
            sql += " AND thread_id=?"
            params.append(thread_id)
        return [tuple(r) for r in self._q(sql + " LIMIT 50", params)]

    def nonrun_matches(self, prefix: str) -> list[_Match]:
        return []  # saver_matches already looked at every row


def _reader(store: Any) -> _Reader:
    try:
        from graphtape.store.sqlite import SqliteTapeStore
    except ImportError:  # pragma: no cover
        return _Reader(store)
    if isinstance(store, SqliteTapeStore) and callable(getattr(store, "_query", None)):
        return _SqliteReader(store)
    return _Reader(store)


# ---------------------------------------------------------------------------
# resolving ids
# ---------------------------------------------------------------------------


def _resolve_target(tape: Tape, reader: _Reader, target: str) -> tuple[str, RunRecord | None, str]:
    target = (target or "").strip()
    if not target:
        raise RunNotFound("give a run id (or prefix) or a thread id")
    store = tape.store
    run = store.get_run(target)
    if run is not None:
        return "run", run, run.thread_id
    if store.list_runs(thread_id=target, limit=1) or reader.has_checkpoints(target):
        return "thread", None, target
    if len(target) >= 4:
        try:
            run = tape.run(target)
        except RunNotFound as exc:
            if "ambiguous" in str(exc):
                raise
        else:
            return "run", run, run.thread_id
    raise RunNotFound(
        f"no run or thread {target!r} in {tape.url}; list runs (and their threads) with `graphtape runs`"
    )


def locate_checkpoint(tape: Tape, checkpoint_id: str, *, thread_id: str | None = None) -> CheckpointRef:
    """Where the checkpoint with this id (or unique prefix of 8+ characters) lives.

    graphtape's saver is asked first (it also holds checkpoints written
    outside any run, e.g. by ``update_state``); then the tape's ``checkpoint``
    events, which exist for every recorded run whatever its saver. The same
    id in several threads (a replay copies its starting checkpoint) resolves
    to the one a run wrote.
    """
    cid = (checkpoint_id or "").strip()
    if len(cid) < _MIN_PREFIX:
        raise RunNotFound(
            f"checkpoint id {checkpoint_id!r} is too short: give the id or a prefix of at least "
            f"{_MIN_PREFIX} characters"
        )
    reader = _reader(tape.store)
    found: list[_Match] = list(reader.saver_matches(cid, thread_id))
    in_saver = bool(found)
    if not found:
        found = _event_matches(tape, cid, thread_id)
    if not found and thread_id is None:
        found = list(reader.nonrun_matches(cid))
        in_saver = bool(found)
    if not found:
        where = f"thread {thread_id!r} of {tape.url}" if thread_id else tape.url
        raise RunNotFound(
            f"no checkpoint {checkpoint_id!r} in {where}; list checkpoints with `graphtape history RUN|THREAD`"
        )
    exact = [m for m in found if m[2] == cid]
    if exact:
        found = exact
    ids = sorted({m[2] for m in found})
    if len(ids) > 1:
        raise RunNotFound(
            f"checkpoint prefix {checkpoint_id!r} is ambiguous ({len(ids)} checkpoints, e.g. {ids[0]}); "
            "give more characters"
        )
    if len({m[0] for m in found}) > 1:
        written = [m for m in found if m[3]]
        if len({m[0] for m in written}) == 1:
            found = written
        else:
            threads = ", ".join(sorted({m[0] for m in found}))
            raise RunNotFound(f"checkpoint {ids[0]} exists in several threads ({threads}); pass the thread id")
    thread, ns, full, run_id, step, source = found[0]
    if not in_saver:
        in_saver = tape.store.get_checkpoint(thread, ns, full) is not None
    return CheckpointRef(full, thread, ns, run_id, step, source, in_saver)


def _event_matches(tape: Tape, prefix: str, thread_id: str | None) -> list[_Match]:
    """Checkpoint events matching ``prefix``: ``(thread, ns, id, run, step, source)``."""
    runs = tape.store.list_runs(thread_id=thread_id, limit=None)  # newest first
    out = []
    for run in runs:
        for ev in tape.store.events(run.run_id, ["checkpoint"]):
            cp = str(ev.data.get("checkpoint_id") or "")
            if cp.startswith(prefix):
                out.append((run.thread_id, ev.data.get("ns") or "", cp, run.run_id, ev.data.get("step"),
                            ev.data.get("source")))
                if cp == prefix:
                    return out
    return out


def checkpoint_state(tape: Tape, checkpoint_id: str, *, thread_id: str | None = None,
                     graph: Any = None) -> dict[str, Any]:
    """The channel values at a checkpoint, LangGraph's internal channels left out.

    Checkpoints in graphtape's saver are read from the store; those in
    another saver need ``graph`` (compiled with that checkpointer, or the
    recorded graph).
    """
    ref = locate_checkpoint(tape, checkpoint_id, thread_id=thread_id)
    return _values_at(tape, ref, graph)


def _values_at(tape: Tape, ref: CheckpointRef, graph: Any = None) -> dict[str, Any]:
    if ref.in_saver:
        saver: Any = tape.store.checkpointer()
    else:
        saver = getattr(graph, "checkpointer", None) if graph is not None else None
        if graph is None:
            raise RunNotFound(
                f"checkpoint {ref.checkpoint_id} (thread {ref.thread_id}) is in the graph's own checkpointer, not "
                f"in graphtape's store at {tape.url}; pass the graph: tape.state({ref.checkpoint_id!r}, "
                "graph=compiled_graph) (CLI: --graph module:attr)"
            )
        from langgraph.checkpoint.base import BaseCheckpointSaver

        if not isinstance(saver, BaseCheckpointSaver):
            raise RunNotFound(
                f"checkpoint {ref.checkpoint_id} is in another checkpointer and the graph given has none; "
                "pass the graph compiled with the checkpointer the run was recorded with"
            )
    try:
        tup = saver.get_tuple(ref.config())
    except GraphtapeError:
        raise
    except Exception as exc:
        raise RunNotFound(f"cannot read checkpoint {ref.checkpoint_id}: {type(exc).__name__}: {exc}") from exc
    if tup is None:
        raise RunNotFound(
            f"checkpoint {ref.checkpoint_id} (thread {ref.thread_id}) is not in the checkpointer "
            f"{'of graphtape' if ref.in_saver else 'of the graph given'}; it may have been pruned"
        )
    values = tup.checkpoint.get("channel_values") or {}
    return {k: v for k, v in values.items() if not is_internal_channel(k)}


# ---------------------------------------------------------------------------
# labels
# ---------------------------------------------------------------------------


def label_run(tape: Tape, run_id: str, label: str | None, note: str | None = None) -> EventRow:
    """Append a ``label`` event to a run; the latest one wins (``label=None`` clears it)."""
    run = tape.run(run_id)
    if label is not None and not isinstance(label, str):
        raise TypeError("label must be a string (or None to clear it)")
    if note is not None and not isinstance(note, str):
        raise TypeError("note must be a string or None")
    previous = tape.store.events(run.run_id, [LABEL_KIND])
    seq = max([LABEL_SEQ_BASE - 1] + [e.seq for e in previous]) + 1
    text = label.strip() if label else None
    data: dict[str, Any] = {"label": text or None, "note": note or None}
    ev = EventRow(run.run_id, seq, LABEL_KIND, time.time(), data)
    tape.store.write(WriteBatch(events=[ev]))
    return ev


# ---------------------------------------------------------------------------
# building a history
# ---------------------------------------------------------------------------


def _parent_ns(task_ns: str) -> str:
    return task_ns.rpartition("|")[0] if "|" in task_ns else ""


def _call_info(kind: str, d: dict[str, Any]) -> dict[str, Any]:
    info = {
        "kind": kind.removesuffix("_call"),
        "name": d.get("name") or d.get("model"),
        "source": d.get("source") or "live",
        "call_id": d.get("call_id"),
        "node_path": d.get("node_path"),
    }
    if d.get("error"):
        info["error"] = True
    return info


def _branch_run(run: RunRecord, labels: dict[str, tuple[int, float, dict[str, Any]]]) -> BranchRun:
    meta = run.meta or {}
    detail = {k: meta[k] for k in ("replay_mode", "fork_of", "override_of", "invalidate_from", "edit") if k in meta}
    br = BranchRun(run.run_id, run.thread_id, run.status, run.mode, run.started_at, run.ended_at,
                   run.parent_run_id, run.replay_of, detail=detail)
    lab = labels.get(run.run_id)
    if lab is not None:
        br.label, br.note, br.labeled_at = lab[2].get("label"), lab[2].get("note"), lab[1]
    return br


def build_history(tape: Tape, target: str, *, namespaces: bool = False) -> History:
    """The history of a run (id or unique prefix) or a thread; see the module docstring."""
    # A listing allocates a few objects per checkpoint and frees none of them
    # until it returns: the cyclic collector would only re-walk them (a third
    # of the time on a 10,000-checkpoint thread). Nothing here makes cycles.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _build_history(tape, target, namespaces)
    finally:
        if enabled:
            gc.enable()


def _build_history(tape: Tape, target: str, namespaces: bool) -> History:
    store = tape.store
    reader = _reader(store)
    kind, run, thread_id = _resolve_target(tape, reader, target)
    thread_runs = store.list_runs(thread_id=thread_id, limit=None, newest_first=False)
    by_run = {r.run_id: r for r in thread_runs}

    rows: list[tuple[Any, ...]] = reader.rows(thread_id, namespaces)
    source = "saver"
    if not rows and thread_runs:
        source = "events"
    copies = reader.copies(thread_id) if rows else {}
    keys = _Keys()

    # which runs' events are read: the listed run(s), and for a run the one it resumes
    if kind == "run" and source == "saver":
        assert run is not None
        event_runs = [run.run_id] + ([run.parent_run_id] if run.parent_run_id in by_run else [])
    else:
        event_runs = [r.run_id for r in thread_runs]

    # (run, namespace of the graph, step) -> the task_started events of that step, as read:
    # (run, seq, kind, ts, step, node path, task namespace, data) tuples
    tasks: dict[tuple[str, str, int], list[tuple[Any, ...]]] = {}
    started: list[tuple[Any, ...]] = []
    bad: set[tuple[str, str]] = set()
    raw_calls: list[tuple[str, str, dict[str, Any]]] = []
    labels: dict[str, tuple[int, float, dict[str, Any]]] = {}
    cp_events: dict[str, tuple[Any, ...]] = {}

    def take(events: Iterator[_Ev]) -> None:
        for ev in events:
            run_id, seq, ev_kind, ts, step, node_path, task, data = ev
            if ev_kind == "task_started":
                if step is None:
                    continue
                if bad:
                    bad.discard((run_id, task or ""))  # a retry starts the failed task again
                started.append(ev)
                if task and "|" in task:
                    if not namespaces:
                        continue
                    key = (run_id, task.rpartition("|")[0], step)
                else:
                    key = (run_id, "", step)
                lst = tasks.get(key)
                if lst is None:
                    tasks[key] = [ev]
                else:
                    lst.append(ev)
            elif ev_kind in CALL_KINDS:
                raw_calls.append((run_id, ev_kind, data))
            elif ev_kind == LABEL_KIND:
                prev = labels.get(run_id)
                if prev is None or seq > prev[0]:
                    labels[run_id] = (seq, ts, data)
            elif ev_kind == "checkpoint":
                ns = data.get("ns") or ""
                if ns and not namespaces:
                    continue
                cid = data.get("checkpoint_id")
                cp_events.setdefault(cid, (cid, data.get("parent_id"), data.get("step"), _iso(ts),
                                           _row_key(run_id, data.get("source"), None),
                                           *((ns,) if namespaces else ())))
            else:  # task_interrupted / task_failed
                bad.add((run_id, (data or {}).get("task") or ""))

    # Calls and labels are always read (an index scan of those kinds). Task events are
    # read only where the rows do not say enough: rows without stored writers (written
    # beside another saver, or before graphtape stored them), subgraph levels, the run a
    # resumed run continues (tasks it finished in the step the next run completed), runs
    # that stopped (the tasks pending on their last checkpoint), nested calls' steps.
    take(reader.events(event_runs, [*CALL_KINDS, LABEL_KIND] + (["checkpoint"] if source == "events" else [])))
    if source == "events":
        rows = sorted(cp_events.values(), key=lambda r: r[0])
    if source == "events" or namespaces:
        task_runs = set(event_runs)
    else:
        listed = set(event_runs)
        unknown = (keys[k] for k in {r[4] for r in rows})
        task_runs = {run_id for run_id, _, writers in unknown if writers is None and run_id in listed}
        for rid in event_runs:
            r = by_run.get(rid)
            if r is None:
                continue
            if r.status != "finished":  # it stopped with tasks pending on its last checkpoint
                task_runs.add(rid)
            if r.parent_run_id in listed:
                task_runs.add(r.parent_run_id)  # type: ignore[arg-type]
        task_runs.update(rid for rid, _, d in raw_calls if "|" in (d.get("task") or ""))
    if task_runs:
        take(reader.events([r for r in event_runs if r in task_runs], _TASK_KINDS))

    # the step of every task, by its namespace (calls in subgraphs, subgraph entries)
    task_step: dict[tuple[str, str], int] = {}
    if namespaces or any("|" in (d.get("task") or "") for _, _, d in raw_calls):
        task_step = {(ev[0], ev[6] or ""): ev[4] for ev in started}

    # calls: attributed to the step of every enclosing level shown
    calls: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for run_id, ev_kind, d in raw_calls:
        task = d.get("task") or ""
        info = _call_info(ev_kind, d)
        if not task or task == "(root)":
            if d.get("step") is not None:
                calls.setdefault((run_id, "", d["step"]), []).append(info)
            continue
        segments = task.split("|")
        for depth in range(len(segments) if namespaces else 1):
            step = task_step.get((run_id, "|".join(segments[:depth + 1]))) if task_step else None
            if step is None and depth == len(segments) - 1:
                step = d.get("step")
            if step is not None:
                calls.setdefault((run_id, "|".join(segments[:depth]), step), []).append(info)

    entries = _entries(rows, keys, thread_id, by_run, tasks, bad, calls, task_step, copies,
                       only_run=run.run_id if kind == "run" and run is not None else None, nested=namespaces)

    # branches
    runs_info: dict[str, BranchRun] = {}
    branches = _build_tree(tape, reader, thread_id, thread_runs, rows, keys, copies, namespaces, labels,
                           runs_info, event_runs)
    return History(
        target=target, kind=kind, thread_id=thread_id, run_id=run.run_id if run is not None else None,
        namespaces=namespaces, entries=entries, branches=branches, runs=runs_info, source=source,
    )


def _entries(rows: list[tuple[Any, ...]], keys: _Keys, thread_id: str, by_run: dict[str, RunRecord],
             tasks: dict[tuple[str, str, int], list[tuple[Any, ...]]], bad: set[tuple[str, str]],
             calls: dict[tuple[str, str, int], list[dict[str, Any]]], task_step: dict[tuple[str, str], int],
             copies: dict[str, str], *, only_run: str | None, nested: bool) -> list[HistoryEntry]:
    """One entry per row (oldest first), ``next`` and ``within`` filled.

    Built newest first: a checkpoint's children are seen before it, the
    oldest child (the one its run went on with) last, so ``next`` is known
    when the entry is made and every entry is made once. Rows of graphtape's
    saver carry their writers; others take them from the task events. Equal
    writer lists are one tuple, shared.
    """
    # the first row of each run (and namespace) may finish a step its previous run began
    first_of: dict[int, str] = {}
    if tasks:
        seen: set[tuple[Any, Any]] = set()
        for i, r in enumerate(rows):
            at = (keys[r[4]][0], r[5] if nested else "")
            if at[0] is not None and at not in seen:
                seen.add(at)
                prev_run = by_run[at[0]].parent_run_id if at[0] in by_run else None
                if prev_run is not None and (prev_run, at[1], r[2]) in tasks:
                    first_of[i] = prev_run
        if first_of:
            cp_keys = {(keys[r[4]][0], r[5] if nested else "", r[2]) for r in rows}
            first_of = {i: p for i, p in first_of.items()
                        if (p, rows[i][5] if nested else "", rows[i][2]) not in cp_keys}

    row_by_id: dict[str, tuple[Any, ...]] | None = None
    child_writers: dict[Any, tuple[str, ...]] = {}  # parent (id, or (ns, id) when nested) -> oldest child's writers
    new = tuple.__new__
    ns = ""
    out: list[HistoryEntry] = []
    append = out.append
    for i in range(len(rows) - 1, -1, -1):
        if nested:
            cid, parent_id, step, created, key, ns = rows[i]
        else:
            cid, parent_id, step, created, key = rows[i]
        run_id, src, writers = keys[key]
        if only_run is not None and run_id != only_run:
            continue
        if writers is not None:
            step_calls = calls.get((run_id, ns, step)) if calls else None
        else:
            key = (run_id, ns, step)
            found = tasks.get(key)
            if found is not None and bad:
                found = [ev for ev in found if (run_id, ev[6] or "") not in bad]
            writers = tuple(dict.fromkeys(ev[5] or "?" for ev in found)) if found else ()
            step_calls = calls.get(key) if calls else None
        if first_of and i in first_of:
            # a resumed step: tasks the previous run finished before it stopped wrote here too
            prev_run = first_of[i]
            carry = (prev_run, ns, step)
            done = [ev[5] or "?" for ev in tasks[carry] if (prev_run, ev[6] or "") not in bad]
            writers = tuple(dict.fromkeys([*done, *writers]))
            step_calls = calls.get(carry, []) + (step_calls or [])
        if not writers and src == "loop" and parent_id is not None:
            if row_by_id is None:
                row_by_id = {r[0]: r for r in rows}
            p = row_by_id.get(parent_id)
            if p is not None and keys[p[4]][1] == "input":
                writers = ("__start__",)
        nxt = child_writers.get((ns, cid) if nested else cid)
        if nxt is None and tasks and step is not None and run_id is not None:
            pending = tasks.get((run_id, ns, step + 1))  # the tasks it was stopped with
            if pending:
                nxt = tuple(dict.fromkeys(ev[5] or "?" for ev in pending))
        if parent_id is not None:
            child_writers[(ns, parent_id) if nested else parent_id] = writers
        append(new(HistoryEntry, (cid, parent_id, thread_id, ns, step, src, created, run_id, writers,
                                  tuple(step_calls) if step_calls else (), nxt, None,
                                  copies.get(cid) if copies and run_id is None else None)))
    out.reverse()
    if nested and any(e.ns for e in out):
        by_key: dict[tuple[Any, ...], str] = {}
        for e in out:
            by_key.setdefault((e.run_id, e.ns, e.step), e.checkpoint_id)
        for i, e in enumerate(out):
            if e.ns:
                step = task_step.get((e.run_id, e.ns))  # type: ignore[arg-type]
                if step is not None:
                    out[i] = e._replace(within=by_key.get((e.run_id, _parent_ns(e.ns), step)))
    return out


def _config_start(tape: Tape, run: RunRecord) -> str | None:
    """The checkpoint a run was invoked from (``checkpoint_id`` in its recorded config), if any."""
    try:
        started = tape.store.events(run.run_id, ["run_started"])
        if not started:
            return None
        cfg = started[0].data.get("config")
        if isinstance(cfg, str):
            cfg = tape.store.get_json(cfg)
        value = ((cfg or {}).get("configurable") or {}).get("checkpoint_id")
        return str(value) if value else None
    except GraphtapeError:
        return None


def _build_tree(tape: Tape, reader: _Reader, thread_id: str, thread_runs: list[RunRecord],
                rows: list[tuple[Any, ...]], keys: _Keys, copies: dict[str, str], nested: bool,
                labels: dict[str, tuple[int, float, dict[str, Any]]], runs_info: dict[str, BranchRun],
                labels_read_for: Sequence[str]) -> list[Branch]:
    # rows are _Row-shaped tuples, oldest first
    root_rows = [r for r in rows if not r[5]] if nested else rows
    first_root: dict[str, tuple[Any, ...]] = {}
    last_root: dict[str, tuple[Any, ...]] = {}
    # a thread's runs follow one another (one writer per thread): their rows are runs of equal ids
    for key, group in itertools.groupby(root_rows, operator.itemgetter(4)):
        rid = keys[key][0]
        if rid is not None:
            first = next(group)
            first_root.setdefault(rid, first)
            last_root[rid] = (collections.deque(group, maxlen=1) or [first])[-1]
    index: dict[str, tuple[Any, ...]] | None = None

    def row_of(cid: str | None) -> tuple[Any, ...] | None:
        """The root row with this id; indexed on first use (a thread of one run never asks)."""
        nonlocal index
        if cid is None:
            return None
        if index is None:
            index = {r[0]: r for r in root_rows}
        return index.get(cid)

    # the replays of these runs, of their replays, ...: runs (and their threads) elsewhere
    replays = reader.replay_runs()
    by_replayed: dict[str, list[RunRecord]] = {}
    for r in replays:
        by_replayed.setdefault(r.replay_of or "", []).append(r)
    tree_runs = {r.run_id for r in thread_runs}
    replay_thread_runs: dict[str, list[RunRecord]] = {}  # in the order they were found
    frontier = list(tree_runs)
    while frontier:
        nxt = []
        for rid in frontier:
            for rep in by_replayed.get(rid, []):
                if rep.thread_id != thread_id and rep.thread_id not in replay_thread_runs:
                    t_runs = tape.store.list_runs(thread_id=rep.thread_id, limit=None, newest_first=False)
                    replay_thread_runs[rep.thread_id] = t_runs
                    for other in t_runs:
                        if other.run_id not in tree_runs:
                            tree_runs.add(other.run_id)
                            nxt.append(other.run_id)
        frontier = nxt

    read = set(labels_read_for)
    missing = [rid for rid in tree_runs if rid not in read]
    if missing:
        for run_id, seq, _k, ts, *_rest, data in reader.events(sorted(missing), [LABEL_KIND]):
            prev = labels.get(run_id)
            if prev is None or seq > prev[0]:
                labels[run_id] = (seq, ts, data)

    branch_of: dict[str, Branch] = {}  # run id -> its branch
    tips: dict[str, str | None] = {}  # branch id -> the checkpoint where it stopped
    at_tip: dict[str, list[Branch]] = {}  # checkpoint id -> the branches that stopped there
    roots: list[Branch] = []

    def new_branch(r: RunRecord, kind: str, parent: Branch | None, **kw: Any) -> Branch:
        b = Branch(id=r.run_id, kind=kind, thread_id=r.thread_id, **kw)
        (parent.children if parent is not None else roots).append(b)
        return b

    def set_tip(b: Branch, tip: str | None) -> None:
        old = tips.get(b.id)
        if old is not None and b in at_tip.get(old, []):
            at_tip[old].remove(b)
        tips[b.id] = tip
        if tip is not None:
            at_tip.setdefault(tip, []).append(b)

    for r in thread_runs:
        runs_info[r.run_id] = info = _branch_run(r, labels)
        first = first_root.get(r.run_id)
        start = first[1] if first is not None else _config_start(tape, r) if r.parent_run_id else None
        # checkpoints written outside runs (update_state, copies) between the start and a run's checkpoint
        via: list[str] = []
        s = start
        while (row := row_of(s)) is not None and keys[row[4]][0] is None:
            via.append(s)  # type: ignore[arg-type]
            s = row[1]
        via.reverse()
        anchor_row = row_of(s)
        anchor = s if anchor_row is not None else None
        owner = keys[anchor_row[4]][0] if anchor_row is not None else None
        owner_branch = branch_of.get(owner) if owner is not None else None
        time_travel = first is not None and keys[first[4]][1] == "fork"
        stopped_here = at_tip.get(start, []) if start is not None else []
        previous = branch_of.get(r.parent_run_id or "")
        if stopped_here and not time_travel:
            # it picks up where a branch stopped (a resume, the next turn)
            b = previous if previous in stopped_here else stopped_here[0]
        elif owner_branch is not None:
            b = new_branch(r, "fork", owner_branch, from_run=owner, from_checkpoint=anchor, via=via)
        elif start is None and previous is not None:
            b = previous
        else:
            copied = next((copies[v] for v in via if v in copies), None)
            b = new_branch(r, "main" if not roots else "fork", previous or (roots[-1] if roots else None),
                           from_checkpoint=copied, via=via)
        b.runs.append(info)
        branch_of[r.run_id] = b
        last = last_root.get(r.run_id)
        if last is not None:
            set_tip(b, last[0])
        elif b.id not in tips:
            set_tip(b, start)

    # replay threads, parents before children
    for t, t_runs in replay_thread_runs.items():
        if not t_runs:
            continue
        head = t_runs[0]
        replayed = head.replay_of
        parent = branch_of.get(replayed or "")
        meta = head.meta or {}
        from_cp = meta.get("fork_of")
        if from_cp is None:
            from_cp = next(iter(reader.copies(t).values()), None)
        kind = "fork" if meta.get("fork_of") or meta.get("edit") else "replay"
        b = Branch(id=head.run_id, kind=kind, thread_id=t, from_run=replayed, from_checkpoint=from_cp)
        (parent.children if parent is not None else roots).append(b)
        for r in t_runs:
            runs_info[r.run_id] = info = _branch_run(r, labels)
            b.runs.append(info)
            branch_of[r.run_id] = b
    if not roots and not thread_runs:
        roots.append(Branch(id=thread_id, kind="main", thread_id=thread_id))
    return roots
