"""Node task events from LangGraph's callbacks.

LangGraph opens a callback run for every task with the tag
``graph:step:<n>`` (``prepare_single_task`` in ``pregel/_algo.py``); nested
runnables inside the node do not carry that tag, so it tells a node task
from everything else without parsing run trees. The task's checkpoint
namespace (with its task id) comes from the run metadata.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from graphtape import events
from graphtape.record.errors_codec import error_info
from graphtape.record.session import Session, is_control_flow
from graphtape.record.writer import Lazy

STEP_TAG = "graph:step:"

#: graphtape's errors that stop a run on purpose from a task callback
_STOPS = ("Divergence(", "DebugStopped(")


class _NoStopWarnings(logging.Filter):
    """Drops langchain's "Error in TaskRecorder... callback" warning for a deliberate stop.

    langchain-core logs every exception a callback handler raises, even one
    whose ``raise_error`` says it must propagate. A strict replay stopping at
    a state divergence (or the debugger's quit) is reported as itself; the
    same text again as an internal callback error would read like a bug.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) == 3 and args[0] == "TaskRecorder" and str(args[2]).startswith(_STOPS))


logging.getLogger("langchain_core.callbacks.manager").addFilter(_NoStopWarnings())


def _stored_view(put_json: Callable[[Any], str], view: Callable[[Any], Any], outputs: Any) -> str:
    """The address of a task's writes as stored (a TaskFinished event's ``writes``, resolved at flush)."""
    return put_json(view(outputs))


class TaskRecorder(BaseCallbackHandler):
    """Turns LangGraph task callbacks into ``task_started``/``task_finished`` events."""

    run_inline = True

    @property
    def raise_error(self) -> bool:  # type: ignore[override]
        # A recording must never break the user's graph, so handler errors are
        # swallowed; under the debugger, stopping is done by raising here, and a
        # strict replay stops here at the first task whose writes differ.
        return self.session.answerer.watches_tasks

    # Only chain events are wanted. Without these, every chat model call was dispatched to this
    # handler too, and langchain, finding no ``on_chat_model_start``, turned the whole request into
    # a string for ``on_llm_start``: work that grew with the conversation, on every call. Class
    # attributes, not the base class's properties: langchain reads the one for the event on every
    # dispatch (twice a task), and an attribute is found without a call.
    ignore_llm = True
    ignore_chat_model = True
    ignore_retriever = True
    ignore_agent = True
    ignore_retry = True
    ignore_custom_event = True
    ignore_chain = False

    def __init__(self, session: Session):
        self.session = session
        answerer = session.answerer
        # a task's duration leaves out the time it sat paused at a breakpoint (debug/debugger.py)
        self._clock = (
            time.perf_counter if not answerer.pauses else lambda: time.perf_counter() - answerer.paused_seconds()
        )
        # Looked up once per run, not per task: every super-step of every run passes through here.
        self._watching = answerer.watches_tasks
        # The rows are buffered straight from their JSON form (the dicts events.TaskStarted and
        # events.TaskFinished build, key for key and in the same order: tests/test_stepcost4_tap.py
        # compares them): two of the three events of every super-step, and the typed event's
        # construction and to_data cost as much as the rest of the callback.
        self._row = session.writer.event_row
        self._put_json = session.put_json
        self._view = session.view
        self._branches = session.task_branches
        # Which tasks wrote a step (and the task's step, for the calls made inside it) is stored by
        # graphtape's own saver on the step's checkpoint row (runtime/saver.py); beside another
        # saver nothing reads it, so it is not kept.
        self._keeps_steps = session.durable
        self._writers = session.step_writers
        self._steps = session.task_steps
        #: run id -> (start, task namespace, (checkpoint namespace, step) or None)
        self._open: dict[UUID, tuple[float, str, tuple[str, int] | None]] = {}
        self._info: dict[UUID, dict[str, Any]] = {}

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # Called for every chain run of the graph (each node's runnables too): return at once for
        # anything that is not a node task.
        if not tags:
            return
        for tag in tags:
            if tag.startswith(STEP_TAG):
                break
        else:
            return
        md = metadata or {}
        ns: str = md.get("langgraph_checkpoint_ns") or ""
        step = md.get("langgraph_step")
        if "|" in ns:  # a task of a subgraph: parent|...|node:id
            parent, _, own = ns.rpartition("|")
            path = "/".join(seg.split(":", 1)[0] for seg in ns.split("|") if seg)
        else:  # a task of the root graph: node:id
            parent, own = "", ns
            path = ns.partition(":")[0]
        node_path: str | None = path or md.get("langgraph_node") or kwargs.get("name")
        if ns:
            # the raw path; normalised only if a call inside a nested task needs it
            self._branches[own.partition(":")[2]] = md.get("langgraph_path")
        key: tuple[str, int] | None = None
        if self._keeps_steps and isinstance(step, int):
            key = (parent, step)
            writers = self._writers.get(key)
            if writers is None:
                writers = self._writers[key] = {}
            writers[ns] = node_path or "?"
            if ns:
                self._steps[ns] = step
        self._open[run_id] = (self._clock(), ns, key)
        self._row("task_started", {"node_path": node_path, "step": step, "task": ns})
        if self._watching:
            info = {"node_path": node_path, "step": step, "task": ns}
            self._info[run_id] = info
            self.session.answerer.task_started(info)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        opened = self._open.pop(run_id, None)
        if opened is None:
            return
        started, ns, _ = opened
        writes: Any
        if self._watching:
            session = self.session
            full = self._info.pop(run_id, None) or {"task": ns}
            session.answerer.task_ending(full, outputs)
            # the check compares by this address first: computed once, for the check and the event
            writes = full["writes_ref"] = session.put_json(session.view(outputs))
        else:
            # serialised at flush time, usually on the background tape writer's thread
            writes = Lazy(partial(_stored_view, self._put_json, self._view, outputs))
        self._row("task_finished", {"task": ns, "duration": round(self._clock() - started, 6), "writes": writes})
        if self._watching:
            session.answerer.task_ended(session, full, outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        opened = self._open.pop(run_id, None)
        if opened is None:
            return
        started, ns, key = opened
        self._info.pop(run_id, None)
        if key is not None:
            # not a writer of the step's checkpoint (unless a retry starts it again)
            self._writers.get(key, {}).pop(ns, None)
        duration = round(self._clock() - started, 6)
        if is_control_flow(error):
            self.session.emit(events.TaskInterrupted(task=ns, duration=duration))
        else:
            self.session.emit(events.TaskFailed(task=ns, duration=duration, error=error_info(error)))
