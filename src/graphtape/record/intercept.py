"""The interception core: one way to answer a captured call, and patches that can be taken back.

Every captured call (a chat model's request, a tool run, an ``@effect``)
goes the same way, whatever its kind and whether its caller is sync or async:

1. **begin**: the kind's adapter builds the request and its fingerprint and
   calls ``Session.begin``, which names the call (:mod:`graphtape.calls`)
   and asks the run's answerer what happens to it;
2. **answer**: a served call is answered from the tape (a recorded error is
   raised again), a reconciled effect with its reconciled result; otherwise
   an effect with an idempotency key is marked as started, durably;
3. **live** then **finish**: the real method runs and what it returned (or
   raised) is recorded.

:class:`CallKind` holds steps 2-3 once, with a sync (:meth:`CallKind.run`)
and an async (:meth:`CallKind.arun`) adapter that differ only in ``await``;
a kind supplies how a served value is presented to its caller and how a
live result is recorded. Streams (``BaseChatModel.stream``) use the same
:meth:`CallKind.answered` and finish steps around their own loop.

:class:`Patch` replaces one attribute of a third-party class. The original
is captured when the patch is installed (not when graphtape is imported, so
a wrapper someone installed earlier keeps working underneath ours), and
:meth:`Patch.uninstall` restores it only if the attribute is still our
wrapper: if someone wrapped it after us, restoring would silently drop
their wrapper, so it says so instead (:class:`PatchConflict`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from graphtape.errors import PatchConflict

if TYPE_CHECKING:
    from graphtape.record.session import Call, Session

T = TypeVar("T")

_MISSING = object()


def _present(call: Call, value: Any) -> Any:
    return value


def _finish(session: Session, call: Call, result: Any) -> None:
    session.end_live(call, result=result)


@dataclasses.dataclass(frozen=True)
class CallKind:
    """How calls of one kind are answered: ``present`` a served value, ``finish`` a live result."""

    present: Callable[[Call, Any], Any] = _present
    finish: Callable[[Session, Call, Any], None] = _finish

    def serve(self, session: Session, call: Call) -> Any:
        """The served answer of ``call`` as its caller receives it (recorded on this run)."""
        value, error = session.served_value(call)
        if error is not None:
            raise error
        return self.present(call, value)

    def answered(self, session: Session, call: Call) -> tuple[bool, Any]:
        """``(True, value)`` when the call needs no execution: served from the tape, or reconciled."""
        if call.served is not None:
            return True, self.serve(session, call)
        if call.is_reconciled:
            session.end_live(call, result=call.reconciled, source="reconciled")
            return True, call.reconciled
        if call.summary.get("idempotency_key") is not None:
            session.intent(call)
        return False, None

    def run(self, session: Session, call: Call, live: Callable[[], T]) -> T:
        """Answer ``call``, calling ``live()`` when the tape does not (sync adapter)."""
        done, value = self.answered(session, call)
        if done:
            return value
        try:
            result = live()
        except BaseException as exc:
            session.end_live(call, error=exc)
            raise
        self.finish(session, call, result)
        return result

    async def arun(self, session: Session, call: Call, live: Callable[[], Awaitable[T]]) -> T:
        """:meth:`run` for a coroutine (async adapter)."""
        done, value = self.answered(session, call)
        if done:
            return value
        try:
            result = await live()
        except BaseException as exc:
            session.end_live(call, error=exc)
            raise
        self.finish(session, call, result)
        return result


class Patch:
    """``owner.name`` replaced by ``make(original)`` while installed."""

    def __init__(self, owner: type, name: str, make: Callable[[Any], Any]):
        self.owner = owner
        self.name = name
        self.make = make
        self.original: Any = None
        self.wrapper: Any = None
        self._own: Any = _MISSING  # what ``owner.__dict__`` held: restored as it was

    @property
    def installed(self) -> bool:
        return self.wrapper is not None

    def install(self) -> None:
        if self.wrapper is not None:
            return
        self._own = self.owner.__dict__.get(self.name, _MISSING)
        # the attribute as defined (a function, a property), inherited if the class has none of its own
        self.original = self._own if self._own is not _MISSING else getattr(self.owner, self.name)
        self.wrapper = self.make(self.original)
        setattr(self.owner, self.name, self.wrapper)

    def is_ours(self) -> bool:
        """Whether ``owner.name`` is still the wrapper this patch installed."""
        return self.wrapper is not None and self.owner.__dict__.get(self.name, _MISSING) is self.wrapper

    def conflict(self) -> str | None:
        """Why the patch cannot be undone, or None."""
        if self.wrapper is None or self.is_ours():
            return None
        current = self.owner.__dict__.get(self.name, _MISSING)
        what = "removed" if current is _MISSING else f"replaced by {getattr(current, '__qualname__', current)!r}"
        return (
            f"{self.owner.__qualname__}.{self.name} was {what} after graphtape patched it; "
            "uninstall that wrapper first, then graphtape's"
        )

    def uninstall(self) -> None:
        if self.wrapper is None:
            return
        problem = self.conflict()
        if problem is not None:
            raise PatchConflict(problem)
        if self._own is _MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self._own)
        self.wrapper = self.original = None
        self._own = _MISSING


class Interceptor:
    """Patches installed and removed together (idempotent; inert outside recorded runs)."""

    def __init__(self, name: str, patches: list[Patch]):
        self.name = name
        self.patches = patches
        self._lock = threading.Lock()

    @property
    def installed(self) -> bool:
        return any(p.installed for p in self.patches)

    def install(self) -> None:
        with self._lock:
            for p in self.patches:
                p.install()

    def uninstall(self) -> None:
        """Restore every original, or none: a conflict on any patch leaves all of them installed."""
        with self._lock:
            problems = [c for c in (p.conflict() for p in self.patches) if c is not None]
            if problems:
                raise PatchConflict(f"cannot uninstall graphtape's {self.name} interception: " + "; ".join(problems))
            for p in reversed(self.patches):
                p.uninstall()


class PatchOnDemand:
    """An :class:`Interceptor` built and installed the first time it is needed, once per process.

    ``build`` looks for what it patches and returns the interceptor, or None
    when LangGraph no longer has it where expected (then nothing is patched
    and the caller's fallback applies). :meth:`uninstall` removes it
    (``graphtape.uninstall()``); a later :meth:`install` builds it again.
    """

    def __init__(self, build: Callable[[], Interceptor | None]):
        self._build = build
        self._lock = threading.Lock()
        #: the interceptor while installed
        self.current: Interceptor | None = None

    def install(self) -> None:
        if self.current is not None:
            return
        with self._lock:
            if self.current is None:
                patch = self._build()
                if patch is not None:
                    patch.install()
                    self.current = patch

    def uninstall(self) -> None:
        """Raises PatchConflict (and leaves the patch) if another library wrapped it after graphtape."""
        with self._lock:
            if self.current is not None:
                self.current.uninstall()
                self.current = None
