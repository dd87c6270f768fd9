"""A tape store on a plain Redis 7 server (``redis://`` or ``rediss://``).

Why it is built this way:

* **No modules.** LangGraph's own Redis saver needs RedisJSON and
  RediSearch and fails on a stock server; this store uses only core data
  types (strings, hashes, sorted sets, sets) and Lua, so any Redis 7
  server works, managed or not.
* **One batch, one script.** :meth:`RedisTapeStore.write` turns a
  :class:`~graphtape.store.base.WriteBatch` into a list of operations that
  one Lua script runs in two passes: first every check (fencing token,
  duplicate run ids, duplicate event ``seq``), then every write. Redis runs
  a script without interleaving other clients, so the checks and the writes
  are one atomic step and a refused batch has written nothing.
* **Retries are safe.** A command is resent when the connection drops; a
  script that ran but whose reply was lost must not then be refused as a
  duplicate. A batch that creates runs carries a random id that the script
  records for a minute; any other batch with events is recognised by them
  (all already stored, byte for byte); the rest are idempotent.
* **One round trip per super-step, and nothing around it.** A recorded step
  is one batch, so one script call; it runs on connections the store keeps
  for itself (redis-py's connection class, the client's settings and retry
  policy), past redis-py's client layer, which cost as much as the round
  trip (see :meth:`RedisTapeStore._eval`).
* **Server time for leases.** Lease expiry is computed from Redis ``TIME``
  inside the script, so hosts with skewed clocks still agree on who holds a
  thread.
* **Garbage collection blocks writers, like SQLite's.** Content addressed
  blobs are written "if absent" and a recorder leaves out blobs it already
  wrote, so a batch may refer to a blob without carrying it. A collection
  that ran concurrently with such a batch could delete that blob. The
  collector therefore holds a lock key that write scripts respect (they
  wait up to ``busy_timeout`` and then raise
  :class:`~graphtape.errors.DatabaseLocked`, as SQLite's busy writers do);
  deletions, reads and leases are not blocked.

The key layout, the record encodings and the Lua scripts live in
:mod:`graphtape.store.redis_layout`.

Redis Cluster is not supported: scripts touch keys in many hash slots.

Why over 500 lines: Redis has no query language, so every listing, filter and
order of the interface is written here by hand (sorted sets walked page by
page), and garbage collection must hold its lock across scans.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import os
import secrets
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

try:  # inside graphtape.store, ``import redis`` is still the top-level redis-py package
    import redis as redis_client
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry
except ImportError:  # pragma: no cover - exercised only without the extra
    redis_client = None  # type: ignore[assignment]

from graphtape.errors import DatabaseLocked, LeaseLost, SchemaTooNew, StoreError
from graphtape.events import refs as event_refs
from graphtape.store.base import (
    RUN_UPDATABLE,
    ArchiveEntry,
    CheckpointRow,
    EventRow,
    RunRecord,
    StoreNotFound,
    TapeStore,
    WriteBatch,
    WriteRow,
)
from graphtape.store.codec import unpack_event
from graphtape.store.gc import mark_live
from graphtape.store.redis_layout import (
    ACQUIRE_LEASE_LUA,
    APPLY_LUA,
    ASCII_LOWER,
    CHAIN_LUA,
    DELETE_RUNS_LUA,
    DELETE_THREAD_LUA,
    GC_LOCK_LUA,
    LATEST_CHECKPOINT_LUA,
    RELEASE_LEASE_LUA,
    SWEEP_LUA,
    Keys,
    Ops,
    add_batch,
    as_bytes,
    as_str,
    decode_chain_node,
    decode_checkpoint,
    decode_event,
    decode_run,
    decode_stored_blob,
    glob_escape,
    group_key,
    id_member,
    split_event,
    split_id_member,
    split_url,
    write_group_key,
)

# The public constants moved with the layout; ``X as X`` keeps them importable from here.
from graphtape.store.redis_layout import COMPRESS_OVER as COMPRESS_OVER
from graphtape.store.redis_layout import DEFAULT_PREFIX as DEFAULT_PREFIX

#: How long a batch id is remembered, so that a resent batch is not refused
#: as a duplicate. Resends happen within seconds; a minute is plenty.
APPLIED_TTL = 60

#: How long the garbage collector's lock lives without being refreshed: a
#: crashed collector blocks writers for at most this long.
GC_LOCK_TTL_MS = 30_000

#: Items per read round trip (MGET/HMGET/pages of a sorted set).
_CHUNK = 500

#: Blobs larger than this (bytes) are sent once per store instance: later batches only check that the
#: server still has them. Below it, compressing and sending costs less than remembering.
SEND_ONCE_OVER = 8192

#: How many such addresses a store remembers (then it forgets them all and starts again).
_SENT_MAX = 4096


def _migrate_v1(store: RedisTapeStore) -> None:
    """The initial key layout: nothing to convert, keys are created on first use."""


#: Ordered schema changes; the ``schema`` key holds how many were applied. A
#: later layout change appends a function that converts the keys in place.
def _migrate_v2(store: RedisTapeStore) -> None:
    """Checkpoint headers gain two fields, the writers and the calls of the step. Old seven-field
    headers stay readable (both are then not known); the version makes an older graphtape refuse
    the new ones."""


def _migrate_v3(store: RedisTapeStore) -> None:
    """No keys change. A checkpoint's channel value may now be a chained message list (see
    :mod:`graphtape.runtime.saver_values`); the version makes an older graphtape refuse the store
    instead of misreading the first such value."""


MIGRATIONS: list[Callable[[RedisTapeStore], None]] = [_migrate_v1, _migrate_v2, _migrate_v3]

# Columns of a run that may not be NULL in SQLite; updating one to None is
# refused there, so it is refused here too.
_RUN_NOT_NULL = frozenset(
    {"status", "llm_calls", "tool_calls", "effect_calls", "served_calls", "live_calls", "tokens", "meta"}
)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _matches(metadata: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Every key of ``wanted`` equal in ``metadata`` (a missing key counts as None, as SQL's NULL IS NULL)."""
    return all(metadata.get(k) == v for k, v in wanted.items())


class RedisTapeStore(TapeStore):
    """Tapes in a Redis 7 database: ``redis://[user:password@]host:port/db[?prefix=graphtape:]``.

    ``rediss://`` connects with TLS. Other query parameters go to redis-py
    (``socket_timeout``, ``socket_connect_timeout``, ``ssl_ca_certs``, ...).
    One instance is safe to share between threads (redis-py's connection
    pool); processes and hosts coordinate through the server.
    """

    def __init__(self, url: str, *, busy_timeout: float = 10.0, create: bool = True):
        client_url, prefix, self.url = split_url(url)
        self.busy_timeout = busy_timeout
        if redis_client is None:
            raise StoreError(f"the store {self.url} needs the redis package; install graphtape[redis]")
        if not prefix:
            raise StoreError(f"{self.url} has an empty prefix; use ?prefix=NAME: so graphtape's keys stay apart")
        self.prefix = prefix
        self.keys = Keys(prefix)
        self._closed = False
        self._close_lock = threading.Lock()
        # Addresses of large blobs this store wrote (see write), in a dict for its order.
        self._sent: dict[str, None] = {}
        # The write path's own connections (see _eval): idle ones in _spare, every one made in _made.
        self._spare: list[Any] = []
        self._made: list[Any] = []
        self._pid = os.getpid()
        try:
            self._redis = redis_client.Redis.from_url(
                client_url,
                socket_connect_timeout=5,
                socket_timeout=30,
                health_check_interval=30,
                # Resending is safe: every script is idempotent (batches carry an id).
                retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), 3),
            )
        except (ValueError, TypeError) as exc:
            raise StoreError(f"cannot use {self.url} as a Redis store URL: {_one_line(exc)}") from exc
        r = self._redis
        self._apply = r.register_script(APPLY_LUA)
        self._delete_runs_script = r.register_script(DELETE_RUNS_LUA)
        self._delete_thread_script = r.register_script(DELETE_THREAD_LUA)
        self._latest_script = r.register_script(LATEST_CHECKPOINT_LUA)
        self._chain_script = r.register_script(CHAIN_LUA)
        self._acquire_script = r.register_script(ACQUIRE_LEASE_LUA)
        self._release_script = r.register_script(RELEASE_LEASE_LUA)
        self._gc_lock_script = r.register_script(GC_LOCK_LUA)
        self._sweep_script = r.register_script(SWEEP_LUA)
        try:
            with self._errors():
                try:
                    r.ping()
                except TypeError as exc:  # redis-py passes unknown URL parameters on to the connection
                    raise StoreError(
                        f"cannot use {self.url} as a Redis store URL: {_one_line(exc)}; remove the unknown parameter"
                    ) from exc
                self._check_server()
                if not create and self.schema_version == 0:
                    raise StoreNotFound(
                        f"no tape store at {self.url}: no graphtape keys under the prefix {self.prefix!r}; check "
                        "--url or GRAPHTAPE_URL (a store is created by recording a run, or by graphtape import)"
                    )
                self._migrate()
        except BaseException:
            self._redis.close()
            raise

    # -- plumbing ------------------------------------------------------------------

    def _translate(self, exc: Exception) -> StoreError:
        text = _one_line(exc)
        errors = redis_client.exceptions
        if isinstance(exc, errors.AuthenticationError):
            return StoreError(
                f"Redis at {self.url} refused the credentials ({text}); fix the user or password in the URL"
            )
        if isinstance(exc, errors.TimeoutError):
            return StoreError(
                f"Redis at {self.url} did not answer in time ({text}); check the server and network, "
                "or raise socket_timeout= in the URL"
            )
        if isinstance(exc, errors.ConnectionError):
            return StoreError(f"cannot reach Redis at {self.url} ({text}); start the server or fix the store URL")
        if isinstance(exc, errors.ReadOnlyError):
            return StoreError(f"Redis at {self.url} is a read-only replica; point the store URL at the primary")
        if "OOM" in text:
            return StoreError(
                f"Redis at {self.url} is out of memory ({text}); delete old runs and collect garbage, "
                "or raise maxmemory"
            )
        if text.startswith("BUSY"):
            return StoreError(f"Redis at {self.url} is busy running a long script ({text}); retry in a moment")
        if "WRONGTYPE" in text:
            return StoreError(
                f"Redis at {self.url} holds a foreign key under the prefix {self.prefix!r} ({text}); "
                "use another ?prefix= for graphtape"
            )
        return StoreError(f"Redis error on {self.url}: {text}")

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn redis-py errors into one-line :class:`StoreError` s naming the store."""
        try:
            yield
        except redis_client.RedisError as exc:
            raise self._translate(exc) from exc

    def _check_server(self) -> None:
        """Refuse servers older than Redis 7 (scripts declare flags, a 7.0 feature); warn when keys may be evicted.

        A tape that silently loses blobs to eviction is worse than a full
        one, so an ``allkeys-*`` policy earns a warning.
        """
        try:
            info = self._redis.info()
        except redis_client.ResponseError:  # INFO disabled (some managed services): trust the operator
            return
        version = as_str(str(info.get("redis_version", "7")))
        try:
            major = int(version.split(".")[0])
        except ValueError:
            major = 7
        if major < 7:
            raise StoreError(f"Redis at {self.url} is version {version}; graphtape needs Redis 7 or later")
        policy = as_str(info.get("maxmemory_policy", "noeviction"))
        if policy.startswith("allkeys-"):
            warnings.warn(
                f"Redis at {self.url} has maxmemory-policy {policy}: it may evict tape keys; "
                "set noeviction (or volatile-*) for a server that keeps tapes",
                RuntimeWarning,
                stacklevel=3,
            )

    def _migrate(self) -> None:
        version = self.schema_version
        if version > len(MIGRATIONS):
            raise SchemaTooNew(
                f"{self.url} has tape schema v{version} but this graphtape knows v{len(MIGRATIONS)}; "
                "upgrade graphtape to read it"
            )
        for index in range(version, len(MIGRATIONS)):
            MIGRATIONS[index](self)
            # Compare-and-set: when two processes migrate at once, one records each step.
            self._redis.eval(
                "if (redis.call('GET', KEYS[1]) or '0') == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) end",
                1,
                self.keys.schema,
                str(index),
                str(index + 1),
            )

    @property
    def schema_version(self) -> int:
        with self._errors():
            raw = self._redis.get(self.keys.schema)
        if raw is None:
            return 0
        try:
            return int(raw)
        except ValueError:
            raise StoreError(
                f"{self.url}: key {self.keys.schema!r} is not a graphtape schema version; use another ?prefix="
            ) from None

    def _eval(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run a registered script on one of the store's own connections: the write path's one round trip.

        Why not ``script(keys=..., args=...)``: redis-py's client layer (pool
        checkout with its lock and pid check, observability hooks, retry
        wrappers) costs as much as the round trip itself (a PING measured
        0.15 ms through the client, 0.08 ms on its connection, 0.04 ms on a
        bare socket, on this project's 2-vCPU machines), and a recorded
        super-step makes one call. The connections here are redis-py's own class, made from the
        pool's settings (TLS, credentials, timeouts, health checks), and a
        failure is handled as redis-py's client handles it: the connection is
        dropped and the command resent under the client's ``Retry`` policy
        (safe: every script is idempotent or recognises a resent batch). A
        server that lost its script cache (restart, ``SCRIPT FLUSH``) is
        given the script again.
        """
        pool = self._redis.connection_pool
        if getattr(pool, "cache", None) is not None:  # client-side caching wraps connections: leave it to redis-py
            return script(keys=keys, args=args)
        if self._pid != os.getpid():  # a forked child must not share its parent's sockets
            self._spare, self._made, self._pid = [], [], os.getpid()
        try:
            conn = self._spare.pop()  # list.pop/append are atomic: no lock needed between threads
        except IndexError:
            conn = pool.connection_class(**pool.connection_kwargs)
            self._made.append(conn)
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)

        def send() -> Any:
            conn.send_command(*command)
            try:
                return conn.read_response()
            except redis_client.exceptions.NoScriptError:
                script.sha = self._load(conn, script.script)
                conn.send_command(*(command[0], script.sha, *command[2:]))
                return conn.read_response()

        usable = False
        try:
            reply = conn.retry.call_with_retry(send, lambda _error: conn.disconnect())
            usable = True
            return reply
        except redis_client.ResponseError:
            usable = True  # an error reply was read whole: the connection is in step
            raise
        finally:
            if not usable:  # a reply may be half read: never reuse the socket as it is
                conn.disconnect()
            if self._closed:
                conn.disconnect()
            else:
                self._spare.append(conn)

    @staticmethod
    def _load(conn: Any, source: str) -> str:
        conn.send_command("SCRIPT", "LOAD", source)
        return as_str(conn.read_response())

    def _run_apply(self, ops: Ops, *, marker: bool, wait_for_gc: bool) -> list[bytes]:
        """Run the apply script, waiting (up to ``busy_timeout``) while a garbage collection holds its lock."""
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.01
        args = ops.argv(APPLIED_TTL if marker else 0, wait_for_gc)
        while True:
            with self._errors():
                reply = self._eval(self._apply, ops.keys, args)
            if reply[0] != b"gc":
                return reply
            if time.monotonic() >= deadline:
                raise DatabaseLocked(
                    f"{self.url} is locked by a garbage collection in another process (waited "
                    f"{self.busy_timeout:g}s); retry when it finishes, or raise the busy timeout"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    # -- writes ----------------------------------------------------------------------

    def write(self, batch: WriteBatch, *, fence: tuple[str, int] | None = None) -> None:
        if not batch:
            return
        k = self.keys
        # Refusals that need no server state are found before anything is sent.
        seen_runs: set[str] = set()
        for run in batch.new_runs:
            if run.run_id in seen_runs:
                raise StoreError(f"write refused by {self.url}: run {run.run_id} appears twice in one batch")
            seen_runs.add(run.run_id)
        seen_events: set[tuple[str, int]] = set()
        events_by_run: dict[str, list[EventRow]] = {}
        for ev in batch.events:
            if (ev.run_id, ev.seq) in seen_events:
                raise StoreError(
                    f"write refused by {self.url}: event {ev.seq} of run {ev.run_id} appears twice in one batch"
                )
            seen_events.add((ev.run_id, ev.seq))
            events_by_run.setdefault(ev.run_id, []).append(ev)
        for run_id, fields in batch.run_updates:
            bad = set(fields) - RUN_UPDATABLE
            if bad:
                raise StoreError(f"cannot update run columns {sorted(bad)}")
            nulls = sorted(n for n, v in fields.items() if v is None and n in _RUN_NOT_NULL)
            if nulls:
                raise StoreError(f"write refused by {self.url}: run columns {nulls} of {run_id} cannot be None")

        # Large blobs this store sent before are only checked to exist (the same input, document or
        # state value in run after run): neither compressed nor sent again while the server has them.
        large = [h for h, data in batch.blobs.items() if len(data) > SEND_ONCE_OVER]
        have = {h for h in large if h in self._sent}
        while True:
            # A batch that creates runs carries an id the script records for a minute, so that a resend of
            # it is not refused as a duplicate run; any other batch is recognised by its events (see
            # APPLY_LUA) or is idempotent (content-addressed blobs, checkpoint and write records, updates).
            ops = Ops(k, secrets.token_hex(12) if batch.new_runs else None)
            add_batch(ops, k, batch, events_by_run, fence, have)
            reply = self._run_apply(ops, marker=bool(batch.new_runs), wait_for_gc=True)
            if reply[0] != b"missing":
                break
            # a blob sent before was collected since: nothing was written, send the batch whole
            self._sent.clear()
            have = set()
        verdict = reply[0]
        if verdict == b"ok":
            if len(self._sent) + len(large) > _SENT_MAX:
                self._sent.clear()
            self._sent.update(dict.fromkeys(large))
            return
        if verdict == b"lease":
            current = as_str(reply[1]) or "none"
            raise LeaseLost(
                f"lease {fence[0]} now belongs to another process (our token {fence[1]}, current {current}); "  # type: ignore[index]
                "this run must stop: the thread moved on"
            )
        if verdict == b"exists":
            key = ops.keys[int(reply[1]) - 1]
            run_id = key[len(k.run("")) :]
            raise StoreError(
                f"write refused by {self.url}: run {run_id} is already in the store (is this run already recorded?)"
            )
        if verdict == b"dup":
            key = ops.keys[int(reply[1]) - 1]
            run_id = key[len(k.events_ns) :]
            raise StoreError(
                f"write refused by {self.url}: event {as_str(reply[2])} of run {run_id} is already in "
                "the store (is this run already recorded?)"
            )
        raise StoreError(f"Redis at {self.url} gave an unexpected reply {reply!r}; is the prefix shared?")

    # -- reads ---------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._errors():
            fields = self._redis.hgetall(self.keys.run(run_id))
        return decode_run(fields) if fields else None

    def _runs(self, run_ids: Sequence[str]) -> list[RunRecord | None]:
        with self._errors():
            pipe = self._redis.pipeline(transaction=False)
            for run_id in run_ids:
                pipe.hgetall(self.keys.run(run_id))
            rows = pipe.execute()
        return [decode_run(f) if f else None for f in rows]

    def find_runs(self, prefix: str, limit: int = 2) -> list[str]:
        """Ids starting with ``prefix`` ignoring ASCII case (as SQLite's ``LIKE``), ordered by the folded id.

        SQLite orders by the id itself; the two orders differ only among ids
        that mix upper and lower case, which graphtape's run ids never do.
        """
        folded = prefix.translate(ASCII_LOWER)
        out: list[str] = []
        start = "[" + folded
        with self._errors():
            while limit is None or len(out) < limit:
                page = self._redis.zrangebylex(self.keys.run_ids, start, "+", start=0, num=_CHUNK)
                if not page:
                    break
                for raw in page:
                    key, run_id = split_id_member(as_str(raw))
                    if not key.startswith(folded):
                        return out
                    out.append(run_id)
                    if limit is not None and len(out) >= limit:
                        return out
                start = "(" + as_str(page[-1])
        return out

    def list_runs(
        self,
        *,
        thread_id=None,
        status=None,
        limit=50,
        newest_first=True,
        graph=None,
        mode=None,
        since=None,
        until=None,
        after=None,
        offset=0,
    ) -> list[RunRecord]:
        """The time window and the cursor are score ranges of the runs' sorted set (by start, or the
        thread's); graph, status and mode are checked on the runs read from that range."""
        if limit is not None and limit <= 0:
            return []
        index = self.keys.runs_by_start if thread_id is None else self.keys.thread_runs(thread_id)
        low, high = since, until
        if after is not None:  # the ties of the cursor's start are kept or not by run id below
            if newest_first:
                high = after[0] if high is None else min(high, after[0])
            else:
                low = after[0] if low is None else max(low, after[0])
        low_s = "-inf" if low is None else repr(float(low))
        high_s = "+inf" if high is None else repr(float(high))
        wanted = None if limit is None else limit + offset
        rows: list[RunRecord] = []
        position = 0
        page_size = _CHUNK if wanted is None else max(min(wanted * 2, _CHUNK), 16)
        boundary: float | None = None
        seen: set[str] = set()
        while True:
            with self._errors():
                if newest_first:
                    reply = self._redis.zrevrangebyscore(
                        index, high_s, low_s, start=position, num=page_size, withscores=True
                    )
                else:
                    reply = self._redis.zrangebyscore(
                        index, low_s, high_s, start=position, num=page_size, withscores=True
                    )
            # withscores=True: (member, score) pairs; redis-py's return type covers every option
            page = cast("list[tuple[bytes, float]]", reply)
            if not page:
                break
            position += len(page)
            done = False
            runs = self._runs([as_str(m) for m, _ in page])
            for (_, score), run in zip(page, runs):
                if boundary is not None and score != boundary:
                    done = True  # past every run tied with the last one kept
                    break
                if run is None or run.run_id in seen:  # shifted into the next page by a concurrent insert
                    continue
                if (
                    (status is not None and run.status != status)
                    or (graph is not None and run.graph != graph)
                    or (mode is not None and run.mode != mode)
                ):
                    continue
                if after is not None and score == after[0] and run.run_id <= after[1]:
                    continue
                seen.add(run.run_id)
                rows.append(run)
                if wanted is not None and len(rows) >= wanted and boundary is None:
                    boundary = score
            if done or len(page) < page_size:
                break
        # Ties on started_at go by run id, as SQLite's ORDER BY started_at, run_id.
        if newest_first:
            rows.sort(key=lambda r: r.run_id)
            rows.sort(key=lambda r: r.started_at, reverse=True)
        else:
            rows.sort(key=lambda r: (r.started_at, r.run_id))
        return rows[offset:] if limit is None else rows[offset : offset + limit]

    def count_runs(
        self, *, thread_id=None, status=None, graph=None, mode=None, since=None, until=None, limit=None
    ) -> int:
        """A count of the sorted set's score range when only the time is filtered; else the runs are
        read (up to ``limit`` matches, but every run of the range when fewer match)."""
        if status is None and graph is None and mode is None:
            index = self.keys.runs_by_start if thread_id is None else self.keys.thread_runs(thread_id)
            low = "-inf" if since is None else repr(float(since))
            high = "+inf" if until is None else repr(float(until))
            with self._errors():
                counted = int(self._redis.zcount(index, low, high))
            return counted if limit is None else min(counted, limit)
        return super().count_runs(
            thread_id=thread_id, status=status, graph=graph, mode=mode, since=since, until=until, limit=limit
        )

    def events(self, run_id: str, kinds: Sequence[str] | None = None) -> list[EventRow]:
        with self._errors():
            stored = self._redis.hgetall(self.keys.events(run_id))
        if kinds:
            # the kind is read from the record's prefix: events of other kinds are never unpacked
            wanted = {json.dumps(k).encode("utf-8") for k in kinds}
            rows = []
            for seq, value in stored.items():
                ts, kind, data = as_bytes(value).split(b"\x00", 2)
                if kind in wanted:
                    rows.append(EventRow(run_id, int(seq), json.loads(kind), float(ts), unpack_event(data)))
        else:
            rows = [decode_event(run_id, as_bytes(seq), as_bytes(value)) for seq, value in stored.items()]
        rows.sort(key=lambda e: e.seq)
        return rows

    def get_blobs(self, hashes: Iterable[str]) -> dict[str, bytes]:
        wanted = list(dict.fromkeys(hashes))
        out: dict[str, bytes] = {}
        for i in range(0, len(wanted), _CHUNK):
            chunk = wanted[i : i + _CHUNK]
            with self._errors():
                values = self._redis.mget([self.keys.blob(h) for h in chunk])
            for h, stored in zip(chunk, values):
                if stored is not None:
                    out[h] = decode_stored_blob(as_bytes(stored))
        return out

    def get_chain_nodes(self, ids: Iterable[str]) -> dict[str, tuple[str | None, str]]:
        wanted = list(dict.fromkeys(ids))
        out: dict[str, tuple[str | None, str]] = {}
        for i in range(0, len(wanted), _CHUNK):
            chunk = wanted[i : i + _CHUNK]
            with self._errors():
                values = self._redis.hmget(self.keys.chains, chunk)
            for cid, stored in zip(chunk, values):
                if stored is not None:
                    out[cid] = decode_chain_node(as_bytes(stored))
        return out

    def get_chain(self, head: str | None) -> list[str]:
        if head is None:
            return []
        with self._errors():
            found, payload = self._chain_script(keys=[self.keys.chains], args=[head])
        if not found:
            raise StoreError(
                f"chain {head} is incomplete in {self.url} (node {as_str(payload)} is missing): the tape is damaged"
            )
        items = [as_str(i) for i in payload]
        items.reverse()
        return items

    # -- checkpoints -------------------------------------------------------------------

    def get_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None
    ) -> CheckpointRow | None:
        g = group_key(thread_id, checkpoint_ns)
        with self._errors():
            if checkpoint_id:
                stored = self._redis.hget(self.keys.cp_data(g), checkpoint_id)
            else:
                reply = self._latest_script(keys=[self.keys.cp_ids(g), self.keys.cp_data(g)], args=[])
                if not reply or reply[1] is None:
                    return None
                checkpoint_id, stored = as_str(reply[0]), reply[1]
        if stored is None:
            return None
        return decode_checkpoint(thread_id, checkpoint_ns, checkpoint_id, as_bytes(stored))

    def _groups(self, thread_id: str | None, checkpoint_ns: str | None) -> list[tuple[str, str]]:
        if thread_id is not None and checkpoint_ns is not None:
            return [(thread_id, checkpoint_ns)]
        with self._errors():
            members = self._redis.smembers(self.keys.cp_groups if thread_id is None else self.keys.cp_thread(thread_id))
        groups = [tuple(json.loads(m)) for m in members]
        if checkpoint_ns is not None:
            groups = [g for g in groups if g[1] == checkpoint_ns]
        # SQLite breaks ties between equal ids by thread then namespace, descending.
        groups.sort(reverse=True)
        return groups

    def _ids_newest_first(
        self, group: str, before: str | None, page: int, first: Sequence[bytes | str] | None
    ) -> Iterator[str]:
        """Checkpoint ids of a group, newest first, paged by the last id seen (stable under deletes).

        ``first`` is the first page when the caller already fetched it (one
        pipeline for every group instead of one round trip each).
        """
        high = "(" + before if before is not None else "+"
        key = self.keys.cp_ids(group)
        ids = first
        while True:
            if ids is None:
                with self._errors():
                    ids = self._redis.zrevrangebylex(key, high, "-", start=0, num=page)
            for raw in ids:
                yield as_str(raw)
            if len(ids) < page:
                return
            high = "(" + as_str(ids[-1])
            ids = None

    def list_checkpoints(
        self, *, thread_id=None, checkpoint_ns=None, before=None, limit=None, metadata_filter=None
    ) -> list[CheckpointRow]:
        if limit is not None and limit <= 0:
            return []
        groups = [group_key(t, ns) for t, ns in self._groups(thread_id, checkpoint_ns)]
        page = _CHUNK if limit is None or metadata_filter else max(1, min(limit, _CHUNK))
        high = "(" + before if before is not None else "+"
        with self._errors():
            pipe = self._redis.pipeline(transaction=False)
            for g in groups:
                pipe.zrevrangebylex(self.keys.cp_ids(g), high, "-", start=0, num=page)
            firsts = pipe.execute() if groups else []

        def tagged(g: str, first: list[bytes]) -> Iterator[tuple[str, str]]:
            for cid in self._ids_newest_first(g, before, page, first):
                yield cid, g

        streams = [tagged(g, first) for g, first in zip(groups, firsts) if first]
        # Equal ids keep the group order (heapq.merge is stable), as SQLite's tie order.
        merged = heapq.merge(*streams, key=lambda item: item[0], reverse=True)
        rows: list[CheckpointRow] = []
        names: dict[str, tuple[str, str]] = {}  # group -> (thread, namespace)
        while limit is None or len(rows) < limit:
            chunk = list(itertools.islice(merged, page))
            if not chunk:
                break
            # one HMGET per group of the chunk (usually one), not one HGET per checkpoint
            by_group: dict[str, list[str]] = {}
            for cid, g in chunk:
                by_group.setdefault(g, []).append(cid)
            with self._errors():
                pipe = self._redis.pipeline(transaction=False)
                for g, cids in by_group.items():
                    pipe.hmget(self.keys.cp_data(g), cids)
                fetched = dict(zip(by_group, pipe.execute()))
            values = {g: dict(zip(by_group[g], got)) for g, got in fetched.items()}
            for cid, g in chunk:
                value = values[g][cid]
                if value is None:  # deleted since its id was read
                    continue
                t, ns = names.get(g) or names.setdefault(g, json.loads(g))
                row = decode_checkpoint(t, ns, cid, value)
                if metadata_filter and not _matches(row.metadata, metadata_filter):
                    continue
                rows.append(row)
                if limit is not None and len(rows) >= limit:
                    break
        return rows

    def get_writes(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[WriteRow]:
        with self._errors():
            stored = self._redis.hgetall(self.keys.writes(write_group_key(thread_id, checkpoint_ns, checkpoint_id)))
        rows = []
        for field, value in stored.items():
            task_id, idx = json.loads(field)
            task_path, channel, address = json.loads(value)
            rows.append(WriteRow(thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, address))
        rows.sort(key=lambda w: (w.task_id, w.idx))
        return rows

    def delete_checkpoints(self, keys: Sequence[tuple[str, str, str]]) -> None:
        if not keys:
            return
        k = self.keys
        ops = Ops(k, None)
        touched: dict[str, str] = {}
        for thread_id, checkpoint_ns, checkpoint_id in keys:
            g = group_key(thread_id, checkpoint_ns)
            wg = write_group_key(thread_id, checkpoint_ns, checkpoint_id)
            ops.add("zrem", k.cp_ids(g), checkpoint_id)
            ops.add("hdel", k.cp_data(g), checkpoint_id)
            ops.add("del", k.writes(wg))
            ops.add("srem", k.writes_thread(thread_id), wg)
            touched[g] = thread_id
        # A group whose last checkpoint went leaves the listings too.
        for g, thread_id in touched.items():
            ops.add("dropempty", k.cp_ids(g), ops.key(k.cp_groups), g, ops.key(k.cp_thread(thread_id)), g)
        self._run_apply(ops, marker=False, wait_for_gc=False)

    def delete_thread(self, thread_id: str) -> None:
        k = self.keys
        with self._errors():
            self._delete_thread_script(
                keys=[k.cp_thread(thread_id), k.writes_thread(thread_id), k.cp_groups],
                args=[k.cp_ids_ns, k.cp_data_ns, k.writes_ns],
            )

    # -- runs: retention ---------------------------------------------------------------------

    def delete_runs(self, run_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return
        k = self.keys
        keys = [k.runs_by_start, k.run_ids]
        args: list[str] = []
        for run_id in ids:
            keys.extend((k.run(run_id), k.events(run_id)))
            args.extend((run_id, id_member(run_id)))
        with self._errors():
            self._delete_runs_script(keys=keys, args=args)

    def remove_thread(self, thread_id: str, run_ids: Sequence[str], *, archived: ArchiveEntry | None = None) -> None:
        # Both scripts in one MULTI/EXEC: Redis runs the two atomically, so a
        # crash leaves the thread whole or gone.
        ids = list(dict.fromkeys(run_ids))
        k = self.keys
        with self._errors():
            pipe = self._redis.pipeline(transaction=True)
            if ids:
                keys = [k.runs_by_start, k.run_ids]
                args: list[str] = []
                for run_id in ids:
                    keys.extend((k.run(run_id), k.events(run_id)))
                    args.extend((run_id, id_member(run_id)))
                self._delete_runs_script(keys=keys, args=args, client=pipe)
            self._delete_thread_script(
                keys=[k.cp_thread(thread_id), k.writes_thread(thread_id), k.cp_groups],
                args=[k.cp_ids_ns, k.cp_data_ns, k.writes_ns],
                client=pipe,
            )
            if archived is not None:
                pipe.hset(k.archives, thread_id, json.dumps(archived.to_dict(), sort_keys=True))
            pipe.execute()

    def archived_threads(self, thread_id: str | None = None) -> list[ArchiveEntry]:
        with self._errors():
            if thread_id is not None:
                raw = self._redis.hget(self.keys.archives, thread_id)
                found = [raw] if raw is not None else []
            else:
                found = list(self._redis.hvals(self.keys.archives))
        entries = [ArchiveEntry(**json.loads(r)) for r in found]
        entries.sort(key=lambda e: (-e.archived_at, e.thread_id))
        return entries

    def forget_archive(self, thread_id: str) -> None:
        with self._errors():
            self._redis.hdel(self.keys.archives, thread_id)

    def _scan(self, pattern: str) -> Iterator[list[str]]:
        cursor = 0
        while True:
            with self._errors():
                cursor, batch = self._redis.scan(cursor, match=pattern, count=1000)
            yield [as_str(b) for b in batch]
            if cursor == 0:
                return

    def collect_garbage(self) -> tuple[int, int]:
        """Mark and sweep over the prefix's keys, writers held off by the collector's lock.

        The mark reads every referrer SQLite's collector reads; the sweep
        deletes in chunks, each only if the lock is still ours (a collector
        that stalled past the lock's ttl stops instead of deleting blobs a
        writer may have referred to meanwhile).
        """
        k = self.keys
        token = secrets.token_hex(16)
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.01
        while True:
            with self._errors():
                got = self._gc_lock_script(keys=[k.gc_lock], args=[token, "take", GC_LOCK_TTL_MS])
            if got:
                break
            if time.monotonic() >= deadline:
                raise DatabaseLocked(
                    f"{self.url} is being garbage collected by another process (waited {self.busy_timeout:g}s); "
                    "retry when it finishes"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
        last_refresh = time.monotonic()

        def keep_lock() -> None:
            nonlocal last_refresh
            if time.monotonic() - last_refresh < GC_LOCK_TTL_MS / 3000:
                return
            with self._errors():
                ok = self._gc_lock_script(keys=[k.gc_lock], args=[token, "refresh", GC_LOCK_TTL_MS])
            if not ok:
                raise self._gc_lost()
            last_refresh = time.monotonic()

        try:
            self._sent.clear()  # not needed (batches check what they do not send), but tidy
            return self._collect(token, keep_lock)
        finally:
            with self._errors():
                self._gc_lock_script(keys=[k.gc_lock], args=[token, "release", 0])

    def _gc_lost(self) -> StoreError:
        return StoreError(
            f"garbage collection on {self.url} lost its lock (stalled past {GC_LOCK_TTL_MS // 1000}s); "
            "what it deleted before was garbage, run it again to finish"
        )

    def _collect(self, token: str, keep_lock: Callable[[], None]) -> tuple[int, int]:
        k = self.keys
        blobs: set[str] = set()
        chains: set[str] = set()
        blob_keys: list[str] = []
        event_keys: list[str] = []
        write_keys: list[str] = []
        data_keys: list[str] = []
        for batch in self._scan(glob_escape(k.prefix) + "*"):
            for key in batch:
                if key.startswith(k.blob_ns):
                    blob_keys.append(key)
                elif key.startswith(k.events_ns):
                    event_keys.append(key)
                elif key.startswith(k.writes_ns):
                    write_keys.append(key)
                elif key.startswith(k.cp_data_ns):
                    data_keys.append(key)
            keep_lock()

        def hvals_each(keys: list[str]) -> Iterator[bytes]:
            for i in range(0, len(keys), 100):
                with self._errors():
                    pipe = self._redis.pipeline(transaction=False)
                    for key in keys[i : i + 100]:
                        pipe.hvals(key)
                    replies = pipe.execute()
                keep_lock()
                for values in replies:
                    yield from values

        for stored in hvals_each(event_keys):
            _, kind, data = split_event(stored)
            event_refs(kind, unpack_event(data), blobs, chains)
        for stored in hvals_each(data_keys):
            header = json.loads(stored.partition(b"\x00")[0])
            blobs.update(header[6].values())
        for stored in hvals_each(write_keys):
            blobs.add(json.loads(stored)[2])

        nodes: dict[str, tuple[str | None, str]] = {}
        cursor = 0
        while True:
            with self._errors():
                cursor, part = self._redis.hscan(k.chains, cursor, count=1000)
            # a mapping (a list only with no_values=True)
            for cid, stored in cast("dict[bytes, bytes]", part).items():
                nodes[as_str(cid)] = decode_chain_node(stored)
            keep_lock()
            if cursor == 0:
                break

        blobs, live_chains = mark_live(blobs, chains, nodes, self.get_blobs, keep_lock)

        dead_blob_keys = [key for key in blob_keys if key[len(k.blob_ns) :] not in blobs]
        dead_chains = [cid for cid in nodes if cid not in live_chains]
        for i in range(0, max(len(dead_blob_keys), len(dead_chains)), _CHUNK):
            with self._errors():
                ok = self._sweep_script(
                    keys=[k.gc_lock, k.chains, *dead_blob_keys[i : i + _CHUNK]],
                    args=[token, *dead_chains[i : i + _CHUNK]],
                )
            if not ok:
                raise self._gc_lost()
            keep_lock()
        return len(dead_blob_keys), len(dead_chains)

    # -- leases -------------------------------------------------------------------------------

    def acquire_lease(self, name: str, owner: str, ttl: float) -> int | None:
        with self._errors():
            token = self._eval(self._acquire_script, [self.keys.lease(name)], [owner, repr(float(ttl))])
        return None if token is None else int(token)

    def release_lease(self, name: str, owner: str) -> None:
        with self._errors():
            self._eval(self._release_script, [self.keys.lease(name)], [owner])

    def lease_holder(self, name: str) -> tuple[str, float, int] | None:
        with self._errors():
            pipe = self._redis.pipeline(transaction=False)
            pipe.time()
            pipe.hmget(self.keys.lease(name), ["owner", "expires", "token"])
            (sec, usec), (owner, expires, token) = pipe.execute()
        now = sec + usec / 1_000_000
        if owner is None or expires is None or float(expires) <= now:
            return None
        return as_str(owner), float(expires), int(token)

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        for conn in self._made:
            with contextlib.suppress(redis_client.RedisError, OSError):
                conn.disconnect()
        self._made.clear()
        self._spare.clear()
        try:
            self._redis.close()
        except redis_client.RedisError:
            pass
