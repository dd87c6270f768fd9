"""Small graphs covering the LangGraph features replay must handle.

Every model here is nondeterministic (a fresh random answer on every live
call), so a replay that reproduces the recorded state proves that the
answers came from the tape. ``LIVE`` counts every live model, tool and
effect execution; ``forbid()`` makes any of them fail the test.
"""

from __future__ import annotations

import asyncio
import operator
import random
import threading
import time
from collections import Counter
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send, interrupt

import graphtape

LIVE: Counter = Counter()
_FORBID = threading.Event()
_rng = random.Random()


class LiveCall(AssertionError):
    pass


def live(kind: str, name: str) -> None:
    if _FORBID.is_set():
        raise LiveCall(f"live {kind} call {name} during a replay that must serve everything")
    LIVE[(kind, name)] += 1


class forbid:
    """Context manager: any live model/tool/effect call fails the test."""

    def __enter__(self):
        _FORBID.set()
        return self

    def __exit__(self, *exc):
        _FORBID.clear()


def usage(text: str) -> dict[str, int]:
    return {"input_tokens": 20, "output_tokens": len(text) // 4 + 1, "total_tokens": 21 + len(text) // 4}


class RandomModel(BaseChatModel):
    """Answers ``<prefix>-<random>``; calls the bound tool on a human turn."""

    prefix: str = "rnd"
    tool_name: str | None = None

    @property
    def _llm_type(self) -> str:
        return "test-random"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": "graphtape-fake-test", "prefix": self.prefix}

    def _answer(self, messages) -> AIMessage:
        live("llm", self.prefix)
        text = f"{self.prefix}-{_rng.randint(0, 10**9)}"
        if self.tool_name and isinstance(messages[-1], HumanMessage):
            return AIMessage(
                content="",
                tool_calls=[{"name": self.tool_name, "args": {"q": text}, "id": f"call_{text}"}],
                usage_metadata=usage(text),
            )
        return AIMessage(content=text, usage_metadata=usage(text))

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        return ChatResult(generations=[ChatGeneration(message=self._answer(messages))])

    async def _agenerate(self, messages, stop=None, run_manager=None, **kw):
        await asyncio.sleep(0)
        return ChatResult(generations=[ChatGeneration(message=self._answer(messages))])

    def _stream(self, messages, stop=None, run_manager=None, **kw):
        msg = self._answer(messages)
        words = [msg.content[:4], msg.content[4:]]
        for i, w in enumerate(words):
            last = i == len(words) - 1
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content=w,
                    usage_metadata=msg.usage_metadata if last else None,
                    chunk_position="last" if last else None,
                )
            )

    async def _astream(self, messages, stop=None, run_manager=None, **kw):
        for chunk in self._stream(messages, stop, run_manager, **kw):
            await asyncio.sleep(0)
            yield chunk

    def bind_tools(self, tools, **kwargs):
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


@tool
def search(q: str) -> str:
    """Search the (fake) web."""
    live("tool", "search")
    return f"result for {q}: {_rng.random():.6f}"


@graphtape.effect
def clock() -> float:
    live("effect", "clock")
    return _rng.random()


@graphtape.effect(name="send_mail", idempotency_key=lambda to, body: to)
def send_mail(to: str, body: str) -> str:
    live("effect", "send_mail")
    return f"msg-{_rng.randint(0, 10**6)}"


PROMPTS = {"write": "Write about"}


# -- 1. linear graph with LLM, direct tool call, effect, explicit .stream() ----------


class Linear(TypedDict, total=False):
    topic: str
    draft: str
    rating: str
    log: Annotated[list, operator.add]


def build_linear(model: BaseChatModel | None = None):
    m = model or RandomModel()

    def start(s):
        return {"topic": "cats", "log": [clock()]}

    def write(s):
        draft = m.invoke([HumanMessage(f"{PROMPTS['write']} {s['topic']}")]).content
        found = search.invoke({"q": draft})
        return {"draft": f"{draft} | {found}"}

    def rate(s):
        text = "".join(c.content for c in m.stream([HumanMessage("Rate: " + s["draft"])]))
        return {"rating": text, "log": [send_mail("ed@example.com", text)]}

    b = StateGraph(Linear)
    b.add_node(start)
    b.add_node(write)
    b.add_node(rate)
    b.add_edge(START, "start")
    b.add_edge("start", "write")
    b.add_edge("write", "rate")
    b.add_edge("rate", END)
    return b.compile()


# -- 2. subgraph + Send fan-out + parallel branches ------------------------------------


class Sub(TypedDict, total=False):
    question: str
    answer: str


class Fan(TypedDict, total=False):
    questions: list[str]
    answers: Annotated[list, operator.add]
    side: str
    summary: str


def build_fanout(model: BaseChatModel | None = None):
    m = model or RandomModel()

    def sub_answer(s: Sub):
        return {"answer": m.invoke([HumanMessage(f"Answer: {s['question']}")]).content}

    sb = StateGraph(Sub)
    sb.add_node("sub_answer", sub_answer)
    sb.add_edge(START, "sub_answer")
    sb.add_edge("sub_answer", END)
    subgraph = sb.compile()

    def plan(s):
        return {"questions": ["same", "same", "other"]}

    def fan(s):
        return [Send("worker", {"question": q}) for q in s["questions"]]

    def worker(s: Sub):
        out = subgraph.invoke({"question": s["question"]})
        return {"answers": [out["answer"]]}

    def side(s):
        return {"side": m.invoke([HumanMessage("side branch")]).content}

    def summarize(s):
        joined = ",".join(sorted(s["answers"]))
        return {"summary": m.invoke([HumanMessage(f"Summarize {joined} {s.get('side')}")]).content}

    b = StateGraph(Fan)
    b.add_node(plan)
    b.add_node("worker", worker)
    b.add_node(side)
    b.add_node(summarize)
    b.add_edge(START, "plan")
    b.add_conditional_edges("plan", fan, ["worker"])
    b.add_edge("plan", "side")
    b.add_edge(["worker", "side"], "summarize")
    b.add_edge("summarize", END)
    return b.compile()


def build_subgraph_node(model: BaseChatModel | None = None):
    """A compiled subgraph added directly as a node (its own checkpoint namespace)."""
    m = model or RandomModel()

    def inner(s: Sub):
        return {"answer": m.invoke([HumanMessage(f"inner {s['question']}")]).content}

    sb = StateGraph(Sub)
    sb.add_node("inner", inner)
    sb.add_edge(START, "inner")
    sb.add_edge("inner", END)

    def outer(s: Sub):
        return {"answer": s["answer"] + "!" + m.invoke([HumanMessage("outer " + s["answer"])]).content}

    b = StateGraph(Sub)
    b.add_node("sub", sb.compile())
    b.add_node("outer", outer)
    b.add_edge(START, "sub")
    b.add_edge("sub", "outer")
    b.add_edge("outer", END)
    return b.compile()


# -- 3. agent loop with ToolNode and messages --------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def build_agent(model: BaseChatModel | None = None):
    from langgraph.prebuilt import ToolNode, tools_condition

    m = (model or RandomModel(tool_name="search")).bind_tools([search])

    def agent(s: Chat):
        return {"messages": [m.invoke(s["messages"])]}

    b = StateGraph(Chat)
    b.add_node(agent)
    b.add_node("tools", ToolNode([search]))
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", tools_condition)
    b.add_edge("tools", "agent")
    return b.compile()


# -- 4. human in the loop: two interrupts in parallel + one later ---------------------------


class Review(TypedDict, total=False):
    draft: str
    a: str
    b: str
    final: str


def build_review(model: BaseChatModel | None = None):
    m = model or RandomModel()

    def draft(s):
        return {"draft": m.invoke([HumanMessage("draft")]).content}

    def review_a(s):
        return {"a": interrupt({"question": "ok A?", "draft": s["draft"]})}

    def review_b(s):
        return {"b": interrupt({"question": "ok B?", "draft": s["draft"]})}

    def finish(s):
        approval = interrupt({"question": "publish?"})
        text = m.invoke([HumanMessage(f"final {s['a']} {s['b']} {approval}")]).content
        return {"final": text}

    b = StateGraph(Review)
    b.add_node(draft)
    b.add_node(review_a)
    b.add_node(review_b)
    b.add_node(finish)
    b.add_edge(START, "draft")
    b.add_edge("draft", "review_a")
    b.add_edge("draft", "review_b")
    b.add_edge(["review_a", "review_b"], "finish")
    b.add_edge("finish", END)
    return b.compile()


# -- 5. async nodes ----------------------------------------------------------------------------


def build_async(model: BaseChatModel | None = None):
    m = model or RandomModel()

    async def first(s):
        msg = await m.ainvoke([HumanMessage("first")])
        found = await search.ainvoke({"q": msg.content})
        return {"draft": msg.content + found, "log": [clock()]}

    async def second(s):
        parts = [c.content async for c in m.astream([HumanMessage("second " + s["draft"])])]
        return {"rating": "".join(parts)}

    b = StateGraph(Linear)
    b.add_node(first)
    b.add_node(second)
    b.add_edge(START, "first")
    b.add_edge("first", "second")
    b.add_edge("second", END)
    return b.compile()


# -- 6. functional API ---------------------------------------------------------------------------


def build_functional(model: BaseChatModel | None = None):
    from langgraph.func import entrypoint, task

    m = model or RandomModel()

    @task
    def ask(q: str) -> str:
        return m.invoke([HumanMessage(q)]).content

    @entrypoint()
    def workflow(topic: str) -> dict:
        first = ask(f"one {topic}").result()
        second = ask(f"two {first}").result()
        return {"first": first, "second": second, "t": clock()}

    return workflow


class Count(TypedDict):
    n: int


def counter_line(n_nodes: int, probe: Any = None, pause: float = 0.0) -> Any:
    """``n_nodes`` nodes in a chain, each adding one to ``n`` (one super-step each): the cheapest
    graph with many checkpoints. ``probe(n)`` is called in every node before it returns; ``pause``
    seconds are slept there."""

    def node(state: Count) -> dict[str, Any]:
        if probe is not None:
            probe(state["n"])
        if pause:
            time.sleep(pause)
        return {"n": state["n"] + 1}

    b = StateGraph(Count)
    prev = START
    for i in range(n_nodes):
        b.add_node(f"n{i}", node)
        b.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    b.add_edge(prev, END)
    return b.compile()
