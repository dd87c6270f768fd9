"""A run's tape events as Server-Sent Events, read from the store as they are written.

Unlike the LangGraph stream of a run (kept in the memory of the process that
runs it, :mod:`graphtape.server.studio.runs`), this stream polls the store: it
follows a run executing in any process (another server, a script, the CLI),
and a client reconnecting to any server process with ``Last-Event-ID`` gets
every event it missed exactly once (the id of an event is its ``seq``).

Polling rather than a notification channel: the store interface has no
"wait for new events" primitive on every backend (SQLite has none), and a
read of a run's events is one indexed query. The poll interval grows from
50 ms to 500 ms while the run is quiet, so an idle viewer costs little and a
busy run is seen within a tick.

The stream ends after ``run_finished``/``run_failed``, or at once for a run
that has ended once everything was sent. A run whose process died (still
``running``, nobody holding its thread's lease) never ends by itself: at a
heartbeat the stream sees that, sends one ``error`` event saying so, and ends. A run id the server has only just
promised (a background replay answers 202 with the new run's id before the run
exists) is waited for; if its action ends without making the run, the
stream sends one ``error`` event saying why and ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import anyio
from starlette.concurrency import run_in_threadpool

from graphtape.server.studio.bounds import MAX_POSITION
from graphtape.server.studio.problems import BadRequest
from graphtape.store.base import EventRow

if TYPE_CHECKING:
    from graphtape.tape import Tape

__all__ = ["END_KINDS", "parse_after", "sse_message", "tape_sse"]

#: the event kinds after which a run writes nothing more (but labels, added later)
END_KINDS = ("run_finished", "run_failed")

_MIN_POLL, _MAX_POLL = 0.05, 0.5


def sse_message(row: EventRow) -> str:
    data = json.dumps({"seq": row.seq, "kind": row.kind, "ts": row.ts, "data": row.data}, separators=(",", ":"))
    return f"id: {row.seq}\nevent: {row.kind}\ndata: {data}\n\n"


def _read(tape: Tape, run_id: str) -> tuple[bool | None, list[EventRow]]:
    """(whether the run has ended, or None when it does not exist yet; its events). The status is
    read first: a run seen ended has all its events written."""
    run = tape.store.get_run(run_id)
    if run is None:
        return None, []
    return run.status != "running", tape.store.events(run_id)


def _orphaned(tape: Tape, run_id: str) -> bool:
    """Whether a ``running`` run has lost its process: nobody holds its thread's lease (a run ends
    before its lease is released, so a run still ``running`` after the lease is gone never ends)."""
    from graphtape.runtime.lease import lease_name

    run = tape.store.get_run(run_id)
    if run is None or run.status != "running":
        return False
    if tape.store.lease_holder(lease_name(run.thread_id)) is not None:
        return False
    again = tape.store.get_run(run_id)
    return again is not None and again.status == "running"


async def tape_sse(
    tape: Tape,
    run_id: str,
    *,
    after: int = -1,
    heartbeat: float = 15.0,
    pending: Callable[[], str | None] | None = None,
) -> AsyncIterator[str]:
    """SSE text of the run's events with ``seq > after``, until the run ends.

    ``pending``: for a run not written yet, returns ``None`` while it may still
    appear, or the reason it never will (its action ended without it).
    """
    sent = after
    quiet_since = time.monotonic()
    poll = _MIN_POLL
    while True:
        ended, rows = await run_in_threadpool(_read, tape, run_id)
        if ended is None:
            reason = pending() if pending is not None else "the run does not exist"
            if reason is not None:
                yield f"event: error\ndata: {json.dumps({'error': reason})}\n\n"
                return
        fresh = [r for r in rows if r.seq > sent]
        for row in fresh:
            yield sse_message(row)
            sent = row.seq
            if row.kind in END_KINDS:
                return
        if ended:
            return
        now = time.monotonic()
        if fresh:
            quiet_since, poll = now, _MIN_POLL
        else:
            poll = min(poll * 1.5, _MAX_POLL)
            if now - quiet_since >= heartbeat:
                quiet_since = now
                if ended is False and await run_in_threadpool(_orphaned, tape, run_id):
                    reason = (
                        f"run {run_id} stopped without ending: its process is gone (nobody holds its thread); "
                        "`graphtape recover` finishes it as a new run"
                    )
                    yield f"event: error\ndata: {json.dumps({'error': reason})}\n\n"
                    return
                yield ": heartbeat\n\n"
        await anyio.sleep(poll)


def parse_after(last_event_id: str | None, after: int | None) -> int:
    """The seq after which to start: ``Last-Event-ID`` wins over ``?after=``; -1 (everything) by default."""
    if last_event_id is not None and last_event_id.strip():
        value = last_event_id.strip()
        if not value.lstrip("-").isdigit() or len(value) > 17 or abs(int(value)) > MAX_POSITION:
            raise BadRequest(f"Last-Event-ID must be the seq of an event of this run (a number), not {value!r}")
        return int(value)
    return after if after is not None else -1
