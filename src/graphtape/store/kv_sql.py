"""The statements the SQLite and PostgreSQL LangGraph stores share on their table ``gt_kv``.

Both tables have the same columns and keys, and ``ns``/``key`` compare in
byte order on both, so every read and write below is the same SQL; only the
driver's placeholder differs (``?`` in sqlite3, ``%s`` in psycopg).
Statements are written here with ``?`` and :func:`in_dialect` turns them into
the driver's. What truly differs stays in the backends: migrations, how a
transaction is opened and retried, and how several addresses are read at
once (one query per address on SQLite, one ``unnest`` join on PostgreSQL).
"""

from __future__ import annotations

from typing import Any

from graphtape.store.kv_base import Write, under

__all__ = [
    "COLUMNS",
    "DELETE",
    "HAS_EXPIRED",
    "LIVE",
    "SWEEP",
    "TOUCH",
    "UPSERT",
    "in_dialect",
    "namespaces_query",
    "rows_under_query",
    "upsert_params",
]

#: the columns a :class:`~graphtape.store.kv_base.Row` is read from, in its order
COLUMNS = "ns, key, value, created_at, updated_at, expires_at, ttl_minutes"
#: an item that has not expired at the time given as its parameter
LIVE = "(expires_at IS NULL OR expires_at > ?)"
DELETE = "DELETE FROM gt_kv WHERE ns = ? AND key = ?"
#: parameters: :func:`upsert_params`
UPSERT = (
    f"INSERT INTO gt_kv ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, "
    "expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes, "
    # an item that expired but was not swept yet starts again
    "created_at = CASE WHEN gt_kv.expires_at <= excluded.updated_at "
    "THEN excluded.created_at ELSE gt_kv.created_at END"
)
#: parameters: ``(now, ns, key, now)``
TOUCH = (
    "UPDATE gt_kv SET expires_at = ? + ttl_minutes * 60 "
    "WHERE ns = ? AND key = ? AND ttl_minutes IS NOT NULL AND expires_at > ?"
)
HAS_EXPIRED = "SELECT 1 FROM gt_kv WHERE expires_at <= ? LIMIT 1"
SWEEP = "DELETE FROM gt_kv WHERE expires_at <= ?"


def in_dialect(text: str, param: str) -> str:
    """A statement written here with ``?`` placeholders, with the driver's ``param`` instead."""
    return text if param == "?" else text.replace("?", param)


def upsert_params(w: Write, now: float) -> tuple[Any, ...]:
    """The parameters of :data:`UPSERT` for the write ``w`` (not a delete) at ``now``."""
    expires = None if w.ttl is None else now + w.ttl * 60
    return (w.namespace, w.key, w.value, now, now, expires, w.ttl)


def _in_prefix(prefix: str) -> tuple[str, list[Any]]:
    """A WHERE clause (and its parameters) for the namespaces ``prefix`` and under it."""
    bounds = under(prefix)
    if bounds is None:
        return "1 = 1", []
    return "(ns = ? OR (ns >= ? AND ns < ?))", [prefix, *bounds]


def rows_under_query(prefix: str, now: float, limit: int | None) -> tuple[str, list[Any]]:
    """The live items in ``prefix`` and under it, most recently updated first (at most ``limit``)."""
    where, params = _in_prefix(prefix)
    query = f"SELECT {COLUMNS} FROM gt_kv WHERE {where} AND {LIVE} ORDER BY updated_at DESC, ns, key"
    params.append(now)
    if limit is not None:
        query += " LIMIT ?"
        params.append(limit)
    return query, params


def namespaces_query(prefix: str, now: float) -> tuple[str, list[Any]]:
    """The namespaces, ``prefix`` and under it, that hold a live item."""
    where, params = _in_prefix(prefix)
    return f"SELECT DISTINCT ns FROM gt_kv WHERE {where} AND {LIVE}", [*params, now]
