"""A super-step's batch goes with PostgreSQL's own ``$n`` placeholders (cached), a big batch with psycopg's.

psycopg caches its ``%b`` -> ``$n`` conversion only up to 50 parameters; a
step's batch has more, so the store numbers the placeholders itself and
sends strings as text of unknown type. These tests pin both paths and the
values whose typing could differ between them.
"""

from __future__ import annotations

import os
import uuid

import pytest

psycopg = pytest.importorskip("psycopg")

from graphtape.errors import StoreError  # noqa: E402
from graphtape.store import postgres  # noqa: E402
from graphtape.store.base import CheckpointRow, EventRow, RunRecord, WriteBatch, WriteRow  # noqa: E402
from graphtape.store.postgres import VALUES_ROWS, PostgresTapeStore, numbered_query  # noqa: E402
from tests.pg_schema import fresh_schema, schema_url  # noqa: E402


@pytest.fixture(scope="module")
def store():
    with fresh_schema() as (_, name):
        s = PostgresTapeStore(schema_url(name))
        try:
            yield s
        finally:
            s.close()


def test_numbered_query_numbers_placeholders_in_order():
    assert numbered_query("WITH w0 AS (INSERT INTO t VALUES (%b, %b::jsonb)) SELECT f(%b, %b)") == (
        "WITH w0 AS (INSERT INTO t VALUES ($1, $2::jsonb)) SELECT f($3, $4)"
    )
    assert numbered_query("SELECT 1") == "SELECT 1"


def test_numbered_query_refuses_other_placeholders():
    with pytest.raises(StoreError, match="placeholder"):
        numbered_query("SELECT %s, %b")


def spy_cursors(monkeypatch):
    used: list[str] = []
    real = psycopg.RawCursor

    class Spy(real):  # type: ignore[misc, valid-type]
        def execute(self, query, params=None, **kw):
            used.append(query)
            return super().execute(query, params, **kw)

    monkeypatch.setattr(postgres.psycopg, "RawCursor", Spy)
    return used


def step_batch(tag: str, n: int) -> tuple[WriteBatch, RunRecord]:
    run = RunRecord(run_id=f"r{tag}", thread_id=f"t{tag}", graph="g", started_at=1.0, meta={"k": "v"})
    checkpoints = [
        CheckpointRow(
            f"t{tag}",
            "",
            f"cp{i:03d}",
            None,
            run.run_id,
            i,
            "loop",
            "2026-01-01T00:00:00+00:00",
            {"step": i, "nul": "a\x00b", "big": 1e23},
            b"\x00body",
            {"ch": "h"},
        )
        for i in range(n)
    ]
    writes = [WriteRow(f"t{tag}", "", "cp000", "task\ufdd0", "p", i, "ch", "h") for i in range(n)]
    events = [EventRow(run.run_id, i, "kind", 2.5, {"i": 2**40}) for i in range(n)]
    return WriteBatch(new_runs=[run], checkpoints=checkpoints, writes=writes, events=events), run


@pytest.mark.parametrize("n", [3, VALUES_ROWS + 1])
def test_a_step_batch_goes_numbered_and_a_big_one_through_psycopg(store, monkeypatch, n):
    used = spy_cursors(monkeypatch)
    tag = uuid.uuid4().hex[:8]
    batch, run = step_batch(tag, n)
    token = store.acquire_lease(f"thread:{tag}", "me", ttl=30)
    store.write(batch, fence=(f"thread:{tag}", token))
    assert (len(used) == 1) is (n <= VALUES_ROWS)
    assert all("%b" not in q and "$1" in q for q in used)
    assert store.get_run(run.run_id) == run
    assert store.events(run.run_id) == batch.events
    for row in batch.checkpoints:
        assert store.get_checkpoint(row.thread_id, "", row.checkpoint_id) == row
    assert sorted(store.get_writes(f"t{tag}", "", "cp000"), key=lambda w: w.idx) == batch.writes
    # a run update and a lease release (UPDATE ... SET with text, float and integer values) in the same path
    store.write(
        WriteBatch(
            run_updates=[(run.run_id, {"status": "done", "ended_at": 3.0, "tokens": 2**40, "meta": {"x": "\x00"}})],
            releases=[(f"thread:{tag}", "me")],
        ),
        fence=(f"thread:{tag}", token),
    )
    got = store.get_run(run.run_id)
    assert (got.status, got.ended_at, got.tokens, got.meta) == ("done", 3.0, 2**40, {"x": "\x00"})


def test_a_stale_fence_still_refuses_a_numbered_batch(store):
    tag = uuid.uuid4().hex[:8]
    token = store.acquire_lease(f"thread:{tag}", "me", ttl=30)
    batch, run = step_batch(tag, 1)
    from graphtape.errors import LeaseLost

    with pytest.raises(LeaseLost):
        store.write(batch, fence=(f"thread:{tag}", token + 1))
    assert store.get_run(run.run_id) is None


def test_large_blobs_are_deflated_once_and_the_memo_stays_bounded(store, monkeypatch):
    import zlib

    from graphtape import serde

    monkeypatch.setattr(postgres, "DEFLATE_MEMO_BYTES", 100 * 1024)
    big = [os.urandom(20 * 1024) for _ in range(8)]  # ~20 KB deflated each: five fit
    calls: list[int] = []
    real = zlib.compress
    monkeypatch.setattr(postgres.zlib, "compress", lambda d, level: calls.append(len(d)) or real(d, level))
    for _ in range(2):
        for data in big:
            address = serde.digest(data)
            assert zlib.decompress(store._deflated(address, data)) == data
    assert len(calls) == 2 * len(big)  # in order, each was evicted before it came back
    data = big[-1]
    store._deflated(serde.digest(data), data)
    assert len(calls) == 2 * len(big)  # the most recent one comes from the memo
    assert 0 < store._deflate_memo_bytes <= 100 * 1024
    assert store._deflate_memo_bytes == sum(len(v) for v in store._deflate_memo.values())
    small = b"x" * 2000  # under DEFLATE_MEMO_OVER: deflated every time, never remembered
    store._deflated(serde.digest(small), small)
    assert serde.digest(small) not in store._deflate_memo
    # a large blob round-trips through a batch using its remembered form
    for _ in range(2):
        store.write(WriteBatch(blobs={serde.digest(data): data}))
    assert store.get_blobs([serde.digest(data)]) == {serde.digest(data): data}
