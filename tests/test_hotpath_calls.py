"""The tape writer's hot path: rows buffered during a store write, failed writes, lazy fields (issue 13)."""

from __future__ import annotations

import operator
import threading
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph

import graphtape
from graphtape import serde
from graphtape.record.writer import Lazy, TapeWriter
from graphtape.store.base import WriteBatch
from graphtape.testing import SeededChatModel


class SlowStore:
    """A store whose writes block until released (or fail once when told to); keeps what it wrote."""

    def __init__(self) -> None:
        self.batches: list[WriteBatch] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.fail_next = False

    def write(self, batch: WriteBatch, *, fence: Any = None) -> None:
        self.entered.set()
        assert self.release.wait(10)
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("store went away")
        self.batches.append(batch)

    def get_chain_nodes(self, ids: list[str]) -> set[str]:
        return set()

    def events(self) -> list[tuple[int, str]]:
        return [(e.seq, e.kind) for b in self.batches for e in b.events]


def test_rows_are_buffered_while_a_flush_writes() -> None:
    """A call recorded on the run's thread never waits for the store write of another thread's flush."""
    store = SlowStore()
    writer = TapeWriter(store, "run")  # type: ignore[arg-type]
    writer.event("first", {})
    store.release.clear()
    flusher = threading.Thread(target=writer.flush)
    flusher.start()
    assert store.entered.wait(10)
    # the flush is inside the store write now; buffering must not block on it
    done = threading.Event()

    def record() -> None:
        writer.put_json({"answer": 42})
        writer.event("second", {"x": 1})
        done.set()

    threading.Thread(target=record).start()
    assert done.wait(5), "buffering a row waited for the store write"
    store.release.set()
    flusher.join(10)
    writer.flush()
    assert store.events() == [(0, "first"), (1, "second")]
    assert serde.digest(serde.stored_json({"answer": 42})) in store.batches[1].blobs


def test_a_failed_write_keeps_its_rows_for_the_next_flush() -> None:
    store = SlowStore()
    writer = TapeWriter(store, "run")  # type: ignore[arg-type]
    writer.event("a", {})
    h = writer.put_json({"v": 1})
    checkpoint = WriteBatch()
    checkpoint.blobs["ck"] = b"{}"
    checkpoint.checkpoints.append(object())  # type: ignore[arg-type]
    store.fail_next = True
    with pytest.raises(ConnectionError):
        writer.flush(extra=checkpoint)
    writer.event("b", {})
    writer.flush()
    (batch,) = store.batches
    assert [(e.seq, e.kind) for e in batch.events] == [(0, "a"), (1, "b")]
    assert h in batch.blobs
    # the checkpoint handed over with the failed flush is not written later: its saver saw the error
    assert batch.checkpoints == []
    # once written, a blob is not sent again
    writer.put_json({"v": 1})
    writer.event("c", {})
    writer.flush()
    assert h not in store.batches[1].blobs


def test_a_lazy_field_is_resolved_with_its_blob_in_the_same_batch() -> None:
    store = SlowStore()
    writer = TapeWriter(store, "run")  # type: ignore[arg-type]
    writer.event("task_finished", {"writes": Lazy(lambda: writer.put_json({"out": [1, 2]}))})
    writer.flush()
    (batch,) = store.batches
    (event,) = batch.events
    ref = event.data["writes"]
    assert isinstance(ref, str) and ref in batch.blobs


def test_a_failing_lazy_field_is_tried_again() -> None:
    store = SlowStore()
    writer = TapeWriter(store, "run")  # type: ignore[arg-type]
    calls = []

    def resolve() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("not yet")
        return writer.put_json("done")

    writer.event("task_finished", {"writes": Lazy(resolve)})
    with pytest.raises(ValueError):
        writer.flush()
    assert store.batches == []
    writer.flush()
    (batch,) = store.batches
    assert batch.events[0].data["writes"] in batch.blobs


def test_the_message_memo_keeps_to_its_byte_budget(monkeypatch) -> None:
    from langchain_core.messages import HumanMessage

    from graphtape.record import writer as writer_mod

    monkeypatch.setattr(writer_mod, "_FORMS", {})
    monkeypatch.setattr(writer_mod, "_forms_bytes", 0)
    monkeypatch.setattr(writer_mod, "MEMO_BYTES", 20_000)
    for i in range(200):
        writer_mod.message_form(HumanMessage("x" * 500, id=f"m{i}"))
        assert writer_mod._forms_bytes <= 20_000
    assert 0 < len(writer_mod._FORMS) < 200
    # the newest messages are the ones kept, and each still finds its form
    latest = HumanMessage("x" * 500, id="m199")
    assert writer_mod.message_form(latest) is writer_mod._FORMS[(HumanMessage, "m199")][2]
    assert writer_mod._forms_bytes == sum(2 * len(f.data) for _, _, f in writer_mod._FORMS.values())


def test_forms_of_new_equal_objects_reuse_the_memo_and_see_edits() -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    store = SlowStore()
    first = [HumanMessage("hi", id="hp1"), AIMessage("hello there", id="hp2")]
    forms = TapeWriter(store, "a").forms(first)  # type: ignore[arg-type]
    again = [m.model_copy(deep=True) for m in first]
    writer = TapeWriter(store, "b")  # type: ignore[arg-type]
    assert [f is g for f, g in zip(writer.forms(again), forms)] == [True, True]
    again[1].content = "edited"  # in place, after the run met the message
    edited = writer.forms(again)
    assert edited[0] is forms[0] and edited[1].h != forms[1].h
    assert edited[1].js["content"] == "edited"
    changed = [HumanMessage("hi", id="hp1"), AIMessage("something else", id="hp2")]  # same id, new content
    assert writer.forms(changed)[1].js["content"] == "something else"


# -- a strict replay writes its checkpoints once ------------------------------------------------


class Notes(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]


def notes_graph(model: Any, nodes: int = 4) -> Any:
    def step(state: Notes) -> dict[str, Any]:
        answer = model.invoke([HumanMessage(f"continue: {state['notes'][-1] if state['notes'] else state['topic']}")])
        return {"notes": [str(answer.content)]}

    b = StateGraph(Notes)
    prev = START
    for i in range(nodes):
        b.add_node(f"n{i}", step)
        b.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    b.add_edge(prev, END)
    return b.compile()


def _count_writes(tape: graphtape.Tape, monkeypatch: Any) -> list[WriteBatch]:
    seen: list[WriteBatch] = []
    original = tape.store.write

    def spy(batch: WriteBatch, **kw: Any) -> None:
        seen.append(batch)
        original(batch, **kw)

    monkeypatch.setattr(tape.store, "write", spy)
    return seen


def test_a_strict_replay_writes_its_checkpoints_with_its_end(tape: graphtape.Tape, monkeypatch) -> None:
    graph = notes_graph(SeededChatModel(seed=4, latency=0))
    rec = tape.record(graph, name="notes", checkpointer=tape.saver)
    out = rec.invoke({"topic": "refunds", "notes": []}, {"configurable": {"thread_id": "t"}})
    run_id = rec.last_run_id or ""
    recorded_checkpoints = len(tape.store.list_checkpoints(thread_id="t"))
    writes = _count_writes(tape, monkeypatch)
    result = tape.replay(run_id, graph, mode="strict")
    assert result.status == "finished" and result.served == 4 and result.output == out and result.output_matches
    # the run's start (so that it is listed while it runs), then everything else at its end
    assert len(writes) <= 3, [len(b.checkpoints) for b in writes]
    assert sum(len(b.checkpoints) for b in writes) == recorded_checkpoints
    assert len(tape.store.list_checkpoints(thread_id=result.thread_id)) == recorded_checkpoints
    assert tape.store.get_run(result.run_id).status == "finished"  # type: ignore[union-attr]
    # a recording with durability="sync" still writes each checkpoint as it is made (recovery resumes
    # from it); under "async" it stores them in batches (tests/test_async_checkpoints.py)
    writes.clear()
    rec.invoke({"topic": "refunds", "notes": []}, {"configurable": {"thread_id": "t2"}}, durability="sync")
    assert len(writes) > recorded_checkpoints


def test_a_diverged_strict_replay_writes_what_it_held_and_its_report(tape: graphtape.Tape) -> None:
    flips = {"n": 0}

    def step(state: Notes) -> dict[str, Any]:
        flips["n"] += 1
        return {"notes": [f"note {flips['n'] if len(state['notes']) == 2 else 0}"]}

    b = StateGraph(Notes)
    for i in range(4):
        b.add_node(f"n{i}", step)
        b.add_edge(START if i == 0 else f"n{i - 1}", f"n{i}")
    b.add_edge("n3", END)
    graph = b.compile()
    rec = tape.record(graph, name="flip")
    rec.invoke({"topic": "x", "notes": []}, {"configurable": {"thread_id": "t"}})
    result = tape.replay(rec.last_run_id or "", graph, mode="strict")
    assert result.status == "diverged" and result.divergence is not None
    run = tape.store.get_run(result.run_id)
    assert run is not None and run.status == "diverged"
    kinds = [r.kind for r in tape.store.events(result.run_id)]
    assert "divergence" in kinds
    # the checkpoints made before the divergence are on the store
    assert len(tape.store.list_checkpoints(thread_id=result.thread_id)) == kinds.count("checkpoint") > 0


def test_a_stateful_subgraph_reads_its_checkpoint_back_in_a_strict_replay(tape: graphtape.Tape) -> None:
    """A ``checkpointer=True`` subgraph invoked twice in one run reads its first history back: not held."""

    class Count(TypedDict):
        n: int

    def bump(state: Count) -> dict[str, Any]:
        return {"n": state.get("n", 0) + 1}

    sb = StateGraph(Count)
    sb.add_node("bump", bump)
    sb.add_edge(START, "bump")
    sb.add_edge("bump", END)
    sub = sb.compile(checkpointer=True)

    class Outer(TypedDict):
        seen: Annotated[list, operator.add]

    def call_sub(state: Outer) -> dict[str, Any]:
        return {"seen": [sub.invoke({})["n"]]}

    ob = StateGraph(Outer)
    ob.add_node("call", call_sub)
    ob.add_edge(START, "call")
    ob.add_conditional_edges("call", lambda s: "call" if len(s["seen"]) < 2 else END)
    graph = ob.compile()
    rec = tape.record(graph, name="sub")
    out = rec.invoke({"seen": []}, {"configurable": {"thread_id": "t"}})
    assert out["seen"] == [1, 2]
    result = tape.replay(rec.last_run_id or "", graph, mode="strict")
    assert result.status == "finished", result.divergence
    assert result.output == out


def test_message_json_leaves_out_defaults_only() -> None:
    from langchain_core.messages import AIMessage, ToolMessage

    assert serde.message_json(AIMessage("hi", id="a1")) == {"type": "ai", "content": "hi"}
    assert serde.message_json(AIMessage("hi", id="a1"), with_id=True) == {"type": "ai", "content": "hi", "id": "a1"}
    tool = serde.message_json(ToolMessage("r", tool_call_id="c1", status="error", artifact=(1, 2)))
    assert tool == {"type": "tool", "content": "r", "tool_call_id": "c1", "artifact": [1, 2], "status": "error"}
    # a default container the caller filled in is kept (the cached default is compared with, never handed out)
    filled = AIMessage("x", additional_kwargs={"k": 1})
    assert serde.message_json(filled)["additional_kwargs"] == {"k": 1}
    assert serde.message_json(AIMessage("x")) == {"type": "ai", "content": "x"}
