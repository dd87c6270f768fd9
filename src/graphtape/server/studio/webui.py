"""The Studio web UI: the built assets shipped in the package (``graphtape/ui``), served at ``/``.

The UI is a single-page app (source in ``web/``, built by Vite into
``src/graphtape/ui``), so a user of ``graphtape dev`` never needs Node.js.
``/`` and every ``/ui/...`` path answer ``index.html`` (the app routes on the
client, so a deep link such as ``/ui/runs/<id>?checkpoint=<id>`` works on
reload); the scripts and styles are served from ``/ui-assets/``. The API
routes are registered before :func:`mount` runs and none of them starts with
``/ui``, so nothing is shadowed. When the assets were not built, ``/`` says
how to build them instead of failing.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import Scope

__all__ = ["ASSETS_PREFIX", "UI_DIR", "mount"]

#: where the built UI lives inside the package
UI_DIR = Path(__file__).resolve().parent.parent.parent / "ui"
#: the URL prefix of the built scripts and styles (Vite's ``base``)
ASSETS_PREFIX = "/ui-assets"

_NOT_BUILT = """<!doctype html>
<html><head><meta charset="utf-8"><title>graphtape Studio</title></head>
<body style="font:15px system-ui,sans-serif;margin:2em;max-width:50em">
<h1>graphtape Studio</h1>
<p>The web UI's assets are not built in this copy of graphtape. Build them from the repository with
<code>cd web &amp;&amp; npm ci &amp;&amp; npm run build</code> (writes <code>src/graphtape/ui/</code>), then restart
<code>graphtape dev</code>. The HTTP API works without them: see <a href="/docs">/docs</a>.</p>
</body></html>
"""

# the app shell is small and changes with each build; the browser asks again each time
_NO_CACHE = {"Cache-Control": "no-cache"}


class _Assets(StaticFiles):
    """Static files that the browser revalidates (the built names carry no hash)."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.setdefault("Cache-Control", "no-cache")
        return response


def mount(app: FastAPI, ui_dir: Path | None = None) -> None:
    """Serve the built web UI on ``app``: ``/``, ``/ui/...`` (the app shell) and ``/ui-assets/...``."""
    root = ui_dir or UI_DIR
    index = root / "index.html"

    async def shell() -> Response:
        if not index.is_file():
            return HTMLResponse(_NOT_BUILT, headers=_NO_CACHE)
        return FileResponse(index, media_type="text/html", headers=_NO_CACHE)

    app.add_api_route("/", shell, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui", shell, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/{rest:path}", shell, methods=["GET"], include_in_schema=False)
    if root.is_dir():
        app.mount(ASSETS_PREFIX, _Assets(directory=root), name="ui-assets")
