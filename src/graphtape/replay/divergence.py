"""Divergence reports: what the code asked now versus what the tape holds.

A report names the run being replayed, the node, step and call, and shows a
unified diff of the two requests rendered as readable text (one line per
message, tool calls and model parameters as indented JSON), the way
Temporal's replayer names the command that no longer matches history.
"""

from __future__ import annotations

import difflib
import json
from typing import TYPE_CHECKING, Any

from graphtape.errors import Divergence

if TYPE_CHECKING:
    from graphtape.record.session import Call, Session
    from graphtape.replay.matcher import Matcher
    from graphtape.store.base import TapeStore


def render_message(m: Any) -> list[str]:
    """A serialised langchain message as a few readable lines."""
    if isinstance(m, dict) and m.get("lc") == 1 and "kwargs" in m:
        kw = m["kwargs"]
        role = kw.get("type") or m.get("id", ["?"])[-1]
        content = kw.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, sort_keys=True)
        lines = [f"[{role}] {line}" for line in (content.splitlines() or [""])]
        for tc in kw.get("tool_calls") or []:
            lines.append(f"[{role}] -> tool {tc.get('name')}({json.dumps(tc.get('args'), sort_keys=True)})")
        if kw.get("name") and role == "tool":
            lines[0] = lines[0].replace("[tool]", f"[tool {kw['name']}]", 1)
        return lines
    if isinstance(m, dict) and isinstance(m.get("type"), str) and "content" in m:  # graphtape's compact form
        role = m["type"]
        content = m["content"] if isinstance(m["content"], str) else json.dumps(m["content"], sort_keys=True)
        label = f"{role} {m['name']}" if role == "tool" and m.get("name") else role
        lines = [f"[{label}] {line}" for line in (content.splitlines() or [""])]
        for tc in m.get("tool_calls") or []:
            lines.append(f"[{role}] -> tool {tc.get('name')}({json.dumps(tc.get('args'), sort_keys=True)})")
        return lines
    return [json.dumps(m, sort_keys=True)]


def render_request(kind: str, request: dict[str, Any], messages: list[Any] | None) -> list[str]:
    lines: list[str] = []
    if messages is not None:
        for m in messages:
            lines.extend(render_message(m))
    body = {k: v for k, v in request.items() if k != "messages"}
    lines.extend(json.dumps(body, indent=2, sort_keys=True, default=str).splitlines())
    return lines


def recorded_request_lines(store: TapeStore, kind: str, request_ref: str, messages_ref: str | None) -> list[str]:
    request = store.get_json(request_ref)
    messages = None
    if messages_ref is not None:
        hashes = store.get_chain(messages_ref)
        blobs = store.get_blobs(hashes)
        messages = [json.loads(blobs[h]) for h in hashes]
    return render_request(kind, request, messages)


def build_divergence(session: Session, call: Call, request: dict[str, Any], matcher: Matcher | None) -> Divergence:
    """The divergence of ``call`` (no recorded call answers it), against what ``matcher`` expected there."""
    site = call.site
    expected = matcher.expected(site) if matcher is not None else None
    current_lines = render_request(site.kind, request, call.messages_view)
    replayed = session.replay_of or "?"
    if expected is None:
        reason = "the recorded run never made this call"
        diff_lines = ["--- recorded (no such call)", "+++ current"] + [f"+{line}" for line in current_lines]
        recorded_call = None
    else:
        reason = "its request differs from the recorded one"
        try:
            recorded_lines = recorded_request_lines(
                session.store, site.kind, expected.request_ref, expected.messages_ref
            )
        except Exception as exc:  # pragma: no cover - damaged tape
            recorded_lines = [f"(recorded request unreadable: {exc})"]
        diff_lines = list(difflib.unified_diff(recorded_lines, current_lines, "recorded", "current", n=2, lineterm=""))
        recorded_call = expected.call_id
    name = call.summary.get("name") or call.summary.get("model") or site.kind
    message = f"replay of run {replayed} diverged at {site.describe()} ({name}): {reason}" + (
        f"; recorded call {recorded_call}" if recorded_call else ""
    )
    report = {
        "message": message,
        "run_id": replayed,
        "replay_run_id": session.run_id,
        "kind": site.kind,
        "name": name,
        "node": site.node,
        "node_path": site.node_path,
        "step": site.step,
        "ordinal": site.ordinal,
        "reason": reason,
        "recorded_call_id": recorded_call,
        "recorded_step": expected.step if expected else None,
        "diff": "\n".join(diff_lines),
    }
    return Divergence(message, report)
