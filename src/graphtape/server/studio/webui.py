"""The Studio web UI: built assets shipped in the package, served at ``/`` (being written)."""

from __future__ import annotations

from fastapi import FastAPI


def mount(app: FastAPI) -> None:
    """Serve the built web UI on ``app`` (nothing yet: the UI is being written)."""
