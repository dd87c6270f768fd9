"""Routes of the Studio API: graphtape (being written; see docs/server.md)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["graphtape"])
