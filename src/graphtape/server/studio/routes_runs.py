"""``/threads/{id}/runs/...``: start runs (background, wait, stream), join them, list, get and cancel them."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from graphtape.server.studio.assistants import AssistantEntry
from graphtape.server.studio.bounds import MAX_POSITION
from graphtape.server.studio.models import Run, RunCreate, RunsCancel
from graphtape.server.studio.problems import BadRequest, Conflict, NotFound
from graphtape.server.studio.routes_assistants import find_assistant
from graphtape.server.studio.routes_threads import check_checkpoint
from graphtape.server.studio.runs import RunEntry
from graphtape.server.studio.threads import ThreadEntry

__all__ = ["router"]

router = APIRouter(tags=["runs"])

#: an SSE response that proxies must not buffer
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


async def _start(request: Request, thread_id: str, body: RunCreate) -> RunEntry:
    studio = request.app.state.studio
    assistant = find_assistant(request, body.assistant_id)
    thread: ThreadEntry | None = studio.threads.find(thread_id)
    if thread is None:
        if body.if_not_exists != "create":
            raise NotFound(f"no thread {thread_id!r}; create it first (POST /threads) or pass if_not_exists='create'")
        await _check_checkpoint(thread_id, assistant, body)  # a new thread has none: any checkpoint is a 404
        thread = studio.threads.create(thread_id, None, "do_nothing", assistant.graph_id)
    if thread.graph_id is not None and thread.graph_id != assistant.graph_id:
        raise Conflict(
            f"thread {thread_id!r} belongs to graph {thread.graph_id!r}, not {assistant.graph_id!r}; "
            "start the run with that graph's assistant or use a new thread"
        )
    await _check_checkpoint(thread_id, assistant, body)
    return await studio.runs.start(thread, assistant, body)


async def _check_checkpoint(thread_id: str, assistant: AssistantEntry, body: RunCreate) -> None:
    """A 404 before anything is queued when the run is to start from another thread's checkpoint."""
    checkpoint = dict(body.checkpoint or {})
    if body.checkpoint_id:
        checkpoint["checkpoint_id"] = body.checkpoint_id
    await check_checkpoint(assistant, thread_id, checkpoint)


def _location(run: RunEntry, then: str | None = None) -> dict[str, str]:
    """``Content-Location``: the run; ``Location``: where a client reconnects if the answer is cut
    (``join`` for wait, ``stream`` for a stream: what ``langgraph-sdk`` follows)."""
    base = f"/threads/{run.thread_id}/runs/{run.run_id}"
    headers = {"Content-Location": base}
    if then is not None:
        headers["Location"] = f"{base}/{then}"
    return headers


def _last_event_id(request: Request) -> int:
    value = request.headers.get("last-event-id", "0").strip()
    if not value.isdigit():
        raise BadRequest(f"Last-Event-ID must be the id of an event of this run (a number), not {value!r}")
    return int(value)


@router.post("/threads/{thread_id}/runs", response_model=Run)
async def create_run(request: Request, thread_id: str, body: RunCreate, response: Response) -> dict[str, Any]:
    run = await _start(request, thread_id, body)
    response.headers.update(_location(run))
    return run.describe()


@router.post("/threads/{thread_id}/runs/wait", response_model=Any)
async def wait_run(request: Request, thread_id: str, body: RunCreate, response: Response) -> Any:
    run = await _start(request, thread_id, body)
    response.headers.update(_location(run, "join"))
    return await run.wait()


@router.post("/threads/{thread_id}/runs/stream", response_class=StreamingResponse)
async def stream_run(request: Request, thread_id: str, body: RunCreate) -> StreamingResponse:
    run = await _start(request, thread_id, body)
    headers = {**SSE_HEADERS, **_location(run, "stream")}
    return StreamingResponse(
        run.sse(request.app.state.studio.heartbeat_seconds), media_type="text/event-stream", headers=headers
    )


@router.get("/threads/{thread_id}/runs", response_model=list[Run])
async def list_runs(
    request: Request,
    thread_id: str,
    limit: int = Query(10, le=MAX_POSITION),
    offset: int = Query(0, le=MAX_POSITION),
    status: str | None = None,
) -> list[dict[str, Any]]:
    studio = request.app.state.studio
    studio.threads.get(thread_id)
    return [r.describe() for r in studio.runs.on_thread(thread_id, status, max(limit, 0), max(offset, 0))]


@router.get("/threads/{thread_id}/runs/{run_id}", response_model=Run)
async def get_run(request: Request, thread_id: str, run_id: str) -> dict[str, Any]:
    return request.app.state.studio.runs.get(thread_id, run_id).describe()


@router.delete("/threads/{thread_id}/runs/{run_id}", status_code=204)
async def delete_run(request: Request, thread_id: str, run_id: str) -> Response:
    """Forget a finished run in the API (its recording stays on the tape: ``graphtape prune`` removes it)."""
    runs = request.app.state.studio.runs
    runs.delete(runs.get(thread_id, run_id))
    return Response(status_code=204)


@router.get("/threads/{thread_id}/runs/{run_id}/join", response_model=Any)
async def join_run(request: Request, thread_id: str, run_id: str) -> Any:
    return await request.app.state.studio.runs.get(thread_id, run_id).wait()


@router.get("/threads/{thread_id}/runs/{run_id}/stream", response_class=StreamingResponse)
async def join_stream(request: Request, thread_id: str, run_id: str) -> StreamingResponse:
    run = request.app.state.studio.runs.get(thread_id, run_id)
    stream = run.sse(request.app.state.studio.heartbeat_seconds, after=_last_event_id(request))
    return StreamingResponse(stream, media_type="text/event-stream", headers=SSE_HEADERS)


@router.post(
    "/threads/{thread_id}/runs/{run_id}/cancel",
    status_code=202,
    response_class=Response,
    responses={202: {"description": "cancelling (no body)"}, 204: {"description": "cancelled (wait=true; no body)"}},
)
async def cancel_run(
    request: Request,
    thread_id: str,
    run_id: str,
    wait: bool = False,
    action: Literal["interrupt", "rollback"] = "interrupt",
) -> Response:
    studio = request.app.state.studio
    await studio.runs.cancel(studio.runs.get(thread_id, run_id), wait)
    return Response(status_code=204 if wait else 202)


async def _start_stateless(request: Request, body: RunCreate) -> RunEntry:
    """A run on a new temporary thread (``/runs/...``), forgotten when it ends unless ``on_completion='keep'``."""
    studio = request.app.state.studio
    assistant = find_assistant(request, body.assistant_id)
    if body.checkpoint_id or (body.checkpoint or {}).get("checkpoint_id"):
        raise NotFound(
            "a stateless run starts on a new thread, which has no checkpoint; start it from a checkpoint "
            "with POST /threads/{thread_id}/runs on that checkpoint's thread"
        )
    thread = studio.threads.create(None, None, "raise", assistant.graph_id)
    try:
        return await studio.runs.start(thread, assistant, body, temporary_thread=body.on_completion == "delete")
    except BaseException:
        studio.threads.forget(thread.thread_id)
        raise


@router.post("/runs", response_model=Run)
async def create_stateless_run(request: Request, body: RunCreate) -> dict[str, Any]:
    return (await _start_stateless(request, body)).describe()


@router.post("/runs/wait", response_model=Any)
async def wait_stateless_run(request: Request, body: RunCreate) -> Any:
    return await (await _start_stateless(request, body)).wait()


@router.post("/runs/stream", response_class=StreamingResponse)
async def stream_stateless_run(request: Request, body: RunCreate) -> StreamingResponse:
    run = await _start_stateless(request, body)
    headers = {**SSE_HEADERS, **_location(run, "stream")}
    stream = run.sse(request.app.state.studio.heartbeat_seconds)
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


@router.post("/runs/batch", response_model=list[Run])
async def create_run_batch(request: Request, body: list[RunCreate]) -> list[dict[str, Any]]:
    """Several stateless background runs, each on its own temporary thread."""
    if len(body) > 100:
        raise BadRequest(f"at most 100 runs per batch, not {len(body)}")
    return [(await _start_stateless(request, item)).describe() for item in body]


@router.post("/runs/cancel", status_code=204)
async def cancel_runs(
    request: Request, body: RunsCancel, action: Literal["interrupt", "rollback"] = "interrupt"
) -> Response:
    """Cancel a thread's runs (all of them, or ``run_ids``), or every run with a ``status``."""
    runs = request.app.state.studio.runs
    if body.thread_id is None and body.status is None:
        raise BadRequest("give thread_id (and optionally run_ids) or status ('pending', 'running' or 'all')")
    if body.thread_id is not None:
        for run_id in body.run_ids or ():
            runs.get(body.thread_id, run_id)  # a run of another thread is a 404, as on every route
    for run in runs.matching(body.thread_id, body.run_ids, body.status):
        await runs.cancel(run, wait=True)
    return Response(status_code=204)
