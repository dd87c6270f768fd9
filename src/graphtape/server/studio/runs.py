"""Runs started over HTTP: queued in the store, executed by a worker pool, read back by any viewer.

:meth:`Runs.start` checks a run and puts it in the store's run queue
(:mod:`graphtape.store.runqueue`); it never executes it. A worker pool
(:mod:`graphtape.server.studio.workers`) in some server process on the same
store claims it and calls :meth:`Runs.execute`, which runs the graph recorded
through graphtape (``tape.record``) on the run's thread, so it is on the tape
like any other run; its graphtape run id is the HTTP run id (and is in the
run's metadata as ``graphtape_run_id``; the graph is not given that key, so
its checkpoints and stream parts carry the metadata LangGraph's server
gives a graph). Everything the graph streams goes
through the run's publisher (:mod:`graphtape.server.studio.publish`), whose
``emit`` appends to the run's event log in the store.

Viewers (``runs.stream``, ``runs.join_stream``, ``wait``, ``join``) read the
log and the run's status from the store, through one :class:`RunFeed` per run
per process: the feed polls the store while someone watches (every half
``poll_seconds``) and is woken at once by appends made in this process, so
many viewers of one run cost one reader, and a viewer reconnecting with
``Last-Event-ID`` to any process gets every later event exactly once.

A run whose worker died (its lease expired) is claimed again by another
worker, which finishes it through graphtape's crash recovery: calls the
first attempt completed are served from the tape, not made again, and the
events go on in the same log after a ``metadata`` event with
``resumed_after_crash`` (see :meth:`Runs.execute`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from graphtape.errors import LeaseLost
from graphtape.serde import redact
from graphtape.server.studio.assistants import AssistantEntry
from graphtape.server.studio.models import RunCreate
from graphtape.server.studio.problems import BadRequest, Conflict, NotFound
from graphtape.server.studio.publish import LangGraphPublisher, Publisher, publisher_for, requested_modes
from graphtape.server.studio.recovering import resumption
from graphtape.server.studio.threads import ThreadEntry, Threads, iso
from graphtape.server.studio.wire import dumps, to_wire
from graphtape.store.runqueue import ACTIVE, QueuedRun, RunEvent, RunQueue

if TYPE_CHECKING:
    from graphtape.server.studio.assistants import Assistants
    from graphtape.server.studio.workers import WorkerPool

__all__ = ["CANCELLED", "CANCELLED_BEFORE_START", "RunEntry", "RunFeed", "Runs", "graph_config"]

log = logging.getLogger(__name__)

#: the result of a run cancelled while it ran, and of one cancelled before it began
CANCELLED = {"__error__": {"error": "Cancelled", "message": "the run was cancelled"}}
CANCELLED_BEFORE_START = {"__error__": {"error": "Cancelled", "message": "the run was cancelled before it started"}}


class RunFeed:
    """A run's events and status as this process has read them, shared by its viewers here."""

    def __init__(self, runs: Runs, run_id: str):
        self.runs = runs
        self.run_id = run_id
        #: the events read so far, from seq 1, in order
        self.events: list[RunEvent] = []
        self.row: QueuedRun | None = None
        self.done = False
        self.viewers = 0
        self._changed = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def pushed(self, event: RunEvent) -> None:
        """An event this process appended: shown at once (when it is the next one)."""
        if event.seq == len(self.events) + 1:
            self.events.append(event)
            self._notify()

    def ended(self, row: QueuedRun) -> None:
        """This process ended the run: its viewers here read the last events and stop."""
        self.row = row
        self._notify()  # the poller reads the end

    def refresh(self) -> bool:
        """Read what is new in the store; whether anything changed."""
        queue = self.runs.queue
        new = queue.events(self.run_id, after=len(self.events))
        if new:
            self.events.extend(new)
            self._notify()
            return True
        row = queue.get(self.run_id)
        self.row = row if row is not None else self.row
        if row is None or row.done:
            # events appended between the read above and the run's end are read once more
            self.events.extend(queue.events(self.run_id, after=len(self.events)))
            self.done = True
            self._notify()
            return True
        return False

    async def _poll(self) -> None:
        try:
            while self.viewers > 0 and not self.done:
                try:
                    changed = self.refresh()
                except Exception as exc:  # the store is restarting: the viewers wait, heartbeats go on
                    log.warning("graphtape studio: reading run %s failed: %s", self.run_id, exc)
                    changed = False
                if not changed:
                    # twice as often as idle workers: an event appended by another process reaches
                    # its viewers here within half a poll interval
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), self.runs.poll_seconds / 2)
        finally:
            self._poller = None
            if self.viewers <= 0 or self.done:
                self.runs._drop_feed(self)

    async def wait_change(self, timeout: float) -> None:
        """Until the feed changes, or ``timeout`` seconds (then :class:`TimeoutError`)."""
        if self._poller is None and not self.done:
            self._poller = asyncio.create_task(self._poll())
        await asyncio.wait_for(self._changed.wait(), timeout)

    @contextlib.contextmanager
    def watched(self) -> Iterator[RunFeed]:
        self.viewers += 1
        if self._poller is None and not self.done:
            self._poller = asyncio.create_task(self._poll())
        try:
            yield self
        finally:
            self.viewers -= 1
            if self.viewers <= 0 and self._poller is None:
                self.runs._drop_feed(self)


class RunEntry:
    """A run of the queue as a request sees it: its row, read from the store when asked for."""

    def __init__(self, runs: Runs, row: QueuedRun):
        self.runs = runs
        self.row = row

    @property
    def run_id(self) -> str:
        return self.row.run_id

    @property
    def thread_id(self) -> str:
        return self.row.thread_id

    @property
    def assistant_id(self) -> str:
        return self.row.assistant_id

    @property
    def graph_id(self) -> str:
        return self.row.graph_id

    @property
    def status(self) -> str:
        return self.row.status

    @property
    def done(self) -> bool:
        return self.row.done

    @property
    def kwargs(self) -> dict[str, Any]:
        return self.row.kwargs

    @property
    def metadata(self) -> dict[str, Any]:
        return self.row.metadata

    def describe(self) -> dict[str, Any]:
        """The run as the API shows it, secret-looking keys of its config and metadata redacted."""
        row, keys = self.row, self.runs.redact_keys
        return {
            "run_id": row.run_id,
            "thread_id": row.thread_id,
            "assistant_id": row.assistant_id,
            "created_at": iso(row.created_at),
            "updated_at": iso(row.updated_at),
            "status": row.status,
            "metadata": redact(row.metadata, keys),
            "kwargs": redact({k: v for k, v in row.kwargs.items() if k != "temporary_thread"}, keys),
            "multitask_strategy": row.multitask_strategy,
        }

    async def sse(self, heartbeat: float = 15.0, after: int = 0) -> AsyncIterator[str]:
        """The run's events after the ``after``-th, as SSE text, until the run ends. Each event's
        ``id:`` is its position (1 for the first), so a client reconnecting with ``Last-Event-ID``
        (to this process or another on the same store) gets every event it missed exactly once; a
        comment line every ``heartbeat`` seconds without events keeps proxies from timing it out."""
        sent = max(after, 0)
        feed = self.runs.feed(self.run_id)
        with feed.watched():
            while True:
                while sent < len(feed.events):
                    ev = feed.events[sent]
                    sent += 1
                    yield f"id: {ev.seq}\nevent: {ev.event}\ndata: {ev.data}\n\n"
                if feed.done and sent >= len(feed.events):
                    return
                try:
                    await feed.wait_change(heartbeat)
                except TimeoutError:
                    yield ": heartbeat\n\n"

    async def wait(self) -> Any:
        """The run's result once it has ended: the thread's values (``__interrupt__``/``__error__`` added)."""
        feed = self.runs.feed(self.run_id)
        with feed.watched():
            while not feed.done:
                with contextlib.suppress(TimeoutError):
                    await feed.wait_change(60.0)
        if feed.row is not None:
            self.row = feed.row
        return self.row.result


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


#: the key of the graphtape run id in an HTTP run's metadata (the API's run record, not the graph's config)
GRAPHTAPE_RUN_KEY = "graphtape_run_id"


def graph_config(run: QueuedRun, *, graphtape_run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    """The LangGraph config of a run, from its stored kwargs (so any worker can rebuild it).

    ``resume``: continue from the thread's last checkpoint (a recovery), not the one the run asked for."""
    given = dict(run.kwargs.get("config") or {})
    configurable = dict(given.get("configurable") or {})
    configurable["thread_id"] = run.thread_id
    checkpoint = dict(run.kwargs.get("checkpoint") or {})
    if checkpoint.get("checkpoint_id") and not resume:
        configurable["checkpoint_id"] = checkpoint["checkpoint_id"]
    if checkpoint.get("checkpoint_ns") and not resume:
        configurable["checkpoint_ns"] = checkpoint["checkpoint_ns"]
    config: dict[str, Any] = {k: given[k] for k in ("tags", "recursion_limit", "max_concurrency") if k in given}
    config["configurable"] = configurable
    config["run_id"] = uuid.UUID(graphtape_run_id or run.run_id)
    # the run's own metadata, as LangGraph's server passes it to the graph, without graphtape's key:
    # it would be copied into every checkpoint and stream part (the graph's run is found by its run id)
    metadata = {**(given.get("metadata") or {}), **run.metadata}
    metadata.pop(GRAPHTAPE_RUN_KEY, None)
    config["metadata"] = metadata
    return config


class Runs:
    """The runs of every server process on one store: started into the queue, executed by workers."""

    def __init__(
        self,
        tape: Any,
        queue: RunQueue,
        threads: Threads,
        assistants: Assistants,
        *,
        lease_seconds: float = 15.0,
        poll_seconds: float = 0.1,
    ):
        self.tape = tape
        self.queue = queue
        self.threads = threads
        self.assistants = assistants
        #: how long a worker's claim on a run (and a run's claim on its thread) outlives its process
        self.lease_seconds = lease_seconds
        #: how often viewers and idle workers look at the store for what other processes did
        self.poll_seconds = poll_seconds
        self.redact_keys: frozenset[str] = getattr(tape, "redact_keys", frozenset())
        self.feeds: dict[str, RunFeed] = {}
        #: the pool executing runs in this process (set by the app; started on first use)
        self.pool: WorkerPool | None = None
        self._background: set[asyncio.Task[None]] = set()

    # -- feeds -------------------------------------------------------------------------------

    def feed(self, run_id: str) -> RunFeed:
        feed = self.feeds.get(run_id)
        if feed is None:
            feed = self.feeds[run_id] = RunFeed(self, run_id)
            if self.pool is not None:
                self.pool.listen()
        return feed

    def noticed(self, run_id: str) -> None:
        """The store says another process appended to (or ended) the run: its viewers here read now."""
        feed = self.feeds.get(run_id)
        if feed is not None:
            feed._notify()

    def _drop_feed(self, feed: RunFeed) -> None:
        if feed.viewers <= 0 and self.feeds.get(feed.run_id) is feed:
            del self.feeds[feed.run_id]

    # -- reading -----------------------------------------------------------------------------

    def active_on(self, thread_id: str) -> RunEntry | None:
        """The thread's oldest run that has not ended (the one executing, or next to)."""
        rows = self.queue.list_runs(thread_id=thread_id, statuses=ACTIVE)
        return RunEntry(self, rows[-1]) if rows else None

    def get(self, thread_id: str, run_id: str) -> RunEntry:
        row = self.queue.get(run_id)
        if row is None or row.thread_id != thread_id:
            raise NotFound(f"no run {run_id!r} on thread {thread_id!r}; list them with GET /threads/{thread_id}/runs")
        return RunEntry(self, row)

    def on_thread(self, thread_id: str, status: str | None, limit: int, offset: int) -> list[RunEntry]:
        rows = self.queue.list_runs(
            thread_id=thread_id, statuses=None if status is None else [status], limit=limit, offset=offset
        )
        return [RunEntry(self, r) for r in rows]

    def matching(self, thread_id: str | None, run_ids: list[str] | None, status: str | None) -> list[RunEntry]:
        """Runs not ended yet: a thread's, some ids, or by status (``pending``, ``running``, ``all``)."""
        statuses = ACTIVE if status in (None, "all") else [s for s in ACTIVE if s == status]
        rows = self.queue.list_runs(thread_id=thread_id, statuses=statuses)
        return [RunEntry(self, r) for r in rows if run_ids is None or r.run_id in run_ids]

    def delete(self, run: RunEntry) -> None:
        """Forget an ended run in the API (its recording stays on the tape)."""
        fresh = self.queue.get(run.run_id)
        if fresh is not None and not fresh.done:
            raise Conflict(f"run {run.run_id!r} is still running; cancel it first (POST .../runs/{run.run_id}/cancel)")
        self.queue.delete_run(run.run_id)

    # -- starting and cancelling ---------------------------------------------------------------

    async def start(
        self,
        thread: ThreadEntry,
        assistant: AssistantEntry,
        body: RunCreate,
        on_done: Callable[[], None] | None = None,
        *,
        protocol: str = "langgraph",
        protocol_options: dict[str, Any] | None = None,
        temporary_thread: bool = False,
    ) -> RunEntry:
        """Queue a run on ``thread`` and return it, pending. One run executes at a time per thread;
        what happens to a run started while another one is active is its ``multitask_strategy``,
        decided in the store: ``reject`` (409), ``interrupt``/``rollback`` (the active ones are
        cancelled: their work so far stays checkpointed and recorded, and this one runs once they
        have stopped) or ``enqueue`` (it runs when the others have ended).

        ``protocol`` names the publisher that turns the run's stream into events
        (:mod:`graphtape.server.studio.publish`); ``protocol_options`` are kept in the run's kwargs
        for it (JSON), since the run may execute in another process. ``temporary_thread``: forget
        the thread once the run ends (a stateless run's). ``on_done`` is called in this process
        when the run ends, if this process is still serving then."""
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
        if temporary_thread:
            kwargs["temporary_thread"] = True
        run_id = str(uuid.uuid4())
        # refuse what the publisher cannot serve (an unknown stream mode...) before anything is queued
        publisher_for(run_id, thread.thread_id, kwargs, _discard, frozenset())
        if protocol == "langgraph":
            kwargs["stream_mode"] = requested_modes(kwargs["stream_mode"])
        metadata = {
            **(body.metadata or {}),
            "graph_id": assistant.graph_id,
            "assistant_id": assistant.assistant_id,
            "thread_id": thread.thread_id,
            "run_id": run_id,
            GRAPHTAPE_RUN_KEY: run_id,
        }
        row = QueuedRun(
            run_id, thread.thread_id, assistant.assistant_id, assistant.graph_id, kwargs, metadata,
            multitask_strategy=body.multitask_strategy,
        )  # fmt: skip
        # busy before the run is queued: a worker of another process may end it before this returns
        # (refused, the thread is busy anyway: another run is active on it)
        fields: dict[str, Any] = {"status": "busy"}
        if thread.graph_id is None:
            fields["graph_id"] = assistant.graph_id
        # as LangGraph's server does: the thread carries the graph and the assistant of its latest run,
        # so a front end configured with either (Agent Chat UI: a graph name or a UUID) finds it
        ran_by = {"graph_id": assistant.graph_id, "assistant_id": assistant.assistant_id}
        if any(thread.metadata.get(k) != v for k, v in ran_by.items()):
            fields["metadata"] = {**thread.metadata, **ran_by}
        self.threads.update(thread, **fields)
        queued = self.queue.enqueue(row, strategy=body.multitask_strategy, cancel_result=CANCELLED_BEFORE_START)
        if queued.run is None:
            busy = queued.active[0].run_id
            raise Conflict(
                f"thread {thread.thread_id!r} already has a run in progress ({busy}); "
                f"wait for it (GET /threads/{thread.thread_id}/runs/{busy}/join), cancel it, "
                "or start this run with multitask_strategy 'enqueue' or 'interrupt'"
            )
        if body.multitask_strategy in ("interrupt", "rollback") and self.pool is not None:
            for other in queued.active:
                self.pool.cancel_local(other.run_id)
        run = RunEntry(self, queued.run)
        if self.pool is not None:
            self.pool.wake()
        if on_done is not None:
            task = asyncio.create_task(self._call_when_done(run, on_done))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return run

    @staticmethod
    async def _call_when_done(run: RunEntry, on_done: Callable[[], None]) -> None:
        await RunEntry(run.runs, run.row).wait()
        on_done()

    async def cancel(self, run: RunEntry, wait: bool) -> None:
        """Cancel a run wherever it executes: a pending one ends at once; the worker executing a
        running one (in any process) sees the request with its next heartbeat and stops it."""
        rows = self.queue.request_cancel([run.run_id], CANCELLED_BEFORE_START)
        if rows:
            run.row = rows[0]
        if self.pool is not None:
            self.pool.cancel_local(run.run_id)
        if wait:
            await run.wait()

    # -- executing (called by a worker that claimed the run) -------------------------------------

    async def execute(self, row: QueuedRun, worker: str) -> None:
        """Execute a claimed run from its stored kwargs, its publisher appending its events.

        A run claimed for the second time or more (``attempt`` > 1: its worker died) is recovered
        when its graphtape run is on the tape, unfinished: the thread's lease is awaited (the dead
        process's expires), the run resumes from the thread's last checkpoint as a graphtape
        recovery run (every call the first attempt completed served from the tape) and its events
        go on after the ones already in the log."""

        async def emit(event: str, data: Any) -> None:
            text = dumps(data)
            seq = self.queue.append(row.run_id, worker, event, text)
            feed = self.feeds.get(row.run_id)
            if feed is not None:
                feed.pushed(RunEvent(row.run_id, seq, event, text))

        publisher = publisher_for(row.run_id, row.thread_id, row.kwargs, emit, self.redact_keys)
        status, result, thread_status = "error", None, "error"
        lost = False
        try:
            try:
                result, thread_status = await self._run_graph(row, worker, publisher)
                status = "success"
            except asyncio.CancelledError:
                if self.pool is not None and self.pool.lost(row.run_id):
                    lost = True
                    raise
                status, result, thread_status = "interrupted", CANCELLED, "idle"
                with contextlib.suppress(Exception):
                    await publisher.cancelled()
            except LeaseLost:
                lost = True
                return
            except Exception as exc:
                error = {"error": type(exc).__name__, "message": str(exc)}
                status, result, thread_status = "error", {"__error__": error}, "error"
                with contextlib.suppress(LeaseLost):
                    await publisher.failed(error)
        finally:
            if not lost:
                self.queue.finish(row.run_id, worker, status, result)
                if row.kwargs.get("temporary_thread"):
                    self.threads.forget(row.thread_id)
                else:
                    self.threads.set_status(row.thread_id, thread_status)
                self._ended(row.run_id)
                if self.pool is not None:
                    self.pool.wake()

    def _ended(self, run_id: str) -> None:
        """Wake this process's viewers of a run that just ended here."""
        feed = self.feeds.get(run_id)
        ended = self.queue.get(run_id) if feed is not None else None
        if feed is not None and ended is not None:
            feed.ended(ended)

    def ended_unstarted(self, row: QueuedRun, worker: str) -> None:
        """End a claimed run whose execution was cancelled before it began (a no-op once it ended)."""
        with contextlib.suppress(Exception):
            if self.queue.finish(row.run_id, worker, "interrupted", CANCELLED):
                self.threads.set_status(row.thread_id, "idle")
                self._ended(row.run_id)

    async def _run_graph(self, row: QueuedRun, worker: str, publisher: Publisher) -> tuple[Any, str]:
        """Stream the graph through ``publisher``; ``(the run's result, the thread's status after)``."""
        assistant = self.assistants.find(row.graph_id)
        if assistant is None:
            raise LookupError(f"graph {row.graph_id!r} is not served by this process")
        resumed = await resumption(self, row, assistant)
        if row.events == 0:
            await publisher.started()
        if resumed is not None:
            await _announce(publisher, row, resumed.graphtape_run_id)
        if resumed is not None and resumed.finished:
            recorded = assistant.recorded
        else:
            recorded = resumed.recorded if resumed is not None else assistant.recorded
            recorded.lease_ttl = self.lease_seconds
            await self._thread_free(row.thread_id, None if resumed is not None else self.lease_seconds + 5)
            if resumed is not None:
                config = graph_config(row, graphtape_run_id=resumed.graphtape_run_id, resume=resumed.from_checkpoint)
                run_input = resumed.input
            else:
                config, run_input = graph_config(row), row.kwargs.get("input")
                if row.kwargs.get("command") is not None:
                    run_input = Command(**row.kwargs["command"])
            kwargs: dict[str, Any] = {}
            for key in ("interrupt_before", "interrupt_after", "context"):
                if row.kwargs.get(key):
                    kwargs[key] = row.kwargs[key]
            if publisher.uses_events:
                events = recorded.astream_events(run_input, config, version="v2", **kwargs)
                await _relay(events, publisher.event)
            else:
                subgraphs = publisher.subgraphs()
                parts = recorded.astream(
                    run_input, config, stream_mode=publisher.graph_modes(), subgraphs=subgraphs, **kwargs
                )

                async def part(item: Any) -> None:
                    if subgraphs:
                        namespace, mode, chunk = item
                    else:
                        namespace, (mode, chunk) = (), item
                    await publisher.part(tuple(namespace), mode, chunk)

                await _relay(parts, part)
        # the thread's values once the run has ended (``__interrupt__`` added when it paused)
        snap = await recorded.graph.aget_state({"configurable": {"thread_id": row.thread_id}})
        values = to_wire(snap.values)
        interrupts = to_wire(list(getattr(snap, "interrupts", ())))
        await publisher.ended(to_wire(snap.values), interrupts, [str(n) for n in snap.next])
        if interrupts and isinstance(values, dict):
            values["__interrupt__"] = interrupts
        return values, "interrupted" if snap.next or interrupts else "idle"

    async def _thread_free(self, thread_id: str, timeout: float | None) -> None:
        """Until no process holds the thread's lease (a dead one's expires), or ``timeout`` seconds."""
        from graphtape.runtime.lease import lease_name

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.tape.store.lease_holder(lease_name(thread_id)) is not None:
            if deadline is not None and time.monotonic() > deadline:
                return  # the recorder says who holds it (ThreadBusy)
            await asyncio.sleep(min(0.2, self.poll_seconds * 2))

    async def shutdown(self) -> None:
        """Stop this process's workers (the server is stopping): the runs they execute are handed
        over to other processes, or to this server started again (:meth:`WorkerPool.stop`)."""
        if self.pool is not None:
            await self.pool.stop()
        for task in list(self._background):
            task.cancel()


async def _relay(items: Any, handle: Callable[[Any], Awaitable[None]]) -> None:
    """Hand each item of a recorded stream to ``handle``. When the run's lease was lost (another
    worker took the run over), the stream is stopped with that error, which leaves the graphtape
    run ``running`` on the tape for the new owner to recover (the recorder's rule for store errors)."""
    async for item in items:
        try:
            await handle(item)
        except LeaseLost as exc:
            with contextlib.suppress(LeaseLost, StopAsyncIteration):
                await items.athrow(exc)
            raise
        except asyncio.CancelledError:
            # cancelled while the publisher was busy (not inside the graph's own await): stop the
            # stream with the cancellation itself, so the tape records the run ``interrupted``
            # (stopped from outside) rather than a stream its consumer closed before the end
            with contextlib.suppress(BaseException):
                await items.athrow(asyncio.CancelledError())
            raise


async def _announce(publisher: Publisher, row: QueuedRun, graphtape_run_id: str) -> None:
    """Say in the run's stream that it was resumed after its worker died (a publisher may define
    ``resumed(attempt, graphtape_run_id)``; the LangGraph API's gets a second ``metadata`` event)."""
    hook = getattr(publisher, "resumed", None)
    if hook is not None:
        await hook(row.attempt, graphtape_run_id)
    elif isinstance(publisher, LangGraphPublisher):
        info = {"run_id": row.run_id, "attempt": row.attempt, "resumed_after_crash": True}
        await publisher.emit("metadata", {**info, "graphtape_run_id": graphtape_run_id})
