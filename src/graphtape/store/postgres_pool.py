"""Opening a psycopg connection pool at once, for the PostgreSQL stores that keep one of their own.

The LangGraph store (:mod:`graphtape.store.kv_postgres`) and the run queue
(:mod:`graphtape.store.runqueue_postgres`) each open a small pool beside the
tape store's. Both want it full before they return (``wait=True``), so that
a server that went away since their first connection fails the constructor
rather than the first query, and want a pool that could not open closed
again, not left retrying in the background. The caller translates the error
(each says what it was opening).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

__all__ = ["open_pool"]


def open_pool(
    conninfo: str,
    *,
    kwargs: dict[str, Any],
    max_size: int,
    configure: Callable[[psycopg.Connection[Any]], None],
    name: str,
    connect_timeout: float,
) -> ConnectionPool:
    """A pool of 1 to ``max_size`` connections, opened within ``connect_timeout`` seconds (at least 1).

    Raises what the pool raised (``psycopg.Error`` or ``PoolTimeout``) once the pool is closed."""
    pool: ConnectionPool = ConnectionPool(
        conninfo,
        kwargs=kwargs,
        min_size=1,
        max_size=max_size,
        open=False,
        configure=configure,
        name=name,
    )
    try:
        pool.open(wait=True, timeout=max(connect_timeout, 1.0))
    except (psycopg.Error, PoolTimeout):
        pool.close()
        raise
    return pool
