"""graphtape's own timestamps and ids come from graphtape.clock, so a test can fix them."""

from __future__ import annotations

import time
import uuid

from graphtape import clock
from tests import graphs


def test_fixed_time_and_ids_inside_the_block_only():
    with clock.fixed(start=100.0, step=0.5, ids="t"):
        assert [clock.now(), clock.now(), clock.now()] == [100.0, 100.5, 101.0]
        assert [clock.new_id(), clock.new_id()] == ["t-0000000001", "t-0000000002"]
    assert abs(clock.now() - time.time()) < 60
    assert uuid.UUID(clock.new_id()).version == 4


def test_use_replaces_only_what_it_is_given_and_nests():
    with clock.use(now=lambda: 7.0):
        with clock.use(new_id=lambda: "x"):
            assert (clock.now(), clock.new_id()) == (7.0, "x")
        assert clock.now() == 7.0 and clock.new_id() != "x"
    assert clock.now() != 7.0


def test_a_recorded_run_takes_its_ids_and_times_from_the_clock(tape):
    recorded = tape.record(graphs.build_linear(), name="linear")
    with clock.fixed(start=1_000.0, step=1.0, ids="fixed"):
        recorded.invoke({"topic": ""})
    run = tape.run(recorded.last_run_id)
    assert run.run_id.startswith("fixed-") and run.thread_id.startswith("fixed-")
    assert 1_000.0 <= run.started_at < run.ended_at < 2_000.0
    rows = tape.store.events(run.run_id)
    assert rows and all(1_000.0 <= row.ts < 2_000.0 for row in rows)
    assert [row.ts for row in rows] == sorted(row.ts for row in rows)
    assert all(c.call_id.startswith("fixed-") for c in tape.calls(run.run_id))


def test_labels_and_retention_ages_read_graphtape_s_clock(tape):
    recorded = tape.record(graphs.build_linear(), name="linear")
    with clock.fixed(start=1_000.0, step=1.0, ids="fixed"):
        recorded.invoke({"topic": ""})
        run_id = recorded.last_run_id
        tape.label(run_id, "good")
    (label,) = [row for row in tape.store.events(run_id) if row.kind == "label"]
    assert 1_000.0 <= label.ts < 2_000.0
    # the run ended at about 1,000 s; a day later on graphtape's clock it is older than an hour
    with clock.use(now=lambda: 1_000.0 + 86_400):
        assert tape.prune(older_than=3_600, dry_run=True).plan.run_ids == [run_id]
    assert tape.prune(older_than=3_600, dry_run=True).plan.run_ids == [run_id]  # 1970 is old in any case
    with clock.use(now=lambda: 1_000.0 + 60):
        assert tape.prune(older_than=3_600, dry_run=True).plan.run_ids == []


def test_a_mocked_uuid4_is_left_to_the_users_code(tape):
    """A test that mocks ``uuid.uuid4`` with the values its node expects gets them all: graphtape takes
    its own ids (a run's call journal's name too) from its clock, recording and replaying."""
    from unittest import mock

    from langgraph.graph import END, START, StateGraph

    def build():
        def name_it(s: graphs.Linear) -> graphs.Linear:
            return {"topic": f"{uuid.uuid4()}:{graphs.search.invoke({'q': 'x'})}"}

        b = StateGraph(graphs.Linear)
        b.add_node("name_it", name_it)
        b.add_edge(START, "name_it")
        b.add_edge("name_it", END)
        return b.compile()

    expected = uuid.UUID(int=7)
    recorded = tape.record(build(), name="uuid")
    with mock.patch("uuid.uuid4", side_effect=[expected]) as uuid4:
        out = recorded.invoke({"topic": ""}, {"configurable": {"thread_id": "mocked"}})
    assert out["topic"].startswith(f"{expected}:") and uuid4.call_count == 1
    # the node gets the same value again: its state is the recorded one
    with mock.patch("uuid.uuid4", side_effect=[expected]) as uuid4:
        result = tape.replay(recorded.last_run_id, build())
    assert (result.status, result.divergence, result.output_matches) == ("finished", None, True), result.error
    assert uuid4.call_count == 1
