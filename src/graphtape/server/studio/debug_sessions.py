"""Debugger sessions over HTTP: one :class:`~graphtape.debug.debugger.Debugger` per session, kept in memory.

The debugger is thread-blocking by design (its replay runs on a worker
thread that blocks at each pause; see ``graphtape.debug.debugger``), so every
control command runs in the thread pool (``run_in_threadpool``) and returns
once the replay pauses again or ends. A session's commands are serialised by
its lock: two browser tabs pressing "step" at once step twice, in turn.

A session ends when it is stopped or its replay finishes; at most
``max_active`` sessions may be live at once (each holds a paused thread), and
ended sessions are kept a while for their result, then forgotten.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

from graphtape import serde
from graphtape.debug.debugger import Debugger, Pause
from graphtape.errors import GraphtapeError
from graphtape.server.studio.problems import Conflict, NotFound

if TYPE_CHECKING:
    from graphtape.tape import Tape

__all__ = ["DebugEntry", "DebugSessions"]

_PAUSE_KINDS = {
    "before_node": "before",
    "after_node": "after",
    "call": "call",
    "step": "checkpoint",
    "condition": "checkpoint",
    "done": "end",
}
_KEEP_ENDED = 64


@dataclasses.dataclass
class DebugEntry:
    session_id: str
    debugger: Debugger
    breakpoints: list[dict[str, Any]]
    run_id: str | None = None
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    busy: bool = False

    @property
    def ended(self) -> bool:
        pause = self.debugger.paused
        return pause is not None and pause.reason == "done"

    def status(self) -> str:
        if self.busy:
            return "running"
        if not self.ended:
            return "paused"
        dbg = self.debugger
        if dbg.error is not None or dbg.result is None:
            return "stopped" if dbg._stopped else "failed"
        if dbg.result.status == "stopped":
            return "stopped"
        return "failed" if dbg.result.status == "failed" else "finished"

    def new_run_id(self, tape: Tape) -> str | None:
        """The replay's run (the newest on the debugger's thread), once it exists."""
        if self.run_id is None and self.debugger.thread_id is not None:
            runs = tape.store.list_runs(thread_id=self.debugger.thread_id, limit=1)
            self.run_id = runs[0].run_id if runs else None
        return self.run_id

    def describe(self, tape: Tape) -> dict[str, Any]:
        dbg = self.debugger
        pause = dbg.paused
        return {
            "session_id": self.session_id,
            "run_id": self.new_run_id(tape),
            "status": self.status(),
            "pause": _pause_view(dbg, pause, tape) if pause is not None and not self.busy else None,
            "breakpoints": self.breakpoints,
            "result": dbg.result.to_dict() if dbg.result is not None else None,
        }


def _pause_view(dbg: Debugger, pause: Pause, tape: Tape) -> dict[str, Any]:
    call = None
    request = recorded = None
    if pause.reason == "call" and pause.call:
        info = pause.call
        recorded_value = info.get("recorded")
        call = {
            "call_id": info.get("call_id"),
            "kind": info.get("kind"),
            "name": info.get("name"),
            "node_path": info.get("node"),
            "source": "tape" if recorded_value is not None else "live",
        }
        request = info.get("request")
        recorded = serde.redact(serde.to_jsonable(recorded_value), tape.redact_keys)
    node_path = pause.node
    return {
        "kind": _PAUSE_KINDS.get(pause.reason, "checkpoint"),
        "node": node_path.split("/")[-1] if node_path else None,
        "node_path": node_path,
        "step": pause.step,
        "call": call,
        "request": request,
        "recorded_output": recorded,
        "state": serde.to_jsonable(dbg.state()) if pause.reason != "done" else None,
        "description": pause.describe(),
    }


def apply_breakpoints(dbg: Debugger, specs: list[dict[str, Any]]) -> None:
    """Replace the debugger's breakpoints (each checked: an unknown node is a GraphtapeError)."""
    previous = list(dbg.breakpoints)
    dbg.breakpoints = []
    try:
        for bp in specs:
            if bp["type"] == "call":
                dbg.break_on_call(bp.get("kind"), bp.get("name"), bp.get("node"))
            elif not bp.get("node"):
                raise GraphtapeError(f"a {bp['type']!r} breakpoint names a node")
            elif bp["type"] == "before":
                dbg.break_before(bp["node"])
            else:
                dbg.break_after(bp["node"])
    except BaseException:
        dbg.breakpoints = previous
        raise


class DebugSessions:
    """The debugger sessions of one server process, by session id."""

    def __init__(self, max_active: int = 16) -> None:
        self.max_active = max_active
        self.entries: dict[str, DebugEntry] = {}

    def get(self, session_id: str) -> DebugEntry:
        entry = self.entries.get(session_id)
        if entry is None:
            raise NotFound(
                f"no debugger session {session_id!r} (sessions live in the server's memory); "
                "start one with POST /graphtape/debug"
            )
        return entry

    def active(self) -> int:
        return sum(1 for e in self.entries.values() if not e.ended)

    async def create(self, tape: Tape, run_id: str, graph: Any, mode: str, specs: list[dict[str, Any]]) -> DebugEntry:
        if self.active() >= self.max_active:
            raise Conflict(
                f"{self.max_active} debugger sessions are already open; stop one "
                "(DELETE /graphtape/debug/{session_id}) before starting another"
            )
        dbg = Debugger(tape, run_id, graph, mode=mode)
        await run_in_threadpool(apply_breakpoints, dbg, specs)
        entry = DebugEntry(str(uuid.uuid4()), dbg, specs)
        self.entries[entry.session_id] = entry
        await self.command(entry, dbg.start)
        self._forget_old()
        return entry

    async def command(self, entry: DebugEntry, action: Callable[[], Any]) -> None:
        """Run one blocking debugger command in the thread pool, one at a time per session."""
        async with entry.lock:
            entry.busy = True
            try:
                await run_in_threadpool(action)
            except GraphtapeError as exc:
                raise Conflict(str(exc)) from exc
            finally:
                entry.busy = False

    async def close(self, entry: DebugEntry) -> None:
        async with entry.lock:
            await run_in_threadpool(entry.debugger.stop)
        self.entries.pop(entry.session_id, None)

    def _forget_old(self) -> None:
        ended = [k for k, e in self.entries.items() if e.ended]
        for key in ended[: max(0, len(ended) - _KEEP_ENDED)]:
            del self.entries[key]

    async def shutdown(self) -> None:
        """Stop every session still paused (the server is stopping): their replays end as stopped."""
        for entry in list(self.entries.values()):
            if not entry.ended:
                await run_in_threadpool(entry.debugger.stop)
