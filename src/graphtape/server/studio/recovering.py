"""Resuming a queued run whose worker died: graphtape's crash recovery, streamed into the same run.

A worker claims a run a second time (``attempt`` > 1) only when the process
that held it stopped renewing its lease. What that process left on the tape
says what to do:

* no graphtape run with the run's id: it died before the graph started; the
  run executes as if new;
* a graphtape run still ``running`` (or stopped from outside and never
  continued): it crashed mid-way. Once the thread's lease has expired (the
  dead process held it), the crashed run is marked ``crashed`` and
  ``recovered_by`` a new graphtape run (mode ``recover``) which resumes from
  the thread's last checkpoint with :class:`~graphtape.runtime.recovery.RecoveryAnswerer`:
  every LLM, tool and effect call the crashed run completed is served from
  the tape, and an effect in doubt is never run twice. A recovery that
  crashes in turn is found through ``recovered_by`` and recovered the same way;
* a graphtape run that ended (the process died between the graph's end and
  the queue's): nothing runs again; the run ends with the thread's state.

This is :func:`graphtape.runtime.recovery.recover` for one run, streamed:
``recover`` invokes the graph, where a queued run must stream its parts to
its publisher.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from graphtape import events
from graphtape.record.answer import ReplayPlan
from graphtape.recorder import thread_saver
from graphtape.replay.lineage import recovered_line
from graphtape.replay.matcher import Matcher
from graphtape.runtime.recovery import RecoveryAnswerer, crashed_update, recovery_chain, stopped_by_user
from graphtape.store.base import WriteBatch

if TYPE_CHECKING:
    from graphtape.server.studio.assistants import AssistantEntry
    from graphtape.server.studio.runs import Runs
    from graphtape.store.runqueue import QueuedRun

__all__ = ["Resumption", "resumption"]


@dataclasses.dataclass
class Resumption:
    """How a run claimed again goes on: ``finished`` (nothing to run), or the recorded graph and
    input that resume it as the graphtape run ``graphtape_run_id``; ``from_checkpoint``: from the
    thread's last checkpoint (else from where the run asked to start, its input given again)."""

    graphtape_run_id: str
    finished: bool
    recorded: Any = None
    input: Any = None
    from_checkpoint: bool = True


async def resumption(runs: Runs, row: QueuedRun, assistant: AssistantEntry) -> Resumption | None:
    """What to do with ``row`` (None: execute it as a new run); see the module docstring."""
    if row.attempt <= 1:
        return None
    store = runs.tape.store
    if store.get_run(row.run_id) is None:
        return None
    await runs._thread_free(row.thread_id, None)  # the dead process's claim on the thread expires
    first = store.get_run(row.run_id)
    latest = recovered_line(store, first)[-1] if first is not None else None
    if latest is None:
        return None
    if latest.status not in ("running", "crashed") and not stopped_by_user(latest):
        return Resumption(latest.run_id, finished=True)
    chain = recovery_chain(runs.tape, latest)
    new_id = str(uuid.uuid4())
    update: dict[str, Any] = {"meta": {**(latest.meta or {}), "recovered_by": new_id}}
    if latest.status == "running":
        update.update(crashed_update(store, latest))
    # marked before the recovery starts: if it dies too, the next attempt finds it through the chain
    store.write(WriteBatch(run_updates=[(latest.run_id, update)]))
    # (the served graph's threads persist: its own checkpointer, else graphtape's saver, as when it ran)
    recorded = runs.tape.record(
        assistant.graph,
        name=row.graph_id,
        lease_ttl=runs.lease_seconds,
        checkpointer=thread_saver(runs.tape, assistant.graph),
    )
    matcher = Matcher.from_store(store, list(reversed(chain)))
    recorded.plan = ReplayPlan(RecoveryAnswerer(matcher, chain), "recover", meta={"recovers": latest.run_id})
    wrote_checkpoint = any(bool(store.events(rid, [events.Checkpoint.KIND])) for rid in chain)
    run_input: Any = None
    if not wrote_checkpoint:  # it died while starting: give it its input again
        run_input = row.kwargs.get("input")
        if row.kwargs.get("command") is not None:
            run_input = Command(**row.kwargs["command"])
    return Resumption(new_id, False, recorded, run_input, wrote_checkpoint)
