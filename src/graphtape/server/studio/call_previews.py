"""One-line previews of recorded calls, for the rows of a run's timeline.

A row of the timeline names a call by what it is, not only by its model or
tool: ``lookup_order(order_id="A-1001")`` for a tool or an effect (its name and
arguments), ``fake-support-1 ← [human] Hi, my blender…`` for a model call (the
last message it was sent), and previews what came back (the model's text or
the tools it asked for, the tool's result). The input and output tokens of a
model call come from the ``usage_metadata`` of its answer.

Only clipped strings travel: a preview reads the request (for a model call
only the last message of its chain) and the response of the call, never sends
them whole. A run's timeline previews at most :data:`PREVIEW_LIMIT` calls, so a
run of 10,000 calls opens as fast as before; the call detail shows any call in
full.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from graphtape import serde
from graphtape.debug.display import display_value
from graphtape.store.base import EventRow
from graphtape.summary import clip, message_summary, response_summary

if TYPE_CHECKING:
    from graphtape.tape import Tape

__all__ = ["PREVIEW_LIMIT", "PREVIEW_WIDTH", "call_preview", "usage_of"]

#: the calls of one run previewed in its timeline (the first ones; the others have no preview)
PREVIEW_LIMIT = 1000
#: characters of a preview line
PREVIEW_WIDTH = 120


def _arg(value: Any) -> str:
    return json.dumps(serde.to_jsonable(value), ensure_ascii=False, sort_keys=True, default=str)


def _signature(name: str, args: Any, kwargs: Any) -> str:
    """``name(a, b, k=v)`` of a tool's input (a dict is its keyword arguments) or an effect's arguments."""
    parts = [_arg(a) for a in args] if isinstance(args, (list, tuple)) else [] if args is None else [_arg(args)]
    if isinstance(kwargs, dict):
        parts += [f"{k}={_arg(v)}" for k, v in kwargs.items()]
    return clip(f"{name}({', '.join(parts)})", PREVIEW_WIDTH)


def usage_of(response: Any) -> dict[str, Any] | None:
    """The token usage an LLM answer reported (``usage_metadata`` of its message), if any."""
    items = response if isinstance(response, list) else [response]
    for item in items:
        if isinstance(item, dict):
            inner = item.get("kwargs")
            usage = (inner if isinstance(inner, dict) else item).get("usage_metadata")
            if isinstance(usage, dict):
                return usage
    return None


def _message_line(message: Any) -> str | None:
    """``[role] text → tool(args)`` of a message, in langchain's serialised form or as the tape stores it."""
    line = message_summary(message, PREVIEW_WIDTH)
    if line is not None or not isinstance(message, dict) or "type" not in message:
        return line
    content = message.get("content")
    text = (
        content
        if isinstance(content, str)
        else " ".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
    )
    bits = [text.strip()] if text and text.strip() else []
    bits += [f"→ {tc.get('name')}({_arg(tc.get('args'))})" for tc in message.get("tool_calls") or []]
    return clip(f"[{message['type']}] {' '.join(bits) or '(empty)'}", PREVIEW_WIDTH)


def _request_line(tape: Tape, kind: str, data: dict[str, Any]) -> str | None:
    title = str(data.get("name") or data.get("model") or "?")
    if kind == "llm":
        chain = data.get("messages")
        if not chain:
            return title
        hashes = tape.store.get_chain(chain)
        if not hashes:
            return title
        last = _message_line(tape.expand(tape.store.get_json(hashes[-1])))
        return clip(f"{title} ← {last}", PREVIEW_WIDTH) if last else title
    request = tape.store.get_json(data["request"]) if data.get("request") else None
    if not isinstance(request, dict):
        return title
    if kind == "tool":
        given = display_value(tape.expand(request.get("input")))
        return _signature(title, None, given) if isinstance(given, dict) else _signature(title, given, None)
    args = display_value(tape.expand(request.get("args")))
    return _signature(title, args, display_value(tape.expand(request.get("kwargs"))))


def call_preview(tape: Tape, row: EventRow) -> dict[str, Any]:
    """``{request, answer, input_tokens, output_tokens}`` of a call event; a part it cannot read is ``None``."""
    data = row.data
    kind = {"llm_call": "llm", "tool_call": "tool", "effect_call": "effect"}.get(row.kind, "")
    out: dict[str, Any] = {"request": None, "answer": None, "input_tokens": None, "output_tokens": None}
    try:
        out["request"] = _request_line(tape, kind, data)
    except Exception:  # a missing or damaged payload: the row keeps its name, the detail says what is wrong
        out["request"] = None
    if data.get("response"):
        try:
            response = serde.to_jsonable(display_value(tape.payload(data["response"])))
            out["answer"] = response_summary(response, PREVIEW_WIDTH)
            if kind == "llm":
                usage = usage_of(response) or {}
                out["input_tokens"], out["output_tokens"] = usage.get("input_tokens"), usage.get("output_tokens")
        except Exception:
            out["answer"] = None
    return out
