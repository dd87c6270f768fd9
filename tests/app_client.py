"""An app started as a server starts it (its lifespan) and called in process with httpx.

Most Studio tests need no port: they open the app's lifespan (the run
executor, the publishers, the store) and talk to it through
``httpx.ASGITransport``. They share this one helper so that the start-up and
the shutdown are the same everywhere, and one check of the API's JSON error
bodies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

__all__ = ["app_client", "assert_error"]


@asynccontextmanager
async def app_client(app: Any, base_url: str = "http://localhost", **client: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Run ``app``'s lifespan and yield an ``httpx.AsyncClient`` calling it (``client``: more of its settings)."""
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url, **client) as c:
            yield c


def assert_error(r: httpx.Response, status: int, *words: str) -> None:
    """``r`` is the API's JSON error body with this status, no traceback, and a message naming every word."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["status"] == status and body["detail"] == body["error"]
    assert "Traceback" not in body["error"]
    for word in words:
        assert word in body["error"], body["error"]
