"""``/assistants/...``: the served graphs, their structure and JSON Schemas, and assistants made on them."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request, Response

from graphtape.server.studio.assistants import AssistantEntry, now_iso
from graphtape.server.studio.models import (
    Assistant,
    AssistantCreate,
    AssistantPatch,
    AssistantSearch,
    GraphSchemas,
    GraphStructure,
)
from graphtape.server.studio.problems import BadRequest, Conflict, NotFound
from graphtape.server.studio.schemas import graph_schemas

__all__ = ["router"]

router = APIRouter(tags=["assistants"])


def find_assistant(request: Request, assistant_id: str) -> AssistantEntry:
    entry = request.app.state.studio.assistants.find(assistant_id)
    if entry is None:
        names = ", ".join(sorted(request.app.state.studio.assistants.entries)) or "none"
        raise NotFound(f"no assistant {assistant_id!r}; give an assistant id or one of the graph names: {names}")
    return entry


@router.post("/assistants/search", response_model=list[Assistant])
async def search_assistants(request: Request, body: AssistantSearch) -> list[dict[str, Any]]:
    found = [
        e.describe()
        for e in request.app.state.studio.assistants.all()
        if (body.graph_id is None or e.graph_id == body.graph_id) and (body.name is None or e.graph_id == body.name)
    ]
    found = [a for a in found if all(a["metadata"].get(k) == v for k, v in (body.metadata or {}).items())]
    return found[body.offset : body.offset + body.limit]


@router.post("/assistants", response_model=Assistant)
async def create_assistant(request: Request, body: AssistantCreate) -> dict[str, Any]:
    """An assistant on a served graph whose runs start from its config and context."""
    assistants = request.app.state.studio.assistants
    base = assistants.entries.get(body.graph_id)
    if base is None:
        raise BadRequest(f"no graph {body.graph_id!r}; served graphs: {', '.join(sorted(assistants.entries))}")
    assistant_id = body.assistant_id or str(uuid.uuid4())
    existing = assistants.find(assistant_id)
    if existing is not None:
        if body.if_exists == "do_nothing":
            return existing.describe()
        raise Conflict(f"assistant {assistant_id!r} already exists; pass if_exists='do_nothing' to reuse it")
    fields = {
        "name": body.name,
        "description": body.description,
        "config": body.config,
        "context": body.context,
        "metadata": body.metadata,
    }
    return assistants.create(base, assistant_id, fields).describe()


def _custom(request: Request, assistant_id: str) -> Any:
    entry = find_assistant(request, assistant_id)
    if entry.custom_id is None:
        raise Conflict(f"assistant {assistant_id!r} is graph {entry.graph_id!r}'s own; create an assistant to change")
    return entry


@router.patch("/assistants/{assistant_id}", response_model=Assistant)
async def patch_assistant(request: Request, assistant_id: str, body: AssistantPatch) -> dict[str, Any]:
    entry = _custom(request, assistant_id)
    if body.config is not None:
        entry.config = body.config
    if body.context is not None:
        entry.context = body.context
    if body.metadata is not None:
        entry.metadata = {**entry.metadata, **body.metadata}
    if body.name is not None:
        entry.name = body.name
    if body.description is not None:
        entry.description = body.description
    entry.version += 1
    entry.updated_at = now_iso()
    return entry.describe()


@router.delete("/assistants/{assistant_id}", status_code=204)
async def delete_assistant(request: Request, assistant_id: str) -> Response:
    entry = _custom(request, assistant_id)
    del request.app.state.studio.assistants.custom[entry.assistant_id]
    return Response(status_code=204)


@router.get("/assistants/{assistant_id}", response_model=Assistant)
async def get_assistant(request: Request, assistant_id: str) -> dict[str, Any]:
    return find_assistant(request, assistant_id).describe()


@router.get("/assistants/{assistant_id}/graph", response_model=GraphStructure)
async def get_assistant_graph(request: Request, assistant_id: str, xray: bool | int = False) -> dict[str, Any]:
    return find_assistant(request, assistant_id).structure(xray)


@router.get("/assistants/{assistant_id}/schemas", response_model=GraphSchemas)
async def get_assistant_schemas(request: Request, assistant_id: str) -> dict[str, Any]:
    return find_assistant(request, assistant_id).schemas()


def _subgraph_schemas(entry: AssistantEntry, namespace: str | None, recurse: bool) -> dict[str, Any]:
    return {
        ns: {"graph_id": entry.graph_id, **graph_schemas(sub)}
        for ns, sub in entry.graph.get_subgraphs(namespace=namespace, recurse=recurse)
    }


@router.get("/assistants/{assistant_id}/subgraphs", response_model=dict[str, GraphSchemas])
async def get_subgraphs(request: Request, assistant_id: str, recurse: bool = False) -> dict[str, Any]:
    """The schemas of the graph's subgraphs, by namespace (the node name that runs each)."""
    return _subgraph_schemas(find_assistant(request, assistant_id), None, recurse)


@router.get("/assistants/{assistant_id}/subgraphs/{namespace}", response_model=dict[str, GraphSchemas])
async def get_subgraphs_in(request: Request, assistant_id: str, namespace: str, recurse: bool = False) -> Any:
    return _subgraph_schemas(find_assistant(request, assistant_id), namespace, recurse)
