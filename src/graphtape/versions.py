"""Versions of the packages a run was recorded with (stored on every run)."""

from __future__ import annotations

import functools
from importlib import metadata

_PACKAGES = ("graphtape", "langgraph", "langchain-core", "langgraph-checkpoint", "langgraph-prebuilt")


@functools.cache
def package_versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out
