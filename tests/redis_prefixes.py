"""Redis key prefixes for the tests of the Redis store on its own.

tests/test_store_redis.py and tests/test_redis_write_path.py import the
fixtures ``redis_raw_fixture`` (a plain client on the test database) and
``prefixes_fixture`` (fresh key prefixes whose keys are deleted at teardown)
to use them as ``redis_raw`` and ``prefixes``. Without a server the tests are
skipped, except in CI, where that is a failure.
"""

from __future__ import annotations

import os
import uuid

import pytest

redis_client = pytest.importorskip("redis")

from graphtape.store import redis_layout  # noqa: E402

REDIS_URL = os.environ.get("GRAPHTAPE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def drop_prefix(client, prefix: str) -> None:
    """Delete every key under ``prefix``."""
    pattern = redis_layout.glob_escape(prefix) + "*"
    keys = list(client.scan_iter(match=pattern, count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])


@pytest.fixture(scope="module", name="redis_raw")
def redis_raw_fixture():
    """A plain client on the test database; skips (or fails in CI) when there is no server."""
    client = redis_client.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis_client.RedisError as exc:
        client.close()
        message = f"no Redis server at {REDIS_URL} ({exc}); start one or set GRAPHTAPE_TEST_REDIS_URL"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    yield client
    client.close()


@pytest.fixture(name="prefixes")
def prefixes_fixture(redis_raw):
    """Hands out fresh key prefixes and deletes their keys at teardown."""
    made: list[str] = []

    def new() -> str:
        prefix = f"gt-test-{uuid.uuid4().hex[:12]}:"
        made.append(prefix)
        return prefix

    yield new
    for prefix in made:
        drop_prefix(redis_raw, prefix)


def url_for(prefix: str) -> str:
    """The URL of a store under ``prefix`` on the test database."""
    sep = "&" if "?" in REDIS_URL else "?"
    return f"{REDIS_URL}{sep}prefix={prefix}"
