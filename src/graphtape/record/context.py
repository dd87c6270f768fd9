"""Which run is this code part of? Finding the session of the run being recorded.

Interceptions (LLM, tool, effect, node callbacks, the checkpoint tap) find
the current session through a ``ContextVar`` that LangGraph propagates into
its executor threads and asyncio tasks, and fall back to the
``graphtape_run_id`` that graphtape puts in the run's config metadata (it is
inherited by every nested runnable), so a call made from a thread that lost
the context is still attributed to its run. A ``threading.local`` would lose
``ToolNode`` calls, which run on executor threads.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

from langchain_core.runnables.config import var_child_runnable_config

if TYPE_CHECKING:
    from graphtape.record.session import Session

#: The key of the run id in a run's config metadata (and so in every checkpoint's metadata).
RUN_META_KEY = "graphtape_run_id"

_CURRENT: contextvars.ContextVar[Session | None] = contextvars.ContextVar("graphtape_session", default=None)
_BY_RUN: dict[str, Session] = {}
#: run id -> its registered session, read directly where a lookup is made once per checkpoint
SESSIONS = _BY_RUN


def session_for_run(run_id: str | None) -> Session | None:
    """The registered session of run ``run_id`` (from a checkpoint's metadata), if any."""
    return _BY_RUN.get(run_id) if run_id else None


def current_session(metadata: dict[str, Any] | None = None) -> Session | None:
    """The session of the run this code executes in, if any."""
    s = _CURRENT.get()
    if s is not None and s.active:
        return s
    rid = (metadata or {}).get(RUN_META_KEY)
    if rid is None:
        cfg = var_child_runnable_config.get()
        if cfg:
            rid = (cfg.get("metadata") or {}).get(RUN_META_KEY)
    if rid is not None:
        s = _BY_RUN.get(rid)
        if s is not None and s.active:
            return s
    return None


def runnable_metadata() -> dict[str, Any]:
    """The metadata of the runnable this code runs in (LangGraph's task metadata inside a node)."""
    cfg = var_child_runnable_config.get()
    return dict((cfg or {}).get("metadata") or {})


def register(session: Session) -> None:
    """Make ``session`` findable by its run id."""
    _BY_RUN[session.run_id] = session


def unregister(session: Session) -> None:
    _BY_RUN.pop(session.run_id, None)


def make_current(session: Session) -> contextvars.Token[Session | None]:
    """Make ``session`` the current run of the calling context; returns the token to reset it."""
    return _CURRENT.set(session)


def reset_current(token: contextvars.Token[Session | None]) -> None:
    """Undo :func:`make_current`; from another context (an async generator closed elsewhere) it is a no-op."""
    try:
        _CURRENT.reset(token)
    except ValueError:
        pass
