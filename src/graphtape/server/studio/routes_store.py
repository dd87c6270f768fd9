"""Routes of the Studio API: store (being written; see docs/server.md)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["store"])
