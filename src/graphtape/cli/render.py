"""Turning runs, events and replay results into rich renderables (and short text).

Nothing here writes to a terminal: functions return rich objects or
strings, so the CLI decides where they go and tests can render them at a
fixed width.

Payloads are shown without executing anything from the tape: LangChain
objects are revived only through langchain-core's allow-list (what
``serde.decode_value`` does), and pydantic models, dataclasses and enums
recorded on a tape are shown as their stored JSON instead of importing the
classes they name.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

from rich.text import Text

from graphtape import events
from graphtape.summary import _message_parts, message_summary, summarize

STATUS_STYLES = {
    "finished": "green",
    "interrupted": "yellow",
    "running": "cyan",
    "failed": "red",
    "diverged": "bold red",
}
SOURCE_STYLES = {"live": "yellow", "tape": "green", "override": "magenta"}
#: the style of each call kind (``events.CALL_KINDS``)
CALL_STYLES = dict(zip(events.CALL_KINDS, ("bold cyan", "bold blue", "bold magenta")))

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

# ---------------------------------------------------------------------------
# small formatters
# ---------------------------------------------------------------------------


def short_id(run_id: str | None) -> str:
    return (run_id or "")[:8]


def short_thread(thread_id: str | None) -> str:
    """uuid-like thread ids shortened to 8 characters; names people chose kept."""
    t = thread_id or ""
    if _UUID.match(t):
        return t[:8]
    prefix, _, rest = t.partition("-")
    if rest and _UUID.match(rest):
        return f"{prefix}-{rest[:8]}"
    return t


def keep_tail(text: str, width: int) -> str:
    """``text`` cut from the left to ``width`` characters (the end of a path says most)."""
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def fmt_time(ts: float | None) -> str:
    if not ts:
        return "-"
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs" if seconds > 0 else "0 ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def fmt_cost(cost: float | None) -> str:
    if not cost:
        return "$0"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def state_lines(state: Any, width: int = 100) -> list[tuple[str, str]]:
    """``[(key, summary)]`` for a state dict; one ``("", summary)`` row otherwise."""
    if isinstance(state, dict) and state and all(isinstance(k, str) for k in state):
        return [(k, summarize(v, width)) for k, v in state.items()]
    return [("", summarize(state, width))]


def readable_lines(value: Any, width: int = 100) -> list[str]:
    """A state or a recorded answer as lines a person reads: messages one per line as ``show`` prints
    them (``[ai] text → tool(args)``), other values as one-line JSON. For the debugger's ``state``/``req``."""

    def value_lines(v: Any, indent: str) -> list[str]:
        if isinstance(v, (list, tuple)) and v and all(_message_parts(m) is not None for m in v):
            return [f"{indent}{message_summary(m, width - len(indent))}" for m in v]
        return [f"{indent}{summarize(v, width - len(indent))}"]

    if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
        out = []
        for key, v in value.items():
            lines = value_lines(v, "    ")
            if len(lines) == 1 and not (isinstance(v, (list, tuple)) and v and _message_parts(v[0]) is not None):
                out.append(f"  {key}: {lines[0].strip()}")
            else:
                out.append(f"  {key}: {len(lines)} message(s)")
                out.extend(lines)
        return out
    return value_lines(value, "  ")
