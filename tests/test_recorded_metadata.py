"""A recorded graph shows its user the metadata an unrecorded one does.

graphtape links a run's checkpoints and calls to the run it records, and
LangGraph copies a run's config metadata into every checkpoint's metadata,
every nested runnable's metadata and every stream part: the link must not
ride there. Each test runs the same graph unrecorded and recorded, on the
same kind of saver (a user's ``InMemorySaver``, graphtape's own), and
compares what LangGraph's APIs return, ids normalised.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from graphtape.runtime.saver import saver_for
from graphtape.testing.models import SeededChatModel

_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _graph(checkpointer: Any, seen: list[dict[str, Any]]) -> Any:
    """A model call, then a pause on ``interrupt()``; ``seen`` gets each node's ``config["metadata"]``."""
    model = SeededChatModel(seed=7)

    def ask(state: State, config: RunnableConfig) -> dict[str, Any]:
        seen.append(dict(config["metadata"]))
        return {"messages": [model.invoke(state["messages"], config)]}

    def review(state: State, config: RunnableConfig) -> dict[str, Any]:
        seen.append(dict(config["metadata"]))
        interrupt("ok?")
        return {}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_node("review", review)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "review")
    return builder.compile(checkpointer=checkpointer)


def _norm(value: Any, thread_id: str) -> Any:
    """``value`` with the thread's id and every generated id (checkpoints, tasks, messages) replaced."""
    if isinstance(value, dict):
        return {k: _norm(v, thread_id) for k, v in value.items() if k != "timestamp"}
    if isinstance(value, (list, tuple)):
        return [_norm(v, thread_id) for v in value]
    if isinstance(value, str):
        return _ID.sub("<id>", value.replace(thread_id, "<thread>"))
    return value


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "metadata": {"user_key": "u"}}


def _observed(graph: Any, thread_id: str, seen: list[dict[str, Any]]) -> dict[str, Any]:
    """What a user of ``graph`` sees of a run's metadata on thread ``thread_id``."""
    config = _config(thread_id)
    parts = list(graph.stream({"messages": [HumanMessage("hi")]}, config, stream_mode=["messages", "debug"]))
    snapshot = graph.get_state(config)
    out = {
        "messages": [meta for mode, (_, meta) in ((m, p) for m, p in parts if m == "messages")],
        "debug": [
            {k: payload["payload"].get(k) for k in ("config", "parent_config", "metadata")}
            for mode, payload in parts
            if mode == "debug"
        ],
        "state": snapshot.metadata,
        "state_config": snapshot.config,
        "history": [s.metadata for s in graph.get_state_history(config)],
        "node_metadata": list(seen),
    }
    return _norm(out, thread_id)


@pytest.mark.parametrize("saver_kind", ["memory", "graphtape"])
def test_recorded_run_shows_the_metadata_of_an_unrecorded_one(tape, saver_kind):
    def saver() -> Any:
        return InMemorySaver() if saver_kind == "memory" else saver_for(tape.store)

    seen_plain: list[dict[str, Any]] = []
    plain = _observed(_graph(saver(), seen_plain), "plain-thread", seen_plain)
    seen_recorded: list[dict[str, Any]] = []
    recorded_graph = tape.record(_graph(saver(), seen_recorded))
    recorded = _observed(recorded_graph, "recorded-thread", seen_recorded)
    assert recorded_graph.last_run_id is not None and tape.run(recorded_graph.last_run_id).status == "interrupted"
    assert plain["messages"] and plain["debug"] and len(plain["history"]) >= 3
    assert [key for key in plain if recorded[key] != plain[key]] == []
    # the link from checkpoints to their run is graphtape's own: every checkpoint of the thread is the run's
    run_id = recorded_graph.last_run_id
    ids = {
        s.config["configurable"]["checkpoint_id"] for s in recorded_graph.get_state_history(_config("recorded-thread"))
    }
    entries = tape.history("recorded-thread").entries
    assert ids and ids <= {e.checkpoint_id for e in entries if e.run_id == run_id}


async def test_recorded_astream_events_show_the_metadata_of_an_unrecorded_one(tape):
    async def observe(graph: Any, thread_id: str) -> list[Any]:
        config = {"configurable": {"thread_id": thread_id}}
        events = [e async for e in graph.astream_events({"messages": [HumanMessage("hi")]}, config, version="v2")]
        state = await graph.aget_state(config)
        return _norm([[e["event"], e["name"], e.get("metadata")] for e in events] + [state.metadata], thread_id)

    plain = await observe(_graph(InMemorySaver(), []), "plain-thread")
    recorded_graph = tape.record(_graph(InMemorySaver(), []))
    recorded = await observe(recorded_graph, "recorded-thread")
    assert any(name == "on_chat_model_start" for name, _, _ in plain[:-1])
    assert recorded == plain
    # the run still knows its calls and its checkpoints
    run = tape.run(recorded_graph.last_run_id)
    assert run.llm_calls == 1 and run.status == "interrupted"
