"""A process-wide tripwire that proves a replay did not touch the world.

A replay that silently falls through to a live model, tool or effect still
"passes" — it just costs money, sends e-mail again and hides a bug in the
recorder. Tests therefore count every time real code is *entered*
(:func:`check_live`) and can make entering it fail (:func:`forbid_live_calls`).

The state is process-wide on purpose, not a ContextVar: tools run in
LangGraph's thread pools and executor threads, which do not always inherit
the test's context, and a guard that a worker thread cannot see guards
nothing.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_counts: Counter[tuple[str, str]] = Counter()
_forbidden = 0  # nesting depth of active forbid_live_calls() blocks


class LiveCallForbidden(AssertionError):
    """Real code ran while live calls were forbidden.

    An ``AssertionError`` so that pytest reports it as a failed expectation
    and so that code catching ordinary ``Exception`` subclasses of the
    application (retries, fallbacks) is less likely to swallow it.
    """


def check_live(kind: str, name: str) -> None:
    """Record that live code of ``kind`` (``"llm"``, ``"tool"``, ``"effect"``) named ``name`` ran.

    Always counts, then raises :class:`LiveCallForbidden` if a
    :func:`forbid_live_calls` block is active anywhere in the process.
    """
    with _lock:
        _counts[(kind, name)] += 1
        forbidden = _forbidden > 0
    if forbidden:
        raise LiveCallForbidden(f"live {kind} call {name!r} ran while live calls were forbidden")


def live_call_counts() -> Counter[tuple[str, str]]:
    """A snapshot of how often each ``(kind, name)`` ran live since the last reset."""
    with _lock:
        return Counter(_counts)


def reset_live_calls() -> None:
    """Forget all counts (not the forbid state: a block in progress stays in force)."""
    with _lock:
        _counts.clear()


@contextlib.contextmanager
def forbid_live_calls() -> Iterator[None]:
    """Make every :func:`check_live` raise until the block exits. Blocks may nest."""
    global _forbidden
    with _lock:
        _forbidden += 1
    try:
        yield
    finally:
        with _lock:
            _forbidden -= 1


@overload
def tracked(kind: F) -> F: ...
@overload
def tracked(kind: str = "tool") -> Callable[[F], F]: ...


def tracked(kind: Any = "tool") -> Any:
    """Call :func:`check_live` with ``fn.__qualname__`` before each real run of ``fn``.

    Put it *beneath* ``@tool`` or ``@graphtape.effect``: those decorators are
    what a replay intercepts, so the body under them only runs when the
    replay let a call through. ``functools.wraps`` keeps the name, docstring
    and signature, so ``@tool`` builds the same schema and description.
    Usable bare (``@tracked``) or with a kind (``@tracked("effect")``).
    """

    def wrap(fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
        name = fn.__qualname__
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                check_live(kind, name)
                return await fn(*args, **kwargs)

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            check_live(kind, name)
            return fn(*args, **kwargs)

        return wrapper

    if callable(kind):
        return wrap(kind, "tool")
    return lambda fn: wrap(fn, kind)
