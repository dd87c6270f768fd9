"""The SQLite store's small write transaction (a completed call: one event and its blobs, fenced
by the thread's lease): the statements it runs, and that the fence still refuses a stale writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphtape.errors import LeaseLost
from graphtape.store.base import EventRow, RunRecord, WriteBatch
from graphtape.store.sqlite import SqliteTapeStore

RUN = "0b50d6b6-0480-4f4e-9d1c-3f0c1a1f2b11"


def _store(tmp_path: Path) -> tuple[SqliteTapeStore, int]:
    store = SqliteTapeStore(tmp_path / "t.db")
    token = store.acquire_lease("thread:t", "me", 60)
    assert token is not None
    store.write(WriteBatch(new_runs=[RunRecord(run_id=RUN, thread_id="t", graph="g", started_at=1.0)]))
    return store, token


def _call(seq: int) -> WriteBatch:
    h = f"{seq:032x}"
    return WriteBatch(
        blobs={h: b'{"content":"answer %d"}' % seq},
        events=[EventRow(RUN, seq, "llm_call", 2.0 + seq, {"response": h, "call_id": f"c{seq}"})],
    )


def test_a_call_write_runs_one_select(tmp_path: Path) -> None:
    store, token = _store(tmp_path)
    store.write(_call(1), fence=("thread:t", token))  # the first llm_call gives the kind its code
    seen: list[str] = []
    store._conn.set_trace_callback(seen.append)
    store.write(_call(2), fence=("thread:t", token))
    store._conn.set_trace_callback(None)
    verbs = [s.split()[0] for s in seen]
    assert verbs == ["BEGIN", "SELECT", "INSERT", "INSERT", "COMMIT"], seen
    assert [e.data["call_id"] for e in store.events(RUN)] == ["c1", "c2"]


def test_a_stale_fence_writes_nothing(tmp_path: Path) -> None:
    store, token = _store(tmp_path)
    store.write(_call(1), fence=("thread:t", token))
    assert store.acquire_lease("thread:t", "other", 60) is None  # still ours
    store.release_lease("thread:t", "me")
    newer = store.acquire_lease("thread:t", "other", 60)
    assert newer == token + 1
    with pytest.raises(LeaseLost, match=f"our token {token}, current {newer}"):
        store.write(_call(2), fence=("thread:t", token))
    with pytest.raises(LeaseLost, match="current none"):
        store.write(_call(3), fence=("thread:nobody", 1))
    # two runs in one batch take the other path
    two = _call(4)
    two.events.append(EventRow("another-run", 0, "label", 5.0, {"name": "x"}))
    with pytest.raises(LeaseLost):
        store.write(two, fence=("thread:t", token))
    assert [e.seq for e in store.events(RUN)] == [1]
    assert store.events("another-run") == []
    store.write(_call(5), fence=("thread:t", newer))
    assert [e.seq for e in store.events(RUN)] == [1, 5]


def test_events_before_their_run_row_with_a_fence(tmp_path: Path) -> None:
    store, token = _store(tmp_path)
    early = WriteBatch(events=[EventRow("early-run", 0, "label", 1.0, {"name": "first"})])
    store.write(early, fence=("thread:t", token))
    store.write(
        WriteBatch(events=[EventRow("early-run", 1, "label", 1.1, {"name": "second"})]), fence=("thread:t", token)
    )
    assert [e.data["name"] for e in store.events("early-run")] == ["first", "second"]
    store.write(WriteBatch(new_runs=[RunRecord(run_id="early-run", thread_id="t", graph="g", started_at=1.0)]))
    assert store.get_run("early-run") is not None


def test_a_batch_that_cannot_be_packed_writes_nothing(tmp_path: Path) -> None:
    """Rows are packed before the transaction: a body that is not JSON fails the write before it begins,
    and the store goes on (no transaction left open, none of the batch's rows written)."""
    store, token = _store(tmp_path)
    bad = _call(1)
    bad.events.append(EventRow(RUN, 2, "label", 3.0, {"value": object()}))
    with pytest.raises(TypeError):
        store.write(bad, fence=("thread:t", token))
    assert not store._conn.in_transaction
    assert store.events(RUN) == [] and store.get_blobs([f"{1:032x}"]) == {}
    store.write(_call(3), fence=("thread:t", token))
    assert [e.seq for e in store.events(RUN)] == [3]
