"""A call event's row is built as its JSON form (issue 13, the per-call path of benchmarks 2 and 4).

``Session._record_call`` writes the dict ``events.CallEvent.to_data`` would
give, without building the typed event (its construction and ``to_data``
were most of the method's own cost). What must not change: the keys, their
order (stored bytes depend on it) and the values, for every kind of call and
answer; a summary key no call event has is still refused.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

import graphtape
from graphtape import events
from graphtape.calls import CallSite, RecordedCall
from graphtape.record.session import Call, Session

KINDS = {"llm": events.LlmCall, "tool": events.ToolCall, "effect": events.EffectCall}


def _served() -> RecordedCall:
    return RecordedCall(
        call_id="rec-1",
        run_id="r0",
        seq=3,
        kind="tool",
        node="",
        node_path="n",
        branch="b",
        step=1,
        ordinal=0,
        fingerprint="f",
        request_ref="q",
        messages_ref=None,
        response_ref="a",
        error=None,
        tokens=7,
        cost=0.25,
        latency=0.1234567,
        name="lookup",
    )


SUMMARIES: list[dict[str, Any]] = [
    {},
    {"model": "gpt-x"},
    {"code": "c0de", "name": "lookup"},  # not in the layout's order
    {"name": "pay", "code": "c", "idempotency_key": "k-1"},
    {"name": "t", "code": None, "code_changed": True},
]


def _expected(kind: str, call: Call, *, response: str | None, error: Any, tokens: int, cost: float, **kw: Any) -> Any:
    served = call.served
    return KINDS[kind](
        call_id=call.call_id,
        node_path=call.site.node_path,
        branch=call.site.branch,
        step=call.site.step,
        task=call.site.task,
        ordinal=call.site.ordinal,
        fingerprint=call.fingerprint,
        request=call.request_ref,
        messages=call.messages_ref,
        response=response,
        error=error,
        tokens=tokens or None,
        cost=round(cost, 10) or None,
        latency=round(kw["latency"], 6),
        source=kw["source"],
        served_from=served.call_id if served is not None else None,
        recorded_latency=round(served.latency, 6) if served is not None else None,
        **call.summary,
    )


def test_call_rows_are_the_typed_events_json(tmp_path: Path) -> None:
    tape = graphtape.connect(f"sqlite:///{tmp_path}/t.db")
    try:
        session = Session(tape, thread_id="t", graph_name="g")
        written: list[tuple[str, dict[str, Any]]] = []

        def event(kind: str, data: dict[str, Any]) -> int:
            written.append((kind, data))
            return len(written)

        session.event = event
        cases = itertools.product(
            KINDS,
            SUMMARIES,
            [None, _served()],
            [(None, None, "live"), ({"type": "ValueError", "message": "no"}, None, "live"), (None, "resp", "tape")],
            [None, 0, 12],
            [(None, 0.0), (0.000123456789012, 1.5e-7)],
            ["", "a:1|b:2"],
            [None, 4],
        )
        n = 0
        for kind, summary, served, (error, ref, source), tokens, (step, latency), ns, msgs in cases:
            site = CallSite(kind, "n", "n", "__pregel_pull,n", step, ns or "(root)", n % 3)
            call = Call(
                call_id=f"c{n}",
                site=site,
                fingerprint="fp",
                request_ref="req",
                messages_ref="chain" if msgs else None,
                summary=dict(summary),
                served=served,
            )
            written.clear()
            session._record_call(
                call,
                response_env={"t": "json", "v": n} if error is None and ref is None else None,
                response_ref=ref,
                error=error,
                latency=latency,
                usage={"input_tokens": 2, "output_tokens": 3} if tokens is None else None,
                source=source,
                cost=None if served is not None else 0.000125,
                tokens=tokens,
            )
            ((row_kind, data),) = written
            counted = 5 if tokens is None else tokens
            cost = served.cost if served is not None and source == "tape" else (0.0 if served is not None else 0.000125)
            response = ref or (data.get("response") if error is None else None)
            want = _expected(
                kind, call, response=response, error=error, tokens=counted, cost=cost, latency=latency, source=source
            )
            assert row_kind == want.KIND
            assert list(data.items()) == list(want.to_data().items())  # keys in the same order
            n += 1
        assert n > 500
        assert session.counts["llm"] and session.counts["tool"] and session.counts["effect"]
    finally:
        tape.close()


def test_a_summary_key_no_call_event_has_is_refused(tmp_path: Path) -> None:
    tape = graphtape.connect(f"sqlite:///{tmp_path}/t.db")
    try:
        session = Session(tape, thread_id="t", graph_name="g")
        site = CallSite("tool", "n", "n", "", 1, "(root)", 0)
        call = Call(call_id="c", site=site, fingerprint="f", request_ref="r", messages_ref=None, summary={"nope": 1})
        with pytest.raises(TypeError):
            session._record_call(call, response_env=None, error=None, latency=0.0, usage=None, source="live")
    finally:
        tape.close()


def test_the_layout_has_no_field_always_written() -> None:
    # the JSON form built by _record_call leaves out every None, as to_data does for these fields
    assert not any(always for _, always in events.CallEvent.LAYOUT)
    for cls in KINDS.values():
        assert cls.LAYOUT == events.CallEvent.LAYOUT
