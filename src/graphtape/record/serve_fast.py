"""When a replayed call may be answered before langchain's machinery runs.

A served chat-model call normally goes through ``BaseChatModel.generate``:
callback manager set-up, run managers and their ids, tracing metadata,
``ChatResult``/``LLMResult`` objects, and only then graphtape's wrapper of
``_generate_with_cache`` answers from the tape. That work exists for the
callback handlers. When none would see the call (graphtape adds no handler,
and the one a streamed task gets ignores model events), it changes nothing a caller can observe, and
in a replay it was a large part of a served call's cost. So the replay path
in :mod:`graphtape.record.llm` answers at ``invoke``/``ainvoke`` when
:func:`nobody_listens` says so, and takes langchain's path otherwise (a
tracer, LangGraph's ``stream_mode="messages"`` handler, ``astream_events``,
a user's handler, ``verbose``: they still see every served call).

:func:`nobody_listens` follows the places ``CallbackManager.configure``
takes handlers from: the config's callbacks, the model's own
``callbacks``/``verbose``, langchain's debug flag, LangSmith tracing (on by
environment or by ``tracing_v2_enabled``) and the context-variable hooks
(``collect_runs`` and the like). If langchain's private names used here
move, the answer is "someone may listen" and the ordinary path is taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:  # private langchain-core names: without them the fast path is simply never taken
    from langchain_core.globals import get_debug
    from langchain_core.tracers.context import _configure_hooks, _tracing_v2_is_enabled
    from langchain_core.utils.env import env_var_is_set

    _AVAILABLE = True
except ImportError:  # pragma: no cover - langchain-core changed
    _AVAILABLE = False


def _deaf(handler: Any) -> bool:
    """Whether ``handler`` receives none of a chat model call's events (start, tokens, end, error)."""
    return bool(getattr(handler, "ignore_chat_model", False) and getattr(handler, "ignore_llm", False))


def _handlers(callbacks: Any) -> Any:
    if not callbacks:
        return ()
    if isinstance(callbacks, list):
        return callbacks
    return getattr(callbacks, "handlers", None)  # a callback manager; None: unknown, assume listeners


def nobody_listens(callbacks: Any, model: Any) -> bool:
    """Whether a chat model call with these config ``callbacks`` on ``model`` reaches no callback handler.

    True only when every handler it would get ignores chat model events.
    """
    if not _AVAILABLE:
        return False
    for source in (callbacks, getattr(model, "callbacks", None)):
        handlers = _handlers(source)
        if handlers is None or not all(_deaf(h) for h in handlers):
            return False
    if getattr(model, "verbose", False) or get_debug():
        return False
    if env_var_is_set("LANGCHAIN_TRACING") or env_var_is_set("LANGCHAIN_HANDLER") or _tracing_v2_is_enabled():
        return False
    for var, _inheritable, handler_class, env_var in _configure_hooks:
        if var.get() is not None or (env_var is not None and handler_class is not None and env_var_is_set(env_var)):
            return False
    return True


def call_metadata(config: Mapping[str, Any], model: Any) -> dict[str, Any]:
    """The metadata langchain's run manager would carry for this call, as far as graphtape reads it.

    The inherited callback manager's metadata, then the config's, then the
    model's own (``CallbackManager.configure``'s order). The tracing-only
    ``ls_*`` keys langchain adds in between are left out: graphtape never
    reads them.
    """
    callbacks = config.get("callbacks")
    inherited = getattr(callbacks, "metadata", None) if callbacks and not isinstance(callbacks, list) else None
    own = getattr(model, "metadata", None)
    metadata: dict[str, Any] = config.get("metadata") or {}
    if not inherited and not own:
        return metadata
    return {**(inherited or {}), **metadata, **(own or {})}
