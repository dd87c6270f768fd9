"""The answering protocol: who decides what happens to each captured call, and the replay plan.

``record/`` captures calls and writes the tape; it does not know who answers
them. Every call the session registers is put to an :class:`Answerer`,
which returns a :class:`Decision`:

==============  ==================================================================
``live``        call the model, tool or effect and record what it returns
``serve``       answer with ``recorded`` (or ``override``, a stored envelope) from the tape
``reconciled``  answer with ``value`` (an in-doubt effect whose ``reconcile`` said it happened)
``diverge``     stop the replay with ``error`` (a Divergence), recorded on the run
``block``       refuse with ``error`` (an effect that would run live), nothing recorded
==============  ==================================================================

Recording answers everything ``live`` (the :class:`Answerer` base class);
strict, flight and live replay answer from a tape (``graphtape.replay.answerer``),
the debugger wraps a replay answerer to pause and inject
(``graphtape.debug.debugger``), recovery serves what a crashed run completed
(``graphtape.runtime.recovery``). They reach the recorder as a typed
:class:`ReplayPlan`; this module imports none of them.

The answerer also hears of tasks and checkpoints (the debugger pauses there,
a strict replay compares each task's writes with the tape).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphtape.calls import RecordedCall
    from graphtape.record.session import Call, Session


@dataclasses.dataclass(frozen=True)
class Decision:
    """What happens to one call (see the module docstring for the actions)."""

    action: str
    recorded: RecordedCall | None = None
    override: Any = None
    value: Any = None
    error: BaseException | None = None
    #: the tool's or effect's code differs from the recorded call's (listed in the replay's result)
    code_changed: bool = False

    @classmethod
    def live(cls, *, code_changed: bool = False) -> Decision:
        return cls("live", code_changed=code_changed)

    @classmethod
    def serve(cls, recorded: RecordedCall, override: Any = None, *, code_changed: bool = False) -> Decision:
        return cls("serve", recorded=recorded, override=override, code_changed=code_changed)

    @classmethod
    def reconciled(cls, value: Any) -> Decision:
        return cls("reconciled", value=value)

    @classmethod
    def diverge(cls, error: BaseException) -> Decision:
        return cls("diverge", error=error)

    @classmethod
    def block(cls, error: BaseException) -> Decision:
        return cls("block", error=error)


LIVE = Decision.live()


class Answerer:
    """Answers every call live and watches nothing: a recording. Subclasses answer from a tape."""

    #: whether calls may be served from a tape (then a run's live calls are counted, and its state read)
    replays = False
    #: whether the task hooks must run, and may stop the run by raising (strict state check, debugger)
    watches_tasks = False
    #: whether the run may sit paused (then task durations leave out the paused time)
    pauses = False

    def answer(self, session: Session, call: Call, request: dict[str, Any]) -> Decision:
        """What happens to ``call`` (whose request is ``request``)."""
        return LIVE

    def knows(self, kind: str, fingerprint: str) -> bool:
        """Whether the tape holds a call of ``kind`` with this fingerprint (effects' older names)."""
        return False

    # -- what the run does besides calls --------------------------------------------------

    def task_started(self, info: dict[str, Any]) -> None:
        """A node task started (``info``: node_path, step, task)."""

    def task_ending(self, info: dict[str, Any], outputs: Any) -> None:
        """A node task returned ``outputs``; called before its ``task_finished`` event is written."""

    def task_ended(self, session: Session, info: dict[str, Any], outputs: Any) -> None:
        """A node task's ``task_finished`` event was written; raise to stop the run."""

    def checkpoint(self, values: dict[str, Any], step: int | None, ns: str) -> None:
        """A checkpoint was saved with these channel values."""

    def paused_seconds(self) -> float:
        """Seconds the calling thread has sat paused so far (left out of durations)."""
        return 0.0


#: The answerer of a recording.
RECORD = Answerer()


@dataclasses.dataclass(frozen=True)
class ReplayPlan:
    """How the runs a :class:`~graphtape.recorder.RecordedGraph` opens are answered and labelled.

    ``mode`` is stored on each run (``strict``, ``flight``, ``live``, ``recover``);
    ``replay_of`` links the run to the one it replays; ``meta`` is added to
    the run's meta.
    """

    answerer: Answerer
    mode: str
    replay_of: str | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
