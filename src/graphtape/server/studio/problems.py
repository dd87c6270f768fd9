"""The errors the Studio API answers with: a 4xx status and a message that says what to fix."""

from __future__ import annotations

from starlette.responses import JSONResponse

__all__ = ["BadRequest", "Conflict", "NotFound", "StudioProblem", "error_json"]


def error_json(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's error body, ``{"error", "detail", "status"}`` (``detail`` is where LangGraph clients look)."""
    return JSONResponse({"error": message, "detail": message, "status": status}, status_code=status, headers=headers)


class StudioProblem(Exception):
    """A request the server cannot carry out; ``status`` is the HTTP status of the JSON error body."""

    status = 400

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class BadRequest(StudioProblem):
    status = 400


class NotFound(StudioProblem):
    status = 404


class Conflict(StudioProblem):
    status = 409
