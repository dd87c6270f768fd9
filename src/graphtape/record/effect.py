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

from graphtape import serde
from graphtape.record.session import Call, Session, current_session

F = TypeVar("F", bound=Callable[..., Any])


#: Marker a ``reconcile`` function returns when the action did not happen.
NOT_DONE = object()

#: effect name -> reconcile function, for effects declared with ``reconcile=``
reconcilers: dict[str, Callable[[str], Any]] = {}


def _begin(session: Session, name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
           key: str | None) -> Call:
    request = {
        "effect": name,
        "args": serde.to_jsonable(list(args)),
        "kwargs": serde.to_jsonable(kwargs),
    }
    if key is not None:
        request["idempotency_key"] = key
    request = serde.redact(request, session.tape.redact_keys)
    fingerprint = serde.digest(serde.canonical_json(request))
    summary: dict[str, Any] = {"name": name}
    if key is not None:
        summary["idempotency_key"] = key
    return session.begin("effect", None, request, fingerprint, summary=summary)


def _answered(session: Session, call: Call) -> tuple[bool, Any]:
    """(True, value) when the call needs no execution: served from the tape or reconciled."""
    if call.served is not None:
        value, error = session.served_value(call)
        if error is not None:
            raise error
        return True, value
    if call.call_id in session.reconciled:
        value = session.reconciled.pop(call.call_id)
        session.end_live(call, result=value, source="reconciled")
        return True, value
    if call.summary.get("idempotency_key") is not None:
        session.intent(call)
    return False, None


@overload
def effect(fn: F) -> F: ...
@overload
def effect(*, name: str | None = None, idempotency_key: Callable[..., str] | None = None,
           reconcile: Callable[[str], Any] | None = None) -> Callable[[F], F]: ...


def effect(fn: Any = None, *, name: str | None = None, idempotency_key: Callable[..., str] | None = None,
           reconcile: Callable[[str], Any] | None = None) -> Any:
    """Record calls of ``fn`` on the tape and serve them on replay.

    ``name`` defaults to the function's qualified name; it is part of the
    match key, so keep it stable across refactors. ``idempotency_key`` is an
    optional function of the call's arguments whose value identifies the
    real-world action (an order id for a refund). An effect with a key is
    marked as started on the tape, durably, before it runs; if the process
    dies before it reports back, recovery never runs it again blindly: it
    asks ``reconcile(key)`` (return the action's result if it happened, or
    ``graphtape.record.effect.NOT_DONE``) or stops with ``EffectInDoubt``.
    Works on plain and ``async`` functions.
    """

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        effect_name = name or f"{f.__module__}.{f.__qualname__}"
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
                call = _begin(session, effect_name, args, kwargs, key_of(args, kwargs))
                done, value = _answered(session, call)
                if done:
                    return value
                try:
                    result = await f(*args, **kwargs)
                except BaseException as exc:
                    session.end_live(call, error=exc)
                    raise
                session.end_live(call, result=result)
                return result

            async_wrapper.__graphtape_effect__ = effect_name  # type: ignore[attr-defined]
            return async_wrapper

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            session = current_session()
            if session is None:
                return f(*args, **kwargs)
            call = _begin(session, effect_name, args, kwargs, key_of(args, kwargs))
            done, value = _answered(session, call)
            if done:
                return value
            try:
                result = f(*args, **kwargs)
            except BaseException as exc:
                session.end_live(call, error=exc)
                raise
            session.end_live(call, result=result)
            return result

        wrapper.__graphtape_effect__ = effect_name  # type: ignore[attr-defined]
        return wrapper

    if fn is not None:
        return wrap(fn)
    return wrap
