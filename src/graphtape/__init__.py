"""graphtape: a flight recorder and deterministic replayer for LangGraph agents.

Record every run of a compiled LangGraph graph as a tape, replay it against
the current code with every LLM, tool and effect call served from the tape
(strict), or re-run it calling the model only for what changed (flight).

The public API is declared here, once; ``tests/test_public_api.py`` fails
when it drifts.
"""

import importlib
import importlib.util
import typing

if typing.TYPE_CHECKING:
    from graphtape import clock
    from graphtape.errors import (
        ControlError,
        DatabaseLocked,
        Divergence,
        EffectBlocked,
        EffectInDoubt,
        GraphLoadError,
        GraphtapeError,
        GraphtapeWarning,
        InvalidEdit,
        LeaseLost,
        PatchConflict,
        ReplayError,
        RunNotFound,
        SchemaTooNew,
        StoreError,
        TapeFormatError,
        ThreadBusy,
    )
    from graphtape.record.effect import effect
    from graphtape.recorder import RecordedGraph
    from graphtape.replay.engine import ReplayResult
    from graphtape.replay.matcher import RecordedCall
    from graphtape.store.base import EventRow, RunRecord, TapeStore
    from graphtape.tape import Tape, connect
    from graphtape.typepolicy import register_types

__version__ = "0.1.0"

#: public name -> the module that defines it. Nothing is imported until a name is first used: the pytest plugin
#: imports ``graphtape`` in every pytest session of every user, and LangGraph takes about a second to import.
_LAZY: dict[str, str] = {
    "ControlError": "graphtape.errors",
    "DatabaseLocked": "graphtape.errors",
    "Divergence": "graphtape.errors",
    "EffectBlocked": "graphtape.errors",
    "EffectInDoubt": "graphtape.errors",
    "EventRow": "graphtape.store.base",
    "GraphLoadError": "graphtape.errors",
    "GraphtapeError": "graphtape.errors",
    "GraphtapeWarning": "graphtape.errors",
    "InvalidEdit": "graphtape.errors",
    "LeaseLost": "graphtape.errors",
    "PatchConflict": "graphtape.errors",
    "RecordedCall": "graphtape.replay.matcher",
    "RecordedGraph": "graphtape.recorder",
    "ReplayError": "graphtape.errors",
    "ReplayResult": "graphtape.replay.engine",
    "RunNotFound": "graphtape.errors",
    "RunRecord": "graphtape.store.base",
    "SchemaTooNew": "graphtape.errors",
    "StoreError": "graphtape.errors",
    "Tape": "graphtape.tape",
    "TapeFormatError": "graphtape.errors",
    "TapeStore": "graphtape.store.base",
    "ThreadBusy": "graphtape.errors",
    "clock": "graphtape.clock",
    "connect": "graphtape.tape",
    "effect": "graphtape.record.effect",
    "register_types": "graphtape.typepolicy",
}

__all__ = [
    "ControlError",
    "DatabaseLocked",
    "Divergence",
    "EffectBlocked",
    "EffectInDoubt",
    "EventRow",
    "GraphLoadError",
    "GraphtapeError",
    "GraphtapeWarning",
    "InvalidEdit",
    "LeaseLost",
    "PatchConflict",
    "RecordedCall",
    "RecordedGraph",
    "ReplayError",
    "ReplayResult",
    "RunNotFound",
    "RunRecord",
    "SchemaTooNew",
    "StoreError",
    "Tape",
    "TapeFormatError",
    "TapeStore",
    "ThreadBusy",
    "clock",
    "connect",
    "effect",
    "register_types",
]


def __getattr__(name: str) -> typing.Any:
    """Import a public name on first use (then it is a plain module attribute)."""
    module = _LAZY.get(name)
    if module is not None:
        value = importlib.import_module(module)
        if module != f"graphtape.{name}":  # a name defined in that module, not the module itself
            value = getattr(value, name)
    elif importlib.util.find_spec(f"graphtape.{name}") is not None:
        # a submodule: ``graphtape.serde`` keeps working after a bare ``import graphtape``
        value = importlib.import_module(f"graphtape.{name}")
    else:
        raise AttributeError(f"module 'graphtape' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
