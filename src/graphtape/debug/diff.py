"""A structural, readable diff of two graph states, and the same as RFC 6902 JSON Patch.

States are compared through their *JSON views*: plain JSON where every
message (a langchain ``BaseMessage``, or its serialised form as the tape
and ``dumpd`` write it) becomes ``{"role", "content"}`` plus its name, tool
calls (name and arguments) and error status, when it has them. Message ids,
tool-call ids, usage and response metadata are left out: LangGraph and the
providers regenerate them on every execution, so two runs that said the same
thing compare equal.

The readable diff knows what states look like:

* keys added, removed or changed, at any depth (``plan.steps[2]``);
* a list that grew at its end (``add_messages``, ``operator.add``) is one
  ``appended`` change holding the new items, not a change of every index;
* other list edits are matched item by item (``difflib``), so a message
  removed from the middle is one ``removed`` change;
* multi-line strings that changed are shown as a line diff.

``StateDiff.json_patch()`` is ``jsonpatch.make_patch`` between the two views:
``jsonpatch.apply_patch(diff.a_view, diff.json_patch()) == diff.b_view``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from typing import Any

__all__ = ["Change", "StateDiff", "diff_states", "format_path", "json_view", "message_view"]

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_CHUNK_ROLES = {
    "AIMessageChunk": "ai",
    "HumanMessageChunk": "human",
    "SystemMessageChunk": "system",
    "ToolMessageChunk": "tool",
    "FunctionMessageChunk": "function",
    "ChatMessageChunk": "chat",
}


# ---------------------------------------------------------------------------
# JSON views
# ---------------------------------------------------------------------------


def _as_message(value: Any) -> Any:
    """The ``BaseMessage`` that ``value`` is or serialises, else ``None``."""
    from langchain_core.messages import BaseMessage

    if isinstance(value, BaseMessage):
        return value
    if isinstance(value, dict):
        if value.get("lc") == 1 and value.get("type") == "constructor" and isinstance(value.get("kwargs"), dict):
            ident = value.get("id") or []
            if ident and str(ident[-1]).endswith(("Message", "MessageChunk")):
                from graphtape import serde

                try:
                    msg = serde.load_lc(value)
                except Exception:
                    return None
                return msg if isinstance(msg, BaseMessage) else None
        if value.get("t") == "lc" and isinstance(value.get("v"), dict):  # a tape value envelope
            return _as_message(value["v"])
    return None


def message_view(msg: Any) -> dict[str, Any] | None:
    """A message as compared and shown: role, content, and name/tool calls/status if set; no ids.

    ``msg`` is a ``BaseMessage`` or langchain's serialised form of one;
    anything else gives ``None``.
    """
    from graphtape import serde

    m = _as_message(msg)
    if m is None:
        return None
    role = _CHUNK_ROLES.get(m.type, m.type)
    view: dict[str, Any] = {"role": role, "content": serde.to_jsonable(m.content)}
    if getattr(m, "name", None):
        view["name"] = m.name
    tool_calls = getattr(m, "tool_calls", None) or []
    if tool_calls:
        view["tool_calls"] = [{"name": tc.get("name"), "args": serde.to_jsonable(tc.get("args"))} for tc in tool_calls]
    if role == "tool" and getattr(m, "status", "success") not in (None, "success"):
        view["status"] = m.status
    return view


def json_view(value: Any) -> Any:
    """``value`` as plain JSON for comparison: messages as :func:`message_view`, ids removed."""
    from graphtape import serde

    view = message_view(value)
    if view is not None:
        return view
    if isinstance(value, dict):
        return {str(k): json_view(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_view(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    jsonable = serde.to_jsonable(value)
    if isinstance(jsonable, (dict, list)):
        return json_view(jsonable)
    return jsonable


# ---------------------------------------------------------------------------
# changes
# ---------------------------------------------------------------------------


def format_path(path: tuple[Any, ...] | list[Any]) -> str:
    """``("plan", "steps", 2)`` as ``plan.steps[2]`` (odd keys quoted: ``["a b"]``)."""
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif _PLAIN_KEY.match(str(seg)):
            out += f".{seg}" if out else str(seg)
        else:
            out += f"[{json.dumps(str(seg), ensure_ascii=False)}]"
    return out or "(state)"


def _pointer(path: tuple[Any, ...]) -> str:
    return "".join("/" + str(seg).replace("~", "~0").replace("/", "~1") for seg in path)


@dataclasses.dataclass
class Change:
    """One difference. ``op`` is ``added``, ``removed``, ``changed`` or ``appended``.

    ``path`` is the readable location (``messages[3].content``), ``segments``
    the same as a tuple of keys and indexes. ``old``/``new`` are JSON views;
    an ``appended`` change has the appended items as ``new`` (a list) and
    ``at``, the index of the first of them.
    """

    op: str
    segments: tuple[Any, ...]
    old: Any = None
    new: Any = None
    at: int | None = None

    @property
    def path(self) -> str:
        return format_path(self.segments)

    @property
    def pointer(self) -> str:
        """The location as an RFC 6901 JSON Pointer (``/messages/3/content``)."""
        return _pointer(self.segments)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "path": self.path, "pointer": self.pointer}
        if self.op in ("removed", "changed"):
            d["old"] = self.old
        if self.op in ("added", "changed", "appended"):
            d["new"] = self.new
        if self.op == "appended":
            d["at"] = self.at
            d["count"] = len(self.new or [])
        return d

    def __getitem__(self, key: str) -> Any:  # change["op"], change["path"]
        return self.to_dict()[key] if key in ("pointer", "count") else getattr(self, key)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _diff(a: Any, b: Any, path: tuple[Any, ...], out: list[Change]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k not in b:
                out.append(Change("removed", (*path, k), old=a[k]))
        for k in b:
            if k not in a:
                out.append(Change("added", (*path, k), new=b[k]))
            elif _key(a[k]) != _key(b[k]):
                _diff(a[k], b[k], (*path, k), out)
        return
    if isinstance(a, list) and isinstance(b, list):
        _diff_lists(a, b, path, out)
        return
    out.append(Change("changed", path, old=a, new=b))


def _diff_lists(a: list[Any], b: list[Any], path: tuple[Any, ...], out: list[Change]) -> None:
    ka, kb = [_key(x) for x in a], [_key(x) for x in b]
    prefix = 0
    while prefix < min(len(ka), len(kb)) and ka[prefix] == kb[prefix]:
        prefix += 1
    if prefix == len(ka) and len(kb) > len(ka):
        out.append(Change("appended", path, new=b[prefix:], at=prefix))
        return
    if len(ka) == len(kb):
        # same length: an edit in place (a message rewritten, a counter bumped)
        for i in range(prefix, len(ka)):
            if ka[i] != kb[i]:
                _diff(a[i], b[i], (*path, i), out)
        return
    matcher = difflib.SequenceMatcher(a=ka, b=kb, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for i, j in zip(range(i1, i2), range(j1, j2)):
                _diff(a[i], b[j], (*path, j), out)
            continue
        if tag in ("delete", "replace"):
            for i in range(i1, i2):
                out.append(Change("removed", (*path, i), old=a[i]))
        if tag in ("insert", "replace"):
            if j1 == len(b) - (j2 - j1) and j2 == len(b) and tag == "insert":
                out.append(Change("appended", path, new=b[j1:j2], at=j1))
            else:
                for j in range(j1, j2):
                    out.append(Change("added", (*path, j), new=b[j]))


# ---------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        else:
            parts.append(json.dumps(part, ensure_ascii=False, default=str))
    return " ".join(parts)


def _is_message_view(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and "role" in v
        and "content" in v
        and set(v) <= {"role", "content", "name", "tool_calls", "status"}
    )


def _clip(text: str, width: int | None) -> str:
    if width is None or len(text) <= width:
        return text
    return text[: max(1, width - 1)] + "…"


def show_value(v: Any, width: int | None = None) -> str:
    """A JSON view on one line: a message as ``[role] content → tool(args)``, else compact JSON."""
    if _is_message_view(v):
        text = _content_text(v.get("content"))
        bits = [text.replace("\n", "⏎ ")] if text else []
        for tc in v.get("tool_calls") or []:
            bits.append(f"→ {tc.get('name')}({json.dumps(tc.get('args'), sort_keys=True, ensure_ascii=False)})")
        name = f" {v['name']}" if v.get("name") else ""
        status = f" ({v['status']})" if v.get("status") else ""
        return _clip(f"[{v['role']}{name}{status}] " + (" ".join(bits) if bits else "(empty)"), width)
    return _clip(json.dumps(v, ensure_ascii=False, default=str), width)


def _multiline(old: Any, new: Any) -> bool:
    return isinstance(old, str) and isinstance(new, str) and ("\n" in old or "\n" in new)


@dataclasses.dataclass
class StateDiff:
    """The difference between state ``a`` and state ``b``.

    ``changes`` lists :class:`Change` items in state order; ``a_view`` and
    ``b_view`` are the JSON views compared. Falsy when the states are equal.
    """

    changes: list[Change]
    a_view: Any
    b_view: Any
    a_label: str | None = None
    b_label: str | None = None

    def __bool__(self) -> bool:
        return bool(self.changes)

    def __len__(self) -> int:
        return len(self.changes)

    def __iter__(self):
        return iter(self.changes)

    @property
    def equal(self) -> bool:
        return not self.changes

    def json_patch(self) -> list[dict[str, Any]]:
        """RFC 6902 operations turning ``a_view`` into ``b_view``."""
        import jsonpatch

        return list(jsonpatch.make_patch(self.a_view, self.b_view).patch)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a_label,
            "b": self.b_label,
            "equal": self.equal,
            "changes": [c.to_dict() for c in self.changes],
            "patch": self.json_patch(),
        }

    def lines(self, width: int | None = None) -> list[str]:
        """The readable diff, one string per line (``+`` added, ``-`` removed, ``~`` changed)."""
        if not self.changes:
            return ["no differences"]
        out: list[str] = []
        item_width = None if width is None else max(20, width - 6)
        for c in self.changes:
            if c.op == "appended":
                n = len(c.new or [])
                out.append(f"+ {c.path}: appended {n} item(s)")
                out.extend(f"    {show_value(item, item_width)}" for item in c.new or [])
            elif c.op == "added":
                out.append(f"+ {c.path}: {show_value(c.new, width)}")
            elif c.op == "removed":
                out.append(f"- {c.path}: {show_value(c.old, width)}")
            elif _multiline(c.old, c.new):
                out.append(f"~ {c.path}:")
                for line in difflib.unified_diff(c.old.splitlines(), c.new.splitlines(), lineterm="", n=1):
                    if line.startswith(("---", "+++")):
                        continue
                    out.append(f"    {_clip(line, item_width)}")
            else:
                out.append(f"~ {c.path}: {show_value(c.old, width)} → {show_value(c.new, width)}")
        return out

    def render(self, width: int | None = None) -> str:
        """The readable diff as text; ``width`` clips long values (default: never)."""
        return "\n".join(self.lines(width))

    def __str__(self) -> str:
        return self.render()


def diff_states(a: Any, b: Any, *, a_label: str | None = None, b_label: str | None = None) -> StateDiff:
    """The structural difference from state ``a`` to state ``b`` (any JSON-able values, messages, models)."""
    va, vb = json_view(a), json_view(b)
    changes: list[Change] = []
    if _key(va) != _key(vb):
        _diff(va, vb, (), changes)
    return StateDiff(changes=changes, a_view=va, b_view=vb, a_label=a_label, b_label=b_label)
