"""The ASGI app: ``GET /metrics`` (Prometheus text format) and ``GET /healthz`` (JSON).

Kept to a factory so the studio can add its routes to the same app::

    app = create_app(tape)
    app.router.routes.append(Route("/api/runs", ...))

Endpoints are plain functions: Starlette runs them in its thread pool, so a
slow store never blocks the event loop. Every error is a JSON body
``{"error": ..., "status": ...}`` with a 4xx/5xx code, never an HTML page or
a traceback.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import graphtape
from graphtape.errors import GraphtapeError
from graphtape.runtime.stats import StatsCache, collect_stats

if TYPE_CHECKING:
    from graphtape.tape import Tape

#: The content type Prometheus expects for its text exposition format.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _MetricsSource:
    """Collects the stats at most once every ``cache_seconds`` (scrapes are often more frequent)."""

    def __init__(self, tape: Tape, options: dict[str, Any], cache_seconds: float):
        self.tape = tape
        self.options = options
        self.cache_seconds = cache_seconds
        self.cache = StatsCache()
        self._lock = threading.Lock()
        self._text: str | None = None
        self._at = 0.0

    def text(self) -> str:
        with self._lock:
            if self._text is None or time.monotonic() - self._at >= self.cache_seconds:
                stats = collect_stats(self.tape, cache=self.cache, **self.options)
                self._text = stats.to_prometheus()
                self._at = time.monotonic()
            return self._text


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status, headers=headers)


def create_app(
    tape: Tape,
    *,
    stuck_after: float = 300.0,
    size_warning: int = 1_000_000,
    limit_runs: int | None = 1000,
    cache_seconds: float = 5.0,
) -> Starlette:
    """A Starlette app serving ``tape``'s metrics and health.

    The stats options are those of :func:`~graphtape.runtime.stats.collect_stats`;
    ``cache_seconds`` is how long one collection answers scrapes.
    ``app.state.tape`` is the tape, for routes added later.
    """
    source = _MetricsSource(
        tape, {"stuck_after": stuck_after, "size_warning": size_warning, "limit_runs": limit_runs}, cache_seconds
    )

    def metrics(request: Request) -> Response:
        try:
            text = source.text()
        except GraphtapeError as exc:
            return error_response(503, f"the tape store did not answer: {exc}")
        except Exception as exc:
            return error_response(500, f"collecting metrics failed: {type(exc).__name__}: {exc}")
        return Response(text, headers={"content-type": METRICS_CONTENT_TYPE})

    def healthz(request: Request) -> Response:
        body: dict[str, Any] = {"status": "ok", "store": tape.url, "version": graphtape.__version__}
        try:
            tape.store.list_runs(limit=1)
        except Exception as exc:
            return JSONResponse({**body, "status": "error", "error": f"{type(exc).__name__}: {exc}"}, status_code=503)
        return JSONResponse(body)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error_response(exc.status_code, str(exc.detail), dict(exc.headers or {}))

    async def server_error(request: Request, exc: Exception) -> Response:
        return error_response(500, f"{type(exc).__name__}: {exc}")

    app = Starlette(
        routes=[
            Route("/metrics", metrics, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error, 500: server_error},
    )
    app.state.tape = tape
    return app
