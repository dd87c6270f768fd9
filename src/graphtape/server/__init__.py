"""graphtape's HTTP server: ``/metrics`` for Prometheus and ``/healthz`` (``pip install 'graphtape[server]'``).

:func:`create_app` returns a small Starlette app that other features (the
studio) mount their routes on; ``graphtape serve`` runs it with uvicorn.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def create_app(tape: Any, **kwargs: Any) -> Any:
    """The ASGI app serving ``tape``; see :func:`graphtape.server.app.create_app`."""
    from graphtape.server.app import create_app as _create_app

    return _create_app(tape, **kwargs)
