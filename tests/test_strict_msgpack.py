"""A recorded graph reads its state back as the unrecorded graph does under ``LANGGRAPH_STRICT_MSGPACK``.

With strict msgpack on, LangGraph's compile gives a graph's saver an allowlist of the graph's own
types, and a value of any other type comes back from a checkpoint as a dict. graphtape sets its
own saver on a copy of the graph (``Pregel.copy`` does not keep the allowlist) and wraps a user's
saver in ``TapSaver``; both must carry the list, or the next turn of a recorded thread finds a dict
where its code expects the object.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import graphtape
from graphtape.record.checkpoints import TapSaver
from graphtape.runtime.saver import GraphtapeSaver

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, sys
    from typing import TypedDict

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    import graphtape


    @dataclasses.dataclass
    class Order:
        qty: int


    class State(TypedDict):
        order: Order


    def bump(state: State) -> dict:
        # the second turn reads the first turn's Order back from the checkpoint
        return {"order": Order(state["order"].qty + 1)}


    builder = StateGraph(State)
    builder.add_node("bump", bump)
    builder.add_edge(START, "bump")
    builder.add_edge("bump", END)


    def two_turns(graph, thread):
        cfg = {"configurable": {"thread_id": thread}}
        out = {}
        try:
            graph.invoke({"order": Order(1)}, cfg)
            graph.invoke({}, cfg)
            out["qty"] = graph.get_state(cfg).values["order"].qty
        except Exception as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
        return out


    serde = InMemorySaver().serde
    results = {"strict": type(serde.loads_typed(serde.dumps_typed(Order(1)))).__name__ == "dict"}
    results["unrecorded"] = two_turns(builder.compile(checkpointer=InMemorySaver()), "u")
    tape = graphtape.connect(sys.argv[1])
    results["beside InMemorySaver"] = two_turns(tape.record(builder.compile(), checkpointer=InMemorySaver()), "m")
    recorded = tape.record(builder.compile(), checkpointer=tape.saver)
    results["graphtape saver"] = two_turns(recorded, "g")
    # as the Studio serves a graph compiled without a store: a copy of it with one
    from langgraph.store.memory import InMemoryStore
    from graphtape.store.kv import attach_store

    with_store = attach_store(builder.compile(), InMemoryStore())
    results["store attached"] = two_turns(tape.record(with_store, checkpointer=tape.saver), "s")
    replay = tape.replay(recorded.last_run_id, builder.compile())
    results["replay"] = {"status": replay.status, "divergence": replay.divergence is not None, "live": replay.live}
    tape.close()
    print(json.dumps(results))
    """
)


def test_recorded_threads_read_their_own_types_back_under_strict_msgpack(store_url, tmp_path):
    script = tmp_path / "strict_run.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(script), store_url], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    # strict mode is on in the child: a type outside the allowlist comes back as a dict
    assert results["strict"] is True
    assert results["unrecorded"] == {"qty": 3}
    assert results["beside InMemorySaver"] == {"qty": 3}
    assert results["graphtape saver"] == {"qty": 3}
    assert results["store attached"] == {"qty": 3}
    assert results["replay"] == {"status": "finished", "divergence": False, "live": 0}


@dataclasses.dataclass
class Item:
    n: int


ITEM = (Item.__module__, "Item")


def _strict() -> JsonPlusSerializer:
    return JsonPlusSerializer(allowed_msgpack_modules=None)


def test_tap_saver_puts_the_allowlist_on_the_saver_it_wraps():
    tap = TapSaver(InMemorySaver(serde=_strict()))
    assert type(tap.inner.serde.loads_typed(tap.inner.serde.dumps_typed(Item(1)))) is dict
    allowed = tap.with_allowlist({ITEM})
    assert isinstance(allowed, TapSaver) and allowed is not tap
    assert allowed.inner.serde.loads_typed(allowed.inner.serde.dumps_typed(Item(2))) == Item(2)
    assert tap.inner.serde.loads_typed(tap.inner.serde.dumps_typed(Item(3))) != Item(3)  # the original is unchanged


def test_attaching_a_store_keeps_the_graphs_allowlist():
    from langgraph.graph import END, START, StateGraph
    from langgraph.store.memory import InMemoryStore

    from graphtape.store.kv import attach_store

    builder = StateGraph(dict)
    builder.add_node("n", lambda state: state)
    builder.add_edge(START, "n")
    builder.add_edge("n", END)
    graph = builder.compile()
    graph._serde_allowlist = {ITEM}  # what compile sets under LANGGRAPH_STRICT_MSGPACK
    served = attach_store(graph, InMemoryStore())
    assert served is not graph and served.store is not None
    assert served._serde_allowlist == {ITEM}


def test_graphtape_saver_clone_reads_message_lists_with_the_new_serializer(tmp_path):
    tape = graphtape.connect(f"sqlite:///{tmp_path}/t.db")
    try:
        saver = GraphtapeSaver(tape.store, serde_=_strict())
        allowed = saver.with_allowlist({ITEM})
        assert isinstance(allowed, GraphtapeSaver) and allowed is not saver
        assert allowed._lists.serde is allowed.serde
        assert saver._lists.serde is saver.serde
        assert allowed.serde.loads_typed(allowed.serde.dumps_typed(Item(4))) == Item(4)
        assert allowed._last is saver._last  # the caches of what was written are shared
    finally:
        tape.close()
