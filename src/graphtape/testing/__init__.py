"""Helpers for testing agents and graphtape itself, offline.

:class:`SeededChatModel` stands in for a hosted chat model; the live-call
guard (:func:`forbid_live_calls`, :func:`tracked`, :func:`live_call_counts`)
proves that a replay served everything from the tape instead of running
models, tools or effects again.
"""

import importlib
import typing

if typing.TYPE_CHECKING:
    from graphtape.testing.guard import (
        LiveCallForbidden,
        check_live,
        forbid_live_calls,
        live_call_counts,
        reset_live_calls,
        tracked,
    )
    from graphtape.testing.models import SeededChatModel

#: public name -> its module, imported on first use: the pytest plugin (``graphtape.testing.pytest_plugin``)
#: imports this package in every pytest session, and the helpers pull in LangChain.
_LAZY: dict[str, str] = {
    "LiveCallForbidden": "graphtape.testing.guard",
    "SeededChatModel": "graphtape.testing.models",
    "check_live": "graphtape.testing.guard",
    "forbid_live_calls": "graphtape.testing.guard",
    "live_call_counts": "graphtape.testing.guard",
    "reset_live_calls": "graphtape.testing.guard",
    "tracked": "graphtape.testing.guard",
}

__all__ = [
    "LiveCallForbidden",
    "SeededChatModel",
    "check_live",
    "forbid_live_calls",
    "live_call_counts",
    "reset_live_calls",
    "tracked",
]


def __getattr__(name: str) -> typing.Any:
    """Import a public name on first use (then it is a plain module attribute)."""
    module = _LAZY.get(name)
    if module is None:
        # a submodule not imported yet (``graphtape.testing.cassette``) is found by the import system, not here
        raise AttributeError(f"module 'graphtape.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
