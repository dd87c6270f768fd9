"""A replay's result as the CLI shows it: the summary panel, the unused calls and the divergence.

Split from :mod:`graphtape.cli.render` (formatters and value display) and
:mod:`graphtape.cli.render_run` (runs and their timelines).
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from graphtape.cli.render import (
    STATUS_STYLES,
    fmt_cost,
    fmt_duration,
    status_text,
)

# ---------------------------------------------------------------------------
# replay
# ---------------------------------------------------------------------------


def unused_text(result: Any, reasons: dict[str, int] | None) -> Text:
    """What the unused recorded calls were, one reason per line (see ``debug/explain.py``)."""
    from graphtape.debug.explain import REASONS

    text = Text(f"{result.unused} recorded call(s) not needed by this replay")
    for reason, n in (reasons or {}).items():
        text.append(f"\n{n}: {REASONS.get(reason, reason)}", style="dim")
    return text


def replay_panel(result: Any, from_checkpoint: str | None = None, reasons: dict[str, int] | None = None) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("status", status_text(result.status))
    grid.add_row("replay run", result.run_id or "-")
    if len(result.run_ids) > 1:
        grid.add_row("runs", f"{len(result.run_ids)} (the thread's runs up to the target, in order)")
    grid.add_row("replay of", result.replay_of)
    if from_checkpoint:
        grid.add_row("from", f"checkpoint {from_checkpoint}")
    grid.add_row("thread", result.thread_id)
    grid.add_row("mode", result.mode)
    grid.add_row("calls", f"{result.served} served from tape, {result.live} live")
    grid.add_row(
        "saved",
        f"{result.tokens_saved} tokens, {fmt_cost(result.cost_saved)}, "
        f"{fmt_duration(result.time_saved)} of model/tool time",
    )
    if result.live:
        grid.add_row("spent live", f"{result.live_tokens} tokens, {fmt_cost(result.live_cost)}")
    if result.unused:
        grid.add_row("unused", unused_text(result, reasons))
    changed = getattr(result, "changed_code", None)
    if changed:
        what = "ran live" if result.mode in ("flight", "live") else "served from the tape all the same"
        grid.add_row("code changed", Text(f"{', '.join(changed)} (since recording; {what})", style="yellow"))
    if result.output_matches is not None:
        grid.add_row(
            "output",
            Text("matches the recording", style="green")
            if result.output_matches
            else Text("differs from the recording", style="yellow"),
        )
    if result.error and not result.divergence:
        grid.add_row("error", Text(result.error, style="red"))
    style = STATUS_STYLES.get(result.status, "")
    return Panel(grid, title=f"replay ({result.mode})", title_align="left", border_style=style or "none", expand=False)


def divergence_view(result: Any) -> Group:
    d = result.divergence or {}
    parts: list[Any] = [Text(result.error or "replay diverged", style="bold red")]
    diff = d.get("diff")
    if diff:
        parts.append(Syntax(diff, "diff", theme="ansi_dark", background_color="default", word_wrap=True))
    return Group(*parts)
