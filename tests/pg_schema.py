"""A fresh PostgreSQL schema for the tests of the PostgreSQL store on its own.

The backend-parametrised suite makes its stores in ``conftest.py``; the tests
that look inside the PostgreSQL store (batches, leases, migrations, the step's
statement) need a schema of their own, removed afterwards. Without a server
they are skipped, except in CI, where that is a failure.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

BASE_URL = os.environ.get("GRAPHTAPE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def schema_url(name: str, options: str = "") -> str:
    """The store URL of schema ``name`` (``options``: more URL parameters, starting with ``&``)."""
    return f"{BASE_URL}{'&' if '?' in BASE_URL else '?'}schema={name}{options}"


@contextlib.contextmanager
def fresh_schema() -> Iterator[tuple[Any, str]]:
    """(an autocommit admin connection, a new schema's name); the schema is dropped at the end."""
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(BASE_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL server: {exc}")
        pytest.skip(f"no PostgreSQL server at GRAPHTAPE_TEST_POSTGRES_URL ({' '.join(str(exc).split())})")
    name = f"gt_test_{uuid.uuid4().hex[:12]}"
    try:
        yield admin, name
    finally:
        admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        admin.close()
