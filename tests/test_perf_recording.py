"""What the recording's shortcuts must keep: the same tape as the long way round.

The recorder skips work it can prove redundant (issue 13): a message already
serialised (this run or an earlier one) is not serialised again, the part of a
conversation's history already on the tape is not sent again, a served call
points at the recorded response blob, and strict replay reads the recorded
responses once and decodes them only when served. Each test holds one of
those to the result of doing the work.
"""

from __future__ import annotations

import json
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import graphtape
from graphtape import events, serde
from graphtape.calls import RecordedCall
from graphtape.record import writer as writer_mod
from graphtape.replay.matcher import Matcher
from graphtape.testing import SeededChatModel


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def chat_graph(model: Any) -> Any:
    def chat(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    b = StateGraph(Chat)
    b.add_node("chat", chat)
    b.add_edge(START, "chat")
    b.add_edge("chat", END)
    return b.compile()


def _llm_events(tape: graphtape.Tape, run_id: str) -> list[events.Event]:
    return [events.parse(r) for r in tape.store.events(run_id, [events.LlmCall.KIND])]


def test_a_conversation_request_chain_holds_every_message_in_order(tape: graphtape.Tape) -> None:
    """Turn after turn (the history skipped as already stored), each request's chain expands to its messages."""
    rec = tape.record(chat_graph(SeededChatModel(seed=3, latency=0)), name="chat", checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "conv"}}
    turns = writer_mod.PROBE_MIN + 4
    for turn in range(turns):
        out = rec.invoke({"messages": [HumanMessage(f"turn {turn}: tell me more")]}, cfg)
        (call,) = _llm_events(tape, rec.last_run_id or "")
        sent = out["messages"][:-1]  # the request: everything before this turn's answer
        hashes = tape.store.get_chain(call.messages)
        assert len(hashes) == len(sent) == 2 * turn + 1
        blobs = tape.store.get_blobs(hashes)
        assert [serde.message_from_json(json.loads(blobs[h])).content for h in hashes] == [m.content for m in sent]
        # the address of each message is the one a fresh serialisation gives
        assert hashes == [serde.digest(serde.stored_json(serde.message_for_request(m))) for m in sent]
    # the chain ids the writer computes are the ones stored: every prefix of the last request is on the tape
    assert len(tape.store.get_chain_nodes(writer_mod.chain_ids(hashes))) == len(hashes)


def test_a_later_run_sends_only_the_new_part_of_the_history(tape: graphtape.Tape, monkeypatch) -> None:
    rec = tape.record(chat_graph(SeededChatModel(seed=5, latency=0)), name="chat", checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "conv"}}
    for turn in range(writer_mod.PROBE_MIN):
        rec.invoke({"messages": [HumanMessage(f"turn {turn}")]}, cfg)
    written: list[Any] = []
    real = tape.store.write

    def spy(batch: Any, **kw: Any) -> None:
        written.append((len(batch.chains), len(batch.blobs)))
        real(batch, **kw)

    monkeypatch.setattr(tape.store, "write", spy)
    rec.invoke({"messages": [HumanMessage("one more")]}, cfg)
    chains = sum(c for c, _ in written)
    # the new human message and the new answer at the end of the history, and the node's write (a list
    # of one message, a chain of its own): three chain nodes, not the whole history again
    assert chains == 3, written


def test_an_edited_message_is_serialised_again(tmp_path) -> None:
    """The process-wide memo holds a copy: a message changed in place after it was seen is read afresh."""
    msg = AIMessage(content="first", id="m-1")
    first = writer_mod.message_form(msg)
    assert writer_mod.message_form(AIMessage(content="first", id="m-1")) is first
    msg.content = "second"  # in place: the memo must not answer with the old form
    again = writer_mod.message_form(msg)
    assert again is not first
    assert again.js == serde.message_for_request(msg)
    assert again.h == serde.digest(serde.stored_json(serde.message_for_request(msg)))
    # same id, different content: its own form
    other = writer_mod.message_form(AIMessage(content="third", id="m-1"))
    assert other.js["content"] == "third"


class Notes(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]


def notes_graph(model: Any) -> Any:
    def step(state: Notes) -> dict[str, Any]:
        answer = model.invoke([HumanMessage(f"continue: {state['notes'][-1] if state['notes'] else state['topic']}")])
        return {"notes": [str(answer.content)]}

    b = StateGraph(Notes)
    b.add_node("a", step)
    b.add_node("b", step)
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", END)
    return b.compile()


def test_a_served_call_points_at_the_recorded_response(tape: graphtape.Tape) -> None:
    graph = notes_graph(SeededChatModel(seed=1, latency=0))
    rec = tape.record(graph, name="notes")
    out = rec.invoke({"topic": "refunds", "notes": []}, {"configurable": {"thread_id": "t"}})
    run_id = rec.last_run_id or ""
    result = tape.replay(run_id, graph, mode="strict")
    assert result.status == "finished" and result.served == 2 and result.live == 0
    assert result.output == out
    recorded = _llm_events(tape, run_id)
    replayed = _llm_events(tape, result.run_id)
    assert [e.response for e in replayed] == [e.response for e in recorded]
    assert all(e.response for e in replayed)
    # and a replay of the replay is served the same way
    again = tape.replay(result.run_id, graph, mode="strict")
    assert again.status == "finished" and again.output == out


def test_prefetched_responses_decode_like_a_store_read(tape: graphtape.Tape) -> None:
    graph = notes_graph(SeededChatModel(seed=2, latency=0))
    rec = tape.record(graph, name="notes")
    rec.invoke({"topic": "returns", "notes": []}, {"configurable": {"thread_id": "t"}})
    run_id = rec.last_run_id or ""
    matcher = Matcher.from_store(tape.store, [run_id])
    assert matcher.calls and all(c.response_data is not None for c in matcher.calls)
    for c in matcher.calls:
        assert c.response_env(tape.store) == tape.store.get_json(c.response_ref or "")
    # a call read without the index falls back to the store
    plain = [RecordedCall.from_event(r) for r in tape.store.events(run_id, [events.LlmCall.KIND])]
    assert [c.response_env(tape.store) for c in plain] == [c.response_env(tape.store) for c in matcher.calls]


def test_strict_replay_still_catches_a_changed_state(tape: graphtape.Tape) -> None:
    """The address shortcut of the state check accepts only identical writes; a different write still diverges."""
    flips = {"n": 0}

    def step(state: Notes) -> dict[str, Any]:
        flips["n"] += 1
        return {"notes": [f"note {flips['n']}"]}

    b = StateGraph(Notes)
    b.add_node("a", step)
    b.add_edge(START, "a")
    b.add_edge("a", END)
    graph = b.compile()
    rec = tape.record(graph, name="flip")
    rec.invoke({"topic": "x", "notes": []}, {"configurable": {"thread_id": "t"}})
    result = tape.replay(rec.last_run_id or "", graph, mode="strict")
    assert result.status == "diverged"
    assert result.divergence is not None and result.divergence.get("kind") == "state"


@pytest.mark.parametrize("n", [0, 1, writer_mod.PROBE_MIN + 1])
def test_chain_ids_are_the_content_addresses(n: int) -> None:
    hashes = [serde.digest(f"m{i}") for i in range(n)]
    parent = None
    expected = []
    for h in hashes:
        parent = serde.digest(f"{parent or ''}/{h}")
        expected.append(parent)
    assert writer_mod.chain_ids(hashes) == expected
