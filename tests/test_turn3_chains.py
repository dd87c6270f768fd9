"""A conversation's next turn knows the chain its last turn stored (issue 13, benchmark 3).

A turn's chat request is the previous turn's final state plus the new
message: the writer asked the store which prefix of it was stored (one read
per turn). The recorder now hands the final state's chain to the thread's
next run when nobody held the thread since (lease token + 1) and no run of
the thread was deleted since: deleting runs moves a free lease's token on
(``TapeStore.bumps_leases_on_delete``), so a pruned previous run, whose
chain garbage collection may have deleted, makes the next run ask again.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import graphtape
from graphtape.runtime.lease import lease_name
from graphtape.testing.models import SeededChatModel


class Chat(TypedDict):
    messages: Annotated[list, add_messages]
    turns: Annotated[int, operator.add]


def chat_graph() -> Any:
    model = SeededChatModel(seed=3, latency=0)

    def answer(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])], "turns": 1}

    b = StateGraph(Chat)
    b.add_node("answer", answer)
    b.add_edge(START, "answer")
    b.add_edge("answer", END)
    return b.compile()


def probes(tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    real = tape.store.get_chain_nodes
    n = [0]

    def counted(ids: Any) -> Any:
        n[0] += 1
        return real(ids)

    monkeypatch.setattr(tape.store, "get_chain_nodes", counted)
    return n


def turn(rec: Any, i: int) -> None:
    rec.invoke({"messages": [HumanMessage(f"question {i}")], "turns": 0}, {"configurable": {"thread_id": "c"}})
    assert rec.last_status == "finished"


def request_heads(tape: graphtape.Tape, run_id: str) -> list[str]:
    return [r.data["messages"] for r in tape.store.events(run_id) if r.kind == "llm_call"]


@pytest.fixture
def sqlite_tape(tmp_path: Any) -> Any:
    t = graphtape.connect(f"sqlite:///{tmp_path}/t.db")
    yield t
    t.close()


def test_a_conversation_turn_does_not_probe_the_store(
    sqlite_tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = sqlite_tape.record(chat_graph(), name="chat", checkpointer=InMemorySaver())
    n = probes(sqlite_tape, monkeypatch)
    for i in range(8):
        turn(rec, i)
    assert n[0] == 0
    for run_id in rec.run_ids:
        heads = request_heads(sqlite_tape, run_id)
        assert heads and all(h in sqlite_tape.store.get_chain_nodes(heads) for h in heads)


def test_a_deleted_previous_run_makes_the_next_run_ask(
    sqlite_tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = sqlite_tape.record(chat_graph(), name="chat", checkpointer=InMemorySaver())
    for i in range(6):
        turn(rec, i)
    sqlite_tape.store.delete_runs(rec.run_ids)  # a prune of the whole thread's tape, then its garbage collection
    sqlite_tape.store.collect_garbage()
    n = probes(sqlite_tape, monkeypatch)
    turn(rec, 6)
    assert n[0] == 1
    heads = request_heads(sqlite_tape, rec.last_run_id or "")
    nodes = sqlite_tape.store.get_chain_nodes(heads)
    assert heads and all(h in nodes for h in heads)  # the chain was written again, not assumed


def test_another_holder_makes_the_next_run_ask(sqlite_tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = sqlite_tape.record(chat_graph(), name="chat", checkpointer=InMemorySaver())
    for i in range(6):
        turn(rec, i)
    store = sqlite_tape.store
    assert store.acquire_lease(lease_name("c"), "someone else", 5.0) is not None
    store.release_lease(lease_name("c"), "someone else")
    n = probes(sqlite_tape, monkeypatch)
    turn(rec, 6)
    assert n[0] == 1


def test_deleting_runs_moves_a_free_lease_on_not_a_held_one(sqlite_tape: graphtape.Tape) -> None:
    rec = sqlite_tape.record(chat_graph(), name="chat", checkpointer=InMemorySaver())
    turn(rec, 0)
    turn(rec, 1)
    store = sqlite_tape.store
    name = lease_name("c")
    token = store.acquire_lease(name, "me", 5.0)
    assert token is not None
    store.delete_runs([rec.run_ids[0]])
    assert store.acquire_lease(name, "me", 5.0) == token  # held: the holder's fence stays valid
    store.release_lease(name, "me")
    store.delete_runs([rec.run_ids[1]])
    assert store.acquire_lease(name, "me", 5.0) == token + 2  # free: moved on by the delete, then the new owner
    store.release_lease(name, "me")
