"""PostgreSQL schema migrations on stores written by an older graphtape.

Migration 6 compresses checkpoint bodies on the server: a store at version 5
(bodies ``STORAGE EXTERNAL``, stored uncompressed) must open, migrate, and
read back every body written before and after, byte for byte.
"""

from __future__ import annotations

import pytest

psycopg = pytest.importorskip("psycopg")

from graphtape.store.base import CheckpointRow, WriteBatch  # noqa: E402
from graphtape.store.postgres import MIGRATIONS, PostgresTapeStore  # noqa: E402
from graphtape.store.postgres_schema import MIGRATION_LOCK  # noqa: E402
from tests.pg_schema import fresh_schema, schema_url  # noqa: E402


@pytest.fixture
def schema():
    with fresh_schema() as pair:
        yield pair


def _old_store(admin, name: str, version: int) -> None:
    """A schema as graphtape left it at ``version``: those migrations only, as ``_migrate`` runs them."""
    with admin.transaction():
        admin.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        admin.execute(f'CREATE SCHEMA "{name}"')
        admin.execute(f'SET LOCAL search_path TO "{name}"')
        admin.execute("CREATE TABLE gt_schema (version integer NOT NULL)")
        admin.execute("INSERT INTO gt_schema(version) VALUES (%s)", (version,))
        for migration in MIGRATIONS[:version]:
            admin.execute(migration)


def _body(step: int) -> bytes:
    """A checkpoint body like the saver's: channel versions, repetitive, several KB."""
    return b"msgpack\x00" + b"".join(
        b"branch:to:n%02d 000000000000000000000000000000%02d.0.123" % (i, i) for i in range(step)
    )


def _row(thread: str, cid: str, body: bytes) -> CheckpointRow:
    return CheckpointRow(thread, "", cid, None, None, 1, "loop", "2026-01-01T00:00:00+00:00", {"step": 1}, body, {})


def _body_column(admin, name: str) -> tuple[str, str]:
    return admin.execute(
        "SELECT a.attstorage, a.attcompression FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = 'gt_checkpoints' AND a.attname = 'body'",
        (name,),
    ).fetchone()


def test_a_version_5_store_migrates_and_reads_old_and_new_bodies(schema):
    admin, name = schema
    _old_store(admin, name, 5)
    assert _body_column(admin, name)[0] == "e"  # EXTERNAL: stored uncompressed
    url = schema_url(name)
    old_body = _body(60)
    # written as version 5 left them: the row inserted straight into the old table
    admin.execute(
        f'INSERT INTO "{name}".gt_checkpoints (thread_id, checkpoint_ns, checkpoint_id, step, source, created_at, '
        "metadata_text, metadata, body, channel_values) VALUES ('t', '', 'c1', 1, 'loop', "
        "'2026-01-01T00:00:00+00:00', '{\"step\":1}', '{\"step\":1}', %s, '{}')",
        (old_body,),
    )
    store = PostgresTapeStore(url)
    try:
        assert store.schema_version == len(MIGRATIONS) >= 6
        storage, compression = _body_column(admin, name)
        assert storage == "x"  # EXTENDED: compressed by the server
        assert compression in ("l", "")  # lz4, or the default (pglz) on a server without it
        new_body = _body(61)
        store.write(WriteBatch(checkpoints=[_row("t", "c2", new_body)]))
        assert store.get_checkpoint("t", "", "c1").body == old_body
        assert store.get_checkpoint("t", "", "c2").body == new_body
        sizes = dict(
            admin.execute(
                f'SELECT checkpoint_id, pg_column_size(body) FROM "{name}".gt_checkpoints ORDER BY checkpoint_id'
            ).fetchall()
        )
        assert sizes["c1"] >= len(old_body)  # the old row is left as it was
        assert sizes["c2"] < len(new_body) / 2  # a new row is compressed
    finally:
        store.close()
    # reopening migrates nothing more
    again = PostgresTapeStore(url)
    try:
        assert again.schema_version == len(MIGRATIONS)
        assert again.get_checkpoint("t", "", "c1").body == old_body
    finally:
        again.close()


def test_a_version_7_store_gets_the_runs_listing_indexes(schema):
    """v8 indexes the listing's order and its status and graph filters; runs written before are listed the same."""
    from graphtape.store.base import RunRecord

    admin, name = schema
    _old_store(admin, name, 7)
    for i in range(12):
        admin.execute(
            f'INSERT INTO "{name}".gt_runs (run_id, thread_id, graph, status, started_at, mode) '
            "VALUES (%s, %s, %s, %s, %s, 'record')",
            (f"r{i:02d}", f"t{i % 2}", "agent" if i % 3 else "etl", "failed" if i % 4 else "finished", 10.0 + i),
        )
    store = PostgresTapeStore(schema_url(name))
    try:
        assert store.schema_version == len(MIGRATIONS) >= 8
        indexes = {
            r[0] for r in admin.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", (name,)).fetchall()
        }
        assert {"gt_runs_listing", "gt_runs_status", "gt_runs_graph", "gt_runs_thread"} <= indexes
        assert "gt_runs_started" not in indexes
        listed = store.list_runs(status="failed", graph="agent", limit=3, offset=1)
        expected = [f"r{i:02d}" for i in reversed(range(12)) if i % 4 and i % 3][1:4]
        assert [r.run_id for r in listed] == expected
        assert all(isinstance(r, RunRecord) for r in listed)
        assert store.count_runs(status="failed") == 9 and store.count_runs(limit=5) == 5
    finally:
        store.close()
