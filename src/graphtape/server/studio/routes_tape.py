"""``/graphtape/...``: graphtape's own API, everything the Python time-travel API does, over HTTP.

Recorded runs (list, detail, timeline, raw events, a live event stream read
from the store, calls with their request and response, labels), export and
import of tape files, history, the state at a checkpoint, diffs, the actions
that make new runs (replay, fork, override, invalidate: answered 202 at once
and run in the background, :mod:`graphtape.server.studio.tape_actions`), and a
debugger (:mod:`graphtape.server.studio.debug_sessions`). The contract is
docs/server-api.md. Library calls that read or write the store run in the
thread pool so the event loop keeps serving streams.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from graphtape import events, serde
from graphtape.errors import GraphtapeError, InvalidEdit, ReplayError, RunNotFound, StoreError, TapeFormatError
from graphtape.server.studio import tape_views
from graphtape.server.studio.bounds import MAX_POSITION
from graphtape.server.studio.debug_sessions import DebugEntry, apply_breakpoints
from graphtape.server.studio.problems import BadRequest, Conflict, NotFound, StudioProblem
from graphtape.server.studio.tape_models import (
    ActionStarted,
    BreakpointsBody,
    CallDetail,
    CallList,
    CheckpointState,
    DebugCreate,
    DebugSession,
    EventPage,
    ForkBody,
    History,
    ImportResult,
    InvalidateBody,
    LabelBody,
    OverrideBody,
    ReplayBody,
    RunDetail,
    RunList,
    RunSummary,
    StateDiff,
    Timeline,
    UseBody,
)
from graphtape.server.studio.tape_stream import parse_after, tape_sse
from graphtape.server.studio.timeline import run_timeline
from graphtape.server.studio.wire import to_wire

__all__ = ["router"]


class Unprocessable(StudioProblem):
    """A value that does not fit what it is for (a state edit that does not fit the state schema)."""

    status = 422


class _TapeRoute(APIRoute):
    """Library errors as the API's: an unknown run, call or checkpoint is a 404, a bad state edit a 422."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RunNotFound as exc:
                raise NotFound(str(exc)) from exc
            except InvalidEdit as exc:
                raise Unprocessable(str(exc)) from exc

        return route


router = APIRouter(prefix="/graphtape", tags=["graphtape"], route_class=_TapeRoute)

#: an SSE response that proxies must not buffer
_SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def _studio(request: Request) -> Any:
    return request.app.state.studio


def _graph_of(request: Request, graph_name: str) -> Any:
    """The served graph a replay of a run of ``graph_name`` executes, or a 409 saying it is not served."""
    entry = _studio(request).assistants.entries.get(graph_name)
    if entry is None or entry.graph is None:
        served = ", ".join(sorted(_studio(request).assistants.entries)) or "none"
        raise Conflict(
            f"graph {graph_name!r} is not served by this server (served: {served}); "
            f"start it with --graph {graph_name}=PATH:ATTR to replay its runs"
        )
    return entry.graph


async def _run_and_graph(request: Request, run_id: str) -> tuple[Any, Any]:
    """The recorded run (a 404 when unknown) and the served graph that re-runs it (a 409 when not served)."""
    run = await run_in_threadpool(_studio(request).tape.run, run_id)
    return run, _graph_of(request, run.graph)


# -- runs -----------------------------------------------------------------------------------


@router.get("/runs", response_model=RunList, summary="Recorded runs, newest first")
async def list_runs(
    request: Request,
    graph: str | None = None,
    status: str | None = None,
    thread_id: str | None = None,
    q: str | None = None,
    since: float | None = None,
    until: float | None = None,
    mode: str | None = None,
    limit: int = Query(50, ge=1, le=1000),
    offset: int = Query(0, ge=0, le=MAX_POSITION),
    cursor: str | None = Query(None, description="the 'next' of the previous page: the page after it"),
) -> dict[str, Any]:
    """A page of runs; ``next`` (null on the last page) is the ``cursor`` of the page after it."""
    tape = _studio(request).tape
    try:
        after = tape_views.parse_cursor(cursor) if cursor else None
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    runs, total, following = await run_in_threadpool(
        lambda: tape_views.list_runs(
            tape, graph=graph, status=status, thread_id=thread_id, q=q, since=since, until=until, mode=mode,
            limit=limit, offset=offset, after=after,
        )
    )  # fmt: skip
    exact = total <= tape_views.TOTAL_LIMIT
    return {"runs": runs, "total": min(total, tape_views.TOTAL_LIMIT), "total_exact": exact, "next": following}


@router.get("/runs/{run_id}", response_model=RunDetail, summary="One run: input, output, children, savings")
async def get_run(request: Request, run_id: str) -> dict[str, Any]:
    return await run_in_threadpool(tape_views.run_detail, _studio(request).tape, run_id)


@router.get("/runs/{run_id}/timeline", response_model=Timeline, summary="Steps, node tasks and calls of a run")
async def get_timeline(request: Request, run_id: str) -> dict[str, Any]:
    return await run_in_threadpool(run_timeline, _studio(request).tape, run_id)


@router.get("/runs/{run_id}/events", response_model=EventPage, summary="The run's raw tape events")
async def get_events(
    request: Request,
    run_id: str,
    after: int = Query(-1, le=MAX_POSITION),
    limit: int = Query(1000, ge=1, le=10000),
) -> dict[str, Any]:
    """Events with ``seq > after`` (every event by default: seqs start at 0), at most ``limit``."""
    tape = _studio(request).tape

    def read() -> dict[str, Any]:
        run = tape.run(run_id)
        ended = run.status != "running"
        rows = [r for r in tape.store.events(run.run_id) if r.seq > after]
        page = rows[:limit]
        items = [{"seq": r.seq, "kind": r.kind, "ts": r.ts, "data": r.data} for r in page]
        return {"events": items, "done": ended and len(page) == len(rows)}

    return await run_in_threadpool(read)


@router.get(
    "/runs/{run_id}/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "id: seq, event: kind, data: the event"}},
    summary="The run's events live (SSE)",
)
async def stream_events(
    request: Request,
    run_id: str,
    after: int | None = Query(None, le=MAX_POSITION),
    last_event_id: str | None = Header(None),
) -> StreamingResponse:
    """SSE: ``id: <seq>``, ``event: <kind>``, ``data: <event JSON>``, read from the store as written."""
    studio = _studio(request)
    start = parse_after(last_event_id, after)
    action = studio.actions.get(run_id)
    if action is not None:
        full = run_id
    else:
        full = (await run_in_threadpool(studio.tape.run, run_id)).run_id
    stream = tape_sse(
        studio.tape,
        full,
        after=start,
        heartbeat=studio.heartbeat_seconds,
        pending=action.missing_reason if action is not None else None,
    )
    return StreamingResponse(stream, media_type="text/event-stream", headers=_SSE_HEADERS)


@router.get("/runs/{run_id}/calls", response_model=CallList, summary="The run's LLM, tool and effect calls")
async def list_calls(request: Request, run_id: str) -> dict[str, Any]:
    return {"calls": await run_in_threadpool(tape_views.run_calls, _studio(request).tape, run_id)}


@router.get("/runs/{run_id}/calls/{call_id}", response_model=CallDetail, summary="One call, request and response")
async def get_call(request: Request, run_id: str, call_id: str) -> dict[str, Any]:
    return await run_in_threadpool(tape_views.call_detail, _studio(request).tape, run_id, call_id)


@router.put("/runs/{run_id}/label", response_model=RunSummary, summary="Label a run (null clears)")
async def put_label(request: Request, run_id: str, body: LabelBody) -> dict[str, Any]:
    tape = _studio(request).tape

    def label() -> dict[str, Any]:
        run = tape.run(run_id)
        tape.label(run.run_id, body.label, body.note)
        return tape_views.run_summary(tape, run, tape_views.labels_of(tape, [run.run_id]).get(run.run_id))

    return await run_in_threadpool(label)


# -- moving tapes ---------------------------------------------------------------------------


def _exported(write: Callable[[Path], Any], name: str) -> Response:
    with tempfile.TemporaryDirectory(prefix="graphtape-export-") as folder:
        path = Path(folder) / name
        write(path)
        data = path.read_bytes()
    return Response(
        data,
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


_TAPE_FILE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/x-ndjson": {}}, "description": "A graphtape tape file (JSONL)"}
}


@router.get("/runs/{run_id}/export", response_class=Response, responses=_TAPE_FILE, summary="Download a run's tape")
async def export_run(request: Request, run_id: str) -> Response:
    tape = _studio(request).tape

    def export() -> Response:
        run = tape.run(run_id)
        return _exported(lambda p: tape.export_run(run.run_id, p), f"run-{run.run_id}.jsonl")

    return await run_in_threadpool(export)


@router.get(
    "/threads/{thread_id}/export", response_class=Response, responses=_TAPE_FILE, summary="Download a thread's tape"
)
async def export_thread(request: Request, thread_id: str) -> Response:
    tape = _studio(request).tape
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in thread_id)[:80]
    return await run_in_threadpool(_exported, lambda p: tape.export_thread(thread_id, p), f"thread-{safe}.jsonl")


@router.post(
    "/import",
    response_model=ImportResult,
    summary="Load a tape file (the raw bytes as the body)",
    openapi_extra={
        "requestBody": {
            "required": True,
            # the only body types the import takes (the request guard refuses others with a 415)
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                "application/x-ndjson": {"schema": {"type": "string", "format": "binary"}},
            },
        }
    },
)
async def import_tape(request: Request) -> dict[str, Any]:
    """The body is a file written by export; it is checked whole (safe decoding) before anything is written."""
    from graphtape.export import parse_text

    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("the tape file is not UTF-8 text; send a file written by graphtape export") from None
    tape = _studio(request).tape

    def load() -> list[str]:
        try:
            _, batch = parse_text(text, "the uploaded tape")
        except TapeFormatError as exc:
            raise BadRequest(f"{exc}; nothing was imported") from exc
        present = [r.run_id for r in batch.new_runs if tape.store.get_run(r.run_id) is not None]
        if present:
            raise Conflict(f"run {present[0]} is already in this store; nothing was imported (it is the same run)")
        with tempfile.TemporaryDirectory(prefix="graphtape-import-") as folder:
            path = Path(folder) / "upload.jsonl"
            path.write_text(text, encoding="utf-8")
            try:
                return tape.import_file(path)
            except StoreError as exc:
                raise Conflict(str(exc)) from exc

    return {"run_ids": await run_in_threadpool(load)}


# -- time travel ----------------------------------------------------------------------------


@router.get("/history/{run_or_thread_id}", response_model=History, summary="Checkpoints and branches")
async def get_history(request: Request, run_or_thread_id: str, namespaces: bool = False) -> dict[str, Any]:
    tape = _studio(request).tape
    history = await run_in_threadpool(lambda: tape.history(run_or_thread_id, namespaces=namespaces))
    return serde.redact(serde.to_jsonable(history.to_dict()), tape.redact_keys)


def _checkpoint_state(request: Request, thread_id: str, checkpoint_id: str) -> dict[str, Any]:
    from graphtape.debug.locate import locate_checkpoint

    studio = _studio(request)
    tape = studio.tape
    ref = locate_checkpoint(tape, checkpoint_id, thread_id=thread_id)
    row = tape.store.get_checkpoint(ref.thread_id, ref.ns, ref.checkpoint_id)
    last = tape.store.list_runs(thread_id=ref.thread_id, limit=1)
    entry = studio.assistants.entries.get(last[0].graph) if last else None
    out: dict[str, Any] = {
        "checkpoint_id": ref.checkpoint_id,
        "thread_id": ref.thread_id,
        "parent_id": row.parent_id if row is not None else None,
        "step": ref.step if row is None else row.step,
        "metadata": serde.redact(serde.to_jsonable(row.metadata if row is not None else {}), tape.redact_keys),
        "next": [],
    }
    if entry is not None and entry.recorded is not None and ref.in_saver:
        snap = entry.recorded.get_state(ref.config())
        out["values"] = serde.to_jsonable(snap.values)
        out["next"] = list(snap.next)
    else:
        out["values"] = serde.to_jsonable(tape.state(ref.checkpoint_id, thread_id=ref.thread_id))
    return out


@router.get(
    "/threads/{thread_id}/checkpoints/{checkpoint_id}", response_model=CheckpointState, summary="State at a checkpoint"
)
async def get_checkpoint(request: Request, thread_id: str, checkpoint_id: str) -> dict[str, Any]:
    return await run_in_threadpool(_checkpoint_state, request, thread_id, checkpoint_id)


@router.get("/diff", response_model=StateDiff, summary="What changed between two checkpoints")
async def get_diff(request: Request, a: str, b: str, thread_id: str | None = None) -> dict[str, Any]:
    from graphtape.debug.diff import diff_states
    from graphtape.debug.locate import locate_checkpoint, values_at

    tape = _studio(request).tape

    def diff() -> dict[str, Any]:
        ref_a = locate_checkpoint(tape, a, thread_id=thread_id)
        ref_b = locate_checkpoint(tape, b, thread_id=thread_id)
        result = diff_states(
            values_at(tape, ref_a), values_at(tape, ref_b), a_label=ref_a.checkpoint_id, b_label=ref_b.checkpoint_id
        )
        return serde.to_jsonable(result.to_dict())

    return await run_in_threadpool(diff)


# -- actions --------------------------------------------------------------------------------


async def _answer(action: Any, wait: bool, studio: Any) -> Response:
    if wait:
        return JSONResponse(to_wire(await studio.actions.wait(action)), status_code=200)
    return JSONResponse(action.describe(), status_code=202)


_ACTION: dict[int | str, dict[str, Any]] = {
    202: {"model": ActionStarted, "description": "Started: follow /graphtape/runs/{run_id}/stream"},
    200: {"description": "With wait=true: the ReplayResult"},
}


@router.post("/runs/{run_id}/replay", status_code=202, responses=_ACTION, summary="Replay a run (strict or flight)")
async def replay_run(request: Request, run_id: str, body: ReplayBody, wait: bool = False) -> Response:
    from graphtape.debug.inject import find_checkpoint

    studio = _studio(request)
    tape = studio.tape
    run, graph = await _run_and_graph(request, run_id)
    if body.from_checkpoint is not None:
        await run_in_threadpool(find_checkpoint, tape, body.from_checkpoint, run.run_id)

    def work(new_run_id: str) -> Any:
        return tape.areplay(
            run.run_id,
            graph,
            mode=body.mode,
            allow_live_effects=body.allow_live_effects,
            from_checkpoint=body.from_checkpoint,
            new_run_id=new_run_id,
        )

    return await _answer(studio.actions.start("replay", work), wait, studio)


@router.post(
    "/threads/{thread_id}/checkpoints/{checkpoint_id}/fork",
    status_code=202,
    responses=_ACTION,
    summary="Continue from a checkpoint in a new thread, state edited",
)
async def fork_checkpoint(
    request: Request, thread_id: str, checkpoint_id: str, body: ForkBody, wait: bool = False
) -> Response:
    from graphtape.debug.edit import check_edit
    from graphtape.debug.inject import find_checkpoint

    studio = _studio(request)
    tape = studio.tape

    def locate() -> tuple[str, str, str]:
        # the checkpoint is looked for among the thread's runs only (not every run of the store)
        newest = tape.store.list_runs(thread_id=thread_id, limit=1)
        if not newest:
            raise RunNotFound(f"no recorded run on thread {thread_id!r}; list runs with GET /graphtape/runs")
        owner, event = find_checkpoint(tape, checkpoint_id, newest[0].run_id)
        run = tape.run(owner)
        if run.thread_id != thread_id:
            raise RunNotFound(
                f"checkpoint {checkpoint_id!r} is not on thread {thread_id!r} (it is on {run.thread_id!r})"
            )
        if event.ns:
            raise BadRequest("fork from a checkpoint of the root graph (this one belongs to a subgraph)")
        return run.graph, str(event.checkpoint_id), run.run_id

    graph_name, full_id, owner = await run_in_threadpool(locate)
    graph = _graph_of(request, graph_name)
    if body.values is not None:
        check_edit(graph, body.values, body.as_node)  # a 422 naming the channel, before anything starts

    def work(new_run_id: str) -> Any:
        return tape.afork(
            full_id,
            graph,
            values=body.values,
            as_node=body.as_node,
            mode=body.mode,
            allow_live_effects=body.allow_live_effects,
            run_id=owner,
            new_run_id=new_run_id,
        )

    return await _answer(studio.actions.start("fork", work), wait, studio)


@router.post(
    "/runs/{run_id}/calls/{call_id}/override",
    status_code=202,
    responses=_ACTION,
    summary="Re-run with one call's output replaced",
)
async def override_call(
    request: Request, run_id: str, call_id: str, body: OverrideBody, wait: bool = False
) -> Response:
    from graphtape.debug.inject import find_call, override_envelope

    studio = _studio(request)
    tape = studio.tape
    run, graph = await _run_and_graph(request, run_id)
    call = await run_in_threadpool(find_call, tape, call_id, run.run_id)
    try:
        override_envelope(call, body.output)
    except ReplayError as exc:
        raise Unprocessable(str(exc)) from exc

    def work(new_run_id: str) -> Any:
        return tape.aoverride(
            run.run_id,
            call.call_id,
            body.output,
            graph,
            mode=body.mode,
            from_start=body.from_start,
            new_run_id=new_run_id,
        )

    return await _answer(studio.actions.start("override", work), wait, studio)


def _node_ran(tape: Any, run_id: str, node: str) -> bool:
    from graphtape.replay.engine import run_chain

    for run in run_chain(tape, tape.run(run_id)):
        for row in tape.store.events(run.run_id, [events.TaskStarted.KIND]):
            path = str(events.TaskStarted.from_row(row).node_path or "")
            if path == node or path.split("/")[-1] == node:
                return True
    return False


@router.post(
    "/runs/{run_id}/invalidate", status_code=202, responses=_ACTION, summary="Re-run live from a node's first execution"
)
async def invalidate_run(request: Request, run_id: str, body: InvalidateBody, wait: bool = False) -> Response:
    studio = _studio(request)
    tape = studio.tape
    run, graph = await _run_and_graph(request, run_id)
    if not await run_in_threadpool(_node_ran, tape, run.run_id, body.node):
        raise NotFound(
            f"node {body.node!r} never ran in run {run.run_id} or the runs before it on its thread; "
            f"see its nodes with GET /graphtape/runs/{run.run_id}/timeline"
        )

    def work(new_run_id: str) -> Any:
        return tape.ainvalidate_from(
            run.run_id, body.node, graph, allow_live_effects=body.allow_live_effects, new_run_id=new_run_id
        )

    return await _answer(studio.actions.start("invalidate", work), wait, studio)


# -- debugger -------------------------------------------------------------------------------


def _session(request: Request, session_id: str) -> DebugEntry:
    entry: DebugEntry = _studio(request).debug_sessions.get(session_id)
    return entry


def _described(request: Request, entry: DebugEntry) -> dict[str, Any]:
    return entry.describe(_studio(request).tape)


@router.post("/debug", status_code=201, response_model=DebugSession, summary="Debug a replay of a recorded run")
async def create_debug(request: Request, body: DebugCreate) -> dict[str, Any]:
    studio = _studio(request)
    run = await run_in_threadpool(studio.tape.run, body.run_id)
    graph = _graph_of(request, run.graph)
    specs = [bp.model_dump() for bp in body.breakpoints]
    try:
        entry = await studio.debug_sessions.create(studio.tape, run.run_id, graph, body.mode, specs)
    except GraphtapeError as exc:  # a breakpoint on a node the graph does not have
        raise BadRequest(str(exc)) from exc
    return await run_in_threadpool(_described, request, entry)


@router.get("/debug/{session_id}", response_model=DebugSession, summary="A debugger session")
async def get_debug(request: Request, session_id: str) -> dict[str, Any]:
    return await run_in_threadpool(_described, request, _session(request, session_id))


@router.post("/debug/{session_id}/use", response_model=DebugSession, summary="Answer the paused call with this")
async def debug_use(request: Request, session_id: str, body: UseBody) -> dict[str, Any]:
    entry = _session(request, session_id)
    await _studio(request).debug_sessions.command(entry, lambda: entry.debugger.use(body.output))
    return await run_in_threadpool(_described, request, entry)


#: the commands that let a paused replay go on, each a route of its own, and what each does
_DEBUG_COMMANDS = {
    "continue": ("continue_", "Run to the next breakpoint or the end"),
    "step": ("step", "Run one super-step (to the next checkpoint)"),
    "step_node": ("step_node", "Run to the start or end of the next node task"),
    "step_call": ("step_call", "Run to the next LLM, tool or effect call"),
    "live": ("live", "Send the paused call live, then continue"),
    "stop": ("stop", "Stop the replay (the session stays readable until deleted)"),
}


def _debug_route(command: str, method: str) -> Callable[[Request, str], Coroutine[Any, Any, dict[str, Any]]]:
    async def go_on(request: Request, session_id: str) -> dict[str, Any]:
        entry = _session(request, session_id)
        if entry.ended and command != "stop":
            raise Conflict(f"the replay of session {session_id} has ended; start a new session to debug again")
        await _studio(request).debug_sessions.command(entry, getattr(entry.debugger, method))
        return await run_in_threadpool(_described, request, entry)

    go_on.__name__ = f"debug_{command}"
    return go_on


for _command, (_method, _summary) in _DEBUG_COMMANDS.items():
    router.add_api_route(
        f"/debug/{{session_id}}/{_command}",
        _debug_route(_command, _method),
        methods=["POST"],
        response_model=DebugSession,
        summary=_summary,
    )


@router.put("/debug/{session_id}/breakpoints", response_model=DebugSession, summary="Replace the breakpoints")
async def put_breakpoints(request: Request, session_id: str, body: BreakpointsBody) -> dict[str, Any]:
    entry = _session(request, session_id)
    specs = [bp.model_dump() for bp in body.breakpoints]
    async with entry.lock:
        try:
            await run_in_threadpool(apply_breakpoints, entry.debugger, specs)
        except GraphtapeError as exc:
            raise BadRequest(str(exc)) from exc
        entry.breakpoints = specs
    return await run_in_threadpool(_described, request, entry)


@router.delete("/debug/{session_id}", status_code=204, summary="Stop a debugger session and forget it")
async def delete_debug(request: Request, session_id: str) -> Response:
    entry = _session(request, session_id)
    await _studio(request).debug_sessions.close(entry)
    return Response(status_code=204)
