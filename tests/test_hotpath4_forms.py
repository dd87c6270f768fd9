"""A conversation's history, new objects equal to messages met before, takes its forms in C (issue 13, benchmark 3).

On every turn the checkpointer hands the history back as new message
objects: ``TapeWriter.forms`` finds the longest head of the list whose
messages are all in the process-wide memo, unchanged, with whole-list
operations (``writer._known_head``) and runs its per-message loop only over
the rest. What it returns must be what the loop returns, and a message
changed since (in a field, inside a field, in an extra field), a message the
memo lacks or an id the memo cannot hold must still get its own form.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from graphtape import serde
from graphtape.record import llm
from graphtape.record import writer as writer_mod
from graphtape.record.writer import MessageForm, TapeWriter


@pytest.fixture(autouse=True)
def _empty_memo() -> Any:
    writer_mod._FORMS.clear()
    yield
    writer_mod._FORMS.clear()


def history(n: int) -> list[Any]:
    out: list[Any] = []
    for i in range(n):
        out.append(HumanMessage(f"question {i}", id=f"h{i}"))
        out.append(
            AIMessage(
                f"answer {i}",
                id=f"a{i}",
                tool_calls=[{"name": "look", "args": {"q": i}, "id": f"c{i}", "type": "tool_call"}],
                response_metadata={"finish_reason": "stop"},
            )
        )
    return out


def by_hand(messages: list[Any]) -> list[str]:
    """The address of each message's stored form, worked out from the message alone."""
    return [serde.digest(serde.stored_json(serde.message_for_request(m))) for m in messages]


def next_turn(messages: list[Any]) -> list[Any]:
    """The history as a checkpointer hands it back: new objects, equal fields."""
    return [copy.deepcopy(m) for m in messages]


def test_a_known_history_takes_the_memo_forms_without_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    first = TapeWriter(None, "r1").forms(history(10))  # type: ignore[arg-type]
    again = next_turn(history(10))
    made: list[Any] = []
    monkeypatch.setattr(writer_mod, "message_form", lambda m: made.append(m) or MessageForm({}))
    heads: list[int] = []
    known_head = writer_mod._known_head
    monkeypatch.setattr(writer_mod, "_known_head", lambda ms: heads.append(len(known_head(ms)[2])) or known_head(ms))
    got = TapeWriter(None, "r2").forms(again)  # type: ignore[arg-type]
    assert made == []
    assert heads == [len(again)]  # found whole by the C path
    assert all(a is b for a, b in zip(first, got, strict=True))


def test_the_known_head_and_the_new_messages_after_it() -> None:
    TapeWriter(None, "r1").forms(history(10))  # type: ignore[arg-type]
    request = [*next_turn(history(10)), HumanMessage("a new question", id="new")]
    w = TapeWriter(None, "r2")  # type: ignore[arg-type]
    got = w.forms(request)
    assert [f.h for f in got] == by_hand(request)
    # the whole list is remembered as the run's last one: its final state takes these forms
    final = [*request, AIMessage("the answer", id="final")]
    assert writer_mod._same_messages(final, w._last_forms) == len(request)  # type: ignore[arg-type]
    assert [f.h for f in w.forms(final)] == by_hand(final)


def test_a_message_of_the_head_changed_since_gets_its_own_form() -> None:
    TapeWriter(None, "r1").forms(history(10))  # type: ignore[arg-type]
    for change in ("field", "inside", "extra"):
        again = next_turn(history(10))
        if change == "field":
            again[4].content = "edited with the same id"
        elif change == "inside":
            again[5].tool_calls[0]["args"]["q"] = "edited inside a field"
        else:
            again[6].custom = {"k": 1}  # type: ignore[attr-defined]  # an extra field
        got = TapeWriter(None, "r2").forms(again)  # type: ignore[arg-type]
        assert [f.h for f in got] == by_hand(again), change


def test_a_message_the_memo_lacks_in_the_middle() -> None:
    TapeWriter(None, "r1").forms(history(10))  # type: ignore[arg-type]
    again = next_turn(history(10))
    again[7] = AIMessage("never met", id="unknown")
    again.insert(3, SystemMessage("no id"))
    got = TapeWriter(None, "r2").forms(again)  # type: ignore[arg-type]
    assert [f.h for f in got] == by_hand(again)


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # (the odd id, when the form is made)
def test_an_id_the_memo_cannot_hold() -> None:
    class Odd(HumanMessage):
        pass

    TapeWriter(None, "r1").forms(history(10))  # type: ignore[arg-type]
    again = next_turn(history(10))
    odd = Odd("unhashable id")
    odd.__dict__["id"] = ["not", "hashable"]  # (pydantic would refuse it through the constructor)
    again.insert(2, odd)
    assert writer_mod._known_head(again) == ([], [], [])
    got = TapeWriter(None, "r2").forms(again)  # type: ignore[arg-type]
    assert [f.h for f in got] == by_hand(again)


def test_known_head_stops_at_the_first_unknown_message() -> None:
    TapeWriter(None, "r1").forms(history(10))  # type: ignore[arg-type]
    again = next_turn(history(10))
    again.insert(6, HumanMessage("unknown", id="u"))
    copies, extras, forms = writer_mod._known_head(again)
    assert len(copies) == len(extras) == len(forms) == 6
    assert [f.h for f in forms] == by_hand(again[:6])
    assert writer_mod._known_head([HumanMessage("unknown", id="u2"), *again]) == ([], [], [])


def test_chat_request_forms_with_and_without_ids() -> None:
    """``llm._forms`` sends a list whose messages all have ids to the writer in one pass (the test of
    that runs in C), a list with an id-less message through its content memo: the same forms."""
    TapeWriter(None, "r1").forms(history(10))  # type: ignore[arg-type]
    with_ids = next_turn(history(10))
    without = [SystemMessage("be brief"), *next_turn(history(10)), HumanMessage("no id either")]
    for request in (with_ids, without):
        got = llm._forms(TapeWriter(None, "r2"), request)  # type: ignore[arg-type]
        assert [f.h for f in got] == by_hand(request)
