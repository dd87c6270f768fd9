"""Runs started over HTTP: executed in-process as asyncio tasks, their stream parts kept for every viewer.

Each run executes the graph recorded through graphtape (``tape.record``) on
its thread, so it is on the tape like any other run; its graphtape run id is
the HTTP run id (and is in the run's metadata as ``graphtape_run_id``). The
parts LangGraph streams are kept in the run's list as SSE events, which is
what lets any number of viewers (``runs.stream``, ``runs.join_stream``) read
them from the start, and lets a viewer disconnect without stopping the run.

This slice keeps runs in memory in the serving process: a durable queue in
the store, executed by worker processes and recovered after a crash, is the
next slice (docs/server.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from langgraph.types import Command

from graphtape.serde import redact
from graphtape.server.studio.assistants import AssistantEntry, now_iso
from graphtape.server.studio.models import RunCreate
from graphtape.server.studio.problems import BadRequest, Conflict, NotFound
from graphtape.server.studio.publish import publisher_for, requested_modes
from graphtape.server.studio.threads import ThreadEntry
from graphtape.server.studio.wire import dumps, to_wire

__all__ = ["RunEntry", "Runs"]


@dataclass
class RunEntry:
    run_id: str
    thread_id: str
    assistant_id: str
    graph_id: str
    kwargs: dict[str, Any]
    metadata: dict[str, Any]
    multitask_strategy: str = "reject"
    status: str = "pending"
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    #: (event name, JSON text) in the order they were streamed
    events: list[tuple[str, str]] = field(default_factory=list)
    done: bool = False
    result: Any = None
    task: asyncio.Task[None] | None = None
    finish_task: asyncio.Future[None] | None = None
    #: called once the run has ended, before its waiters wake (a stateless run forgets its thread)
    on_done: Callable[[], None] | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    #: keys redacted beside the secret-looking ones (the tape's ``connect(redact=[...])``)
    redact_keys: frozenset[str] = frozenset()

    def describe(self) -> dict[str, Any]:
        """The run as the API shows it, secret-looking keys of its config and metadata redacted."""
        return {
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": self.assistant_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "status": self.status,
            "metadata": redact(self.metadata, self.redact_keys),
            "kwargs": redact(self.kwargs, self.redact_keys),
            "multitask_strategy": self.multitask_strategy,
        }

    async def publish(self, event: str, data: Any) -> None:
        self.events.append((event, dumps(data)))
        async with self.changed:
            self.changed.notify_all()

    async def finish(self) -> None:
        if self.on_done is not None:
            self.on_done()
        self.done = True
        self.updated_at = now_iso()
        async with self.changed:
            self.changed.notify_all()

    async def sse(self, heartbeat: float = 15.0, after: int = 0) -> AsyncIterator[str]:
        """The run's events after the ``after``-th, as SSE text, until the run ends. Each event's
        ``id:`` is its position (1 for the first), so a client reconnecting with ``Last-Event-ID``
        gets every event it missed exactly once; a comment line every ``heartbeat`` seconds without
        events keeps proxies and clients from timing the stream out."""
        sent = max(after, 0)
        while True:
            try:
                async with self.changed:
                    ready = self.changed.wait_for(lambda seen=sent: self.done or len(self.events) > seen)  # type: ignore[misc]
                    await asyncio.wait_for(ready, heartbeat)
            except TimeoutError:
                yield ": heartbeat\n\n"
                continue
            while sent < len(self.events):
                event, data = self.events[sent]
                sent += 1
                yield f"id: {sent}\nevent: {event}\ndata: {data}\n\n"
            if self.done and sent >= len(self.events):
                return

    async def wait(self) -> Any:
        """The run's result once it has ended: the thread's values (``__interrupt__``/``__error__`` added)."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.done)
        return self.result


async def _discard(event: str, data: Any) -> None:
    """An ``emit`` that keeps nothing (a publisher built only to check a run's kwargs)."""


def _check_config(config: dict[str, Any] | None) -> None:
    """Refuse a ``config`` whose parts LangGraph reads are of the wrong kind (before a run exists)."""
    given = config or {}
    for key in ("configurable", "metadata"):
        if given.get(key) is not None and not isinstance(given[key], dict):
            raise BadRequest(f"config.{key} must be an object, not {type(given[key]).__name__}")
    for key in ("recursion_limit", "max_concurrency"):
        value = given.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise BadRequest(f"config.{key} must be a positive integer")
    tags = given.get("tags")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        raise BadRequest("config.tags must be a list of strings")


def _graph_config(run: RunEntry) -> dict[str, Any]:
    """The LangGraph config of a run, from its stored kwargs (so any worker can rebuild it)."""
    given = dict(run.kwargs.get("config") or {})
    configurable = dict(given.get("configurable") or {})
    configurable["thread_id"] = run.thread_id
    checkpoint = dict(run.kwargs.get("checkpoint") or {})
    if checkpoint.get("checkpoint_id"):
        configurable["checkpoint_id"] = checkpoint["checkpoint_id"]
    if checkpoint.get("checkpoint_ns"):
        configurable["checkpoint_ns"] = checkpoint["checkpoint_ns"]
    config: dict[str, Any] = {k: given[k] for k in ("tags", "recursion_limit", "max_concurrency") if k in given}
    config["configurable"] = configurable
    config["run_id"] = uuid.UUID(run.run_id)
    config["metadata"] = {**(given.get("metadata") or {}), **run.metadata}
    return config


def _cancelled_before_start(run: RunEntry, thread: ThreadEntry) -> None:
    """A run cancelled before its task began never ran its own ending: end it here."""
    if not run.done:
        run.status = "interrupted"
        thread.touch("idle")
        run.result = {"__error__": {"error": "Cancelled", "message": "the run was cancelled before it started"}}
        run.finish_task = asyncio.ensure_future(run.finish())


class Runs:
    """The runs of one server process, by id, and the tasks executing them."""

    def __init__(self) -> None:
        self.entries: dict[str, RunEntry] = {}

    def active_on(self, thread_id: str) -> RunEntry | None:
        for run in self.entries.values():
            if run.thread_id == thread_id and not run.done:
                return run
        return None

    def get(self, thread_id: str, run_id: str) -> RunEntry:
        run = self.entries.get(run_id)
        if run is None or run.thread_id != thread_id:
            raise NotFound(f"no run {run_id!r} on thread {thread_id!r}; list them with GET /threads/{thread_id}/runs")
        return run

    def on_thread(self, thread_id: str, status: str | None, limit: int, offset: int) -> list[RunEntry]:
        found = [
            r for r in self.entries.values() if r.thread_id == thread_id and (status is None or r.status == status)
        ]
        found.reverse()  # newest first
        return found[offset : offset + limit]

    def last_on(self, thread_id: str) -> RunEntry | None:
        """The thread's newest run that has not ended (the one a queued run waits for)."""
        pending = [r for r in self.entries.values() if r.thread_id == thread_id and not r.done]
        return pending[-1] if pending else None

    async def start(
        self,
        thread: ThreadEntry,
        assistant: AssistantEntry,
        body: RunCreate,
        on_done: Callable[[], None] | None = None,
        *,
        protocol: str = "langgraph",
        protocol_options: dict[str, Any] | None = None,
    ) -> RunEntry:
        """Start a run on ``thread`` and return it, still pending. One run executes at a time per
        thread; what happens to a run started while another one runs is its ``multitask_strategy``:
        ``reject`` (409), ``interrupt``/``rollback`` (the running one is cancelled first: its work so
        far stays checkpointed and recorded) or ``enqueue`` (it starts when the others have ended).

        ``protocol`` names the publisher that turns the run's stream into events
        (:mod:`graphtape.server.studio.publish`); ``protocol_options`` are kept in the run's kwargs
        for it (JSON), since the run may execute in another worker."""
        _check_config(body.config)
        if assistant.config or assistant.context:  # an assistant made over HTTP: its config under the run's
            context = {**assistant.context, **(body.context or {})}
            body = body.model_copy(update={"config": assistant.run_config(body.config), "context": context or None})
            _check_config(body.config)
        checkpoint = dict(body.checkpoint or {})
        if body.checkpoint_id:
            checkpoint["checkpoint_id"] = body.checkpoint_id
        kwargs = {
            "input": to_wire(body.input),
            "command": to_wire(body.command.model_dump(exclude_none=True)) if body.command else None,
            "stream_mode": [body.stream_mode] if isinstance(body.stream_mode, str) else list(body.stream_mode or []),
            "stream_subgraphs": body.stream_subgraphs,
            "interrupt_before": body.interrupt_before,
            "interrupt_after": body.interrupt_after,
            "config": to_wire(body.config or {}),
            "context": to_wire(body.context or {}),
            "checkpoint": to_wire(checkpoint) or None,
            "protocol": protocol,
            **to_wire(protocol_options or {}),
        }
        run_id = str(uuid.uuid4())
        # refuse what the publisher cannot serve (an unknown stream mode...) before anything starts
        publisher_for(run_id, thread.thread_id, kwargs, _discard, frozenset())
        if protocol == "langgraph":
            kwargs["stream_mode"] = requested_modes(kwargs["stream_mode"])
        busy = self.active_on(thread.thread_id)
        after: RunEntry | None = None
        if busy is not None:
            if body.multitask_strategy == "reject":
                raise Conflict(
                    f"thread {thread.thread_id!r} already has a run in progress ({busy.run_id}); "
                    f"wait for it (GET /threads/{thread.thread_id}/runs/{busy.run_id}/join), cancel it, "
                    "or start this run with multitask_strategy 'enqueue' or 'interrupt'"
                )
            if body.multitask_strategy == "enqueue":
                after = self.last_on(thread.thread_id)
            else:
                while (running := self.active_on(thread.thread_id)) is not None:
                    await self.cancel(running, wait=True)
        metadata = {
            **(body.metadata or {}),
            "graph_id": assistant.graph_id,
            "assistant_id": assistant.assistant_id,
            "thread_id": thread.thread_id,
            "run_id": run_id,
            "graphtape_run_id": run_id,
        }
        run = RunEntry(
            run_id, thread.thread_id, assistant.assistant_id, assistant.graph_id, kwargs, metadata,
            multitask_strategy=body.multitask_strategy,
        )  # fmt: skip
        run.on_done = on_done
        run.redact_keys = assistant.recorded.tape.redact_keys
        self.entries[run_id] = run
        if thread.graph_id is None:
            thread.graph_id = assistant.graph_id
            thread.metadata.setdefault("graph_id", assistant.graph_id)
        thread.touch("busy")
        run.task = asyncio.create_task(self._execute(run, thread, assistant, after))
        run.task.add_done_callback(lambda task: _cancelled_before_start(run, thread))
        return run

    async def _execute(
        self,
        run: RunEntry,
        thread: ThreadEntry,
        assistant: AssistantEntry,
        after: RunEntry | None = None,
    ) -> None:
        """Execute ``run`` from its stored kwargs, its publisher turning the stream into its events."""
        publisher = publisher_for(run.run_id, run.thread_id, run.kwargs, run.publish, run.redact_keys)
        await publisher.started()
        try:
            # everything inside the try: whatever fails ends the run as failed, never leaves it hanging
            recorded = assistant.recorded
            config = _graph_config(run)
            kwargs: dict[str, Any] = {}
            for key in ("interrupt_before", "interrupt_after", "context"):
                if run.kwargs.get(key):
                    kwargs[key] = run.kwargs[key]
            run_input: Any = run.kwargs.get("input")
            if run.kwargs.get("command") is not None:
                run_input = Command(**run.kwargs["command"])
            if after is not None:
                await after.wait()
                thread.touch("busy")
            run.status = "running"
            if publisher.uses_events:
                async for event in recorded.astream_events(run_input, config, version="v2", **kwargs):
                    await publisher.event(event)
            else:
                subgraphs = publisher.subgraphs()
                parts = recorded.astream(
                    run_input, config, stream_mode=publisher.graph_modes(), subgraphs=subgraphs, **kwargs
                )
                async for item in parts:
                    if subgraphs:
                        namespace, mode, chunk = item
                    else:
                        namespace, (mode, chunk) = (), item
                    await publisher.part(tuple(namespace), mode, chunk)
            # the thread's values once the run has ended (``__interrupt__`` added when it paused)
            snap = await recorded.graph.aget_state({"configurable": {"thread_id": run.thread_id}})
            values = to_wire(snap.values)
            interrupts = to_wire(list(getattr(snap, "interrupts", ())))
            await publisher.ended(to_wire(snap.values), interrupts)
            if interrupts and isinstance(values, dict):
                values["__interrupt__"] = interrupts
            run.result = values
            run.status = "success"
            thread.touch("interrupted" if snap.next or interrupts else "idle")
        except asyncio.CancelledError:
            run.status = "interrupted"
            thread.touch("idle")
            run.result = {"__error__": {"error": "Cancelled", "message": "the run was cancelled"}}
            with contextlib.suppress(Exception):
                await publisher.cancelled()
        except Exception as exc:
            run.status = "error"
            thread.touch("error")
            error = {"error": type(exc).__name__, "message": str(exc)}
            run.result = {"__error__": error}
            await publisher.failed(error)
        finally:
            await run.finish()

    async def cancel(self, run: RunEntry, wait: bool) -> None:
        if run.task is not None and not run.done:
            run.task.cancel()
            if wait:
                with contextlib.suppress(asyncio.CancelledError):
                    await run.task
                await run.wait()  # a run cancelled before it began ends in a callback after its task

    async def shutdown(self) -> None:
        """Cancel the runs still executing (the server is stopping)."""
        tasks = [r.task for r in self.entries.values() if r.task is not None and not r.done]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
