"""The replay fast path: a served chat-model call answered at ``invoke`` writes what langchain's path writes.

``graphtape.record.llm`` answers a replayed call at ``BaseChatModel.invoke``/``ainvoke``
when no callback handler would see it (``graphtape.record.serve_fast``). These tests
replay the same recorded run both ways (the fast path switched off by making
``nobody_listens`` say no) and compare the tapes, check that handlers still see
served calls (so the fast path is not taken for them), that divergence is found and
reported the same, and that a call that goes live in flight mode is registered once.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel

from graphtape.record import llm
from tests import graphs
from tests.graphs import LIVE, RandomModel, forbid, search

PROMPT = {"system": "You are careful."}


class Answer(BaseModel):
    """A structured answer (what ``with_structured_output`` parses the tool call into)."""

    q: str


class Notes(TypedDict, total=False):
    topic: str
    notes: Annotated[list, operator.add]


def build_calls(model: Any = None):
    """Plain invoke, a tool, a bound model, structured output, with_retry and a batch."""
    m = model or RandomModel()
    bound = RandomModel(prefix="bound", tool_name="search").bind_tools([search])
    structured = RandomModel(prefix="st", tool_name="Answer").with_structured_output(Answer)

    def ask(s):
        answer = m.invoke([SystemMessage(PROMPT["system"]), HumanMessage(f"About {s['topic']}")])
        found = search.invoke({"q": str(answer.content)})
        return {"notes": [f"{answer.content} | {found}"]}

    def more(s):
        call = bound.invoke([HumanMessage("look it up")])
        retried = m.with_retry(stop_after_attempt=2).invoke([HumanMessage("again: " + s["notes"][-1])])
        batch = m.batch([[HumanMessage("one")], [HumanMessage("one")]])
        args = call.tool_calls[0]["args"] if call.tool_calls else {}
        parsed = structured.invoke([HumanMessage("answer in form")])
        # (streamed under stream_mode="messages", the fake model sends no tool call: nothing parsed)
        return {"notes": [str(args), parsed.q if parsed else "", retried.content, *(b.content for b in batch)]}

    b = StateGraph(Notes)
    b.add_node(ask)
    b.add_node(more)
    b.add_edge(START, "ask")
    b.add_edge("ask", "more")
    b.add_edge("more", END)
    return b.compile()


def build_async_calls(model: Any = None):
    m = model or RandomModel()

    async def ask(s):
        answer = await m.ainvoke([SystemMessage(PROMPT["system"]), HumanMessage(f"About {s['topic']}")])
        found = await search.ainvoke({"q": str(answer.content)})
        again = await m.ainvoke([HumanMessage("again")])
        return {"notes": [f"{answer.content} | {found}", again.content]}

    b = StateGraph(Notes)
    b.add_node(ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b.compile()


@pytest.fixture(autouse=True)
def _prompt():
    saved = dict(PROMPT)
    yield
    PROMPT.clear()
    PROMPT.update(saved)


@pytest.fixture
def fast_count(monkeypatch):
    """How many calls the fast path answered (a list holding one count)."""
    count = [0]
    served = llm._served_message

    def counting(session, call):
        count[0] += 1
        return served(session, call)

    monkeypatch.setattr(llm, "_served_message", counting)
    return count


def slow_path(monkeypatch):
    monkeypatch.setattr(llm, "nobody_listens", lambda callbacks, model: False)


def call_rows(tape, run_id):
    """What a run's call events say, without what differs on every execution (ids, times).

    Sorted: a batch's inputs run on threads of their own and reach the tape in any order.
    """
    rows = [
        (
            c.kind,
            c.node,
            c.node_path,
            c.branch,
            c.step,
            c.ordinal,
            c.fingerprint,
            c.request_ref,
            c.messages_ref,
            c.response_ref,
            c.error,
            c.tokens,
            c.cost,
            c.name,
        )
        for c in tape.calls(run_id)
    ]
    return sorted(rows, key=repr)


def event_kinds(tape, run_id):
    return sorted(e.kind for e in tape.events(run_id))


def record(tape, build, api="invoke"):
    rec = tape.record(build(), name=build.__name__)
    cfg = {"configurable": {"thread_id": f"t-{build.__name__}"}}
    run_input = {"topic": "cats", "notes": []}
    if api == "ainvoke":
        asyncio.run(rec.ainvoke(run_input, cfg))
    else:
        rec.invoke(run_input, cfg)
    return rec.last_run_id


def replay_both_ways(tape, monkeypatch, fast_count, build, run_id, **kw):
    """(fast result, langchain-path result, fast-path calls) of two replays of ``run_id``."""
    with forbid():
        fast = tape.replay(run_id, build(), **kw)
    answered = fast_count[0]
    with monkeypatch.context() as m:
        slow_path(m)
        with forbid():
            slow = tape.replay(run_id, build(), **kw)
    assert fast_count[0] == answered, "the fast path ran although it was switched off"
    return fast, slow, answered


@pytest.mark.parametrize("build,api", [(build_calls, "invoke"), (build_async_calls, "ainvoke")])
def test_fast_and_langchain_paths_write_the_same_tape(tape, monkeypatch, fast_count, build, api):
    run_id = record(tape, build, api)
    fast, slow, answered = replay_both_ways(tape, monkeypatch, fast_count, build, run_id)
    assert answered > 0
    for result in (fast, slow):
        assert result.status == "finished", result.error
        assert (result.live, result.unused, result.output_matches) == (0, 0, True)
    assert fast.output == slow.output
    assert fast.served == slow.served == len(tape.calls(run_id))
    assert call_rows(tape, fast.run_id) == call_rows(tape, slow.run_id) == call_rows(tape, run_id)
    assert event_kinds(tape, fast.run_id) == event_kinds(tape, slow.run_id)
    for attr in ("llm_calls", "tool_calls", "served_calls", "live_calls", "tokens"):
        assert getattr(tape.run(fast.run_id), attr) == getattr(tape.run(slow.run_id), attr)


class Seen(BaseCallbackHandler):
    """A user's handler: counts chat model starts and the answers it is shown."""

    def __init__(self):
        self.starts = 0
        self.answers: list[str] = []

    def on_chat_model_start(self, serialized, messages, **kw):
        self.starts += 1

    def on_llm_end(self, response, **kw):
        self.answers.append(response.generations[0][0].message.content)


def test_a_handler_on_the_model_still_sees_served_calls(tape, fast_count):
    seen = Seen()
    run_id = record(tape, lambda: build_async_calls(RandomModel(callbacks=[seen])), "ainvoke")
    recorded = [c for c in tape.calls(run_id) if c.kind == "llm"]
    seen.__init__()
    with forbid():
        result = tape.replay(run_id, build_async_calls(RandomModel(callbacks=[seen])))
    assert result.status == "finished", result.error
    assert fast_count[0] == 0
    assert seen.starts == len(recorded) == 2
    assert len(seen.answers) == 2 and all(a.startswith("rnd-") for a in seen.answers)


def test_langchain_run_collectors_and_verbose_models_see_served_calls(tape, fast_count):
    from langchain_core.tracers.context import collect_runs

    run_id = record(tape, build_calls)
    with collect_runs() as runs, forbid():
        result = tape.replay(run_id, build_calls())
    assert result.status == "finished", result.error
    assert fast_count[0] == 0
    assert sum(1 for r in runs.traced_runs if r.run_type == "llm") >= 1

    verbose = RandomModel(verbose=True)
    with forbid():
        result = tape.replay(run_id, build_calls(verbose))
    assert result.status == "finished", result.error
    # the verbose model's four calls took langchain's path; the bound and structured (quiet) models' did not
    assert fast_count[0] == 2


def test_streamed_messages_take_langchains_path(tape, fast_count):
    """``stream_mode="messages"`` listens to chat model callbacks: the replay must emit them."""
    rec = tape.record(build_calls(), name="calls")
    cfg = {"configurable": {"thread_id": "t-msgs"}}
    chunks = list(rec.stream({"topic": "cats", "notes": []}, cfg, stream_mode="messages"))
    assert chunks
    with forbid():
        result = tape.replay(rec.last_run_id, build_calls())
    assert result.status == "finished", result.error
    assert result.live == 0
    assert fast_count[0] == 0


def test_divergence_is_found_and_reported_the_same(tape, monkeypatch, fast_count):
    run_id = record(tape, build_calls)
    PROMPT["system"] = "You are reckless."
    fast, slow, answered = replay_both_ways(tape, monkeypatch, fast_count, build_calls, run_id)
    assert answered == 0  # the first call diverged
    assert fast.status == slow.status == "diverged"
    assert fast.error == slow.error
    skip = {"run_id", "call_id", "replay_run_id"}

    def report(result):
        return {k: v for k, v in (result.divergence or {}).items() if k not in skip}

    assert report(fast) == report(slow)
    assert fast.divergence and fast.divergence.get("kind", "llm") == "llm"


def test_a_changed_call_goes_live_once_in_flight_mode(tape, monkeypatch, fast_count):
    """The fast path registers the call, langchain's path runs it: asked once, recorded once."""
    run_id = record(tape, build_calls)
    recorded = call_rows(tape, run_id)
    PROMPT["system"] = "You are reckless."

    def flight():
        before = sum(LIVE.values())
        result = tape.replay(run_id, build_calls(), mode="flight")
        assert result.status == "finished", result.error
        events = [e for e in tape.events(result.run_id) if e.kind in ("llm_call", "tool_call")]
        live = [e for e in events if e.data.get("source") == "live"]
        assert len(live) == result.live == sum(LIVE.values()) - before
        assert len(events) == len(recorded)
        return result, sorted((e.kind, e.data.get("node_path"), e.data.get("source")) for e in events)

    fast, fast_events = flight()
    assert fast_count[0] > 0  # the unchanged calls were answered at invoke
    assert fast.live >= 2  # the changed request and the tool call that depends on its answer
    slow_path(monkeypatch)
    slow, slow_events = flight()
    assert fast_events == slow_events
    assert (fast.live, fast.served) == (slow.live, slow.served)


@pytest.mark.parametrize("build,api", [(graphs.build_linear, "invoke"), (graphs.build_async, "ainvoke")])
def test_served_streams_take_the_fast_path_too(tape, monkeypatch, fast_count, build, api):
    """tests/graphs.py's linear and async graphs: invoke, a tool, an effect and an explicit (a)stream."""
    rec = tape.record(build(), name=build.__name__)
    cfg = {"configurable": {"thread_id": f"t-{api}"}}
    if api == "ainvoke":
        asyncio.run(rec.ainvoke({"topic": ""}, cfg))
    else:
        rec.invoke({"topic": ""}, cfg)
    run_id = rec.last_run_id
    fast, slow, answered = replay_both_ways(tape, monkeypatch, fast_count, build, run_id)
    for result in (fast, slow):
        assert result.status == "finished", result.error
        assert (result.live, result.output_matches) == (0, True)
    assert answered == 2  # the (a)invoke and the (a)stream
    assert fast.output == slow.output
    assert call_rows(tape, fast.run_id) == call_rows(tape, slow.run_id) == call_rows(tape, run_id)
    assert event_kinds(tape, fast.run_id) == event_kinds(tape, slow.run_id)


def test_a_handler_sees_a_served_stream(tape, fast_count):
    seen = Seen()
    rec = tape.record(graphs.build_linear(RandomModel(callbacks=[seen])), name="linear")
    rec.invoke({"topic": ""}, {"configurable": {"thread_id": "t-seen"}})
    seen.__init__()
    with forbid():
        result = tape.replay(rec.last_run_id, graphs.build_linear(RandomModel(callbacks=[seen])))
    assert result.status == "finished", result.error
    assert fast_count[0] == 0
    assert seen.starts == 2  # the invoke and the stream (served through langchain's invoke)


def test_a_served_call_reads_no_message_from_the_store(tape, monkeypatch):
    """The messages a recorded response refers to are read with the tape's index, not one query per call."""
    run_id = record(tape, build_calls)
    store = tape.store
    asked: list[str] = []
    original = type(store).get_json

    def counting(self, h):
        asked.append(h)
        return original(self, h)

    monkeypatch.setattr(type(store), "get_json", counting)
    with forbid():
        result = tape.replay(run_id, build_calls(), mode="strict")
    assert result.status == "finished" and result.live == 0 and result.served > 0
    llm_responses = [c.response_ref for c in tape.calls(run_id) if c.kind == "llm"]
    assert llm_responses
    served_messages = set()
    for ref in llm_responses:
        env = store.get_json(ref) if ref else None
        served_messages |= {v["h"] for v in (env or {}).get("v", []) if isinstance(v, dict) and v.get("t") == "msg"}
    assert served_messages, "the recorded responses should refer to stored messages"
    assert not served_messages & set(asked)
