"""PostgreSQL leases in one statement each: still committed synchronously where the URL turned that off."""

from __future__ import annotations

import pytest

psycopg = pytest.importorskip("psycopg")

from graphtape.store.postgres import PostgresTapeStore  # noqa: E402
from graphtape.store.postgres_schema import ACQUIRE_LEASE  # noqa: E402
from tests.pg_schema import fresh_schema, schema_url  # noqa: E402


@pytest.fixture
def async_store():
    """A store whose URL turns synchronous_commit off for every connection."""
    with fresh_schema() as (_, name):
        store = PostgresTapeStore(schema_url(name, "&options=-c%20synchronous_commit%3Doff"))
        try:
            yield store
        finally:
            store.close()


def test_acquire_commits_synchronously_in_one_statement(async_store):
    with async_store._pool.connection() as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
        # the statement's own transaction runs with synchronous_commit on ...
        probe = ACQUIRE_LEASE.replace("RETURNING token", "RETURNING token, current_setting('synchronous_commit')")
        assert probe != ACQUIRE_LEASE
        row = conn.execute(probe, {"name": "probe", "owner": "me", "ttl": 30.0}).fetchone()
        assert row == (1, "on")
        # ... and leaves the connection's setting as the URL made it
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)


def test_lease_tokens_and_release_on_single_statements(async_store):
    first = async_store.acquire_lease("thread:t", "a", ttl=30)
    assert async_store.acquire_lease("thread:t", "b", ttl=30) is None  # held
    assert async_store.acquire_lease("thread:t", "a", ttl=30) == first  # renewed, same token
    async_store.release_lease("thread:t", "a")
    assert async_store.lease_holder("thread:t") is None
    second = async_store.acquire_lease("thread:t", "b", ttl=30)
    assert second is not None and second > first
    assert async_store.lease_holder("thread:t")[::2] == ("b", second)
