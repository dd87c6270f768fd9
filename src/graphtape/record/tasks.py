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
    # a string for ``on_llm_start``: work that grew with the conversation, on every call.
    @property
    def ignore_llm(self) -> bool:
        return True

    @property
    def ignore_chat_model(self) -> bool:
        return True

    @property
    def ignore_retriever(self) -> bool:
        return True

    @property
    def ignore_agent(self) -> bool:
        return True

    @property
    def ignore_retry(self) -> bool:
        return True

    @property
    def ignore_custom_event(self) -> bool:
        return True

    def __init__(self, session: Session):
        self.session = session
        answerer = session.answerer
        # a task's duration leaves out the time it sat paused at a breakpoint (debug/debugger.py)
        self._clock = (
            time.perf_counter if not answerer.pauses else lambda: time.perf_counter() - answerer.paused_seconds()
        )
        self._open: dict[UUID, tuple[float, dict[str, Any], tuple[str, int] | None]] = {}
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
        if not tags or not any(t.startswith(STEP_TAG) for t in tags):
            return
        md = metadata or {}
        ns = md.get("langgraph_checkpoint_ns") or ""
        segments = [seg.split(":", 1)[0] for seg in ns.split("|") if seg]
        info: dict[str, Any] = {
            "node_path": "/".join(segments) or md.get("langgraph_node") or kwargs.get("name"),
            "step": md.get("langgraph_step"),
            "task": ns,
        }
        if ns:
            # the raw path; normalised only if a call inside a nested task needs it
            self.session.task_branches[ns.rpartition("|")[2].partition(":")[2]] = md.get("langgraph_path")
        step = info["step"]
        key = (ns.rpartition("|")[0], step) if isinstance(step, int) else None
        if key is not None:
            self.session.step_writers.setdefault(key, {})[ns] = info["node_path"] or "?"
            if ns:
                self.session.task_steps[ns] = step
        self._open[run_id] = (self._clock(), {"task": ns}, key)
        self.session.emit(events.TaskStarted(node_path=info["node_path"], step=info["step"], task=ns))
        if self.session.answerer.watches_tasks:
            self._info[run_id] = info
            self.session.answerer.task_started(info)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        opened = self._open.pop(run_id, None)
        if opened is None:
            return
        started, info, _ = opened
        session = self.session
        full = self._info.pop(run_id, info)
        watching = session.answerer.watches_tasks
        writes: Any
        if watching:
            session.answerer.task_ending(full, outputs)
            # the check compares by this address first: computed once, for the check and the event
            writes = full["writes_ref"] = session.put_json(session.view(outputs))
        else:
            # serialised at flush time, usually on LangGraph's checkpoint thread
            writes = Lazy(lambda: session.put_json(session.view(outputs)))
        session.emit(events.TaskFinished(task=info["task"], duration=round(self._clock() - started, 6), writes=writes))
        if watching:
            session.answerer.task_ended(session, full, outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        opened = self._open.pop(run_id, None)
        if opened is None:
            return
        started, info, key = opened
        self._info.pop(run_id, None)
        if key is not None:
            # not a writer of the step's checkpoint (unless a retry starts it again)
            self.session.step_writers.get(key, {}).pop(info["task"], None)
        duration = round(self._clock() - started, 6)
        if is_control_flow(error):
            self.session.emit(events.TaskInterrupted(task=info["task"], duration=duration))
        else:
            self.session.emit(events.TaskFailed(task=info["task"], duration=duration, error=error_info(error)))
