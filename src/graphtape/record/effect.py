"""``@graphtape.effect``: mark code that is nondeterministic or acts on the world.

LangGraph intercepts neither the clock, randomness, HTTP nor e-mail. A
function marked ``@effect`` is recorded like a tool call (name, arguments,
result or error); a replay serves the recorded result and never runs it. In
flight mode an effect whose arguments changed raises
:class:`~graphtape.errors.EffectBlocked` unless live effects were allowed,
because re-sending an e-mail or re-charging a card must be a decision, not
a side effect of debugging.

Outside a recorded run the function is simply called.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from graphtape import serde, typepolicy
from graphtape.calls import fingerprint
from graphtape.record.codeprint import code_fingerprint, effect_module
from graphtape.record.context import current_session
from graphtape.record.intercept import CallKind
from graphtape.record.session import Call, Session

F = TypeVar("F", bound=Callable[..., Any])


#: Marker a ``reconcile`` function returns when the action did not happen.
NOT_DONE = object()

#: effect name -> reconcile function, for effects declared with ``reconcile=``
reconcilers: dict[str, Callable[[str], Any]] = {}


def _request(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any], key: str | None, redact_keys: frozenset[str]
) -> tuple[dict[str, Any], str]:
    request = {
        "effect": name,
        "args": serde.to_jsonable(list(args)),
        "kwargs": serde.to_jsonable(kwargs),
    }
    if key is not None:
        request["idempotency_key"] = key
    request = serde.redact(request, redact_keys)
    return request, fingerprint(request)


def _begin(
    session: Session,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    key: str | None,
    code: str,
    legacy_name: str | None = None,
) -> Call:
    request, digest = _request(name, args, kwargs, key, session.tape.redact_keys)
    answerer = session.answerer
    if legacy_name is not None and answerer.replays and not answerer.knows("effect", digest):
        # A tape from before stable effect names: the script's effects were named ``__main__.<qualname>``.
        old_request, old_digest = _request(legacy_name, args, kwargs, key, session.tape.redact_keys)
        if answerer.knows("effect", old_digest):
            name, request, digest = legacy_name, old_request, old_digest
    summary: dict[str, Any] = {"name": name, "code": code}
    if key is not None:
        summary["idempotency_key"] = key
    return session.begin("effect", None, request, digest, summary=summary)


#: effects answer as recorded: the value the function returned (a reconciled one after a crash)
EFFECT = CallKind()


@overload
def effect(fn: F) -> F: ...
@overload
def effect(
    *,
    name: str | None = None,
    idempotency_key: Callable[..., str] | None = None,
    reconcile: Callable[[str], Any] | None = None,
) -> Callable[[F], F]: ...


def effect(
    fn: Any = None,
    *,
    name: str | None = None,
    idempotency_key: Callable[..., str] | None = None,
    reconcile: Callable[[str], Any] | None = None,
) -> Any:
    """Record calls of ``fn`` on the tape and serve them on replay.

    ``name`` defaults to the function's module and qualified name, the
    module named the same however the program was started (``python
    app.py``, ``python -m app`` and ``--graph app.py:graph`` all give
    ``app.<qualname>``); it is part of the match key, so keep it stable
    across refactors (or give ``name``). A tape recorded before names were
    stable (``__main__.<qualname>``) still matches. The function's code is
    fingerprinted: a replay lists effects whose code changed. ``idempotency_key`` is an
    optional function of the call's arguments whose value identifies the
    real-world action (an order id for a refund). An effect with a key is
    marked as started on the tape, durably, before it runs; if the process
    dies before it reports back, recovery never runs it again blindly: it
    asks ``reconcile(key)`` (return the action's result if it happened, or
    ``graphtape.record.effect.NOT_DONE``) or stops with ``EffectInDoubt``.
    Works on plain and ``async`` functions.
    """

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        effect_name = name or f"{effect_module(f)}.{f.__qualname__}"
        legacy_name: str | None = f"__main__.{f.__qualname__}"
        if name is not None or legacy_name == effect_name:
            legacy_name = None
        code = code_fingerprint(f)
        typepolicy.declare_effect(f)  # the classes it returns may be rebuilt from a tape
        if reconcile is not None:
            reconcilers[effect_name] = reconcile

        def key_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
            return str(idempotency_key(*args, **kwargs)) if idempotency_key is not None else None

        if inspect.iscoroutinefunction(f):

            @functools.wraps(f)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                session = current_session()
                if session is None:
                    return await f(*args, **kwargs)
                call = _begin(session, effect_name, args, kwargs, key_of(args, kwargs), code, legacy_name)
                return await EFFECT.arun(session, call, lambda: f(*args, **kwargs))

            async_wrapper.__graphtape_effect__ = effect_name  # type: ignore[attr-defined]
            return async_wrapper

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            session = current_session()
            if session is None:
                return f(*args, **kwargs)
            call = _begin(session, effect_name, args, kwargs, key_of(args, kwargs), code, legacy_name)
            return EFFECT.run(session, call, lambda: f(*args, **kwargs))

        wrapper.__graphtape_effect__ = effect_name  # type: ignore[attr-defined]
        return wrapper

    if fn is not None:
        return wrap(fn)
    return wrap
