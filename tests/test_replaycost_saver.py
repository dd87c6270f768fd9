"""A strict replay's checkpoints are saved in line, on the replaying thread (graphtape.replay.saver).

The rows must be the ones graphtape's saver writes (tests/test_shapes.py compares
the replay's history with the recording's); these tests pin what changed: where
the calls run, that a failure still stops the run, which replays use the replay
saver, that a recording beside an ``InMemorySaver`` saves in line too, and that
savers doing I/O and unrecorded runs still save on LangGraph's threads.
"""

from __future__ import annotations

import operator
import threading
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from graphtape.replay.saver import ReplaySaver
from graphtape.runtime.saver import GraphtapeSaver
from tests.graphs import RandomModel, search


class Notes(TypedDict, total=False):
    topic: str
    notes: Annotated[list, operator.add]


def build(n: int = 3, checkpointer: Any = None):
    model = RandomModel()

    def node(i: int):
        def step(s: Notes) -> dict[str, Any]:
            answer = model.invoke([HumanMessage(f"{i}: {s['notes'][-1] if s['notes'] else s['topic']}")])
            return {"notes": [f"{answer.content} | {search.invoke({'q': str(answer.content)})}"]}

        return step

    b = StateGraph(Notes)
    prev = START
    for i in range(n):
        b.add_node(f"n{i}", node(i))
        b.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    b.add_edge(prev, END)
    return b.compile(checkpointer=checkpointer)


def _threads_of(monkeypatch, cls: type) -> list[tuple[str, bool]]:
    """(method, ran on the calling thread) of every put/put_writes on ``cls`` from now on."""
    seen: list[tuple[str, bool]] = []
    main = threading.get_ident()
    for name in ("put", "put_writes"):
        original = getattr(cls, name)

        def spy(self, *args, __original=original, __name=name, **kwargs):
            seen.append((__name, threading.get_ident() == main))
            return __original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, spy)
    return seen


def test_strict_replay_saves_in_line_with_the_recording_history(tape, monkeypatch):
    graph = build()
    rec = tape.record(graph, checkpointer=tape.saver)
    rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "r"}})
    seen = _threads_of(monkeypatch, ReplaySaver)
    result = tape.replay(rec.last_run_id, graph, mode="strict")
    assert result.status == "finished" and result.served == 6 and result.output_matches
    # every checkpoint (the input, step 0 and 3 steps) and every task's writes, on the replaying thread
    assert [n for n, _ in seen].count("put") == 5
    assert [n for n, _ in seen].count("put_writes") >= 3
    assert all(on_main for _, on_main in seen), seen

    def history(thread: str) -> list:
        snaps = list(rec.get_state_history({"configurable": {"thread_id": thread}}))
        return [(s.values, s.next, s.metadata.get("step")) for s in reversed(snaps)]

    assert history("r") == history(result.thread_id)


def test_a_failing_save_fails_the_replay(tape, monkeypatch):
    graph = build()
    rec = tape.record(graph, checkpointer=tape.saver)
    rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "r"}})

    def broken(self, *args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(ReplaySaver, "put_writes", broken)
    result = tape.replay(rec.last_run_id, graph, mode="strict")
    assert result.status == "failed"
    assert "disk on fire" in (result.error or "")


def test_other_savers_still_save_on_langgraph_threads(tape, monkeypatch):
    # graphtape's saver in an unrecorded run, and a user's saver: LangGraph's executor as before (a
    # recording's saves on graphtape's saver run in line: tests/test_async_checkpoints.py)
    from graphtape.runtime.saver import saver_for

    seen = _threads_of(monkeypatch, GraphtapeSaver)
    build(checkpointer=saver_for(tape.store)).invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "r"}})
    assert seen and not any(on_main for _, on_main in seen)
    mem = InMemorySaver()
    seen_mem = _threads_of(monkeypatch, InMemorySaver)
    build(checkpointer=mem).invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "m"}})
    assert seen_mem and not any(on_main for _, on_main in seen_mem)


@pytest.mark.parametrize("kind", ["flight", "own_saver", "new_run_id"])
def test_which_replays_use_the_replay_saver(tape, kind):
    from graphtape.replay import engine

    graph = build(checkpointer=InMemorySaver() if kind == "own_saver" else None)
    mode = "flight" if kind == "flight" else "strict"
    new_run_id = "00000000-0000-4000-8000-000000000001" if kind == "new_run_id" else None
    # graphtape's saver as it is, or the graph's own: the replay's thread persists either way
    assert engine._saver(tape, graph, mode, None, new_run_id) is (
        graph.checkpointer if kind == "own_saver" else tape.saver
    )
    assert isinstance(engine._saver(tape, build(), "strict", None, None), ReplaySaver)


async def test_async_strict_replay_saves_without_a_thread(tape, monkeypatch):
    graph = build()
    rec = tape.record(graph, checkpointer=tape.saver)
    await rec.ainvoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "ra"}})
    seen = _threads_of(monkeypatch, ReplaySaver)
    result = await tape.areplay(rec.last_run_id, graph, mode="strict")
    assert result.status == "finished" and result.output_matches
    assert seen and all(on_main for _, on_main in seen), seen


def test_a_recording_beside_an_in_memory_saver_saves_in_line(tape, monkeypatch, tmp_path):
    """Its saves are dictionary updates: in line, as graphtape's buffering saves; a saver doing I/O
    (here LangGraph's SqliteSaver) keeps LangGraph's threads, and so does an unrecorded run."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    seen = _threads_of(monkeypatch, InMemorySaver)
    graph = build()
    rec = tape.record(graph, checkpointer=InMemorySaver())
    out = rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "m"}})
    assert len(out["notes"]) == 3
    assert {name for name, _ in seen} == {"put", "put_writes"} and all(on_main for _, on_main in seen)
    assert len(list(rec.get_state_history({"configurable": {"thread_id": "m"}}))) == 5
    seen.clear()
    build(checkpointer=InMemorySaver()).invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "u"}})
    assert seen and not any(on_main for _, on_main in seen)
    conn = sqlite3.connect(tmp_path / "user.db", check_same_thread=False)
    try:
        seen_sqlite = _threads_of(monkeypatch, SqliteSaver)
        tape.record(graph, checkpointer=SqliteSaver(conn)).invoke(
            {"topic": "t", "notes": []}, {"configurable": {"thread_id": "s"}}
        )
        puts = [on_main for name, on_main in seen_sqlite if name == "put"]
        assert puts and not any(puts)
    finally:
        conn.close()
