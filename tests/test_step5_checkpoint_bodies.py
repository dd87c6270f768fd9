"""SQLite schema v12: a checkpoint's body, metadata and values in a table of their own (appended), the
listed columns in a small WITHOUT ROWID table that a history listing reads; a v11 file migrates with its checkpoints, a
checkpoint written again or deleted leaves no body behind, and a recorded step no longer spills its
checkpoint into overflow pages."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import graphtape
from graphtape.errors import StoreError
from graphtape.store import sqlite as sqlite_store
from graphtape.store.base import CheckpointRow, WriteBatch
from graphtape.store.sqlite import MIGRATIONS, SqliteTapeStore, _statements


def _row(checkpoint_id: str, body: bytes, *, thread: str = "t", parent: str | None = None) -> CheckpointRow:
    return CheckpointRow(
        thread_id=thread,
        checkpoint_ns="",
        checkpoint_id=checkpoint_id,
        parent_id=parent,
        run_id="r1",
        step=0,
        source="loop",
        created_at="2026-12-02T00:00:00+00:00",
        metadata={"step": 0},
        body=body,
        values={"n": "ab" * 16},
        writers="n",
        calls="",
    )


def _bodies(store: SqliteTapeStore) -> int:
    return int(store._query("SELECT count(*) FROM gt_checkpoint_data")[0][0])


def test_a_v11_file_migrates_with_its_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v11.db"
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", MIGRATIONS[:11])
    old = SqliteTapeStore(path)
    assert old.schema_version == 11
    insert = (
        "INSERT INTO gt_checkpoints(thread_id, checkpoint_ns, checkpoint_id, parent_id, run_id, step, source, "
        "created_at, metadata, body, channel_values, writers, calls, copied_from) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
    )
    with old._lock:
        old._conn.execute("BEGIN IMMEDIATE")
        for row in (
            ("t", "", "c1", None, "r1", 0, "loop", "a", '{"step":0}', b"B1" * 900, "{}", "n", "", None),
            ("t", "", "c2", "c1", None, 1, "update", "b", "{}", b"B2", '{"x":"y"}', None, None, "c0"),
            ("u", "sub", "c3", None, "r2", 2, "loop", "c", "{}", b"B3", "{}", "", "[]", None),
        ):
            old._conn.execute(insert, row)
        old._conn.execute("COMMIT")
    old.close()
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", MIGRATIONS)

    store = SqliteTapeStore(path)
    try:
        assert store.schema_version == len(MIGRATIONS) >= 12
        rows = {r.checkpoint_id: r for r in store.list_checkpoints()}
        assert set(rows) == {"c1", "c2", "c3"}
        assert rows["c1"].body == b"B1" * 900 and rows["c1"].writers == "n" and rows["c1"].metadata == {"step": 0}
        assert rows["c2"].body == b"B2" and rows["c2"].values == {"x": "y"} and rows["c2"].writers is None
        assert rows["c3"].checkpoint_ns == "sub" and rows["c3"].calls == "[]"
        got = store.get_checkpoint("t", "", "c2")
        assert got is not None and got.parent_id == "c1" and got.body == b"B2"
        # the view shows the old table's columns, copied_from included
        assert store._query("SELECT checkpoint_id, copied_from FROM gt_checkpoints ORDER BY checkpoint_id") == [
            ("c1", None),
            ("c2", "c0"),
            ("c3", None),
        ]
        names = {r[0] for r in store._query("SELECT name FROM sqlite_master")}
        assert {"gt_checkpoint_rows", "gt_checkpoint_data", "gt_checkpoints_copies"} <= names
        assert "gt_checkpoints_listing" not in names and "gt_data_ids" not in names
        assert _bodies(store) == 3
        # and it takes new checkpoints, whose bodies come after the migrated ones
        store.write(WriteBatch(checkpoints=[_row("c4", b"B4", parent="c2")]))
        assert store.get_checkpoint("t", "", "c4").body == b"B4"  # type: ignore[union-attr]
        assert store._query("SELECT data_id FROM gt_checkpoint_rows WHERE checkpoint_id='c4'") == [(4,)]
    finally:
        store.close()


def test_a_checkpoint_written_again_or_deleted_leaves_no_body(tmp_path: Path) -> None:
    store = SqliteTapeStore(tmp_path / "t.db")
    try:
        store.write(WriteBatch(checkpoints=[_row("c1", b"first"), _row("c2", b"second", parent="c1")]))
        assert _bodies(store) == 2
        again = _row("c1", b"again")
        again.writers = "m"
        store.write(WriteBatch(checkpoints=[again]))
        got = store.get_checkpoint("t", "", "c1")
        assert got is not None and got.body == b"again" and got.writers == "m"
        assert _bodies(store) == 2  # the old body went with the old row
        store.write(WriteBatch(checkpoints=[_row("c3", b"other thread", thread="u")]))
        store.delete_checkpoints([("t", "", "c2")])
        assert [r.checkpoint_id for r in store.list_checkpoints(thread_id="t")] == ["c1"] and _bodies(store) == 2
        store.delete_thread("t")
        assert store.list_checkpoints(thread_id="t") == [] and _bodies(store) == 1
        store.remove_thread("u", [])
        assert store.list_checkpoints() == [] and _bodies(store) == 0
        # a failed write (a refused run row) leaves neither a row nor a body
        with pytest.raises(StoreError, match="cannot update run columns"):
            bad = WriteBatch(checkpoints=[_row("c9", b"lost")])
            bad.run_updates.append(("r1", {"no_such_column": 1}))
            store.write(bad)
        assert store.list_checkpoints() == [] and _bodies(store) == 0
    finally:
        store.close()


def test_migration_statements_keep_trigger_bodies_whole() -> None:
    script = """
    CREATE TABLE a (x);
    CREATE TRIGGER t AFTER DELETE ON a BEGIN
        DELETE FROM a WHERE x = old.x;
        SELECT 1;
    END;
    SELECT 2
    """
    got = [s.strip() for s in _statements(script)]
    assert len(got) == 3 and got[1].startswith("CREATE TRIGGER") and got[1].endswith("END;")
    assert all(sqlite3.complete_statement(s) for s in got)
    assert [len(list(_statements(m))) for m in MIGRATIONS[:11]] == [
        len([s for s in m.split(";") if s.strip()]) for m in MIGRATIONS[:11]
    ]


class _State(TypedDict):
    n: int


def _chain(nodes: int) -> StateGraph:
    builder = StateGraph(_State)
    prev = START
    for i in range(nodes):

        def step(state: _State) -> dict[str, int]:
            return {"n": state["n"] + 1}

        builder.add_node(f"n{i:02d}", step)
        builder.add_edge(prev, f"n{i:02d}")
        prev = f"n{i:02d}"
    builder.add_edge(prev, END)
    return builder


def test_a_recorded_steps_checkpoint_rows_do_not_overflow(tmp_path: Path) -> None:
    """With 40 nodes a checkpoint's body passes a kilobyte (every node's seen versions): in the
    WITHOUT ROWID table it spilled into an overflow page per checkpoint (a page more written per
    super-step); now the rows table has none, and the bodies sit in their table's pages."""
    tape = graphtape.connect(f"sqlite:///{tmp_path}/t.db")
    try:
        recorded = tape.record(_chain(40).compile(), name="chain40")
        for _ in range(3):
            out = recorded.invoke({"n": 0}, {"configurable": {"thread_id": str(uuid.uuid4())}})
            assert out["n"] == 40
        store = tape.store
        assert isinstance(store, SqliteTapeStore)
        biggest = store._query("SELECT max(length(body)) FROM gt_checkpoints")[0][0]
        assert biggest > 1100  # the case this is about
        try:
            overflow = dict(
                store._query(
                    "SELECT name, sum(pagetype = 'overflow') FROM dbstat "
                    "WHERE name IN ('gt_checkpoint_rows', 'gt_checkpoint_data') GROUP BY name"
                )
            )
        except StoreError:
            pytest.skip("this SQLite has no dbstat table")
        assert overflow["gt_checkpoint_rows"] == 0 and overflow["gt_checkpoint_data"] == 0
        assert len(store.list_checkpoints()) == 3 * 42
    finally:
        tape.close()
