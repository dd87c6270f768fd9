"""Which run is this code part of? Finding the session of the run being recorded.

Interceptions (LLM, tool, effect, node tasks, the checkpoint tap) find the
current session through a ``ContextVar`` that LangGraph propagates into its
executor threads and asyncio tasks, and fall back to the run id that
graphtape puts in the run's ``configurable`` under :data:`RUN_CONF_KEY`
(inherited by every task, nested runnable and subgraph, and passed to the
checkpointer with each write). A ``threading.local`` would lose ``ToolNode``
calls, which run on executor threads.

The key is in ``configurable``, not in the config's ``metadata``: LangGraph
copies a run's metadata into every checkpoint's metadata, every nested
runnable's metadata and so into every stream part (``messages``, ``debug``,
``astream_events``), where a recorded graph would show its user something an
unrecorded one does not. Of ``configurable`` it copies no key that starts
with ``__`` into metadata (``get_checkpoint_metadata``, the tracing
defaults), and the ``debug``/``checkpoints`` stream drops keys that start
with ``__pregel_`` from the configs it shows (``rm_pregel_keys``), hence the
name. Which checkpoint belongs to which run is on the tape (its
``checkpoint`` events; graphtape's saver also keeps it in its checkpoint
rows); tapes written before kept the id in checkpoint metadata as
:data:`LEGACY_RUN_META_KEY`, which readers of stored checkpoints still accept.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langchain_core.runnables.config import var_child_runnable_config

from graphtape.store import base

if TYPE_CHECKING:
    from graphtape.record.session import Session

#: The key of the graphtape run id in a recorded run's ``configurable`` (see the module docstring).
RUN_CONF_KEY = "__pregel_graphtape_run_id"
#: (the key of the run id in the checkpoint metadata of tapes and savers written before :data:`RUN_CONF_KEY`)
LEGACY_RUN_META_KEY = base.LEGACY_RUN_META_KEY

_CURRENT: contextvars.ContextVar[Session | None] = contextvars.ContextVar("graphtape_session", default=None)
_BY_RUN: dict[str, Session] = {}
#: run id -> its registered session, read directly where a lookup is made once per checkpoint
SESSIONS = _BY_RUN


def session_for_run(run_id: str | None) -> Session | None:
    """The registered session of run ``run_id``, if any."""
    return _BY_RUN.get(run_id) if run_id else None


def run_id_of(config: Mapping[str, Any] | None) -> str | None:
    """The graphtape run id a config carries (a recorded run's, or any config derived from it), else None."""
    conf = config.get("configurable") if config else None
    return conf.get(RUN_CONF_KEY) if conf else None


def session_of(config: Mapping[str, Any] | None) -> Session | None:
    """The registered session of the run whose config (or a config derived from it) is ``config``."""
    conf = config.get("configurable") if config else None
    rid = conf.get(RUN_CONF_KEY) if conf else None
    return _BY_RUN.get(rid) if rid else None


def current_session(config: Mapping[str, Any] | None = None) -> Session | None:
    """The session of the run this code executes in, if any.

    ``config``: the config the call was given, if any (a call made on a thread
    that lost the context but was handed its node's config is still found).
    """
    s = _CURRENT.get()
    if s is not None and s.active:
        return s
    rid = run_id_of(config) if config else None
    if rid is None:
        rid = run_id_of(var_child_runnable_config.get())
    if rid is not None:
        s = _BY_RUN.get(rid)
        if s is not None and s.active:
            return s
    return None


def adopt(config: Mapping[str, Any] | None) -> contextvars.Token[Session | None] | None:
    """Make the run ``config`` carries current, when the calling context has lost it; else None.

    A thread that user code starts without copying the context (``threading.Thread``, a plain
    ``ThreadPoolExecutor``) has neither the current session nor LangGraph's runnable config, but
    a call made there with its node's ``config`` names the run. Undo with :func:`reset_current`.
    """
    if not config or _CURRENT.get() is not None or var_child_runnable_config.get() is not None:
        return None
    session = session_of(config)
    return _CURRENT.set(session) if session is not None and session.active else None


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
