"""``/assistants/...``: the served graphs, their structure and their JSON Schemas."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from graphtape.server.studio.assistants import AssistantEntry
from graphtape.server.studio.models import Assistant, AssistantSearch, GraphSchemas, GraphStructure
from graphtape.server.studio.problems import NotFound
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
