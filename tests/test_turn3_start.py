"""A recorded run's start beside a foreign saver goes with its first tape write (issue 13, benchmark 3).

Beside a user's saver the tape promises only that a crash loses at most the
last ``FLUSH_INTERVAL`` of it: the run's row and start events need no
transaction of their own, and a conversation turn shorter than that writes
once, at its end. With graphtape's own saver (recovery reads the start), for
a replay and for a run whose caller chose its id, the start is written at once.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

import graphtape
from graphtape.errors import StoreError
from graphtape.record import checkpoints as checkpoints_mod
from tests.graphs import counter_line as line


def count_writes(tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    real = tape.store.write
    n = [0]

    def counted(batch: Any, **kw: Any) -> None:
        n[0] += 1
        real(batch, **kw)

    monkeypatch.setattr(tape.store, "write", counted)
    return n


def test_a_short_run_beside_a_foreign_saver_writes_once(tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    holder: list[Any] = []
    rec = tape.record(
        line(3, probe=lambda n: seen.append(tape.store.get_run(holder[0].run_ids[-1]))),
        name="line",
        checkpointer=InMemorySaver(),
    )
    holder.append(rec)
    writes = count_writes(tape, monkeypatch)
    for _ in range(3):
        rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}})
        assert rec.last_status == "finished"
    assert writes[0] == 3  # one transaction per run: start, events and end together
    assert seen[0] is None  # not on the store while it ran (shorter than FLUSH_INTERVAL)
    runs = tape.store.list_runs(thread_id="t")
    assert [r.status for r in runs] == ["finished"] * 3
    for run in runs:
        kinds = [r.kind for r in tape.store.events(run.run_id)]
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    # the thread's chain of runs is kept
    assert runs[0].parent_run_id == runs[1].run_id and runs[1].parent_run_id == runs[2].run_id


def test_own_saver_writes_the_start_at_once(tape: graphtape.Tape) -> None:
    seen: list[Any] = []
    holder: list[Any] = []
    rec = tape.record(line(2, probe=lambda n: seen.append(tape.store.get_run(holder[0].run_ids[-1]))), name="line")
    holder.append(rec)
    rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}})
    assert seen[0] is not None and seen[0].status == "running"


def test_a_run_whose_caller_chose_its_id_is_listed_at_once(tape: graphtape.Tape) -> None:
    seen: list[Any] = []
    rec = tape.record(line(2, probe=lambda n: seen.append(tape.store.get_run("chosen"))), checkpointer=InMemorySaver())
    rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}, "run_id": "chosen"})
    assert seen[0] is not None and seen[0].status == "running"


def test_a_long_run_is_listed_within_the_flush_interval(tape: graphtape.Tape) -> None:
    """The first background write is due FLUSH_INTERVAL after the run began, and carries its start."""
    seen: list[Any] = []
    holder: list[Any] = []
    rec = tape.record(
        line(12, probe=lambda n: seen.append(tape.store.get_run(holder[0].run_ids[-1])), pause=0.02),
        name="line",
        checkpointer=InMemorySaver(),
    )
    holder.append(rec)
    rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}})
    assert seen[0] is None
    assert any(run is not None and run.status == "running" for run in seen)


def test_the_first_write_is_due_an_interval_after_the_run_began(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not an interval after the first checkpoint: that would leave the start unwritten longer."""

    class FakeSession:
        def flush(self) -> None:
            pass

    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 1.0)
    flusher = checkpoints_mod.TapeFlusher()
    s = FakeSession()
    flusher.began(s)  # type: ignore[arg-type]
    flusher._asked[id(s)] -= 2.0  # the run began long ago (its first checkpoint comes late)
    flusher.ask(s)  # type: ignore[arg-type]
    assert id(s) in flusher._due
    flusher.forget(s)  # type: ignore[arg-type]


def test_a_failed_first_write_still_lists_the_run(tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch) -> None:
    """The background write carrying the start fails and the run stops: its end tries the start once more."""
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 0.0)
    real = tape.store.write
    failed: list[bool] = []

    def flaky(batch: Any, **kw: Any) -> None:
        if batch.new_runs and not failed:
            failed.append(True)
            raise StoreError("the store went away for a moment")
        real(batch, **kw)

    monkeypatch.setattr(tape.store, "write", flaky)
    rec = tape.record(line(6, pause=0.01), name="line", checkpointer=InMemorySaver())
    with pytest.raises(StoreError):
        rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}})
    run = tape.store.get_run(rec.last_run_id or "")
    assert run is not None and run.status == "running"
    assert next(r.kind for r in tape.store.events(run.run_id)) == "run_started"
