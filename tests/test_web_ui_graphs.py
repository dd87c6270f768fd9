"""Graphs the browser tests serve or record beside the examples: long runs (many calls, or slow steps).

``graphtape dev --graph slow=tests.test_web_ui_graphs:slow`` serves :func:`slow`;
the tests record :func:`busy_graph` directly. No tests here.
"""

from __future__ import annotations

import time
from typing import Any

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import graphtape

__all__ = ["busy_graph", "slow"]


class Busy(TypedDict):
    n: int


def busy_graph(steps: int, calls: int, pause: float) -> Any:
    """A graph looping ``steps`` times over a node that makes ``calls`` effect calls, each ``pause`` s long."""

    @graphtape.effect(name="tick")
    def tick(i: int) -> int:
        if pause:
            time.sleep(pause)
        return i

    def work(state: Busy) -> dict[str, int]:
        for i in range(calls):
            tick(i)
        return {"n": state["n"] + 1}

    g = StateGraph(Busy)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", lambda s: "work" if s["n"] < steps else END, {"work": "work", END: END})
    return g.compile()


def slow() -> Any:
    """A run of about 30 s (60 steps of 0.5 s): long enough to watch, cancel or interrupt."""
    return busy_graph(60, 1, 0.5)
