"""The worker pool of one server process: claims queued runs from the store and executes them.

One dispatcher task per process claims runs while fewer than ``concurrency``
execute here; it is woken at once when this process queued a run or ended
one, or when the store says another process did (PostgreSQL ``NOTIFY``, Redis
``PUBLISH``: :meth:`~graphtape.store.runqueue.RunQueue.listen`), and otherwise
looks at the queue every ``poll_seconds`` (for runs whose worker died, and as a
fallback). Each executing run has a
heartbeat task that renews the run's lease (every quarter second, at most a
third of the lease) and reads the run's cancel flag with the same statement,
so a cancel made through any process stops the run here within about 250 ms
(and a worker that lost its lease stops writing at once: its appends are
fenced).

SQLite serves one process: the pool of a second process on the same SQLite
file does not start (it logs why, naming the process that serves the store,
and leaves its runs to that one: the process still serves the API), through a
lease on the tape's store. When that process is
gone (killed on this machine), a new one waits for its lease to expire and
then recovers the runs it left.

Rejected: one asyncio task per worker slot, each polling the queue: N claims
per poll interval where one does; threads: the graphs' async nodes and the
SSE viewers live on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from graphtape.errors import StoreError
from graphtape.runtime.lease import new_owner

if TYPE_CHECKING:
    from graphtape.server.studio.runs import Runs
    from graphtape.store.runqueue import QueuedRun

__all__ = ["DEFAULT_CONCURRENCY", "SQLITE_WORKERS_LEASE", "WorkerPool", "wait_cancelled"]

log = logging.getLogger(__name__)

#: runs executed at once per server process
DEFAULT_CONCURRENCY = 4
#: how long stopping the pool waits for a cancelled task (the dispatcher, a run handed over) to end
STOP_WAIT_SECONDS = 10.0
#: the lease a process holds on an SQLite store while its pool executes runs
SQLITE_WORKERS_LEASE = "studio:workers"
#: this process, as the holder of that lease (every pool of the process shares it)
_PROCESS = f"{socket.gethostname()}:{os.getpid()}"
_pools_holding: dict[str, int] = {}


async def wait_cancelled(tasks: list[asyncio.Task[None]]) -> None:
    """Wait for cancelled ``tasks`` to end, at most ``STOP_WAIT_SECONDS``.

    A server must stop even if a task does not: one that swallowed its
    cancellation and waits on something that never comes would otherwise hold
    the shutdown (and uvicorn with it) forever. Such a task is logged with its
    stack and left behind (a run's task here was released first, so another
    worker resumes that run).
    """
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=STOP_WAIT_SECONDS)
    for task in pending:
        stack = "".join(
            f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}\n" for frame in task.get_stack()
        )
        log.warning(
            "a task did not stop within %.0f s of its cancellation: %s\n%s", STOP_WAIT_SECONDS, task.get_name(), stack
        )
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: an error of a stopped task is not reported again as never retrieved


def _dead_here(owner: str) -> bool:
    """Whether ``owner`` (``host:pid``) names a process of this host that no longer exists."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists, another user's
        return False
    return False


class WorkerPool:
    """Executes up to ``concurrency`` queued runs at once in this process."""

    def __init__(self, runs: Runs, concurrency: int = DEFAULT_CONCURRENCY):
        self.runs = runs
        self.concurrency = concurrency
        #: the worker name runs claimed here are leased to
        self.worker = new_owner()
        self.executing: dict[str, asyncio.Task[None]] = {}
        self._lost: set[str] = set()
        self._wake: asyncio.Event | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._guard: str | None = None
        self._unlisten: Callable[[], None] | None = None
        #: why this process executes no runs (another process serves the SQLite store), if it does not
        self.refused: str | None = None

    # -- control ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start claiming runs on the running event loop (a no-op when started, or with no concurrency)."""
        self.listen()
        if self.concurrency <= 0 or self.refused or (self._dispatcher is not None and not self._dispatcher.done()):
            return
        try:
            held = self._hold_sqlite()
        except StoreError as exc:
            self.refused = f"{exc}; this process serves the API and leaves the runs to that one"
            log.warning("graphtape studio: %s", self.refused)
            return
        self._wake = asyncio.Event()
        self._dispatcher = asyncio.create_task(self._dispatch(held), name="graphtape-studio-dispatcher")

    def listen(self) -> None:
        """Hear what other processes do to the queue (when the store can tell), for the dispatcher
        and for this process's viewers; started with the pool, or by the first viewer."""
        if self._unlisten is not None:
            return
        loop = asyncio.get_running_loop()

        def heard(what: str, run_id: str) -> None:  # in the queue's listening thread
            with contextlib.suppress(RuntimeError):  # the loop closed
                loop.call_soon_threadsafe(self._noticed, what, run_id)

        self._unlisten = self.runs.queue.listen(heard) or (lambda: None)

    def wake(self) -> None:
        """Look at the queue now (this process queued or ended a run)."""
        self.start()
        if self._wake is not None:
            self._wake.set()

    def cancel_local(self, run_id: str) -> None:
        """Stop a run if it executes here (the store's cancel flag reaches other processes)."""
        task = self.executing.get(run_id)
        if task is not None:
            task.cancel()

    def _noticed(self, what: str, run_id: str) -> None:
        """What another process did to the queue (or this one: harmless), heard from the store."""
        if what in ("queued", "ended") and self._wake is not None:
            self._wake.set()
        if what == "ended" or (what == "event" and run_id not in self.executing):  # ours are pushed already
            self.runs.noticed(run_id)
        if what == "cancel":
            self.cancel_local(run_id)

    def lost(self, run_id: str) -> bool:
        """Whether this process lost the run's lease (another worker owns it now) or is handing it over."""
        return run_id in self._lost

    async def stop(self) -> None:
        """Stop claiming, and hand the runs executing here over: each is stopped where it is (its
        work so far checkpointed and recorded) and released, so that a worker of another process
        (or of this server started again) claims it at once and resumes it like a crashed one."""
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            await wait_cancelled([self._dispatcher])
            self._dispatcher = None
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        handed = dict(self.executing)
        self._lost.update(handed)  # this process gives them up: their execution stops without ending them
        for task in handed.values():
            task.cancel()
        await wait_cancelled(list(handed.values()))
        for run_id in handed:
            with contextlib.suppress(Exception):
                self.runs.queue.release(run_id, self.worker)
        self._release_sqlite()

    # -- SQLite: one process -----------------------------------------------------------------

    def _hold_sqlite(self) -> bool:
        """Take the SQLite store's one-process lease: True when held (or not needed), False when a
        dead process of this host still holds it (the dispatcher waits for it to expire)."""
        if not self.runs.queue.single_process or self._guard is not None:
            return True
        store = self.runs.tape.store
        if store.acquire_lease(SQLITE_WORKERS_LEASE, _PROCESS, max(self.runs.lease_seconds, 5.0)) is None:
            holder = store.lease_holder(SQLITE_WORKERS_LEASE)
            if holder is not None and _dead_here(holder[0]):
                return False  # a server of this machine that was killed: its runs are ours to recover
            who = holder[0] if holder is not None else "another process"
            raise StoreError(
                f"{store.url} is served by {who}: an SQLite store serves runs from one process; "
                "stop that server, or serve from a PostgreSQL or Redis store to run several"
            )
        self._guard = _PROCESS
        _pools_holding[store.url] = _pools_holding.get(store.url, 0) + 1
        return True

    def _renew_sqlite(self) -> None:
        if self._guard is not None:
            self.runs.tape.store.acquire_lease(SQLITE_WORKERS_LEASE, _PROCESS, max(self.runs.lease_seconds, 5.0))

    def _release_sqlite(self) -> None:
        if self._guard is None:
            return
        store = self.runs.tape.store
        self._guard = None
        _pools_holding[store.url] = _pools_holding.get(store.url, 1) - 1
        if _pools_holding[store.url] <= 0:
            with contextlib.suppress(Exception):
                store.release_lease(SQLITE_WORKERS_LEASE, _PROCESS)

    # -- the loops ---------------------------------------------------------------------------

    async def _dispatch(self, held: bool = True) -> None:
        assert self._wake is not None
        while not held:
            await asyncio.sleep(0.5)
            with contextlib.suppress(StoreError):
                held = self._hold_sqlite()
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        backoff = self.runs.poll_seconds
        while True:
            if self._guard is not None and loop.time() - renewed > max(self.runs.lease_seconds, 5.0) / 3:
                with contextlib.suppress(Exception):
                    self._renew_sqlite()
                renewed = loop.time()
            row = None
            if len(self.executing) < self.concurrency:
                try:
                    row = self.runs.queue.claim(self.worker, self.runs.lease_seconds)
                    backoff = self.runs.poll_seconds
                except Exception as exc:  # the store is down or restarting: try again, slower
                    log.warning("graphtape studio: claiming a run failed: %s", exc)
                    backoff = min(backoff * 2, 5.0)
            if row is not None:
                self._spawn(row)
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), backoff)

    def _spawn(self, row: QueuedRun) -> None:
        task = asyncio.create_task(self.runs.execute(row, self.worker), name=f"graphtape-run-{row.run_id}")
        self.executing[row.run_id] = task
        beat = asyncio.create_task(self._heartbeat(row, task))

        def ended(done: asyncio.Task[None]) -> None:
            beat.cancel()
            self.executing.pop(row.run_id, None)
            if done.cancelled() and row.run_id not in self._lost:
                # cancelled before its coroutine began: nothing of it ran, so end it here
                self.runs.ended_unstarted(row, self.worker)
            self._lost.discard(row.run_id)
            if self._wake is not None:
                self._wake.set()

        task.add_done_callback(ended)

    async def _heartbeat(self, row: QueuedRun, task: asyncio.Task[None]) -> None:
        interval = min(self.runs.lease_seconds / 3, 0.25)
        while not task.done():
            await asyncio.sleep(interval)
            try:
                state = self.runs.queue.heartbeat(row.run_id, self.worker, self.runs.lease_seconds)
            except Exception as exc:  # a store hiccup: the lease outlives a few missed beats
                log.warning("graphtape studio: renewing run %s failed: %s", row.run_id, exc)
                continue
            if state is None:
                self._lost.add(row.run_id)
                task.cancel()
                return
            if state:
                task.cancel()
                return
