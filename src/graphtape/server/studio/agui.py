"""The AG-UI publisher: a run's LangGraph stream as AG-UI 1.0 events, written into the run's log.

An AG-UI client (``@ag-ui/client``'s ``HttpAgent``, CopilotKit...) posts a
``RunAgentInput`` to ``/agui/{graph}`` (``routes_agui.py``) and reads events
in the protocol's own vocabulary. The run itself is an ordinary Studio run
(``runs.py``), recorded on the tape; only its publisher differs, chosen by the
run's stored ``protocol`` (``"agui"``). Every event is built with the
``ag_ui.core`` models and stored as the encoder would serialise it (camelCase,
optional fields left out), named by its type, so a viewer reconnecting with
``Last-Event-ID`` reads exactly the events a live viewer read.

What is asked of LangGraph and what each part becomes:

* ``tasks``: ``STEP_STARTED``/``STEP_FINISHED`` per node task (a subgraph's
  nodes named ``outer/inner``);
* ``messages``: ``TEXT_MESSAGE_START/CONTENT/END`` for model text as it
  streams, ``TOOL_CALL_START/ARGS/END`` for the tool calls the model makes
  (arguments that arrive in the chunk that names the tool are sent, not
  dropped), ``TOOL_CALL_RESULT`` for tool messages;
* ``values``: ``STATE_SNAPSHOT`` for the first, then a ``STATE_DELTA`` (JSON
  Patch, RFC 6902) per super-step; ``messages`` is left out of the state, it
  travels as messages;
* ``custom``: a ``CUSTOM`` event (``name``/``value`` when the part has both,
  else ``langgraph.custom``).

At the end: ``MESSAGES_SNAPSHOT``, then ``RUN_FINISHED`` whose outcome is
``interrupt`` (LangGraph's interrupt ids) when the run paused, ``cancelled``
when it was cancelled; a failure ends with ``RUN_ERROR``.

graphtape's own facts are ``CUSTOM`` events read from the run's tape events
(the store the run's recording session writes to), at each super-step and at
the end: ``graphtape.call`` per LLM, tool or effect call (served from the tape
or made live), ``graphtape.divergence``, and ``graphtape.savings`` when the
run is a replay or served calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any, cast

import jsonpatch
from ag_ui.core import PROTOCOL_VERSION as AGUI_PROTOCOL_VERSION
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    DeveloperMessage,
    FunctionCall,
    Interrupt,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SystemMessage,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.messages import ToolMessage as LcToolMessage

from graphtape import events
from graphtape.record.context import session_for_run
from graphtape.serde import redact
from graphtape.server.studio.publish import Emit, Publisher, register_publisher
from graphtape.server.studio.wire import to_wire

__all__ = [
    "AGUI_PROTOCOL",
    "AGUI_PROTOCOL_VERSION",
    "INTERRUPT_REASON",
    "AguiPublisher",
    "agui_messages",
    "state_of",
]

#: the run protocol name (``kwargs["protocol"]``) of AG-UI runs
AGUI_PROTOCOL = "agui"

#: ``Interrupt.reason`` of a LangGraph ``interrupt()``
INTERRUPT_REASON = "langgraph:interrupt"

#: the call-event fields a ``graphtape.call`` event carries (requests and responses stay on the tape)
_CALL_FIELDS = (
    "call_id", "node_path", "step", "ordinal", "source", "served_from", "model", "name",
    "tokens", "cost", "latency", "recorded_latency", "code_changed", "error",
)  # fmt: skip

#: tape event kinds read for graphtape's CUSTOM events
_TAPE_KINDS = [*events.CALL_EVENT_KINDS, "divergence"]


def _now_ms() -> int:
    return int(time.time() * 1000)


def state_of(values: Any) -> Any:
    """The AG-UI state of a graph's values: the values as JSON, without ``messages`` (sent as messages)
    and ``__interrupt__`` (LangGraph's, sent in ``RUN_FINISHED``'s outcome)."""
    state = to_wire(values)
    if isinstance(state, dict):
        state.pop("messages", None)
        state.pop("__interrupt__", None)
    return state if state is not None else {}


def _text(content: Any) -> str:
    """The text of a message's content (a string, or a list of blocks of which the text ones count)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "".join(parts)
    return "" if content is None else json.dumps(to_wire(content))


def _content(content: Any) -> str:
    """A tool result's content as AG-UI text (JSON for anything that is not text)."""
    if isinstance(content, str):
        return content
    return json.dumps(to_wire(content), ensure_ascii=False)


def agui_messages(messages: Any) -> list[Any]:
    """LangChain messages (objects, or their wire dicts) as AG-UI messages, in order.

    A message without an id gets one from its position; kinds AG-UI has no
    message for (``remove`` markers, chunks of unknown type) are left out.
    """
    out: list[Any] = []
    for index, raw in enumerate(messages or []):
        m = to_wire(raw) if isinstance(raw, BaseMessage) else raw
        if not isinstance(m, dict):
            continue
        kind = m.get("type") or m.get("role")
        mid = str(m.get("id") or f"message-{index}")
        if kind in ("human", "user"):
            content = m.get("content")
            out.append(UserMessage(id=mid, content=content if isinstance(content, str) else _text(content)))
        elif kind in ("ai", "assistant", "AIMessageChunk"):
            calls = [
                ToolCall(
                    id=str(c.get("id") or f"{mid}-call-{i}"),
                    function=FunctionCall(name=str(c.get("name", "")), arguments=json.dumps(c.get("args") or {})),
                )
                for i, c in enumerate(m.get("tool_calls") or [])
            ]
            out.append(AssistantMessage(id=mid, content=_text(m.get("content")) or None, tool_calls=calls or None))
        elif kind == "tool":
            out.append(
                ToolMessage(id=mid, content=_content(m.get("content")), tool_call_id=str(m.get("tool_call_id", "")))
            )
        elif kind == "system":
            out.append(SystemMessage(id=mid, content=_text(m.get("content"))))
        elif kind == "developer":
            out.append(DeveloperMessage(id=mid, content=_text(m.get("content"))))
    return out


def _task_of(metadata: Any) -> str:
    """The task a ``messages`` part came from (the last segment of its checkpoint namespace)."""
    ns = (metadata or {}).get("langgraph_checkpoint_ns") or (metadata or {}).get("checkpoint_ns") or ""
    return str(ns).split("|")[-1]


def _step_name(namespace: tuple[str, ...], name: str) -> str:
    """A node's name with the subgraph nodes it runs in: ``outer/inner`` (task ids dropped)."""
    return "/".join([*(part.split(":")[0] for part in namespace), name])


class AguiPublisher(Publisher):
    """Turns one run's LangGraph stream into AG-UI events (see the module's docstring for the mapping).

    Options come from the run's ``kwargs["agui"]`` (``protocol_options={"agui": {...}}``):
    ``run_id`` (the client's ``runId``; the Studio run id when absent), ``parent_run_id``.
    """

    def __init__(self, run_id: str, thread_id: str, kwargs: dict[str, Any], emit: Emit, redact_keys: frozenset[str]):
        super().__init__(run_id, thread_id, kwargs, emit, redact_keys)
        options = kwargs.get("agui") or {}
        self.agui_run_id = str(options.get("run_id") or run_id)
        self.parent_run_id = options.get("parent_run_id")
        self.state: Any = None
        self.snapshot_sent = False
        #: streamed text messages still open -> the task they stream in
        self.open_text: dict[str, str] = {}
        #: tool calls still open -> (the task they stream in, their message)
        self.open_calls: dict[str, tuple[str, str]] = {}
        #: (message id, chunk index) -> tool call id, for argument chunks that name no id
        self.call_index: dict[tuple[str, int], str] = {}
        #: message ids already sent (streamed or whole): never sent twice
        self.sent: set[str] = set()
        #: streamed messages that have ended: later chunks of them are ignored
        self.closed: set[str] = set()
        self.steps: dict[str, str] = {}
        #: interrupt id -> the response schema LangGraph attached to it
        self.schemas: dict[str, Any] = {}
        #: the recorded run whose tape events are read (another one when a worker recovered the run)
        self.graphtape_run_id = run_id
        self.session: Any = None
        self.tape_seq = -1

    def graph_modes(self) -> list[str]:
        return ["values", "messages", "tasks", "custom"]

    def subgraphs(self) -> bool:
        return True

    async def send(self, event: BaseEvent) -> None:
        """Emit ``event`` as the encoder serialises it, named by its type."""
        if event.timestamp is None:
            event.timestamp = _now_ms()
        await self.emit(event.type.value, event.model_dump(mode="json", by_alias=True))

    # -- the run's life ------------------------------------------------------------------

    async def started(self) -> None:
        await self.send(
            RunStartedEvent(
                thread_id=self.thread_id,
                run_id=self.agui_run_id,
                parent_run_id=self.parent_run_id,
                protocol_version=AGUI_PROTOCOL_VERSION,
                metadata={"graphtape": {"run_id": self.run_id}},
            )
        )

    async def part(self, namespace: tuple[str, ...], mode: str, chunk: Any) -> None:
        if self.session is None:
            self.session = session_for_run(self.graphtape_run_id)
        if mode == "tasks":
            await self._task(namespace, chunk)
        elif mode == "messages":
            message, metadata = chunk
            await self._message(message, _task_of(metadata))
        elif mode == "values" and not namespace:
            await self._state(chunk)
            await self._tape_facts()
        elif mode == "custom":
            if isinstance(chunk, dict) and isinstance(chunk.get("name"), str) and "value" in chunk:
                await self.send(CustomEvent(name=chunk["name"], value=to_wire(chunk["value"])))
            else:
                await self.send(CustomEvent(name="langgraph.custom", value=to_wire(chunk)))

    async def resumed(self, attempt: int, graphtape_run_id: str) -> None:
        """The run goes on in another worker after its first one died (the durable queue's hook):
        ``graphtape.resumed``, then the recovery run's calls (those already made are served)."""
        self.graphtape_run_id = graphtape_run_id
        self.session = None
        self.tape_seq = -1
        value = {"attempt": attempt, "graphtape_run_id": graphtape_run_id}
        await self.send(CustomEvent(name="graphtape.resumed", value=value))

    async def ended(self, values: Any, interrupts: list[dict[str, Any]], next_nodes: list[str] | None = None) -> None:
        await self._close_all()
        await self._state(values)
        # the run's calls not reported yet (its last rows may have been written with its end, after
        # the last chunk was streamed): before the final snapshot, whatever the write's timing
        await self._tape_facts()
        messages = values.get("messages") if isinstance(values, dict) else None
        await self.send(MessagesSnapshotEvent(messages=agui_messages(messages if isinstance(messages, list) else [])))
        await self._tape_facts(final=True)
        breakpoints = {
            "before": list(self.kwargs.get("interrupt_before") or []),
            "after": list(self.kwargs.get("interrupt_after") or []),
        }
        if next_nodes and not interrupts and (breakpoints["before"] or breakpoints["after"]):
            # paused at a breakpoint the client asked for: no interrupt to answer; a run with no new
            # input continues from here
            await self.send(CustomEvent(name="graphtape.breakpoint", value={"next": next_nodes, **breakpoints}))
        outcome: Any = RunFinishedSuccessOutcome()
        if interrupts:
            outcome = RunFinishedInterruptOutcome(interrupts=[self._interrupt(i) for i in interrupts])
        await self.send(RunFinishedEvent(thread_id=self.thread_id, run_id=self.agui_run_id, outcome=outcome))

    async def failed(self, error: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            await self._tape_facts(final=True)
        message = str(error.get("message") or error.get("error") or "the run failed")
        await self.send(RunErrorEvent(message=message, code=str(error.get("error") or "") or None))

    async def cancelled(self) -> None:
        await self._close_all()
        await self.send(
            RunFinishedEvent(thread_id=self.thread_id, run_id=self.agui_run_id, outcome=RunFinishedCancelledOutcome())
        )

    # -- steps ---------------------------------------------------------------------------

    async def _task(self, namespace: tuple[str, ...], chunk: Any) -> None:
        if not isinstance(chunk, dict) or "id" not in chunk:
            return
        task_id = str(chunk["id"])
        if "triggers" in chunk or "input" in chunk:  # a task starts
            name = _step_name(namespace, str(chunk.get("name", "")))
            self.steps[task_id] = name
            await self.send(StepStartedEvent(step_name=name))
            return
        for found in chunk.get("interrupts") or []:
            if isinstance(found, dict) and found.get("id") and isinstance(found.get("response_schema"), dict):
                self.schemas[str(found["id"])] = found["response_schema"]
        await self._close_task(task_id)
        if task_id in self.steps:
            await self.send(StepFinishedEvent(step_name=self.steps.pop(task_id)))

    # -- messages ------------------------------------------------------------------------

    async def _message(self, message: Any, task: str) -> None:
        mid = str(getattr(message, "id", None) or "")
        if isinstance(message, AIMessageChunk):
            await self._chunk(message, mid or f"{self.run_id}-{task}", task)
        elif isinstance(message, LcToolMessage):
            if mid in self.sent:
                return
            self.sent.add(mid)
            await self.send(
                ToolCallResultEvent(
                    message_id=mid or f"{message.tool_call_id}-result",
                    tool_call_id=str(message.tool_call_id),
                    content=_content(message.content),
                    role="tool",
                )
            )
        elif getattr(message, "type", None) == "ai":
            if mid and mid in self.sent:
                return
            await self._whole(message, mid or f"{self.run_id}-{task}-{len(self.sent)}")

    async def _chunk(self, chunk: AIMessageChunk, mid: str, task: str) -> None:
        """One streamed piece of a model's answer: its text, then its tool call pieces."""
        if mid in self.closed:
            return
        self.sent.add(mid)
        delta = _text(chunk.content)
        if delta:
            if mid not in self.open_text:
                self.open_text[mid] = task
                await self.send(TextMessageStartEvent(message_id=mid, role="assistant"))
            await self.send(TextMessageContentEvent(message_id=mid, delta=delta))
        for piece in chunk.tool_call_chunks:
            index = int(piece.get("index") or 0)
            call_id = piece.get("id")
            known = self.call_index.get((mid, index))
            if call_id and known != call_id:  # a new call: its name, and any arguments that came with it
                await self._end_text(mid)
                self.call_index[(mid, index)] = call_id
                self.open_calls[call_id] = (task, mid)
                await self.send(
                    ToolCallStartEvent(
                        tool_call_id=call_id, tool_call_name=str(piece.get("name") or ""), parent_message_id=mid
                    )
                )
                known = call_id
            if known and piece.get("args"):
                await self.send(ToolCallArgsEvent(tool_call_id=known, delta=str(piece["args"])))
        if getattr(chunk, "chunk_position", None) == "last":
            await self._end_message(mid)

    async def _whole(self, message: Any, mid: str) -> None:
        """A model answer that arrived whole (not streamed, or served from the tape)."""
        self.sent.add(mid)
        text = _text(message.content)
        if text:
            await self.send(TextMessageStartEvent(message_id=mid, role="assistant"))
            await self.send(TextMessageContentEvent(message_id=mid, delta=text))
            await self.send(TextMessageEndEvent(message_id=mid))
        for i, call in enumerate(getattr(message, "tool_calls", None) or []):
            call_id = str(call.get("id") or f"{mid}-call-{i}")
            await self.send(
                ToolCallStartEvent(
                    tool_call_id=call_id, tool_call_name=str(call.get("name", "")), parent_message_id=mid
                )
            )
            await self.send(ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(call.get("args") or {})))
            await self.send(ToolCallEndEvent(tool_call_id=call_id))

    async def _end_text(self, mid: str) -> None:
        if mid in self.open_text:
            del self.open_text[mid]
            await self.send(TextMessageEndEvent(message_id=mid))

    async def _end_message(self, mid: str) -> None:
        self.closed.add(mid)
        await self._end_text(mid)
        for key in [k for k in self.call_index if k[0] == mid]:
            del self.call_index[key]
        for call_id in [c for c, (_, m) in self.open_calls.items() if m == mid]:
            del self.open_calls[call_id]
            await self.send(ToolCallEndEvent(tool_call_id=call_id))

    async def _close_task(self, task_id: str) -> None:
        """End what a finished task left open (a model that streamed no last chunk)."""
        mids = {m for m, t in self.open_text.items() if t.endswith(task_id)}
        mids |= {m for t, m in self.open_calls.values() if t.endswith(task_id)}
        for mid in sorted(mids):
            await self._end_message(mid)

    async def _close_all(self) -> None:
        for mid in sorted({*self.open_text, *(m for _, m in self.open_calls.values())}):
            await self._end_message(mid)

    # -- state ---------------------------------------------------------------------------

    async def _state(self, values: Any) -> None:
        state = state_of(values)
        if not self.snapshot_sent:
            self.snapshot_sent = True
            self.state = state
            await self.send(StateSnapshotEvent(snapshot=state))
            return
        if state == self.state:
            return
        if isinstance(self.state, (dict, list)) and isinstance(state, (dict, list)):
            patch = jsonpatch.make_patch(self.state, state).patch
        else:
            patch = [{"op": "replace", "path": "", "value": state}]
        self.state = state
        if patch:
            await self.send(StateDeltaEvent(delta=cast(Any, patch)))

    # -- interrupts ----------------------------------------------------------------------

    def _interrupt(self, found: dict[str, Any]) -> Interrupt:
        value = found.get("value")
        iid = str(found.get("id") or "")
        message = value if isinstance(value, str) else None
        if isinstance(value, dict) and isinstance(value.get("message"), str):
            message = value["message"]
        return Interrupt(
            id=iid,
            reason=INTERRUPT_REASON,
            message=message,
            response_schema=self.schemas.get(iid),
            metadata={"value": to_wire(value)},
        )

    # -- graphtape's own facts -----------------------------------------------------------

    async def _tape_facts(self, final: bool = False) -> None:
        """``graphtape.call`` and ``graphtape.divergence`` for the run's tape events written since the
        last look; at the end, ``graphtape.savings`` when the run is a replay or was served calls."""
        session = self.session or session_for_run(self.graphtape_run_id)
        if session is None:
            return
        self.session = session
        rows = await asyncio.to_thread(session.store.events, self.graphtape_run_id, _TAPE_KINDS)
        for row in rows:
            if row.seq <= self.tape_seq:
                continue
            self.tape_seq = row.seq
            event = events.parse(row)
            if isinstance(event, events.CallEvent):
                data = event.to_data()
                value = {k: data[k] for k in _CALL_FIELDS if data.get(k) is not None}
                value.update(kind=event.CALL_KIND, served=event.served)
                await self.send(CustomEvent(name="graphtape.call", value=redact(value, self.redact_keys)))
            elif isinstance(event, events.Divergence):
                divergence = redact(to_wire(event.to_data()), self.redact_keys)
                await self.send(CustomEvent(name="graphtape.divergence", value=divergence))
        if not final:
            return
        stats = events.replay_stats(r for r in rows if r.kind in events.CALL_EVENT_KINDS)
        if session.mode not in ("record", "recover") or stats.served:
            totals = stats.to_dict()
            await self.send(
                CustomEvent(
                    name="graphtape.savings",
                    value={"mode": session.mode, "replay_of": session.replay_of, **totals},
                )
            )


register_publisher(AGUI_PROTOCOL, AguiPublisher)
