"""Rich renderables for ``graphtape history``, ``graphtape state`` and ``graphtape diff``.

Like :mod:`graphtape.cli.render`, nothing here prints: functions return rich
objects so the CLI decides where they go and tests render them at a fixed
width.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from rich.console import Group
from rich.text import Text
from rich.tree import Tree

from graphtape import serde
from graphtape.cli.render import CALL_STYLES, SOURCE_STYLES, fmt_time, short_id, short_thread, status_text, summarize
from graphtape.debug.diff import StateDiff, json_view, show_value
from graphtape.debug.history import Branch, BranchRun, CheckpointRef, History, HistoryEntry

CHECKPOINT_SOURCE_STYLES = {"input": "cyan", "loop": "", "update": "magenta", "fork": "magenta"}
BRANCH_STYLES = {"main": "bold", "fork": "bold magenta", "replay": "bold blue"}


def _clock(created_at: str | None) -> str:
    """An ISO timestamp as local ``HH:MM:SS.mmm``."""
    if not created_at:
        return "-"
    try:
        ts = _dt.datetime.fromisoformat(created_at)
    except ValueError:
        return created_at
    if ts.tzinfo is not None:
        ts = ts.astimezone()
    return ts.strftime("%H:%M:%S.") + f"{ts.microsecond // 1000:03d}"


def _one_row(text: Text) -> Text:
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


def entry_label(e: HistoryEntry) -> Text:
    """``step  source  checkpoint-id  time  writers`` on one row."""
    t = Text()
    if e.ns:
        t.append("/".join(seg.split(":", 1)[0] for seg in e.ns.split("|")) + " ", style="cyan")
    t.append(f"{e.step if e.step is not None else '?':>4}", style="bold")
    t.append("  ")
    t.append(f"{e.source or '?':<6}", style=CHECKPOINT_SOURCE_STYLES.get(e.source or "", ""))
    t.append("  ")
    t.append(e.checkpoint_id)
    t.append(f"  {_clock(e.created_at)}", style="dim")
    if e.writers:
        t.append("  ")
        t.append(", ".join(e.writers), style="bold")
    if e.copied_from and e.copied_from != e.checkpoint_id:
        t.append(f"  copy of {e.copied_from}", style="dim")
    elif e.copied_from:
        t.append("  (copied here)", style="dim")
    if e.calls:
        t.append(f"  {len(e.calls)} call(s)", style="dim")
    return _one_row(t)


def call_label(call: dict[str, Any]) -> Text:
    kind = str(call.get("kind") or "?")
    t = Text()
    t.append(f"{kind} ", style=CALL_STYLES.get(kind, "bold magenta"))
    t.append(str(call.get("name") or "?"))
    source = str(call.get("source") or "live")
    t.append("  ")
    t.append(source, style=SOURCE_STYLES.get(source, ""))
    if call.get("node_path"):
        t.append(f"  in {call['node_path']}", style="dim")
    if call.get("error"):
        t.append("  ✗ error", style="red")
    if call.get("call_id"):
        t.append(f"  call {call['call_id']}", style="dim")
    return _one_row(t)


def run_label(run: BranchRun, *, here: bool = False) -> Text:
    t = Text()
    t.append("run ", style="bold")
    t.append(run.run_id if here else short_id(run.run_id), style="bold")
    t.append("  ")
    t.append_text(status_text(run.status))
    t.append(f"  {run.mode}", style="dim")
    t.append(f"  {fmt_time(run.started_at)}", style="dim")
    if run.replay_of:
        t.append(f"  replay of {short_id(run.replay_of)}", style="dim")
    for key in ("fork_of", "override_of", "invalidate_from"):
        if run.detail.get(key):
            t.append(f"  {key.replace('_', ' ')} {run.detail[key]!s}", style="dim")
    if run.label:
        t.append("  ")
        t.append(f"[{run.label}]", style="bold yellow")
    if run.note:
        t.append(f"  {run.note}", style="italic")
    if here:
        t.append("  ◀", style="bold")
    return _one_row(t)


def branch_label(b: Branch, sources: dict[str, str | None] | None = None) -> Text:
    t = Text()
    t.append(b.kind, style=BRANCH_STYLES.get(b.kind, "bold"))
    t.append(f" {short_id(b.id)}")
    t.append(f"  thread {short_thread(b.thread_id)}", style="dim")
    t.append(f"  {len(b.runs)} run(s)", style="dim")
    if b.from_run:
        t.append(f"  from run {short_id(b.from_run)}", style="dim")
    if b.from_checkpoint:
        t.append(f"  at {b.from_checkpoint}", style="dim")
    if b.via:
        kinds = [(sources or {}).get(cid) or "checkpoint" for cid in b.via]
        t.append("  via " + ", ".join(dict.fromkeys("copy" if k == "loop" else k for k in kinds)), style="dim")
    if b.label:
        t.append("  ")
        t.append(f"[{b.label}]", style="bold yellow")
    if b.note:
        t.append(f"  {b.note}", style="italic")
    return _one_row(t)


def newest(history: History, n: int) -> set[str]:
    """Ids of the newest ``n`` root checkpoints of a history and of the subgraph checkpoints within them."""
    roots = [e for e in history.entries if not e.ns]
    kept = {e.checkpoint_id for e in roots[-n:]} if n > 0 else set()
    return kept | {e.checkpoint_id for e in history.entries if e.ns and e.within in kept}


class _Placer:
    """Where each entry and branch goes in the tree (``shown``: the entries listed; ``None``: all)."""

    def __init__(self, history: History, shown: set[str] | None = None):
        self.h = history
        self.by_run: dict[str | None, list[HistoryEntry]] = {}
        self.nested: dict[str, list[HistoryEntry]] = {}
        self.after: dict[str, list[HistoryEntry]] = {}
        #: run id -> how many of its checkpoints are not shown (``--last``)
        self.hidden: dict[str | None, int] = {}
        self.listed = {e.checkpoint_id for e in history.entries}
        via = {cid for root in history.branches for b in root.walk() for cid in b.via}
        self.by_id = {e.checkpoint_id: e for e in history.entries}
        self.sources = {cid: self.by_id[cid].source for cid in via if cid in self.by_id}
        self.loose: list[HistoryEntry] = []
        for e in history.entries:
            if shown is not None and e.checkpoint_id not in shown:
                if not e.ns:
                    self.hidden[e.run_id] = self.hidden.get(e.run_id, 0) + 1
                continue
            if e.ns and e.within and e.within in self.listed:
                self.nested.setdefault(e.within, []).append(e)
            elif e.run_id is not None:
                self.by_run.setdefault(e.run_id, []).append(e)
            elif e.checkpoint_id in via:
                continue
            elif e.parent_id in self.listed:
                self.after.setdefault(e.parent_id, []).append(e)
            else:
                self.loose.append(e)
        self.at_checkpoint: dict[str, list[Branch]] = {}
        self.at_run: dict[str, list[Branch]] = {}
        self.placed: set[str] = set()

    def index_children(self, b: Branch) -> None:
        for child in b.children:
            if child.from_checkpoint and child.from_checkpoint in self.listed:
                self.at_checkpoint.setdefault(child.from_checkpoint, []).append(child)
            elif child.from_run:
                self.at_run.setdefault(child.from_run, []).append(child)
            self.index_children(child)


def _add_entry(node: Tree, e: HistoryEntry, placer: _Placer, *, expand_calls: bool) -> None:
    sub = node.add(entry_label(e))
    if expand_calls:
        for call in e.calls:
            sub.add(call_label(call))
    for inner in placer.nested.get(e.checkpoint_id, []):
        _add_entry(sub, inner, placer, expand_calls=expand_calls)
    for follow in placer.after.get(e.checkpoint_id, []):
        _add_entry(sub, follow, placer, expand_calls=expand_calls)
    for child in placer.at_checkpoint.get(e.checkpoint_id, []):
        _add_branch(sub, child, placer, expand_calls=expand_calls)


def _add_branch(node: Tree, b: Branch, placer: _Placer, *, expand_calls: bool, focus: str | None = None) -> None:
    if b.id in placer.placed:
        return
    placer.placed.add(b.id)
    sub = node.add(branch_label(b, placer.sources))
    for cid in b.via:
        e = placer.by_id.get(cid)
        if e is not None:
            sub.add(entry_label(e))
    _add_runs(sub, b, placer, expand_calls=expand_calls, focus=focus)


def _add_runs(node: Tree, b: Branch, placer: _Placer, *, expand_calls: bool, focus: str | None = None) -> None:
    runs = b.runs
    if focus is not None and focus in b.run_ids:
        i = b.run_ids.index(focus)
        if i > 0:
            node.add(Text(f"… {i} earlier run(s) on this branch", style="dim"))
        shown = [runs[i]]
        later = len(runs) - i - 1
    else:
        shown, later = runs, 0
    for run in shown:
        rnode = node.add(run_label(run, here=run.run_id == focus))
        entries = placer.by_run.get(run.run_id, [])
        if not entries and run.thread_id != placer.h.thread_id:
            rnode.add(Text(f"checkpoints: graphtape history {run.thread_id}", style="dim"))
        if placer.hidden.get(run.run_id):
            rnode.add(Text(f"… {placer.hidden[run.run_id]} earlier checkpoint(s) not shown (--last)", style="dim"))
        for e in entries:
            _add_entry(rnode, e, placer, expand_calls=expand_calls)
        for child in placer.at_run.get(run.run_id, []):
            _add_branch(rnode, child, placer, expand_calls=expand_calls)
    if later:
        node.add(Text(f"… {later} later run(s) on this branch", style="dim"))


def history_tree(history: History, *, expand_calls: bool = True, last: int | None = None) -> Tree:
    """The history as a tree: branches, their runs, each run's checkpoints (and calls), branches off them.

    ``last``: list only the newest ``last`` root checkpoints (each run says how many of its own are not shown).
    """
    n_runs = len({e.run_id for e in history.entries if e.run_id})
    head = Text()
    if history.kind == "run":
        head.append("history of run ", style="bold")
        head.append(history.run_id or history.target, style="bold")
        head.append(f"  thread {history.thread_id}", style="dim")
    else:
        head.append("history of thread ", style="bold")
        head.append(history.thread_id, style="bold")
        head.append(f"  {n_runs} run(s)", style="dim")
    head.append(f"  {len(history.entries)} checkpoint(s)", style="dim")
    shown = newest(history, last) if last is not None else None
    if shown is not None and len(shown) < len(history.entries):
        head.append(f", the newest {last} shown", style="dim")
    if history.namespaces:
        head.append("  with subgraphs", style="dim")
    if history.source == "events":
        head.append("  (from the tape: the checkpoints are in the graph's own saver)", style="dim")
    tree = Tree(head)
    placer = _Placer(history, shown)
    for root in history.branches:
        placer.index_children(root)
    if history.kind == "run":
        b = history.branch_of(history.run_id or "")
        if b is not None:
            node = tree.add(branch_label(b, placer.sources))
            placer.placed.add(b.id)
            _add_runs(node, b, placer, expand_calls=expand_calls, focus=history.run_id)
    else:
        for root in history.branches:
            placer.placed.add(root.id)
            node = tree.add(branch_label(root, placer.sources))
            _add_runs(node, root, placer, expand_calls=expand_calls)
            for child in root.children:
                if child.id not in placer.placed and child.from_run is None:
                    _add_branch(node, child, placer, expand_calls=expand_calls)
    for e in placer.loose:
        _add_entry(tree, e, placer, expand_calls=expand_calls)
    if not history.entries:
        tree.add(Text("no checkpoints", style="dim"))
    return tree


# ---------------------------------------------------------------------------
# state
# ---------------------------------------------------------------------------


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_msg(v) for v in value)


def _is_msg(v: Any) -> bool:
    from graphtape.debug.diff import message_view

    return message_view(v) is not None


def state_view(ref: CheckpointRef, values: dict[str, Any], width: int = 100) -> Group:
    head = Text()
    head.append("checkpoint ", style="bold")
    head.append(ref.checkpoint_id, style="bold")
    head.append(f"  thread {ref.thread_id}", style="dim")
    if ref.ns:
        head.append(f"  ns {ref.ns}", style="dim")
    head.append(f"  step {ref.step if ref.step is not None else '?'} ({ref.source or '?'})", style="dim")
    if ref.run_id:
        head.append(f"  run {short_id(ref.run_id)}", style="dim")
    parts: list[Any] = [head]
    if not values:
        parts.append(Text("  (empty state)", style="dim"))
    for key, value in values.items():
        if _is_message_list(value):
            parts.append(_one_row(Text(f"  {key}: {len(value)} message(s)")))
            for item in value:
                parts.append(_one_row(Text(f"    {show_value(json_view(item), width)}")))
        else:
            parts.append(_one_row(Text(f"  {key}: {summarize(serde.to_jsonable(value), width)}")))
    return Group(*parts)


def state_json(ref: CheckpointRef, values: dict[str, Any]) -> dict[str, Any]:
    return {**ref.to_dict(), "values": serde.to_jsonable(values)}


# ---------------------------------------------------------------------------
# diff
# ---------------------------------------------------------------------------

_LINE_STYLES = {"+": "green", "-": "red", "~": "yellow"}


def diff_view(diff: StateDiff, a: CheckpointRef, b: CheckpointRef) -> Group:
    head = Text()
    head.append("diff ", style="bold")
    head.append(a.checkpoint_id)
    head.append(f" ({short_thread(a.thread_id)} step {a.step})", style="dim")
    head.append(" → ")
    head.append(b.checkpoint_id)
    head.append(f" ({short_thread(b.thread_id)} step {b.step})", style="dim")
    lines: list[Any] = [head]
    top = ""
    for line in diff.lines():
        if line.startswith("    "):  # the items of an append, or the line diff of a changed text
            inner = line.strip()
            if top == "~":
                style = "green" if inner.startswith("+") else "red" if inner.startswith("-") else "dim"
            else:
                style = _LINE_STYLES.get(top, "")
        else:
            top = line[:1]
            style = _LINE_STYLES.get(top, "")
        lines.append(Text(line, style=style))
    return Group(*lines)
