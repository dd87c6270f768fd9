"""``/agui/{graph}``: runs driven by AG-UI clients, streamed as AG-UI 1.0 events over SSE.

An AG-UI client posts a ``RunAgentInput``; the server turns it into an
ordinary Studio run on the thread ``threadId`` (created when new), recorded on
the tape, whose publisher is :class:`~graphtape.server.studio.agui.AguiPublisher`.
Its events are kept with the run, so the answer is one more viewer of them:
a viewer that disconnects does not stop the run, several may watch it, and a
client reconnecting with ``Last-Event-ID`` (to a re-POST of the same
``threadId`` + ``runId``, or to ``GET /agui/{graph}/runs/{run_id}/stream``)
gets every later event exactly once.

Run ids: the client's ``runId`` is kept as given and echoed in the AG-UI
events; the Studio run (and the recorded run on the tape) has its own UUID,
named in ``RUN_STARTED.metadata.graphtape.run_id`` and in the answer's
``Content-Location``. A POST with a ``runId`` the thread already has is the
same run: it is streamed again from ``Last-Event-ID``, never started twice.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, urlencode

from ag_ui.core import (
    AssistantMessage,
    DeveloperMessage,
    ResumeEntry,
    RunAgentInput,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from graphtape.server.studio.agui import AGUI_PROTOCOL, AGUI_PROTOCOL_VERSION, state_of
from graphtape.server.studio.assistants import AssistantEntry
from graphtape.server.studio.bounds import MAX_POSITION
from graphtape.server.studio.models import CommandBody, RunCreate
from graphtape.server.studio.problems import BadRequest, Conflict, NotFound
from graphtape.server.studio.routes_assistants import find_assistant
from graphtape.server.studio.runs import RunEntry
from graphtape.server.studio.threads import ThreadEntry
from graphtape.server.studio.wire import to_wire

__all__ = ["CANCELLED_MARK", "resume_value", "router", "to_langchain"]

router = APIRouter(tags=["ag-ui"])

#: the resume value an interrupt answered with ``status: "cancelled"`` gets (as ``ag-ui-langgraph`` sends it)
CANCELLED_MARK = "__agui_cancelled__"

#: an SSE response that proxies must not buffer
_SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def to_langchain(message: Any) -> dict[str, Any] | None:
    """An AG-UI message as the JSON LangGraph's ``add_messages`` coerces into a LangChain message
    (``None`` for kinds a graph's messages do not hold: activity and reasoning messages)."""
    if isinstance(message, UserMessage):
        content: Any = message.content
        if not isinstance(content, str):
            content = [
                {"type": "text", "text": part.text} if isinstance(part, TextPart) else part.model_dump(by_alias=True)
                for part in content
            ]
        return {"type": "human", "content": content, "id": message.id}
    if isinstance(message, AssistantMessage):
        calls = []
        for call in message.tool_calls or []:
            try:
                args = json.loads(call.function.arguments or "{}")
            except ValueError as exc:
                raise BadRequest(f"tool call {call.id!r} of message {message.id!r}: arguments are not JSON") from exc
            calls.append({"id": call.id, "name": call.function.name, "args": args, "type": "tool_call"})
        return {"type": "ai", "content": message.content or "", "id": message.id, "tool_calls": calls}
    if isinstance(message, ToolMessage):
        content = message.content if isinstance(message.content, str) else to_wire(message.content)
        return {"type": "tool", "content": content, "tool_call_id": message.tool_call_id, "id": message.id}
    if isinstance(message, (SystemMessage, DeveloperMessage)):
        return {"type": "system", "content": message.content, "id": message.id}
    return None


def resume_value(entries: list[ResumeEntry], pending: list[str]) -> dict[str, Any]:
    """``Command(resume=...)`` for AG-UI resume entries: a map by interrupt id (LangGraph's keyed
    resume, which also carries a ``null`` payload and leaves unanswered interrupts pending). A
    cancelled interrupt is answered ``{"__agui_cancelled__": true, "interrupt_id": id}``, the value
    ``ag-ui-langgraph`` gives it, so graphs written for that adapter read it the same way."""
    if not pending:
        raise Conflict("the thread has no pending interrupt to resume; start a run with messages instead")
    unknown = [e.interrupt_id for e in entries if e.interrupt_id not in pending]
    if unknown:
        raise BadRequest(f"no pending interrupt {unknown[0]!r} on this thread; pending: {', '.join(pending)}")
    return {
        e.interrupt_id: e.payload if e.status == "resolved" else {CANCELLED_MARK: True, "interrupt_id": e.interrupt_id}
        for e in entries
    }


def _legacy_resume(value: Any, pending: list[str]) -> dict[str, Any]:
    """``forwardedProps.command.resume``: keyed by the one pending interrupt unless already keyed."""
    if not pending:
        raise Conflict("the thread has no pending interrupt to resume; start a run with messages instead")
    if isinstance(value, dict) and value and all(k in pending for k in value):
        return value
    if len(pending) > 1:
        raise BadRequest(
            f"{len(pending)} interrupts are pending ({', '.join(pending)}); answer each by id with "
            "resume: [{interruptId, status, payload}]"
        )
    return {pending[0]: value}


def _legacy_command(body: RunAgentInput) -> dict[str, Any] | None:
    """The older resume form, ``forwardedProps.command`` with a ``resume`` key (its value may be null)."""
    forwarded = body.forwarded_props if isinstance(body.forwarded_props, dict) else {}
    command = forwarded.get("command")
    return command if isinstance(command, dict) and "resume" in command else None


def _breakpoints(body: RunAgentInput) -> tuple[list[str], list[str]]:
    """Breakpoints a client sets for this run: ``forwardedProps.graphtape.interruptBefore`` and
    ``interruptAfter``, lists of node names (LangGraph's ``interrupt_before``/``interrupt_after``)."""
    forwarded = body.forwarded_props if isinstance(body.forwarded_props, dict) else {}
    options = forwarded.get("graphtape") or {}
    if not isinstance(options, dict):
        raise BadRequest('forwardedProps.graphtape must be an object, e.g. {"interruptBefore": ["tools"]}')
    found: list[list[str]] = []
    for key in ("interruptBefore", "interruptAfter"):
        nodes = options.get(key) or []
        if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
            raise BadRequest(f"forwardedProps.graphtape.{key} must be a list of node names")
        found.append(nodes)
    return found[0], found[1]


def _last_event_id(request: Request) -> int:
    value = request.headers.get("last-event-id", "0").strip() or "0"
    if not value.isdigit() or len(value) > 16 or int(value) > MAX_POSITION:
        raise BadRequest(f"Last-Event-ID must be the id of an event of this run (a number), not {value!r}")
    return int(value)


async def _agui_sse(stream: AsyncIterator[str]) -> AsyncIterator[str]:
    """The run's SSE without ``event:`` lines: AG-UI events are ``id:`` + ``data: {json}`` (the
    type is in the JSON), which is also what ``EventSource.onmessage`` receives."""
    async for chunk in stream:
        if chunk.startswith(":"):
            yield chunk
            continue
        yield "".join(line for line in chunk.splitlines(keepends=True) if not line.startswith("event:"))


def _stream(request: Request, graph_id: str, run: RunEntry, after: int) -> StreamingResponse:
    base = f"/agui/{quote(graph_id, safe='')}/runs/{run.run_id}"
    location = f"{base}/stream?{urlencode({'threadId': run.thread_id})}"
    headers = {**_SSE_HEADERS, "Content-Location": base, "Location": location}
    stream = run.sse(request.app.state.studio.heartbeat_seconds, after=after)
    return StreamingResponse(_agui_sse(stream), media_type="text/event-stream", headers=headers)


def _agui_run_id(run: RunEntry) -> str:
    return str((run.kwargs.get("agui") or {}).get("run_id") or run.run_id)


def _runs_of(request: Request, thread_id: str) -> list[RunEntry]:
    """The thread's runs the server knows, newest first."""
    runs: list[RunEntry] = request.app.state.studio.runs.on_thread(thread_id, None, 10_000, 0)
    return runs


def _find_run(request: Request, run_id: str, thread_id: str | None) -> RunEntry:
    """A run by its Studio id or by the client's AG-UI ``runId`` (the latter needs its thread)."""
    if thread_id is not None:
        for run in _runs_of(request, thread_id):
            if run_id in (run.run_id, _agui_run_id(run)):
                return run
        raise NotFound(f"no run {run_id!r} on thread {thread_id!r}; give the runId the client posted")
    runs = request.app.state.studio.runs
    row = runs.queue.get(run_id)  # a Studio run id alone: the store's run queue knows it
    if row is None:
        raise NotFound(
            f"no run {run_id!r}; give the run id of Content-Location, or the client's runId with ?threadId=..."
        )
    return RunEntry(runs, row)


def _thread(request: Request, assistant: AssistantEntry, thread_id: str) -> ThreadEntry:
    studio = request.app.state.studio
    thread: ThreadEntry | None = studio.threads.find(thread_id)
    if thread is None:
        thread = studio.threads.create(thread_id, None, "do_nothing", assistant.graph_id)
    if thread.graph_id is not None and thread.graph_id != assistant.graph_id:
        raise Conflict(
            f"thread {thread_id!r} belongs to graph {thread.graph_id!r}, not {assistant.graph_id!r}; "
            f"post to /agui/{thread.graph_id} or use a new threadId"
        )
    return thread


def _parent_run_id(request: Request, body: RunAgentInput, thread_id: str) -> str | None:
    """``parentRunId``: the client's, else for a resume the run that paused (its AG-UI id when it had one)."""
    if body.parent_run_id:
        return body.parent_run_id
    if not body.resume and _legacy_command(body) is None:
        return None
    runs = _runs_of(request, thread_id)
    if runs:
        return _agui_run_id(runs[0])
    recorded = request.app.state.studio.tape.runs(thread_id=thread_id, limit=1)
    return recorded[0].run_id if recorded else None


def _run_input(assistant: AssistantEntry, body: RunAgentInput, snap: Any) -> tuple[Any, dict[str, Any] | None]:
    """(``input``, ``command``) of the run: the resume answers, or the new messages and state changes."""
    pending = [str(i.id) for i in getattr(snap, "interrupts", ()) if getattr(i, "id", None)]
    if body.resume:
        return None, {"resume": resume_value(body.resume, pending)}
    legacy = _legacy_command(body)
    if legacy is not None:
        return None, {"resume": _legacy_resume(legacy["resume"], pending)}
    values = snap.values if isinstance(getattr(snap, "values", None), dict) else {}
    channels = set(getattr(assistant.graph, "channels", None) or ())
    update: dict[str, Any] = {}
    if body.state is not None:
        if not isinstance(body.state, dict):
            raise BadRequest("state must be an object of the graph's state keys")
        current = state_of(values)
        unknown = sorted(k for k in body.state if k not in channels)
        if unknown:
            keys = ", ".join(sorted(k for k in channels if not k.startswith(("__", "branch:")))) or "none"
            raise BadRequest(f"state key {unknown[0]!r} is not in graph state; its keys: {keys}")
        update = {k: v for k, v in body.state.items() if k != "messages" and current.get(k) != to_wire(v)}
    if "messages" in channels:
        known = {str(getattr(m, "id", "")) for m in values.get("messages") or []}
        new = [to_langchain(m) for m in body.messages if m.id not in known]
        if any(m is not None for m in new):
            update["messages"] = [m for m in new if m is not None]
    if update:
        return update, None
    return (None if values else {}), None


@router.get("/agui/health", tags=["ag-ui"])
async def agui_health(request: Request) -> dict[str, Any]:
    """The AG-UI endpoints answer; the graphs they serve."""
    graphs = sorted(request.app.state.studio.assistants.entries)
    return {"status": "ok", "protocolVersion": AGUI_PROTOCOL_VERSION, "graphs": graphs}


@router.get("/agui/{graph_id}/health", tags=["ag-ui"])
async def agui_graph_health(request: Request, graph_id: str) -> dict[str, Any]:
    """The AG-UI endpoint of ``graph_id`` answers (404 for a graph not served)."""
    assistant = find_assistant(request, graph_id)
    return {"status": "ok", "protocolVersion": AGUI_PROTOCOL_VERSION, "graph": assistant.graph_id}


@router.post("/agui/{graph_id}", response_class=StreamingResponse)
async def agui_run(request: Request, graph_id: str, body: RunAgentInput) -> StreamingResponse:
    """Start a run of ``graph_id`` from an AG-UI ``RunAgentInput`` and stream its AG-UI events (SSE).

    ``messages`` not yet in the thread's state become the input; ``state`` keys that differ from the
    thread's are written with them; ``resume`` answers pending interrupts by id. A re-POST of a
    ``runId`` the thread already has streams that run again, from ``Last-Event-ID``."""
    after = _last_event_id(request)
    if not body.thread_id.strip() or not body.run_id.strip():
        raise BadRequest("threadId and runId must not be empty; a client names its thread and each run")
    assistant = find_assistant(request, graph_id)
    thread = _thread(request, assistant, body.thread_id)
    for run in _runs_of(request, thread.thread_id):
        if _agui_run_id(run) == body.run_id:
            return _stream(request, graph_id, run, after)
    snap = await assistant.recorded.graph.aget_state({"configurable": {"thread_id": thread.thread_id}})
    run_input, command = _run_input(assistant, body, snap)
    configurable: dict[str, Any] = {}
    extras = {"tools": to_wire(body.tools), "context": to_wire(body.context)}
    if any(extras.values()):
        configurable["agui"] = {k: v for k, v in extras.items() if v}
    before, after_nodes = _breakpoints(body)
    create = RunCreate(
        assistant_id=graph_id,
        input=run_input,
        interrupt_before=before,
        interrupt_after=after_nodes,
        command=CommandBody(**command) if command is not None else None,
        config={"configurable": configurable} if configurable else None,
        metadata={"agui_run_id": body.run_id},
        on_completion="keep",
    )
    options = {"run_id": body.run_id, "parent_run_id": _parent_run_id(request, body, thread.thread_id)}
    run = await request.app.state.studio.runs.start(
        thread, assistant, create, protocol=AGUI_PROTOCOL, protocol_options={"agui": options}
    )
    return _stream(request, graph_id, run, after)


@router.get("/agui/{graph_id}/runs/{run_id}/stream", response_class=StreamingResponse)
async def agui_join_stream(
    request: Request, graph_id: str, run_id: str, thread_id: str | None = Query(None, alias="threadId")
) -> StreamingResponse:
    """Watch an AG-UI run from ``Last-Event-ID``: by its Studio run id, or by the client's ``runId``
    with its ``threadId``."""
    after = _last_event_id(request)
    assistant = find_assistant(request, graph_id)
    run = _find_run(request, run_id, thread_id)
    if run.graph_id != assistant.graph_id:
        raise NotFound(f"run {run_id!r} is a run of graph {run.graph_id!r}; watch it at /agui/{run.graph_id}")
    return _stream(request, graph_id, run, after)
