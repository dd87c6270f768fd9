"""JSON Schemas of a graph's input, output, state, context and config (``GET /assistants/{id}/schemas``).

LangGraph's own ``get_input_jsonschema`` fails for a state declared with
``typing.TypedDict`` on Python < 3.12 (pydantic refuses it), which made every
schema request of such a graph fail in the reference server. Here a
``TypedDict`` pydantic refuses is described field by field instead, and a
field pydantic cannot describe becomes ``{}`` (any value): a schema is always
returned, never an error.
"""

from __future__ import annotations

import typing
import warnings
from typing import Any

from pydantic import TypeAdapter
from typing_extensions import is_typeddict

__all__ = ["graph_schemas", "json_schema_of"]


def json_schema_of(typ: Any) -> dict[str, Any] | None:
    """The JSON Schema of ``typ`` (None for None)."""
    if typ is None:
        return None
    try:
        return TypeAdapter(typ).json_schema()
    except Exception:
        pass
    if not is_typeddict(typ):
        return {"title": getattr(typ, "__name__", "Value"), "type": "object"}
    try:
        hints = typing.get_type_hints(typ, include_extras=True)
    except Exception:
        hints = dict(getattr(typ, "__annotations__", {}))
    properties: dict[str, Any] = {}
    for name, hint in hints.items():
        try:
            properties[name] = TypeAdapter(hint).json_schema()
        except Exception:
            properties[name] = {}
    required = sorted(getattr(typ, "__required_keys__", ()))
    schema: dict[str, Any] = {"title": typ.__name__, "type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def graph_schemas(graph: Any) -> dict[str, Any]:
    """``input_schema``, ``output_schema``, ``state_schema``, ``context_schema`` and ``config_schema``."""
    builder = getattr(graph, "builder", None)
    state = getattr(builder, "state_schema", None)
    config_schema: dict[str, Any] | None
    try:
        with warnings.catch_warnings():
            # deprecated in LangGraph 1.0 in favour of the context schema, still what clients ask for
            warnings.simplefilter("ignore", DeprecationWarning)
            config_schema = graph.config_schema().model_json_schema()
    except Exception:
        config_schema = None
    return {
        "input_schema": json_schema_of(getattr(builder, "input_schema", None) or state),
        "output_schema": json_schema_of(getattr(builder, "output_schema", None) or state),
        "state_schema": json_schema_of(state),
        "context_schema": json_schema_of(getattr(builder, "context_schema", None)),
        "config_schema": config_schema,
    }
