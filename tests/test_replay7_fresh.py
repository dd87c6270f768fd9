"""A replay's first run on the thread it named for itself reads no previous run; every link stays.

A replay re-executes the runs of the target's thread, in order, in a new
thread ``replay-<new id>`` (unless the caller gives one). Nothing can have
run on that thread before, so its first run has no ``parent_run_id`` and the
recorder does not ask the store for the thread's latest run
(``RecordedGraph.new_threads``); the next runs of the chain are linked to the
previous one as in any conversation. A thread given by the caller may hold
runs already: the store is asked, as before.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from graphtape.replay import engine
from tests import graphs
from tests.graphs import forbid


def _looked_up(listings: list[dict[str, Any]], thread_id: str) -> int:
    return sum(1 for kw in listings if kw.get("thread_id") == thread_id)


def _parents(tape, run_ids: list[str]) -> list[str | None]:
    return [tape.run(rid).parent_run_id for rid in run_ids]


def _review_thread(tape, thread_id: str) -> list[str]:
    """Three runs on one thread: two stop at interrupts, the third finishes."""
    rec = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": thread_id}}
    rec.invoke({}, cfg)
    pending = rec.get_state(cfg).interrupts
    rec.invoke(Command(resume={i.id: f"ok-{i.value['question']}" for i in pending}), cfg)
    rec.invoke(Command(resume="yes"), cfg)
    return list(rec.run_ids)


def test_a_replay_of_one_run_reads_no_previous_run(tape, listings):
    rec = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
    rec.invoke({"topic": "cats"})
    listings.clear()
    with forbid():
        result = tape.replay(rec.last_run_id, graphs.build_linear())
    assert result.status == "finished", result.error
    assert _looked_up(listings, result.thread_id) == 0
    assert _parents(tape, result.run_ids) == [None]
    assert tape.run(result.run_id).replay_of == rec.last_run_id


def test_a_replayed_chain_links_each_run_to_the_one_before(tape, listings):
    recorded = _review_thread(tape, "hitl")
    listings.clear()
    with forbid():
        result = tape.replay(recorded[-1], graphs.build_review())
    assert result.status == "finished", result.error
    assert len(result.run_ids) == 3
    # the first on the new thread has none; the next ones are known from the recorder's own last run
    assert _parents(tape, result.run_ids) == [None, *result.run_ids[:-1]]
    assert [tape.run(rid).replay_of for rid in result.run_ids] == recorded
    assert _looked_up(listings, result.thread_id) == 0
    # the thread's runs, as the store lists them, are that chain
    listed = tape.store.list_runs(thread_id=result.thread_id, limit=None, newest_first=False)
    assert [r.run_id for r in listed] == result.run_ids


def test_a_replay_of_a_replay_follows_the_replayed_chain(tape, listings):
    recorded = _review_thread(tape, "hitl2")
    with forbid():
        first = tape.replay(recorded[-1], graphs.build_review())
        again = tape.replay(first.run_id, graphs.build_review())
    assert again.status == "finished", again.error
    # the chain of the first replay's last run is the first replay's three runs, replayed in order
    assert [tape.run(rid).replay_of for rid in again.run_ids] == first.run_ids
    assert _parents(tape, again.run_ids) == [None, *again.run_ids[:-1]]
    assert again.thread_id not in (first.thread_id, "hitl2")


def test_a_thread_given_by_the_caller_is_looked_up(tape, listings):
    rec = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
    rec.invoke({"topic": "cats"})
    # a run already on the thread the replay is told to use (its checkpoints elsewhere: the replay starts afresh)
    other = tape.record(graphs.build_linear(), name="linear", checkpointer=InMemorySaver())
    other.invoke({"topic": "dogs"}, {"configurable": {"thread_id": "mine"}})
    listings.clear()
    with forbid():
        result = engine.replay(tape, rec.last_run_id, graphs.build_linear(), thread_id="mine")
    assert result.status == "finished", result.error
    assert _looked_up(listings, "mine") == 1
    assert _parents(tape, result.run_ids) == [other.last_run_id]


def test_the_recorder_forgets_the_new_thread_after_its_first_run(tape, listings):
    graph = graphs.build_linear()
    rec = tape.record(graph, name="linear", checkpointer=tape.saver)
    rec.new_threads.add("fresh")
    cfg = {"configurable": {"thread_id": "fresh"}}
    rec.invoke({"topic": "a"}, cfg)
    assert rec.new_threads == set()
    assert _looked_up(listings, "fresh") == 0
    # someone else runs on the thread: the next run of this graph reads the latest run again
    tape.record(graph, name="linear", checkpointer=tape.saver).invoke({"topic": "b"}, cfg)
    listings.clear()
    rec.invoke({"topic": "c"}, cfg)
    assert _looked_up(listings, "fresh") == 1
    runs = tape.store.list_runs(thread_id="fresh", limit=None, newest_first=False)
    assert [r.parent_run_id for r in runs] == [None, runs[0].run_id, runs[1].run_id]
