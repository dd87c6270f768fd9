"""The Studio serves its built web UI: the app shell at ``/`` and ``/ui/...``, assets at ``/ui-assets/``.

In process (ASGI) against the assets committed in ``src/graphtape/ui``, and
against an empty folder, where ``/`` must say how to build them. The API
routes must still answer JSON, not the app shell.
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

import httpx
from fastapi import FastAPI

import graphtape
from graphtape.server.studio import create_app, webui
from tests.studio_graphs import studio_graphs


@pytest.fixture
async def client(tmp_path):
    tape = graphtape.connect(f"sqlite:///{tmp_path / 'tape.db'}")
    app = create_app(tape, studio_graphs())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as c:
            yield c
    tape.close()


def test_the_built_assets_are_in_the_package():
    index = (webui.UI_DIR / "index.html").read_text()
    assert "/ui-assets/app.js" in index
    assert (webui.UI_DIR / "app.js").stat().st_size > 10_000
    names = {p.name for p in webui.UI_DIR.iterdir()}
    assert {"app.js", "favicon.svg", "index.css", "index.html"} <= names
    # the rest are the chunks loaded on demand (the editor, the diagram...), nothing else
    assert all(n.endswith((".js", ".css")) for n in names - {"favicon.svg", "index.html"}), names
    assert "editor.js" in names


@pytest.mark.parametrize("path", ["/", "/ui", "/ui/runs/abc123?checkpoint=cp1&call=c2", "/ui/new"])
async def test_the_app_shell_answers_the_root_and_every_ui_route(client, path):
    r = await client.get(path)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert '<div id="root"></div>' in r.text
    assert r.headers["cache-control"] == "no-cache"


async def test_assets_are_served_with_their_types(client):
    js = await client.get("/ui-assets/app.js")
    assert js.status_code == 200
    assert "javascript" in js.headers["content-type"]
    assert js.content == (webui.UI_DIR / "app.js").read_bytes()
    css = await client.get("/ui-assets/index.css")
    assert css.headers["content-type"].startswith("text/css")
    missing = await client.get("/ui-assets/nope.js")
    assert missing.status_code == 404


async def test_api_routes_are_not_shadowed(client):
    assert (await client.get("/ok")).json() == {"ok": True}
    info = await client.get("/info")
    assert info.headers["content-type"] == "application/json"
    assert "graphtape" in info.json()
    r = await client.get("/threads/not-a-thread")
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/json"
    assert (await client.get("/openapi.json")).json()["paths"]
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert not any(p.startswith("/ui") for p in paths)


async def test_without_built_assets_the_root_says_how_to_build_them(tmp_path):
    app = FastAPI()
    webui.mount(app, tmp_path / "missing")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as c:
        r = await c.get("/")
        assert r.status_code == 200
        assert "npm ci" in r.text and "npm run build" in r.text
        assert (await c.get("/ui/runs/x")).status_code == 200
        assert (await c.get("/ui-assets/app.js")).status_code == 404
