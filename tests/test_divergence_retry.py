"""A divergence is reported once, for the call that changed, whatever retries the code around it.

Each graph makes an unchanged call and then a call whose prompt the test
edits before a strict replay, with a retry layer around it: LangGraph's
``RetryPolicy(retry_on=Exception)``, ``Runnable.with_retry`` and langchain's
``ModelRetryMiddleware``. A retried divergence used to be raised again (one
more ``divergence`` event per attempt, the last one blaming the unchanged
call whose recorded answer was already used) or, with the middleware, turned
into an error message and a "finished" replay.
"""

from __future__ import annotations

import threading
from typing import Any, TypedDict

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy

import graphtape
from tests.graphs import RandomModel, forbid

PROMPT = {"changed": "Summarise"}


class Asked(BaseCallbackHandler):
    """Every request a chat model was asked (served or live), as its last message's text."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self._lock = threading.Lock()

    def on_chat_model_start(self, serialized: Any, messages: list[list[Any]], **kwargs: Any) -> None:
        with self._lock:
            self.prompts.append(str(messages[0][-1].content))

    def count(self, prefix: str) -> int:
        return sum(p.startswith(prefix) for p in self.prompts)


class State(TypedDict, total=False):
    first: str
    second: str


def build(asked: Asked, *, policy: bool = False, with_retry: bool = False):
    model: Any = RandomModel(callbacks=[asked])
    if with_retry:
        model = model.with_retry(stop_after_attempt=3, wait_exponential_jitter=False)

    def work(s: State):
        first = model.invoke([HumanMessage("Unchanged question")]).content
        second = model.invoke([HumanMessage(f"{PROMPT['changed']} {first}")]).content
        return {"first": first, "second": second}

    b = StateGraph(State)
    retry = RetryPolicy(retry_on=Exception, max_attempts=3, initial_interval=0.01, jitter=False) if policy else None
    b.add_node("work", work, retry_policy=retry)
    b.add_edge(START, "work")
    b.add_edge("work", END)
    return b.compile()


@pytest.fixture
def edited_prompt():
    old = dict(PROMPT)
    yield PROMPT
    PROMPT.update(old)


def _only_divergence(tape: graphtape.Tape, result: Any) -> dict[str, Any]:
    assert result.status == "diverged", (result.status, result.error)
    events = [e for rid in result.run_ids if rid for e in tape.store.events(rid, ["divergence"])]
    assert len(events) == 1, [e.data["message"] for e in events]
    assert events[0].data == result.divergence
    return result.divergence


@pytest.mark.parametrize("layer", ["retry_policy", "with_retry"])
def test_a_retried_divergence_is_reported_once_for_the_changed_call(tape, edited_prompt, layer):
    opts = {"policy": layer == "retry_policy", "with_retry": layer == "with_retry"}
    rec = tape.record(build(Asked(), **opts), name="retry")
    rec.invoke({}, {"configurable": {"thread_id": "r"}})
    run_id = rec.last_run_id

    edited_prompt["changed"] = "Condense"
    asked = Asked()
    with forbid():
        result = tape.replay(run_id, build(asked, **opts), mode="strict")
    div = _only_divergence(tape, result)
    assert (div["node_path"], div["ordinal"]) == ("work", 1), div["message"]
    assert "+[human] Condense" in div["diff"] and "-[human] Summarise" in div["diff"]
    # neither the node nor the call ran again
    assert asked.count("Unchanged question") == 1
    assert asked.count("Condense") == 1


def test_model_retry_middleware_does_not_retry_a_divergence(tape, edited_prompt):
    middleware = pytest.importorskip("langchain.agents.middleware")
    from langchain.agents import create_agent

    from tests.graphs import search

    def agent(asked: Asked):
        return create_agent(
            RandomModel(tool_name="search", callbacks=[asked]),
            tools=[search],
            system_prompt=PROMPT["changed"],
            middleware=[middleware.ModelRetryMiddleware(max_retries=2, initial_delay=0.0, jitter=False)],
        )

    rec = tape.record(agent(Asked()), name="agent")
    rec.invoke({"messages": [HumanMessage("find cats")]}, {"configurable": {"thread_id": "a"}})
    run_id = rec.last_run_id
    assert tape.run(run_id).llm_calls == 2

    edited_prompt["changed"] = "Condense"
    asked = Asked()
    with forbid():
        result = tape.replay(run_id, agent(asked), mode="strict")
    div = _only_divergence(tape, result)
    assert (div["node_path"], div["ordinal"]) == ("model", 0), div["message"]
    assert "+[system] Condense" in div["diff"]
    assert len(asked.prompts) == 1, "the middleware asked the model again"


def test_a_diverged_session_raises_its_first_divergence_for_every_later_call(tape, edited_prompt):
    """A retry loop of the user's own gets the first report back, not a new one for another call."""
    model = RandomModel()

    def work(s: State):
        try:
            model.invoke([HumanMessage(f"{PROMPT['changed']} once")])
        except graphtape.Divergence:
            pass  # swallowed by user code: the next call must not be matched or sent
        return {"second": model.invoke([HumanMessage("Unchanged question")]).content}

    def graph():
        b = StateGraph(State)
        b.add_node("work", work)
        b.add_edge(START, "work")
        b.add_edge("work", END)
        return b.compile()

    rec = tape.record(graph(), name="swallow")
    rec.invoke({}, {"configurable": {"thread_id": "s"}})
    edited_prompt["changed"] = "Condense"
    with forbid():
        result = tape.replay(rec.last_run_id, graph(), mode="strict")
    div = _only_divergence(tape, result)
    assert div["ordinal"] == 0 and "+[human] Condense once" in div["diff"]


def test_control_errors_are_graph_bubble_ups_and_still_graphtape_errors():
    from langgraph.errors import GraphBubbleUp

    from graphtape.debug import DebugStopped

    for cls in (graphtape.Divergence, graphtape.EffectBlocked, graphtape.EffectInDoubt, DebugStopped):
        assert issubclass(cls, graphtape.ControlError)
        assert issubclass(cls, GraphBubbleUp)
        assert issubclass(cls, graphtape.GraphtapeError)


def test_tool_retry_middleware_does_not_retry_a_divergence(tape, edited_prompt):
    """A changed tool call (its arguments rewritten by a middleware) is not run again, and the agent stops."""
    middleware = pytest.importorskip("langchain.agents.middleware")
    from langchain.agents import create_agent

    from tests.graphs import search

    def agent(attempts: list[str]):
        @middleware.wrap_tool_call
        def rewrite(request: Any, handler: Any) -> Any:
            call = {**request.tool_call, "args": {"q": f"{PROMPT['changed']}: {request.tool_call['args']['q']}"}}
            attempts.append(call["args"]["q"])
            return handler(request.override(tool_call=call))

        return create_agent(
            RandomModel(tool_name="search"),
            tools=[search],
            middleware=[middleware.ToolRetryMiddleware(max_retries=2, initial_delay=0.0, jitter=False), rewrite],
        )

    rec = tape.record(agent([]), name="agent")
    rec.invoke({"messages": [HumanMessage("find cats")]}, {"configurable": {"thread_id": "a"}})
    run_id = rec.last_run_id
    assert (tape.run(run_id).llm_calls, tape.run(run_id).tool_calls) == (2, 1)

    edited_prompt["changed"] = "Condense"
    attempts: list[str] = []
    with forbid():
        result = tape.replay(run_id, agent(attempts), mode="strict")
    div = _only_divergence(tape, result)
    assert (div["kind"], div["name"]) == ("tool", "search"), div["message"]
    assert "Condense: " in div["diff"]
    assert len(attempts) == 1, "the tool call was retried"
