"""``/store/...``: LangGraph's long-term memory store over HTTP, kept in the tape's database.

The routes and bodies are those of LangGraph's server, which ``langgraph-sdk``'s
``client.store`` speaks: ``PUT /store/items`` (204), ``GET /store/items?namespace=a.b&key=k``
(the item, or ``null`` when there is none), ``DELETE /store/items`` (204, JSON body),
``POST /store/items/search`` (``{"items": [...]}``) and ``POST /store/namespaces``
(``{"namespaces": [[...]]}``). Items are in :mod:`graphtape.store.kv`'s store for
the tape's URL, created on the first request (:func:`studio_kv`) and shared with
the served graphs (:func:`graphtape.store.kv.attach_store`), so what a node puts
in its ``store`` is what a client reads here.

A bad namespace (a label that is empty or holds a ``.``), an empty key, a value
that is not JSON, an unknown filter operator: each a 422 saying what to fix.
``query`` is accepted and ignored (no vector search; every ``score`` is null).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Query, Request, Response
from langgraph.store.base import NOT_PROVIDED, InvalidNamespaceError, Item
from pydantic import BaseModel, ConfigDict, Field

from graphtape.server.studio.bounds import MAX_POSITION
from graphtape.server.studio.problems import StudioProblem
from graphtape.store.kv import InvalidStoreOp, KVStore, kv_store_for

__all__ = [
    "ListNamespacesRequest",
    "NamespacesResponse",
    "SearchItemsRequest",
    "SearchItemsResponse",
    "StoreDeleteRequest",
    "StoreItem",
    "StorePutRequest",
    "StoreSearchItem",
    "close_studio_kv",
    "router",
    "studio_kv",
]

#: the most items or namespaces one request returns
MAX_PAGE = 1000


class Unprocessable(StudioProblem):
    """A request whose values the store cannot take (422, as for a body that does not validate)."""

    status = 422


def studio_kv(studio: Any) -> KVStore:
    """The Studio's LangGraph store, opened on the tape's store the first time it is asked for."""
    kv: KVStore | None = getattr(studio, "kv", None)
    if kv is None:
        kv = kv_store_for(studio.tape.store)  # shares the tape's connections, and so their credentials
        studio.kv = kv
    return kv


def close_studio_kv(studio: Any) -> None:
    """Close the Studio's LangGraph store if it was opened."""
    kv = getattr(studio, "kv", None)
    if kv is not None:
        studio.kv = None
        kv.close()


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    studio = getattr(app.state, "studio", None)
    if studio is not None:
        close_studio_kv(studio)


# FastAPI merges a router's lifespan into the app's when the router is included.
router = APIRouter(tags=["store"], lifespan=_lifespan)


# -- bodies -------------------------------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StorePutRequest(_Request):
    namespace: list[str] = Field(description="the item's namespace, e.g. ['users', 'u1']")
    key: str = Field(description="the item's key in its namespace")
    value: dict[str, Any] = Field(description="the item: a JSON object")
    index: Literal[False] | list[str] | None = Field(
        default=None, description="accepted and ignored: there is no vector search"
    )
    ttl: float | None = Field(default=None, gt=0, description="minutes after its last read or write until it expires")


class StoreDeleteRequest(_Request):
    namespace: list[str] = Field(default_factory=list)
    key: str


class SearchItemsRequest(_Request):
    namespace_prefix: list[str] = Field(default_factory=list, description="search this namespace and under it")
    filter: dict[str, Any] | None = Field(
        default=None, description="top-level fields of the value: a value, or {'$eq'|'$ne'|'$gt'|...: value}"
    )
    limit: int = Field(default=10, ge=0, le=MAX_PAGE)
    offset: int = Field(default=0, ge=0, le=MAX_POSITION)
    query: str | None = Field(default=None, description="accepted and ignored: there is no vector search")
    refresh_ttl: bool | None = None


class ListNamespacesRequest(_Request):
    prefix: list[str] | None = Field(default=None, description="labels the namespace starts with ('*' is any)")
    suffix: list[str] | None = Field(default=None, description="labels the namespace ends with ('*' is any)")
    max_depth: int | None = Field(default=None, ge=1, le=MAX_POSITION, description="namespaces cut to this many labels")
    limit: int = Field(default=100, ge=0, le=MAX_PAGE)
    offset: int = Field(default=0, ge=0, le=MAX_POSITION)


class StoreItem(BaseModel):
    namespace: list[str]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class StoreSearchItem(StoreItem):
    score: float | None = None


class SearchItemsResponse(BaseModel):
    items: list[StoreSearchItem]


class NamespacesResponse(BaseModel):
    namespaces: list[list[str]]


# -- checks -------------------------------------------------------------------------------------


def _labels(labels: Sequence[str], what: str) -> tuple[str, ...]:
    for label in labels:
        if not label:
            raise Unprocessable(f"{what} {list(labels)} has an empty label; every label needs at least one character")
        if "." in label:
            raise Unprocessable(
                f"{what} label {label!r} contains a '.'; a namespace is a list of labels without dots, "
                f"e.g. {label.split('.')}"
            )
        if "\x00" in label:
            raise Unprocessable(f"{what} label {label!r} contains a NUL character; remove it")
    return tuple(labels)


def _namespace(labels: Sequence[str]) -> tuple[str, ...]:
    if not labels:
        raise Unprocessable("namespace is empty; give at least one label, e.g. ['users', 'u1']")
    return _labels(labels, "namespace")


def _key(key: str) -> str:
    if not key:
        raise Unprocessable("key is empty; give the item's key")
    return key


@contextlib.contextmanager
def _refused() -> Iterator[None]:
    """The store's own refusals (namespace, value, filter) as 422s with its message."""
    try:
        yield
    except (InvalidNamespaceError, InvalidStoreOp) as exc:
        raise Unprocessable(str(exc)) from exc


def _item(item: Item) -> dict[str, Any]:
    return {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": item.value,
        "created_at": item.created_at,
        "updated_at": item.updated_at,
    }


# -- routes -------------------------------------------------------------------------------------


@router.put("/store/items", status_code=204, response_class=Response, summary="Put an item")
async def put_item(request: Request, body: StorePutRequest) -> Response:
    namespace = _namespace(body.namespace)
    kv = studio_kv(request.app.state.studio)
    # no ttl given: the store's default (an explicit null: no expiry)
    ttl = body.ttl if "ttl" in body.model_fields_set else NOT_PROVIDED
    with _refused():
        await kv.aput(namespace, _key(body.key), body.value, index=body.index, ttl=ttl)
    return Response(status_code=204)


@router.get("/store/items", response_model=StoreItem | None, summary="Get an item (null when there is none)")
async def get_item(
    request: Request,
    namespace: str = Query(default="", description="the labels joined by '.', e.g. users.u1"),
    key: str = Query(default="", description="the item's key"),
    refresh_ttl: bool | None = Query(default=None),
) -> dict[str, Any] | None:
    labels = _namespace(namespace.split(".") if namespace else [])
    kv = studio_kv(request.app.state.studio)
    with _refused():
        item = await kv.aget(labels, _key(key), refresh_ttl=refresh_ttl)
    return None if item is None else _item(item)


@router.delete("/store/items", status_code=204, response_class=Response, summary="Delete an item")
async def delete_item(request: Request, body: StoreDeleteRequest) -> Response:
    namespace = _labels(body.namespace, "namespace")
    kv = studio_kv(request.app.state.studio)
    with _refused():
        await kv.adelete(namespace, _key(body.key))
    return Response(status_code=204)


@router.post("/store/items/search", response_model=SearchItemsResponse, summary="Search items")
async def search_items(request: Request, body: SearchItemsRequest) -> dict[str, Any]:
    prefix = _labels(body.namespace_prefix, "namespace_prefix")
    kv = studio_kv(request.app.state.studio)
    with _refused():
        items = await kv.asearch(
            prefix,
            query=body.query,
            filter=body.filter,
            limit=body.limit,
            offset=body.offset,
            refresh_ttl=body.refresh_ttl,
        )
    return {"items": [{**_item(i), "score": i.score} for i in items]}


@router.post("/store/namespaces", response_model=NamespacesResponse, summary="List namespaces")
async def list_namespaces(request: Request, body: ListNamespacesRequest) -> dict[str, Any]:
    prefix = _labels(body.prefix, "prefix") if body.prefix else None
    suffix = _labels(body.suffix, "suffix") if body.suffix else None
    kv = studio_kv(request.app.state.studio)
    with _refused():
        found = await kv.alist_namespaces(
            prefix=prefix, suffix=suffix, max_depth=body.max_depth, limit=body.limit, offset=body.offset
        )
    return {"namespaces": [list(ns) for ns in found]}
