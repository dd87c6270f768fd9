"""``/threads/...``: create, find and delete threads; read and update their state and history."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from langgraph.errors import InvalidUpdateError

from graphtape.server.studio.assistants import AssistantEntry
from graphtape.server.studio.models import (
    HistoryRequest,
    SelectedThread,
    StateAtCheckpoint,
    Thread,
    ThreadCount,
    ThreadCreate,
    ThreadPatch,
    ThreadSearch,
    ThreadState,
    ThreadStateUpdate,
    UpdateStateResponse,
)
from graphtape.server.studio.problems import BadRequest, Conflict, NotFound
from graphtape.server.studio.state import checkpoint_of, empty_state, state_body
from graphtape.server.studio.threads import ThreadEntry, page, time_key

__all__ = ["check_checkpoint", "router", "thread_graph"]

router = APIRouter(tags=["threads"])


def thread_graph(request: Request, thread: ThreadEntry) -> AssistantEntry | None:
    """The served graph a thread belongs to (the only one when there is one and no run yet)."""
    assistants = request.app.state.studio.assistants
    if thread.graph_id is not None:
        entry = assistants.find(thread.graph_id)
        if entry is None:
            raise NotFound(f"thread {thread.thread_id!r} belongs to graph {thread.graph_id!r}, which is not served")
        return entry
    entries = assistants.all()
    return entries[0] if len(entries) == 1 else None


def _no_checkpoint(thread_id: str, checkpoint_id: str) -> NotFound:
    return NotFound(f"no checkpoint {checkpoint_id!r} on thread {thread_id!r}; list them with /history")


async def check_checkpoint(entry: AssistantEntry | None, thread_id: str, checkpoint: dict[str, Any] | None) -> None:
    """A 404 unless the checkpoint a request names (``checkpoint_id``, ``checkpoint_ns``, maybe
    ``thread_id``) is one of the thread's, as ``GET /threads/{id}/state/{checkpoint_id}`` answers:
    a request on thread A never reads, forks or continues from a checkpoint of thread B."""
    checkpoint_id = (checkpoint or {}).get("checkpoint_id")
    if not checkpoint_id:
        return
    named = (checkpoint or {}).get("thread_id")
    if not isinstance(checkpoint_id, str) or (named is not None and named != thread_id) or entry is None:
        raise _no_checkpoint(thread_id, str(checkpoint_id))
    ns = (checkpoint or {}).get("checkpoint_ns") or ""
    configurable = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    if await entry.recorded.graph.checkpointer.aget_tuple({"configurable": configurable}) is None:
        raise _no_checkpoint(thread_id, checkpoint_id)


async def read_state(
    request: Request, thread: ThreadEntry, checkpoint_id: str | None = None, subgraphs: bool = False
) -> dict[str, Any]:
    entry = thread_graph(request, thread)
    if entry is None:
        return empty_state(thread.thread_id)
    configurable = {"thread_id": thread.thread_id}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    snap = await entry.recorded.graph.aget_state({"configurable": configurable}, subgraphs=subgraphs)
    if snap.metadata is None and snap.created_at is None:  # LangGraph's answer when no checkpoint is found
        if checkpoint_id:
            raise _no_checkpoint(thread.thread_id, checkpoint_id)
        return empty_state(thread.thread_id)
    return state_body(snap)


#: the fields of a thread read from its latest checkpoint
_STATE_FIELDS = frozenset({"values", "interrupts", "state_updated_at"})


async def describe_thread(request: Request, thread: ThreadEntry, fields: set[str] | None = None) -> dict[str, Any]:
    """The thread as LangGraph's server answers it, with the ``values`` and ``interrupts`` of its latest
    checkpoint (one checkpoint read, never its history). ``fields``: only these (a search's ``select``);
    the checkpoint is read only when one of them comes from it."""
    studio = request.app.state.studio
    error = None
    if thread.status == "error" and (fields is None or "error" in fields):
        error = studio.threads.last_error(thread.thread_id)
    unserved = thread.graph_id is not None and studio.assistants.find(thread.graph_id) is None
    if unserved or (fields is not None and not fields & _STATE_FIELDS):
        body = thread.describe(error=error)  # unserved: recorded with a graph this server does not serve
    else:
        state = await read_state(request, thread)
        interrupts = {task["id"]: task["interrupts"] for task in state["tasks"] if task["interrupts"]}
        # no checkpoint yet: no values (null, as LangGraph's server answers a new thread), not an
        # empty state, and the state is as old as the thread (a metadata patch does not change it)
        values = state["values"] if state["checkpoint"] is not None else None
        changed = state["created_at"] or thread.created_at
        body = thread.describe(values, interrupts, error=error, state_updated_at=changed)
    return body if fields is None else {k: v for k, v in body.items() if k in fields}


@router.post("/threads", response_model=Thread)
async def create_thread(request: Request, body: ThreadCreate) -> dict[str, Any]:
    studio = request.app.state.studio
    if body.graph_id is not None and studio.assistants.find(body.graph_id) is None:
        raise BadRequest(f"no graph {body.graph_id!r}; served graphs: {', '.join(sorted(studio.assistants.entries))}")
    thread = studio.threads.create(body.thread_id, body.metadata, body.if_exists, body.graph_id)
    return await describe_thread(request, thread)


async def state_updated_at(request: Request, thread: ThreadEntry) -> str:
    """When the thread's latest checkpoint was written (that checkpoint alone is read, not its
    history), as :func:`describe_thread` answers it: when the thread was created if it has no
    checkpoint, when it was last updated if its graph is not served (its state is not read)."""
    studio = request.app.state.studio
    if thread.graph_id is not None and studio.assistants.find(thread.graph_id) is None:
        return thread.updated_at
    entry = thread_graph(request, thread)
    if entry is not None:
        config = {"configurable": {"thread_id": thread.thread_id, "checkpoint_ns": ""}}
        latest = await entry.recorded.graph.checkpointer.aget_tuple(config)
        if latest is not None and latest.checkpoint.get("ts"):
            return str(latest.checkpoint["ts"])
    return thread.created_at


@router.post("/threads/search", response_model=list[SelectedThread], response_model_exclude_unset=True)
async def search_threads(request: Request, body: ThreadSearch) -> list[dict[str, Any]]:
    """Threads sorted as LangGraph's server sorts them: by ``sort_by`` (``updated_at`` when not
    given), last first unless ``sort_order`` is ``asc``."""
    threads = request.app.state.studio.threads
    sort_by, descending = body.sort_by or "updated_at", body.sort_order != "asc"
    if sort_by == "state_updated_at":
        # the one field a thread's row does not hold: one latest-checkpoint read per matching thread
        matching = threads.matching(body.metadata, body.status, body.ids)
        times = {t.thread_id: time_key(await state_updated_at(request, t)) for t in matching}
        found = page(matching, lambda t: times[t.thread_id], descending, body.limit, body.offset)
    else:
        found = threads.search(body.metadata, body.status, body.ids, body.limit, body.offset, sort_by, descending)
    fields = {str(name) for name in body.select} if body.select else None
    # one latest-checkpoint read per thread of the page, as Agent Chat UI's history lists threads by their first message
    return [await describe_thread(request, thread, fields) for thread in found]


@router.post("/threads/count", response_model=int)
async def count_threads(request: Request, body: ThreadCount) -> int:
    return len(request.app.state.studio.threads.matching(body.metadata, body.status, None))


@router.patch("/threads/{thread_id}", response_model=Thread)
async def patch_thread(request: Request, thread_id: str, body: ThreadPatch) -> dict[str, Any]:
    threads = request.app.state.studio.threads
    thread = threads.get(thread_id)
    threads.update(thread, metadata={**thread.metadata, **body.metadata})
    return await describe_thread(request, thread)


@router.post("/threads/{thread_id}/copy", response_model=Thread)
async def copy_thread(request: Request, thread_id: str) -> dict[str, Any]:
    """A new thread with the same checkpoints (its future runs are its own; the recorded runs stay with the source)."""
    studio = request.app.state.studio
    source = studio.threads.get(thread_id)
    busy = studio.runs.active_on(thread_id)
    if busy is not None:
        raise Conflict(f"thread {thread_id!r} has a run in progress ({busy.run_id}); copy it once the run ends")
    entry = thread_graph(request, source)
    copy = studio.threads.create(None, source.metadata, "raise", source.graph_id)
    if entry is not None:
        try:
            await entry.recorded.graph.checkpointer.acopy_thread(thread_id, copy.thread_id)
        except NotImplementedError:
            studio.threads.forget(copy.thread_id)
            raise BadRequest(f"the checkpointer of graph {entry.graph_id!r} cannot copy threads") from None
    fields = {"status": source.status if source.status != "busy" else "idle"}
    studio.threads.update(copy, **fields, **({"graph_id": entry.graph_id} if entry is not None else {}))
    return await describe_thread(request, copy)


@router.get("/threads/{thread_id}", response_model=Thread)
async def get_thread(request: Request, thread_id: str) -> dict[str, Any]:
    return await describe_thread(request, request.app.state.studio.threads.get(thread_id))


@router.delete("/threads/{thread_id}", status_code=204)
async def delete_thread(request: Request, thread_id: str) -> Response:
    studio = request.app.state.studio
    studio.threads.get(thread_id)
    busy = studio.runs.active_on(thread_id)
    if busy is not None:
        raise Conflict(f"thread {thread_id!r} has a run in progress ({busy.run_id}); cancel it before deleting")
    studio.threads.delete(thread_id)
    return Response(status_code=204)


@router.get("/threads/{thread_id}/state", response_model=ThreadState)
async def get_state(request: Request, thread_id: str, subgraphs: bool = False) -> dict[str, Any]:
    return await read_state(request, request.app.state.studio.threads.get(thread_id), subgraphs=subgraphs)


@router.get("/threads/{thread_id}/state/{checkpoint_id}", response_model=ThreadState)
async def get_state_at(request: Request, thread_id: str, checkpoint_id: str, subgraphs: bool = False) -> dict[str, Any]:
    thread = request.app.state.studio.threads.get(thread_id)
    return await read_state(request, thread, checkpoint_id, subgraphs)


@router.post("/threads/{thread_id}/state/checkpoint", response_model=ThreadState)
async def post_state_at(request: Request, thread_id: str, body: StateAtCheckpoint) -> dict[str, Any]:
    """The state at ``checkpoint.checkpoint_id``, or the latest state without one (as ``RemoteGraph.get_state``
    with only a thread id asks for it)."""
    checkpoint_id = body.checkpoint.get("checkpoint_id")
    if checkpoint_id is not None and not isinstance(checkpoint_id, str):
        raise BadRequest("checkpoint.checkpoint_id must be a checkpoint id from /history (a string), or left out")
    thread = request.app.state.studio.threads.get(thread_id)
    return await read_state(request, thread, checkpoint_id or None, body.subgraphs)


@router.post("/threads/{thread_id}/state", response_model=UpdateStateResponse)
async def update_state(request: Request, thread_id: str, body: ThreadStateUpdate) -> dict[str, Any]:
    studio = request.app.state.studio
    thread = studio.threads.get(thread_id)
    busy = studio.runs.active_on(thread_id)
    if busy is not None:
        raise Conflict(f"thread {thread_id!r} has a run in progress ({busy.run_id}); update its state once it ends")
    entry = thread_graph(request, thread)
    if entry is None:
        raise BadRequest(f"thread {thread_id!r} has no graph yet; start a run on it or create it with a graph_id")
    configurable = {"thread_id": thread_id}
    given = dict(body.checkpoint or {})
    if body.checkpoint_id:
        given["checkpoint_id"] = body.checkpoint_id
    await check_checkpoint(entry, thread_id, given)
    checkpoint_id = given.get("checkpoint_id")
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    if body.as_node is not None and body.as_node not in entry.graph.nodes:
        nodes = ", ".join(n for n in entry.graph.nodes if not n.startswith("__"))
        raise BadRequest(f"as_node {body.as_node!r} is not a node of graph {entry.graph_id!r}; its nodes: {nodes}")
    try:
        # through the recorded graph: the thread's next run keeps the update on the tape, and its replay repeats it
        config = await entry.recorded.aupdate_state({"configurable": configurable}, body.values, body.as_node)
    except (InvalidUpdateError, ValueError, TypeError, KeyError) as exc:
        raise BadRequest(f"the state update was refused: {exc}") from exc
    studio.threads.update(thread, status="idle", **({"graph_id": entry.graph_id} if thread.graph_id is None else {}))
    checkpoint = checkpoint_of(config)
    if checkpoint is None:
        raise BadRequest("the state update wrote no checkpoint")
    return {"checkpoint": checkpoint}


async def _history(request: Request, thread_id: str, body: HistoryRequest) -> list[dict[str, Any]]:
    thread = request.app.state.studio.threads.get(thread_id)
    entry = thread_graph(request, thread)
    if entry is None:
        return []
    configurable: dict[str, Any] = {"thread_id": thread_id}
    await check_checkpoint(entry, thread_id, body.checkpoint)
    if body.checkpoint and body.checkpoint.get("checkpoint_id"):
        configurable["checkpoint_id"] = body.checkpoint["checkpoint_id"]
    before = body.before
    await check_checkpoint(entry, thread_id, {"checkpoint_id": before} if isinstance(before, str) else before)
    before_config = None
    if isinstance(before, str):
        before_config = {"configurable": {"thread_id": thread_id, "checkpoint_id": before}}
    elif isinstance(before, dict) and before.get("checkpoint_id"):
        before_config = {"configurable": {"thread_id": thread_id, "checkpoint_id": before["checkpoint_id"]}}
    states = []
    async for snap in entry.recorded.graph.aget_state_history(
        {"configurable": configurable}, filter=body.metadata, before=before_config, limit=body.limit
    ):
        states.append(state_body(snap))
    return states


@router.post("/threads/{thread_id}/history", response_model=list[ThreadState])
async def post_history(request: Request, thread_id: str, body: HistoryRequest) -> list[dict[str, Any]]:
    return await _history(request, thread_id, body)


@router.get("/threads/{thread_id}/history", response_model=list[ThreadState])
async def get_history(request: Request, thread_id: str, limit: int = 10, before: str | None = None) -> Any:
    return await _history(request, thread_id, HistoryRequest(limit=limit, before=before))
