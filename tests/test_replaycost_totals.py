"""A strict replay's totals come from what its answerer served, not from its call events read back.

``graphtape.replay.answerer`` sums each served call as the call event
``Session.served_value`` writes for it (``_served_event``); a strict replay that
ends reads only its output and interrupts back (graphtape.replay.engine). These
tests hold that sum to the one the stored call events give, for tokens, cost,
recorded latency and overrides (tools whose code changed: tests/test_tool_code.py), and check that a replay
that diverged still reads its events.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

import graphtape
from graphtape import events
from graphtape.replay.engine import replay
from tests.graphs import RandomModel, forbid

PRICES = {"graphtape-fake-test": (3.0, 15.0)}


@tool
def measure(q: str) -> str:
    """Measure the query."""
    return f"{len(q)}"


class Notes(TypedDict, total=False):
    topic: str
    notes: Annotated[list, operator.add]


def build():
    model = RandomModel()

    def node(i: int):
        def step(s: Notes) -> dict[str, Any]:
            answer = model.invoke([HumanMessage(f"{i}: {s['notes'][-1] if s['notes'] else s['topic']}")])
            return {"notes": [f"{answer.content} | {measure.invoke({'q': str(answer.content)})}"]}

        return step

    b = StateGraph(Notes)
    prev = START
    for i in range(3):
        b.add_node(f"n{i}", node(i))
        b.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    b.add_edge(prev, END)
    return b.compile()


def stored_totals(tape, run_ids: list[str]) -> dict[str, Any]:
    rows = [row for rid in run_ids for row in tape.store.events(rid, list(events.CALL_EVENT_KINDS))]
    return events.replay_stats(rows).to_dict()


def totals(result) -> dict[str, Any]:
    keys = ("served", "live", "tokens_saved", "cost_saved", "time_saved", "live_tokens", "live_cost", "changed_code")
    return {k: getattr(result, k) for k in keys}


def recorded(store_url: str):
    tape = graphtape.connect(store_url, prices=PRICES)
    graph = build()
    rec = tape.record(graph)
    rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "r"}})
    return tape, graph, rec.last_run_id


def test_strict_totals_are_those_of_the_stored_call_events(store_url, monkeypatch):
    tape, graph, run_id = recorded(store_url)
    try:
        read: list[tuple[str, ...]] = []
        original = tape.store.events

        def spy(rid, kinds=None):
            read.append(tuple(kinds or ()))
            return original(rid, kinds)

        monkeypatch.setattr(tape.store, "events", spy)
        with forbid():
            result = tape.replay(run_id, graph, mode="strict")
        monkeypatch.undo()
        assert result.status == "finished" and result.served == 6
        assert result.tokens_saved > 0 and result.cost_saved > 0 and result.time_saved > 0
        assert totals(result) == stored_totals(tape, result.run_ids)
        # the replayed run's call events were not read back
        assert not any(set(k) & set(events.CALL_EVENT_KINDS) for k in read[1:]), read
    finally:
        tape.close()


def test_overridden_calls_are_summed_as_stored(store_url, monkeypatch):
    tape, graph, run_id = recorded(store_url)
    try:
        call = tape.store.events(run_id, ["tool_call"])[-1]  # the last call: nothing after it asks differently
        from graphtape.debug.inject import find_call, override_envelope

        found = find_call(tape, events.parse(call).call_id, run_id)
        result = replay(
            tape,
            run_id,
            graph,
            mode="strict",
            overrides={found.call_id: override_envelope(found, "overridden")},
        )
        assert result.status == "finished" and result.served == 6
        sources = [events.parse(r).source for r in tape.store.events(result.run_id, list(events.CALL_EVENT_KINDS))]
        assert sources.count("override") == 1
        assert totals(result) == stored_totals(tape, result.run_ids)
    finally:
        tape.close()


def test_a_diverged_replay_sums_its_stored_events(store_url):
    tape, _graph, run_id = recorded(store_url)
    try:

        def other():
            model = RandomModel()
            b = StateGraph(Notes)
            b.add_node("n0", lambda s: {"notes": [model.invoke([HumanMessage("different")]).content]})
            b.add_edge(START, "n0")
            b.add_edge("n0", END)
            return b.compile()

        result = tape.replay(run_id, other(), mode="strict")
        assert result.status == "diverged"
        assert totals(result) == stored_totals(tape, result.run_ids)
    finally:
        tape.close()


def test_a_chain_with_interrupts_sums_as_stored(store_url):
    from langgraph.types import Command

    from tests import graphs

    tape = graphtape.connect(store_url, prices=PRICES)
    try:
        rec = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
        cfg = {"configurable": {"thread_id": "h"}}
        rec.invoke({}, cfg)
        rec.invoke(Command(resume={i.id: "yes" for i in rec.get_state(cfg).interrupts}), cfg)
        rec.invoke(Command(resume="publish"), cfg)
        with forbid():
            result = tape.replay(rec.last_run_id, graphs.build_review(), mode="strict")
        assert result.status == "finished" and len(result.run_ids) == 3 and result.served == 2
        assert totals(result) == stored_totals(tape, result.run_ids)
        # and one that ends at an interrupt
        with forbid():
            first = tape.replay(rec.run_ids[0], graphs.build_review(), mode="strict")
        assert first.status == "interrupted"
        assert totals(first) == stored_totals(tape, first.run_ids)
    finally:
        tape.close()
