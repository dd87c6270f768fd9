"""Helpers for testing agents and graphtape itself, offline.

:class:`SeededChatModel` stands in for a hosted chat model; the live-call
guard (:func:`forbid_live_calls`, :func:`tracked`, :func:`live_call_counts`)
proves that a replay served everything from the tape instead of running
models, tools or effects again.
"""

from graphtape.testing.guard import (
    LiveCallForbidden,
    check_live,
    forbid_live_calls,
    live_call_counts,
    reset_live_calls,
    tracked,
)
from graphtape.testing.models import SeededChatModel

__all__ = [
    "LiveCallForbidden",
    "SeededChatModel",
    "check_live",
    "forbid_live_calls",
    "live_call_counts",
    "reset_live_calls",
    "tracked",
]
