"""Node task events: ``task_started``, ``task_finished``, ``task_failed``, ``task_interrupted``.

A :class:`TaskRecorder` per recorded run turns each attempt of a node task
into its events and keeps the step bookkeeping. It is driven from LangGraph's
task runner (``record/task_runner.py`` wraps ``run_with_retry``), not from a
LangChain callback handler: any handler on a run makes LangChain dispatch every
runnable inside every node through its callback manager (about 0.5-0.7 ms CPU
per benchmark-4 agent run for a handler that does nothing).

Only where the runner cannot see a task's output, a task run with streaming
(``astream_events``, ``astream_log``: the runner drains the node's stream and
keeps only its writes), :class:`TaskCallbacks` records it from LangChain's
callbacks, added to that one task's run and not inherited by what runs inside.

Which tasks are recorded is the same either way: the runs LangGraph opens
with the tag ``graph:step:<n>`` (``prepare_single_task`` in
``pregel/_algo.py``). Nested runnables inside the node do not carry that tag.
The task's checkpoint namespace (with its task id) comes from its metadata.
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

#: graphtape's errors that stop a run on purpose from a task hook
_STOPS = ("Divergence(", "DebugStopped(")

logger = logging.getLogger(__name__)

#: an attempt being recorded: (start, task namespace, (checkpoint namespace, step) or None, answerer's info or None)
Opened = tuple[float, str, "tuple[str, int] | None", "dict[str, Any] | None"]


class _NoStopWarnings(logging.Filter):
    """Drops langchain's "Error in TaskCallbacks... callback" warning for a deliberate stop.

    langchain-core logs every exception a callback handler raises, even one
    whose ``raise_error`` says it must propagate. A strict replay stopping at
    a state divergence (or the debugger's quit) is reported as itself; the
    same text again as an internal callback error would read like a bug.
    Only tasks recorded through :class:`TaskCallbacks` (streamed ones) get
    there; the runner's path logs nothing.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) == 3 and args[0] == "TaskCallbacks" and str(args[2]).startswith(_STOPS))


logging.getLogger("langchain_core.callbacks.manager").addFilter(_NoStopWarnings())


def _stored_view(put_json: Callable[[Any], str], view: Callable[[Any], Any], outputs: Any) -> str:
    """The address of a task's writes as stored (a TaskFinished event's ``writes``, resolved at flush)."""
    return put_json(view(outputs))


def step_tagged(tags: Any) -> bool:
    """Whether ``tags`` (a run's) mark a node task: ``graph:step:<n>``."""
    if tags:
        for tag in tags:
            if tag.startswith(STEP_TAG):
                return True
    return False


class TaskRecorder:
    """Writes one run's task events; :meth:`opened`, then :meth:`finished` or :meth:`failed`, per attempt.

    A recording must never break the user's graph: unless the run's answerer
    watches tasks, an error of the recording itself is logged and the task
    goes on. Under the debugger, stopping is done by raising from the
    answerer's hooks, and a strict replay stops at the first task whose
    writes differ: those propagate (``watching``).
    """

    def __init__(self, session: Session):
        self.session = session
        answerer = session.answerer
        # a task's duration leaves out the time it sat paused at a breakpoint (debug/debugger.py)
        self._clock = (
            time.perf_counter if not answerer.pauses else lambda: time.perf_counter() - answerer.paused_seconds()
        )
        # Looked up once per run, not per task: every super-step of every run passes through here.
        self.watching = answerer.watches_tasks
        # The rows are buffered straight from their JSON form (the dicts events.TaskStarted and
        # events.TaskFinished build, key for key and in the same order: tests/test_stepcost4_tap.py
        # compares them): two of the three events of every super-step, and the typed event's
        # construction and to_data cost as much as the rest of the hook.
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

    def opened(self, metadata: dict[str, Any] | None, name: str | None) -> Opened:
        """A task attempt starts (``metadata``: its run's, ``name``: its run name)."""
        md = metadata or {}
        ns: str = md.get("langgraph_checkpoint_ns") or ""
        step = md.get("langgraph_step")
        if "|" in ns:  # a task of a subgraph: parent|...|node:id
            parent, _, own = ns.rpartition("|")
            path = "/".join(seg.split(":", 1)[0] for seg in ns.split("|") if seg)
            task_id = own.partition(":")[2]
        else:  # a task of the root graph: node:id (split once for both parts)
            parent = ""
            path, _, task_id = ns.partition(":")
        node_path: str | None = path or md.get("langgraph_node") or name
        if ns:
            # the raw path; normalised only if a call inside a nested task needs it
            self._branches[task_id] = md.get("langgraph_path")
        key: tuple[str, int] | None = None
        if self._keeps_steps and isinstance(step, int):
            key = (parent, step)
            writers = self._writers.get(key)
            if writers is None:
                writers = self._writers[key] = {}
            writers[ns] = node_path or "?"
            if ns:
                self._steps[ns] = step
        started = self._clock()
        self._row("task_started", {"node_path": node_path, "step": step, "task": ns})
        info: dict[str, Any] | None = None
        if self.watching:
            info = {"node_path": node_path, "step": step, "task": ns}
            self.session.answerer.task_started(info)
        return (started, ns, key, info)

    def finished(self, opened: Opened, outputs: Any) -> None:
        """The attempt returned ``outputs`` (the node's return value)."""
        started, ns, _, info = opened
        writes: Any
        if info is not None:
            session = self.session
            session.answerer.task_ending(info, outputs)
            # the check compares by this address first: computed once, for the check and the event
            writes = info["writes_ref"] = session.put_json(session.view(outputs))
        else:
            # serialised at flush time, usually on the background tape writer's thread
            writes = Lazy(partial(_stored_view, self._put_json, self._view, outputs))
        self._row("task_finished", {"task": ns, "duration": round(self._clock() - started, 6), "writes": writes})
        if info is not None:
            session.answerer.task_ended(session, info, outputs)

    def failed(self, opened: Opened, error: BaseException) -> None:
        """The attempt raised ``error`` (an interrupt or ``Command`` passing through is not a failure)."""
        started, ns, key, _ = opened
        if key is not None:
            # not a writer of the step's checkpoint (unless a retry starts it again)
            self._writers.get(key, {}).pop(ns, None)
        duration = round(self._clock() - started, 6)
        if is_control_flow(error):
            self.session.emit(events.TaskInterrupted(task=ns, duration=duration))
        else:
            self.session.emit(events.TaskFailed(task=ns, duration=duration, error=error_info(error)))

    def recording_failed(self, hook: str) -> None:
        """An error of the recording itself (not the task's), when it must not stop the run."""
        logger.warning("graphtape could not record a task (%s); the run goes on", hook, exc_info=True)


class TaskCallbacks(BaseCallbackHandler):
    """:class:`TaskRecorder` driven by LangChain callbacks, for the tasks the runner cannot see the output of."""

    run_inline = True

    # Only chain events are wanted (the handler is on the task's own run only, not inherited).
    ignore_llm = True
    ignore_chat_model = True
    ignore_retriever = True
    ignore_agent = True
    ignore_retry = True
    ignore_custom_event = True
    ignore_chain = False

    def __init__(self, recorder: TaskRecorder):
        self.recorder = recorder
        #: run id -> the attempt as opened
        self._open: dict[UUID, Opened] = {}

    @property
    def raise_error(self) -> bool:  # type: ignore[override]
        # swallowed (and logged by langchain) unless the answerer stops runs from the task hooks
        return self.recorder.watching

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
        if step_tagged(tags):
            self._open[run_id] = self.recorder.opened(metadata, kwargs.get("name"))

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        opened = self._open.pop(run_id, None)
        if opened is not None:
            self.recorder.finished(opened, outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        opened = self._open.pop(run_id, None)
        if opened is not None:
            self.recorder.failed(opened, error)
