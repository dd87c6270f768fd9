"""Executing the runs a replay yields.

A replay (``engine.py``) is written once, as a generator that yields
each recorded run to re-execute as a :class:`Step` and is sent its output.
This module holds what executes them: a step (one run, re-executed the way it
was called), :func:`drive` for a sync replay (async runs in one event loop for
the whole replay, :class:`ReplayLoop`) and :func:`adrive` for a replay awaited
in the caller's loop. Split from ``engine.py``, which decides *what* runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Generator
from typing import Any, TypeVar

_R = TypeVar("_R")

ASYNC_APIS = ("ainvoke", "astream", "astream_events")
#: the ``update_state`` methods a replay repeats between runs (graphtape.record.updates), async ones last
UPDATE_APIS = ("update_state", "bulk_update_state", "aupdate_state", "abulk_update_state")


@dataclasses.dataclass
class Step:
    """One recorded run to re-execute, the way it was called (API and arguments); or one recorded
    ``update_state`` call to repeat before a run (an ``UPDATE_APIS`` api, ``value`` its supersteps of
    ``(values, as_node, task_id)``), which returns the config LangGraph returns."""

    recorder: Any
    api: str
    value: Any
    config: dict[str, Any]
    kwargs: dict[str, Any]

    @property
    def is_async(self) -> bool:
        return self.api in ASYNC_APIS or self.api in UPDATE_APIS[2:]

    def run(self) -> Any:
        rec = self.recorder
        if self.api == "update_state":
            return rec.update_state(self.config, *self.value[0][0])
        if self.api == "bulk_update_state":
            return rec.bulk_update_state(self.config, _state_updates(self.value))
        if self.api == "stream":
            for _ in rec.stream(self.value, self.config, **self.kwargs):
                pass
            snap = rec.get_state(self.config)
            return snap.values if snap is not None else None
        return rec.invoke(self.value, self.config, **self.kwargs)

    async def arun(self) -> Any:
        rec = self.recorder
        if self.api == "aupdate_state":
            return await rec.aupdate_state(self.config, *self.value[0][0])
        if self.api == "abulk_update_state":
            return await rec.abulk_update_state(self.config, _state_updates(self.value))
        if self.api in ("astream", "astream_events"):
            async for _ in getattr(rec, self.api)(self.value, self.config, **self.kwargs):
                pass
            snap = await rec.aget_state(self.config)
            return snap.values if snap is not None else None
        return await rec.ainvoke(self.value, self.config, **self.kwargs)


def _state_updates(supersteps: list[list[tuple[Any, Any, Any]]]) -> list[list[Any]]:
    from langgraph.types import StateUpdate

    return [[StateUpdate(*update) for update in superstep] for superstep in supersteps]


def drive(core: Generator[Step, Any, _R], execute: Callable[[Step], Any]) -> _R:
    """Run the replay's steps with ``execute`` until it returns its result."""
    try:
        step = next(core)
    except StopIteration as stop:
        return stop.value
    while True:
        try:
            out = execute(step)
        except Exception as exc:
            advance = functools.partial(core.throw, exc)
        else:
            advance = functools.partial(core.send, out)
        try:
            step = advance()
        except StopIteration as stop:
            return stop.value


async def adrive(core: Generator[Step, Any, _R]) -> _R:
    """:func:`drive` in the running loop: async runs awaited, sync runs in a worker thread."""
    try:
        step = next(core)
    except StopIteration as stop:
        return stop.value
    while True:
        try:
            out = await step.arun() if step.is_async else await asyncio.to_thread(step.run)
        except Exception as exc:
            advance = functools.partial(core.throw, exc)
        else:
            advance = functools.partial(core.send, out)
        try:
            step = advance()
        except StopIteration as stop:
            return stop.value


def loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class ReplayLoop:
    """The one event loop of a sync replay, created on first use and closed at its end.

    ``asyncio.run`` per run closed the loop after each run of a thread, and an
    async client the graph had created (``ChatOpenAI``'s HTTP pool, anything
    holding an asyncio primitive) failed in the next run with "Event loop is
    closed". Closing mirrors ``asyncio.run``: cancel leftovers, finish async
    generators and the default executor.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, coro: Any) -> Any:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
