"""Recorded values made displayable without importing any user class (CLI, server and UI show the same).

A tape names the classes of the values it holds; rebuilding them is the safe
decoder's job (``typepolicy``), and only for classes allowed there. To *show*
a value, nothing needs rebuilding: a pydantic model or a dataclass is shown as
its fields, an unknown class as its recorded repr.
"""

from __future__ import annotations

import json
from typing import Any

from graphtape import serde

__all__ = ["display_value"]

_SAFE_ENVELOPES = {"json", "lc", "datetime", "date", "time", "uuid", "decimal", "bytes"}


def display_value(env: Any) -> Any:
    """A recorded value envelope as something printable, without importing user classes."""
    if not isinstance(env, dict) or "t" not in env:
        return env
    t = env.get("t")
    v: Any = env.get("v")  # its shape depends on ``t``
    try:
        if t in _SAFE_ENVELOPES:
            return serde.decode_value(env)
        if t in ("list", "tuple"):
            return [display_value(x) for x in v]
        if t == "dict":
            return {k: display_value(x) for k, x in v.items()}
        if t == "pairs":
            return {json.dumps(serde.to_jsonable(display_value(k))): display_value(x) for k, x in v}
        if t == "enum":
            return display_value(v)
        if t in ("pydantic", "dataclass"):
            return v if t == "pydantic" else {k: display_value(x) for k, x in v.items()}
        if t == "repr":
            return f"<{env.get('c')}: {v}>"
    except Exception:  # a damaged or unexpected payload is shown raw
        return v
    return v
