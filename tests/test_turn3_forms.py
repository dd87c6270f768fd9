"""A run's final state takes the forms of its last chat request's messages (issue 13, benchmark 3).

The final state holds the message objects the request carried, plus the
answer: their forms are found by identity and by comparing each message's
fields with the copy its form was made from (in C), not by the per-message
loop again. A message changed in place since must still be seen.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from graphtape.record import writer as writer_mod
from graphtape.record.writer import TapeWriter


def history(n: int) -> list[Any]:
    out: list[Any] = []
    for i in range(n):
        out.append(HumanMessage(f"question {i}", id=f"h{i}"))
        out.append(AIMessage(f"answer {i}", id=f"a{i}"))
    return out


def fresh(messages: list[Any]) -> list[str]:
    writer_mod._FORMS.clear()
    return [f.h for f in TapeWriter(None, "other").forms(messages)]  # type: ignore[arg-type]


def test_the_final_state_takes_the_request_forms() -> None:
    w = TapeWriter(None, "r")  # type: ignore[arg-type]
    request = history(10)
    first = w.forms(request)
    writer_mod._FORMS.clear()  # without the reuse every form would be made again (new objects)
    final = [*request, AIMessage("the answer", id="final")]
    again = w.forms(final)
    assert all(a is b for a, b in zip(first, again[:-1], strict=False))
    assert [f.h for f in again] == fresh(final)


def test_a_message_changed_in_place_is_seen() -> None:
    w = TapeWriter(None, "r")  # type: ignore[arg-type]
    request = history(10)
    w.forms(request)
    request[3].content = "changed after the request"
    final = [*request, AIMessage("the answer", id="final")]
    got = [f.h for f in w.forms(final)]
    assert got == fresh(final)


def test_a_change_inside_a_field_is_seen() -> None:
    w = TapeWriter(None, "r")  # type: ignore[arg-type]
    request = history(10)
    request[5].additional_kwargs["note"] = ["a"]
    w.forms(request)
    request[5].additional_kwargs["note"].append("b")
    got = [f.h for f in w.forms(list(request))]
    assert got == fresh(request)


def test_an_extra_field_changed_in_place_is_seen() -> None:
    w = TapeWriter(None, "r")  # type: ignore[arg-type]
    request = history(10)
    request[2].custom = {"k": 1}  # type: ignore[attr-defined]  # a message class allows extra fields
    w.forms(request)
    request[2].custom["k"] = 2  # type: ignore[attr-defined]
    got = [f.h for f in w.forms(list(request))]
    assert got == fresh(request)


def test_other_objects_with_equal_content_are_not_taken_for_the_request() -> None:
    w = TapeWriter(None, "r")  # type: ignore[arg-type]
    w.forms(history(10))
    other = history(10)
    other[0] = HumanMessage("another first question", id="h0")
    assert [f.h for f in w.forms(other)] == fresh(other)


def test_the_returned_list_may_be_changed_by_its_caller() -> None:
    w = TapeWriter(None, "r")  # type: ignore[arg-type]
    request = history(10)
    got = w.forms(request)
    got.clear()
    assert [f.h for f in w.forms(request)] == fresh(request)
