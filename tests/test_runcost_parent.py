"""A run's ``parent_run_id`` without a store read when the recorder knows it (RecordedGraph._previous_run).

The parent of a run is the thread's latest run. A recorded graph that started
the thread's last run itself, with nobody holding the thread's lease since
(the token it gets is its last one plus one), knows it; a thread id the
recorder made up has no run before. Anything else is read from the store.
"""

from __future__ import annotations

from langgraph.checkpoint.memory import InMemorySaver

from graphtape.runtime.lease import lease_name
from tests import graphs


def _parents(tape, thread_id: str) -> list[tuple[str, str | None]]:
    runs = tape.store.list_runs(thread_id=thread_id, limit=None, newest_first=False)
    return [(r.run_id, r.parent_run_id) for r in runs]


def test_a_conversation_reads_the_latest_run_once(tape, listings):
    rec = tape.record(graphs.build_linear(), checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "conv"}}
    for _ in range(4):
        rec.invoke({"topic": ""}, cfg)
    assert len(listings) == 1  # the first turn only: the thread could have runs from elsewhere
    runs = _parents(tape, "conv")
    assert [p for _, p in runs] == [None] + [r for r, _ in runs[:-1]]


def test_a_run_by_someone_else_in_between_is_read(tape, listings):
    mine = tape.record(graphs.build_linear(), checkpointer=InMemorySaver())
    other = tape.record(graphs.build_linear(), checkpointer=InMemorySaver())  # another process, as far as leases go
    cfg = {"configurable": {"thread_id": "shared"}}
    mine.invoke({"topic": ""}, cfg)
    other.invoke({"topic": ""}, cfg)
    listings.clear()
    mine.invoke({"topic": ""}, cfg)
    assert len(listings) == 1  # the token moved on by two: read
    runs = _parents(tape, "shared")
    assert runs[2][1] == runs[1][0] and runs[1][1] == runs[0][0]


def test_the_lease_taken_and_given_back_in_between_is_read(tape, listings):
    rec = tape.record(graphs.build_linear(), checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "held"}}
    rec.invoke({"topic": ""}, cfg)
    # e.g. an archive or a prune holding the thread for a moment
    assert tape.store.acquire_lease(lease_name("held"), "someone-else", 5.0) is not None
    tape.store.release_lease(lease_name("held"), "someone-else")
    listings.clear()
    rec.invoke({"topic": ""}, cfg)
    assert len(listings) == 1


def test_a_thread_the_recorder_made_up_has_no_previous_run(tape, listings):
    rec = tape.record(graphs.build_linear(), checkpointer=InMemorySaver())
    rec.invoke({"topic": ""})
    rec.invoke({"topic": ""}, {"configurable": {}})
    assert listings == []
    assert all(tape.store.get_run(r).parent_run_id is None for r in rec.run_ids)
