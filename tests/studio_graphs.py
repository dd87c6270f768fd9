"""Graphs served by the Studio tests: a draft approved through an interrupt, and a run that waits to be cancelled."""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

from langchain_core.messages import HumanMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from tests.graphs import RandomModel, build_agent, build_subgraph_node


class Doc(TypedDict, total=False):
    """Declared with ``typing.TypedDict``: its JSON Schema must still be served on Python 3.11."""

    topic: str
    draft: str
    approved: Any
    final: str


def build_doc():
    """draft (a model call) -> approve (an interrupt) -> publish."""
    model = RandomModel()

    def draft(s: Doc):
        get_stream_writer()({"progress": "drafting"})
        return {"draft": model.invoke([HumanMessage(f"draft about {s.get('topic', '')}")]).content}

    def approve(s: Doc):
        return {"approved": interrupt({"question": "publish?", "draft": s["draft"]})}

    def publish(s: Doc):
        return {"final": f"{s['draft']} / {s['approved']}"}

    b = StateGraph(Doc)
    b.add_node(draft)
    b.add_node(approve)
    b.add_node(publish)
    b.add_edge(START, "draft")
    b.add_edge("draft", "approve")
    b.add_edge("approve", "publish")
    b.add_edge("publish", END)
    return b.compile()


class Slow(TypedDict, total=False):
    seconds: float
    done: bool


def build_slow():
    """One node that sleeps for ``seconds``: a run to cancel."""

    async def wait(s: Slow):
        await asyncio.sleep(s.get("seconds", 30))
        return {"done": True}

    b = StateGraph(Slow)
    b.add_node(wait)
    b.add_edge(START, "wait")
    b.add_edge("wait", END)
    return b.compile()


def studio_graphs() -> dict[str, Any]:
    return {"doc": build_doc(), "agent": build_agent(), "slow": build_slow(), "nested": build_subgraph_node()}
