"""Editing the state at a checkpoint, checked against the graph's state schema.

``update_state`` accepts anything and fails later, deep inside a reducer, or
silently stores a value of the wrong type. A fork is a debugging tool: a
typo in a key or a string where a list belongs must be reported at once,
naming the key and what the schema expects.
"""

from __future__ import annotations

import typing
from typing import Any

from graphtape.errors import InvalidEdit


def state_fields(graph: Any) -> dict[str, Any]:
    """``{key: annotation}`` of the graph's state schema (empty if unknown)."""
    builder = getattr(graph, "builder", None)
    schema = getattr(builder, "state_schema", None)
    if schema is None:
        return {}
    if hasattr(schema, "model_fields"):  # pydantic
        return {k: f.annotation for k, f in schema.model_fields.items()}
    try:
        return typing.get_type_hints(schema, include_extras=True)
    except Exception:
        return dict(getattr(schema, "__annotations__", {}))


def validate_edit(graph: Any, values: dict[str, Any]) -> dict[str, Any]:
    """The edit with each value validated (and coerced) to its key's type."""
    from pydantic import TypeAdapter, ValidationError

    if not isinstance(values, dict) or not values:
        raise InvalidEdit("a state edit is a non-empty mapping of state keys to new values")
    fields = state_fields(graph)
    channels = set(getattr(graph, "channels", {}) or {})
    known = set(fields) or {c for c in channels if not c.startswith(("branch:", "__"))}
    out = {}
    for key, value in values.items():
        if known and key not in known:
            raise InvalidEdit(f"unknown state key {key!r}; the state has: {', '.join(sorted(known))}")
        annotation = fields.get(key)
        if annotation is None:
            out[key] = value
            continue
        base = annotation
        if typing.get_origin(annotation) is typing.Annotated:
            base = typing.get_args(annotation)[0]
        try:
            out[key] = TypeAdapter(base).validate_python(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InvalidEdit(
                f"value for {key!r} does not fit its type {getattr(base, '__name__', base)}: {first.get('msg')}"
            ) from None
        except Exception:  # an annotation pydantic cannot build a validator for: pass it through
            out[key] = value
    return out


def check_edit(graph: Any, values: dict[str, Any], as_node: str | None) -> dict[str, Any]:
    """The validated edit, or :class:`InvalidEdit`. A fork calls this before it copies anything,
    so a rejected edit leaves no thread behind."""
    checked = validate_edit(graph, values)
    nodes = set(getattr(graph, "nodes", {}) or {})
    if as_node is not None and nodes and as_node not in nodes:
        raise InvalidEdit(f"unknown node {as_node!r} for as_node; the graph has: {', '.join(sorted(nodes))}")
    return checked


def apply_edit(recorder: Any, config: dict[str, Any], values: dict[str, Any], as_node: str | None) -> dict[str, Any]:
    """Validate and apply an edit to the latest checkpoint of ``config``'s thread (a LangGraph update)."""
    checked = check_edit(recorder.original, values, as_node)
    return recorder.graph.update_state(config, checked, as_node=as_node)
