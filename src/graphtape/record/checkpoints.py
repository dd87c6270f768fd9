"""A checkpoint saver wrapper that links LangGraph's checkpoints to the tape.

Every ``put`` is delegated to the user's saver and then becomes a
``checkpoint`` event on the run that wrote it; the run is found through the
run id in the config LangGraph writes with (``context.RUN_CONF_KEY`` in its
``configurable``, never in the stored metadata). The tape's buffered rows are written at most every
``FLUSH_INTERVAL`` (50 ms) of the run, by a thread of their own (see
:class:`TapeFlusher`), and at the end of the run. (graphtape's own saver does
not need this wrapper: it writes the tape in each checkpoint's transaction.)
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.types import INTERRUPT

from graphtape.record.context import RUN_CONF_KEY, SESSIONS, session_of
from graphtape.record.writer import FLUSH_INTERVAL

if TYPE_CHECKING:
    from graphtape.record.session import Session


def note_interrupts(config: Mapping[str, Any], writes: Sequence[tuple[str, Any]]) -> None:
    """Tell the run that a task paused on ``interrupt()`` (its status then needs a state read)."""
    if any(channel == INTERRUPT for channel, _ in writes):
        session = session_of(config)
        if session is not None:
            session.saw_interrupt = True


def takes_task_path(put_writes: Any) -> bool:
    """Whether a saver's ``put_writes``/``aput_writes`` takes ``task_path``: the test LangGraph makes
    before passing it (``langgraph.pregel._checkpoint.put_writes_accepts_task_path``)."""
    try:
        return inspect.signature(put_writes).parameters.get("task_path") is not None
    except (TypeError, ValueError):  # no signature to read (a C callable): as LangGraph's base class
        return True


#: A background write asked for by a checkpoint starts this long after it (at most a tenth of
#: FLUSH_INTERVAL). A run's last checkpoint comes a millisecond or two before its end, which writes the
#: tape in line anyway: a write asked for there was one more transaction, and the end waited for it
#: (about 1.2 ms of CPU and a 0.2-1 ms wait of a 3-call agent run). Held, it is dropped by the end.
HOLD = 0.005


class TapeFlusher:
    """One thread per process writes the tapes of runs recorded beside a foreign saver.

    Beside the user's saver the tape is written every ``FLUSH_INTERVAL`` of a
    run. Written from the checkpoint call itself, that write sat on the
    super-step's path: with ``durability="sync"`` LangGraph waits for the
    checkpoint, and so for the tape written with it (about 1 ms every 50 ms
    of run on a shared 2-vCPU machine: the largest cost left beside a
    ``SqliteSaver``). Here a checkpoint only asks for a write; this thread
    does it while the graph goes on (the store releases the interpreter lock
    while it writes). What it promises is unchanged: a crash loses at most
    the last ``FLUSH_INTERVAL`` (plus the write under way) of tape, and the
    run's end still writes in line, after :meth:`forget`, so a finished
    run's tape is on the store when ``invoke`` returns. A write that failed
    here keeps its rows buffered (the next write retries them) and its error
    is raised from the run's next checkpoint, as an inline write's was.

    A write starts ``HOLD`` after the checkpoint that asks for it, and is
    asked for that much earlier (when the last one started
    ``FLUSH_INTERVAL - HOLD`` before), so writes still start at least
    ``FLUSH_INTERVAL`` apart, at the same cadence as before; the rows of the
    checkpoint that asks wait up to ``HOLD`` (5 ms of the 50) longer than
    they did. A run that ends within the hold has the write dropped by
    :meth:`forget` (its end writes the same rows in its own transaction)
    instead of writing twice.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every run and the thread (in a forked child: neither is its own)."""
        self._cond = threading.Condition()
        #: id(session) -> (session, when its write starts: monotonic seconds), waiting for a write
        self._due: dict[int, tuple[Session, float]] = {}
        #: id(session) -> when its last write was asked to start (monotonic seconds)
        self._asked: dict[int, float] = {}
        #: id(session) -> from when a checkpoint asks for its next write (see due)
        self._ask_from: dict[int, float] = {}
        #: id(session) -> the error its last background write raised
        self._errors: dict[int, BaseException] = {}
        #: the session being written now
        self._writing: Session | None = None
        self._thread: threading.Thread | None = None

    def due(self, session: Session) -> bool:
        """Whether a checkpoint of ``session``'s run now has something to ask (:meth:`ask` does nothing
        otherwise): a write, the run's first checkpoint, or the error of its last background write.

        Asked by the tap on every checkpoint, so that the usual answer (the last write is recent) costs
        a clock read and a dict lookup, not a call of :meth:`ask`.
        """
        return bool(self._errors) or time.monotonic() >= self._ask_from.get(id(session), 0.0)

    def _mark(self, key: int, asked: float) -> None:
        self._asked[key] = asked
        self._ask_from[key] = asked + FLUSH_INTERVAL - min(HOLD, FLUSH_INTERVAL / 10)

    def ask(self, session: Session) -> None:
        """A checkpoint of ``session``'s run was saved: have its tape written if the last write is old enough.

        Raises the error of the run's last background write, if it failed.
        """
        key = id(session)
        if self._errors:
            with self._cond:
                error = self._errors.pop(key, None)
            if error is not None:
                raise error
        now = time.monotonic()
        last = self._asked.get(key)
        if last is None:  # the run's first checkpoint, its start just written (else see began)
            self._mark(key, now)
            return
        interval = FLUSH_INTERVAL
        start = now + min(HOLD, interval / 10)
        if start - last < interval:
            return
        with self._cond:
            self._mark(key, start)
            self._schedule(key, session, start)

    def _schedule(self, key: int, session: Session, start: float) -> None:
        """Have ``session`` written at ``start`` (monotonic seconds); the caller holds ``_cond``."""
        self._due[key] = (session, start)
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="graphtape-tape-writer", daemon=True)
            self._thread.start()
        self._cond.notify()

    def later(self, session: Session) -> None:
        """Calls of ``session``'s run (graphtape's saver) went to its journal: write them in
        ``FLUSH_INTERVAL`` if no checkpoint of the run has taken them by then.

        The journal keeps them safe; this keeps them visible: a reader in another
        process (a Studio, a test waiting for the call) would otherwise not see a
        call until its node ends, however long the node then waits.
        """
        key = id(session)
        with self._cond:
            if key not in self._due:
                self._schedule(key, session, time.monotonic() + FLUSH_INTERVAL)

    def began(self, session: Session) -> None:
        """``session``'s run began without writing its start (it goes with the run's first write).

        Its first write is then due ``FLUSH_INTERVAL`` after the run began, as
        after any other write (the first checkpoint does not start the clock):
        a crash loses at most that much of the run's tape, its start included.
        """
        self._mark(id(session), time.monotonic())

    def forget(self, session: Session) -> None:
        """The run ends: no more writes from this thread (a held one is dropped, one under way finishes first);
        its end is written in line."""
        key = id(session)
        with self._cond:
            self._due.pop(key, None)
            self._asked.pop(key, None)
            self._ask_from.pop(key, None)
            self._errors.pop(key, None)
            while self._writing is session:
                self._cond.wait()

    def _next(self) -> Session:
        """Wait for the next write whose hold is over, and mark its session as being written."""
        with self._cond:
            while True:
                if not self._due:
                    self._cond.wait()
                    continue
                key, (session, start) = min(self._due.items(), key=lambda item: item[1][1])
                wait = start - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)  # a run's end may drop it meanwhile, another run's may come first
                    continue
                del self._due[key]
                self._writing = session
                return session

    def _run(self) -> None:
        while True:
            session = self._next()
            try:
                session.background_flush()
            except Exception as exc:
                with self._cond:
                    self._errors[id(session)] = exc
            finally:
                with self._cond:
                    self._writing = None
                    self._cond.notify_all()


#: the process's background tape writer (runs beside foreign savers)
FLUSHER = TapeFlusher()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=FLUSHER.reset)


class TapSaver(BaseCheckpointSaver):
    """Delegates everything to ``inner``; reports each saved checkpoint."""

    def __init__(self, inner: BaseCheckpointSaver):
        super().__init__(serde=inner.serde)
        self.inner = inner
        # LangGraph asks for a channel's next version for every channel a step updates: the inner
        # saver's own method, without a delegating frame in between (it reports nothing).
        self.get_next_version = inner.get_next_version  # type: ignore[method-assign]
        # A saver written before ``task_path`` existed takes three arguments: LangGraph passes it only
        # when the method's signature has it, and so does the tap (looked up once: every task of
        # every step writes through here).
        self._sync_path = takes_task_path(inner.put_writes)
        self._async_path = takes_task_path(inner.aput_writes)

    def __getattr__(self, name: str) -> Any:  # setup(), conn, ... of the inner saver
        return getattr(self.inner, name)

    @property
    def config_specs(self) -> list:
        return self.inner.config_specs

    def with_allowlist(self, extra_allowlist: Any) -> BaseCheckpointSaver:
        """The saver with LangGraph's msgpack allowlist (``LANGGRAPH_STRICT_MSGPACK``) on the inner saver,
        which is the one that reads values back; the base class would set it on this wrapper's unused
        serializer (a subgraph sharing its parent's saver asks for its own types this way)."""
        inner = self.inner.with_allowlist(extra_allowlist)
        return self if inner is self.inner else TapSaver(inner)

    def _tap(self, config: dict[str, Any], checkpoint: Any, metadata: Any) -> None:
        conf = config.get("configurable")
        rid = conf.get(RUN_CONF_KEY) if conf else None
        session = SESSIONS.get(rid) if rid else None
        if session is not None:
            session.on_checkpoint(config, checkpoint, metadata)
            # a strict replay writes its rows with its end (Session.flush)
            if not session.holding and FLUSHER.due(session):
                FLUSHER.ask(session)

    # -- sync ---------------------------------------------------------------
    def get_tuple(self, config):
        return self.inner.get_tuple(config)

    def list(self, config, *, filter=None, before=None, limit=None) -> Iterator:
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    def put(self, config, checkpoint, metadata, new_versions):
        out = self.inner.put(config, checkpoint, metadata, new_versions)
        self._tap(config, checkpoint, metadata)
        return out

    def put_writes(self, config, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        if self._sync_path:
            self.inner.put_writes(config, writes, task_id, task_path)
        else:
            self.inner.put_writes(config, writes, task_id)
        # note_interrupts, in line: every task of every step passes here
        for write in writes:
            if write[0] == INTERRUPT:
                note_interrupts(config, writes)
                break

    def delete_thread(self, thread_id: str) -> None:
        return self.inner.delete_thread(thread_id)

    def delete_for_runs(self, run_ids):
        return self.inner.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id, target_thread_id):
        return self.inner.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids, *, strategy="keep_latest"):
        return self.inner.prune(thread_ids, strategy=strategy)

    def get_next_version(self, current, channel):  # shadowed per instance (see __init__)
        return self.inner.get_next_version(current, channel)

    def get_delta_channel_history(self, *args, **kwargs):
        return self.inner.get_delta_channel_history(*args, **kwargs)

    # -- async ----------------------------------------------------------------
    async def aget_tuple(self, config):
        return await self.inner.aget_tuple(config)

    async def alist(self, config, *, filter=None, before=None, limit=None) -> AsyncIterator:
        async for item in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config, checkpoint, metadata, new_versions):
        out = await self.inner.aput(config, checkpoint, metadata, new_versions)
        self._tap(config, checkpoint, metadata)
        return out

    async def aput_writes(self, config, writes, task_id, task_path=""):
        if self._async_path:
            out = await self.inner.aput_writes(config, writes, task_id, task_path)
        else:
            out = await self.inner.aput_writes(config, writes, task_id)
        for write in writes:
            if write[0] == INTERRUPT:
                note_interrupts(config, writes)
                break
        return out

    async def adelete_thread(self, thread_id):
        return await self.inner.adelete_thread(thread_id)

    async def adelete_for_runs(self, run_ids):
        return await self.inner.adelete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id, target_thread_id):
        return await self.inner.acopy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids, *, strategy="keep_latest"):
        return await self.inner.aprune(thread_ids, strategy=strategy)

    async def aget_delta_channel_history(self, *args, **kwargs):
        return await self.inner.aget_delta_channel_history(*args, **kwargs)
