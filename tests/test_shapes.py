"""Real-world agent shapes of issue 8, recorded and replayed strictly.

Each shape is built the way LangGraph users build agents today (``create_agent``
with middleware, ``ToolNode``, ``RetryPolicy``, structured output, ``batch``,
async-only models, streaming) with the real ``ChatOpenAI``/``ChatAnthropic``
classes talking to the fake provider server of ``tests/providers.py``. Every
answer is random, so a replay that reproduces the recorded state with zero
requests to the server (and ``forbid()`` for the fake models) proves the
answers came from the tape. A replay of unchanged code must be exact:
``finished``, no divergence, the same state at every checkpoint (message ids
aside), nothing live.
"""

from __future__ import annotations

import asyncio
import json
import operator
import random
import time
from datetime import UTC, datetime
from typing import Annotated, Any, TypedDict

import anthropic
import openai
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, ToolErrorMiddleware
from langchain_anthropic import ChatAnthropic
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, RetryPolicy
from pydantic import BaseModel

import graphtape
from graphtape.replay.engine import strip_ids
from graphtape.serde import to_jsonable
from tests.graphs import RandomModel, forbid, live, usage
from tests.providers import fake_from_schema

_rng = random.Random()


# -- helpers ------------------------------------------------------------------------------------


@pytest.fixture
def sqlite_tape(tmp_path):
    """A SQLite tape for the heavier provider shapes (store-independent behaviour)."""
    t = graphtape.connect(f"sqlite:///{tmp_path}/shapes.db")
    yield t
    t.close()


def openai_model(server, **kw) -> ChatOpenAI:
    return ChatOpenAI(base_url=server.openai_base_url, api_key="sk-test", model="gpt-4o-mini", max_retries=0, **kw)


def anthropic_model(server, **kw) -> ChatAnthropic:
    return ChatAnthropic(
        base_url=server.anthropic_base_url, api_key="sk-ant-test", model="claude-sonnet-4-5", max_retries=0, **kw
    )


MODELS = {"openai": openai_model, "anthropic": anthropic_model}


def plain(value: Any) -> Any:
    """A comparable view of a state: JSON-able, message and tool-call ids removed."""
    return strip_ids(to_jsonable(value))


def history(recorded, thread_id: str) -> list:
    """The state and next nodes at every checkpoint of a thread, oldest first, ids removed."""
    snaps = list(recorded.get_state_history({"configurable": {"thread_id": thread_id}}))
    snaps.reverse()
    return [(plain(s.values), tuple(s.next)) for s in snaps]


def assert_exact(result, server, sent_before: int, out: Any = None) -> None:
    """The replay finished, served everything, sent nothing and reproduced the recorded output."""
    assert len(server.requests) == sent_before, f"the replay sent {len(server.requests) - sent_before} live request(s)"
    assert result.status == "finished", (result.status, result.error, result.divergence)
    assert result.divergence is None
    assert result.live == 0
    assert result.output_matches is True
    if out is not None:
        assert plain(result.output) == plain(out)


def replay_strict(tape, run_id: str, graph, server, **kw):
    sent = len(server.requests)
    with forbid():
        result = tape.replay(run_id, graph, mode="strict", **kw)
    return result, sent


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


class QuotaExceeded(Exception):
    """A user error whose constructor takes two arguments: ``cls(message)`` cannot rebuild it."""

    def __init__(self, service: str, retry_after: int):
        super().__init__(f"{service} quota exceeded, retry after {retry_after}s")
        self.service = service
        self.retry_after = retry_after


class Transient(Exception):
    """A plain one-argument user error."""


@tool
def quota_lookup(q: str) -> str:
    """Look something up in a quota-limited service."""
    live("tool", "quota_lookup")
    raise QuotaExceeded("search-api", _rng.randint(1, 10**6))


@tool
def search_web(q: str) -> str:
    """Search the (fake) web."""
    live("tool", "search_web")
    return f"result for {q}: {_rng.random():.6f}"


def describe_error(exc: Exception, request) -> str:
    """What a ToolErrorMiddleware handler typically shows the model: class and attributes."""
    service, retry_after = getattr(exc, "service", None), getattr(exc, "retry_after", None)
    return f"{type(exc).__name__}(service={service}, retry_after={retry_after}): {exc}"


# -- 1. create_agent: recovery from a tool error and from invalid tool arguments ----------------------


def build_recovering_agent(server):
    return create_agent(
        openai_model(server),
        tools=[quota_lookup, search_web],
        middleware=[ToolErrorMiddleware(on_error=describe_error, tools=["quota_lookup"])],
        system_prompt="You are a careful researcher.",
    )


def test_create_agent_recovers_from_a_tool_error_and_replays_exactly(sqlite_tape, provider_server):
    tape, server = sqlite_tape, provider_server
    server.script(
        {"tool_calls": [{"name": "quota_lookup", "args": {"q": "cats"}}, {"name": "search_web", "args": {"q": "cats"}}]}
    )
    rec = tape.record(build_recovering_agent(server), name="agent", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "agent-err"}}
    out = rec.invoke({"messages": [HumanMessage("find cats")]}, cfg)
    errors = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(errors) == 1 and errors[0].content.startswith("QuotaExceeded(service=search-api, retry_after=")
    assert out["messages"][-1].content.startswith("srv-")

    result, sent = replay_strict(tape, rec.last_run_id, build_recovering_agent(server), server)
    assert_exact(result, server, sent, out)
    assert history(rec, "agent-err") == history(rec, result.thread_id)


def test_create_agent_recovers_from_invalid_tool_arguments_and_replays_exactly(sqlite_tape, provider_server):
    """The model sends arguments the tool's schema rejects (a pydantic ValidationError), then good ones."""
    tape, server = sqlite_tape, provider_server
    server.script(
        {"tool_calls": [{"name": "search_web", "args": {"query": "cats", "limit": "ten"}}]},
        {"tool_calls": [{"name": "search_web", "args": {"q": "cats"}}]},
    )
    build = lambda: create_agent(openai_model(server), tools=[search_web])  # noqa: E731
    rec = tape.record(build(), name="agent", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "agent-args"}}
    out = rec.invoke({"messages": [HumanMessage("find cats")]}, cfg)
    tool_msgs = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in tool_msgs] == ["error", "success"]
    assert "q" in tool_msgs[0].content and "Field required" in tool_msgs[0].content

    result, sent = replay_strict(tape, rec.last_run_id, build(), server)
    assert_exact(result, server, sent, out)
    assert history(rec, "agent-args") == history(rec, result.thread_id)


# -- 2. create_agent with HumanInTheLoopMiddleware: an "edit" decision with unsorted keys -----------------


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an e-mail."""
    live("tool", "send_email")
    return f"sent {json.dumps({'to': to, 'subject': subject, 'body': body})} as msg-{_rng.randint(0, 10**6)}"


@pytest.mark.parametrize("interrupt_mode", ["batched", "per_call"])
def test_human_edit_with_unsorted_keys_replays_exactly(tape, provider_server, interrupt_mode):
    server = provider_server

    def build():
        return create_agent(
            openai_model(server),
            tools=[send_email],
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"send_email": True}, interrupt_mode=interrupt_mode)],
        )

    rec = tape.record(build(), name="mailer", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": f"hitl-{interrupt_mode}"}}
    rec.invoke({"messages": [HumanMessage("mail bob")]}, cfg)
    assert tape.run(rec.last_run_id).status == "interrupted"
    [pending] = rec.get_state(cfg).interrupts
    # keys deliberately not in sorted order (sorted would be body, subject, to)
    edited = {"to": "bob@example.com", "subject": f"re {_rng.randint(0, 10**6)}", "body": "see you at 5"}
    decision = {"type": "edit", "edited_action": {"name": "send_email", "args": edited}}
    answer = {"decisions": [decision]} if interrupt_mode == "batched" else {pending.id: decision}
    out = rec.invoke(Command(resume=answer), cfg)
    last = rec.last_run_id
    assert tape.run(last).status == "finished"
    sent_msg = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert f"sent {json.dumps(edited)}" in sent_msg.content

    result, sent = replay_strict(tape, last, build(), server)
    assert_exact(result, server, sent, out)
    assert len(result.run_ids) == 2
    calls = [m for m in result.output["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    if interrupt_mode == "batched":  # the middleware rewrote the model's call with the edited args
        assert list(calls[-1].tool_calls[0]["args"]) == ["to", "subject", "body"]
    assert history(rec, cfg["configurable"]["thread_id"]) == history(rec, result.thread_id)


# -- 3. ToolNode(handle_tool_errors=True): a multi-argument user error and a ValidationError ------------------


def build_toolnode_agent(server):
    tools = [quota_lookup, search_web]
    model = openai_model(server).bind_tools(tools)

    def agent(s: Chat):
        return {"messages": [model.invoke(s["messages"])]}

    b = StateGraph(Chat)
    b.add_node(agent)
    b.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", tools_condition)
    b.add_edge("tools", "agent")
    return b.compile()


def test_toolnode_handled_errors_replay_exactly(sqlite_tape, provider_server):
    tape, server = sqlite_tape, provider_server
    server.script(
        {"tool_calls": [{"name": "quota_lookup", "args": {"q": "cats"}}, {"name": "search_web", "args": {"q": 42}}]}
    )
    rec = tape.record(build_toolnode_agent(server), name="toolnode", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "tn"}}
    out = rec.invoke({"messages": [HumanMessage("find cats")]}, cfg)
    quota, bad_args = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert quota.status == bad_args.status == "error"
    assert "QuotaExceeded('search-api quota exceeded, retry after" in quota.content
    assert "valid string" in bad_args.content

    result, sent = replay_strict(tape, rec.last_run_id, build_toolnode_agent(server), server)
    assert_exact(result, server, sent, out)
    assert history(rec, "tn") == history(rec, result.thread_id)


# -- 4. RetryPolicy: a user error from an effect, a provider error from the model ----------------------------


class Slot(TypedDict, total=False):
    slot: str
    answer: str


def build_retrying_effect(error: type[Exception]):
    attempts = {"n": 0}

    @graphtape.effect(name="reserve_slot")
    def reserve_slot() -> str:
        live("effect", "reserve_slot")
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise QuotaExceeded("slots", _rng.randint(1, 10**6)) if error is QuotaExceeded else Transient("busy")
        return f"slot-{_rng.randint(0, 10**6)}"

    def reserve(s: Slot):
        return {"slot": reserve_slot()}

    b = StateGraph(Slot)
    b.add_node("reserve", reserve, retry_policy=RetryPolicy(retry_on=error, initial_interval=0.001, jitter=False))
    b.add_edge(START, "reserve")
    b.add_edge("reserve", END)
    return b.compile()


@pytest.mark.parametrize("error", [Transient, QuotaExceeded])
def test_retry_policy_on_a_user_error_replays_exactly(tape, error):
    rec = tape.record(build_retrying_effect(error), name="retry", checkpointer=tape.saver)
    out = rec.invoke({}, {"configurable": {"thread_id": "retry"}})
    assert out["slot"].startswith("slot-")
    assert [c.kind for c in tape.calls(rec.last_run_id)] == ["effect", "effect"]
    with forbid():
        result = tape.replay(rec.last_run_id, build_retrying_effect(error), mode="strict")
    assert result.status == "finished", (result.status, result.error, result.divergence)
    assert result.divergence is None and result.live == 0 and result.output_matches is True
    assert result.output == out


def build_retrying_model(server, provider: str):
    model = MODELS[provider](server)
    error = openai.InternalServerError if provider == "openai" else anthropic.InternalServerError

    def ask(s: Slot):
        return {"answer": model.invoke([HumanMessage("hello")]).content}

    b = StateGraph(Slot)
    b.add_node("ask", ask, retry_policy=RetryPolicy(retry_on=error, initial_interval=0.001, jitter=False))
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b.compile()


@pytest.mark.parametrize("provider", MODELS)
def test_retry_policy_on_a_provider_error_replays_exactly(sqlite_tape, provider_server, provider):
    tape, server = sqlite_tape, provider_server
    server.fail_next(500)
    rec = tape.record(build_retrying_model(server, provider), name="retry-model", checkpointer=tape.saver)
    out = rec.invoke({}, {"configurable": {"thread_id": "retry-model"}})
    assert out["answer"].startswith("srv-") and len(server.requests) == 2

    result, sent = replay_strict(tape, rec.last_run_id, build_retrying_model(server, provider), server)
    assert_exact(result, server, sent, out)


# -- 5. structured output, every method; a schema edit is a changed request -------------------------------


class Weather(BaseModel):
    city: str
    degrees: int
    sunny: bool
    tags: list[str]


def edited_weather() -> type[BaseModel]:
    """The same class edited: same name, qualname and module, one more field."""

    class Weather(BaseModel):
        city: str
        degrees: int
        sunny: bool
        tags: list[str]
        humidity: float

    Weather.__qualname__ = "Weather"
    return Weather


class Report(TypedDict, total=False):
    report: dict


def build_forecast(server, provider: str, method: str, schema: type[BaseModel] = Weather):
    model = MODELS[provider](server).with_structured_output(schema, method=method)

    def forecast(s: Report):
        answer = model.invoke([HumanMessage("What is the weather in Oslo? Answer in JSON.")])
        return {"report": answer.model_dump()}

    b = StateGraph(Report)
    b.add_node(forecast)
    b.add_edge(START, "forecast")
    b.add_edge("forecast", END)
    return b.compile()


STRUCTURED = [
    ("openai", "json_schema"),
    ("openai", "function_calling"),
    ("openai", "json_mode"),
    ("anthropic", "function_calling"),
    ("anthropic", "json_schema"),
]


def script_json_mode(server, method: str, schema: type[BaseModel]) -> None:
    """json_mode sends no schema: the fake model answers random JSON for the schema the test knows."""
    if method == "json_mode":
        server.script(lambda call: {"json": fake_from_schema(schema.model_json_schema())})


@pytest.mark.parametrize("provider,method", STRUCTURED)
def test_structured_output_replays_exactly(sqlite_tape, provider_server, provider, method):
    tape, server = sqlite_tape, provider_server
    script_json_mode(server, method, Weather)
    rec = tape.record(build_forecast(server, provider, method), name="forecast", checkpointer=tape.saver)
    out = rec.invoke({}, {"configurable": {"thread_id": "so"}})
    assert set(out["report"]) == {"city", "degrees", "sunny", "tags"}

    result, sent = replay_strict(tape, rec.last_run_id, build_forecast(server, provider, method), server)
    assert_exact(result, server, sent, out)


@pytest.mark.parametrize("provider,method", [c for c in STRUCTURED if c[1] != "json_mode"])
def test_structured_output_schema_edit_is_a_changed_request(sqlite_tape, provider_server, provider, method):
    """json_mode is left out: it sends no schema, so editing the class changes no request."""
    tape, server = sqlite_tape, provider_server
    rec = tape.record(build_forecast(server, provider, method), name="forecast", checkpointer=tape.saver)
    rec.invoke({}, {"configurable": {"thread_id": "so-edit"}})
    run_id = rec.last_run_id
    edited = edited_weather()
    assert edited.__qualname__ == Weather.__qualname__ and edited.__module__ == Weather.__module__

    result, sent = replay_strict(tape, run_id, build_forecast(server, provider, method, edited), server)
    assert len(server.requests) == sent
    assert result.status == "diverged", (result.status, result.error)
    assert result.divergence["kind"] == "llm" and result.divergence["node"] == "forecast"

    result = tape.replay(run_id, build_forecast(server, provider, method, edited), mode="flight")
    assert result.status == "finished", (result.status, result.error, result.divergence)
    assert result.live == 1 and len(server.requests) == sent + 1
    assert "humidity" in result.output["report"]


# -- 6. batch with identical inputs ------------------------------------------------------------------


class Jitter(BaseCallbackHandler):
    """Starts each call of a batch after a random pause, so threads reach the model in another order."""

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(_rng.random() * 0.03)


class Answers(TypedDict, total=False):
    answers: list[str]


def build_batch(server):
    model = openai_model(server, callbacks=[Jitter()])

    def fan(s: Answers):
        same = [HumanMessage("the same question")]
        return {"answers": [m.content for m in model.batch([same] * 5)]}

    b = StateGraph(Answers)
    b.add_node(fan)
    b.add_edge(START, "fan")
    b.add_edge("fan", END)
    return b.compile()


def test_batch_with_identical_inputs_is_served_in_recorded_slot_order(tape, provider_server):
    rec = tape.record(build_batch(provider_server), name="batch", checkpointer=tape.saver)
    out = rec.invoke({}, {"configurable": {"thread_id": "batch"}})
    assert len(set(out["answers"])) == 5
    for _ in range(3):
        result, sent = replay_strict(tape, rec.last_run_id, build_batch(provider_server), provider_server)
        assert result.output["answers"] == out["answers"]
        assert_exact(result, provider_server, sent, out)


# -- 7. async-only models -----------------------------------------------------------------------------


class AsyncOnlyModel(BaseChatModel):
    """Implements only ``_agenerate`` (``_generate`` is required by the base class: it refuses)."""

    @property
    def _llm_type(self) -> str:
        return "test-async-only"

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        raise NotImplementedError("this model is async only")

    async def _agenerate(self, messages, stop=None, run_manager=None, **kw):
        live("llm", "async-only")
        await asyncio.sleep(0)
        text = f"agen-{_rng.randint(0, 10**9)}"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text, usage_metadata=usage(text)))])


class AsyncStreamOnlyModel(BaseChatModel):
    """Implements only ``_astream``; built with ``streaming=True`` so that ``ainvoke`` streams too."""

    streaming: bool = False

    @property
    def _llm_type(self) -> str:
        return "test-astream-only"

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        raise NotImplementedError("this model only streams, asynchronously")

    async def _astream(self, messages, stop=None, run_manager=None, **kw):
        live("llm", "astream-only")
        text = f"astr-{_rng.randint(0, 10**9)}"
        for i, piece in enumerate([text[:5], text[5:]]):
            await asyncio.sleep(0)
            last = i == 1
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content=piece, usage_metadata=usage(text) if last else None, chunk_position="last" if last else None
                )
            )


class Texts(TypedDict, total=False):
    texts: Annotated[list, operator.add]


def build_async_only():
    agen, astr = AsyncOnlyModel(), AsyncStreamOnlyModel(streaming=True)

    async def gen(s: Texts):
        first = (await agen.ainvoke([HumanMessage("one")])).content
        second = "".join([c.content async for c in agen.astream([HumanMessage("two")])])
        return {"texts": [first, second]}

    async def stream(s: Texts):
        third = "".join([c.content async for c in astr.astream([HumanMessage("three")])])
        fourth = (await astr.ainvoke([HumanMessage("four")])).content
        return {"texts": [third, fourth]}

    b = StateGraph(Texts)
    b.add_node(gen)
    b.add_node(stream)
    b.add_edge(START, "gen")
    b.add_edge("gen", "stream")
    b.add_edge("stream", END)
    return b.compile()


def test_async_only_models_are_recorded_and_served(sqlite_tape):
    tape = sqlite_tape
    rec = tape.record(build_async_only(), name="async-only", checkpointer=tape.saver)
    out = asyncio.run(rec.ainvoke({}, {"configurable": {"thread_id": "ao"}}))
    assert [t[:5] for t in out["texts"]] == ["agen-", "agen-", "astr-", "astr-"]
    calls = tape.calls(rec.last_run_id)
    assert [c.kind for c in calls] == ["llm"] * 4, [(c.kind, c.name) for c in calls]
    with forbid():
        result = tape.replay(rec.last_run_id, build_async_only(), mode="strict")
    assert result.status == "finished", (result.status, result.error, result.divergence)
    assert result.divergence is None and result.live == 0 and result.served == 4
    assert result.output == out


# -- 8. ainvoke and astream_events replayed with await tape.areplay inside a running loop --------------------


def build_async_provider(server):
    model = openai_model(server, stream_usage=True)

    async def draft(s: Report):
        msg = await model.ainvoke([HumanMessage("draft")])
        return {"report": {"draft": msg.content}}

    async def polish(s: Report):
        parts = [c.text async for c in model.astream([HumanMessage("polish " + s["report"]["draft"])])]
        return {"report": {**s["report"], "final": "".join(parts)}}

    b = StateGraph(Report)
    b.add_node(draft)
    b.add_node(polish)
    b.add_edge(START, "draft")
    b.add_edge("draft", "polish")
    b.add_edge("polish", END)
    return b.compile()


async def test_ainvoke_and_astream_events_replay_with_areplay(sqlite_tape, provider_server):
    tape, server = sqlite_tape, provider_server
    rec = tape.record(build_async_provider(server), name="async-provider", checkpointer=tape.saver)
    out = await rec.ainvoke({}, {"configurable": {"thread_id": "ai"}})
    invoked = rec.last_run_id
    events = [e async for e in rec.astream_events({}, {"configurable": {"thread_id": "ae"}}, version="v2")]
    streamed = rec.last_run_id
    assert any(e["event"] == "on_chat_model_stream" for e in events)
    final = next(e for e in reversed(events) if e["event"] == "on_chain_end" and e.get("parent_ids") == [])
    for run_id, expected in [(invoked, out), (streamed, final["data"]["output"])]:
        sent = len(server.requests)
        with forbid():
            result = await tape.areplay(run_id, build_async_provider(server), mode="strict")
        assert_exact(result, server, sent, expected)


# -- 9. unwrapped nondeterminism written into state -----------------------------------------------------------


class Stamped(TypedDict, total=False):
    at: Any
    note: str


def build_stamped(source: str):
    model = RandomModel(prefix="note")

    def stamp(s: Stamped):
        return {"at": datetime.now(UTC) if source == "datetime" else random.random()}

    def write(s: Stamped):
        return {"note": model.invoke([HumanMessage("note")]).content}

    b = StateGraph(Stamped)
    b.add_node(stamp)
    b.add_node(write)
    b.add_edge(START, "stamp")
    b.add_edge("stamp", "write")
    b.add_edge("write", END)
    return b.compile()


@pytest.mark.parametrize("source", ["datetime", "random"])
def test_unwrapped_nondeterminism_in_state_fails_strict_replay(tape, source):
    rec = tape.record(build_stamped(source), name="stamped", checkpointer=tape.saver)
    rec.invoke({}, {"configurable": {"thread_id": "stamp"}})
    time.sleep(0.001)
    with forbid():
        result = tape.replay(rec.last_run_id, build_stamped(source), mode="strict")
    assert result.status == "diverged", (result.status, result.error, result.output_matches)
    div = result.divergence
    assert div["node"] == "stamp" and isinstance(div["step"], int)
    assert "at" in (div.get("diff") or "")  # the channel and its value diff
    assert "@graphtape.effect" in json.dumps(div)  # the hint says how to fix it
    with forbid(), pytest.raises(graphtape.Divergence):
        tape.replay(rec.last_run_id, build_stamped(source), mode="strict", raise_on_divergence=True)


STAMPED_FILE = """
from datetime import datetime, timezone
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph


class Stamped(TypedDict, total=False):
    at: Any


def stamp(s):
    return {"at": datetime.now(timezone.utc).isoformat()}


b = StateGraph(Stamped)
b.add_node(stamp)
b.add_edge(START, "stamp")
b.add_edge("stamp", END)
graph = b.compile()
"""


def test_unwrapped_nondeterminism_fails_the_cli_and_the_pytest_fixture(tmp_path, graphtape_replay):
    from typer.testing import CliRunner

    from graphtape.cli import app

    app_file = tmp_path / "stamped_app.py"
    app_file.write_text(STAMPED_FILE, encoding="utf-8")
    url = f"sqlite:///{tmp_path}/cli.db"
    env = {"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb", "GRAPHTAPE_URL": None}
    runner = CliRunner()
    recorded = runner.invoke(app, ["--url", url, "run", f"{app_file}:graph", "--input", "{}", "--json"], env=env)
    assert recorded.exit_code == 0, (recorded.stdout, recorded.stderr)
    run_id = json.loads(recorded.stdout)["run_id"]
    replayed = runner.invoke(app, ["--url", url, "replay", run_id, "--graph", f"{app_file}:graph"], env=env)
    assert replayed.exit_code != 0, replayed.stdout
    assert "stamp" in replayed.stdout + replayed.stderr

    exported = tmp_path / "stamped.jsonl"
    assert runner.invoke(app, ["--url", url, "export", run_id, "-o", str(exported)], env=env).exit_code == 0
    from graphtape.loading import load_graph

    with pytest.raises(pytest.fail.Exception, match="stamp"):
        graphtape_replay(exported, load_graph(f"{app_file}:graph"))


# -- 8b. invoke(..., version="v2") is replayed as recorded -------------------------------------------------


def test_invoke_version_v2_replays_as_recorded(sqlite_tape, provider_server):
    from langgraph.types import GraphOutput

    tape, server = sqlite_tape, provider_server

    def build():
        return create_agent(
            openai_model(server),
            tools=[send_email],
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"send_email": True})],
        )

    rec = tape.record(build(), name="mailer-v2", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "v2"}}
    first = rec.invoke({"messages": [HumanMessage("mail bob")]}, cfg, version="v2")
    assert isinstance(first, GraphOutput) and len(first.interrupts) == 1
    out = rec.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg, version="v2")
    assert isinstance(out, GraphOutput) and not out.interrupts

    result, sent = replay_strict(tape, rec.last_run_id, build(), server)
    assert len(server.requests) == sent
    assert result.status == "finished", (result.status, result.error, result.divergence)
    assert result.divergence is None and result.live == 0 and result.output_matches is True
    assert isinstance(result.output, GraphOutput)
    assert plain(result.output.value) == plain(out.value)


# -- 10. streaming with the real provider classes ---------------------------------------------------------------


def build_streaming(server, provider: str):
    model = MODELS[provider](server, **({"stream_usage": True} if provider == "openai" else {}))

    def write(s: Chat):
        text = "".join(c.text for c in model.stream(s["messages"]))
        return {"messages": [AIMessage(text)]}

    def answer(s: Chat):  # streamed by the graph (stream_mode="messages") through callbacks
        return {"messages": [model.invoke(s["messages"])]}

    b = StateGraph(Chat)
    b.add_node(write)
    b.add_node(answer)
    b.add_edge(START, "write")
    b.add_edge("write", "answer")
    b.add_edge("answer", END)
    return b.compile()


@pytest.mark.parametrize("provider", MODELS)
@pytest.mark.parametrize("api", ["invoke", "stream_messages"])
def test_provider_streaming_replays_exactly(sqlite_tape, provider_server, provider, api):
    tape, server = sqlite_tape, provider_server
    rec = tape.record(build_streaming(server, provider), name="streaming", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "st"}}
    if api == "invoke":
        out = rec.invoke({"messages": [HumanMessage("hi")]}, cfg)
    else:
        chunks = list(rec.stream({"messages": [HumanMessage("hi")]}, cfg, stream_mode="messages"))
        assert sum(1 for msg, meta in chunks if meta["langgraph_node"] == "answer" and msg.content) >= 2
        out = rec.get_state(cfg).values
    assert [m.content[:4] for m in out["messages"][1:]] == ["srv-", "srv-"]
    assert server.requests[0][1]["stream"] is True  # write's .stream()
    assert server.requests[1][1].get("stream", False) is (api == "stream_messages")
    assert tape.run(rec.last_run_id).llm_calls == 2

    result, sent = replay_strict(tape, rec.last_run_id, build_streaming(server, provider), server)
    assert_exact(result, server, sent, out)
    assert history(rec, "st") == history(rec, result.thread_id)
