"""Recorded runs and calls as the tape API shows them, read through the library only (no SQL).

Each function takes the :class:`~graphtape.Tape` and returns plain JSON-able
dicts shaped like the models of :mod:`graphtape.server.studio.tape_models`.
Recorded values are shown the way ``graphtape show --json`` shows them (the
CLI's ``display_value``: no user class is imported to show a value), and
whatever echoes a config or metadata goes through :func:`graphtape.serde.redact`
with the tape's extra keys.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from graphtape import events, serde
from graphtape.calls import RecordedCall
from graphtape.debug.branches import LABEL_KIND
from graphtape.debug.display import display_value
from graphtape.debug.explain import counted_calls
from graphtape.errors import RunNotFound
from graphtape.server.studio.call_previews import usage_of
from graphtape.store.base import EventRow, RunRecord

if TYPE_CHECKING:
    from graphtape.tape import Tape

__all__ = [
    "call_detail",
    "call_summary",
    "error_text",
    "labels_of",
    "list_runs",
    "run_calls",
    "run_detail",
    "run_summary",
    "shown",
]


def shown(tape: Tape, address: str | None) -> Any:
    """The recorded value (or view) at ``address`` as JSON, messages expanded; ``None`` for none."""
    if address is None:
        return None
    try:
        return serde.to_jsonable(display_value(tape.payload(address)))
    except Exception as exc:  # a missing or damaged payload: say so in place of the value
        return {"__unreadable__": f"{type(exc).__name__}: {exc}"}


def labels_of(tape: Tape, run_ids: Iterable[str]) -> dict[str, str | None]:
    """The latest label of each run that has one (the label with the highest seq wins)."""
    ids = list(run_ids)
    latest: dict[str, tuple[int, str | None]] = {}
    for listed in tape.store.listed_events(ids, [LABEL_KIND]):
        run_id, seq, data = listed[0], listed[1], listed[7]
        if run_id not in latest or seq > latest[run_id][0]:
            latest[run_id] = (seq, (data or {}).get("label"))
    return {rid: label for rid, (_, label) in latest.items()}


def run_summary(tape: Tape, run: RunRecord, label: str | None = None) -> dict[str, Any]:
    """``RunRecord.to_dict()`` (counters counted from the tape for a run that never ended) + label, duration."""
    run = counted_calls(tape, run)
    out = run.to_dict()
    out["meta"] = serde.redact(out.get("meta") or {}, tape.redact_keys)
    out["label"] = label
    out["duration"] = run.duration
    return out


def _matches(run: RunRecord, label: str | None, q: str) -> bool:
    needle = q.lower()
    return any(needle in (v or "").lower() for v in (run.run_id, run.thread_id, run.graph, label))


#: ``total`` of a runs page counts the matching runs up to this many, then says "more" (``total_exact``
#: false): a count of every run of a big store would cost more than the page.
TOTAL_LIMIT = 10_000


def cursor_of(run: RunRecord) -> str:
    """The keyset cursor after ``run``: its start time and id, as one URL-safe string."""
    raw = json.dumps([run.started_at, run.run_id], separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def parse_cursor(text: str) -> tuple[float, str]:
    """The ``(started_at, run_id)`` a cursor of :func:`cursor_of` holds; ``ValueError`` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        started, run_id = json.loads(raw)
    except (ValueError, TypeError, UnicodeDecodeError, binascii.Error):
        raise ValueError(f"cursor {text[:40]!r} is not one this server gave; use the 'next' of a runs page") from None
    if isinstance(started, bool) or not isinstance(started, (int, float)) or not isinstance(run_id, str):
        raise ValueError(f"cursor {text[:40]!r} is not one this server gave; use the 'next' of a runs page")
    return float(started), run_id


def list_runs(
    tape: Tape,
    *,
    graph: str | None = None,
    status: str | None = None,
    thread_id: str | None = None,
    q: str | None = None,
    since: float | None = None,
    until: float | None = None,
    mode: str | None = None,
    limit: int = 50,
    offset: int = 0,
    after: tuple[float, str] | None = None,
) -> tuple[list[dict[str, Any]], int, str | None]:
    """One page of the runs matching every filter, newest first; how many matched (up to
    :data:`TOTAL_LIMIT` + 1 without ``q``); the cursor of the next page.

    Without ``q`` the store filters and pages (its indexes: the page costs the same in a big
    store as in a small one; ``after``, a parsed cursor, continues after the previous page's
    last run, ``offset`` skips rows). ``q`` matches a substring of the id, thread, graph or label of every run the other
    filters keep, so it reads each of them and their labels.
    """
    filters: dict[str, Any] = {
        "thread_id": thread_id, "status": status, "graph": graph, "mode": mode, "since": since, "until": until,
    }  # fmt: skip
    if q:
        runs = tape.store.list_runs(limit=None, after=after, **filters)
        labels = labels_of(tape, [r.run_id for r in runs])
        runs = [r for r in runs if _matches(r, labels.get(r.run_id), q)]
        page, total, more = runs[offset : offset + limit], len(runs), len(runs) > offset + limit
    else:
        page = tape.store.list_runs(limit=limit + 1, offset=offset, after=after, **filters)
        more = len(page) > limit
        page = page[:limit]
        total = tape.store.count_runs(limit=TOTAL_LIMIT + 1, **filters)
        labels = labels_of(tape, [r.run_id for r in page])
    following = cursor_of(page[-1]) if more and page else None
    return [run_summary(tape, r, labels.get(r.run_id)) for r in page], total, following


# -- calls ----------------------------------------------------------------------------


def call_source(run: RunRecord, call: events.CallEvent) -> str:
    """Where a call's answer came from, in the API's words (a live call of a recording is ``recorded``)."""
    source = call.source or "live"
    if source in ("tape", "override"):
        return source
    return "recorded" if run.mode in ("record", "recover") else "live"


def error_text(error: dict[str, Any] | None) -> str | None:
    """A recorded error (``{type: "module:Class", message}``) as one line: ``Class: message``."""
    if not error:
        return None
    kind = str(error.get("type", "error")).rpartition(":")[2]
    return f"{kind}: {error.get('message', '')}"


def call_summary(run: RunRecord, row: EventRow) -> dict[str, Any]:
    """A call event as a ``CallSummary``: its time span ends when it was written."""
    call = events.parse(row)
    latency = float(call.latency) if call.latency is not None else None
    return {
        "call_id": call.call_id,
        "kind": call.CALL_KIND,
        "name": call.title,
        "node_path": call.node_path,
        "started_at": row.ts - latency if latency is not None else None,
        "ended_at": row.ts,
        "duration": latency,
        "source": call_source(run, call),
        "tokens": call.tokens,
        "cost": call.cost,
        "error": error_text(call.error),
    }


def run_calls(tape: Tape, run_id: str) -> list[dict[str, Any]]:
    run = tape.run(run_id)
    return [call_summary(run, row) for row in tape.store.events(run.run_id, events.CALL_EVENT_KINDS)]


def _request(tape: Tape, row: EventRow) -> Any:
    """The call's request, messages included; an LLM request split into ``messages``, ``params``, ``tools``."""
    try:
        recorded = RecordedCall.from_event(row)
    except ValueError:  # an incomplete call (no request recorded)
        return None
    request = serde.redact(tape.expand(tape.request(recorded)), tape.redact_keys)
    if recorded.kind != "llm":
        return request
    model = request.pop("model", None)
    params = dict(model) if isinstance(model, dict) else {}
    tools = params.pop("tools", None) or request.pop("tools", None)
    return {"messages": request.pop("messages", []), "params": params, "tools": tools or [], **request}


def call_detail(tape: Tape, run_id: str, call_id: str) -> dict[str, Any]:
    """One call of a run (exact id or unique prefix of 6+ characters): request and response expanded."""
    run = tape.run(run_id)
    rows = tape.store.events(run.run_id, events.CALL_EVENT_KINDS)
    found = [r for r in rows if str(r.data.get("call_id") or "").startswith(call_id)]
    exact = [r for r in found if r.data.get("call_id") == call_id]
    if exact:
        found = exact
    elif len(found) > 1 or (found and len(call_id) < 6):
        raise RunNotFound(f"call id prefix {call_id!r} is ambiguous or too short; give the whole call id")
    if not found:
        raise RunNotFound(
            f"no call {call_id!r} in run {run.run_id}; list its calls with GET /graphtape/runs/{run.run_id}/calls"
        )
    row = found[0]
    call = events.parse(row)
    response = shown(tape, call.response)
    return {
        "call": call_summary(run, row),
        "request": _request(tape, row),
        "response": response,
        "usage": usage_of(response) if call.CALL_KIND == "llm" else None,
        "latency": call.latency,
        "recorded_in": run.run_id,
    }


# -- one run ---------------------------------------------------------------------------


def _pending_interrupts(typed: list[tuple[EventRow, Any]]) -> list[dict[str, Any]]:
    """The run's interrupts; the node is known when one task was interrupted."""
    started = {ev.task: ev.node_path for _, ev in typed if isinstance(ev, events.TaskStarted)}
    stopped = [started.get(ev.task) for _, ev in typed if isinstance(ev, events.TaskInterrupted)]
    node = stopped[0] if len(set(stopped)) == 1 else None
    return [
        {"id": ev.interrupt_id, "value": ev.value, "node": node} for _, ev in typed if isinstance(ev, events.Interrupt)
    ]


def run_detail(tape: Tape, run_id: str) -> dict[str, Any]:
    """A run with its input, output, children, savings, pending interrupts and divergence."""
    run = tape.run(run_id)
    # only the kinds this view reads: a long run has thousands of task and call events it does not need
    kinds = [events.RunStarted.KIND, events.Resume.KIND, events.RunFinished.KIND, events.Divergence.KIND]
    if run.status == "interrupted":
        kinds += [events.Interrupt.KIND, events.TaskStarted.KIND, events.TaskInterrupted.KIND]
    if run.mode not in ("record", "recover"):
        kinds += list(events.CALL_EVENT_KINDS)
    rows = tape.store.events(run.run_id, kinds)
    typed = [(row, events.parse(row)) for row in rows]
    input_value: Any = None
    output: Any = None
    divergence: dict[str, Any] | None = None
    for _, ev in typed:
        if isinstance(ev, events.Resume):
            input_value = {"resume": shown(tape, ev.value)}
        elif isinstance(ev, events.RunStarted) and input_value is None:
            input_value = shown(tape, ev.input)
        elif isinstance(ev, events.RunFinished):
            output = shown(tape, ev.output)
        elif isinstance(ev, events.Divergence) and divergence is None:
            divergence = ev.to_data()
    # continuations are on the run's thread; replays, forks and recoveries name it as replay_of
    continued = [r for r in tape.store.list_runs(thread_id=run.thread_id, limit=None) if r.parent_run_id == run.run_id]
    made_from = [r for r in tape.store.list_replays() if r.replay_of == run.run_id]
    by_id = {r.run_id: r for r in [*continued, *made_from] if r.run_id != run.run_id}
    children = sorted(by_id.values(), key=lambda r: r.started_at)
    labels = labels_of(tape, [run.run_id, *(c.run_id for c in children)])
    savings = None
    if run.mode not in ("record", "recover"):
        stats = events.replay_stats(row for row, _ in typed if row.kind in events.CALL_EVENT_KINDS).to_dict()
        savings = {k: stats[k] for k in ("served", "live", "tokens_saved", "cost_saved", "time_saved")}
    return {
        "run": run_summary(tape, run, labels.get(run.run_id)),
        "input": input_value,
        "output": output,
        "children": [run_summary(tape, c, labels.get(c.run_id)) for c in children],
        "savings": savings,
        "interrupts": _pending_interrupts(typed) if run.status == "interrupted" else [],
        "divergence": divergence,
    }
