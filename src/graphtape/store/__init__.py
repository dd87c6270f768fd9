"""Tape stores, opened by URL.

``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or a bare
file path select the embedded SQLite store;
``postgresql://user@host:5432/dbname?schema=graphtape`` (or ``postgres://``)
the PostgreSQL store (install ``graphtape[postgres]``);
``redis://host:6379/0?prefix=graphtape:`` the Redis store on plain Redis 7
(install ``graphtape[redis]``). With no URL, ``GRAPHTAPE_URL``
is used, and without that ``.graphtape/tape.db`` in the working directory.

SQLite URLs take ``?busy_timeout=SECONDS`` (how long a writer waits for
another process's write lock before :class:`~graphtape.errors.DatabaseLocked`).

``open_store(url, create=False)`` is for commands that only read (or act on
runs that must already be there): it never creates a file, a schema or a
table, and raises :class:`StoreNotFound` when there is no graphtape store at
``url``, or when the SQLite file is some other application's database.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from graphtape.errors import StoreError
from graphtape.store.base import EventRow, RunRecord, StoreNotFound, TapeStore, WriteBatch

DEFAULT_PATH = Path(".graphtape") / "tape.db"


def _sqlite_options(url: str, query: str) -> dict[str, float]:
    """The options of a ``sqlite:///`` URL's query string (today only ``busy_timeout`` in seconds)."""
    from urllib.parse import parse_qsl

    options: dict[str, float] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name != "busy_timeout":
            raise StoreError(f"unknown option {name!r} in {url!r}; a sqlite:/// URL takes ?busy_timeout=SECONDS")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0:
            raise StoreError(f"busy_timeout={value!r} in {url!r} is not a number of seconds; e.g. ?busy_timeout=30")
        options["busy_timeout"] = seconds
    return options


def resolve_url(url: str | None = None) -> str:
    """The store URL that ``connect(url)`` would use."""
    if url:
        return url
    env = os.environ.get("GRAPHTAPE_URL")
    if env:
        return env
    return f"sqlite:///{DEFAULT_PATH}"


def _split(url: str) -> tuple[str, str]:
    """``(scheme, rest)`` of a store URL; a bare path is an SQLite file."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "sqlite", "/" + url
    return scheme.lower(), rest


def sqlite_file(url: str | None = None) -> tuple[str, str] | None:
    """``(file path, query string)`` when ``url`` (resolved as :func:`open_store` does) names an
    SQLite store, else None."""
    scheme, rest = _split(resolve_url(url))
    if scheme not in ("sqlite", "sqlite3", "file"):
        return None
    path, _, query = (rest[1:] if rest.startswith("/") else rest).partition("?")
    return path, query


def _backend(url: str) -> tuple[Literal["sqlite", "postgresql", "redis"], str, dict[str, float]]:
    """Which backend the (resolved) store ``url`` names: ``("sqlite", file path, options)``,
    ``("postgresql", url, {})`` or ``("redis", url, {})``; a :class:`StoreError` saying which URLs
    work for any other. Shared by :func:`open_store` and the LangGraph store's ``kv_store_for``."""
    sqlite = sqlite_file(url)
    if sqlite is not None:
        path, query = sqlite
        if not path:
            raise StoreError(f"{url!r} names no file; use sqlite:///path/to/tape.db")
        return "sqlite", path, _sqlite_options(url, query)
    scheme, _ = _split(url)
    if scheme in ("postgresql", "postgres"):
        return "postgresql", url, {}
    if scheme in ("redis", "rediss"):
        return "redis", url, {}
    raise StoreError(
        f"unsupported store URL scheme {scheme!r} in {url!r}; "
        "use sqlite:///path/to/tape.db, postgresql://user@host:5432/dbname?schema=graphtape "
        "or redis://host:6379/0?prefix=graphtape:"
    )


def open_store(url: str | None = None, *, create: bool = True) -> TapeStore:
    """Open the store at ``url``; see the module docstring.

    ``create=True`` creates the file, schema or keys a new store needs;
    ``create=False`` opens only an existing graphtape store (else :class:`StoreNotFound`).
    """
    kind, where, options = _backend(resolve_url(url))
    if kind == "sqlite":
        from graphtape.store.sqlite import SqliteTapeStore

        return SqliteTapeStore(where, create=create, **options)
    if kind == "postgresql":
        from graphtape.store.postgres import PostgresTapeStore

        return PostgresTapeStore(where, create=create)
    from graphtape.store.redis import RedisTapeStore

    return RedisTapeStore(where, create=create)


__all__ = [
    "EventRow",
    "RunRecord",
    "StoreNotFound",
    "TapeStore",
    "WriteBatch",
    "open_store",
    "resolve_url",
    "sqlite_file",
]
