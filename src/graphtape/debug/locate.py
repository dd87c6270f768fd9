"""Finding a checkpoint on a tape from (a prefix of) its id, and the user state at it.

Split from :mod:`graphtape.debug.history` (which lists a run's or thread's
checkpoints): the CLI's ``state``/``diff`` commands and ``Tape.state_at``
need only this part, and the listing needs none of it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from graphtape import events
from graphtape.debug.listing import Match, reader_for
from graphtape.errors import GraphtapeError, RunNotFound

if TYPE_CHECKING:
    from graphtape.tape import Tape

_MIN_PREFIX = 8

#: Channels LangGraph keeps for itself: not part of the state a user wrote.
_INTERNAL_PREFIXES = ("branch:", "join:", "__pregel_", "start:")
_INTERNAL_CHANNELS = frozenset(
    {
        "__start__",
        "__interrupt__",
        "__resume__",
        "__error__",
        "__error_source_node__",
        "__return__",
        "__no_writes__",
        "__snapshot_bumps__",
        "__input__",
    }
)


def is_internal_channel(name: str) -> bool:
    """Whether a checkpoint channel is LangGraph bookkeeping (``branch:to:x``, ``__start__``, ...)."""
    return name in _INTERNAL_CHANNELS or name.startswith(_INTERNAL_PREFIXES)


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
        return {
            "configurable": {"thread_id": self.thread_id, "checkpoint_ns": self.ns, "checkpoint_id": self.checkpoint_id}
        }

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
    reader = reader_for(tape.store)
    found: list[Match] = list(reader.saver_matches(cid, thread_id))
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


def _event_matches(tape: Tape, prefix: str, thread_id: str | None) -> list[Match]:
    """Checkpoint events matching ``prefix``: ``(thread, ns, id, run, step, source)``."""
    runs = tape.store.list_runs(thread_id=thread_id, limit=None)  # newest first
    out = []
    for run in runs:
        for row in tape.store.events(run.run_id, [events.Checkpoint.KIND]):
            ev = events.Checkpoint.from_row(row)
            cp = str(ev.checkpoint_id or "")
            if cp.startswith(prefix):
                out.append((run.thread_id, ev.ns or "", cp, run.run_id, ev.step, ev.source))
                if cp == prefix:
                    return out
    return out


def checkpoint_state(
    tape: Tape, checkpoint_id: str, *, thread_id: str | None = None, graph: Any = None
) -> dict[str, Any]:
    """The channel values at a checkpoint, LangGraph's internal channels left out.

    Checkpoints in graphtape's saver are read from the store; those in
    another saver need ``graph`` (compiled with that checkpointer, or the
    recorded graph).
    """
    ref = locate_checkpoint(tape, checkpoint_id, thread_id=thread_id)
    return values_at(tape, ref, graph)


def values_at(tape: Tape, ref: CheckpointRef, graph: Any = None) -> dict[str, Any]:
    if ref.in_saver:
        from graphtape.runtime.saver import saver_for

        saver: Any = saver_for(tape.store)
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
