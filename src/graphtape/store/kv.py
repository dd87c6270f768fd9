"""LangGraph's long-term memory (a ``BaseStore``) in graphtape's store database: open it, give it to graphs.

``kv_store_for(url)`` opens the LangGraph store kept beside the tapes at a
tape store URL (or on an open tape store's connections), picking the backend
for the URL's technology: :mod:`~graphtape.store.kv_sqlite`,
:mod:`~graphtape.store.kv_postgres` or :mod:`~graphtape.store.kv_redis`.
``attach_store(graph, store)`` makes it the store a compiled graph's nodes
receive. What the store does (namespaces, batches, filters, TTL) is described
in :mod:`graphtape.store.kv_base`, which the backends share.

Example::

    from graphtape.store.kv import attach_store, kv_store_for

    store = kv_store_for("sqlite:///.graphtape/tape.db")
    store.put(("users", "ada"), "prefs", {"theme": "dark"})
    graph = attach_store(builder.compile(), store)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from langgraph.store.base import BaseStore, Op, Result, TTLConfig

from graphtape.store.base import TapeStore
from graphtape.store.kv_base import InvalidStoreOp, KVStore

__all__ = ["InvalidStoreOp", "KVStore", "LazyStore", "attach_store", "kv_store_for"]


def kv_store_for(url: str | TapeStore | None = None, *, ttl: TTLConfig | None = None) -> KVStore:
    """The LangGraph store kept in the graphtape store at ``url`` (the forms ``open_store`` takes).

    Its tables or keys are created on first use; the tape's are not touched
    (nor need to exist). ``url`` may also be an open tape store: the LangGraph
    store then shares its connections (PostgreSQL pool, Redis client), which
    carry the credentials its shown ``url`` leaves out; closing the LangGraph
    store leaves them open.
    """
    from graphtape.store import _backend, resolve_url

    if isinstance(url, TapeStore):
        return _sharing(url, ttl)
    kind, where, options = _backend(resolve_url(url))
    if kind == "sqlite":
        from graphtape.store.kv_sqlite import SqliteKVStore

        return SqliteKVStore(where, ttl=ttl, busy_timeout=options.get("busy_timeout", 10.0))
    if kind == "postgresql":
        from graphtape.store.kv_postgres import PostgresKVStore

        return PostgresKVStore(where, ttl=ttl)
    from graphtape.store.kv_redis import RedisKVStore

    return RedisKVStore(where, ttl=ttl)


def _sharing(tape_store: TapeStore, ttl: TTLConfig | None) -> KVStore:
    """A LangGraph store on the connections of an open tape store (their private attributes: same package)."""
    from graphtape.store.sqlite import SqliteTapeStore

    if isinstance(tape_store, SqliteTapeStore):  # a connection of its own: an SQLite file has no credentials
        from graphtape.store.kv_sqlite import SqliteKVStore

        return SqliteKVStore(tape_store.path, ttl=ttl, busy_timeout=tape_store.busy_timeout)
    # a PostgreSQL or Redis tape store exists only if its module was imported: no import of a driver here
    postgres = sys.modules.get("graphtape.store.postgres")
    if postgres is not None and isinstance(tape_store, postgres.PostgresTapeStore):
        from graphtape.store.kv_postgres import PostgresKVStore

        return PostgresKVStore(tape_store.url, ttl=ttl, pool=tape_store._pool)
    redis = sys.modules.get("graphtape.store.redis")
    if redis is not None and isinstance(tape_store, redis.RedisTapeStore):
        from graphtape.store.kv_redis import RedisKVStore

        return RedisKVStore(tape_store.url, ttl=ttl, client=tape_store._redis)
    return kv_store_for(tape_store.url, ttl=ttl)


def attach_store(graph: Any, store: BaseStore) -> Any:
    """``graph`` with ``store`` as its LangGraph store (what nodes get as ``store`` and from ``get_store()``).

    A graph compiled with a store of its own keeps it and is returned as it
    is; otherwise a copy with ``store`` is returned (the graph given is not
    changed, so it can be served elsewhere without it).
    """
    if getattr(graph, "store", None) is not None:
        return graph
    copy = graph.copy(update={"store": store})
    # ``Pregel.copy`` drops the msgpack allowlist compile gave the graph (LANGGRAPH_STRICT_MSGPACK):
    # kept, so a recording of the copy reads the graph's own types back (graphtape.recorder)
    allowlist = getattr(graph, "_serde_allowlist", None)
    if allowlist is not None and getattr(copy, "_serde_allowlist", None) is None:
        copy._serde_allowlist = allowlist
    return copy


class LazyStore(BaseStore):
    """A LangGraph store opened the first time a node uses it.

    A server gives its store to every graph it serves, most of which never
    touch it: opening it on first use keeps the connections (and, on SQLite,
    the tables) of a store nobody uses from being made at all.
    """

    def __init__(self, open_store: Callable[[], BaseStore]):
        self._open_store = open_store

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._open_store().batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._open_store().abatch(ops)
