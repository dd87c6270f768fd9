"""LangGraph store items on the tape's Redis server, under the tape's prefix ``P`` + ``kv:``.

Key layout (plain Redis 7 types, no modules; the tape's keys and its
garbage collector never look under ``P kv:``):

=======================  =======  ======================================================
``P kv:schema``          string   the layout's version
``P kv:ns``              zset     every namespace holding an item, score 0 (lex order)
``P kv:items:<ns>``      hash     key -> ``created \\0 updated \\0 ttl \\0 value JSON``
``P kv:expiry``          zset     ``<ns>\\0<key>`` scored by when the item expires
=======================  =======  ======================================================

``<ns>`` is the namespace's labels joined by ``.``; neither a label nor a key
holds a NUL, and JSON text never holds a raw one, so ``\\0`` separates
fields without escaping. A namespace range is a ``ZRANGEBYLEX`` of
``P kv:ns``.

A batch's writes are one ``MULTI``/``EXEC`` under ``WATCH`` of the hashes it
changes (redis-py's ``transaction`` retries it when another client changed
them meanwhile): a put keeps the ``created`` it reads, and a namespace stays
in ``P kv:ns`` exactly while its hash has fields. Search and listings read
the hashes of the namespaces in range and sort in Python: Redis has no
query language, and a store of memories is small next to a tape.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langgraph.store.base import TTLConfig

from graphtape.errors import SchemaTooNew, StoreError
from graphtape.store.kv_base import KVStore, Row, Write

try:  # inside graphtape.store, ``import redis`` is still the top-level redis-py package
    import redis as redis_client
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry
except ImportError:  # pragma: no cover - exercised only without the extra
    redis_client = None  # type: ignore[assignment]

from graphtape.store.redis_layout import split_url

__all__ = ["LAYOUT_VERSION", "RedisKVStore"]

#: the version of the key layout above
LAYOUT_VERSION = 1

_CHUNK = 500


class RedisKVStore(KVStore):
    """LangGraph store items in Redis: ``redis://host:6379/0?prefix=graphtape:`` (the tape store's URL)."""

    def __init__(
        self,
        url: str,
        *,
        ttl: TTLConfig | None = None,
        clock_fn: Callable[[], float] | None = None,
        client: Any = None,
    ):
        """``client``: a redis-py client to share (the tape store's), left open by :meth:`close`."""
        super().__init__(ttl=ttl, clock_fn=clock_fn)
        client_url, prefix, self.url = split_url(url)
        if redis_client is None:
            raise StoreError(f"the store {self.url} needs the redis package; install graphtape[redis]")
        if not prefix:
            raise StoreError(f"{self.url} has an empty prefix; use ?prefix=NAME: so graphtape's keys stay apart")
        p = prefix + "kv:"
        self._schema_key = p + "schema"
        self._ns_key = p + "ns"
        self._items_ns = p + "items:"
        self._expiry_key = p + "expiry"
        self._owned = client is None
        try:
            # typed Any: redis-py's stubs type a reply as a union of every reply's type
            self._redis: Any = client or redis_client.Redis.from_url(
                client_url,
                socket_connect_timeout=5,
                socket_timeout=30,
                retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), 3),
            )
        except (ValueError, TypeError) as exc:
            raise StoreError(f"cannot use {self.url} as a Redis store URL: {exc}") from exc
        try:
            with self._errors():
                self._redis.set(self._schema_key, LAYOUT_VERSION, nx=True)
                version = int(self._redis.get(self._schema_key) or 0)
            if version > LAYOUT_VERSION:
                raise SchemaTooNew(
                    f"{self.url} has LangGraph store layout v{version} but this graphtape knows "
                    f"v{LAYOUT_VERSION}; upgrade graphtape to use it"
                )
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except redis_client.RedisError as exc:
            text = " ".join(str(exc).split()) or type(exc).__name__
            raise StoreError(f"Redis error on {self.url} (LangGraph store): {text}") from exc

    def _items(self, ns: str) -> str:
        return self._items_ns + ns

    # -- KVStore -------------------------------------------------------------------

    def _rows(self, addresses: Sequence[tuple[str, str]], now: float) -> list[Row]:
        with self._errors():
            pipe = self._redis.pipeline(transaction=False)
            for ns, key in addresses:
                pipe.hget(self._items(ns), key)
            records = pipe.execute()
        found = [(ns, key, rec.decode()) for (ns, key), rec in zip(addresses, records) if rec is not None]
        return self._decode(found, now)

    def _in_range(self, prefix: str) -> list[str]:
        with self._errors():
            if not prefix:
                return [n.decode() for n in self._redis.zrangebylex(self._ns_key, "-", "+")]
            names = [n.decode() for n in self._redis.zrangebylex(self._ns_key, "[" + prefix, "(" + prefix + "/")]
        return [n for n in names if n == prefix or n.startswith(prefix + ".")]

    def _rows_under(self, prefix: str, now: float, limit: int | None) -> list[Row]:
        names = self._in_range(prefix)
        found: list[tuple[str, str, str]] = []
        for i in range(0, len(names), _CHUNK):
            with self._errors():
                pipe = self._redis.pipeline(transaction=False)
                for ns in names[i : i + _CHUNK]:
                    pipe.hgetall(self._items(ns))
                replies = pipe.execute()
            for ns, fields in zip(names[i : i + _CHUNK], replies):
                found.extend((ns, key.decode(), rec.decode()) for key, rec in fields.items())
        rows = self._decode(found, now)
        rows.sort(key=lambda r: (-r.updated_at, r.namespace, r.key))
        return rows if limit is None else rows[:limit]

    def _decode(self, found: Sequence[tuple[str, str, str]], now: float) -> list[Row]:
        """Rows from ``(ns, key, record)``, with their expiry read from ``P kv:expiry``; the live ones."""
        parsed: list[tuple[str, str, str, float, float, float | None]] = []
        for ns, key, record in found:
            made, changed, minutes, text = record.split("\x00", 3)
            parsed.append((ns, key, text, float(made), float(changed), float(minutes) if minutes else None))
        with_ttl = [f"{ns}\x00{key}" for ns, key, _, _, _, ttl in parsed if ttl is not None]
        expiry: dict[str, float | None] = {}
        for i in range(0, len(with_ttl), _CHUNK):
            chunk = with_ttl[i : i + _CHUNK]
            with self._errors():
                scores = self._redis.zmscore(self._expiry_key, chunk)
            expiry.update(zip(chunk, scores))
        rows = []
        for ns, key, value, created, updated, ttl in parsed:
            expires = expiry.get(f"{ns}\x00{key}") if ttl is not None else None
            row = Row(ns, key, value, created, updated, expires, ttl)
            if row.live(now):
                rows.append(row)
        return rows

    def _namespaces(self, prefix: str, now: float) -> list[str]:
        return self._in_range(prefix)  # the batch swept expired items first, so each of these holds a live one

    def _apply(self, writes: Sequence[Write], now: float) -> None:
        by_ns: dict[str, list[Write]] = defaultdict(list)
        for w in writes:
            by_ns[w.namespace].append(w)

        def transaction(pipe: Any) -> None:
            before = {}
            for ns, ws in by_ns.items():  # read under WATCH (the pipeline runs commands at once until multi())
                before[ns] = (pipe.hmget(self._items(ns), [w.key for w in ws]), pipe.hlen(self._items(ns)))
            pipe.multi()
            for ns, ws in by_ns.items():
                olds, count = before[ns]
                for w, old in zip(ws, olds):
                    member = f"{ns}\x00{w.key}"
                    if w.value is None:
                        if old is not None:
                            pipe.hdel(self._items(ns), w.key)
                            count -= 1
                        pipe.zrem(self._expiry_key, member)
                        continue
                    created = old.split(b"\x00", 1)[0].decode() if old is not None else repr(now)
                    ttl = "" if w.ttl is None else repr(w.ttl)
                    pipe.hset(self._items(ns), w.key, f"{created}\x00{now!r}\x00{ttl}\x00{w.value}")
                    count += old is None
                    if w.ttl is None:
                        pipe.zrem(self._expiry_key, member)
                    else:
                        pipe.zadd(self._expiry_key, {member: now + w.ttl * 60})
                if count > 0:
                    pipe.zadd(self._ns_key, {ns: 0})
                else:
                    pipe.zrem(self._ns_key, ns)

        with self._errors():
            self._redis.transaction(transaction, *[self._items(ns) for ns in by_ns])

    def _touch(self, rows: Sequence[Row], now: float) -> None:
        with self._errors():
            pipe = self._redis.pipeline(transaction=False)
            for r in rows:
                assert r.ttl is not None
                # XX: only an item still there (one deleted meanwhile stays deleted)
                pipe.zadd(self._expiry_key, {f"{r.namespace}\x00{r.key}": now + r.ttl * 60}, xx=True)
            pipe.execute()

    def _sweep(self, now: float) -> int:
        with self._errors():
            due = [m.decode() for m in self._redis.zrangebyscore(self._expiry_key, "-inf", now)]
        if not due:
            return 0
        by_ns: dict[str, list[str]] = defaultdict(list)
        for member in due:
            ns, key = member.split("\x00", 1)
            by_ns[ns].append(key)

        def transaction(pipe: Any) -> int:
            scores = pipe.zmscore(self._expiry_key, due)
            still = {m for m, s in zip(due, scores) if s is not None and s <= now}
            counts = {ns: pipe.hlen(self._items(ns)) for ns in by_ns}
            pipe.multi()
            deleted = 0
            for ns, keys in by_ns.items():
                gone = [k for k in keys if f"{ns}\x00{k}" in still]
                if not gone:
                    continue
                pipe.hdel(self._items(ns), *gone)
                pipe.zrem(self._expiry_key, *[f"{ns}\x00{k}" for k in gone])
                deleted += len(gone)
                if counts[ns] - len(gone) <= 0:
                    pipe.zrem(self._ns_key, ns)
            return deleted

        with self._errors():
            return int(
                self._redis.transaction(
                    transaction, self._expiry_key, *[self._items(ns) for ns in by_ns], value_from_callable=True
                )
            )

    def close(self) -> None:
        if self._owned:
            self._redis.close()
