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
        #: recorded subgraph namespaces -> the replay's (``node:<task id>`` differs between executions)
        self.namespaces: dict[str, str] = {}
        self._recorded = recorded
        self._replayed = replayed
        #: how many of the replayed runs' checkpoints are mapped (read when a start needs them)
        self._read = 0

    def resolve(self, checkpoint_id: str, source_thread: str, ns: str = "") -> str:
        """The replay's checkpoint for the recorded ``checkpoint_id`` (of namespace ``ns``) of ``source_thread``."""
        found = self._mapped(checkpoint_id)
        if found is None and not ns:
            self.copy(source_thread, checkpoint_id)
            found = self.ids[checkpoint_id] = checkpoint_id
        if found is None:
            raise ReplayError(
                f"checkpoint {checkpoint_id} of subgraph namespace {ns!r} was not re-played by this replay, and a "
                "subgraph's checkpoint is not copied; replay the run from its thread's first run (no from_checkpoint)"
            )
        return found

    def _mapped(self, checkpoint_id: str) -> str | None:
        found = self.ids.get(checkpoint_id)
        while found is None and self._read < min(len(self._recorded), len(self._replayed)):
            self._map(self._recorded[self._read], self._replayed[self._read])
            self._read += 1
            found = self.ids.get(checkpoint_id)
        return found

    def _map(self, recorded_run_id: str, replay_run_id: str) -> None:
        """Map a recorded run's checkpoints (and subgraph namespaces) to its replay's: one for one and in
        order within each namespace (the namespaces compared without their task ids, which differ)."""
        if not replay_run_id:
            return
        recorded = _checkpoints_by_ns(self.tape, recorded_run_id)
        replayed = _checkpoints_by_ns(self.tape, replay_run_id)
        for key, recs in recorded.items():
            for rec, new in zip(recs, replayed.get(key, ())):
                if (rec.step, rec.source) != (new.step, new.source):
                    break  # (the replay went elsewhere from here: a divergence reports it)
                if rec.checkpoint_id and new.checkpoint_id:
                    self.ids[rec.checkpoint_id] = new.checkpoint_id
                if rec.ns and new.ns:
                    self.namespaces.setdefault(rec.ns, new.ns)

    def target(self, configurable: dict[str, Any], source_thread: str) -> dict[str, Any]:
        """The configurable keys that point at the replay's copy of the checkpoint a recorded config
        names (``checkpoint_id``, ``checkpoint_ns``, ``checkpoint_map``); none when it names none."""
        checkpoint_id = configurable.get("checkpoint_id")
        if not isinstance(checkpoint_id, str) or checkpoint_id == serde.REDACTED:
            return {}
        ns = str(configurable.get("checkpoint_ns") or "")
        out: dict[str, Any] = {"checkpoint_id": self.resolve(checkpoint_id, source_thread, ns)}
        out["checkpoint_ns"] = self._namespace(ns)
        recorded_map = configurable.get("checkpoint_map")
        if isinstance(recorded_map, dict):
            out["checkpoint_map"] = {
                self._namespace(k): self.resolve(v, source_thread, k) if isinstance(v, str) else v
                for k, v in recorded_map.items()
            }
        return out

    def _namespace(self, ns: str) -> str:
        """The replay's name of a recorded namespace (a task id in it differs; a stable one does not)."""
        if not ns:
            return ns
        if ns not in self.namespaces and ":" in ns:
            raise ReplayError(
                f"subgraph namespace {ns!r} was not re-played by this replay; replay the run from its "
                "thread's first run (no from_checkpoint)"
            )
        return self.namespaces.get(ns, ns)

    def start_config(self, rec_config: dict[str, Any], source_thread: str, config: dict[str, Any]) -> None:
        """Point ``config`` (the replayed run's) at the replay's copy of the recorded run's start, if it had one."""
        config["configurable"].update(self.target(rec_config.get("configurable") or {}, source_thread))

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
            configurable: dict[str, Any] = {"thread_id": new_thread}
            if first.checkpoint_id or first.ns:
                recorded: dict[str, Any] = {"checkpoint_id": first.checkpoint_id, "checkpoint_ns": first.ns or ""}
                if first.checkpoint_map is not None:
                    recorded["checkpoint_map"] = first.checkpoint_map
                if first.checkpoint_id:
                    configurable.update(self.target(recorded, source_thread))
                else:
                    configurable["checkpoint_ns"] = self._namespace(first.ns or "")
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


def _checkpoints_by_ns(tape: Tape, run_id: str) -> dict[str, list[events.Checkpoint]]:
    """A run's checkpoints by namespace without task ids (``sub:<id>|inner:<id>`` -> ``sub|inner``),
    each namespace's in the order the run saved them."""
    out: dict[str, list[events.Checkpoint]] = {}
    for row in tape.store.events(run_id, [events.Checkpoint.KIND]):
        ev = events.Checkpoint.from_row(row)
        key = "|".join(part.split(":", 1)[0] for part in (ev.ns or "").split("|"))
        out.setdefault(key, []).append(ev)
    return out
