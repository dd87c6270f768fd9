"""Tape stores, opened by URL.

``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or a bare
file path select the embedded SQLite store;
``postgresql://user@host:5432/dbname?schema=graphtape`` (or ``postgres://``)
the PostgreSQL store (install ``graphtape[postgres]``);
``redis://host:6379/0?prefix=graphtape:`` the Redis store on plain Redis 7
(install ``graphtape[redis]``). With no URL, ``GRAPHTAPE_URL``
is used, and without that ``.graphtape/tape.db`` in the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from graphtape.errors import StoreError
from graphtape.store.base import EventRow, RunRecord, TapeStore, WriteBatch

DEFAULT_PATH = Path(".graphtape") / "tape.db"


def resolve_url(url: str | None = None) -> str:
    """The store URL that ``connect(url)`` would use."""
    if url:
        return url
    env = os.environ.get("GRAPHTAPE_URL")
    if env:
        return env
    return f"sqlite:///{DEFAULT_PATH}"


def open_store(url: str | None = None) -> TapeStore:
    """Open (creating if needed) the store at ``url``; see the module docstring."""
    url = resolve_url(url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "sqlite", "/" + url
    scheme = scheme.lower()
    if scheme in ("sqlite", "sqlite3", "file"):
        from graphtape.store.sqlite import SqliteTapeStore

        path = rest[1:] if rest.startswith("/") else rest
        if not path:
            raise StoreError(f"{url!r} names no file; use sqlite:///path/to/tape.db")
        return SqliteTapeStore(path)
    if scheme in ("postgresql", "postgres"):
        from graphtape.store.postgres import PostgresTapeStore

        return PostgresTapeStore(url)
    if scheme in ("redis", "rediss"):
        from graphtape.store.redis import RedisTapeStore

        return RedisTapeStore(url)
    raise StoreError(
        f"unsupported store URL scheme {scheme!r} in {url!r}; "
        "use sqlite:///path/to/tape.db, postgresql://user@host:5432/dbname?schema=graphtape "
        "or redis://host:6379/0?prefix=graphtape:"
    )


__all__ = ["EventRow", "RunRecord", "TapeStore", "WriteBatch", "open_store", "resolve_url"]
