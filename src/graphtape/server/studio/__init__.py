"""The Studio server: recorded graphs served over the LangGraph API (``graphtape dev``; see docs/server.md).

``create_app(tape, {"agent": graph})`` is a FastAPI app that
``langgraph-sdk`` clients drive unchanged: assistants, threads, state,
history, runs (background, wait, stream), interrupts and resumes. Every run
started over HTTP is recorded on ``tape``. Needs ``pip install
'graphtape[server]'``.
"""

from __future__ import annotations

from graphtape.server.studio.app import DEFAULT_MAX_BODY_BYTES, create_app

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]
