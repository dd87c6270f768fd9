"""The legacy ``messages`` stream mode: whole messages so far, instead of LangGraph's (chunk, metadata) pairs.

``stream_mode="messages-tuple"`` sends LangGraph's pairs as they come. The
older ``messages`` mode of the LangGraph API sends, per message id, one
``messages/metadata`` event (``{id: {"metadata": ...}}``) when the message is
first seen, then ``messages/partial`` with the message accumulated so far for
each streamed chunk, or ``messages/complete`` for a message that arrives
whole (a tool's result, a model that did not stream). This keeps the
accumulation per run.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessageChunk

from graphtape.server.studio.wire import to_wire

__all__ = ["MessageAccumulator"]


class MessageAccumulator:
    """Turns LangGraph's ``messages`` parts into the legacy events, one run at a time."""

    def __init__(self) -> None:
        self.so_far: dict[str, Any] = {}

    def feed(self, part: Any) -> list[tuple[str, Any]]:
        """The (event, data) pairs for one ``(message, metadata)`` part."""
        message, metadata = part
        key = str(getattr(message, "id", None) or id(message))
        events: list[tuple[str, Any]] = []
        if key not in self.so_far:
            events.append(("messages/metadata", {key: {"metadata": to_wire(metadata)}}))
        if isinstance(message, BaseMessageChunk):
            previous = self.so_far.get(key)
            merged = message if not isinstance(previous, BaseMessageChunk) else previous + message
            self.so_far[key] = merged
            events.append(("messages/partial", [to_wire(merged)]))
        else:
            self.so_far[key] = message
            events.append(("messages/complete", [to_wire(message)]))
        return events
