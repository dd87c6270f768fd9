"""Everything a store holds, as raw bytes, read around graphtape (for tests that grep a store).

``raw_dump(url)`` returns every byte the backend keeps for the store at
``url``: the SQLite file and its WAL, every row of every table of the
PostgreSQL schema, every key and value under the Redis prefix. Compressed
values are added inflated as well (blobs are zlib-compressed or deflated with
a preset dictionary, event bodies deflated with another), so a secret inside
them is found too.
``exists(url)`` says whether anything is there at all.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit, urlunsplit


def _inflated(value: bytes) -> list[bytes]:
    from graphtape.store.codec import BLOB_ZDICT_1 as _BLOB_ZDICT_1
    from graphtape.store.codec import EVENT_ZDICT_1 as _EVENT_ZDICT_1
    from graphtape.store.codec import unpack_event

    out = []
    if value[:1] == b"\x02":  # an event body in format 2: ids as bytes until unpacked
        try:
            out.append(json.dumps(unpack_event(value)).encode())
        except (ValueError, zlib.error):  # another value that starts with the same byte
            pass
    for start in (0, 1):  # a one-byte marker ("z", b"\x01") may precede the stream
        for wbits, zdict in ((15, None), (-10, _EVENT_ZDICT_1), (-15, _BLOB_ZDICT_1), (-15, None)):
            try:
                d = zlib.decompressobj(wbits, zdict=zdict) if zdict else zlib.decompressobj(wbits)
                out.append(d.decompress(value[start:]) + d.flush())
            except zlib.error:
                pass
    return out


def _with_inflated(values: list[bytes]) -> bytes:
    parts = []
    for v in values:
        parts.append(v)
        parts.extend(_inflated(v))
    return b"\n".join(parts)


def _sqlite_path(url: str) -> Path:
    rest = url.partition("://")[2]
    return Path(rest[1:].partition("?")[0])


def _postgres(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    schema = dict(query).get("schema", "graphtape")
    kept = "&".join(f"{k}={v}" for k, v in query if k != "schema")
    return urlunsplit(parts._replace(query=kept)), schema


def _redis(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    prefix = dict(query).get("prefix", "graphtape:")
    kept = "&".join(f"{k}={v}" for k, v in query if k != "prefix")
    return urlunsplit(parts._replace(query=kept)), prefix


def raw_dump(url: str) -> bytes:
    scheme = url.partition("://")[0]
    if scheme.startswith("sqlite"):
        import sqlite3

        path = _sqlite_path(url)
        values = [p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists()]
        conn = sqlite3.connect(path)
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for table in tables:
                for row in conn.execute(f'SELECT * FROM "{table}"'):
                    values.extend(v if isinstance(v, bytes) else str(v).encode() for v in row)
        finally:
            conn.close()
        return _with_inflated(values)
    if scheme.startswith("postgres"):
        import psycopg
        from psycopg import sql

        conninfo, schema = _postgres(url)
        values = []
        with psycopg.connect(conninfo, autocommit=True) as conn:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
                )
            ]
            assert tables, f"no tables in schema {schema}"
            for table in tables:
                for row in conn.execute(
                    sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table))
                ):
                    values.extend(bytes(v) if isinstance(v, (bytes, memoryview)) else str(v).encode() for v in row)
        return _with_inflated(values)
    import redis

    client_url, prefix = _redis(url)
    client = redis.Redis.from_url(client_url)
    values = []
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        assert keys, f"no keys under {prefix}"
        for key in keys:
            values.append(key)
            kind = client.type(key).decode()
            if kind == "string":
                values.append(client.get(key))
            elif kind == "hash":
                for k, v in client.hgetall(key).items():
                    values += [k, v]
            elif kind == "list":
                values += client.lrange(key, 0, -1)
            elif kind == "set":
                values += list(client.smembers(key))
            elif kind == "zset":
                values += [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
            elif kind == "stream":
                for _, fields in client.xrange(key):
                    for k, v in fields.items():
                        values += [k, v]
            else:  # pragma: no cover - a type graphtape does not use
                raise AssertionError(f"unexpected Redis type {kind} for {key!r}")
    finally:
        client.close()
    return _with_inflated([v for v in values if v is not None])


def exists(url: str) -> bool:
    """Whether the backend holds anything for the store at ``url`` (a file, a schema, a key)."""
    scheme = url.partition("://")[0]
    if scheme.startswith("sqlite"):
        path = _sqlite_path(url)
        return any(Path(f"{path}{s}").exists() for s in ("", "-wal", "-shm", "-journal"))
    if scheme.startswith("postgres"):
        import psycopg

        conninfo, schema = _postgres(url)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None
    import redis

    client_url, prefix = _redis(url)
    client = redis.Redis.from_url(client_url)
    try:
        return next(iter(client.scan_iter(match=prefix + "*", count=1000)), None) is not None
    finally:
        client.close()
