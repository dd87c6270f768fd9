"""graphtape: a flight recorder and deterministic replayer for LangGraph agents.

Record every run of a compiled LangGraph graph as a tape, replay it against
the current code with every LLM, tool and effect call served from the tape
(strict), or re-run it calling the model only for what changed (flight).

The public API is declared here, once; ``tests/test_public_api.py`` fails
when it drifts.
"""

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
