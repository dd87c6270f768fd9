"""A conversation's next request takes its history's forms from the last turn's final state (issue 13, benchmark 3).

The checkpointer hands the thread's state back as new message objects on
every turn; the recorder keeps the message list a run ended with (its
classes, the field copies its forms were made from, the forms) and gives it
to the thread's next run, whose request is compared with it as whole lists
(``writer._carried_head``) instead of looking each message up in the memo
(``writer._known_head``). The forms, and so the stored rows, are the ones the
look-ups give; a message changed since, or of another class, is still seen.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import graphtape
from graphtape import serde
from graphtape.record import writer as writer_mod
from graphtape.record.writer import TapeWriter
from graphtape.testing.models import SeededChatModel


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def chat_graph(edit: bool = False) -> Any:
    model = SeededChatModel(seed=5, latency=0)

    def answer(state: Chat) -> dict[str, Any]:
        messages = state["messages"]
        if edit and len(messages) > 12:
            messages[2].content = f"edited in place before turn {len(messages)}"  # the node's own business
        return {"messages": [model.invoke(messages)]}

    b = StateGraph(Chat)
    b.add_node("answer", answer)
    b.add_edge(START, "answer")
    b.add_edge("answer", END)
    return b.compile(checkpointer=InMemorySaver())


class Asked(HumanMessage):
    """A message class of its own, with a human message's fields."""


def by_hand(messages: list[Any]) -> list[str]:
    return [serde.digest(serde.stored_json(serde.message_for_request(m))) for m in messages]


def history(n: int) -> list[Any]:
    out: list[Any] = []
    for i in range(n):
        out.append(HumanMessage(f"question {i}", id=f"h{i}"))
        out.append(AIMessage(f"answer {i}", id=f"a{i}", response_metadata={"finish_reason": "stop"}))
    return out


def ended_with(messages: list[Any]) -> TapeWriter:
    """A writer that took ``messages`` as a run's final state, and the next run's writer given its history."""
    last = TapeWriter(None, "r1")  # type: ignore[arg-type]
    last.forms(messages)
    carried = last.history()
    assert carried is not None
    nxt = TapeWriter(None, "r2")  # type: ignore[arg-type]
    nxt.carry(carried)
    return nxt


def requests(tape: graphtape.Tape, run_ids: list[str]) -> list[tuple[str, list[str]]]:
    """Each run's chat request: its chain head and the addresses of its messages, as stored."""
    out = []
    for run_id in run_ids:
        for row in tape.store.events(run_id):
            if row.kind == "llm_call":
                head = row.data["messages"]
                out.append((head, [m for _, m in _walk(tape, head)]))
    return out


def _walk(tape: graphtape.Tape, head: str) -> list[tuple[str, str]]:
    nodes: list[tuple[str, str]] = []
    cur: str | None = head
    while cur is not None:
        parent, item = tape.store.get_chain_nodes([cur])[cur]
        nodes.append((cur, item))
        cur = parent
    return nodes[::-1]


def test_the_next_request_takes_the_carried_forms_without_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    final = history(10)
    nxt = ended_with(final)
    request = [*copy.deepcopy(final), HumanMessage("a new question", id="new")]
    looked_up: list[int] = []
    known_head = writer_mod._known_head

    def counted(ms: list[Any]) -> Any:
        looked_up.append(len(ms))
        return known_head(ms)

    monkeypatch.setattr(writer_mod, "_known_head", counted)
    got = nxt.forms(request)
    assert looked_up == []
    assert [f.h for f in got] == by_hand(request)
    # the run's final state (the request's objects and the answer) then takes the request's forms
    answer = AIMessage("the answer", id="final")
    assert [f.h for f in nxt.forms([*request, answer])] == by_hand([*request, answer])


@pytest.mark.parametrize("change", ["field", "inside", "extra", "class"])
def test_a_message_changed_since_the_last_turn_gets_its_own_form(change: str) -> None:
    final = history(10)
    final[5].additional_kwargs["note"] = ["a"]
    nxt = ended_with(final)
    again: list[BaseMessage] = copy.deepcopy(final)
    if change == "field":
        again[4].content = "edited with the same id"
    elif change == "inside":
        again[5].additional_kwargs["note"].append("b")
    elif change == "extra":
        again[6].custom = {"k": 1}  # type: ignore[attr-defined]
    else:  # the same fields, another class
        again[2] = Asked(content=again[2].content, id=again[2].id)
        assert again[2].__dict__ == final[2].__dict__
    assert writer_mod._carried_head(again, nxt._carried) == 0  # type: ignore[arg-type]
    assert [f.h for f in nxt.forms(again)] == by_hand(again), change


def test_a_shorter_or_other_request_is_looked_up() -> None:
    final = history(10)
    nxt = ended_with(final)
    shorter = copy.deepcopy(final[:12])
    assert writer_mod._carried_head(shorter, nxt._carried) == 0  # type: ignore[arg-type]
    assert [f.h for f in nxt.forms(shorter)] == by_hand(shorter)
    trimmed = copy.deepcopy(final[4:])
    assert [f.h for f in ended_with(final).forms(trimmed)] == by_hand(trimmed)


def test_a_short_list_after_the_final_state_leaves_its_history() -> None:
    """A task's writes are viewed when the run's end is flushed, after its final state."""
    w = TapeWriter(None, "r")  # type: ignore[arg-type]
    final = history(10)
    w.forms(final)
    w.forms([AIMessage("a task's write", id="w")])
    carried = w.history()
    assert carried is not None
    assert carried[0] == list(map(type, final))
    assert [f.h for f in carried[3]] == by_hand(final)


def test_a_recorded_conversation_stores_the_same_rows_with_and_without_the_carry(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch
) -> None:
    carried_heads: list[int] = []
    carried_head = writer_mod._carried_head

    def counted(ms: list[Any], carried: Any) -> int:
        carried_heads.append(carried_head(ms, carried))
        return carried_heads[-1]

    monkeypatch.setattr(writer_mod, "_carried_head", counted)
    results = []
    for carry in (True, False):
        rec = tape.record(chat_graph(edit=True), name=f"carry-{carry}")
        if not carry:
            monkeypatch.setattr(rec, "_keep_history", lambda session: None)
        cfg = {"configurable": {"thread_id": f"t-{carry}"}}
        for i in range(12):
            # equal messages in both conversations (add_messages gives each its own id otherwise)
            rec.invoke({"messages": [HumanMessage(f"question {i}", id=f"q{i}")]}, cfg)
            assert rec.last_status == "finished"
        results.append(requests(tape, rec.run_ids))
        if carry:
            assert any(carried_heads)  # the later requests took the carried head
            assert 0 in carried_heads  # and the node's edit made one run look the messages up
    with_carry, without = results
    assert with_carry == without
    # the edited message is in the requests after the edit, as it was sent
    assert len({tuple(items) for _, items in with_carry}) == len(with_carry)


def test_the_kept_lists_go_when_the_memo_drops_its_older_half(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = tape.record(chat_graph(), name="drops")
    for thread in ("a", "b"):
        for i in range(5):
            rec.invoke({"messages": [HumanMessage(f"question {i}")]}, {"configurable": {"thread_id": thread}})
    assert set(rec._last_histories) == {"a", "b"}
    assert rec._history_messages == 20
    monkeypatch.setattr(writer_mod, "forms_drops", writer_mod.forms_drops + 1)
    rec.invoke({"messages": [HumanMessage("one more")]}, {"configurable": {"thread_id": "a"}})
    assert set(rec._last_histories) == {"a"}
    assert rec._history_messages == 12
