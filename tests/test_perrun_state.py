"""A replayed run reads its state back only when it may have paused (recorder._needs_state)."""

from __future__ import annotations

import pytest

from graphtape import recorder as recorder_mod
from tests import graphs
from tests.graphs import forbid


@pytest.fixture
def state_reads(monkeypatch):
    reads: list[object] = []
    real = recorder_mod.RecordedGraph._status

    def counting(self, config, session=None):
        reads.append(config)
        return real(self, config, session)

    monkeypatch.setattr(recorder_mod.RecordedGraph, "_status", counting)
    return reads


def test_a_finished_strict_replay_does_not_read_its_state(tape, state_reads):
    rec = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    rec.invoke({"topic": ""})
    state_reads.clear()
    with forbid():
        result = tape.replay(rec.last_run_id, graphs.build_linear())
    assert result.status == "finished" and result.output_matches
    assert state_reads == []
    # the held checkpoint rows were written with the run's end all the same
    assert rec.get_state({"configurable": {"thread_id": result.thread_id}}).values == result.output


def test_a_replay_that_pauses_still_reads_its_state(tape, state_reads):
    rec = tape.record(graphs.build_review(), name="review")
    rec.invoke({}, {"configurable": {"thread_id": "h-state"}})
    state_reads.clear()
    with forbid():
        result = tape.replay(rec.last_run_id, graphs.build_review())
    assert result.status == "interrupted" and len(state_reads) == 1
    assert tape.run(result.run_id).status == "interrupted"
