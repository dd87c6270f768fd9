"""Recorded exceptions come back as their own class, with the message, args and attributes code reads.

``ToolNode(handle_tool_errors=True)`` writes ``repr(error)`` into the
conversation, ``RetryPolicy(retry_on=...)`` and ``except`` test the class,
provider retry code reads ``status_code`` and the response: a replay must
hand the code the same error the recording saw.
"""

from __future__ import annotations

import json
import random
from typing import Annotated, Any

import httpx
import openai
import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import BaseModel, ValidationError
from typing_extensions import TypedDict

from graphtape.record.errors_codec import error_info, rebuild_error
from graphtape.store.codec import pack_event, unpack_event
from graphtape.typepolicy import TypePolicy
from tests.graphs import forbid, live

_rng = random.Random()


class OrderError(Exception):
    """Two constructor arguments, one formatted message passed up: ``cls(message)`` cannot rebuild it."""

    def __init__(self, code: str, detail: str):
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class Described(Exception):
    """``str`` computed from attributes, not from ``args``."""

    def __init__(self, items: dict[str, int]):
        super().__init__()
        self.items = items

    def __str__(self) -> str:
        return "items " + json.dumps(self.items)


class Point(BaseModel):
    x: int
    y: int


def _validation_error() -> ValidationError:
    try:
        Point.model_validate({"x": "one"})
    except ValidationError as exc:
        return exc
    raise AssertionError("unreachable")


def _openai_error() -> openai.InternalServerError:
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions", headers={"Authorization": "Bearer sk-x"})
    response = httpx.Response(
        500,
        request=request,
        headers={"x-request-id": "req-1", "retry-after": "2"},
        json={"error": {"message": "boom", "type": "server_error"}},
    )
    return openai.InternalServerError(
        "Error code: 500 - boom", response=response, body={"message": "boom", "type": "server_error"}
    )


ERRORS = {
    "two-argument user error": lambda: OrderError("E42", "no order A-1"),
    "str from attributes, dict order kept": lambda: Described({"z": 1, "a": 2}),
    "KeyError": lambda: KeyError("missing"),
    "FileNotFoundError": lambda: FileNotFoundError(2, "No such file or directory"),
    "JSONDecodeError": lambda: json.JSONDecodeError("Expecting value", "nope", 0),
    "pydantic ValidationError": _validation_error,
    "openai InternalServerError": _openai_error,
}


def _through_the_tape(info: dict[str, Any]) -> dict[str, Any]:
    """An error record as it comes back from an event (event bodies are stored with sorted keys)."""
    return unpack_event(pack_event({"error": info}))["error"]


@pytest.mark.parametrize("make", ERRORS.values(), ids=list(ERRORS))
def test_a_recorded_error_is_rebuilt_as_its_own_class(make):
    original = make()
    policy = TypePolicy([OrderError, Described])
    again = rebuild_error(_through_the_tape(error_info(original)), policy)
    assert type(again) is type(original)
    assert str(again) == str(original)
    assert repr(again) == repr(original)
    if isinstance(original, ValidationError):
        assert again.errors() == original.errors() and again.title == original.title
    else:
        assert again.args == original.args
    if isinstance(original, OrderError):
        assert (again.code, again.detail) == ("E42", "no order A-1")
    if isinstance(original, Described):
        assert list(again.items) == ["z", "a"]


def test_a_provider_error_keeps_what_retry_code_reads():
    again = rebuild_error(_through_the_tape(error_info(_openai_error())))
    assert isinstance(again, openai.InternalServerError)
    assert again.status_code == 500 and again.body == {"message": "boom", "type": "server_error"}
    assert again.response.status_code == 500 and again.response.headers["retry-after"] == "2"
    assert again.request.method == "POST" and str(again.request.url).endswith("/v1/chat/completions")
    assert "authorization" not in again.request.headers  # the request's headers carry the API key: not kept


class KeyedError(Exception):
    def __init__(self, message: str, api_key: str, body: dict):
        super().__init__(message)
        self.api_key, self.body = api_key, body


def test_secrets_in_errors_are_not_recorded():
    error = KeyedError("denied", "sk-secret-1", {"token": "sk-secret-2", "reason": "quota"})
    request = httpx.Request("GET", "http://127.0.0.1:9/v1/models?key=sk-secret-3", headers={"x-api-key": "sk-secret-4"})
    error.request = request
    text = json.dumps(error_info(error))
    assert "sk-secret" not in text and "quota" in text and "/v1/models" in text


def test_errors_recorded_by_older_versions_still_decode():
    assert repr(rebuild_error({"type": "builtins:ValueError", "message": "bad"})) == "ValueError('bad')"
    again = rebuild_error({"type": f"{OrderError.__module__}:OrderError", "message": "E1: x"}, TypePolicy([OrderError]))
    assert type(again) is OrderError and str(again) == "E1: x"


# -- ToolNode(handle_tool_errors=True) on every backend ----------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


@tool
def find_order(order: str) -> str:
    """Find an order."""
    live("tool", "find_order")
    raise OrderError(f"E{_rng.randint(0, 10**6)}", f"no order {order}")


@tool
def count_items(n: int) -> str:
    """Count items."""
    live("tool", "count_items")
    return "x" * n


class ToolCaller(BaseChatModel):
    """Calls both tools (one with an argument that fails validation) on a human turn, then answers."""

    @property
    def _llm_type(self) -> str:
        return "test-tool-caller"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        live("llm", "tool-caller")
        text = f"t-{_rng.randint(0, 10**9)}"
        if isinstance(messages[-1], HumanMessage):
            msg = AIMessage(
                content="",
                tool_calls=[
                    {"name": "find_order", "args": {"order": text}, "id": "c1"},
                    {"name": "count_items", "args": {"n": text}, "id": "c2"},
                ],
            )
        else:
            msg = AIMessage(content=text)
        return ChatResult(generations=[ChatGeneration(message=msg)])


def build_toolnode_graph():
    model = ToolCaller()

    def agent(s: Chat):
        return {"messages": [model.invoke(s["messages"])]}

    b = StateGraph(Chat)
    b.add_node(agent)
    b.add_node("tools", ToolNode([find_order, count_items], handle_tool_errors=True))
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", tools_condition)
    b.add_edge("tools", "agent")
    return b.compile()


def _tool_messages(state: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m.name, m.content) for m in state["messages"] if isinstance(m, ToolMessage)]


def test_toolnode_error_messages_replay_identically(tape):
    rec = tape.record(build_toolnode_graph(), name="toolnode-errors")
    out = rec.invoke({"messages": [HumanMessage("find it")]})
    recorded = _tool_messages(out)
    assert recorded[0][1].startswith("Error: OrderError('E") and "valid integer" in recorded[1][1]

    with forbid():
        result = tape.replay(rec.last_run_id, build_toolnode_graph(), mode="strict")
    assert result.status == "finished", (result.error, result.divergence)
    assert result.live == 0 and result.output_matches is True
    assert _tool_messages(result.output) == recorded


# -- a provider error through a real client, caught by the node ----------------------------------------


class Answer(TypedDict, total=False):
    answer: str


def build_catching_graph(server):
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(base_url=server.openai_base_url, api_key="sk-test", model="gpt-4o-mini", max_retries=0)

    def ask(s: Answer):
        try:
            return {"answer": model.invoke([HumanMessage("hello")]).content}
        except openai.InternalServerError as exc:
            return {
                "answer": f"{type(exc).__name__} {exc.status_code} {exc.response.status_code} "
                f"{exc.request.method} {exc}"
            }

    b = StateGraph(Answer)
    b.add_node("ask", ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b.compile()


def test_a_provider_error_comes_back_as_the_provider_class(tape, provider_server):
    provider_server.fail_next(500)
    rec = tape.record(build_catching_graph(provider_server), name="provider-error")
    out = rec.invoke({})
    assert " 500 500 POST " in out["answer"]
    sent = len(provider_server.requests)

    result = tape.replay(rec.last_run_id, build_catching_graph(provider_server), mode="strict")
    assert len(provider_server.requests) == sent  # served from the tape
    assert result.status == "finished", (result.error, result.divergence)
    assert result.output == out
