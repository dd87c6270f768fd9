"""Whether a replay reproduced the recorded output: by address first (graphtape.replay.engine).

A replay of unchanged code stores the very same output view, so equal addresses
answer ``output_matches`` without reading either view; different addresses are
compared as before (message ids stripped, messages expanded).
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph

from graphtape import events
from tests.graphs import RandomModel

SUFFIX = {"text": ""}


class Notes(TypedDict, total=False):
    topic: str
    notes: Annotated[list, operator.add]


def build():
    model = RandomModel()

    def ask(s: Notes) -> dict[str, Any]:
        answer = model.invoke([HumanMessage(s["topic"])])
        return {"notes": [f"{answer.content}{SUFFIX['text']}"]}

    b = StateGraph(Notes)
    b.add_node("ask", ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b.compile()


def output_ref(tape, run_id: str) -> str:
    row = tape.store.events(run_id, [events.RunFinished.KIND])[0]
    return events.RunFinished.from_row(row).output


def test_the_same_output_is_known_by_its_address(tape, monkeypatch):
    graph = build()
    rec = tape.record(graph)
    rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "o"}})
    ref = output_ref(tape, rec.last_run_id)
    read: list[str] = []
    original = tape.store.get_json

    def spy(h):
        read.append(h)
        return original(h)

    monkeypatch.setattr(tape.store, "get_json", spy)
    result = tape.replay(rec.last_run_id, graph, mode="strict")
    monkeypatch.undo()
    assert result.status == "finished" and result.output_matches is True
    assert output_ref(tape, result.run_id) == ref
    assert ref not in read


def test_a_different_output_does_not_match(tape, monkeypatch):
    graph = build()
    rec = tape.record(graph)
    rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "o"}})
    monkeypatch.setitem(SUFFIX, "text", " (edited)")
    result = tape.replay(rec.last_run_id, graph, mode="flight")
    assert result.status == "finished" and result.live == 0
    assert result.output_matches is False
    assert "(edited)" in str(result.output)
