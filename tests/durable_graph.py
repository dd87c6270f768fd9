"""The graph of the durable-run tests: one node calls a model, waits for a gate file, calls it again.

The model writes each prompt it answers to ``$GRAPHTAPE_DURABLE_DIR/calls``,
so a test sees which calls really reached it: a server killed while the node
waits, and its run recovered by another process, must show the first call
once (served from the tape the second time) and the second call once.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, StateGraph


def _dir() -> Path:
    return Path(os.environ["GRAPHTAPE_DURABLE_DIR"])


class CountingModel(BaseChatModel):
    """Answers ``answer to <prompt>`` and appends the prompt to the calls file."""

    @property
    def _llm_type(self) -> str:
        return "test-counting"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": "graphtape-counting"}

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        prompt = str(messages[-1].content)
        with (_dir() / "calls").open("a", encoding="utf-8") as f:
            f.write(prompt + "\n")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=f"answer to {prompt}"))])


class Work(TypedDict, total=False):
    topic: str
    first: str
    second: str


def build():
    model = CountingModel()

    async def work(s: Work) -> Work:
        first = (await model.ainvoke([HumanMessage(f"one {s['topic']}")])).content
        gate = _dir() / f"gate-{s['topic']}"
        while not gate.exists():
            await asyncio.sleep(0.05)
        second = (await model.ainvoke([HumanMessage(f"two {s['topic']}")])).content
        return {"first": str(first), "second": str(second)}

    b = StateGraph(Work)
    b.add_node(work)
    b.add_edge(START, "work")
    b.add_edge("work", END)
    return b.compile()
