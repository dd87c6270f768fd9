"""Answering calls from a tape: strict, flight and live replay (and the base of recovery and the debugger).

The recorder asks the run's answerer about every call
(:mod:`graphtape.record.answer`). A :class:`TapeAnswerer` takes the recorded
call that matches it (:class:`~graphtape.replay.matcher.Matcher`: same kind,
node path and request fingerprint) and decides:

* a match is served, or its override if one was given; in flight and live
  mode a tool whose code changed since the recording runs live instead (an
  effect only with ``allow_live_effects``);
* no match in strict mode is a :class:`~graphtape.errors.Divergence` with a
  report of what differs (:mod:`graphtape.replay.divergence`);
* no match for an effect without ``allow_live_effects`` is blocked;
* anything else runs live and is recorded on the new run.

A strict replay also checks each task's writes against the tape
(:mod:`graphtape.replay.statecheck`) in :meth:`TapeAnswerer.task_ended`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphtape import events
from graphtape.errors import EffectBlocked
from graphtape.events import ReplayStats
from graphtape.record.answer import LIVE, Answerer, Decision
from graphtape.replay.divergence import build_divergence
from graphtape.replay.matcher import Matcher, RecordedCall

if TYPE_CHECKING:
    from graphtape.record.session import Call, Session
    from graphtape.replay.statecheck import StateCheck


class TapeAnswerer(Answerer):
    """Serves calls from ``matcher``; what it does with the rest depends on ``mode``."""

    replays = True

    def __init__(
        self, matcher: Matcher, mode: str, *, allow_live_effects: bool = False, state_check: StateCheck | None = None
    ):
        self.matcher = matcher
        self.mode = mode
        self.allow_live_effects = allow_live_effects
        self.state_check = state_check
        self.watches_tasks = state_check is not None
        #: (recorded call, override, code changed, name) of every call served, in order
        self._served: list[tuple[RecordedCall, Any, bool, Any]] = []
        #: (blob addresses, chain node ids) the recorded runs' events refer to, read by the replay as it
        #: began: each run it makes writes none of them again (see Session.__init__); set by the engine
        self.on_store: tuple[set[str], set[str]] = (set(), set())

    def answer(self, session: Session, call: Call, request: dict[str, Any]) -> Decision:
        return self.judge(session, call, request, self.matcher.take(call.site, call.fingerprint))

    def judge(self, session: Session, call: Call, request: dict[str, Any], rec: RecordedCall | None) -> Decision:
        """The decision for ``call`` given the recorded call the matcher took for it (None: no match)."""
        kind = call.site.kind
        if rec is not None:
            override = self.matcher.override_for(rec.call_id)
            changed = rec.code is not None and call.summary.get("code") not in (None, rec.code)
            if (
                changed
                and override is None
                and self.mode in ("flight", "live")
                and (kind == "tool" or self.allow_live_effects)
            ):
                return Decision.live(code_changed=True)
            self._served.append((rec, override, changed, call.summary.get("name")))  # (atomic under the GIL)
            return Decision.serve(rec, override, code_changed=changed)
        if self.mode == "strict":
            return Decision.diverge(build_divergence(session, call, request, self.matcher))
        if kind == "effect" and not self.allow_live_effects:
            expected = self.matcher.expected(call.site)
            why = "its request changed" if expected is not None else "the tape has no such call"
            name = call.summary.get("name") or "?"
            return Decision.block(
                EffectBlocked(
                    f"effect {name} in node {call.site.node_path or '?'} would run live "
                    f"({why}); pass allow_live_effects=True (CLI: --allow-live-effects) to let it run"
                )
            )
        return LIVE

    def served_totals(self) -> ReplayStats:
        """The totals of the calls served so far, as their call events sum them (see :func:`_served_event`)."""
        stats = ReplayStats()
        for served in list(self._served):
            stats.add(_served_event(*served))
        return stats

    def knows(self, kind: str, fingerprint: str) -> bool:
        return self.matcher.has_fingerprint(kind, fingerprint)

    def task_ended(self, session: Session, info: dict[str, Any], outputs: Any) -> None:
        if self.state_check is not None:
            self.state_check.check(session, info, outputs)


#: the event type a served call of each kind is recorded as
_CALL_EVENTS: dict[str, type[events.CallEvent]] = {
    "llm": events.LlmCall,
    "tool": events.ToolCall,
    "effect": events.EffectCall,
}


def _served_event(rec: RecordedCall, override: Any, changed: bool, name: Any) -> events.CallEvent:
    """What :meth:`ReplayStats.add` reads of the call event ``Session.served_value`` writes for a served call.

    ``source`` ``tape`` (or ``override``), the recorded tokens and cost (none for an override),
    the recorded latency rounded to the microsecond, the tool's name and whether its code
    changed. A strict replay that finished sums these instead of reading its call events back
    from the store: every call of such a replay was served, and recorded once.
    """
    tape = override is None
    return _CALL_EVENTS[rec.kind](
        source="tape" if tape else "override",
        tokens=(rec.tokens if tape else 0) or None,
        cost=(round(rec.cost, 10) if tape else 0.0) or None,
        recorded_latency=round(rec.latency, 6),
        name=name,
        code_changed=True if changed else None,
    )
