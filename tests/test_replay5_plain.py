"""A strict replay's events are stored as plain JSON, not deflated (issue 13, benchmark 2).

Deflating each event with the preset dictionary was about a tenth of a
strict replay's CPU, for rows that repeat the replayed run's with new ids.
``codec.pack_event_plain`` stores their compact JSON, a form every reader
already reads (``unpack_event``); a recording's events are deflated as before.
"""

from __future__ import annotations

import sqlite3
from typing import Any, TypedDict

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph

from graphtape.store import codec
from graphtape.testing import SeededChatModel


class State(TypedDict):
    topic: str
    answer: str


def _graph() -> Any:
    model = SeededChatModel(seed=2, latency=0)

    def ask(state: State) -> dict[str, Any]:
        return {"answer": str(model.invoke([HumanMessage(f"tell me about {state['topic']} " * 8)]).content)}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile()


def test_plain_pack_is_what_unpack_reads() -> None:
    data = {"call_id": "7344814e-bfe9-49cc-a237-a05b7097bddb", "response": "80b734932661d4e784bea187cc56630a", "x": 1}
    packed = codec.pack_event_plain(data)
    assert packed == codec._event_json(data).encode()
    assert codec.unpack_event(packed) == data == codec.unpack_event(codec.pack_event_compact(data))


def test_replay_events_read_back_the_same(tape: Any) -> None:
    graph = _graph()
    recorded = tape.record(graph, name="plain")
    recorded.invoke({"topic": "refunds", "answer": ""}, {"configurable": {"thread_id": "t1"}})
    result = tape.replay(recorded.last_run_id, graph, mode="strict")
    assert result.status == "finished" and result.served == 1
    rows = tape.store.events(result.run_id)
    assert [r.kind for r in rows][:1] == ["run_started"] and rows[-1].kind == "run_finished"
    call = next(r for r in rows if r.kind == "llm_call")
    assert call.data["source"] == "tape" and call.data["served_from"]


def test_sqlite_stores_replay_events_plain_and_recordings_deflated(tmp_path: Any) -> None:
    import graphtape

    url = f"sqlite:///{tmp_path}/plain.db"
    tape = graphtape.connect(url)
    try:
        graph = _graph()
        recorded = tape.record(graph, name="plain")
        recorded.invoke({"topic": "refunds", "answer": ""}, {"configurable": {"thread_id": "t1"}})
        result = tape.replay(recorded.last_run_id, graph, mode="strict")
        conn = sqlite3.connect(tmp_path / "plain.db")
        try:
            run_keys = dict(conn.execute("SELECT run_id, run_key FROM gt_run_rows").fetchall())

            def bodies(run_id: str) -> list[bytes]:
                rows = conn.execute("SELECT data FROM gt_event_rows WHERE run_key=?", (run_keys[run_id],))
                return [bytes(r[0]) for r in rows]

            replayed, original = bodies(result.run_id), bodies(recorded.last_run_id)
        finally:
            conn.close()
        assert replayed and all(b.startswith(b"{") for b in replayed)
        assert any(b[:1] in (b"\x01", b"\x02") for b in original)  # the recording's: deflated as before
    finally:
        tape.close()
