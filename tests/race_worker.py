"""A worker for the race tests: appends to a thread's log through a slow graph.

Usage: ``python -m tests.race_worker STORE_URL THREAD NAME WAIT``
"""

from __future__ import annotations

import operator
import sys
import time
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph

import graphtape


class State(TypedDict, total=False):
    log: Annotated[list, operator.add]


def step(name: str):
    def node(s: State) -> dict:
        time.sleep(0.05)
        return {"log": [name]}

    return node


builder = StateGraph(State)
for i in range(4):
    builder.add_node(f"s{i}", step(f"s{i}"))
builder.add_edge(START, "s0")
for i in range(3):
    builder.add_edge(f"s{i}", f"s{i + 1}")
builder.add_edge("s3", END)
graph = builder.compile()


def main() -> None:
    url, thread, name, wait = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    tape = graphtape.connect(url)
    try:
        rec = tape.record(graph, name="race", wait=wait, checkpointer=tape.saver)
        rec.invoke({"log": [f"start-{name}"]}, {"configurable": {"thread_id": thread}})
        print("done")
    except graphtape.ThreadBusy as exc:
        print(f"busy: {exc}")
    finally:
        tape.close()


if __name__ == "__main__":
    main()
