"""Publishers: what turns a run's stream into the events its viewers read, one per wire protocol.

A run started over HTTP executes the recorded graph and hands everything it
streams to its publisher, which emits named events (``emit(event, data)``)
into the run's event log; viewers read that log, never the graph. The
LangGraph API's publisher emits ``metadata``, ``values``, ``updates``,
``messages``... as LangGraph's server does; the AG-UI publisher
(``graphtape.server.studio.agui``) emits AG-UI events for the same run.

Why a seam here rather than one translator per route: the protocol is chosen
when the run is created, but the run may execute later, in another worker or
another server process (the durable queue), so the publisher is rebuilt from
the run's stored ``kwargs`` by name (``kwargs["protocol"]``, see
:func:`publisher_for`), and everything it needs must be in those kwargs.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import Any

from graphtape.serde import redact
from graphtape.server.studio.messages import MessageAccumulator
from graphtape.server.studio.problems import BadRequest
from graphtape.server.studio.wire import to_wire

__all__ = [
    "GRAPH_STREAM_MODES",
    "PUBLISHERS",
    "Emit",
    "LangGraphPublisher",
    "Publisher",
    "publisher_for",
    "redacted_part",
    "register_publisher",
    "requested_modes",
]

#: writes one event into the run's log: ``await emit(event name, JSON-able data)``
Emit = Callable[[str, Any], Awaitable[None]]

#: the LangGraph API's stream modes and the LangGraph ``stream_mode`` each is served from
GRAPH_STREAM_MODES = {
    "values": "values",
    "updates": "updates",
    "messages-tuple": "messages",
    "messages": "messages",
    "custom": "custom",
    "debug": "debug",
    "tasks": "tasks",
    "checkpoints": "checkpoints",
}


def requested_modes(stream_mode: Any) -> list[str]:
    """The API stream modes a run asked for (``values`` when none), refusing unknown ones with a 400."""
    modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode or [])
    unserved = [m for m in modes if m not in GRAPH_STREAM_MODES and m != "events"]
    if unserved:
        served = ", ".join([*GRAPH_STREAM_MODES, "events"])
        raise BadRequest(f"stream mode {unserved[0]!r} is not served yet; use one of: {served}")
    if "events" in modes and len(set(modes)) > 1:
        raise BadRequest("stream mode 'events' cannot be combined with other modes yet; ask for it alone")
    return list(dict.fromkeys(modes)) or ["values"]


def redacted_part(mode: str, chunk: Any, keys: frozenset[str]) -> Any:
    """A stream part with secret-looking keys redacted where LangGraph copies the run's config:
    the metadata of ``messages`` parts, and ``debug``/``checkpoints``/``tasks`` parts. ``values``,
    ``updates`` and ``custom`` parts are the graph's own data and are sent as they are."""
    if mode == "messages" and isinstance(chunk, tuple) and len(chunk) == 2:
        return chunk[0], redact(to_wire(chunk[1]), keys)
    if mode == "events" and isinstance(chunk, dict):
        return {**to_wire(chunk), "metadata": redact(to_wire(chunk.get("metadata") or {}), keys)}
    if mode in ("debug", "checkpoints", "tasks"):
        return redact(to_wire(chunk), keys)
    return chunk


class Publisher(abc.ABC):
    """Receives a run's stream, in order, and emits its events.

    The executor calls :meth:`started` once, then :meth:`part` for each item
    ``astream`` yields (or :meth:`event` for each ``astream_events`` event when
    :attr:`uses_events`), then exactly one of :meth:`ended`, :meth:`failed` or
    :meth:`cancelled`.
    """

    def __init__(self, run_id: str, thread_id: str, kwargs: dict[str, Any], emit: Emit, redact_keys: frozenset[str]):
        self.run_id = run_id
        self.thread_id = thread_id
        self.kwargs = kwargs
        self.emit = emit
        self.redact_keys = redact_keys

    #: stream with ``astream_events(version="v2")`` instead of ``astream``
    uses_events: bool = False

    @abc.abstractmethod
    def graph_modes(self) -> list[str]:
        """The LangGraph ``stream_mode`` list to stream the graph with."""

    def subgraphs(self) -> bool:
        """Whether to stream subgraphs' parts too (``astream(subgraphs=True)``)."""
        return bool(self.kwargs.get("stream_subgraphs"))

    async def started(self) -> None:  # noqa: B027 - optional hook
        """The run is about to execute (after any run it waited for)."""

    async def part(self, namespace: tuple[str, ...], mode: str, chunk: Any) -> None:  # noqa: B027
        """One part ``astream`` yielded (namespace ``()`` for the root graph)."""

    async def event(self, event: dict[str, Any]) -> None:  # noqa: B027
        """One ``astream_events`` event (only when :attr:`uses_events`)."""

    async def ended(  # noqa: B027 - optional hook
        self, values: Any, interrupts: list[dict[str, Any]], next_nodes: list[str] | None = None
    ) -> None:
        """The run ended normally: ``values`` is the thread's state (JSON), ``interrupts`` the pending ones,
        ``next_nodes`` the nodes the thread runs next (set when it paused: at an interrupt, or at a
        breakpoint of the run's ``interrupt_before``/``interrupt_after``)."""

    async def failed(self, error: dict[str, Any]) -> None:  # noqa: B027
        """The run failed: ``{"error": type name, "message": ...}``."""

    async def cancelled(self) -> None:  # noqa: B027
        """The run was cancelled."""


class LangGraphPublisher(Publisher):
    """The LangGraph API's events: ``metadata`` first, then one event per part, named by its mode."""

    def __init__(self, run_id: str, thread_id: str, kwargs: dict[str, Any], emit: Emit, redact_keys: frozenset[str]):
        super().__init__(run_id, thread_id, kwargs, emit, redact_keys)
        self.modes = requested_modes(kwargs.get("stream_mode"))
        self.uses_events = self.modes == ["events"]
        self.legacy = MessageAccumulator()

    def graph_modes(self) -> list[str]:
        return list(dict.fromkeys(GRAPH_STREAM_MODES.get(m, m) for m in self.modes))

    async def started(self) -> None:
        await self.emit("metadata", {"run_id": self.run_id, "attempt": 1})

    async def part(self, namespace: tuple[str, ...], mode: str, chunk: Any) -> None:
        suffix = "|" + "|".join(namespace) if namespace else ""
        chunk = redacted_part(mode, chunk, self.redact_keys)
        if mode == "messages" and "messages" in self.modes:
            for event, data in self.legacy.feed(chunk):
                await self.emit(event + suffix, data)
            if "messages-tuple" not in self.modes:
                return
        await self.emit(mode + suffix, chunk)

    async def event(self, event: dict[str, Any]) -> None:
        await self.emit("events", redacted_part("events", event, self.redact_keys))

    async def failed(self, error: dict[str, Any]) -> None:
        await self.emit("error", error)


PublisherFactory = Callable[[str, str, dict[str, Any], Emit, frozenset[str]], Publisher]

#: publishers by protocol name (``kwargs["protocol"]``; ``langgraph`` when absent)
PUBLISHERS: dict[str, PublisherFactory] = {"langgraph": LangGraphPublisher}


def register_publisher(protocol: str, factory: PublisherFactory) -> None:
    """Make ``protocol`` a value runs may carry in ``kwargs["protocol"]``."""
    PUBLISHERS[protocol] = factory


def publisher_for(
    run_id: str, thread_id: str, kwargs: dict[str, Any], emit: Emit, redact_keys: frozenset[str]
) -> Publisher:
    """The publisher of a run, rebuilt from its stored kwargs."""
    protocol = kwargs.get("protocol") or "langgraph"
    factory = PUBLISHERS.get(protocol)
    if factory is None:
        raise BadRequest(f"unknown run protocol {protocol!r}; expected one of: {', '.join(sorted(PUBLISHERS))}")
    return factory(run_id, thread_id, kwargs, emit, redact_keys)
