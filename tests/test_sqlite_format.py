"""SQLite files written by earlier graphtape versions open and read back the same.

Each test writes a file the way an earlier schema held it (its migrations
applied, rows inserted as that version's code inserted them), opens it with the
current store (which migrates it) and reads everything back.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path

import pytest

from graphtape.errors import StoreError
from graphtape.store.base import EventRow, RunRecord, WriteBatch
from graphtape.store.codec import pack_event
from graphtape.store.sqlite import MIGRATIONS, SqliteTapeStore

RUN_A = "0a1b2c3d-0000-4000-8000-000000000001"
RUN_B = "0a1b2c3d-0000-4000-8000-000000000002"
BLOB_1 = "00112233445566778899aabbccddeeff"
BLOB_2 = "ffeeddccbbaa99887766554433221100"
BIG = b'{"text": "' + b"long " * 400 + b'"}'


def old_store(path: Path, version: int) -> None:
    """A file at schema ``version``, with two runs, their events (deflated and plain), blobs and chains."""
    conn = sqlite3.connect(path, isolation_level=None)
    for sql in MIGRATIONS[:version]:
        for statement in sql.split(";"):
            if statement.strip():
                conn.execute(statement)
    conn.execute(f"PRAGMA user_version={version}")
    for run_id, parent in ((RUN_A, None), (RUN_B, RUN_A)):
        conn.execute(
            "INSERT INTO gt_runs(run_id, thread_id, graph, status, started_at, ended_at, parent_run_id, mode, "
            "llm_calls, meta) VALUES (?, 't1', 'g', 'finished', 1.5, 2.5, ?, 'record', 1, '{\"api\":\"invoke\"}')",
            (run_id, parent),
        )
    events = [
        (RUN_A, 0, "run_started", 1.5, pack_event({"input": BLOB_1, "graph": "g", "padding": "x" * 120})),
        (RUN_A, 1, "task_started", 1.6, json.dumps({"step": 1, "node_path": "n", "task": "n:1"}).encode()),
        (RUN_A, 2, "llm_call", 1.7, pack_event({"request": BLOB_2, "response": BLOB_1, "messages": "c1"})),
        (RUN_A, 3, "run_finished", 2.5, json.dumps({"output": BLOB_1})),  # the oldest form: JSON text
        (RUN_B, 0, "run_started", 3.0, pack_event({"input": BLOB_1, "graph": "g"})),
        (RUN_B, 1, "label", 3.1, pack_event({"name": "mine"})),
    ]
    conn.executemany("INSERT INTO gt_events(run_id, seq, kind, ts, data) VALUES (?,?,?,?,?)", events)
    conn.executemany(
        "INSERT INTO gt_blobs(hash, enc, data) VALUES (?,?,?)",
        [(BLOB_1, "raw", b'{"a": 1}'), (BLOB_2, "z", zlib.compress(BIG, 1)), ("dead" * 8, "raw", b"{}")],
    )
    conn.executemany(
        "INSERT INTO gt_chains(id, parent, item) VALUES (?,?,?)", [("c0", None, BLOB_1), ("c1", "c0", BLOB_2)]
    )
    conn.close()


@pytest.fixture
def v6(tmp_path: Path) -> Path:
    path = tmp_path / "v6.db"
    old_store(path, 6)
    return path


def test_v6_file_reads_back_the_same(v6: Path) -> None:
    store = SqliteTapeStore(v6, create=False)
    try:
        assert store.schema_version == len(MIGRATIONS)
        a = store.events(RUN_A)
        assert [(e.seq, e.kind, e.ts) for e in a] == [
            (0, "run_started", 1.5),
            (1, "task_started", 1.6),
            (2, "llm_call", 1.7),
            (3, "run_finished", 2.5),
        ]
        assert a[0].data["input"] == BLOB_1 and a[1].data == {"step": 1, "node_path": "n", "task": "n:1"}
        assert a[3].data == {"output": BLOB_1}
        assert [e.kind for e in store.events(RUN_B)] == ["run_started", "label"]
        assert [e.seq for e in store.events(RUN_A, ["llm_call", "run_finished", "never_written"])] == [2, 3]
        assert store.events(RUN_A, ["never_written"]) == []
        assert store.events("no-such-run") == []
        listed = list(store.listed_events([RUN_A, RUN_B], ["task_started", "label"]))
        assert listed[0][:7] == (RUN_A, 1, "task_started", 1.6, 1, "n", "n:1")
        assert listed[1][:4] == (RUN_B, 1, "label", 3.1) and listed[1][7] == {"name": "mine"}
        assert store.get_blobs([BLOB_1, BLOB_2]) == {BLOB_1: b'{"a": 1}', BLOB_2: BIG}
        assert store.get_chain("c1") == [BLOB_1, BLOB_2]
        run = store.get_run(RUN_B)
        assert run is not None and run.parent_run_id == RUN_A and run.meta == {"api": "invoke"}
        # the view keeps the old table's shape for tools that read the file with SQL
        assert store._query("SELECT run_id, seq, kind FROM gt_events ORDER BY run_id, seq")[:2] == [
            (RUN_A, 0, "run_started"),
            (RUN_A, 1, "task_started"),
        ]
        # addresses are stored as 16 bytes (chain ids here are not hashes: they stay text); the views show hex
        assert store._query("SELECT typeof(hash) FROM gt_blob_rows WHERE hash = ?", (bytes.fromhex(BLOB_1),))
        assert store._query("SELECT typeof(id), typeof(item) FROM gt_chain_rows ORDER BY id") == [
            ("text", "blob"),
            ("text", "blob"),
        ]
        assert sorted(store._query("SELECT hash FROM gt_blobs")) == [(BLOB_1,), ("dead" * 8,), (BLOB_2,)]
        assert store._query("SELECT id, parent, item FROM gt_chains WHERE id = 'c1'") == [("c1", "c0", BLOB_2)]
        indexes = {r[0] for r in store._query("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "gt_checkpoints_run" not in indexes and "gt_event_rows_kind" in indexes
        assert store.collect_garbage() == (1, 0)  # only the unreferenced blob
        store.delete_runs([RUN_A])
        assert store.events(RUN_A) == [] and len(store.events(RUN_B)) == 2
    finally:
        store.close()


def test_migrated_file_takes_new_events_and_runs(v6: Path) -> None:
    store = SqliteTapeStore(v6)
    try:
        run = RunRecord(run_id="new-run", thread_id="t2", graph="g", status="running", started_at=5.0, mode="record")
        batch = WriteBatch()
        batch.new_runs.append(run)
        batch.events += [
            EventRow("new-run", 0, "run_started", 5.0, {"input": BLOB_1}),
            EventRow("new-run", 1, "a_new_kind", 5.1, {"x": 1}),
            EventRow(RUN_B, 2, "label", 5.2, {"name": "later"}),
        ]
        store.write(batch)
        assert [e.kind for e in store.events("new-run")] == ["run_started", "a_new_kind"]
        assert [e.data for e in store.events(RUN_B, ["label"])] == [{"name": "mine"}, {"name": "later"}]
    finally:
        store.close()
    # another connection (another process) sees the kind it never wrote
    again = SqliteTapeStore(v6)
    try:
        assert [e.kind for e in again.events("new-run", ["a_new_kind"])] == ["a_new_kind"]
    finally:
        again.close()


def test_rolled_back_kind_is_not_remembered(tmp_path: Path) -> None:
    """A kind's code given in a write that failed is given again, not kept by the process."""
    store = SqliteTapeStore(tmp_path / "t.db")
    try:
        bad = WriteBatch()
        bad.events += [EventRow("r", 0, "kind_one", 1.0, {}), EventRow("r", 0, "kind_one", 1.0, {})]
        with pytest.raises(StoreError, match="write refused"):
            store.write(bad)  # the same (run, seq) twice
        other = SqliteTapeStore(tmp_path / "t.db")
        good = WriteBatch()
        good.events.append(EventRow("r2", 0, "kind_two", 1.0, {}))
        other.write(good)  # takes the code the failed write had given
        other.close()
        ok = WriteBatch()
        ok.events.append(EventRow("r", 0, "kind_one", 1.0, {"n": 1}))
        store.write(ok)
        assert [(e.kind, e.data) for e in store.events("r")] == [("kind_one", {"n": 1})]
        assert [e.kind for e in store.events("r2")] == ["kind_two"]
    finally:
        store.close()


@pytest.mark.parametrize(
    "address",
    [
        "00112233445566778899aabbccddeeff",  # a hash: stored as 16 bytes
        "00112233445566778899AABBCCDDEEFF",  # upper case: kept as text, given back the same
        "0011223344556677 8899aabbccddeef",  # fromhex skips spaces: kept as text
        "short",
        "x" * 40,
    ],
)
def test_any_address_reads_back_the_same(tmp_path: Path, address: str) -> None:
    store = SqliteTapeStore(tmp_path / "a.db")
    try:
        batch = WriteBatch()
        batch.blobs[address] = b"payload " * 100
        batch.chains[address] = (None, address)
        batch.chains["00" * 16] = (address, address)
        store.write(batch)
        assert store.get_blobs([address]) == {address: b"payload " * 100}
        assert store.get_chain_nodes([address, "00" * 16]) == {address: (None, address), "00" * 16: (address, address)}
        assert store.get_chain("00" * 16) == [address, address]
        store.write(WriteBatch(events=[EventRow("r", 0, "run_started", 1.0, {"input": address})]))
        assert store.collect_garbage() == (0, 2)  # the blob is the run's input; no event refers to the chains
        store.delete_runs(["r"])
        assert store.collect_garbage() == (1, 0)
        assert store.get_blobs([address]) == {}
    finally:
        store.close()


@pytest.mark.parametrize("size", [0, 40, 41, 99, 300, 4096, 4097, 200_000])
@pytest.mark.parametrize("kind", ["json", "random"])
def test_packed_blobs_read_back(size: int, kind: str) -> None:
    import os

    from graphtape.store.codec import pack_blob, unpack_blob

    text = b'{"t":"dict","v":{"messages":{"t":"list","v":[{"t":"msg","h":"00112233445566778899aabbccddeeff"}]}}}'
    data = (text * (size // len(text) + 1))[:size] if kind == "json" else os.urandom(size)
    enc, stored = pack_blob(data, over=40)
    assert unpack_blob(enc, stored) == data
    assert len(stored) <= len(data)
    if kind == "random" or size <= 40:
        assert enc == "raw"
    else:
        assert enc == ("d1" if size <= 4096 else "z") and len(stored) < len(data) / 2


def test_compact_events_read_back_exactly() -> None:
    """Format 2 writes UUIDs and addresses as bytes: whatever surrounds them, the body reads back the same."""
    import random
    import uuid

    from graphtape.store.codec import pack_event_compact, unpack_event

    rng = random.Random(13)
    for _ in range(2000):
        parts = [
            uuid.UUID(int=rng.getrandbits(128)).hex,
            str(uuid.UUID(int=rng.getrandbits(128))),
            str(uuid.UUID(int=rng.getrandbits(128))).upper(),  # upper case: left as text
            "é\x01\x02\x00",  # control bytes in a value are escaped by json.dumps
            "chat:" + str(uuid.UUID(int=rng.getrandbits(128))),
            "1f1e-" + uuid.UUID(int=rng.getrandbits(128)).hex[:31],
            uuid.UUID(int=rng.getrandbits(128)).hex * 2 + "a",  # 65 digits
            "x" * rng.randint(0, 300),
            "",
        ]
        body = {f"k{j}": rng.choice(parts) + rng.choice(parts) for j in range(rng.randint(0, 6))}
        body["list"] = [rng.random(), rng.choice(parts), {rng.choice(parts): rng.randint(-5, 5)}]
        packed = pack_event_compact(body)
        assert unpack_event(packed) == body
        assert packed[:1] in (b"{", b"\x02")
    checkpoint = {"checkpoint_id": "1f1edb84-42f3-6c2d-800c-db9aca6adab7", "ns": "", "step": 12}
    assert pack_event_compact(checkpoint)[:1] == b"\x02"
    assert len(pack_event_compact(checkpoint)) < len(pack_event(checkpoint))


def test_v9_file_with_a_run_key_and_no_run_row(tmp_path: Path) -> None:
    """Schema v9 kept run keys apart (gt_run_keys); v10 keys events by the run row, and a run
    with events but no row keeps its events, out of the run listings."""
    from graphtape.store.sqlite import _key

    path = tmp_path / "v9.db"
    old_store(path, 6)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.create_function("gt_key", 1, _key, deterministic=True)
    for sql in MIGRATIONS[6:9]:
        for statement in sql.split(";"):
            if statement.strip():
                conn.execute(statement)
    conn.execute("PRAGMA user_version=9")
    conn.execute("INSERT INTO gt_run_keys(run_id) VALUES ('events-only')")
    conn.execute(
        "INSERT INTO gt_event_rows(run_key, seq, kind, ts, data) "
        "SELECT run_key, 0, (SELECT code FROM gt_event_kinds WHERE kind='label'), 9.0, ? "
        "FROM gt_run_keys WHERE run_id='events-only'",
        (pack_event({"name": "orphan"}),),
    )
    conn.close()
    store = SqliteTapeStore(path)
    try:
        assert store.schema_version == len(MIGRATIONS)
        assert [r.run_id for r in store.list_runs(newest_first=False)] == [RUN_A, RUN_B]
        assert store.get_run("events-only") is None and store.find_runs("events") == []
        assert [e.data for e in store.events("events-only")] == [{"name": "orphan"}]
        assert [e.seq for e in store.events(RUN_A)] == [0, 1, 2, 3]
        assert store._query("SELECT count(*) FROM gt_events")[0][0] == 7
        # the run's row arrives later: it takes the row holding only its id, events kept
        late = RunRecord(run_id="events-only", thread_id="t9", graph="g", started_at=9.0)
        store.write(WriteBatch(new_runs=[late], run_updates=[("events-only", {"status": "finished"})]))
        run = store.get_run("events-only")
        assert run is not None and run.thread_id == "t9" and run.status == "finished"
        assert len(store.events("events-only")) == 1
        with pytest.raises(StoreError, match="write refused"):
            store.write(WriteBatch(new_runs=[late]))
    finally:
        store.close()


def test_events_before_their_run(tmp_path: Path) -> None:
    store = SqliteTapeStore(tmp_path / "e.db")
    try:
        store.write(
            WriteBatch(
                events=[EventRow("later", 0, "run_started", 1.0, {})],
                run_updates=[("later", {"status": "failed"})],  # no run row: nothing to update
            )
        )
        assert store.get_run("later") is None and store.list_runs() == []
        assert store.list_runs(status="failed") == []
        assert [e.kind for e in store.events("later")] == ["run_started"]
        run = RunRecord(run_id="later", thread_id="t", graph="g", started_at=2.0)
        store.write(WriteBatch(new_runs=[run], events=[EventRow("later", 1, "run_finished", 3.0, {})]))
        assert [r.run_id for r in store.list_runs(thread_id="t")] == ["later"]
        assert [e.seq for e in store.events("later")] == [0, 1]
        store.delete_runs(["later"])
        assert store.get_run("later") is None and store.events("later") == []
        assert store._query("SELECT count(*) FROM gt_run_rows")[0][0] == 0
    finally:
        store.close()


def _plan(store: SqliteTapeStore, sql: str, params: tuple = ()) -> str:
    return " / ".join(r[3] for r in store._query("EXPLAIN QUERY PLAN " + sql, params))


def test_a_v13_file_gets_the_runs_listing_indexes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """v14 indexes the listing's order and its status and graph filters: a page reads its rows only."""
    from graphtape.store import sqlite as sqlite_store

    path = tmp_path / "v13.db"
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", MIGRATIONS[:13])
    old = SqliteTapeStore(path)
    assert old.schema_version == 13
    runs = [
        RunRecord(f"r{i:02d}", f"t{i % 2}", "agent" if i % 3 else "etl", "failed" if i % 4 else "finished", 10.0 + i)
        for i in range(12)
    ]
    old.write(WriteBatch(new_runs=runs))
    old.close()
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", MIGRATIONS)

    store = SqliteTapeStore(path)
    try:
        assert store.schema_version == len(MIGRATIONS) >= 14
        names = {r[0] for r in store._query("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"gt_runs_listing", "gt_runs_status", "gt_runs_graph", "gt_runs_thread"} <= names
        assert "gt_runs_started" not in names
        page = "SELECT run_id FROM gt_runs {} ORDER BY started_at DESC, run_id LIMIT 5 OFFSET 2"
        # the whole order from the index: no sort of the runs, and an OFFSET skips index entries
        whole = _plan(store, page.format(""))
        assert "INDEX gt_runs_listing" in whole and "TEMP B-TREE" not in whole, whole
        assert "gt_runs_status (status=?)" in _plan(store, page.format("WHERE status = ?"), ("failed",))
        assert "gt_runs_graph (graph=?)" in _plan(store, page.format("WHERE graph = ?"), ("etl",))
        count = "SELECT count(*) FROM (SELECT 1 FROM gt_runs WHERE status = ? LIMIT 100)"
        assert "COVERING INDEX gt_runs_status" in _plan(store, count, ("failed",))
        newest = [r.run_id for r in store.list_runs(limit=None)]
        assert newest == [r.run_id for r in reversed(runs)]
        failed = [r.run_id for r in store.list_runs(status="failed", graph="agent", limit=None)]
        assert failed == [r.run_id for r in reversed(runs) if r.status == "failed" and r.graph == "agent"]
        assert store.count_runs(status="failed") == 9
    finally:
        store.close()
