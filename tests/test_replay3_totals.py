"""``TapeAnswerer.served_totals`` sums served calls as ``ReplayStats.add`` sums their call events.

The events are the ones ``Session.served_value`` writes for a served call (built here as
the reference); the answerer sums without building them.
"""

from __future__ import annotations

from typing import Any

import pytest

from graphtape import events
from graphtape.calls import RecordedCall
from graphtape.replay.answerer import TapeAnswerer
from graphtape.replay.matcher import Matcher

_EVENTS = {"llm": events.LlmCall, "tool": events.ToolCall, "effect": events.EffectCall}


def _event(rec: RecordedCall, override: Any, changed: bool, name: Any) -> events.CallEvent:
    """The served call's event, with the fields ``Session._record_call`` gives it."""
    tape = override is None
    return _EVENTS[rec.kind](
        source="tape" if tape else "override",
        tokens=(rec.tokens if tape else 0) or None,
        cost=(round(rec.cost, 10) if tape else 0.0) or None,
        recorded_latency=round(rec.latency, 6),
        name=name,
        code_changed=True if changed else None,
    )


def _call(i: int, kind: str, tokens: int, cost: float, latency: float) -> RecordedCall:
    return RecordedCall(
        call_id=f"c{i}",
        run_id="r",
        seq=i,
        kind=kind,
        node="",
        node_path="n",
        branch="",
        step=1,
        ordinal=0,
        fingerprint="f",
        request_ref="a",
        messages_ref=None,
        response_ref="b",
        error=None,
        tokens=tokens,
        cost=cost,
        latency=latency,
        name=None,
    )


SERVED = [
    (_call(0, "llm", 41, 0.000123456789123, 0.0123456789), None, False, None),
    (_call(1, "tool", 0, 0.0, 0.0000004), None, True, "search"),
    (_call(2, "effect", 7, 1e-11, 2.5), {"t": "json", "v": 1}, False, "clock"),  # an override
    (_call(3, "tool", 3, -0.0, 1e-7), None, True, None),
    (_call(4, "llm", 1000, 0.3333333333333333, 1.23456789), None, False, None),
    (_call(5, "tool", 5, 0.1, 0.1), {"t": "json", "v": "x"}, True, "measure"),
]


@pytest.mark.parametrize("n", [0, 1, 3, len(SERVED)])
def test_served_totals_are_the_sum_of_the_served_call_events(n):
    answerer = TapeAnswerer(Matcher([]), "strict")
    answerer._served.extend(SERVED[:n])
    expected = events.ReplayStats()
    for served in SERVED[:n]:
        expected.add(_event(*served))
    got = answerer.served_totals()
    assert got.to_dict() == expected.to_dict()
    assert repr(got.cost_saved) == repr(expected.cost_saved) and repr(got.time_saved) == repr(expected.time_saved)
