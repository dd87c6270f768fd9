"""Values as the LangGraph API puts them on the wire: plain JSON, messages as their field dicts.

State values, stream chunks and interrupts hold LangChain messages, pydantic
models, dataclasses, ``Interrupt`` and ``Send`` objects, tuples and sets. The
official server sends a message as its ``model_dump()`` (``type``,
``content``, ``id``...), which is what ``langgraph-sdk`` users read, so this
module does the same. Nothing here is ever decoded back into objects: input
from a request stays plain JSON, which LangGraph's reducers (``add_messages``)
coerce themselves.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

__all__ = ["dumps", "to_wire"]


def to_wire(value: Any) -> Any:
    """``value`` as JSON-able data (unknown objects become their ``repr``, never an error)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_wire(v) for v in value]
    if isinstance(value, BaseModel):
        return to_wire(value.model_dump())
    kind = type(value).__name__
    if kind == "Interrupt" and hasattr(value, "value"):
        return {"value": to_wire(value.value), "id": getattr(value, "id", None)}
    if kind == "Send" and hasattr(value, "node"):
        return {"node": value.node, "arg": to_wire(getattr(value, "arg", None))}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_wire(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return to_wire(value.value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return repr(value)


def dumps(value: Any) -> str:
    """``value`` as compact JSON text (for SSE ``data:`` lines)."""
    return json.dumps(to_wire(value), separators=(",", ":"), ensure_ascii=False)
