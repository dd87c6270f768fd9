"""Chat-model interception: every way a model can be implemented and called is on the tape.

The matrix crosses how a model is implemented (which of ``_generate``,
``_agenerate``, ``_stream``, ``_astream`` it overrides) with how a node calls
it (``invoke``, ``ainvoke``, ``stream``, ``astream``, ``batch``, ``abatch``).
Each supported pair must leave exactly one ``llm_call`` on the tape and be
served by strict replay with no live call.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.graph import END, START, StateGraph

from tests.graphs import LIVE, _rng, forbid, live, usage

# -- models implemented in every way langchain allows ------------------------------------


class _Fake(BaseChatModel):
    """A nondeterministic answer; ``live()`` counts (and under ``forbid()`` refuses) every real call."""

    kind: str = "fake"
    #: declared as provider classes declare it: ``streaming=True`` makes langchain stream on invoke
    streaming: bool = False

    @property
    def _llm_type(self) -> str:
        return f"matrix-{self.kind}"

    def _text(self) -> str:
        live("llm", self.kind)
        return f"{self.kind}-{_rng.randint(0, 10**9)}"

    def _result(self) -> ChatResult:
        text = self._text()
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text, usage_metadata=usage(text)))])

    def _chunks(self) -> list[ChatGenerationChunk]:
        text = self._text()
        return [
            ChatGenerationChunk(message=AIMessageChunk(content=text[:3])),
            ChatGenerationChunk(
                message=AIMessageChunk(content=text[3:], usage_metadata=usage(text), chunk_position="last")
            ),
        ]

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        # ``_generate`` is abstract: a model without a synchronous path still has to define it.
        raise NotImplementedError(f"{type(self).__name__} has no synchronous, non-streaming path")


class SyncOnly(_Fake):
    kind: str = "sync"

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        return self._result()


class AsyncOnly(_Fake):
    kind: str = "async"

    async def _agenerate(self, messages, stop=None, run_manager=None, **kw):
        await asyncio.sleep(0)
        return self._result()


class Both(_Fake):
    kind: str = "both"

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        return self._result()

    async def _agenerate(self, messages, stop=None, run_manager=None, **kw):
        await asyncio.sleep(0)
        return self._result()


class StreamOnly(_Fake):
    kind: str = "stream"

    def _stream(self, messages, stop=None, run_manager=None, **kw):
        yield from self._chunks()


class AStreamOnly(_Fake):
    kind: str = "astream"

    async def _astream(self, messages, stop=None, run_manager=None, **kw):
        for chunk in self._chunks():
            await asyncio.sleep(0)
            yield chunk


MODELS: dict[str, Any] = {
    "sync-only": lambda: SyncOnly(),
    "async-only": lambda: AsyncOnly(),
    "both": lambda: Both(),
    "stream-only": lambda: StreamOnly(),
    "astream-only": lambda: AStreamOnly(),
    # ``streaming=True`` (as with ChatOpenAI(streaming=True)) makes invoke/ainvoke use the stream methods
    "stream-only streaming=True": lambda: StreamOnly(streaming=True),
    "astream-only streaming=True": lambda: AStreamOnly(streaming=True),
}
APIS = ("invoke", "ainvoke", "stream", "astream", "batch", "abatch")
ALL = set(APIS)

#: What langchain itself can run. The other pairs are left out of the matrix because
#: langchain (not graphtape) fails them: with no ``_generate``, every synchronous path
#: ends in the abstract ``_generate``; ``ainvoke``/``abatch`` without ``_agenerate`` fall
#: back to ``_generate`` in a thread; ``stream`` falls back to ``invoke`` unless ``_stream``
#: exists; ``astream`` falls back to ``_stream`` and then to ``ainvoke``; ``invoke`` uses the
#: stream methods only when streaming is requested (``streaming=True``), and then only
#: ``_stream`` (sync) or ``_astream``/``_stream`` (async).
#: ``test_left_out_pairs_fail_in_langchain_itself`` proves each exclusion.
SUPPORTED: dict[str, set[str]] = {
    "sync-only": ALL,
    "async-only": {"ainvoke", "astream", "abatch"},
    "both": ALL,
    "stream-only": {"stream", "astream"},
    "astream-only": {"astream"},
    "stream-only streaming=True": ALL,
    "astream-only streaming=True": {"ainvoke", "astream", "abatch"},
}
PAIRS = [(m, a) for m in MODELS for a in APIS if a in SUPPORTED[m]]
LEFT_OUT = [(m, a) for m in MODELS for a in APIS if a not in SUPPORTED[m]]

QUESTION = [HumanMessage("what is the answer?")]


def _text(msg: Any) -> str:
    return msg.content if isinstance(msg.content, str) else str(msg.content)


def call_sync(model: BaseChatModel, api: str) -> str:
    if api == "invoke":
        return _text(model.invoke(QUESTION))
    if api == "stream":
        return "".join(_text(c) for c in model.stream(QUESTION))
    if api == "batch":
        return "|".join(_text(m) for m in model.batch([QUESTION]))
    raise AssertionError(api)


async def call_async(model: BaseChatModel, api: str) -> str:
    if api == "ainvoke":
        return _text(await model.ainvoke(QUESTION))
    if api == "astream":
        return "".join([_text(c) async for c in model.astream(QUESTION)])
    if api == "abatch":
        return "|".join(_text(m) for m in await model.abatch([QUESTION]))
    raise AssertionError(api)


class Answer(TypedDict, total=False):
    answer: str


def build(model_name: str, api: str):
    model = MODELS[model_name]()
    b = StateGraph(Answer)
    if api.startswith("a"):

        async def ask(s: Answer):
            return {"answer": await call_async(model, api)}
    else:

        def ask(s: Answer):
            return {"answer": call_sync(model, api)}

    b.add_node("ask", ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b.compile()


@pytest.mark.parametrize(("model_name", "api"), PAIRS, ids=[f"{m}-{a}" for m, a in PAIRS])
def test_every_model_shape_and_call_api_is_recorded_and_served(tape, model_name, api):
    rec = tape.record(build(model_name, api), name="matrix")
    cfg = {"configurable": {"thread_id": "m"}}
    before = sum(LIVE.values())
    if api.startswith("a"):
        out = asyncio.run(rec.ainvoke({}, cfg))
    else:
        out = rec.invoke({}, cfg)
    assert sum(LIVE.values()) == before + 1, "the model was called once, live"
    run_id = rec.last_run_id
    calls = [e for e in tape.store.events(run_id, ["llm_call"])]
    assert len(calls) == 1, f"{model_name} called with {api} is not on the tape exactly once"
    assert calls[0].data["source"] == "live"

    live_before = sum(LIVE.values())
    with forbid():
        result = tape.replay(run_id, build(model_name, api), mode="strict")
    assert sum(LIVE.values()) == live_before
    assert result.status == "finished", result.error
    assert (result.served, result.live, result.unused) == (1, 0, 0)
    assert result.output == out
    assert result.output_matches is True


@pytest.mark.parametrize(("model_name", "api"), LEFT_OUT, ids=[f"{m}-{a}" for m, a in LEFT_OUT])
def test_left_out_pairs_fail_in_langchain_itself(model_name, api):
    """Outside any recording, langchain cannot run the pairs the matrix leaves out."""
    model = MODELS[model_name]()
    with pytest.raises(NotImplementedError):
        if api.startswith("a"):
            asyncio.run(call_async(model, api))
        else:
            call_sync(model, api)


# -- batch: identical inputs are answered in their recorded slots ----------------------------

import random as _random  # noqa: E402
import time as _time  # noqa: E402

from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler  # noqa: E402


class _Jitter(BaseCallbackHandler):
    """Sleeps a random moment as each request starts: batch threads reach the model in a random order."""

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        _time.sleep(_random.random() * 0.02)


class _AJitter(AsyncCallbackHandler):
    async def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(_random.random() * 0.02)


class Answers(TypedDict, total=False):
    answers: list[str]


def build_batch(api: str):
    model = Both(callbacks=[_AJitter() if api == "abatch" else _Jitter()])
    same = [HumanMessage("the same question")]
    b = StateGraph(Answers)
    if api == "abatch":

        async def ask(s: Answers):
            return {"answers": [m.content for m in await model.abatch([same] * 5)]}
    elif api == "batch_as_completed":

        def ask(s: Answers):
            done = dict(model.batch_as_completed([same] * 5))
            return {"answers": [done[i].content for i in range(5)]}
    else:

        def ask(s: Answers):
            return {"answers": [m.content for m in model.batch([same] * 5)]}

    b.add_node("ask", ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b.compile()


@pytest.mark.parametrize("api", ["batch", "abatch", "batch_as_completed"])
def test_batch_of_identical_inputs_is_served_in_recorded_slot_order(tape, api):
    rec = tape.record(build_batch(api), name="batch")
    cfg = {"configurable": {"thread_id": "b"}}
    out = asyncio.run(rec.ainvoke({}, cfg)) if api == "abatch" else rec.invoke({}, cfg)
    recorded = out["answers"]
    assert len(set(recorded)) == 5, "five live calls, five different answers"
    for _ in range(3):  # each replay starts the threads in another random order
        with forbid():
            result = tape.replay(rec.last_run_id, build_batch(api), mode="strict")
        assert result.status == "finished", result.error
        assert result.served == 5
        assert result.output["answers"] == recorded


# -- structured output: the schema sent is part of the request ----------------------------------

from pydantic import BaseModel, Field  # noqa: E402


def make_schema(edited: bool) -> type[BaseModel]:
    """A fresh ``Verdict`` class on every call (same name, module and repr); ``edited`` adds a field."""

    class Verdict(BaseModel):
        """The verdict on a text."""

        label: str = Field(description="one word")
        if edited:
            confidence: float = Field(description="between 0 and 1")

    return Verdict


class Judged(TypedDict, total=False):
    verdict: Any


def build_fake_structured(edited: bool):
    """A model bound with ``response_format=<class>``, the way ChatOpenAI's json_schema method passes it."""
    model = SyncOnly().bind(response_format=make_schema(edited))

    def judge(s: Judged):
        return {"verdict": model.invoke([HumanMessage("judge: fine")]).content}

    b = StateGraph(Judged)
    b.add_node("judge", judge)
    b.add_edge(START, "judge")
    b.add_edge("judge", END)
    return b.compile()


def test_response_format_class_is_fingerprinted_by_its_schema(tape):
    assert repr(make_schema(False)) == repr(make_schema(True)), "the classes differ only in their fields"
    rec = tape.record(build_fake_structured(False), name="judge")
    rec.invoke({}, {"configurable": {"thread_id": "j"}})
    run_id = rec.last_run_id
    with forbid():
        same = tape.replay(run_id, build_fake_structured(False), mode="strict")
    assert (same.status, same.served, same.live) == ("finished", 1, 0)
    with forbid():
        edited = tape.replay(run_id, build_fake_structured(True), mode="strict")
    assert edited.status == "diverged"
    assert edited.divergence["node_path"] == "judge"
    assert edited.divergence["reason"] == "its request differs from the recorded one"
    assert "+" in edited.divergence["diff"] and "confidence" in edited.divergence["diff"]
    before = sum(LIVE.values())
    flight = tape.replay(run_id, build_fake_structured(True), mode="flight")
    assert (flight.status, flight.served, flight.live) == ("finished", 0, 1)
    assert sum(LIVE.values()) == before + 1


def _provider_model(provider: str, server: Any) -> BaseChatModel:
    if provider == "openai":
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(base_url=server.openai_base_url, api_key="sk-test", model="gpt-4o-mini", max_retries=0)
    from langchain_anthropic import ChatAnthropic

    return ChatAnthropic(
        base_url=server.anthropic_base_url, api_key="sk-ant-test", model="claude-sonnet-4-5", max_retries=0
    )


def build_provider_structured(provider: str, method: str, server: Any, edited: bool):
    structured = _provider_model(provider, server).with_structured_output(make_schema(edited), method=method)

    def judge(s: Judged):
        return {"verdict": structured.invoke("judge: fine").model_dump()}

    b = StateGraph(Judged)
    b.add_node("judge", judge)
    b.add_edge(START, "judge")
    b.add_edge("judge", END)
    return b.compile()


STRUCTURED = [
    ("openai", "json_schema"),
    ("openai", "function_calling"),
    ("anthropic", "function_calling"),
    ("anthropic", "json_schema"),
]


@pytest.mark.parametrize(("provider", "method"), STRUCTURED, ids=[f"{p}-{m}" for p, m in STRUCTURED])
def test_structured_output_schema_edit_is_a_changed_request(tape, provider_server, provider, method):
    def build(edited: bool):
        return build_provider_structured(provider, method, provider_server, edited)

    rec = tape.record(build(False), name="judge")
    out = rec.invoke({}, {"configurable": {"thread_id": "j"}})
    assert set(out["verdict"]) == {"label"}
    run_id = rec.last_run_id
    sent = len(provider_server.requests)
    assert sent == 1

    same = tape.replay(run_id, build(False), mode="strict")
    assert (same.status, same.served, same.live) == ("finished", 1, 0), same.error
    assert same.output == out
    assert len(provider_server.requests) == sent, "an unchanged schema is served from the tape"

    edited = tape.replay(run_id, build(True), mode="strict")
    assert edited.status == "diverged", "an edited schema must not be answered from the tape"
    assert edited.divergence["node_path"] == "judge"
    assert "confidence" in edited.divergence["diff"], "the diff shows the schema change"
    assert len(provider_server.requests) == sent

    flight = tape.replay(run_id, build(True), mode="flight")
    assert (flight.status, flight.served, flight.live) == ("finished", 0, 1), flight.error
    assert len(provider_server.requests) == sent + 1
    assert set(flight.output["verdict"]) == {"label", "confidence"}


def test_json_mode_sends_no_schema_so_a_schema_edit_is_no_changed_request(tape, provider_server):
    """``method="json_mode"`` sends ``{"type": "json_object"}`` only: the schema is not part of the request."""
    provider_server.script({"json": {"label": "fine", "confidence": 0.5}})
    rec = tape.record(build_provider_structured("openai", "json_mode", provider_server, False), name="judge")
    out = rec.invoke({}, {"configurable": {"thread_id": "j"}})
    assert out["verdict"] == {"label": "fine"}
    assert provider_server.requests[-1][1]["response_format"] == {"type": "json_object"}
    sent = len(provider_server.requests)
    # flight: the call is served because its request is unchanged (strict would stop at the state the
    # edited parser writes, which differs from the recorded one)
    result = tape.replay(
        rec.last_run_id, build_provider_structured("openai", "json_mode", provider_server, True), mode="flight"
    )
    assert (result.status, result.served, result.live) == ("finished", 1, 0), result.error
    assert result.output["verdict"] == {"label": "fine", "confidence": 0.5}
    assert len(provider_server.requests) == sent


@pytest.mark.parametrize("api", ["stream", "invoke"])
def test_a_call_on_a_thread_without_the_run_context_but_with_its_config_is_recorded_and_served(tape, api):
    """A node that calls its model on a thread it started itself (no context copied) and hands it
    its ``config``: the run is found from the config (graphtape's run id rides in its ``configurable``)."""
    import threading

    from langchain_core.runnables import RunnableConfig

    def build_threaded():
        model = SyncOnly()

        def ask(s: Answer, config: RunnableConfig):
            box: dict[str, Any] = {}
            worker = threading.Thread(target=lambda: box.update(msg=model.invoke(QUESTION, config)))
            worker.start()
            worker.join()
            return {"answer": _text(box["msg"])}

        b = StateGraph(Answer)
        b.add_node("ask", ask)
        b.add_edge(START, "ask")
        return b.compile()

    rec = tape.record(build_threaded(), name="threaded")
    cfg = {"configurable": {"thread_id": f"threaded-{api}"}}
    out = rec.invoke({}, cfg) if api == "invoke" else list(rec.stream({}, cfg, stream_mode="values"))[-1]
    run_id = rec.last_run_id
    assert len(tape.store.events(run_id, ["llm_call"])) == 1
    with forbid():
        result = tape.replay(run_id, build_threaded(), mode="strict")
    assert (result.status, result.served, result.live) == ("finished", 1, 0)
    assert result.output == out
