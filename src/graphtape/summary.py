"""One-line summaries of values, chat messages and recorded answers, in plain text.

The CLI's renderers (``graphtape show``, ``history``, the debugger) and the Studio's timeline
previews (:mod:`graphtape.server.studio.call_previews`) describe a call the same way: here, below
both, so the server does not import the CLI.
"""

from __future__ import annotations

import json
from typing import Any

from graphtape import serde
from graphtape.debug.display import display_value

__all__ = ["clip", "message_summary", "response_summary", "summarize"]


def clip(text: str, width: int = 80) -> str:
    """The first line of ``text``, at most ``width`` characters (``…`` marks a cut)."""
    lines = str(text).strip().splitlines()
    first = lines[0].strip() if lines else ""
    if len(first) > width:
        return first[: max(1, width - 1)].rstrip() + "…"
    if len(lines) > 1:
        return first + " …"
    return first


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
