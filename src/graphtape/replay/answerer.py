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

from collections.abc import Set
from typing import TYPE_CHECKING, Any

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
        self.on_store: tuple[Set[str], Set[str]] = (set(), set())

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
        """The totals of the calls served so far, as :meth:`ReplayStats.add` sums the call events
        ``Session.served_value`` writes for them.

        Each such event is served (source ``tape``, or ``override``); one from the tape holds the
        recorded tokens, the recorded cost rounded to 10 places and the recorded latency rounded
        to the microsecond, an override none of them; a tool whose code changed is named. A
        strict replay that finished sums these instead of reading its call events back from the
        store: every call of such a replay was served, and recorded once. (Summed here without
        building each event first: a 22-field frozen event cost ~3 us a call.)
        """
        stats = ReplayStats()
        for rec, override, changed, name in list(self._served):
            if changed:
                stats.changed_code.add(str(name or "?"))
            stats.served += 1
            if override is None:
                stats.tokens_saved += int(rec.tokens or 0)
                stats.cost_saved += round(rec.cost, 10)
                stats.time_saved += round(rec.latency, 6)
        return stats

    def knows(self, kind: str, fingerprint: str) -> bool:
        return self.matcher.has_fingerprint(kind, fingerprint)

    def task_ended(self, session: Session, info: dict[str, Any], outputs: Any) -> None:
        if self.state_check is not None:
            self.state_check.check(session, info, outputs)
