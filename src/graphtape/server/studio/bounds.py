"""Bounded input: how deep a request's JSON may nest, checked on its bytes before anything parses it.

A body nested hundreds of levels deep is small (``[`` times 900) but breaks
what reads it: Python's JSON and graph code recurse (``RecursionError``), and
pydantic refuses to serialise a value deeper than 254 levels, so a thread
whose metadata was stored that deep made every later ``POST
/threads/search`` fail. :class:`JsonDepthLimit` refuses such a body with a
422 naming the limit before any route runs; the run queue refuses to store a
value deeper than :data:`~graphtape.store.runqueue_base.MAX_STORED_DEPTH`,
whatever the limit here (:func:`install` answers that with a 422 too), so
nothing that cannot be read back is stored.

Integers a query binds (offsets, limits, sequence numbers) are bounded the same
way, by :data:`MAX_POSITION` on each field that takes one.

Tape files (``application/x-ndjson``, ``application/octet-stream``) are not
scanned: they are read line by line by the importer, not parsed as one value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from graphtape.jsontext import json_depth
from graphtape.server.studio.guard import replayed
from graphtape.store.runqueue_base import MAX_STORED_DEPTH, UnreadableValue

__all__ = ["DEFAULT_MAX_JSON_DEPTH", "MAX_POSITION", "JsonDepthLimit", "install"]

#: the largest offset, limit or sequence number a request may give (a 422 beyond): the largest
#: integer a JavaScript client sends exactly, and far inside the signed 64-bit integers the stores'
#: queries bind (SQLite refuses a larger one with an OverflowError), even with a page added to it
MAX_POSITION = 2**53 - 1

#: the deepest nesting of arrays and objects a request body may have by default
DEFAULT_MAX_JSON_DEPTH = 100

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: content types whose bodies are tape files, read line by line (not one JSON value)
_NOT_SCANNED = ("application/x-ndjson", "application/octet-stream")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "detail": message, "status": status}, status_code=status)


class JsonDepthLimit:
    """ASGI middleware: a request body whose JSON nests deeper than ``max_depth`` gets a 422.

    The body is read whole (the body size limit, outside this middleware, bounds it), its
    brackets counted outside strings (:func:`graphtape.jsontext.json_depth`), and then handed on
    unchanged to the route."""

    def __init__(self, app: ASGIApp, max_depth: int = DEFAULT_MAX_JSON_DEPTH):
        self.app = app
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        kind = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
        if kind in _NOT_SCANNED:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        depth = json_depth(body)
        if depth > self.max_depth:
            refusal = (
                f"the request body nests arrays and objects {depth} levels deep; the limit is "
                f"{self.max_depth} (create_app(max_json_depth=...)): send flatter JSON"
            )
            await _error(422, refusal)(scope, receive, send)
            return
        await self.app(scope, replayed(body, receive), send)


def install(app: FastAPI, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> None:
    """Bound ``app``'s input: :class:`JsonDepthLimit` on every request, and a 422 for a value the
    run queue refuses to store (:class:`~graphtape.store.runqueue_base.UnreadableValue`).

    ``max_depth`` above the queue's own bound is refused: such bodies would be accepted and then
    not stored."""
    if not 1 <= max_depth <= MAX_STORED_DEPTH - 20:
        raise ValueError(
            f"max_json_depth must be between 1 and {MAX_STORED_DEPTH - 20} (deeper values cannot be stored "
            f"and read back), not {max_depth}"
        )

    @app.exception_handler(UnreadableValue)
    async def on_unreadable(request: Request, exc: UnreadableValue) -> JSONResponse:
        return _error(422, str(exc))

    app.add_middleware(JsonDepthLimit, max_depth=max_depth)
