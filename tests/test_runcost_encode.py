"""``TapeWriter.encode`` gives serde.encode_value's envelope, its messages through the message memo.

A model's answer is encoded when its call ends and met again in the next
request, the task's writes and the final state: the writer serialises it
once. The envelopes and the stored blobs must be exactly the ones
``serde.encode_value`` gives, so that tapes read the same.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from graphtape import serde
from graphtape.record import writer as writer_mod
from graphtape.record.writer import TapeWriter

VALUES: list[Any] = [
    AIMessage("answer", id="ai-1", tool_calls=[{"name": "t", "args": {"x": 1}, "id": "c1"}]),
    HumanMessage("no id"),
    [AIMessage("one", id="ai-2"), ToolMessage("result", tool_call_id="c1", id="tm-1")],
    {"messages": [HumanMessage("hi", id="h-1")], "topic": "x", "n": 3},
    {"messages": [HumanMessage("hi", id="h-1")], "when": dt.date(2026, 1, 2), "nested": {"m": AIMessage("a")}},
    {"m": AIMessage("single", id="ai-3")},
    # shapes left to serde as they are
    [],
    {},
    [AIMessage("mixed", id="ai-4"), "text"],
    (AIMessage("in a tuple", id="ai-5"),),
    {1: AIMessage("int key", id="ai-6")},
    {"plain": [1, 2, {"a": None}]},
    "text",
    None,
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_envelope_and_blobs_are_serdes(value: Any, monkeypatch) -> None:
    monkeypatch.setattr(writer_mod, "_FORMS", {})
    expected_blobs: dict[str, bytes] = {}

    def put(obj: Any) -> str:
        data = serde.stored_json(obj)
        h = serde.digest(data)
        expected_blobs[h] = data
        return h

    expected = serde.encode_value(value, put)
    writer = TapeWriter(None, "run")  # type: ignore[arg-type]
    assert writer.encode(value) == expected
    assert writer._batch.blobs == expected_blobs
    # and it decodes back to an equal value
    assert serde.decode_value(expected, lambda h: json.loads(expected_blobs[h])) == value


def test_an_answer_encoded_is_not_serialised_again_in_the_next_request(monkeypatch) -> None:
    monkeypatch.setattr(writer_mod, "_FORMS", {})
    answer = AIMessage("answer", id="ai-7")
    writer = TapeWriter(None, "run")  # type: ignore[arg-type]
    calls: list[Any] = []
    real = serde.message_for_request
    monkeypatch.setattr(serde, "message_for_request", lambda m: calls.append(m) or real(m))
    writer.encode([answer])
    writer.forms([HumanMessage("q", id="h-7"), AIMessage("answer", id="ai-7")])  # the history, as new objects
    assert [m.id for m in calls] == ["ai-7", "h-7"]
