"""A run as the CLI shows it: the runs table and the timeline of one run (tasks, calls, checkpoints).

Split from :mod:`graphtape.cli.render`, which keeps the small formatters and
the safe display of recorded values that both this module and
:mod:`graphtape.cli.render_replay` use.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any, TypeVar

from rich import box
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from graphtape import events, serde
from graphtape.cli.render import (
    CALL_STYLES,
    SOURCE_STYLES,
    fmt_duration,
    fmt_time,
    keep_tail,
    short_id,
    short_thread,
    state_lines,
    status_text,
    summarize,
)
from graphtape.debug.display import display_value
from graphtape.pricing import no_price_hint
from graphtape.store.base import EventRow, RunRecord
from graphtape.summary import clip, response_summary

_E = TypeVar("_E", bound=events.Event)

# ---------------------------------------------------------------------------
# runs table
# ---------------------------------------------------------------------------


def run_to_json(run: RunRecord) -> dict[str, Any]:
    d = run.to_dict()
    d["duration"] = run.duration
    d["calls"] = run.calls
    return d


#: Columns of ``graphtape runs``.
RUN_COLUMNS = ("id", "graph", "thread", "status", "mode", "started", "duration", "calls", "tokens", "replay of")

#: How the runs table is made to fit a narrow terminal, one step at a time until it fits.
_SHRINK_STEPS: tuple[tuple[str, Any], ...] = (
    ("short_time", True),
    ("graph", 20),
    ("drop", "duration"),
    ("drop", "tokens"),
    ("graph", 14),
    ("thread", 12),
    ("drop", "replay of"),
    ("drop", "mode"),
    ("drop", "calls"),
)


def _run_cells(r: RunRecord, fit: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": short_id(r.run_id),
        "graph": keep_tail(r.graph, fit["graph"]),
        "thread": keep_tail(short_thread(r.thread_id), fit["thread"]),
        "status": status_text(r.status),
        "mode": r.mode,
        "started": _short_time(r.started_at) if fit["short_time"] else fmt_time(r.started_at),
        "duration": fmt_duration(r.duration),
        "calls": f"{r.llm_calls}/{r.tool_calls}/{r.effect_calls}",
        "tokens": str(r.tokens),
        "replay of": short_id(r.replay_of) or "-",
    }


def _short_time(ts: float | None) -> str:
    return _dt.datetime.fromtimestamp(ts).strftime("%m-%d %H:%M") if ts else "-"


def runs_table(runs: list[RunRecord], width: int = 120) -> Table:
    """The runs as a table fitting ``width`` columns: long names cut, minor columns left out."""
    fit: dict[str, Any] = {"graph": 30, "thread": 24, "short_time": False, "columns": list(RUN_COLUMNS)}

    def natural() -> int:
        cols = fit["columns"]
        rows = [_run_cells(r, fit) for r in runs]
        # one space of padding each side of a column plus the box's separator
        return 3 * (len(cols) - 1) + sum(max([len(c)] + [len(str(row[c])) for row in rows]) for c in cols)

    for what, value in _SHRINK_STEPS:
        if natural() <= width:
            break
        if what == "drop":
            fit["columns"].remove(value)
        else:
            fit[what] = value
    columns = fit["columns"]
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        caption="calls = llm/tool/effect" if "calls" in columns else None,
    )
    right = {"duration", "calls", "tokens"}
    for c in columns:
        table.add_column(
            c,
            no_wrap=True,
            overflow="ellipsis",
            justify="right" if c in right else "left",
            style="bold" if c == "id" else None,
            min_width=8 if c == "id" else None,
        )
    for r in runs:
        cells = _run_cells(r, fit)
        table.add_row(*(cells[c] for c in columns))
    return table


# ---------------------------------------------------------------------------
# show: one run as a tree
# ---------------------------------------------------------------------------


def _one_row(text: Text) -> Text:
    """A label kept to one terminal row (cut with an ellipsis) so the tree stays scannable."""
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


def _call_label(call: events.CallEvent, payload: Callable[[str], Any]) -> Text:
    kind = call.CALL_KIND
    label = Text()
    label.append(f"{kind} ", style=CALL_STYLES.get(kind, "bold magenta"))
    label.append(str(call.title or "?"))
    if call.call_id:  # what `graphtape override RUN CALL` takes (a unique prefix is enough)
        label.append(f"  #{str(call.call_id)[:8]}", style="dim")
    source = call.source or "live"
    label.append("  ")
    label.append(source, style=SOURCE_STYLES.get(source, ""))
    if call.tokens:
        label.append(f"  {call.tokens} tok", style="dim")
    if source != "live" and call.recorded_latency is not None:
        label.append(f"  {fmt_duration(call.recorded_latency)} saved", style="dim")
    elif call.latency is not None:
        label.append(f"  {fmt_duration(call.latency)}", style="dim")
    if call.error:
        label.append(f"  ✗ {_error_line(call.error, 60)}", style="red")
    elif call.response:
        try:
            summary = response_summary(payload(call.response))
        except Exception as exc:  # a missing blob: show the call anyway
            summary = f"(response unreadable: {clip(str(exc), 40)})"
        label.append("  ")
        label.append(summary, style="italic")
    return label


def _error_line(error: dict[str, Any], width: int) -> str:
    """``Type: message`` of a recorded error (``{type: "module:Class", message}``)."""
    typ = str(error.get("type", "error")).rpartition(":")[2]
    return f"{typ}: {clip(str(error.get('message', '')), width)}"


def _task_label(started: events.TaskStarted, end: events.Event | None) -> Text:
    label = Text()
    # tapes written before the compact format named the node ("node") rather than its path
    label.append(str(started.node_path or (started.extra or {}).get("node") or "?"), style="bold")
    if end is None:
        label.append("  (no end recorded)", style="dim")
        return label
    assert isinstance(end, (events.TaskFinished, events.TaskFailed, events.TaskInterrupted))
    label.append(f"  {fmt_duration(end.duration)}", style="dim")
    if isinstance(end, events.TaskInterrupted):
        label.append("  interrupted", style="yellow")
    elif isinstance(end, events.TaskFailed):
        label.append(f"  failed: {_error_line(end.error or {}, 70)}", style="red")
    return label


class _Task:
    def __init__(self, started: events.TaskStarted):
        self.started = started
        self.end: events.Event | None = None
        self.ns: str = started.task or ""
        self.children: list[tuple[int, str, Any]] = []  # (seq, kind, payload)


def _parent_ns(ns: str) -> str:
    return ns.rpartition("|")[0]


def _first(typed: list[tuple[int, events.Event]], cls: type[_E]) -> _E | None:
    return next((ev for _, ev in typed if isinstance(ev, cls)), None)


def run_tree(run: RunRecord, rows: list[EventRow], payload: Callable[[str], Any], *, width: int = 100) -> Tree:
    """The run as a tree: header, steps, node tasks, calls, checkpoints, end."""
    head = Text()
    head.append("run ", style="bold")
    head.append(run.run_id, style="bold")
    head.append("  ")
    head.append(run.graph, style="cyan")
    head.append("  ")
    head.append_text(status_text(run.status))
    tree = Tree(head)

    typed = [(row.seq, events.parse(row)) for row in rows]
    started = _first(typed, events.RunStarted)
    resume = _first(typed, events.Resume)
    info = Table.grid(padding=(0, 2))
    info.add_column(style="dim", no_wrap=True)
    info.add_column(overflow="fold")
    meta = run.meta or {}
    if meta.get("no_checkpointer") and run.mode == "record":
        given = meta.get("thread_id_given")
        # (the graph has no checkpointer: LangGraph ran the call afresh, graphtape on a thread of its own)
        info.add_row(
            "thread",
            f"{run.thread_id} (its own: the graph has no checkpointer"
            + (f"; called with thread_id {given})" if given else ")"),
        )
    else:
        info.add_row("thread", run.thread_id)
    info.add_row("mode", run.mode + (f" (replay of {run.replay_of})" if run.replay_of else ""))
    info.add_row("started", f"{fmt_time(run.started_at)}  ({fmt_duration(run.duration)})")
    if run.parent_run_id:
        info.add_row("previous run", run.parent_run_id)
    if meta.get("recovers"):
        info.add_row("recovers", f"{meta['recovers']} (crashed; this run finished it)")
    if meta.get("recovered_by"):
        info.add_row("recovered by", f"{meta['recovered_by']} (replay and export follow it)")
    # served and live say something only for a replay: every call of a recording (or its recovery) was live
    replayed = run.mode not in ("record", "recover")
    info.add_row(
        "calls",
        f"{run.llm_calls} llm · {run.tool_calls} tool · {run.effect_calls} effect"
        + (f" ({run.served_calls} served, {run.live_calls} live)" if replayed else ""),
    )
    info.add_row("tokens", str(run.tokens))
    model_calls = [ev for _, ev in typed if isinstance(ev, events.LlmCall) and not ev.served]
    unpriced = sorted({str(ev.model or "") for ev in model_calls if ev.cost is None and ev.tokens})
    cost = sum(ev.cost or 0.0 for ev in model_calls)
    if unpriced:
        priced = f"${cost:.5f} for the priced calls; " if cost else ""
        info.add_row("cost", f"– ({priced}{no_price_hint(', '.join(unpriced))})")
    elif model_calls:
        info.add_row("cost", f"${cost:.5f}")
    if started is not None:
        try:
            if resume is not None:  # the input was Command(resume=...): show the answer
                value = display_value(payload(str(resume.value)))
                info.add_row("input", f"Command(resume={summarize(value, width)})")
            else:
                view = display_value(payload(started.input)) if started.input else None
                info.add_row("input", summarize(view, width))
        except Exception as exc:
            info.add_row("input", f"(unreadable: {clip(str(exc), 60)})")
        versions: Any = started.versions or {}
        if isinstance(versions, str):  # stored by address: it repeats from run to run
            try:
                versions = payload(versions)
            except Exception:
                versions = {}
        if versions:
            info.add_row("versions", ", ".join(f"{k} {v}" for k, v in versions.items()))
        # older tapes kept the code fingerprint in the event, newer ones in the run's meta
        fingerprint = (started.extra or {}).get("code_fingerprint") or (run.meta or {}).get("code_fingerprint")
        if fingerprint:
            info.add_row("code", str(fingerprint))
    if run.error:
        info.add_row("error", Text(run.error, style="red"))
    tree.add(info)

    # -- collect tasks, calls and checkpoints ---------------------------------
    tasks: list[_Task] = []
    open_by_ns: dict[str, _Task] = {}
    by_ns: dict[str, _Task] = {}
    steps: dict[int, list[tuple[int, str, Any]]] = {}
    loose: list[tuple[int, str, Any]] = []
    tail: list[events.Event] = []

    def attach_to_task(ns: str) -> _Task | None:
        cur = ns
        while cur:
            if cur in by_ns:
                return by_ns[cur]
            cur = _parent_ns(cur)
        return None

    for seq, ev in typed:
        if isinstance(ev, events.TaskStarted):
            t = _Task(ev)
            tasks.append(t)
            open_by_ns[t.ns] = t
            by_ns[t.ns] = t
            parent = attach_to_task(_parent_ns(t.ns)) if "|" in t.ns else None
            if parent is not None:
                parent.children.append((seq, "task", t))
            else:
                steps.setdefault(int(ev.step or 0), []).append((seq, "task", t))
        elif isinstance(ev, (events.TaskFinished, events.TaskFailed, events.TaskInterrupted)):
            ended = open_by_ns.pop(ev.task or "", None)
            if ended is not None:
                ended.end = ev
        elif isinstance(ev, events.CallEvent):
            ns = ev.task or ""
            owner = attach_to_task(ns) if ns != "(root)" else None
            if owner is not None:
                owner.children.append((seq, "call", ev))
            elif ev.step is not None:
                steps.setdefault(int(ev.step), []).append((seq, "call", ev))
            else:
                loose.append((seq, "call", ev))
        elif isinstance(ev, events.Checkpoint):
            ns = ev.ns or ""
            owner = attach_to_task(ns) if ns else None
            if owner is not None:
                owner.children.append((seq, "checkpoint", ev))
            else:
                steps.setdefault(int(ev.step if ev.step is not None else 0), []).append((seq, "checkpoint", ev))
        elif isinstance(ev, events.Resume):
            label = Text("resumed with ", style="yellow")
            try:
                label.append(summarize(display_value(payload(str(ev.value))), width))
            except Exception as exc:
                label.append(f"(unreadable: {clip(str(exc), 60)})")
            tree.add(label)
        elif isinstance(ev, (events.Interrupt, events.Divergence, events.RunFinished, events.RunFailed)):
            tail.append(ev)

    def add_items(node: Tree, items: list[tuple[int, str, Any]]) -> None:
        # tasks in the order they started, their checkpoints after them
        order = {"task": 0, "call": 0, "checkpoint": 1}
        for _, kind, item in sorted(items, key=lambda x: (order[x[1]], x[0])):
            if kind == "task":
                sub = node.add(_task_label(item.started, item.end))
                add_items(sub, item.children)
            elif kind == "call":
                node.add(_one_row(_call_label(item, payload)))
            else:
                node.add(Text(f"checkpoint {item.checkpoint_id} ({item.source or '?'})", style="dim"))

    for step in sorted(steps):
        label = Text(f"step {step}", style="bold")
        if step == -1:
            label.append(" (input)", style="dim")
        add_items(tree.add(label), steps[step])
    if loose:
        add_items(tree.add(Text("outside any step", style="bold")), loose)

    for ev in tail:
        if isinstance(ev, events.Interrupt):
            label = Text("interrupt ", style="yellow")
            label.append(str(ev.interrupt_id if ev.interrupt_id is not None else ""), style="dim")
            label.append("  waiting for: ")
            label.append(summarize(ev.value, width))
            tree.add(_one_row(label))
        elif isinstance(ev, events.Divergence):
            label = Text("divergence ", style="bold red")
            label.append(f"at {ev.kind} {ev.name} in node {ev.node_path or '?'} step {ev.step}: {ev.reason}")
            div = tree.add(label)
            if ev.diff:
                div.add(Syntax(ev.diff, "diff", theme="ansi_dark", background_color="default"))
        elif isinstance(ev, events.RunFailed):
            tree.add(Text(f"run failed: {_error_line(ev.error or {}, width)}", style="bold red"))
        elif isinstance(ev, events.RunFinished):
            label = Text("run ")
            label.append_text(status_text(ev.status if ev.status is not None else "finished"))
            end = tree.add(label)
            if ev.output:
                try:
                    out = payload(ev.output)
                    if isinstance(out, dict):  # pending interrupts are shown above
                        out = {k: v for k, v in out.items() if k != "__interrupt__"}
                    for key, summary in state_lines(out, width):
                        end.add(_one_row(Text(f"{key}: {summary}" if key else summary)))
                except Exception as exc:
                    end.add(Text(f"(output unreadable: {clip(str(exc), 60)})", style="dim"))
    return tree


def run_json(run: RunRecord, rows: list[EventRow], payload: Callable[[str], Any]) -> dict[str, Any]:
    """``graphtape show --json``: the run, its events, and its input and output resolved."""
    out: dict[str, Any] = {"run": run_to_json(run), "input": None, "output": None, "events": []}
    for row in rows:
        out["events"].append({"seq": row.seq, "kind": row.kind, "ts": row.ts, "data": row.data})
        ev = events.parse(row)
        try:
            if isinstance(ev, events.RunStarted) and ev.input:
                out["input"] = serde.to_jsonable(display_value(payload(ev.input)))
            elif isinstance(ev, events.RunFinished) and ev.output:
                out["output"] = payload(ev.output)
        except Exception:
            pass
    return out
