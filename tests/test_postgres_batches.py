"""PostgreSQL batches of every size: a few rows per table go as scalar VALUES, more as unnest arrays.

Both forms must store the same rows, including values PostgreSQL text cannot
hold (NUL, the escape marker), NULLs, and numbers that need a wider type.
"""

from __future__ import annotations

import uuid

import pytest

psycopg = pytest.importorskip("psycopg")

from graphtape import serde  # noqa: E402
from graphtape.store.base import CheckpointRow, EventRow, RunRecord, WriteBatch, WriteRow  # noqa: E402
from graphtape.store.postgres import VALUES_ROWS, PostgresTapeStore  # noqa: E402
from tests.pg_schema import fresh_schema, schema_url  # noqa: E402


@pytest.fixture(scope="module")
def store():
    with fresh_schema() as (_, name):
        s = PostgresTapeStore(schema_url(name))
        try:
            yield s
        finally:
            s.close()


@pytest.mark.parametrize("n", [1, 2, VALUES_ROWS, VALUES_ROWS + 1, 40])
def test_a_batch_of_n_rows_per_table_round_trips(store, n):
    tag = f"{n}-{uuid.uuid4().hex[:6]}"
    odd = ["plain", "nul\x00inside", "\ufdd0marker", "", "é"]
    runs = [
        RunRecord(
            run_id=f"r{tag}-{i}{odd[i % 5]}",
            thread_id=f"t{tag}",
            graph="g",
            started_at=1.5 + i,
            ended_at=None if i % 2 else 2.0 + i,
            error=None if i % 3 else odd[i % 5],
            tokens=2**40 + i,  # wider than int4
            meta={"i": i, "s": odd[i % 5]},
        )
        for i in range(n)
    ]
    blobs = {serde.digest(f"{tag}-{i}".encode()): f"{tag}-{i}".encode() * (1 + 300 * (i % 2)) for i in range(n)}
    hashes = sorted(blobs)
    chains = {f"c{tag}-{i}": (None if i == 0 else f"c{tag}-{i - 1}", hashes[i]) for i in range(n)}
    events = [EventRow(runs[0].run_id, i, "k" + odd[i % 5], float(i), {"i": i, "s": odd[i % 5]}) for i in range(n)]
    checkpoints = [
        CheckpointRow(
            f"t{tag}",
            odd[i % 5],
            f"cp{i:03d}",
            None if i == 0 else f"cp{i - 1:03d}",
            runs[0].run_id,
            None if i % 2 else i,
            "loop",
            "2026-01-01T00:00:00+00:00",
            {"step": i, "note": odd[i % 5]},
            b"body\x00" * (i + 1),
            {"ch": hashes[i]},
        )
        for i in range(n)
    ]
    writes = [WriteRow(f"t{tag}", "", "cp000", f"task{odd[i % 5]}", "p", i, "ch", hashes[i]) for i in range(n)]
    token = store.acquire_lease(f"thread:{tag}", "me", ttl=30)
    store.write(
        WriteBatch(new_runs=runs, events=events, blobs=blobs, chains=chains, checkpoints=checkpoints, writes=writes),
        fence=(f"thread:{tag}", token),
    )
    for run in runs:
        assert store.get_run(run.run_id) == run
    assert store.events(runs[0].run_id) == events
    assert store.get_blobs(hashes) == blobs
    assert store.get_chain(f"c{tag}-{n - 1}") == hashes
    for row in checkpoints:
        assert store.get_checkpoint(row.thread_id, row.checkpoint_ns, row.checkpoint_id) == row
    assert sorted(store.get_writes(f"t{tag}", "", "cp000"), key=lambda w: w.idx) == writes
