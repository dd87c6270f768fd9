"""The SQLite store: migrations, locking, errors that say what to do."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

import graphtape
from graphtape.store import open_store
from graphtape.store.base import RunRecord, WriteBatch
from graphtape.store.sqlite import MIGRATIONS, SqliteTapeStore


def test_default_location_and_env_url(tmp_path, monkeypatch):
    t = graphtape.connect()
    try:
        assert (tmp_path / ".graphtape" / "tape.db").exists()
    finally:
        t.close()
    monkeypatch.setenv("GRAPHTAPE_URL", f"sqlite:///{tmp_path}/env.db")
    t = graphtape.connect()
    try:
        assert t.url.endswith("env.db")
    finally:
        t.close()


def test_schema_is_versioned(tmp_path):
    store = SqliteTapeStore(tmp_path / "v.db")
    assert store.schema_version == len(MIGRATIONS)
    store.close()
    store = SqliteTapeStore(tmp_path / "v.db")  # reopening migrates nothing
    assert store.schema_version == len(MIGRATIONS)
    store.close()


def test_a_v4_tape_gains_listing_columns_and_keeps_its_checkpoints(tmp_path):
    """Migration 5 adds ``writers`` (unknown for old rows) and ``copied_from`` (filled from the metadata)."""
    path = tmp_path / "v4.db"
    conn = sqlite3.connect(path)
    for script in MIGRATIONS[:4]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version=4")
    insert = (
        "INSERT INTO gt_checkpoints(thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, step, source, "
        "created_at, metadata, body, channel_values) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
    )
    conn.execute(insert, ("t", "", "c1", None, "r1", 0, "loop", "2026-01-01", '{"step": 0}', b"b1", "{}"))
    conn.execute(
        insert, ("t", "", "c2", "c1", None, 1, "update", "2026-01-02", '{"graphtape_copied_from": "x9"}', b"b2", "{}")
    )
    conn.commit()
    conn.close()

    store = SqliteTapeStore(path)
    try:
        assert store.schema_version == len(MIGRATIONS)
        rows = {r.checkpoint_id: r for r in store.list_checkpoints(thread_id="t")}
        assert set(rows) == {"c1", "c2"} and rows["c1"].writers is None and rows["c2"].body == b"b2"
        assert store._query("SELECT checkpoint_id, copied_from FROM gt_checkpoints ORDER BY checkpoint_id") == [
            ("c1", None),
            ("c2", "x9"),
        ]
    finally:
        store.close()


def test_newer_schema_is_refused_not_corrupted(tmp_path):
    path = tmp_path / "new.db"
    SqliteTapeStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={len(MIGRATIONS) + 5}")
    conn.close()
    with pytest.raises(graphtape.SchemaTooNew, match="upgrade graphtape"):
        SqliteTapeStore(path)


def test_not_a_database(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(graphtape.StoreError, match="not a graphtape database"):
        SqliteTapeStore(path)


def test_unknown_scheme(tmp_path):
    with pytest.raises(graphtape.StoreError, match="unsupported store URL scheme"):
        open_store("mysql://nope")


def test_locked_database_gives_clear_error_and_loses_nothing(tmp_path):
    path = tmp_path / "lock.db"
    store = SqliteTapeStore(path, busy_timeout=0.2)
    store.write(WriteBatch(new_runs=[RunRecord(run_id="r1", thread_id="t", graph="g", started_at=1.0)]))
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(graphtape.DatabaseLocked, match="locked by another process"):
            store.write(WriteBatch(new_runs=[RunRecord(run_id="r2", thread_id="t", graph="g", started_at=2.0)]))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert [r.run_id for r in store.list_runs()] == ["r1"]
    store.write(WriteBatch(new_runs=[RunRecord(run_id="r2", thread_id="t", graph="g", started_at=2.0)]))
    assert {r.run_id for r in store.list_runs()} == {"r1", "r2"}
    store.close()


def test_a_failed_batch_writes_nothing(tmp_path):
    store = SqliteTapeStore(tmp_path / "atomic.db")
    run = RunRecord(run_id="r1", thread_id="t", graph="g", started_at=1.0)
    store.write(WriteBatch(new_runs=[run]))
    with pytest.raises(graphtape.StoreError):
        store.write(WriteBatch(new_runs=[run], blobs={"h": b"data"}))  # duplicate run id
    assert store.get_blobs(["h"]) == {}
    store.close()


def test_two_writers_in_parallel(tmp_path):
    path = tmp_path / "par.db"
    stores = [SqliteTapeStore(path) for _ in range(2)]
    errors = []

    def writer(i):
        try:
            for n in range(30):
                stores[i].write(
                    WriteBatch(
                        new_runs=[RunRecord(run_id=f"{i}-{n}", thread_id="t", graph="g", started_at=time.time())]
                    )
                )
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(stores[0].list_runs(limit=None)) == 60
    for s in stores:
        s.close()


def test_run_prefix_resolution(tape):
    tape.store.write(
        WriteBatch(
            new_runs=[
                RunRecord(run_id="abcd1111", thread_id="t", graph="g", started_at=1.0),
                RunRecord(run_id="abcd2222", thread_id="t", graph="g", started_at=2.0),
            ]
        )
    )
    assert tape.run("abcd1").run_id == "abcd1111"
    with pytest.raises(graphtape.RunNotFound, match="ambiguous"):
        tape.run("abcd")
    with pytest.raises(graphtape.RunNotFound, match="graphtape runs"):
        tape.run("zzzz")


def test_one_saver_per_store_while_it_is_used(tmp_path):
    """``saver_for`` gives every caller on a store the same saver (its cache of each thread's last
    checkpoint is what lets unchanged values be reused), and another store its own."""
    import gc

    from graphtape.runtime.saver import GraphtapeSaver, saver_for

    first = SqliteTapeStore(tmp_path / "a.db")
    second = SqliteTapeStore(tmp_path / "b.db")
    try:
        saver = saver_for(first)
        assert isinstance(saver, GraphtapeSaver) and saver.store is first
        assert saver_for(first) is saver
        assert saver_for(second) is not saver and saver_for(second).store is second
        del saver
        gc.collect()
        assert saver_for(first).store is first  # a new one once nobody held the old one
    finally:
        first.close()
        second.close()
