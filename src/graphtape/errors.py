"""Every error graphtape raises, rooted at :class:`GraphtapeError`.

The tree::

    GraphtapeError
    ├── StoreError                 the tape store could not do what was asked
    │   ├── DatabaseLocked         another process holds the write lock too long
    │   ├── SchemaTooNew           the file was written by a newer graphtape
    │   └── LeaseLost              this process no longer holds its thread's lease
    ├── ThreadBusy                 another process is running the same thread
    ├── RunNotFound                no run (or call) with that id in this store
    ├── TapeFormatError            an export file is unreadable, foreign or too new
    ├── GraphLoadError             a ``module:attr`` / ``path.py:attr`` did not load
    ├── InvalidEdit                a state edit names an unknown key or a wrong type
    ├── PatchConflict              a method graphtape patched was wrapped again after it
    ├── ReplayError                replay could not continue
    │   ├── Divergence *           the code asked something the tape does not hold
    │   └── EffectBlocked *        an effect would run live and that was not allowed
    │       └── EffectInDoubt *    an effect started before a crash and never reported back
    └── ControlError               (*) graphtape stopping a run on purpose: never retried
        └── debug.DebugStopped     the user quit the debugger

Control errors (marked ``*``) are raised *inside* the user's graph, in the
middle of a node, to stop it. They are not failures of the user's code, so
no retry layer may run the node or the call again: a retried divergence is
reported again, by then against a call that did not change (the recorded
answer of the unchanged call before it was already used), and a retry that
falls back to something else turns a stopped replay into a "finished" one.
So :class:`ControlError` also derives from LangGraph's ``GraphBubbleUp``, the
base of its own control-flow exceptions (``interrupt()``, ``Command`` to a
parent), which every retry and error-handling layer in the stack re-raises
before looking at its retry rule: ``RetryPolicy`` (whatever its
``retry_on``, even ``Exception``), ``ToolNode(handle_tool_errors=...)``, and
langchain's ``ModelRetryMiddleware``, ``ToolRetryMiddleware``,
``ModelFallbackMiddleware`` and ``ToolErrorMiddleware``. ``Runnable.with_retry``
(tenacity) knows nothing of ``GraphBubbleUp``: graphtape adds "not a
ControlError" to its retry rule when it installs its interceptions. For any
other retry loop (the user's own), a session that diverged stays diverged:
every later call in it re-raises that first :class:`Divergence` at once,
without matching or calling anything, so the first report is the one that
stands. Being classes of this tree as well, control errors are still caught
by ``except graphtape.GraphtapeError`` (and ``except graphtape.Divergence``).

Warnings are :class:`GraphtapeWarning` (a ``UserWarning``): e.g. a tape value
whose class is not allowed, decoded as plain data instead.

Messages say what happened and what to do next: the CLI prints them as one
line, so they must stand on their own.
"""

from __future__ import annotations

from typing import Any

from langgraph.errors import GraphBubbleUp


class GraphtapeError(Exception):
    """Base class of every error raised by graphtape."""


class GraphtapeWarning(UserWarning):
    """Something in a tape was handled conservatively (e.g. a value class that is not allowed came back as data)."""


class StoreError(GraphtapeError):
    """The tape store failed; the message names the store and the cause."""


class DatabaseLocked(StoreError):
    """Another process kept the store's write lock past the busy timeout."""


class SchemaTooNew(StoreError):
    """The store was created by a newer graphtape than this one."""


class LeaseLost(StoreError):
    """A fenced write found that another owner took the lease over (ours expired)."""


class ThreadBusy(GraphtapeError):
    """Another process (or host) is running this thread right now.

    graphtape allows one writer per thread: two writers on one thread make
    LangGraph run the same task twice and silently drop writes. Wait for the
    other run, pass ``wait=`` seconds, or use another thread id.
    """


class RunNotFound(GraphtapeError):
    """No run, call or checkpoint with the given id exists in the store."""


class TapeFormatError(GraphtapeError):
    """An export file is not a graphtape tape, is damaged, or is too new."""


class GraphLoadError(GraphtapeError):
    """A graph given as ``module:attr`` or ``path.py:attr`` could not be loaded."""


class InvalidEdit(GraphtapeError):
    """A state edit for a fork does not fit the graph's state schema."""


class PatchConflict(GraphtapeError):
    """An attribute graphtape patched was replaced again after graphtape: it is not graphtape's to restore.

    Raised when graphtape uninstalls its interceptions (the end of a recording
    or of a test) and finds another wrapper on top of its own; uninstall that
    wrapper first.
    """


class ReplayError(GraphtapeError):
    """A replay could not continue."""


class ControlError(GraphtapeError, GraphBubbleUp):
    """graphtape stopping a run on purpose, from inside it: never retried (see the module docstring).

    Retry wrappers of your own should not retry it either:
    ``except graphtape.ControlError: raise`` before retrying.
    """


class Divergence(ReplayError, ControlError):
    """The current code made a call that the tape cannot serve.

    Raised by strict replay when a request differs from the recorded one or
    when the code makes a call the recorded run never made. ``report`` holds
    the structured details (run, node, step, call, recorded and current
    request, and a unified diff of the two).
    """

    def __init__(self, message: str, report: dict[str, Any]):
        super().__init__(message)
        self.report = report


class EffectBlocked(ReplayError, ControlError):
    """An ``@graphtape.effect`` would have run live without permission.

    Effects send e-mail, charge cards, read the clock: graphtape never runs one
    again silently. Pass ``allow_live_effects=True`` to let changed effect
    calls run.
    """


class EffectInDoubt(EffectBlocked):
    """An effect with an idempotency key started before a crash and its outcome is unknown.

    Running it again could do the real-world action twice, so graphtape does
    not. Give the effect a ``reconcile=`` function that checks the outside
    world (did the refund with this key happen?) and graphtape will use it.
    """


__all__ = [
    "ControlError",
    "DatabaseLocked",
    "Divergence",
    "EffectBlocked",
    "EffectInDoubt",
    "GraphLoadError",
    "GraphtapeError",
    "GraphtapeWarning",
    "InvalidEdit",
    "LeaseLost",
    "ReplayError",
    "RunNotFound",
    "SchemaTooNew",
    "StoreError",
    "TapeFormatError",
    "ThreadBusy",
]
