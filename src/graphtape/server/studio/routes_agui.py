"""Routes of the Studio API: ag-ui (being written; see docs/server.md)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["ag-ui"])
