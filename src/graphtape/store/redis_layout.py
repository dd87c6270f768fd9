"""How the Redis store lays its data out on the server: key names, record encodings and scripts.

:mod:`graphtape.store.redis` keeps the store itself (:class:`RedisTapeStore`
and its migrations); this module holds what that store writes and reads,
so the format can be read in one place and the store class stays short:

* the key layout (:class:`Keys`, the only place that spells a key name,
  and the group and run-id index members),
* the Lua scripts, and :class:`Ops` and :func:`add_batch`, which turn a
  write batch into the operation list the apply script runs,
* the pure encode/decode helpers of every stored record (runs, events,
  blobs, chain nodes, checkpoints),
* :func:`split_url`, which takes graphtape's ``prefix`` out of a store URL.

Nothing here talks to a server.

Key layout under the prefix ``P`` (default ``graphtape:``; choose another
with ``?prefix=`` in the URL to keep several stores in one database):

====================  =========  ==================================================
``P schema``          string     the schema version (index of the last migration)
``P run:<id>``        hash       one run: each field JSON encoded
``P runs:by-start``   zset       run ids scored by ``started_at`` (listing)
``P runs:thread:<t>`` zset       the same, for one thread
``P runs:ids``        zset       ``lower(id)\\0id`` at score 0 (prefix lookup)
``P ev:<run id>``     hash       ``seq`` -> ``ts\\0"kind"\\0event`` (JSON; deflated over 256 bytes)
``P blob:<hash>``     string     ``r`` + raw bytes, or ``z`` + zlib bytes
``P chains``          hash       chain id -> ``<len>:parent item``, ``-:item`` at the root
``P cp:ids:<g>``      zset       checkpoint ids of group ``g`` at score 0 (lex order)
``P cp:data:<g>``     hash       checkpoint id -> ``header JSON\\0body``
``P cp:groups``       set        every group ``g`` = JSON ``[thread, ns]``
``P cp:thread:<t>``   set        the groups of one thread
``P wr:<w>``          hash       JSON ``[task_id, idx]`` -> JSON ``[task_path, channel, value]``
                                 for ``w`` = JSON ``[thread, ns, checkpoint id]``
``P wrt:<t>``         set        the ``w`` of one thread
``P lease:<name>``    hash       owner, expires (server time), token
``P gc:lock``         string     held while a garbage collection runs
``P applied:<id>``    string     a batch that created runs was applied (for a minute)
====================  =========  ==================================================

Why over 500 lines: a third of it is the Lua scripts, which must stay beside
the key layout they spell out.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import struct
import zlib
from collections.abc import Mapping, Set
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from graphtape.store.base import CheckpointRow, EventRow, RunRecord, WriteBatch
from graphtape.store.codec import dump_meta, pack_event_json, pack_event_plain, unpack_event

DEFAULT_PREFIX = "graphtape:"

#: Blobs larger than this are stored zlib-compressed (level 1), as in SQLite:
#: Redis keeps everything in memory, so the saving matters even more here.
COMPRESS_OVER = 1024

_RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunRecord))
_RUN_INTS = frozenset({"llm_calls", "tool_calls", "effect_calls", "served_calls", "live_calls", "tokens"})
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

# -- Lua -------------------------------------------------------------------------------
#
# The ``#!lua`` line declares the scripts as writers: Redis refuses them up
# front when it is out of memory, instead of failing half way through.

#: The operations of :data:`APPLY_LUA`, numbered from 1 in this order (the code byte of a header entry).
OP_NAMES = (
    "fence",
    "absent",
    "have",
    "events",
    "setnx",
    "hset",
    "hsetnx",
    "hsetxx",
    "zadd",
    "sadd",
    "zrem",
    "hdel",
    "srem",
    "del",
    "dropempty",
    "cp",
)
_OP_CODES = {name: i for i, name in enumerate(OP_NAMES, 1)}

#: One operation in the header of :data:`APPLY_LUA`: code, key index, argument count (big-endian).
OP_HEADER = struct.Struct(">BII")
_pack_op = OP_HEADER.pack

#: Applies a list of operations atomically. KEYS[1] is the collector's lock,
#: KEYS[2] the batch's applied-marker; ARGV[1] the marker's ttl (0: none),
#: ARGV[2] "1" to wait for a running collection, ARGV[3] the operations, 9
#: bytes each (see :data:`OP_HEADER`: code, key index, argument count),
#: ARGV[4..] their arguments in that order. One binary header instead of
#: three arguments per operation: every argument costs the server a Lua
#: string, and ``string.byte`` reads numbers without making any. Checks all
#: run before any write, so a refused batch writes nothing.
#:
#: ``events`` carries (seq, record) pairs: checked (no seq may exist), then
#: written. A batch whose every event is already stored byte for byte was
#: applied before and is being resent (redis-py resends when a reply is
#: lost): it is reported applied, so such batches need no marker key.
#: ``have`` stands for a large blob the writer sent before: the batch is
#: refused (``missing``, nothing written) if the blob is gone, and resent whole.
#: ``cp`` writes a checkpoint (id, record, ids-key index, groups-key index,
#: thread-key index, group) and adds the group to the two listings only
#: when its id set is new: a group with ids is always listed.
APPLY_LUA = r"""#!lua
local marker_ttl = tonumber(ARGV[1])
if marker_ttl > 0 and redis.call('EXISTS', KEYS[2]) == 1 then return {'ok'} end
if ARGV[2] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then return {'gc'} end

local names = {OP_NAMES}  -- code byte -> operation
local writes = {setnx=1, hset=1, hsetnx=1, hsetxx=1, zadd=1, sadd=1, zrem=1, hdel=1, srem=1, del=1, dropempty=1,
                cp=1, events=1}
local codes, knums, counts = {}, {}, {}
local header = ARGV[3]
for p = 1, #header, 9 do
  local c, k1, k2, k3, k4, n1, n2, n3, n4 = string.byte(header, p, p + 8)
  local o = #codes + 1
  codes[o] = names[c] or '?' .. c
  knums[o] = ((k1 * 256 + k2) * 256 + k3) * 256 + k4
  counts[o] = ((n1 * 256 + n2) * 256 + n3) * 256 + n4
end

-- redis.call with many arguments in slices: unpack() is bounded by the C stack
local function sliced(cmd, key, first, last, width)
  local i = first
  while i <= last do
    local j = math.min(i + width - 1, last)
    redis.call(cmd, key, unpack(ARGV, i, j))
    i = j + 1
  end
end

local a = 4
local events, same, first_same = 0, 0, nil
for o = 1, #codes do
  local code, key, z = codes[o], KEYS[knums[o]], a + counts[o] - 1
  if code == 'fence' then
    local cur = redis.call('HGET', key, 'token')
    if cur ~= ARGV[a] then return {'lease', cur or ''} end
  elseif code == 'absent' then
    if redis.call('EXISTS', key) == 1 then return {'exists', knums[o]} end
  elseif code == 'have' then
    if redis.call('EXISTS', key) == 0 then return {'missing', knums[o]} end
  elseif code == 'events' then
    local j = a
    while j <= z do
      local last = math.min(j + 511, z)
      local seqs = {}
      for f = j, last, 2 do seqs[#seqs + 1] = ARGV[f] end
      local stored = redis.call('HMGET', key, unpack(seqs))
      for s = 1, #seqs do
        local v = stored[s]
        if v then
          if v ~= ARGV[j + 2 * s - 1] then return {'dup', knums[o], seqs[s]} end
          same = same + 1
          first_same = first_same or {knums[o], seqs[s]}
        end
      end
      events = events + #seqs
      j = last + 1
    end
  elseif not writes[code] then
    return redis.error_reply('graphtape: unknown operation ' .. code)
  end
  a = z + 1
end
if same > 0 then
  if same == events then return {'ok'} end
  return {'dup', first_same[1], first_same[2]}
end

a = 4
for o = 1, #codes do
  local code, key, z = codes[o], KEYS[knums[o]], a + counts[o] - 1
  if code == 'setnx' then
    redis.call('SET', key, ARGV[a], 'NX')
  elseif code == 'hset' or code == 'events' then
    sliced('HSET', key, a, z, 256)
  elseif code == 'cp' then
    redis.call('HSET', key, ARGV[a], ARGV[a + 1])
    local ids = KEYS[tonumber(ARGV[a + 2])]
    if redis.call('EXISTS', ids) == 0 then
      redis.call('SADD', KEYS[tonumber(ARGV[a + 3])], ARGV[a + 5])
      redis.call('SADD', KEYS[tonumber(ARGV[a + 4])], ARGV[a + 5])
    end
    redis.call('ZADD', ids, 0, ARGV[a])
  elseif code == 'zadd' or code == 'sadd' or code == 'srem' or code == 'zrem' or code == 'hdel' then
    sliced(string.upper(code), key, a, z, 256)
  elseif code == 'hsetnx' then
    for j = a, z, 2 do redis.call('HSETNX', key, ARGV[j], ARGV[j + 1]) end
  elseif code == 'hsetxx' then
    if redis.call('EXISTS', key) == 1 then sliced('HSET', key, a, z, 256) end
  elseif code == 'del' then
    redis.call('DEL', key)
  elseif code == 'dropempty' then
    if redis.call('EXISTS', key) == 0 then
      for j = a, z, 2 do redis.call('SREM', KEYS[tonumber(ARGV[j])], ARGV[j + 1]) end
    end
  end
  a = z + 1
end
if marker_ttl > 0 then redis.call('SET', KEYS[2], '1', 'EX', marker_ttl) end
return {'ok'}
""".replace("{OP_NAMES}", "{" + ", ".join(f"'{name}'" for name in OP_NAMES) + "}")

#: Removes runs with their events. KEYS[1] runs by start, KEYS[2] run ids,
#: then (run key, events key) per run; ARGV is (run id, id-index member) per
#: run. The run's thread index is named in its hash (``_tidx``).
DELETE_RUNS_LUA = r"""#!lua
for i = 1, #ARGV, 2 do
  local run_key, events_key = KEYS[i + 2], KEYS[i + 3]
  local thread_index = redis.call('HGET', run_key, '_tidx')
  if thread_index then redis.call('ZREM', thread_index, ARGV[i]) end
  redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('ZREM', KEYS[2], ARGV[i + 1])
  redis.call('DEL', run_key, events_key)
end
return 1
"""

#: Removes a thread's checkpoints and writes. KEYS: the thread's group set,
#: its write set, the global group set; ARGV: the key prefixes of checkpoint
#: ids, checkpoint data and writes (the members of the sets complete them).
DELETE_THREAD_LUA = r"""#!lua
for _, g in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  redis.call('DEL', ARGV[1] .. g, ARGV[2] .. g)
  redis.call('SREM', KEYS[3], g)
end
for _, w in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  redis.call('DEL', ARGV[3] .. w)
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""

#: The newest checkpoint of a group: id and record in one atomic read.
LATEST_CHECKPOINT_LUA = r"""#!lua flags=no-writes
local ids = redis.call('ZREVRANGEBYLEX', KEYS[1], '+', '-', 'LIMIT', 0, 1)
if #ids == 0 then return false end
return {ids[1], redis.call('HGET', KEYS[2], ids[1])}
"""

#: Walks a chain from its head on the server: one round trip instead of
#: one per message. Returns {1, items head first} or {0, missing node id}.
CHAIN_LUA = r"""#!lua flags=no-writes
-- a node is "-:item" at the root, else "<length of parent>:parent item"
local items, cur, guard = {}, ARGV[1], 0
while cur do
  local node = redis.call('HGET', KEYS[1], cur)
  if not node then return {0, cur} end
  local colon = string.find(node, ':', 1, true)
  local head = string.sub(node, 1, colon - 1)
  if head == '-' then
    items[#items + 1] = string.sub(node, colon + 1)
    cur = nil
  else
    local n = tonumber(head)
    items[#items + 1] = string.sub(node, colon + n + 1)
    cur = string.sub(node, colon + 1, colon + n)
  end
  guard = guard + 1
  if guard > 10000000 then return redis.error_reply('graphtape: chain ' .. ARGV[1] .. ' loops') end
end
return {1, items}
"""

#: Takes or renews a lease by the server clock; see TapeStore.acquire_lease.
ACQUIRE_LEASE_LUA = r"""#!lua
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local expires = now + tonumber(ARGV[2])
local cur = redis.call('HMGET', KEYS[1], 'owner', 'expires', 'token')
local owner, held_until, token = cur[1], tonumber(cur[2] or '0'), tonumber(cur[3] or '')
if not token then
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'expires', expires, 'token', 1)
  return 1
end
if owner == ARGV[1] and held_until > now then
  redis.call('HSET', KEYS[1], 'expires', expires)
  return token
end
if owner and held_until > now then return false end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'expires', expires, 'token', token + 1)
return token + 1
"""

#: Gives a lease up; the token stays so the next holder's is larger.
RELEASE_LEASE_LUA = r"""#!lua
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'owner')
  redis.call('HSET', KEYS[1], 'expires', 0)
end
return 1
"""

#: The collector's lock: take (or refresh, for the same token) / give up.
GC_LOCK_LUA = r"""#!lua
local cur = redis.call('GET', KEYS[1])
if ARGV[2] == 'release' then
  if cur == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return 1
end
if cur == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[3]) return 1 end
if cur or ARGV[2] == 'refresh' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
"""

#: Deletes garbage, only while the collector still holds its lock (so no
#: writer can have referred to it since the mark). KEYS[1] the lock,
#: KEYS[2] the chain hash, KEYS[3..] blob keys; ARGV[1] the lock token,
#: ARGV[2..] chain ids.
SWEEP_LUA = r"""#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
for i = 3, #KEYS do redis.call('DEL', KEYS[i]) end
for i = 2, #ARGV do redis.call('HDEL', KEYS[2], ARGV[i]) end
return 1
"""


def glob_escape(text: str) -> str:
    """``text`` as a literal in a SCAN ``MATCH`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def as_str(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def as_bytes(value: bytes | str) -> bytes:
    """A reply as bytes. The client is opened without ``decode_responses``, so replies are bytes;
    redis-py's types also allow ``str`` (for clients that decode)."""
    return value if isinstance(value, bytes) else value.encode("utf-8")


@functools.lru_cache(maxsize=1024)  # a run writes one group over and over
def group_key(thread_id: str, checkpoint_ns: str) -> str:
    """The name of a (thread, namespace) group: JSON, so any thread id or namespace is unambiguous."""
    return json.dumps([thread_id, checkpoint_ns])


@functools.lru_cache(maxsize=64)  # a step's writes share one
def write_group_key(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    return json.dumps([thread_id, checkpoint_ns, checkpoint_id])


def id_member(run_id: str) -> str:
    """Member of the run-id index: SQLite's ``LIKE`` is ASCII case-insensitive, so the key is the folded id.

    Folding keeps the length, so the two halves split at the middle even
    when an id contains the separator.
    """
    return f"{run_id.translate(ASCII_LOWER)}\x00{run_id}"


def split_id_member(member: str) -> tuple[str, str]:
    half = (len(member) - 1) // 2
    return member[:half], member[half + 1 :]


def _encode_chain_node(parent: str | None, item: str) -> bytes:
    """``-:item`` at the root, else ``<bytes of parent>:parent item``: any parent (even "") survives."""
    if parent is None:
        return b"-:" + item.encode("utf-8")
    raw = parent.encode("utf-8")
    return str(len(raw)).encode() + b":" + raw + item.encode("utf-8")


def decode_chain_node(stored: bytes) -> tuple[str | None, str]:
    head, _, rest = stored.partition(b":")
    if head == b"-":
        return None, rest.decode("utf-8")
    n = int(head)
    return rest[:n].decode("utf-8"), rest[n:].decode("utf-8")


def _encode_blob(data: bytes) -> bytes:
    if len(data) > COMPRESS_OVER:
        return b"z" + zlib.compress(data, 1)
    return b"r" + data


def decode_stored_blob(stored: bytes) -> bytes:
    return zlib.decompress(stored[1:]) if stored[:1] == b"z" else stored[1:]


_ascii = json.encoder.encode_basestring_ascii  # what json.dumps uses for a str (ensure_ascii)


def _json(value: Any) -> str:
    """``json.dumps(value)``, faster for a string: the write records are lists of strings, built per step."""
    return _ascii(value) if type(value) is str else json.dumps(value)


@functools.lru_cache(maxsize=4096)
def _kind_field(kind: str) -> str:
    return json.dumps(kind)


#: Events whose compact JSON is at most this many bytes are stored as that JSON, not deflated: a
#: recorded super-step writes three such events (task started and finished, checkpoint, 100-250
#: bytes each), and deflating them with the preset dictionary cost more CPU than the rest of the
#: batch's encoding together (~15 us each) to save ~120 bytes each. Larger ones (model calls,
#: tool results) are deflated as everywhere. Both forms are what ``unpack_event`` reads.
PLAIN_EVENT_MAX = 256


def _encode_event(ev: EventRow, plain: bool = False) -> bytes:
    """``ts\\0"kind"\\0packed``: the kind as JSON, which never holds a raw NUL, so the split is unambiguous.

    ``plain``: the JSON whatever its size (a strict replay's events: ``WriteBatch.plain_events``)."""
    head = f"{float(ev.ts)!r}\x00{_kind_field(ev.kind)}\x00".encode()
    raw = pack_event_plain(ev.data)
    return head + (raw if plain or len(raw) <= PLAIN_EVENT_MAX else pack_event_json(raw))


def split_event(stored: bytes) -> tuple[float, str, bytes]:
    ts, kind, data = stored.split(b"\x00", 2)
    return float(ts), json.loads(kind), data


def decode_event(run_id: str, seq: bytes, stored: bytes) -> EventRow:
    ts, kind, data = split_event(stored)
    return EventRow(run_id, int(seq), kind, ts, unpack_event(data))


def encode_checkpoint(c: CheckpointRow) -> bytes:
    header = dump_meta(
        [c.parent_id, c.run_id, c.step, c.source, c.created_at, c.metadata, c.values, c.writers, c.calls]
    )
    return header.encode("utf-8") + b"\x00" + bytes(c.body)


def decode_checkpoint(thread_id: str, checkpoint_ns: str, checkpoint_id: str, stored: bytes) -> CheckpointRow:
    header, _, body = stored.partition(b"\x00")
    # a header written before the writers and calls were stored has seven fields (then: not known)
    parent_id, run_id, step, source, created_at, metadata, values, *listed = json.loads(header)
    return CheckpointRow(
        thread_id,
        checkpoint_ns,
        checkpoint_id,
        parent_id,
        run_id,
        step,
        source,
        created_at,
        metadata,
        body,
        values,
        *listed,
    )


def _encode_run_field(name: str, value: Any) -> str:
    return dump_meta(value) if name == "meta" else json.dumps(value, default=str)


def decode_run(fields: Mapping[bytes | str, bytes | str]) -> RunRecord:
    values: dict[str, Any] = {}
    for name in _RUN_FIELDS:
        raw = fields.get(name.encode())
        if raw is not None:
            values[name] = json.loads(raw)
    # SQLite's column types: times are REAL, counters INTEGER.
    for name in ("started_at", "ended_at"):
        if values.get(name) is not None:
            values[name] = float(values[name])
    for name in _RUN_INTS:
        if values.get(name) is not None:
            values[name] = int(values[name])
    return RunRecord(**values)


class Keys:
    """Key names under one prefix; the only place that spells them (see the module docstring)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.schema = prefix + "schema"
        self.gc_lock = prefix + "gc:lock"
        self.runs_by_start = prefix + "runs:by-start"
        self.run_ids = prefix + "runs:ids"
        self.chains = prefix + "chains"
        self.cp_groups = prefix + "cp:groups"
        self.cp_ids_ns = prefix + "cp:ids:"
        self.cp_data_ns = prefix + "cp:data:"
        self.writes_ns = prefix + "wr:"
        self.blob_ns = prefix + "blob:"
        self.events_ns = prefix + "ev:"
        #: the index of archived threads: a hash, thread id -> JSON of its ArchiveEntry
        self.archives = prefix + "archives"

    def applied(self, batch_id: str) -> str:
        return f"{self.prefix}applied:{batch_id}"

    def run(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}"

    def thread_runs(self, thread_id: str) -> str:
        return f"{self.prefix}runs:thread:{thread_id}"

    def events(self, run_id: str) -> str:
        return self.events_ns + run_id

    def blob(self, h: str) -> str:
        return self.blob_ns + h

    def cp_ids(self, group: str) -> str:
        return self.cp_ids_ns + group

    def cp_data(self, group: str) -> str:
        return self.cp_data_ns + group

    def cp_thread(self, thread_id: str) -> str:
        return f"{self.prefix}cp:thread:{thread_id}"

    def writes(self, wgroup: str) -> str:
        return self.writes_ns + wgroup

    def writes_thread(self, thread_id: str) -> str:
        return f"{self.prefix}wrt:{thread_id}"

    def lease(self, name: str) -> str:
        return f"{self.prefix}lease:{name}"


class Ops:
    """Operations for :data:`APPLY_LUA`, with the keys they touch declared in ``KEYS``."""

    def __init__(self, keys: Keys, batch_id: str | None):
        self.keys: list[str] = [keys.gc_lock, keys.applied(batch_id or "-")]
        self.index: dict[str, int] = {}
        self.codes: list[bytes] = []
        self.args: list[Any] = []

    def key(self, name: str) -> int:
        idx = self.index.get(name)
        if idx is None:
            self.keys.append(name)
            idx = self.index[name] = len(self.keys)
        return idx

    def add(self, code: str, key: str, *args: Any) -> None:
        self.codes.append(_pack_op(_OP_CODES[code], self.key(key), len(args)))
        self.args.extend(args)

    def argv(self, marker_ttl: int, wait_for_gc: bool) -> list[Any]:
        """ARGV for :data:`APPLY_LUA`: the marker's ttl, whether to wait for a collection, the header, the arguments."""
        return [marker_ttl, "1" if wait_for_gc else "0", b"".join(self.codes), *self.args]

    def __bool__(self) -> bool:
        return bool(self.codes)


def add_batch(
    ops: Ops,
    k: Keys,
    batch: WriteBatch,
    events_by_run: dict[str, list[EventRow]],
    fence: tuple[str, int] | None,
    have: Set[str] = frozenset(),
) -> None:
    """Add the operations that apply ``batch`` (its events grouped by run) to ``ops``: checks, then writes.

    ``have``: addresses of blobs of the batch that are only checked to exist, not sent (see ``have`` in
    :data:`APPLY_LUA`).
    """
    # checks (the script runs them all before any write; ``events`` is both a check and a write)
    if fence is not None:
        ops.add("fence", k.lease(fence[0]), str(int(fence[1])))
    for run in batch.new_runs:
        ops.add("absent", k.run(run.run_id))

    # writes, in SQLite's order
    for h, data in batch.blobs.items():
        if h in have:
            ops.add("have", k.blob(h))
        else:
            ops.add("setnx", k.blob(h), _encode_blob(data))
    if batch.chains:
        pairs: list[Any] = []
        for cid, (parent, item) in batch.chains.items():
            pairs.extend((cid, _encode_chain_node(parent, item)))
        ops.add("hsetnx", k.chains, *pairs)
    for run in batch.new_runs:
        fields: list[Any] = []
        for name in _RUN_FIELDS:
            fields.extend((name, _encode_run_field(name, getattr(run, name))))
        thread_index = k.thread_runs(run.thread_id)
        fields.extend(("_tidx", thread_index))
        ops.add("hset", k.run(run.run_id), *fields)
        score = repr(float(run.started_at))
        ops.add("zadd", k.runs_by_start, score, run.run_id)
        ops.add("zadd", thread_index, score, run.run_id)
        ops.add("zadd", k.run_ids, "0", id_member(run.run_id))
    for run_id, evs in events_by_run.items():
        fields = []
        for ev in evs:
            fields.extend((str(int(ev.seq)), _encode_event(ev, batch.plain_events)))
        ops.add("events", k.events(run_id), *fields)
    for c in batch.checkpoints:
        g = group_key(c.thread_id, c.checkpoint_ns)
        ops.add(
            "cp",
            k.cp_data(g),
            c.checkpoint_id,
            encode_checkpoint(c),
            ops.key(k.cp_ids(g)),
            ops.key(k.cp_groups),
            ops.key(k.cp_thread(c.thread_id)),
            g,
        )
    listed: set[str] = set()  # one SADD per write group, not one per write
    for replace in (True, False):  # SQLite's order: replacing writes first, then set-if-absent
        for w in batch.writes:
            if w.replace is not replace:
                continue
            wg = write_group_key(w.thread_id, w.checkpoint_ns, w.checkpoint_id)
            ops.add(
                "hset" if replace else "hsetnx",
                k.writes(wg),
                f"[{_json(w.task_id)}, {int(w.idx)}]",
                f"[{_json(w.task_path)}, {_json(w.channel)}, {_json(w.value)}]",
            )
            if wg not in listed:
                listed.add(wg)
                ops.add("sadd", k.writes_thread(w.thread_id), wg)
    for run_id, update in batch.run_updates:
        if update:
            fields = []
            for name, value in update.items():
                fields.extend((name, _encode_run_field(name, value)))
            ops.add("hsetxx", k.run(run_id), *fields)


def split_url(url: str) -> tuple[str, str, str]:
    """``(url for redis-py, prefix, url to show)`` from a graphtape Redis URL.

    The ``prefix`` parameter is graphtape's, so it is removed before redis-py
    sees the URL; the shown URL keeps it but masks any password.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefix = DEFAULT_PREFIX
    kept = []
    for name, value in query:
        if name == "prefix":
            prefix = value
        else:
            kept.append((name, value))
    client_url = urlunsplit(parts._replace(query=urlencode(kept)))
    netloc = parts.netloc
    if "@" in netloc:
        creds, _, host = netloc.rpartition("@")
        user, sep, _password = creds.partition(":")
        if sep:  # a lone credential (``redis://name@host``) is a user name to redis-py, not a secret
            netloc = f"{user}:***@{host}"
    shown_query = urlencode([(n, "***" if n == "password" else v) for n, v in query], safe=":/")
    shown = urlunsplit(parts._replace(netloc=netloc, query=shown_query))
    return client_url, prefix, shown
