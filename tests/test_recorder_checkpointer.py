"""Recording keeps a graph's checkpointer semantics: none compiled in, each call is fresh (as in LangGraph).

A graph compiled without a checkpointer carries nothing from one call to the
next, whatever ``thread_id`` it is given, and its state may hold values no
serializer knows. Recorded, it runs on graphtape's saver (replay, recovery and
the Studio need checkpoints) but on a thread of its own per call, and a value
that cannot be stored is a placeholder in its checkpoints, with a warning.
``tape.record(graph, checkpointer=tape.saver)`` asks for durable threads.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableLambda
from langgraph.func import entrypoint
from langgraph.graph import StateGraph

import graphtape
from graphtape.recorder import GIVEN_THREAD_META, NO_CHECKPOINTER_META
from graphtape.runtime.saver import UNSTORED_KEY


def _remembering():
    @entrypoint()
    def remember(value: int, *, previous: Any = None) -> dict[str, Any]:
        return {"value": value, "previous": previous}

    return remember


class Log(TypedDict):
    log: Annotated[list[str], operator.add]


def _logging():
    builder = StateGraph(Log)
    builder.add_node("note", lambda state: {"log": ["noted"]})
    builder.set_entry_point("note")
    builder.set_finish_point("note")
    return builder.compile()


class Holding(TypedDict):
    my_key: str
    never_called: Any


def _holding():
    builder = StateGraph(Holding)
    builder.add_node("side", lambda state: {"my_key": state["my_key"] + " and back again"})
    builder.set_entry_point("side")
    builder.set_finish_point("side")
    return builder.compile()


def test_an_entrypoint_without_checkpointer_sees_no_previous_value_when_recorded(tape):
    config = {"configurable": {"thread_id": "t1"}}
    plain = _remembering()
    unrecorded = [plain.invoke(1, config), plain.invoke(2, config)]
    recorded = tape.record(_remembering())
    assert [recorded.invoke(1, config), recorded.invoke(2, config)] == unrecorded
    assert unrecorded[1] == {"value": 2, "previous": None}

    runs = [tape.run(rid) for rid in recorded.run_ids]
    # each call ran on a thread of its own, none following another; the thread the caller named is shown
    assert len({run.thread_id for run in runs}) == 2 and "t1" not in {run.thread_id for run in runs}
    assert [run.parent_run_id for run in runs] == [None, None]
    assert all(run.meta[NO_CHECKPOINTER_META] and run.meta[GIVEN_THREAD_META] == "t1" for run in runs)


def test_a_graph_without_checkpointer_carries_no_state_between_recorded_calls(tape):
    config = {"configurable": {"thread_id": "t1"}}
    recorded = tape.record(_logging())
    assert recorded.invoke({"log": ["a"]}, config) == {"log": ["a", "noted"]}
    assert recorded.invoke({"log": ["b"]}, config) == {"log": ["b", "noted"]}  # not a, noted, b, noted
    assert [chunk for chunk in recorded.stream({"log": ["c"]}, config, stream_mode="values")] == [
        {"log": ["c"]},
        {"log": ["c", "noted"]},
    ]

    async def called_async() -> Any:
        return await recorded.ainvoke({"log": ["d"]}, config)

    assert asyncio.run(called_async()) == {"log": ["d", "noted"]}
    assert [tape.run(rid).status for rid in recorded.run_ids] == ["finished"] * 4
    # as unrecorded: the caller's thread has no state, and LangGraph says why
    with pytest.raises(ValueError, match="No checkpointer set"):
        recorded.get_state(config)
    with pytest.raises(ValueError, match="No checkpointer set"):
        recorded.update_state(config, {"log": ["x"]})


def test_graphtapes_saver_passed_explicitly_gives_durable_threads(tape):
    config = {"configurable": {"thread_id": "t1"}}
    recorded = tape.record(_logging(), checkpointer=tape.saver)
    recorded.invoke({"log": ["a"]}, config)
    assert recorded.invoke({"log": ["b"]}, config) == {"log": ["a", "noted", "b", "noted"]}
    assert recorded.get_state(config).values == {"log": ["a", "noted", "b", "noted"]}
    first, second = (tape.run(rid) for rid in recorded.run_ids)
    assert first.thread_id == second.thread_id == "t1" and second.parent_run_id == first.run_id
    assert NO_CHECKPOINTER_META not in second.meta

    remember = tape.record(_remembering(), checkpointer=tape.saver)
    remember.invoke(1, {"configurable": {"thread_id": "t2"}})
    assert remember.invoke(2, {"configurable": {"thread_id": "t2"}})["previous"] == {"value": 1, "previous": None}


def test_a_state_value_graphtape_cannot_store_is_a_placeholder_and_the_run_replays(tape):
    never_called = RunnableLambda(lambda state: state)
    recorded = tape.record(_holding())
    with pytest.warns(graphtape.GraphtapeWarning, match="RunnableLambda cannot be stored in a checkpoint"):
        out = recorded.invoke({"my_key": "my value", "never_called": never_called})
    # the run goes on with the value itself, as unrecorded
    assert out == {"my_key": "my value and back again", "never_called": never_called}
    run = tape.run(recorded.last_run_id)
    assert run.status == "finished"
    stored = recorded.graph.get_state({"configurable": {"thread_id": run.thread_id}}).values
    assert stored["my_key"] == "my value and back again"
    assert stored["never_called"] == {UNSTORED_KEY: "langchain_core.runnables.base:RunnableLambda"}

    result = tape.replay(run.run_id, _holding())  # (warnings are errors here: a replay warns of nothing)
    assert (result.status, result.live, result.divergence, result.output_matches) == ("finished", 0, None, True)
