"""The fake provider server speaks each provider's real wire format.

Real ``ChatOpenAI`` and ``ChatAnthropic`` clients (and the SDKs under them)
parse its answers unchanged: plain calls, SSE streams with usage, tool calls,
structured output and API errors.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel


class Weather(BaseModel):
    city: str
    degrees: int
    sunny: bool
    tags: list[str]


@tool
def lookup(query: str, limit: int) -> str:
    """Look something up."""
    return query * limit


def openai_model(server, **kw) -> ChatOpenAI:
    return ChatOpenAI(base_url=server.openai_base_url, api_key="sk-test", model="gpt-4o-mini", max_retries=0, **kw)


def anthropic_model(server, **kw) -> ChatAnthropic:
    return ChatAnthropic(
        base_url=server.anthropic_base_url, api_key="sk-ant-test", model="claude-sonnet-4-5", max_retries=0, **kw
    )


MODELS = {"openai": openai_model, "anthropic": anthropic_model}


@pytest.mark.parametrize("provider", MODELS)
def test_invoke_answers_fresh_text_with_usage(provider_server, provider):
    model = MODELS[provider](provider_server)
    first = model.invoke("hello")
    second = model.invoke("hello")
    assert first.content.startswith("srv-") and second.content.startswith("srv-")
    assert first.content != second.content
    assert first.usage_metadata["input_tokens"] > 0 and first.usage_metadata["output_tokens"] > 0
    path, body = provider_server.requests[0]
    assert path == ("/v1/chat/completions" if provider == "openai" else "/v1/messages")
    assert body["messages"][-1]["content"] == "hello"
    assert len(provider_server.requests) == 2


@pytest.mark.parametrize("provider", MODELS)
def test_stream_yields_several_chunks_and_usage(provider_server, provider):
    model = MODELS[provider](provider_server, **({"stream_usage": True} if provider == "openai" else {}))
    chunks = list(model.stream("hello"))
    text = "".join(c.text for c in chunks)
    assert text.startswith("srv-")
    assert sum(1 for c in chunks if c.text) >= 2
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert total.usage_metadata["output_tokens"] > 0
    body = provider_server.requests[-1][1]
    assert body["stream"] is True
    if provider == "openai":
        assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("provider", MODELS)
@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_tool_call_on_a_user_turn_then_text_after_the_result(provider_server, provider, stream):
    model = MODELS[provider](provider_server).bind_tools([lookup])
    ask = [HumanMessage("look it up")]
    if stream:
        msg = None
        for chunk in model.stream(ask):
            msg = chunk if msg is None else msg + chunk
    else:
        msg = model.invoke(ask)
    [call] = msg.tool_calls
    assert call["name"] == "lookup"
    assert call["args"]["query"].startswith("q-") and isinstance(call["args"]["limit"], int)
    assert call["id"]
    after = model.invoke(
        [*ask, AIMessage(content="", tool_calls=msg.tool_calls), ToolMessage("found", tool_call_id=call["id"])]
    )
    assert after.content and not after.tool_calls


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_openai_structured_output(provider_server, method):
    out = openai_model(provider_server).with_structured_output(Weather, method=method).invoke("weather?")
    assert isinstance(out, Weather) and out.city.startswith("q-") and len(out.tags) == 2
    body = provider_server.requests[-1][1]
    if method == "json_schema":
        assert body["response_format"]["json_schema"]["schema"]["properties"].keys() == Weather.model_fields.keys()
    else:
        assert body["tool_choice"]["function"]["name"] == "Weather"


# langchain_openai model_dumps the SDK's generic ``content.done`` event, which warns in pydantic (upstream, any server)
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_openai_structured_output_streams(provider_server):
    chunks = list(openai_model(provider_server).with_structured_output(Weather).stream("weather?"))
    assert isinstance(chunks[-1], Weather)


def test_openai_json_mode_is_scripted(provider_server):
    """json_mode sends no schema, so the test says what to answer."""
    provider_server.script({"json": {"city": "Oslo", "degrees": 3, "sunny": False, "tags": []}})
    out = openai_model(provider_server).with_structured_output(Weather, method="json_mode").invoke("weather? json")
    assert out == Weather(city="Oslo", degrees=3, sunny=False, tags=[])
    assert provider_server.requests[-1][1]["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_anthropic_structured_output(provider_server, method):
    out = anthropic_model(provider_server).with_structured_output(Weather, method=method).invoke("weather?")
    assert isinstance(out, Weather) and out.city.startswith("q-")


def test_anthropic_structured_output_streams(provider_server):
    chunks = list(anthropic_model(provider_server).with_structured_output(Weather).stream("weather?"))
    assert isinstance(chunks[-1], Weather)


@pytest.mark.parametrize("provider", MODELS)
def test_scripted_replies_come_first_then_the_default_brain(provider_server, provider):
    provider_server.script(
        "one",
        {"tool_calls": [{"name": "lookup", "args": {"query": "x", "limit": 2}}]},
        lambda call: f"echo {call.last_text}",
    )
    model = MODELS[provider](provider_server).bind_tools([lookup])
    assert model.invoke("a").content == "one"
    assert model.invoke("b").tool_calls[0]["args"] == {"query": "x", "limit": 2}
    assert model.invoke("c").content == "echo c"
    assert model.invoke("d").tool_calls[0]["name"] == "lookup"
    assert provider_server.pending == 0


def test_scripted_broken_tool_arguments_become_invalid_tool_calls(provider_server):
    provider_server.script({"tool_calls": [{"name": "lookup", "args": '{"query": "x", '}]})
    msg = openai_model(provider_server).bind_tools([lookup]).invoke("a")
    assert not msg.tool_calls
    assert msg.invalid_tool_calls[0]["name"] == "lookup"


@pytest.mark.parametrize(
    "provider,error", [("openai", openai.InternalServerError), ("anthropic", anthropic.InternalServerError)]
)
@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_fail_next_raises_the_provider_error_then_recovers(provider_server, provider, error, stream):
    model = MODELS[provider](provider_server)
    provider_server.fail_next(500, times=2)
    for _ in range(2):
        with pytest.raises(error):
            list(model.stream("x")) if stream else model.invoke("x")
    assert model.invoke("x").content.startswith("srv-")
    assert len(provider_server.requests) == 3


def test_rate_limit_status_maps_to_the_sdk_class(provider_server):
    provider_server.fail_next(429)
    with pytest.raises(openai.RateLimitError):
        openai_model(provider_server).invoke("x")


@pytest.mark.parametrize("provider", MODELS)
async def test_async_invoke_and_stream(provider_server, provider):
    model = MODELS[provider](provider_server)
    msg = await model.ainvoke("hi")
    parts = [c.text async for c in model.astream("hi")]
    assert msg.content.startswith("srv-") and "".join(parts).startswith("srv-")


def test_each_test_starts_with_an_empty_log(provider_server):
    assert provider_server.requests == [] and provider_server.pending == 0
    json.dumps(provider_server.requests)  # bodies are plain JSON


def test_connections_close_unless_kept_alive(provider_server):
    import httpx

    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}
    url = provider_server.openai_base_url + "/chat/completions"
    assert httpx.post(url, json=body).headers.get("connection") == "close"
    provider_server.keep_alive = True
    assert httpx.post(url, json=body).headers.get("connection") != "close"


def test_cached_clients_work_across_event_loops(provider_server):
    """langchain_openai caches its async HTTP client: a closed connection per response keeps tests independent."""
    import asyncio

    model = openai_model(provider_server)
    for _ in range(2):
        assert asyncio.run(model.ainvoke("hi")).content.startswith("srv-")
