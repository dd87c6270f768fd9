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
import json
import re
from typing import Any

from rich.text import Text

from graphtape import events, serde
from graphtape.debug.display import display_value

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


def clip(text: str, width: int = 80) -> str:
    """The first line of ``text``, at most ``width`` characters (``…`` marks a cut)."""
    lines = str(text).strip().splitlines()
    first = lines[0].strip() if lines else ""
    if len(first) > width:
        return first[: max(1, width - 1)].rstrip() + "…"
    if len(lines) > 1:
        return first + " …"
    return first


# ---------------------------------------------------------------------------
# payloads
# ---------------------------------------------------------------------------


def _message_parts(msg: Any) -> tuple[str, Any, list[dict[str, Any]]] | None:
    """(role, content, tool_calls) of a message object or a dumped message dict."""
    from langchain_core.messages import BaseMessage

    if isinstance(msg, BaseMessage):
        return msg.type, msg.content, list(getattr(msg, "tool_calls", None) or [])
    if isinstance(msg, dict) and msg.get("lc") == 1 and isinstance(msg.get("kwargs"), dict):
        ident = msg.get("id") or []
        if ident and str(ident[-1]).endswith(("Message", "MessageChunk")):
            kw = msg["kwargs"]
            role = kw.get("type") or str(ident[-1]).removesuffix("MessageChunk").removesuffix("Message").lower()
            return role, kw.get("content"), list(kw.get("tool_calls") or [])
    return None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return " ".join(parts)


def message_summary(msg: Any, width: int = 80) -> str | None:
    parts = _message_parts(msg)
    if parts is None:
        return None
    role, content, tool_calls = parts
    text = _content_text(content).strip()
    bits = [clip(text, width)] if text else []
    for tc in tool_calls:
        args = json.dumps(tc.get("args"), sort_keys=True, default=str)
        bits.append(f"→ {tc.get('name')}({args})")
    body = " ".join(bits) if bits else "(empty)"
    return clip(f"[{role}] {body}", width)


def summarize(value: Any, width: int = 80) -> str:
    """One line describing ``value`` (a state, a response, an input)."""
    single = message_summary(value, width)
    if single is not None:
        return single
    if isinstance(value, str):
        return clip(json.dumps(value, ensure_ascii=False), width)
    if isinstance(value, (list, tuple)) and value and all(_message_parts(m) is not None for m in value):
        last = message_summary(value[-1], width) or ""
        return clip(last if len(value) == 1 else f"{len(value)} messages, last {last}", width)
    try:
        text = json.dumps(serde.to_jsonable(value), ensure_ascii=False, sort_keys=False, default=str)
    except Exception:
        text = repr(value)
    return clip(text, width)


def response_summary(env: Any, width: int = 60) -> str:
    """The first line of a recorded response (an LLM message list, a tool result...)."""
    value = display_value(env)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    parts = _message_parts(value)
    if parts is not None:
        role, content, tool_calls = parts
        text = _content_text(content).strip()
        if role == "tool":
            return clip(text, width) if text else '""'
        bits = [clip(text, width)] if text else []
        bits += [f"→ {tc.get('name')}({json.dumps(tc.get('args'), sort_keys=True, default=str)})" for tc in tool_calls]
        return clip(" ".join(bits) if bits else "(empty)", width)
    if isinstance(value, str):
        return clip(value, width) if value.strip() else '""'
    return summarize(value, width)


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
