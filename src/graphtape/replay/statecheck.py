"""Strict replay compares the state, not only the calls.

A node that reads the clock or a random number directly (``datetime.now()``,
``random.random()``, ``uuid4()``) makes no call the tape could serve: every
call of the replay matches, yet the state differs. Strict replay promises
"the same states step by step", so each task the replay finishes is compared
with the tape as it finishes, and the first difference stops the replay
with a :class:`~graphtape.errors.Divergence` that names the node, the step,
the channels written differently and shows the diff.

What is compared: a task's *writes* (the value its node returned: the state
update, a ``Command``, a functional-API task's result), with the recorded
writes of a task of the same node path at the same step. They are compared
through the structural view of :mod:`graphtape.debug.diff`: message ids,
tool-call ids, usage and response metadata are left out, because LangGraph
and the providers regenerate them on every execution. Several tasks of one
node in one step (``Send`` fan-out, parallel functional-API tasks) finish in
any order, so they are matched as a multiset: a replayed task matches any
recorded one of its node and step that is equal and not yet matched.

Only a plain strict replay compares: a fork with an edited state, an
override, ``invalidate_from`` and flight runs change the state on purpose.
A tape recorded before task writes were kept (no ``writes`` on its
``task_finished`` events) is not compared.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from graphtape import events, serde
from graphtape.errors import Divergence

if TYPE_CHECKING:
    from graphtape.record.session import Session
    from graphtape.store.base import EventRow
    from graphtape.tape import Tape

#: the events a state check is built from
TASK_KINDS = (events.TaskStarted.KIND, events.TaskFinished.KIND)
_STARTED, _FINISHED = TASK_KINDS

HINT = (
    "a node that reads the clock, random numbers, uuids or the outside world directly writes a different "
    "state on every run: wrap that source in a function marked @graphtape.effect (or make it a tool) so "
    "that the replay serves the recorded value"
)

#: the hint for a task that resumed an interrupt: its answer comes first, not the clock
RESUMED_HINT = (
    "this task resumed an interrupt: the replay answers it with the value recorded for the interrupt "
    "the same node raised at the same step, so check that the node raises the same interrupts as when "
    "recorded and uses its answer the same way; " + HINT
)


@dataclasses.dataclass
class _RecordedTask:
    run_id: str
    writes_ref: str | None
    used: bool = False
    _value: Any = None
    _loaded: bool = False


class StateCheck:
    """The recorded writes of a chain of runs, consumed as the replay finishes tasks."""

    def __init__(self, tape: Tape, tasks: dict[tuple[str, Any], list[_RecordedTask]]):
        self.tape = tape
        self.tasks = tasks
        #: (node path, step) of the tasks the run being replayed resumes from an interrupt (set by the
        #: engine before each run): a difference there gets :data:`RESUMED_HINT`
        self.resumed: frozenset[tuple[str, Any]] = frozenset()
        self._lock = threading.Lock()

    @classmethod
    def from_store(cls, tape: Tape, run_ids: list[str]) -> StateCheck | None:
        """The check for these runs, or ``None`` when the tape kept no task writes to compare with."""
        return cls.from_events(tape, {rid: tape.store.events(rid, list(TASK_KINDS)) for rid in run_ids})

    @classmethod
    def from_events(cls, tape: Tape, rows_by_run: dict[str, list[EventRow]]) -> StateCheck | None:
        """:meth:`from_store` from each run's event rows already read, in order (other kinds are skipped)."""
        tasks: dict[tuple[str, Any], list[_RecordedTask]] = defaultdict(list)
        for rid, rows in rows_by_run.items():
            started: dict[str, tuple[str, Any]] = {}  # task namespace -> (node path, step)
            # (read from the stored bodies' keys, the events' field names: building each frozen event
            # first cost more than the rest of this, for every task of every run a replay checks)
            for row in rows:
                kind = row.kind
                if kind != _STARTED and kind != _FINISHED:
                    continue
                get = row.data.get
                ns = get("task") or ""
                if kind == _STARTED:
                    started[ns] = (get("node_path") or "", get("step"))
                elif ns in started:
                    tasks[started[ns]].append(_RecordedTask(rid, get("writes")))
        if not any(t.writes_ref for group in tasks.values() for t in group):
            return None
        return cls(tape, dict(tasks))

    def same_address(self, group: list[_RecordedTask], ref: str | None) -> _RecordedTask | None:
        """The recorded task whose writes are stored at ``ref``: the same view, so equal without a diff."""
        if ref is None:
            return None
        return next((t for t in group if t.writes_ref == ref), None)

    def check(self, session: Session, info: dict[str, Any], outputs: Any) -> None:
        """Raise a :class:`Divergence` (and note it on the session) if ``outputs`` differs from the tape.

        A task whose writes are stored at the recorded task's address is equal without a diff: the
        usual case, which never imports the diff (``graphtape.debug``, ~40-90 ms to import: a
        process's first strict replay paid it for nothing).
        """
        if session.divergence is not None:
            # a task that finished after the replay diverged (code caught the divergence): the
            # first report stands, as for every later call
            raise session.divergence
        node_path, step = info.get("node_path") or "", info.get("step")
        with self._lock:
            group = [t for t in self.tasks.get((node_path, step), ()) if not t.used]
            same = self.same_address(group, info.get("writes_ref"))
            if same is not None:
                same.used = True
                return
            from graphtape.debug.diff import diff_states

            first_diff = None
            replayed = _shape(outputs)
            for rec in group:
                if rec.writes_ref is None:  # nothing kept to compare with: accept it
                    rec.used = True
                    return
                try:
                    diff = diff_states(self._recorded(rec), replayed, a_label="recorded", b_label="replay")
                except Exception:  # a recorded value this version cannot read back: nothing to hold it to
                    rec.used = True
                    return
                if diff.equal:
                    rec.used = True
                    return
                first_diff = first_diff or diff
        resumed = any(
            (path == node_path and at == step) or path.startswith(f"{node_path}/") for path, at in self.resumed
        )
        raise _divergence(session, node_path, step, first_diff, RESUMED_HINT if resumed else HINT)

    def _recorded(self, rec: _RecordedTask) -> Any:
        if not rec._loaded:
            ref = rec.writes_ref
            rec._value = _revive(self.tape, self.tape.store.get_json(ref)) if ref is not None else None
            rec._loaded = True
        return rec._value


def _shape(obj: Any) -> Any:
    """``obj`` structured the way the tape's views are (see ``Session.view``), messages kept as messages."""
    from langchain_core.messages import BaseMessage

    if isinstance(obj, BaseMessage):
        return obj
    if isinstance(obj, dict):
        return {str(k): _shape(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_shape(v) for v in obj]
    if hasattr(obj, "model_dump") and not isinstance(obj, type) and hasattr(type(obj), "model_fields"):
        return {k: _shape(getattr(obj, k)) for k in type(obj).model_fields}
    return serde.to_jsonable(obj)


def _revive(tape: Tape, view: Any) -> Any:
    """A stored view with its message references turned back into messages."""
    if isinstance(view, dict):
        if isinstance(view.get("$m"), str):
            msg = serde.message_from_json(tape.store.get_json(view["$m"]))
            return msg.model_copy(update={"id": view["id"]}) if isinstance(view.get("id"), str) else msg
        if isinstance(view.get("$chain"), str):
            hashes = tape.store.get_chain(view["$chain"])
            blobs = tape.store.get_blobs(hashes)
            return [serde.message_from_json(json.loads(blobs[h])) for h in hashes]
        return {k: _revive(tape, v) for k, v in view.items()}
    if isinstance(view, list):
        return [_revive(tape, v) for v in view]
    return view


def _divergence(session: Session, node_path: str, step: Any, diff: Any, hint: str = HINT) -> Divergence:
    replayed = session.replay_of or "?"
    where = f"node {node_path or '?'}" + (f" step {step}" if step is not None else "")
    if diff is None:
        reason = "the recorded run has no finished task of this node at this step"
        channels: list[str] = []
        text = "(no recorded task to compare with)"
    else:
        channels = sorted({str(c.segments[0]) if c.segments else "(return value)" for c in diff.changes})
        reason = f"it wrote a different state ({', '.join(channels)}) than the recorded run"
        text = diff.render(width=200)
    message = f"replay of run {replayed} diverged at {where}: {reason}; {hint}"
    event = events.Divergence(
        message=message,
        run_id=replayed,
        replay_run_id=session.run_id,
        kind="state",
        name=node_path.rpartition("/")[2] or "?",
        node=node_path.rpartition("/")[2],
        node_path=node_path,
        step=step,
        ordinal=None,
        reason=reason,
        channels=channels,
        recorded_call_id=None,
        recorded_step=step,
        diff=f"--- recorded\n+++ replay\n{text}",
        hint=hint,
    )
    div = Divergence(message, event.to_data())
    session.divergence = div
    session.emit(event)
    return div
