"""A replay does not write again what the runs it replays refer to (graphtape.replay.engine).

A served call's request and message chain, a task's writes, the input, the
versions and the output of a replay of unchanged code have the addresses of the
recording's, which the store holds. The replay's rows must still be complete:
every address they refer to is on the store, also after the recorded run is
deleted and the store's garbage collected.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph

from graphtape import events
from graphtape.store.base import WriteBatch
from tests.test_replaycost_saver import Notes, build


def _refs(tape: Any, run_id: str) -> tuple[set[str], set[str]]:
    blobs: set[str] = set()
    chains: set[str] = set()
    for row in tape.store.events(run_id):
        events.refs(row.kind, row.data, blobs, chains)
    return blobs, chains


def _complete(tape: Any, run_id: str) -> None:
    blobs, chains = _refs(tape, run_id)
    assert blobs and chains
    assert set(tape.store.get_blobs(blobs)) == blobs
    found = tape.store.get_chain_nodes(chains)
    assert set(found) == chains
    # and every chain's nodes and items, to its root
    for head in chains:
        hashes = tape.store.get_chain(head)
        assert hashes and set(tape.store.get_blobs(hashes)) == set(hashes)


def _batches(tape: Any, monkeypatch: Any) -> list[WriteBatch]:
    seen: list[WriteBatch] = []
    original = type(tape.store).write

    def spy(self: Any, batch: WriteBatch, **kwargs: Any) -> Any:
        seen.append(batch)
        return original(self, batch, **kwargs)

    monkeypatch.setattr(type(tape.store), "write", spy)
    return seen


def test_a_strict_replay_writes_no_recorded_address_again_and_stays_complete(tape, monkeypatch) -> None:
    graph = build()
    rec = tape.record(graph)
    rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "r"}})
    recorded_blobs, recorded_chains = _refs(tape, rec.last_run_id)
    batches = _batches(tape, monkeypatch)
    result = tape.replay(rec.last_run_id, graph, mode="strict")
    assert result.status == "finished" and result.served == 6 and result.output_matches
    sent_blobs = {h for b in batches for h in b.blobs}
    sent_chains = {c for b in batches for c in b.chains}
    # requests, message chains, task writes, input, versions and output: none sent again
    assert not sent_blobs & recorded_blobs, sent_blobs & recorded_blobs
    assert not sent_chains, sent_chains
    replay_blobs, replay_chains = _refs(tape, result.run_id)
    assert len(replay_blobs & recorded_blobs) >= 10 and replay_chains <= recorded_chains
    _complete(tape, result.run_id)
    # the recorded run gone and the store's garbage collected: the replay keeps what it refers to
    tape.store.delete_runs([rec.last_run_id])
    tape.store.collect_garbage()
    _complete(tape, result.run_id)
    # and a replay of the replay (whose own rows are what it reads now) is complete too
    again = tape.replay(result.run_id, graph, mode="strict")
    assert again.status == "finished" and again.output_matches
    _complete(tape, again.run_id)


def test_a_replay_with_live_calls_is_complete(tape) -> None:
    graph = build(2)
    rec = tape.record(graph)
    rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "r"}})
    result = tape.invalidate_from(rec.last_run_id, "n1", graph)
    assert result.status == "finished" and result.live >= 1 and result.served >= 1
    _complete(tape, result.run_id)
    tape.store.delete_runs([rec.last_run_id])
    tape.store.collect_garbage()
    _complete(tape, result.run_id)


def test_a_prune_during_a_strict_replay_keeps_what_the_replay_refers_to(tape) -> None:
    """The replay is listed as running from its start: the run it replays (whose blobs its rows
    refer to without writing them again) is not pruned while it runs."""
    from tests.graphs import RandomModel

    model = RandomModel()
    pruning = {"on": False, "result": None}

    def step(s: Notes) -> dict[str, Any]:
        answer = model.invoke([HumanMessage(f"0: {s['topic']}")])
        if pruning["on"]:
            pruning["result"] = tape.prune(older_than=0)  # mid-replay: every finished run is old enough
            tape.store.collect_garbage()
        return {"notes": [str(answer.content)]}

    b = StateGraph(Notes)
    b.add_node("n0", step)
    b.add_edge(START, "n0")
    b.add_edge("n0", END)
    graph = b.compile()
    rec = tape.record(graph)
    rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "r"}})
    pruning["on"] = True
    result = tape.replay(rec.last_run_id, graph, mode="strict")
    assert result.status == "finished" and result.output_matches
    assert pruning["result"] is not None
    assert tape.store.get_run(rec.last_run_id) is not None  # kept: replayed by a running run
    _complete(tape, result.run_id)


def test_a_strict_replay_that_fails_is_written_with_its_start(tape) -> None:
    graph = build()
    rec = tape.record(graph)
    rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "r"}})
    result = tape.replay(rec.last_run_id, build(4), mode="strict")  # one node more: not on the tape
    assert result.status == "diverged"
    run = tape.run(result.run_id)
    assert run.status == "diverged"
    kinds = [row.kind for row in tape.store.events(result.run_id)]
    assert kinds[0] == events.RunStarted.KIND and events.Divergence.KIND in kinds


def test_a_strict_replay_reads_nothing_back_of_the_runs_it_made(tape, monkeypatch) -> None:
    graph = build()
    rec = tape.record(graph)
    rec.invoke({"topic": "t", "notes": []}, {"configurable": {"thread_id": "r"}})
    read: list[str] = []
    original = type(tape.store).events

    def spy(self: Any, run_id: str, kinds: Any = None) -> Any:
        read.append(run_id)
        return original(self, run_id, kinds)

    monkeypatch.setattr(type(tape.store), "events", spy)
    result = tape.replay(rec.last_run_id, graph, mode="strict")
    assert result.status == "finished" and result.output_matches is True and result.served == 6
    assert read == [rec.last_run_id]  # the recording, once; the replay's end is known as written
