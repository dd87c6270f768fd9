"""Where each replayed run starts: the replay's copy of the checkpoint the recorded run started from.

A recorded run does not always continue its thread's latest state. LangGraph's
time travel starts one from a past checkpoint (``invoke(None, snapshot.config)``,
a ``Command(resume=...)`` addressed by ``checkpoint_id``), and a fork from the
checkpoint ``update_state`` returned; ``update_state`` on the latest checkpoint
changes where the next run starts too. A replay re-plays the runs of a thread
in a thread of its own, whose checkpoints have ids of their own, so it must:

* repeat the recorded ``update_state`` calls made before a run (its
  ``state_update`` events, :mod:`graphtape.record.updates`) on its thread, in
  order, each on the replay's copy of the checkpoint it was given;
* start the run from the replay's copy of the checkpoint the recorded run was
  invoked with (the ``checkpoint_id`` of its recorded config).

:class:`StartPoints` maps recorded checkpoint ids to the replay's as it goes:
a replayed run's root checkpoints are the recorded run's, one for one and in
order (same step, same source: that is what replaying the run means), and an
update's is the one the repeated call returned. The checkpoint events are read
only when a later run needs them, so a replay without time travel reads
nothing more. A start the replay did not re-play (``from_checkpoint`` skipped
the run that wrote it) is copied from the recording's thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from graphtape import events, serde
from graphtape.errors import ReplayError
from graphtape.replay.steps import UPDATE_APIS, Step
from graphtape.store.base import EventRow

if TYPE_CHECKING:
    from graphtape.tape import Tape


class StartPoints:
    """Recorded checkpoint ids -> the replay's, filled as the replay's runs and updates are made.

    ``copy(source_thread, checkpoint_id)`` puts a recorded checkpoint into the replay's thread under
    its own id (for a start the replay did not re-play). ``recorded``: the ids of the runs the replay
    re-plays, in order; ``replayed``: the ids of the runs it made for them so far (the engine's list,
    appended to as it goes).
    """

    def __init__(self, tape: Tape, copy: Callable[[str, str], None], recorded: list[str], replayed: list[str]) -> None:
        self.tape = tape
        self.copy = copy
        self.ids: dict[str, str] = {}
        self._recorded = recorded
        self._replayed = replayed
        #: how many of the replayed runs' checkpoints are mapped (read when a start needs them)
        self._read = 0

    def resolve(self, checkpoint_id: str, source_thread: str) -> str:
        """The replay's checkpoint for the recorded ``checkpoint_id`` of ``source_thread``."""
        found = self.ids.get(checkpoint_id)
        while found is None and self._read < min(len(self._recorded), len(self._replayed)):
            self._map(self._recorded[self._read], self._replayed[self._read])
            self._read += 1
            found = self.ids.get(checkpoint_id)
        if found is None:
            self.copy(source_thread, checkpoint_id)
            found = self.ids[checkpoint_id] = checkpoint_id
        return found

    def _map(self, recorded_run_id: str, replay_run_id: str) -> None:
        if not replay_run_id:
            return
        recorded = _root_checkpoints(self.tape, recorded_run_id)
        replayed = _root_checkpoints(self.tape, replay_run_id)
        for rec, new in zip(recorded, replayed):
            if (rec.step, rec.source) != (new.step, new.source):
                break  # (the replay went elsewhere from here: a divergence reports it)
            if rec.checkpoint_id and new.checkpoint_id:
                self.ids[rec.checkpoint_id] = new.checkpoint_id

    def start_config(self, rec_config: dict[str, Any], source_thread: str, config: dict[str, Any]) -> None:
        """Point ``config`` (the replayed run's) at the replay's copy of the recorded run's start, if it had one."""
        recorded = rec_config.get("configurable") or {}
        checkpoint_id = recorded.get("checkpoint_id")
        if not isinstance(checkpoint_id, str) or checkpoint_id == serde.REDACTED:
            return
        if recorded.get("checkpoint_ns"):
            raise ReplayError(
                f"the run started from checkpoint {checkpoint_id} of subgraph namespace "
                f"{recorded['checkpoint_ns']!r}, which a replay cannot start from; replay from a root checkpoint "
                "(from_checkpoint=...)"
            )
        config["configurable"]["checkpoint_ns"] = ""
        config["configurable"]["checkpoint_id"] = self.resolve(checkpoint_id, source_thread)

    def update_steps(
        self, rows: list[EventRow], recorder: Any, new_thread: str, source_thread: str
    ) -> Iterator[tuple[Step, str | None]]:
        """The recorded ``update_state`` calls among a run's events, as steps to execute on the replay's
        thread, each with the checkpoint id the recorded call returned: give it to :meth:`updated` with
        what the step returned before taking the next step (a call may update the checkpoint the one
        before it returned)."""
        calls: dict[int, list[events.StateUpdate]] = {}
        for row in rows:
            if row.kind == events.StateUpdate.KIND:
                update = events.StateUpdate.from_row(row)
                calls.setdefault(update.call or 0, []).append(update)
        for number in sorted(calls):
            updates = calls[number]
            first = updates[0]
            if first.api not in UPDATE_APIS:
                raise ReplayError(f"a state_update event names an unknown method {first.api!r}: the tape is newer")
            if first.ns:
                raise ReplayError(
                    f"the run followed an update_state of subgraph namespace {first.ns!r}, which a replay cannot "
                    "repeat; replay from a checkpoint after it (from_checkpoint=...)"
                )
            configurable: dict[str, Any] = {"thread_id": new_thread}
            if first.checkpoint_id:
                configurable["checkpoint_ns"] = ""
                configurable["checkpoint_id"] = self.resolve(first.checkpoint_id, source_thread)
            supersteps: list[list[tuple[Any, Any, Any]]] = []
            for update in updates:
                while len(supersteps) <= (update.superstep or 0):
                    supersteps.append([])
                if update.values is None:
                    raise ReplayError(
                        f"a state_update event of run {rows[0].run_id} has no values: the tape is incomplete"
                    )
                values = serde.decode_value(
                    self.tape.store.get_json(update.values), self.tape.store.get_json, recorder.types
                )
                supersteps[update.superstep or 0].append((values, update.as_node, update.task_id))
            yield (
                Step(recorder, first.api or "update_state", supersteps, {"configurable": configurable}, {}),
                first.result,
            )

    def updated(self, recorded_result: str | None, returned: Any) -> None:
        """A repeated update returned ``returned`` (LangGraph's config) for the recorded ``recorded_result``."""
        new = ((returned or {}).get("configurable") or {}).get("checkpoint_id") if isinstance(returned, dict) else None
        if recorded_result and isinstance(new, str):
            self.ids[recorded_result] = new


def _root_checkpoints(tape: Tape, run_id: str) -> list[events.Checkpoint]:
    """The root graph's checkpoints of a run, in the order it saved them."""
    out = []
    for row in tape.store.events(run_id, [events.Checkpoint.KIND]):
        ev = events.Checkpoint.from_row(row)
        if not ev.ns:
            out.append(ev)
    return out
