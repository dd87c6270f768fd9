"""Replays, forks, overrides and invalidations started over HTTP, run as asyncio tasks of the server.

Each action is one of ``Tape.areplay/afork/aoverride/ainvalidate_from`` with
a run id chosen here (``new_run_id``) so the server can answer 202 with the
new run's id before the run exists; the replay's thread is ``replay-<run id>``.
The tasks are kept here, by new run id, so a stream can tell a run that is
about to appear from one that never will, ``?wait=true`` can await one, and
the server cancels the ones still running when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from graphtape.server.studio.workers import wait_cancelled

__all__ = ["Action", "Actions"]

#: ended actions kept for their result (a stream or a late ``wait``), the oldest forgotten first
_KEEP_ENDED = 256


@dataclasses.dataclass
class Action:
    """One background action: its new run, its task, and how it ended."""

    run_id: str
    kind: str
    thread_id: str
    task: asyncio.Task[Any] | None = None
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.task is not None and self.task.done()

    def describe(self) -> dict[str, Any]:
        status = "running" if not self.done else (self.result or {}).get("status", "failed")
        return {"run_id": self.run_id, "thread_id": self.thread_id, "status": status}

    def missing_reason(self) -> str | None:
        """Why the run will never appear (the action ended without it), or None while it may."""
        if not self.done:
            return None
        if self.error is not None:
            return f"the {self.kind} failed before its run started: {self.error}"
        result = self.result or {}
        why = result.get("error") or result.get("status", "ended")
        return f"the {self.kind} ended before reaching this run ({why}); its runs: {result.get('run_ids')}"


class Actions:
    """The background actions of one server process, by the id of the run each makes."""

    def __init__(self) -> None:
        self.entries: dict[str, Action] = {}

    def start(self, kind: str, work: Callable[[str], Awaitable[Any]]) -> Action:
        """Start ``work(new_run_id)`` (a coroutine returning a ``ReplayResult``) as a task."""
        run_id = str(uuid.uuid4())
        action = Action(run_id, kind, f"replay-{run_id}")

        async def execute() -> None:
            try:
                result = await work(run_id)
                action.result = result.to_dict()
            except asyncio.CancelledError:
                action.error = "cancelled (the server is stopping)"
                raise
            except Exception as exc:
                action.error = f"{type(exc).__name__}: {exc}"

        action.task = asyncio.create_task(execute(), name=f"graphtape-{kind}-{run_id}")
        self.entries[run_id] = action
        self._forget_old()
        return action

    def get(self, run_id: str) -> Action | None:
        return self.entries.get(run_id)

    async def wait(self, action: Action) -> dict[str, Any]:
        """The action's ``ReplayResult.to_dict()`` (with ``run_id``) once it has ended."""
        assert action.task is not None
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(action.task)
        if action.error is not None:
            from graphtape.errors import ReplayError

            raise ReplayError(f"the {action.kind} failed: {action.error}")
        return {**(action.result or {}), "run_id": (action.result or {}).get("run_id") or action.run_id}

    def _forget_old(self) -> None:
        ended = [k for k, a in self.entries.items() if a.done]
        for key in ended[: max(0, len(ended) - _KEEP_ENDED)]:
            del self.entries[key]

    async def shutdown(self) -> None:
        """Cancel the actions still running (the server is stopping)."""
        tasks = [a.task for a in self.entries.values() if a.task is not None and not a.task.done()]
        for task in tasks:
            task.cancel()
        await wait_cancelled(tasks)  # bounded: a replay's thread may run on after its task's cancel
