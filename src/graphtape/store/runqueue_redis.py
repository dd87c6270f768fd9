"""The run queue in Redis: keys ``P q:*`` under the tape store's prefix ``P``, on a client of its own.

Every decision that must be atomic (enqueue against the thread's active runs,
claim, heartbeat, finish, cancel, append) is one Lua script, which Redis runs
alone. The layout (``P`` the store's prefix):

=========================  ========  ================================================
``P q:pos``                counter   the queue position of the newest run
``P q:run:<id>``           hash      a run's fields (JSON text for kwargs/metadata/result)
``P q:active``             zset      active (pending/running) run ids by position
``P q:runs``               zset      every run id by position
``P q:thread-runs:<tid>``  zset      a thread's run ids by position
``P q:ev:<id>``            list      a run's events, ``event\\ndata``; ``seq`` = index + 1
``P q:thread:<tid>``       hash      a thread row; ``P q:threads`` (zset by creation)
``P q:asst:<id>``          string    an assistant row as JSON; ``P q:assts`` (zset by creation)
=========================  ========  ================================================

The scripts ``PUBLISH`` a notice on ``P q:notices`` (``queued:<id>``,
``event:<id>``, ``cancel:<id>``, ``ended:<id>``) for :meth:`RedisRunQueue.listen`.

A claim walks ``q:active`` in order and takes the first run that is the
oldest active run of its thread and pending or past its lease: O(active
runs), which is small where a queue is healthy.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis as redis_client

from graphtape.errors import StoreError
from graphtape.store.runqueue_base import (
    AssistantRow,
    Enqueued,
    QueuedRun,
    RunEvent,
    RunQueue,
    ThreadRow,
    check_readable,
    check_thread_fields,
    decoded,
    ended_text,
    json_text,
    lease_lost,
    listen_in_background,
    reset_to_pending,
)

if TYPE_CHECKING:
    from graphtape.store.redis import RedisTapeStore

__all__ = ["RedisRunQueue"]

#: how many times an enqueue that ends a thread's pending runs is tried while new ones keep coming
_ENQUEUE_TRIES = 8

# ARGV[7] = n, then n triples (run id, its kwargs and metadata redacted), then the new run's field pairs.
# A pending run the strategy ends is redacted in this script, so nothing reads it ended with its
# secrets; one whose redaction was not given (it was queued after the caller looked) makes the
# script change nothing and answer -1 with the thread's active runs, for the caller to try again.
_ENQUEUE = """
local p, rid, tid, strategy, now, cancelled = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local n = tonumber(ARGV[7])
local redacted = {}
for i = 0, n - 1 do redacted[ARGV[8 + 3 * i]] = {ARGV[9 + 3 * i], ARGV[10 + 3 * i]} end
local found = {}
for _, other in ipairs(redis.call('ZRANGE', p .. 'q:active', 0, -1)) do
  if redis.call('HGET', p .. 'q:run:' .. other, 'thread_id') == tid then table.insert(found, other) end
end
if #found > 0 and strategy == 'reject' then return {0, found} end
if strategy == 'interrupt' or strategy == 'rollback' then
  for _, other in ipairs(found) do
    if redis.call('HGET', p .. 'q:run:' .. other, 'status') == 'pending' and not redacted[other] then
      return {-1, found}
    end
  end
  for _, other in ipairs(found) do
    local key = p .. 'q:run:' .. other
    local status = redis.call('HGET', key, 'status')
    if status == 'pending' then
      redis.call('HSET', key, 'status', 'interrupted', 'result', cancelled, 'updated_at', now)
      redis.call('HSET', key, 'kwargs', redacted[other][1], 'metadata', redacted[other][2])
      redis.call('ZREM', p .. 'q:active', other)
      redis.call('PUBLISH', p .. 'q:notices', 'ended:' .. other)
    elseif status == 'running' then
      redis.call('HSET', key, 'cancel_requested', '1')
      redis.call('PUBLISH', p .. 'q:notices', 'cancel:' .. other)
    end
  end
end
local pos = redis.call('INCR', p .. 'q:pos')
local key = p .. 'q:run:' .. rid
for i = 8 + 3 * n, #ARGV, 2 do redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
redis.call('HSET', key, 'pos', pos)
redis.call('ZADD', p .. 'q:active', pos, rid)
redis.call('ZADD', p .. 'q:runs', pos, rid)
redis.call('ZADD', p .. 'q:thread-runs:' .. tid, pos, rid)
redis.call('PUBLISH', p .. 'q:notices', 'queued:' .. rid)
return {1, found}
"""

_CLAIM = """
local p, worker, now, expires = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local seen = {}
for _, rid in ipairs(redis.call('ZRANGE', p .. 'q:active', 0, -1)) do
  local key = p .. 'q:run:' .. rid
  local f = redis.call('HMGET', key, 'thread_id', 'status', 'lease_expires')
  if not seen[f[1]] then
    seen[f[1]] = true
    if f[2] == 'pending' or (f[2] == 'running' and tonumber(f[3] or '0') < now) then
      redis.call('HSET', key, 'status', 'running', 'worker', worker, 'lease_expires', expires, 'updated_at', ARGV[3])
      redis.call('HINCRBY', key, 'attempt', 1)
      return rid
    end
  end
end
return false
"""

_HEARTBEAT = """
local f = redis.call('HMGET', KEYS[1], 'worker', 'status', 'cancel_requested')
if f[1] ~= ARGV[1] or f[2] ~= 'running' then return -1 end
redis.call('HSET', KEYS[1], 'lease_expires', ARGV[2])
return tonumber(f[3] or '0')
"""

_RELEASE = """
local f = redis.call('HMGET', KEYS[1], 'worker', 'status')
if f[1] ~= ARGV[1] or f[2] ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'lease_expires', '0')
redis.call('PUBLISH', ARGV[2], 'queued:' .. ARGV[3])
return 1
"""

_FINISH = """
local f = redis.call('HMGET', KEYS[1], 'worker', 'status')
if f[1] ~= ARGV[1] or f[2] ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'result', ARGV[3], 'updated_at', ARGV[4])
redis.call('HSET', KEYS[1], 'kwargs', ARGV[7], 'metadata', ARGV[8])
redis.call('HDEL', KEYS[1], 'lease_expires')
redis.call('ZREM', KEYS[2], ARGV[5])
redis.call('PUBLISH', ARGV[6], 'ended:' .. ARGV[5])
return 1
"""

_CANCEL = """
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'pending' then
  redis.call('HSET', KEYS[1], 'status', 'interrupted', 'result', ARGV[1], 'updated_at', ARGV[2])
  if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'kwargs', ARGV[5], 'metadata', ARGV[6]) end
  redis.call('ZREM', KEYS[2], ARGV[3])
  redis.call('PUBLISH', ARGV[4], 'ended:' .. ARGV[3])
elseif status == 'running' then
  redis.call('HSET', KEYS[1], 'cancel_requested', '1')
  redis.call('PUBLISH', ARGV[4], 'cancel:' .. ARGV[3])
end
return status
"""

_APPEND = """
local f = redis.call('HMGET', KEYS[1], 'worker', 'status')
if f[1] ~= ARGV[1] or f[2] ~= 'running' then return -1 end
local seq = redis.call('HINCRBY', KEYS[1], 'events', 1)
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[3], 'event:' .. ARGV[4])
return seq
"""

_CREATE_THREAD = """
if redis.call('HGET', KEYS[1], 'deleted') == '0' then return 0 end
redis.call('DEL', KEYS[1])
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[3])
return 1
"""


def _text(value: Any) -> str | None:
    return None if value is None else value.decode() if isinstance(value, bytes) else str(value)


def _run(fields: dict[Any, Any]) -> QueuedRun | None:
    f = {_text(k): _text(v) for k, v in fields.items()}
    if not f.get("run_id"):
        return None
    lease = f.get("lease_expires")
    result = f.get("result")
    return QueuedRun(
        run_id=f["run_id"] or "",
        thread_id=f["thread_id"] or "",
        assistant_id=f["assistant_id"] or "",
        graph_id=f["graph_id"] or "",
        kwargs=json.loads(f["kwargs"] or "{}"),
        metadata=json.loads(f["metadata"] or "{}"),
        multitask_strategy=f.get("multitask_strategy") or "reject",
        status=f.get("status") or "pending",
        created_at=float(f.get("created_at") or 0),
        updated_at=float(f.get("updated_at") or 0),
        worker=f.get("worker") or None,
        lease_expires=float(lease) if lease else None,
        attempt=int(f.get("attempt") or 0),
        cancel_requested=f.get("cancel_requested") == "1",
        result=json.loads(result) if result else None,
        events=int(f.get("events") or 0),
    )


def _thread_fields(row: ThreadRow) -> dict[str, str]:
    return {
        "thread_id": row.thread_id,
        "graph_id": json_text(row.graph_id),
        "metadata": json_text(row.metadata),
        "status": row.status,
        "created_at": repr(row.created_at),
        "updated_at": repr(row.updated_at),
        "deleted": "1" if row.deleted else "0",
    }


def _thread(fields: dict[Any, Any]) -> ThreadRow | None:
    f = {_text(k): _text(v) for k, v in fields.items()}
    if not f.get("thread_id"):
        return None
    return ThreadRow(
        f["thread_id"] or "",
        json.loads(f.get("graph_id") or "null"),
        json.loads(f.get("metadata") or "{}"),
        f.get("status") or "idle",
        float(f.get("created_at") or 0),
        float(f.get("updated_at") or 0),
        f.get("deleted") == "1",
    )


class RedisRunQueue(RunQueue):
    """The run queue under the key prefix ``prefix`` of the Redis database ``client`` talks to."""

    def __init__(self, client: redis_client.Redis, prefix: str, url: str):
        self.url = url
        self.p = prefix + "q:"
        #: the channel notices are published on (see :meth:`listen`)
        self.channel = self.p + "notices"
        self._prefix = prefix
        self._r = client
        self._enqueue = client.register_script(_ENQUEUE)
        self._claim = client.register_script(_CLAIM)
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._finish = client.register_script(_FINISH)
        self._release = client.register_script(_RELEASE)
        self._cancel = client.register_script(_CANCEL)
        self._append = client.register_script(_APPEND)
        self._create_thread = client.register_script(_CREATE_THREAD)

    @classmethod
    def for_store(cls, store: RedisTapeStore) -> RedisRunQueue:
        pool = store._redis.connection_pool
        client = redis_client.Redis(
            connection_pool=redis_client.ConnectionPool(
                connection_class=pool.connection_class, **pool.connection_kwargs
            )
        )
        return cls(client, store.prefix, store.url)

    def _call(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return script(keys=list(keys), args=list(args))
        except redis_client.RedisError as exc:
            raise StoreError(f"{self.url}: the run queue failed: {exc}") from None

    def _do(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except redis_client.RedisError as exc:
            raise StoreError(f"{self.url}: the run queue failed: {exc}") from None

    def _rows(self, ids: Sequence[Any]) -> list[QueuedRun]:
        if not ids:
            return []
        pipe = self._r.pipeline(transaction=False)
        for rid in ids:
            pipe.hgetall(self.p + "run:" + (_text(rid) or ""))
        rows = decoded(_run, self._do(pipe.execute), "run")
        return [r for r in rows if r is not None]

    # -- runs ------------------------------------------------------------------------------

    def enqueue(self, run: QueuedRun, *, strategy: str = "enqueue", cancel_result: Any = None) -> Enqueued:
        check_readable("the run's kwargs and metadata", run.kwargs, run.metadata)
        now = time.time()
        reset_to_pending(run, now)
        fields = {
            "run_id": run.run_id,
            "thread_id": run.thread_id,
            "assistant_id": run.assistant_id,
            "graph_id": run.graph_id,
            "kwargs": json_text(run.kwargs),
            "metadata": json_text(run.metadata),
            "multitask_strategy": run.multitask_strategy,
            "status": "pending",
            "created_at": repr(run.created_at),
            "updated_at": repr(run.updated_at),
            "attempt": "0",
            "cancel_requested": "1" if run.cancel_requested else "0",
            "events": "0",
        }
        if run.result is not None:
            fields["result"] = json_text(run.result)
        head: list[Any] = [self._prefix, run.run_id, run.thread_id, strategy, repr(now), json_text(cancel_result)]
        pairs = [x for item in fields.items() for x in item]
        redactions: dict[str, list[str]] = {}
        # first as if the thread had no pending run (the usual case); when it has, the script
        # answers -1 with its active runs, and is called again with their redactions
        for _ in range(_ENQUEUE_TRIES):
            given = [x for rid, texts in redactions.items() for x in (rid, *texts)]
            done, found = self._call(self._enqueue, [], [*head, len(redactions), *given, *pairs])
            if int(done) >= 0:
                return Enqueued(run if int(done) else None, self._rows(found))
            for other in found:
                rid = _text(other) or ""
                if rid not in redactions:
                    redactions[rid] = self._redacted(rid) or ["{}", "{}"]
        raise StoreError(
            f"runs kept being queued on thread {run.thread_id!r} while run {run.run_id!r} was being queued "
            f"with multitask_strategy={strategy!r}; try again"
        )

    def _redacted(self, run_id: str) -> list[str]:
        """The run's kwargs and metadata as an ended run keeps them (:func:`ended_text`), or [] when
        there is no run. Read before the script that ends it: a run's kwargs never change."""
        kwargs, metadata = self._do(self._r.hmget, self.p + "run:" + run_id, ["kwargs", "metadata"])
        if kwargs is None:
            return []
        return [ended_text(json.loads(_text(v) or "{}"), self.redact_keys) for v in (kwargs, metadata)]

    def claim(self, worker: str, ttl: float) -> QueuedRun | None:
        now = time.time()
        rid = self._call(self._claim, [], [self._prefix, worker, repr(now), repr(now + ttl)])
        if not rid:
            return None
        return self.get(_text(rid) or "")

    def heartbeat(self, run_id: str, worker: str, ttl: float) -> bool | None:
        out = self._call(self._heartbeat, [self.p + "run:" + run_id], [worker, repr(time.time() + ttl)])
        return None if int(out) < 0 else bool(int(out))

    def release(self, run_id: str, worker: str) -> bool:
        keys = [self.p + "run:" + run_id]
        return bool(self._call(self._release, keys, [worker, self.channel, run_id]))

    def finish(self, run_id: str, worker: str, status: str, result: Any) -> bool:
        keys = [self.p + "run:" + run_id, self.p + "active"]
        redacted = self._redacted(run_id) or ["{}", "{}"]
        args = [worker, status, json_text(result), repr(time.time()), run_id, self.channel, *redacted]
        return bool(self._call(self._finish, keys, args))

    def request_cancel(self, run_ids: Sequence[str], cancel_result: Any = None) -> list[QueuedRun]:
        for rid in run_ids:
            keys = [self.p + "run:" + rid, self.p + "active"]
            redacted = self._redacted(rid) or ["", ""]
            args = [json_text(cancel_result), repr(time.time()), rid, self.channel, *redacted]
            self._call(self._cancel, keys, args)
        return self._rows(list(run_ids))

    def get(self, run_id: str) -> QueuedRun | None:
        return _run(self._do(self._r.hgetall, self.p + "run:" + run_id))

    def list_runs(
        self,
        *,
        thread_id: str | None = None,
        statuses: Sequence[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[QueuedRun]:
        key = self.p + ("runs" if thread_id is None else "thread-runs:" + thread_id)
        if statuses is not None and set(statuses) <= {"pending", "running"}:
            key = self.p + "active"
        ids = self._do(self._r.zrevrange, key, 0, -1)
        rows = [
            r
            for r in self._rows(ids)
            if (thread_id is None or r.thread_id == thread_id) and (statuses is None or r.status in statuses)
        ]
        end = None if limit is None else max(offset, 0) + limit
        return rows[max(offset, 0) : end]

    def delete_run(self, run_id: str) -> bool:
        run = self.get(run_id)
        if run is None:
            return False
        pipe = self._r.pipeline(transaction=True)
        pipe.delete(self.p + "run:" + run_id, self.p + "ev:" + run_id)
        pipe.zrem(self.p + "active", run_id)
        pipe.zrem(self.p + "runs", run_id)
        pipe.zrem(self.p + "thread-runs:" + run.thread_id, run_id)
        self._do(pipe.execute)
        return True

    # -- events ----------------------------------------------------------------------------

    def append(self, run_id: str, worker: str, event: str, data: str) -> int:
        keys = [self.p + "run:" + run_id, self.p + "ev:" + run_id]
        seq = int(self._call(self._append, keys, [worker, event + "\n" + data, self.channel, run_id]))
        if seq < 0:
            raise lease_lost(run_id, worker)
        return seq

    def events(self, run_id: str, after: int = 0, limit: int | None = None) -> list[RunEvent]:
        start = max(after, 0)
        end = -1 if limit is None else start + limit - 1
        items = self._do(self._r.lrange, self.p + "ev:" + run_id, start, end)
        out = []
        for i, item in enumerate(items):
            event, _, data = (_text(item) or "").partition("\n")
            out.append(RunEvent(run_id, start + i + 1, event, data))
        return out

    # -- threads ---------------------------------------------------------------------------

    def create_thread(self, row: ThreadRow) -> tuple[ThreadRow, bool]:
        check_readable("the thread's metadata", row.metadata)
        now = time.time()
        row.created_at = row.created_at or now
        row.updated_at = row.updated_at or now
        args: list[Any] = [repr(row.created_at)]
        for name, value in _thread_fields(row).items():
            args += [name, value]
        keys = [self.p + "thread:" + row.thread_id, self.p + "threads"]
        if self._call(self._create_thread, keys, args):
            return row, True
        found = self.get_thread(row.thread_id)
        return (found or row), False

    def put_thread(self, row: ThreadRow) -> None:
        key = self.p + "thread:" + row.thread_id
        row.created_at = row.created_at or time.time()
        row.updated_at = row.updated_at or time.time()
        pipe = self._r.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping=_thread_fields(row))  # type: ignore[arg-type]
        pipe.zadd(self.p + "threads", {row.thread_id: row.created_at})
        self._do(pipe.execute)

    def update_thread(self, thread_id: str, **fields: Any) -> ThreadRow | None:
        check_thread_fields(fields)
        check_readable("the thread's metadata", fields.get("metadata"))
        key = self.p + "thread:" + thread_id
        out: list[ThreadRow | None] = [None]

        def change(pipe: Any) -> None:
            row = _thread(pipe.hgetall(key))
            out[0] = row
            if row is None:
                return
            for name, value in fields.items():
                setattr(row, name, value)
            row.updated_at = time.time()
            pipe.multi()
            pipe.hset(key, mapping=_thread_fields(row))

        self._do(lambda: self._r.transaction(change, key))
        return out[0]

    def get_thread(self, thread_id: str) -> ThreadRow | None:
        return _thread(self._do(self._r.hgetall, self.p + "thread:" + thread_id))

    def list_threads(self) -> list[ThreadRow]:
        ids = self._do(self._r.zrevrange, self.p + "threads", 0, -1)
        pipe = self._r.pipeline(transaction=False)
        for tid in ids:
            pipe.hgetall(self.p + "thread:" + (_text(tid) or ""))
        rows = decoded(_thread, self._do(pipe.execute), "thread") if ids else []
        return [r for r in rows if r is not None]

    # -- assistants ------------------------------------------------------------------------

    def put_assistant(self, row: AssistantRow) -> None:
        check_readable("the assistant's config, context and metadata", row.config, row.context, row.metadata)
        now = time.time()
        row.created_at = row.created_at or now
        row.updated_at = row.updated_at or now
        body = json_text(
            {
                "assistant_id": row.assistant_id,
                "graph_id": row.graph_id,
                "name": row.name,
                "description": row.description,
                "config": row.config,
                "context": row.context,
                "metadata": row.metadata,
                "version": row.version,
                "created_at": row.created_at,
                "updated_at": row.updated_at,
            }
        )
        pipe = self._r.pipeline(transaction=True)
        pipe.set(self.p + "asst:" + row.assistant_id, body)
        pipe.zadd(self.p + "assts", {row.assistant_id: row.created_at})
        self._do(pipe.execute)

    def get_assistant(self, assistant_id: str) -> AssistantRow | None:
        body = self._do(self._r.get, self.p + "asst:" + assistant_id)
        return AssistantRow(**json.loads(body)) if body else None

    def list_assistants(self) -> list[AssistantRow]:
        ids = self._do(self._r.zrange, self.p + "assts", 0, -1)
        if not ids:
            return []
        bodies = self._do(self._r.mget, [self.p + "asst:" + (_text(i) or "") for i in ids])
        return [AssistantRow(**json.loads(b)) for b in bodies if b]

    def delete_assistant(self, assistant_id: str) -> bool:
        pipe = self._r.pipeline(transaction=True)
        pipe.delete(self.p + "asst:" + assistant_id)
        pipe.zrem(self.p + "assts", assistant_id)
        removed, _ = self._do(pipe.execute)
        return bool(removed)

    def listen(self, on_notice: Callable[[str, str], None]) -> Callable[[], None] | None:
        """``SUBSCRIBE`` to the queue's channel from a thread (the scripts ``PUBLISH`` their notices)."""

        def listen(stop: threading.Event) -> None:
            pubsub = self._r.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(self.channel)
            try:
                while not stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is not None and message.get("type") == "message":
                        what, _, run_id = (_text(message["data"]) or "").partition(":")
                        on_notice(what, run_id)
            finally:
                pubsub.close()

        return listen_in_background(f"graphtape-queue-listen:{self.p}", listen)

    def close(self) -> None:
        self._r.close()
