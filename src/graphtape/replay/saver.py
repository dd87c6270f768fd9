"""The checkpoint saver of a strict replay: graphtape's saver, without a worker thread per checkpoint.

A strict replay holds its rows to the run's end (``Session.holding``): a
``put`` or ``put_writes`` only serialises the checkpoint and buffers it, it
does not touch the store. LangGraph still hands every one of them to its
``BackgroundExecutor``, a thread pool created anew for each run: the threads
are started (up to six per run), each hand-over wakes one, and the graph's
thread then waits for the interpreter lock behind it. On benchmark 2's
10-node replay that traffic cost more CPU than the saver's own work
(measured interleaved in one process: -6 ms of a ~32 ms replay with the
hand-overs made in line, the same rows written).

So a strict replay uses :class:`ReplaySaver`, and LangGraph's executor runs
the calls LangGraph makes on it in line, on the submitting thread
(:func:`install`): it is the same call, in the same order (each ``put``
already waited for the previous one), on the same objects, and a failure
still lands on the future LangGraph checks on exit. Every other submit,
and every other saver's, goes to the thread pool as before.

The checkpoint rows are the ones graphtape's saver writes (the replay's
history is compared with the recording's, step by step): only where the
work runs changes. A replay that writes as it goes (a run id chosen up front,
followed live by the Studio) keeps graphtape's ordinary saver.

A recording with graphtape's saver under ``durability="async"`` buffers its
checkpoints too (``Session.flush``), and every recording buffers its tasks'
pending writes: those saves run in line the same way, and so do a sync
recording's, which the graph waits for anyway (:func:`_recording_save`;
benchmark 1's async run with graphtape's saver, 0.65-0.69 -> 0.37-0.49 ms a
super-step, old and new code in alternating processes). So do the saves of a
recording beside LangGraph's ``InMemorySaver`` (:func:`_in_memory_tap`): a
dictionary update and the tape's note of the checkpoint, cheaper than the
hand-over, with nothing to wait for that another thread could overlap.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

from graphtape.record.checkpoints import TapSaver
from graphtape.record.intercept import Interceptor, Patch, PatchOnDemand
from graphtape.runtime.saver import GraphtapeSaver

#: LangGraph's executor's own keyword arguments (not passed on to the submitted function)
_SUBMIT_FLAGS = ("__name__", "__cancel_on_exit__", "__reraise_on_exit__", "__next_tick__")


class ReplaySaver(GraphtapeSaver):
    """graphtape's saver for one strict replay: LangGraph's calls on it run in line (see the module docstring).

    The async methods call the sync ones directly while the run holds its
    rows (nothing is written to the store: no thread is worth starting), and
    in a worker thread otherwise, as graphtape's saver does.
    """

    def __init__(self, store: Any, *, serde_: Any = None, fresh_thread: str | None = None, opaque: bool = False):
        super().__init__(store, serde_=serde_, opaque=opaque)
        #: the thread the replay named for itself (``replay-<new id>``), until this saver puts a
        #: checkpoint on it: nothing can be stored under that name before, so the read LangGraph
        #: makes of it as the run begins is answered without a query (one SELECT per replay; an
        #: async replay's also a hop to a worker thread)
        self._fresh: set[str] = {fresh_thread} if fresh_thread else set()
        install()

    def _unwritten(self, config: RunnableConfig) -> bool:
        """Whether ``config`` names the fresh thread, on which this saver has put nothing yet."""
        return bool(self._fresh) and (config.get("configurable") or {}).get("thread_id") in self._fresh

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if self._unwritten(config):
            return None
        return super().get_tuple(config)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if self._unwritten(config):
            return None
        return await super().aget_tuple(config)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._fresh.discard((config.get("configurable") or {}).get("thread_id"))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._fresh.discard((config.get("configurable") or {}).get("thread_id"))
        return super().put_writes(config, writes, task_id, task_path)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._fresh.discard(target_thread_id)
        return super().copy_thread(source_thread_id, target_thread_id)

    @classmethod
    def _holding(cls, config: RunnableConfig) -> bool:
        session = cls._session(config)
        return session is not None and session.holding

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if self._holding(config):
            return self.put(config, checkpoint, metadata, new_versions)
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        if self._holding(config):
            return self.put_writes(config, writes, task_id, task_path)
        return await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)


def _on_replay_saver(fn: Any) -> bool:
    """Whether ``fn`` is a call LangGraph makes on a :class:`ReplaySaver`.

    ``put_writes`` is submitted as the saver's bound method; ``put`` as the
    loop's ``_checkpointer_put_after_previous``, bound to a loop whose
    checkpointer is the saver.
    """
    owner = getattr(fn, "__self__", None)
    if owner is None:
        return False
    return type(owner) is ReplaySaver or type(getattr(owner, "checkpointer", None)) is ReplaySaver


def _recording_save(fn: Any, args: tuple[Any, ...]) -> bool:
    """Whether ``fn`` is a save a recording makes on graphtape's saver (not under the debugger).

    Under ``durability="async"`` such a ``put`` only buffers the checkpoint
    (``Session.flush``), and every ``put_writes`` of a recording buffers the
    task's writes: cheaper than handing it to one of LangGraph's threads (the
    hand-over wakes a thread that the graph's thread then waits behind for the
    interpreter lock). Under ``"sync"`` the graph waits for the ``put`` before
    its next step anyway: on its own thread it is the same write without the
    hand-over. So these run in line, as a strict replay's saves do.
    """
    owner = getattr(fn, "__self__", None)
    if owner is None:
        return False
    if isinstance(owner, GraphtapeSaver):
        if getattr(fn, "__func__", None) is not GraphtapeSaver.put_writes or not args:
            return False
        config = args[0]
    elif isinstance(getattr(owner, "checkpointer", None), GraphtapeSaver):
        if len(args) < 3:
            return False
        config = args[2]  # (previous save, the step's write saves, config, checkpoint, ...)
    else:
        return False
    session = GraphtapeSaver._session(cast(RunnableConfig, config)) if isinstance(config, dict) else None
    return session is not None and session.defers_checkpoints


def _taps_memory(saver: Any) -> bool:
    """Whether ``saver`` is the tap of a recording beside LangGraph's own ``InMemorySaver`` (exactly
    that class: a subclass may do I/O that another thread should overlap)."""
    return type(saver) is TapSaver and type(saver.inner) is InMemorySaver


def _in_memory_tap(fn: Any) -> bool:
    """Whether ``fn`` is a save on such a tap (its ``put_writes``, or a loop's ``put`` through it)."""
    owner = getattr(fn, "__self__", None)
    return owner is not None and _taps_memory(
        owner if type(owner) is TapSaver else getattr(owner, "checkpointer", None)
    )


def in_line_saves(saver: Any) -> bool:
    """Whether a recording with ``saver`` (graphtape's, or the tap around the user's) has saves that
    run in line once :func:`install` is called."""
    return isinstance(saver, GraphtapeSaver) or _taps_memory(saver)


def _inline_submit(original: Any) -> Any:
    def submit(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        tasks = getattr(self, "tasks", None)
        if (
            kwargs.get("__next_tick__")  # a start deferred to the next tick keeps the thread
            or not isinstance(tasks, dict)  # not the executor this was written against: leave it be
            or not (_on_replay_saver(fn) or _recording_save(fn, args) or _in_memory_tap(fn))
        ):
            return original(self, fn, *args, **kwargs)
        flags = {k: kwargs.pop(k) for k in _SUBMIT_FLAGS if k in kwargs}
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:  # LangGraph reads it from the future, as from a thread's
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_exception(exc)
        else:
            # A call that returned leaves nothing for the executor's exit: its own done callback
            # takes a successful future out of ``tasks`` at once. So it is not put there (23 calls
            # per benchmark-2 replay, each a dict entry, a callback and a ``result()`` under the
            # future's lock).
            if result is None:  # what LangGraph's saver calls return: one finished future serves them all
                return _NONE
            future = concurrent.futures.Future()
            future.set_result(result)
            return future
        # (Ctrl-C and the like are not a failure of the call: they stop the run here and now, as
        # anywhere on the graph's thread)
        # the bookkeeping the executor's own submit does: on exit it re-raises a failure (or not)
        tasks[future] = (flags.get("__cancel_on_exit__", False), flags.get("__reraise_on_exit__", True))
        future.add_done_callback(self.done)
        return future

    submit.__graphtape_inline__ = True  # type: ignore[attr-defined]
    return submit


#: The finished future of every in-line call that returned None. A finished future is read-only: its
#: ``result()`` is None, ``cancel()`` is refused and a done callback runs at once without being kept.
#: (Each new one cost a lock and a condition; LangGraph only waits on these and asks their result.)
_NONE: concurrent.futures.Future[Any] = concurrent.futures.Future()
_NONE.set_result(None)


def _build() -> Interceptor | None:
    try:
        from langgraph.pregel._executor import BackgroundExecutor
    except ImportError:  # pragma: no cover - LangGraph moved its executor
        return None
    current = BackgroundExecutor.__dict__.get("submit")
    if current is None or getattr(current, "__graphtape_inline__", False):
        return None  # not defined where expected (or another copy of this module's patch): left alone
    return Interceptor("replay saver", [Patch(BackgroundExecutor, "submit", _inline_submit)])


#: the patch on LangGraph's executor (``PATCH.current`` while installed)
PATCH = PatchOnDemand(_build)


def install() -> None:
    """Make LangGraph's sync executor run the calls on a :class:`ReplaySaver`, and a recording's saves
    on graphtape's saver (:func:`_recording_save`) or to an ``InMemorySaver``
    (:func:`_in_memory_tap`), in line (idempotent).

    Inert for everything else. If LangGraph's executor is not where it is
    expected, nothing is installed and the calls go to its threads as before.
    """
    PATCH.install()


def uninstall() -> None:
    """Restore LangGraph's executor (``graphtape.uninstall()``); a later strict replay installs it again.

    Raises :class:`~graphtape.errors.PatchConflict` (and leaves the patch) if
    another library wrapped ``BackgroundExecutor.submit`` after graphtape.
    """
    PATCH.uninstall()
