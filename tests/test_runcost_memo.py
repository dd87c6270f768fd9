"""The process-wide message memo keeps a private copy of each message's fields, not a model copy.

``writer.message_form`` answers a message equal to one seen before (same class, id and
fields) from its memo; what it compares against must not change when the caller changes
its message in place, at any depth, or the memo would answer with the old form.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from graphtape import serde
from graphtape.record import writer as writer_mod


def _ai(msg_id: str) -> AIMessage:
    return AIMessage(
        content=[{"type": "text", "text": "checking"}],
        id=msg_id,
        tool_calls=[{"name": "order_status", "args": {"order_id": "A-17"}, "id": "call-1"}],
        response_metadata={"token_usage": {"prompt_tokens": 5, "completion_tokens": 2}, "model_name": "m"},
        usage_metadata={"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
    )


def _fresh(msg: Any) -> writer_mod.MessageForm:
    return writer_mod.MessageForm(serde.message_for_request(msg))


def test_an_equal_message_is_answered_from_the_memo(monkeypatch) -> None:
    monkeypatch.setattr(writer_mod, "_FORMS", {})
    first = writer_mod.message_form(_ai("ai-1"))
    again = _ai("ai-1")  # a new object, as the checkpointer gives back on every turn
    assert writer_mod.message_form(again) is first
    assert writer_mod.TapeWriter(None, "r").forms([again])[0] is first  # type: ignore[arg-type]


def test_changes_in_place_inside_a_field_are_seen(monkeypatch) -> None:
    monkeypatch.setattr(writer_mod, "_FORMS", {})
    msg = _ai("ai-2")
    first = writer_mod.message_form(msg)
    cases = [
        lambda m: m.tool_calls[0]["args"].__setitem__("order_id", "B-2"),  # a dict inside a list
        lambda m: m.content[0].__setitem__("text", "changed"),  # a content block
        lambda m: m.response_metadata["token_usage"].__setitem__("prompt_tokens", 6),  # nested metadata
        lambda m: m.usage_metadata.__setitem__("total_tokens", 8),
    ]
    seen = first
    for change in cases:
        change(msg)
        form = writer_mod.message_form(msg)
        assert form is not seen, "the memo answered with the form of the message before its change"
        assert form.h == _fresh(msg).h
        seen = form
    # the memo's copy shares no container with the message: the next change is seen too
    entry = writer_mod._FORMS[(AIMessage, "ai-2")][0]
    assert entry["tool_calls"] is not msg.tool_calls
    assert entry["tool_calls"][0]["args"] is not msg.tool_calls[0]["args"]


def test_a_field_of_another_type_is_deep_copied(monkeypatch) -> None:
    monkeypatch.setattr(writer_mod, "_FORMS", {})

    class Box:
        def __init__(self, items: list[int]):
            self.items = items

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Box) and other.items == self.items

        def __repr__(self) -> str:
            return f"Box({self.items})"

    msg = HumanMessage("hi", id="h-1", additional_kwargs={"box": Box([1])})
    first = writer_mod.message_form(msg)
    assert writer_mod.message_form(HumanMessage("hi", id="h-1", additional_kwargs={"box": Box([1])})) is first
    msg.additional_kwargs["box"].items.append(2)
    assert writer_mod.message_form(msg) is not first
