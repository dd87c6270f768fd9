"""The Studio app: :func:`create_app` serves recorded graphs over the LangGraph API (FastAPI).

What the app adds around the routes, all of it what a server facing the
network needs by default:

* every error is a JSON body ``{"error", "detail", "status"}`` with a 4xx
  status and a message saying what to fix: bad JSON (400), a body that does
  not validate (422), unknown ids (404), a busy thread (409), a body larger
  than ``max_body_bytes`` (413). An unexpected failure is a 500 with a one-line
  message and never a traceback;
* the request guard (:mod:`graphtape.server.studio.guard`): the Host check,
  an optional token (``Authorization: Bearer <token>``, ``x-api-key`` as
  ``langgraph-sdk`` sends it, or the cookie ``?token=`` sets) required on every
  route but ``/ok``, the cross-site write defence and the body types;
* CORS for loopback origins and the origins given;
* ``OPTIONS`` on any route answers which methods it serves (``Allow``);
* ``/openapi.json`` generated from the models, and ``/docs``, a page that
  lists the operations from it without loading anything from a CDN.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

import graphtape
from graphtape.errors import GraphtapeError, ThreadBusy
from graphtape.server.studio import bounds, webui
from graphtape.server.studio.assistant_rows import StoredAssistants
from graphtape.server.studio.assistants import Assistants
from graphtape.server.studio.debug_sessions import DebugSessions
from graphtape.server.studio.guard import LOOPBACK_ORIGIN_REGEX, Guard, HostRule
from graphtape.server.studio.models import ErrorBody, ServerInfo
from graphtape.server.studio.problems import StudioProblem, error_json
from graphtape.server.studio.routes_agui import router as agui_router
from graphtape.server.studio.routes_assistants import router as assistants_router
from graphtape.server.studio.routes_runs import router as runs_router
from graphtape.server.studio.routes_store import router as store_router
from graphtape.server.studio.routes_store import studio_kv
from graphtape.server.studio.routes_tape import router as tape_router
from graphtape.server.studio.routes_threads import router as threads_router
from graphtape.server.studio.runs import Runs
from graphtape.server.studio.tape_actions import Actions
from graphtape.server.studio.threads import Threads
from graphtape.server.studio.workers import DEFAULT_CONCURRENCY, WorkerPool
from graphtape.store.kv import LazyStore
from graphtape.store.runqueue import run_queue_for

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Studio", "create_app", "error_json"]

#: the largest request body accepted by default (10 MiB)
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024


class Studio:
    """What the routes share: the tape, the served graphs, the threads and the runs.

    Threads and runs live in the store's run queue (shared by every server process on the store);
    this process's worker pool executes up to ``concurrency`` runs at once (0: none, an API-only
    process). ``lease_seconds``: how long a run (and its thread) stays claimed by a process that
    died; ``poll_seconds``: how often viewers and idle workers look for what other processes did."""

    def __init__(
        self,
        tape: Any,
        graphs: dict[str, Any],
        heartbeat_seconds: float = 15.0,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        lease_seconds: float = 15.0,
        poll_seconds: float = 0.1,
    ):
        self.tape = tape
        #: seconds without an event after which a stream sends an SSE comment line
        self.heartbeat_seconds = heartbeat_seconds
        # the graphs' LangGraph store is the one /store serves, opened when first used
        self.kv: Any = None
        self.assistants = Assistants(tape, graphs, store=LazyStore(lambda: studio_kv(self)))
        self.queue = run_queue_for(tape)
        # assistants made over HTTP live in the store beside the runs: every process sees them
        self.assistants.custom = StoredAssistants(self.queue, self.assistants)  # type: ignore[assignment]
        # the queue's own connections go with the app (tests make many apps on one store)
        weakref.finalize(self, self.queue.close)
        self.threads = Threads(tape, self.queue)
        self.runs = Runs(
            tape, self.queue, self.threads, self.assistants, lease_seconds=lease_seconds, poll_seconds=poll_seconds
        )
        self.workers = self.runs.pool = WorkerPool(self.runs, concurrency)
        #: the tape API's background replays/forks and its debugger sessions (routes_tape.py)
        self.actions = Actions()
        self.debug_sessions = DebugSessions()


def _validation_message(errors: Sequence[Any]) -> tuple[int, str]:
    """(status, message) for pydantic's errors: 400 for a body that is not JSON, else 422 naming each field."""
    for err in errors:
        if err.get("type") == "json_invalid":
            reason = (err.get("ctx") or {}).get("error", "")
            return 400, f"the request body is not valid JSON ({reason}); send a JSON object"
    parts = []
    for err in errors[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return 422, "invalid request: " + "; ".join(parts) + more


#: the methods a route may serve, asked of each route in turn by :func:`_allowed_methods`
_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path, OPTIONS included (answered on every
    route); none when no route serves the path. Each route is asked whether it takes the path with
    each method (the routes of an included router are only reachable that way), so the answer names
    every method of every route sharing the path."""
    # the app's own scope: a mounted app (the UI's assets) raised with its own root_path
    scope = {**request.scope, "root_path": request.scope.get("app_root_path", request.scope.get("root_path", ""))}
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(getattr(route, "app", None), StaticFiles):  # the UI's assets
            if route.matches(scope)[0] != Match.NONE:
                methods |= {"GET", "HEAD"}
            continue
        for method in _METHODS:
            if route.matches({**scope, "method": method})[0] == Match.FULL:
                methods.add(method)
    return sorted(methods | {"OPTIONS"}) if methods else []


def _routed(app: FastAPI, scope: Any) -> bool:
    """Whether a route of the app serves the request's method at its path (else the router answers
    404 or 405 without running anything)."""
    return any(route.matches(scope)[0] == Match.FULL for route in app.router.routes)


_DOCS_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>graphtape Studio API</title>
<style>body{font:14px system-ui,sans-serif;margin:2em;max-width:60em}code{background:#f3f3f3;padding:0 .3em}
.m{display:inline-block;width:4.5em;font-weight:bold}</style></head>
<body><h1>graphtape Studio API</h1>
<p>The machine-readable document is <a href="openapi.json">/openapi.json</a>.</p><div id="ops">loading...</div>
<script>
fetch("openapi.json").then(r => r.json()).then(doc => {
  const out = document.getElementById("ops"); out.textContent = "";
  for (const [path, ops] of Object.entries(doc.paths)) for (const [method, op] of Object.entries(ops)) {
    const p = document.createElement("p");
    const m = document.createElement("span"); m.className = "m"; m.textContent = method.toUpperCase();
    const c = document.createElement("code"); c.textContent = path;
    p.append(m, c, " " + (op.summary || "")); out.append(p);
  }
});
</script></body></html>
"""


def create_app(
    tape: Any,
    graphs: dict[str, Any],
    *,
    token: str | None = None,
    cors_origins: Sequence[str] = (),
    bind_host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_json_depth: int = bounds.DEFAULT_MAX_JSON_DEPTH,
    heartbeat_seconds: float = 15.0,
    concurrency: int = DEFAULT_CONCURRENCY,
    lease_seconds: float = 15.0,
    poll_seconds: float = 0.1,
) -> FastAPI:
    """The Studio ASGI app serving ``graphs`` (name -> compiled graph), every run recorded on ``tape``.

    ``token``: when given, every request but ``/ok`` must carry it (bearer,
    ``x-api-key`` or the cookie ``?token=`` sets). ``cors_origins``: the browser
    origins allowed to call the API beside the loopback ones (``http://localhost:*``,
    ...). ``bind_host``: the address the server listens on, whose name it answers
    for beside the loopback ones (any IP address and the machine's names on
    ``0.0.0.0``/``::``); ``allowed_hosts``: more names to answer for (a reverse
    proxy's; ``.example.com`` for it and every name under it, ``*`` for any). See
    :mod:`graphtape.server.studio.guard`. ``max_body_bytes``: larger request bodies get a 413.
    ``max_json_depth``: a body whose JSON nests deeper gets a 422 (:mod:`.bounds`).
    ``heartbeat_seconds``: a stream quiet for that long sends an SSE comment line.
    ``concurrency``, ``lease_seconds``, ``poll_seconds``: this process's worker pool (see
    :class:`Studio` and docs/server-runs.md); the pool starts with the app's lifespan, or with the
    first run queued when the ASGI server runs no lifespan.
    """
    studio = Studio(
        tape,
        graphs,
        heartbeat_seconds,
        concurrency=concurrency,
        lease_seconds=lease_seconds,
        poll_seconds=poll_seconds,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        studio.workers.start()
        try:
            yield
        finally:
            # the queue stays open: an ASGI server may run the lifespan again (its pool then restarts)
            await studio.runs.shutdown()
        await studio.actions.shutdown()
        await studio.debug_sessions.shutdown()

    app = FastAPI(
        title="graphtape Studio",
        version=graphtape.__version__,
        description="Runs, threads and state of graphs recorded by graphtape, over the LangGraph API.",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        responses={
            400: {"model": ErrorBody},
            404: {"model": ErrorBody},
            409: {"model": ErrorBody},
            422: {"model": ErrorBody},
        },
    )
    app.state.studio = studio

    def without_store_url(text: str) -> str:
        """An error's text with the store's URL taken out: it names the database (host, user,
        schema), which is the server's business, not a client's."""
        for url in {tape.url, studio.queue.url}:
            if url:
                text = text.replace(url, "the store")
        return text

    @app.exception_handler(StudioProblem)
    async def on_problem(request: Request, exc: StudioProblem) -> JSONResponse:
        return error_json(exc.status, without_store_url(exc.message))

    @app.exception_handler(RequestValidationError)
    async def on_invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = _validation_message(exc.errors())
        return error_json(status, message)

    @app.exception_handler(ValidationError)
    async def on_invalid_value(request: Request, exc: ValidationError) -> JSONResponse:
        status, message = _validation_message(exc.errors())
        return error_json(status, message)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}; the routes are listed at /docs"
        elif exc.status_code == 405:
            allowed = _allowed_methods(request)
            if request.method == "OPTIONS" and allowed:
                # not a CORS preflight (CORSMiddleware answers those): what the route serves, as HTTP says
                return Response(status_code=204, headers={"Allow": ", ".join(allowed)})
            message = (
                f"{request.method} is not allowed on {request.url.path}; use {', '.join(allowed)} "
                "(the routes are listed at /docs)"
            )
            return error_json(405, message, {"Allow": ", ".join(allowed)})
        return error_json(exc.status_code, message, getattr(exc, "headers", None))

    @app.exception_handler(ThreadBusy)
    async def on_busy(request: Request, exc: ThreadBusy) -> JSONResponse:
        return error_json(409, f"{exc}; wait for the thread's run to end")

    @app.exception_handler(GraphtapeError)
    async def on_graphtape_error(request: Request, exc: GraphtapeError) -> JSONResponse:
        return error_json(400, without_store_url(str(exc)))

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        text = without_store_url(" ".join(str(exc).split())[:300])
        return error_json(500, f"unexpected {type(exc).__name__}: {text} (a graphtape bug; the server log has more)")

    @app.get("/ok", tags=["server"])
    async def ok() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/info", tags=["server"], response_model=ServerInfo)
    async def info() -> dict[str, Any]:
        return {
            "version": graphtape.__version__,
            "flags": {"assistants": True, "crons": False, "langsmith": False, "store": True},
            "graphtape": {"store": tape.url, "graphs": sorted(graphs)},
        }

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(_DOCS_PAGE)

    app.include_router(assistants_router)
    app.include_router(threads_router)
    app.include_router(runs_router)
    app.include_router(store_router)
    app.include_router(tape_router)
    app.include_router(agui_router)
    webui.mount(app)

    bounds.install(app, max_json_depth)
    from fastapi.middleware.cors import CORSMiddleware

    # a front end on this machine (any port) works with no option; other origins when configured
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(cors_origins),
        allow_origin_regex=LOOPBACK_ORIGIN_REGEX,
        allow_methods=["*"],
        allow_headers=["*"],
    )
    # outermost: nothing runs for a request the guard refuses
    app.add_middleware(
        Guard,
        openapi=app.openapi,
        max_body_bytes=max_body_bytes,
        token=token,
        hosts=HostRule(bind_host, allowed_hosts),
        cors_origins=cors_origins,
        routed=lambda scope: _routed(app, scope),
    )
    return app
