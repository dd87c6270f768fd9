"""Async replay: ``await tape.areplay(...)`` in the caller's loop, and one event loop per sync replay."""

from __future__ import annotations

import asyncio
import random
from typing import Any, TypedDict

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from pydantic import PrivateAttr

import graphtape
from tests import graphs
from tests.graphs import LIVE, forbid


def assert_exact(result) -> None:
    assert result.status == "finished", result.error
    assert result.divergence is None and result.live == 0 and result.unused == 0
    assert result.output_matches is True


async def test_areplay_of_an_ainvoke_run_in_the_running_loop(tape):
    rec = tape.record(graphs.build_async(), name="async", checkpointer=tape.saver)
    out = await rec.ainvoke({"topic": "x"})
    with forbid():
        result = await tape.areplay(rec.last_run_id, graphs.build_async())
    assert_exact(result)
    assert result.served == tape.run(rec.last_run_id).llm_calls + 2  # two llm, one tool, one effect
    assert result.output == out
    assert tape.run(result.run_id).meta["api"] == "ainvoke"


async def test_areplay_of_an_astream_events_run(tape):
    rec = tape.record(graphs.build_async(), name="async", checkpointer=tape.saver)
    events = [e async for e in rec.astream_events({"topic": "x"}, version="v2")]
    assert any(e["event"] == "on_chat_model_stream" for e in events)
    with forbid():
        result = await tape.areplay(rec.last_run_id, graphs.build_async())
    assert_exact(result)
    replayed = tape.run(result.run_id)
    assert replayed.meta["api"] == "astream_events"
    assert tape.events(result.run_id, ["run_started"])[0].data["kwargs"] == {"version": "v2"}


async def test_areplay_of_a_sync_recorded_thread_with_interrupts(tape):
    rec = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "a-hitl"}}
    rec.invoke({}, cfg)
    rec.invoke(Command(resume={i.id: "ok" for i in rec.get_state(cfg).interrupts}), cfg)
    rec.invoke(Command(resume="yes"), cfg)
    with forbid():
        result = await tape.areplay(rec.last_run_id, graphs.build_review())
    assert_exact(result)
    assert len(result.run_ids) == 3


async def test_afork_aoverride_and_ainvalidate_from(tape):
    rec = tape.record(graphs.build_async(), name="async", checkpointer=tape.saver)
    await rec.ainvoke({"topic": "x"})
    run_id = rec.last_run_id
    before_second = next(e.data["checkpoint_id"] for e in tape.events(run_id, ["checkpoint"]) if e.data["step"] == 1)
    with forbid():
        forked = await tape.afork(
            before_second, graphs.build_async(), values={"draft": "edited"}, mode="strict", run_id=run_id
        )
    # the edited draft changes second's request: strict says so
    assert forked.status == "diverged" and forked.divergence["node"] == "second"
    first_llm = next(c for c in tape.calls(run_id) if c.kind == "llm")
    with forbid():
        overridden = await tape.aoverride(run_id, first_llm.call_id, "injected", graphs.build_async(), mode="strict")
    assert overridden.status == "diverged"  # second's request now carries "injected"
    assert tape.run(overridden.run_id).meta["override_of"] == first_llm.call_id
    before = sum(LIVE.values())
    invalidated = await tape.ainvalidate_from(run_id, "second", graphs.build_async())
    assert invalidated.status == "finished" and invalidated.live == 1
    assert sum(LIVE.values()) == before + 1


async def test_aresume_answers_in_the_running_loop(tape):
    rec = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "a-resume"}}
    await rec.ainvoke({}, cfg)
    pending = (await rec.aget_state(cfg)).interrupts
    again = await tape.aresume("a-resume", graphs.build_review(), by_id={i.id: "ok" for i in pending})
    assert tape.run(again.last_run_id).meta["api"] == "ainvoke"
    assert tape.run(again.last_run_id).status == "interrupted"


async def test_sync_replay_inside_a_running_loop_points_to_areplay_and_writes_nothing(tape):
    rec = tape.record(graphs.build_async(), name="async", checkpointer=tape.saver)
    await rec.ainvoke({"topic": "x"})
    runs = len(tape.runs())
    with pytest.raises(graphtape.ReplayError, match=r"await tape\.areplay"):
        tape.replay(rec.last_run_id, graphs.build_async())
    assert len(tape.runs()) == runs


# -- one event loop per sync replay ------------------------------------------------------------------


class LoopBoundModel(BaseChatModel):
    """Like a provider client's HTTP pool: bound to the event loop of its first call, unusable in another."""

    _loop: Any = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "test-loop-bound"

    def _generate(self, messages, stop=None, run_manager=None, **kw):  # pragma: no cover - async only
        raise NotImplementedError("async only")

    async def _agenerate(self, messages, stop=None, run_manager=None, **kw):
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        graphs.live("llm", "loop-bound")
        answer = self._loop.create_future()
        # a closed loop raises "Event loop is closed"; another loop's future cannot be awaited here
        self._loop.call_soon(answer.set_result, f"lb-{random.randint(0, 10**9)}")
        text = await answer
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


class Review(TypedDict, total=False):
    draft: str
    answer: str
    final: str


def build_two_turns(model: BaseChatModel, prompt: str):
    async def draft(s):
        return {"draft": (await model.ainvoke([HumanMessage(f"{prompt}: draft")])).content}

    async def review(s):
        return {"answer": interrupt({"draft": s["draft"]})}

    async def final(s):
        msg = await model.ainvoke([HumanMessage(f"{prompt}: final {s['draft']} {s['answer']}")])
        return {"final": msg.content}

    b = StateGraph(Review)
    b.add_node(draft)
    b.add_node(review)
    b.add_node(final)
    b.add_edge(START, "draft")
    b.add_edge("draft", "review")
    b.add_edge("review", "final")
    b.add_edge("final", END)
    return b.compile()


def record_two_turns(tape, model: BaseChatModel, thread_id: str) -> str:
    async def both() -> str:
        rec = tape.record(build_two_turns(model, "Write"), name="two_turns", checkpointer=tape.saver)
        cfg = {"configurable": {"thread_id": thread_id}}
        await rec.ainvoke({}, cfg)
        await rec.ainvoke(Command(resume="approved"), cfg)
        return rec.last_run_id

    return asyncio.run(both())


def test_sync_flight_replay_of_an_async_thread_uses_one_loop(tape):
    run_id = record_two_turns(tape, LoopBoundModel(), "lb")
    # a changed prompt: both runs' model calls go live, through one client bound to one loop
    result = tape.replay(run_id, build_two_turns(LoopBoundModel(), "Rewrite"), mode="flight")
    assert result.status == "finished", result.error
    assert len(result.run_ids) == 2 and result.live == 2
    assert result.output["final"].startswith("lb-")


# -- a run is replayed the way it was called --------------------------------------------------------


def test_invoke_version_v2_replays_with_the_same_output_type(tape):
    rec = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
    out = rec.invoke({"topic": ""}, version="v2")
    assert type(out).__name__ == "GraphOutput"
    with forbid():
        result = tape.replay(rec.last_run_id, graphs.build_linear())
    assert_exact(result)
    assert type(result.output) is type(out) and result.output.value == out.value
    assert tape.events(result.run_id, ["run_started"])[0].data["kwargs"] == {"version": "v2"}


def test_interrupt_before_and_output_keys_are_replayed(tape):
    rec = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
    out = rec.invoke({"topic": ""}, interrupt_before=("rate",), output_keys=["draft"])
    assert set(out) == {"draft"} and tape.run(rec.last_run_id).status == "interrupted"
    with forbid():
        result = tape.replay(rec.last_run_id, graphs.build_linear())
    assert result.status == "interrupted" and result.output_matches is True
    assert result.output == out


def test_stream_runs_replay_through_stream_with_their_mode(tape):
    rec = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
    chunks = list(rec.stream({"topic": ""}, stream_mode="updates", durability="exit"))
    assert [next(iter(c)) for c in chunks] == ["start", "write", "rate"]
    with forbid():
        result = tape.replay(rec.last_run_id, graphs.build_linear())
    assert_exact(result)
    replayed = tape.run(result.run_id)
    assert replayed.meta["api"] == "stream"
    # durability="exit" replayed too: only the final checkpoint is written, as when recorded
    assert replayed.meta["checkpoints"] == tape.run(rec.last_run_id).meta["checkpoints"]


TWO_TURNS_OPENAI = """
import asyncio
import sys
from typing import TypedDict

from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import graphtape

url, base_url, what = sys.argv[1], sys.argv[2], sys.argv[3]
model = ChatOpenAI(base_url=base_url, api_key="sk-test", model="gpt-4o-mini", max_retries=0)
prompt = "Write" if what == "record" else "Rewrite"


class S(TypedDict, total=False):
    draft: str
    answer: str
    final: str


async def draft(s):
    return {"draft": (await model.ainvoke([HumanMessage(f"{prompt}: draft")])).content}


async def review(s):
    return {"answer": interrupt({"draft": s["draft"]})}


async def final(s):
    return {"final": (await model.ainvoke([HumanMessage(f"{prompt}: final {s['draft']} {s['answer']}")])).content}


b = StateGraph(S)
b.add_node(draft)
b.add_node(review)
b.add_node(final)
b.add_edge(START, "draft")
b.add_edge("draft", "review")
b.add_edge("review", "final")
b.add_edge("final", END)
graph = b.compile()

with graphtape.connect(url) as tape:
    if what == "record":
        async def both():
            rec = tape.record(graph, name="two_turns", checkpointer=tape.saver)
            cfg = {"configurable": {"thread_id": "oa"}}
            await rec.ainvoke({}, cfg)
            await rec.ainvoke(Command(resume="approved"), cfg)
            return rec.last_run_id
        print(asyncio.run(both()))
    else:
        result = tape.replay(sys.argv[4], graph, mode="flight")
        print(result.status, result.live, len(result.run_ids), result.error)
"""


def test_sync_flight_replay_with_chat_openai_in_a_fresh_process(tmp_path, provider_server):
    """The way a recorded production run is replayed from the CLI: a new process, live calls through
    ``ChatOpenAI``'s pooled async HTTP client in two runs of one thread."""
    import subprocess
    import sys

    script = tmp_path / "two_turns_openai.py"
    script.write_text(TWO_TURNS_OPENAI, encoding="utf-8")
    url = f"sqlite:///{tmp_path}/tape.db"

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(script), url, provider_server.openai_base_url, *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    run_id = run("record")
    assert len(provider_server.requests) == 2
    assert run("replay", run_id) == "finished 2 2 None"
    assert len(provider_server.requests) == 4


def test_a_json_context_is_replayed(tape):
    from langgraph.runtime import Runtime

    class Ctx(TypedDict):
        user: str

    def greet(s, runtime: Runtime[Ctx]):
        return {"draft": f"hello {runtime.context['user']}"}

    def build():
        b = StateGraph(Review, context_schema=Ctx)
        b.add_node(greet)
        b.add_edge(START, "greet")
        b.add_edge("greet", END)
        return b.compile()

    rec = tape.record(build(), checkpointer=tape.saver)
    out = rec.invoke({}, context={"user": "ada"})
    with forbid():
        result = tape.replay(rec.last_run_id, build())
    assert_exact(result)
    assert result.output == out == {"draft": "hello ada"}
