"""The history of a run or a thread: its checkpoints, who wrote them, the calls of each step, its branches.

A listing never deserialises a checkpoint. It reads:

* the checkpoint rows of graphtape's saver (``gt_checkpoint_rows``): id, parent,
  namespace, step, source, run, time and **writers** are plain columns. The
  saver knows a step's writers when it writes the step's checkpoint (the
  recording session saw the tasks start, and which were interrupted or
  failed), so it stores them there; for runs recorded beside another saver,
  the tape's ``checkpoint`` events stand in for the rows;
* the tape's call events (which LLM, tool and effect calls a step made) and
  label events;
* ``task_started`` events only where the rows do not say enough: rows
  without stored writers (recorded beside another saver, or before schema
  v5), subgraph levels (``namespaces=True``), the run a resumed run
  continues (a step the next run completed counts the tasks the previous
  run finished in it), runs that stopped (the tasks pending on their last
  checkpoint). The tasks tagged ``langgraph_step == n`` in namespace ``ns``
  wrote checkpoint ``n`` of ``ns``.

On the SQLite store a root listing is one scan of ``gt_checkpoint_rows`` (a
WITHOUT ROWID table of the listed columns only, schema v12+) plus an index scan of the wanted event kinds;
other stores go through the public :class:`TapeStore` interface. Measured
by ``benchmarks/history.py`` against LangGraph's ``get_state_history``.

The branch tree around a history (runs, forks, replays, labels) is built by
:mod:`graphtape.debug.branches`; what is read from a store, by
:mod:`graphtape.debug.listing`; finding one checkpoint and its state, by
:mod:`graphtape.debug.locate`. What remains (a little over 500 lines) is one
pass over rows and events read once, whose local indexes would otherwise
travel between modules.
"""

from __future__ import annotations

import dataclasses
import gc
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from graphtape import clock, events
from graphtape.debug.branches import LABEL_KIND, LABEL_SEQ_BASE, Branch, BranchRun, build_tree
from graphtape.debug.listing import Ev, Keys, Reader, iso, reader_for, row_key
from graphtape.debug.locate import CheckpointRef, checkpoint_state, is_internal_channel, locate_checkpoint
from graphtape.errors import RunNotFound
from graphtape.store.base import EventRow, RunRecord, WriteBatch
from graphtape.store.listing import call_levels, listed_call

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

_TASK_KINDS = (events.TaskStarted.KIND, events.TaskInterrupted.KIND, events.TaskFailed.KIND)
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


# ---------------------------------------------------------------------------
# resolving ids
# ---------------------------------------------------------------------------


def _resolve_target(tape: Tape, reader: Reader, target: str) -> tuple[str, RunRecord | None, str]:
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
    from graphtape.runtime.archive import where_archived

    archived = where_archived(store, target)
    if archived is not None:
        raise RunNotFound(archived)
    raise RunNotFound(f"no run or thread {target!r} in {tape.url}; list runs (and their threads) with `graphtape runs`")


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
    label_event = events.Label(label=text or None, note=note or None)
    ev = EventRow(run.run_id, seq, LABEL_KIND, clock.now(), label_event.to_data())
    tape.store.write(WriteBatch(events=[ev]))
    return ev


# ---------------------------------------------------------------------------
# building a history
# ---------------------------------------------------------------------------


def _parent_ns(task_ns: str) -> str:
    return task_ns.rpartition("|")[0] if "|" in task_ns else ""


def _call_dict(listed: list[Any]) -> dict[str, Any]:
    """A call in ``CheckpointRow.calls`` form (see ``listed_call``) as an entry shows it."""
    kind, name, source, call_id, node_path, error = listed
    info = {"kind": kind, "name": name, "source": source, "call_id": call_id, "node_path": node_path}
    if error:
        info["error"] = True
    return info


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
    reader = reader_for(store)
    kind, run, thread_id = _resolve_target(tape, reader, target)
    thread_runs = store.list_runs(thread_id=thread_id, limit=None, newest_first=False)
    by_run = {r.run_id: r for r in thread_runs}

    rows: list[tuple[Any, ...]] = reader.rows(thread_id, namespaces)
    source = "saver"
    if not rows and thread_runs:
        source = "events"
    copies = reader.copies(thread_id) if rows else {}
    keys = Keys()

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
    raw_calls: list[tuple[str, events.CallEvent, dict[str, Any]]] = []
    labels: dict[str, tuple[int, float, events.Label]] = {}
    cp_events: dict[str, tuple[Any, ...]] = {}

    def take(read: Iterator[Ev]) -> None:
        for ev in read:
            run_id, seq, ev_kind, ts, step, _node_path, task, data = ev
            if ev_kind == events.TaskStarted.KIND:
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
            elif ev_kind in events.CALL_EVENT_KINDS:
                call = events.from_data(ev_kind, data)
                if isinstance(call, events.CallEvent):  # always, for a call kind
                    raw_calls.append((run_id, call, data))
            elif ev_kind == LABEL_KIND:
                prev = labels.get(run_id)
                if prev is None or seq > prev[0]:
                    labels[run_id] = (seq, ts, events.Label.from_data(data))
            elif ev_kind == events.Checkpoint.KIND:
                cp = events.Checkpoint.from_data(data)
                ns = cp.ns or ""
                if (ns and not namespaces) or cp.checkpoint_id is None:  # (no id: a damaged event)
                    continue
                cp_events.setdefault(
                    cp.checkpoint_id,
                    (
                        cp.checkpoint_id,
                        cp.parent_id,
                        cp.step,
                        iso(ts),
                        row_key(run_id, cp.source, None),
                        None,
                        *((ns,) if namespaces else ()),
                    ),
                )
            else:  # task_interrupted / task_failed (the listing reads the task namespace for us)
                bad.add((run_id, task or ""))

    # Labels are always read (an index scan of that kind). Call and task events are read
    # only where the rows do not say enough: rows without stored writers and calls
    # (written beside another saver, or before graphtape stored them), the run a resumed
    # run continues (what it did in the step the next run completed); task events also
    # for subgraph levels, runs that stopped (the tasks pending on their last
    # checkpoint) and the steps of nested calls.
    take(reader.events(event_runs, [LABEL_KIND] + ([events.Checkpoint.KIND] if source == "events" else [])))
    if source == "events":
        rows = sorted(cp_events.values(), key=lambda r: r[0])
    listed = set(event_runs)
    continued = {
        r.parent_run_id for rid in event_runs if (r := by_run.get(rid)) is not None and r.parent_run_id in listed
    }
    if source == "events":
        call_runs = set(event_runs)
    else:
        call_runs = {keys[r[4]][0] for r in rows if r[5] is None} & listed | continued
    if call_runs:
        take(reader.events([r for r in event_runs if r in call_runs], events.CALL_EVENT_KINDS))
    if source == "events" or namespaces:
        task_runs = set(event_runs)
    else:
        unknown = (keys[k] for k in {r[4] for r in rows})
        task_runs = {run_id for run_id, _, writers in unknown if writers is None and run_id in listed}
        task_runs |= continued
        for rid in event_runs:
            r = by_run.get(rid)
            if r is None:
                continue
            if r.status != "finished":  # it stopped with tasks pending on its last checkpoint
                task_runs.add(rid)
        task_runs.update(rid for rid, call, _ in raw_calls if "|" in (call.task or ""))
    if task_runs:
        take(reader.events([r for r in event_runs if r in task_runs], _TASK_KINDS))

    # the step of every task, by its namespace (calls in subgraphs, subgraph entries)
    task_step: dict[tuple[str, str], int] = {}
    if namespaces or any("|" in (call.task or "") for _, call, _ in raw_calls):
        task_step = {(ev[0], ev[6] or ""): ev[4] for ev in started}

    # calls: attributed to the step of every enclosing level shown
    calls: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for run_id, call, d in raw_calls:
        info = _call_dict(listed_call(call.CALL_KIND, d))

        def step_of(task: str, run_id: str = run_id) -> int | None:
            return task_step.get((run_id, task))

        levels = call_levels(call.task or "", call.step, step_of, depth=None if namespaces else 1)
        for ns, step in levels:
            calls.setdefault((run_id, ns, step), []).append(info)

    entries = _entries(
        rows,
        keys,
        thread_id,
        by_run,
        tasks,
        bad,
        calls,
        task_step,
        copies,
        only_run=run.run_id if kind == "run" and run is not None else None,
        nested=namespaces,
    )

    # branches
    runs_info: dict[str, BranchRun] = {}
    branches = build_tree(
        tape, reader, thread_id, thread_runs, rows, keys, copies, namespaces, labels, runs_info, event_runs
    )
    return History(
        target=target,
        kind=kind,
        thread_id=thread_id,
        run_id=run.run_id if run is not None else None,
        namespaces=namespaces,
        entries=entries,
        branches=branches,
        runs=runs_info,
        source=source,
    )


def _parse_calls(listed: str) -> list[dict[str, Any]]:
    """A row's stored calls (``CheckpointRow.calls``) as the entries show them."""
    return [_call_dict(c) for c in json.loads(listed)]


def _entries(
    rows: list[tuple[Any, ...]],
    keys: Keys,
    thread_id: str,
    by_run: dict[str, RunRecord],
    tasks: dict[tuple[str, str, int], list[tuple[Any, ...]]],
    bad: set[tuple[str, str]],
    calls: dict[tuple[str, str, int], list[dict[str, Any]]],
    task_step: dict[tuple[str, str], int],
    copies: dict[str, str],
    *,
    only_run: str | None,
    nested: bool,
) -> list[HistoryEntry]:
    """One entry per row (oldest first), ``next`` and ``within`` filled.

    Built newest first: a checkpoint's children are seen before it, the
    oldest child (the one its run went on with) last, so ``next`` is known
    when the entry is made and every entry is made once. Rows of graphtape's
    saver carry their writers and calls; others take them from the task and
    call events. Equal writer lists are one tuple, shared.
    """
    # the first row of each run (and namespace) may finish a step its previous run began
    first_of: dict[int, str] = {}
    if tasks:
        seen: set[tuple[Any, Any]] = set()
        for i, r in enumerate(rows):
            at = (keys[r[4]][0], r[6] if nested else "")
            if at[0] is not None and at not in seen:
                seen.add(at)
                prev_run = by_run[at[0]].parent_run_id if at[0] in by_run else None
                if prev_run is not None and (prev_run, at[1], r[2]) in tasks:
                    first_of[i] = prev_run
        if first_of:
            cp_keys = {(keys[r[4]][0], r[6] if nested else "", r[2]) for r in rows}
            first_of = {
                i: p for i, p in first_of.items() if (p, rows[i][6] if nested else "", rows[i][2]) not in cp_keys
            }

    row_by_id: dict[str, tuple[Any, ...]] | None = None
    child_writers: dict[Any, tuple[str, ...]] = {}  # parent (id, or (ns, id) when nested) -> oldest child's writers
    new = tuple.__new__
    ns = ""
    out: list[HistoryEntry] = []
    append = out.append
    for i in range(len(rows) - 1, -1, -1):
        if nested:
            cid, parent_id, step, created, key, listed_calls, ns = rows[i]
        else:
            cid, parent_id, step, created, key, listed_calls = rows[i]
        run_id, src, writers = keys[key]
        if only_run is not None and run_id != only_run:
            continue
        if writers is None:  # not stored: from the task events
            key = (run_id, ns, step)
            found = tasks.get(key)
            if found is not None and bad:
                found = [ev for ev in found if (run_id, ev[6] or "") not in bad]
            writers = tuple(dict.fromkeys(ev[5] or "?" for ev in found)) if found else ()
        if listed_calls is not None:
            step_calls = _parse_calls(listed_calls) if listed_calls else None
        else:  # not stored: from the call events
            step_calls = calls.get((run_id, ns, step)) if calls else None
        if first_of and i in first_of:
            # a resumed step: tasks the previous run finished before it stopped wrote here too
            prev_run = first_of[i]
            carry = (prev_run, ns, step)
            done = [ev[5] or "?" for ev in tasks[carry] if (prev_run, ev[6] or "") not in bad]
            writers = tuple(dict.fromkeys([*done, *writers]))
            step_calls = [*calls.get(carry, ()), *(step_calls or ())]
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
        append(
            new(
                HistoryEntry,
                (
                    cid,
                    parent_id,
                    thread_id,
                    ns,
                    step,
                    src,
                    created,
                    run_id,
                    writers,
                    tuple(step_calls) if step_calls else (),
                    nxt,
                    None,
                    copies.get(cid) if copies and run_id is None else None,
                ),
            )
        )
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
