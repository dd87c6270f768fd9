"""``graphtape.testing``: the fake model and the live-call guard.

Every other test leans on these two being honest: a fake model that is
accidentally deterministic would let a broken replay pass, and a guard that
misses a call would hide a live fallthrough.
"""

from __future__ import annotations

import threading
import time

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from graphtape.testing import (
    LiveCallForbidden,
    SeededChatModel,
    check_live,
    forbid_live_calls,
    live_call_counts,
    reset_live_calls,
    tracked,
)

PROMPT = [SystemMessage("You are terse."), HumanMessage("Where is my parcel?")]


@pytest.fixture(autouse=True)
def _fresh_counts():
    reset_live_calls()
    yield
    reset_live_calls()


def lookup_order(order_id: str, include_items: bool = False) -> dict:
    """Look up an order by id."""
    return {"order_id": order_id, "items": [] if include_items else None}


lookup_tool = tool(tracked(lookup_order))


def _merged(chunks):
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    return total


def _essence(msg):
    """What must agree between two answers (ids are per-run, like a real provider's)."""
    return (
        msg.content,
        [(c["name"], c["args"], c["id"]) for c in msg.tool_calls],
        msg.usage_metadata,
        {k: msg.response_metadata.get(k) for k in ("model_name", "finish_reason")},
    )


def test_same_seed_repeats_and_different_seeds_differ():
    def answers(seed):
        m = SeededChatModel(seed=seed)
        return [m.invoke(PROMPT).content for _ in range(3)]

    assert answers(7) == answers(7)
    assert answers(7) != answers(8)
    assert len(set(answers(7))) == 3  # successive calls differ too


def test_unseeded_models_differ():
    assert SeededChatModel().invoke(PROMPT).content != SeededChatModel().invoke(PROMPT).content


def test_default_answer_is_a_sentence_of_8_to_20_words():
    m = SeededChatModel(seed=1)
    for _ in range(20):
        text = m.invoke(PROMPT).content
        assert 8 <= len(text.split()) <= 20 and text.endswith(".")


async def test_usage_and_model_name_always_present():
    m = SeededChatModel(seed=3, model_name="fake-x")
    results = [m.invoke(PROMPT), await m.ainvoke(PROMPT), _merged(list(m.stream(PROMPT)))]
    chunks = [c async for c in m.astream(PROMPT)]
    results.append(_merged(chunks))
    for r in results:
        u = r.usage_metadata
        assert u["input_tokens"] == sum(len(x.content) for x in PROMPT) // 4
        assert u["output_tokens"] == len(r.content) // 4 + 1
        assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
        assert r.response_metadata["model_name"] == "fake-x"


async def test_stream_and_invoke_agree():
    invoked = SeededChatModel(seed=5).invoke(PROMPT)
    chunks = list(SeededChatModel(seed=5).stream(PROMPT))
    assert len(chunks) > 2 and chunks[-1].chunk_position == "last"
    assert all(c.usage_metadata is None for c in chunks[:-1])
    assert _essence(_merged(chunks)) == _essence(invoked)
    achunks = [c async for c in SeededChatModel(seed=5).astream(PROMPT)]
    assert _essence(_merged(achunks)) == _essence(await SeededChatModel(seed=5).ainvoke(PROMPT))
    assert _essence(_merged(achunks)) == _essence(invoked)


def test_bound_tools_are_called_with_schema_shaped_args():
    bound = SeededChatModel(seed=2).bind_tools([lookup_tool])
    msg = bound.invoke([HumanMessage("Where is order A-1001?")])
    assert msg.content == ""
    (call,) = msg.tool_calls
    assert call["name"] == "lookup_order" and call["id"].startswith("call_")
    assert set(call["args"]) == {"order_id"} and isinstance(call["args"]["order_id"], str)
    assert msg.response_metadata["finish_reason"] == "tool_calls"

    streamed = _merged(
        list(SeededChatModel(seed=2).bind_tools([lookup_tool]).stream([HumanMessage("Where is order A-1001?")]))
    )
    assert _essence(streamed) == _essence(msg)

    after = bound.invoke([HumanMessage("?"), msg, ToolMessage("{}", tool_call_id=call["id"])])
    assert after.tool_calls == [] and after.content


def test_custom_responder_sees_tools_and_may_return_text():
    seen = []

    def responder(messages, rng, tools):
        seen.append([t["function"]["name"] for t in tools])
        return f"{len(messages)} messages, {rng.randint(0, 9)}"

    out = SeededChatModel(seed=1, responder=responder).bind_tools([lookup_tool]).invoke(PROMPT)
    assert seen == [["lookup_order"]] and out.content.startswith("2 messages")
    assert out.usage_metadata["output_tokens"] == len(out.content) // 4 + 1


async def test_forbid_live_field_raises_on_every_path():
    m = SeededChatModel(forbid_live=True)
    with pytest.raises(LiveCallForbidden):
        m.invoke(PROMPT)
    with pytest.raises(LiveCallForbidden):
        list(m.stream(PROMPT))
    with pytest.raises(LiveCallForbidden):
        await m.ainvoke(PROMPT)
    with pytest.raises(LiveCallForbidden):
        [c async for c in m.astream(PROMPT)]
    assert m.calls == 0


def test_forbid_live_calls_blocks_models_and_tracked_tools_then_lifts():
    m = SeededChatModel(seed=1, model_name="guarded")
    with forbid_live_calls():
        with forbid_live_calls():  # nesting keeps the outer block in force
            pass
        with pytest.raises(LiveCallForbidden, match="guarded"):
            m.invoke(PROMPT)
        with pytest.raises(LiveCallForbidden, match="lookup_order"):
            lookup_tool.invoke({"order_id": "A-1"})
    assert m.calls == 0
    m.invoke(PROMPT)
    assert lookup_tool.invoke({"order_id": "A-1"})["order_id"] == "A-1"
    assert m.calls == 1
    # Blocked attempts still count: a test can see what tried to run live.
    assert live_call_counts() == {("llm", "guarded"): 2, ("tool", "lookup_order"): 2}


def test_forbid_live_calls_is_seen_by_other_threads():
    errors = []

    def worker():
        try:
            check_live("tool", "in_thread")
        except LiveCallForbidden as exc:
            errors.append(exc)

    with forbid_live_calls():
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert len(errors) == 1 and isinstance(errors[0], AssertionError)


async def test_tracked_preserves_tool_schema_and_counts_sync_and_async():
    plain = tool(lookup_order)
    assert lookup_tool.name == plain.name
    assert lookup_tool.description == plain.description
    assert lookup_tool.args_schema.model_json_schema() == plain.args_schema.model_json_schema()

    @tool
    @tracked("tool")
    async def fetch(url: str) -> str:
        """Fetch a page."""
        return url.upper()

    assert fetch.description == "Fetch a page." and set(fetch.args) == {"url"}
    assert await fetch.ainvoke({"url": "x"}) == "X"

    @tracked
    def bare(x):
        return x + 1

    @tracked("effect")
    def charge(amount):
        return amount

    assert bare(1) == 2 and charge(3) == 3 and charge(4) == 4
    counts = live_call_counts()
    assert counts[("tool", "test_tracked_preserves_tool_schema_and_counts_sync_and_async.<locals>.fetch")] == 1
    assert counts[("tool", "test_tracked_preserves_tool_schema_and_counts_sync_and_async.<locals>.bare")] == 1
    assert counts[("effect", "test_tracked_preserves_tool_schema_and_counts_sync_and_async.<locals>.charge")] == 2
    reset_live_calls()
    assert live_call_counts() == {}


def test_live_call_counts_is_a_snapshot():
    check_live("tool", "t")
    snap = live_call_counts()
    check_live("tool", "t")
    assert snap[("tool", "t")] == 1 and live_call_counts()[("tool", "t")] == 2


def test_identifying_params_leave_out_how_the_call_is_served():
    a = SeededChatModel(seed=1, latency=0.0)
    b = SeededChatModel(seed=2, latency=0.5, forbid_live=True)
    assert a._identifying_params == {"model_name": "graphtape-fake-1", "temperature": 0.7}
    assert a._get_invocation_params() == b._get_invocation_params()
    assert a._llm_type == "graphtape-fake-chat"
    assert SeededChatModel(temperature=0.1)._identifying_params["temperature"] == 0.1


def test_calls_counter_is_thread_safe_and_shared_by_bindings():
    m = SeededChatModel()
    bound = m.bind_tools([lookup_tool])
    threads = [threading.Thread(target=lambda: [bound.invoke(PROMPT) for _ in range(10)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert m.calls == 80
    assert live_call_counts()[("llm", "graphtape-fake-1")] == 80


async def test_latency_is_spent_sync_and_async():
    m = SeededChatModel(seed=4, latency=0.02)
    start = time.perf_counter()
    m.invoke(PROMPT)
    await m.ainvoke(PROMPT)
    assert time.perf_counter() - start > 0.005


def test_default_model_uses_env_or_explains(monkeypatch):
    from graphtape.testing.models import model_from_env

    monkeypatch.delenv("GRAPHTAPE_MODEL", raising=False)
    assert model_from_env() is None
    monkeypatch.setenv("GRAPHTAPE_MODEL", "openai:gpt-4o-mini")
    try:
        import langchain.chat_models  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="GRAPHTAPE_MODEL"):
            model_from_env()


# -- the shipped examples run offline and touch only tracked code ----------


def test_refund_agent_example_runs_offline():
    from examples.refund_agent import EXAMPLE_INPUT, graph

    out = graph.invoke(EXAMPLE_INPUT)
    assert out["payment_id"].startswith("rf_") and out["attempts"] == 1
    assert isinstance(out["messages"][-1], AIMessage) and "A-1001" in out["messages"][-1].content
    counts = live_call_counts()
    assert counts[("effect", "issue_refund_payment")] == 2  # one transient failure, one retry
    assert counts[("tool", "lookup_order")] == counts[("tool", "check_policy")] == 1


async def test_research_assistant_example_interrupts_and_resumes():
    from examples.research_assistant import EXAMPLE_INPUT, EXAMPLE_RESUME, build_graph
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    g = build_graph().copy(update={"checkpointer": InMemorySaver()})
    cfg = {"configurable": {"thread_id": "t"}}
    first = await g.ainvoke(EXAMPLE_INPUT, cfg)
    assert first["__interrupt__"][0].value["question"] == "approve?"
    done = await g.ainvoke(Command(resume=EXAMPLE_RESUME), cfg)
    assert done["report"].startswith("Report:") and len(done["questions"]) == 3
    assert live_call_counts()[("tool", "web_search")] == 3


def test_doc_pipeline_example_runs_offline():
    from examples.doc_pipeline import EXAMPLE_INPUT, graph

    out = graph.invoke(EXAMPLE_INPUT)
    assert out["language"] == "en" and out["entities"] and out["translation"].startswith("[de]")
    assert out["message_id"].endswith("@mail.example.com>")
    counts = live_call_counts()
    assert counts[("effect", "now")] == counts[("effect", "send_email")] == 1
