"""A run's call journal: the completed calls of a run on SQLite, durable before the next step commits.

Crash recovery never sends a completed call again because that call is
stored before the node goes on (``tests/test_recovery.py``). On SQLite that
used to be one store transaction per completed call (BEGIN, inserts, COMMIT,
the lease fence: 200-300 us of CPU on the run's thread, 20 of them in a
10-node run with an LLM and a tool call per node). Here it is **one**
``os.write`` of the call's rows (its event and the blobs and chain nodes it
refers to) to an append-only file next to the database (30-50 us); the rows
stay in the run's write buffer and reach SQLite with the next step's
transaction, as before. After that transaction the journal is emptied, and
at the run's end removed. The rows are still packed and inserted once, in
the step's transaction: what a run saves is the transactions (the store
writes of that run took 10.0 -> 8.2 ms of CPU, the journal 0.8 ms).

Durability is the same as SQLite's own here: the store runs WAL with
``synchronous=NORMAL``, whose commits are not fsynced either. A ``write()``
is in the operating system's page cache once it returns, so it survives the
process being killed (SIGKILL, OOM) exactly as a WAL commit does; neither
survives the machine losing power before the OS writes its cache out.

The file is ``<database>.gtj-<run id>`` (SQLite's own files are
``-journal``, ``-wal``, ``-shm`` and ``-mj*``: no clash). It starts with a
header naming the run, its thread's lease and the lease's fencing token; then
records, each ``length, crc32, payload``: a record cut short by a crash (or
not matching its checksum) and whatever follows it are ignored, the records
before it stand.

A journal is applied (its rows written into the store, the rows the store
already has skipped, then the file removed) by :func:`apply_dead`, which
touches only the journals whose writer is gone: its thread's lease is free
(held by nobody, or expired: then it is taken for the time of the apply,
which moves its token on, so a writer that was merely paused can no longer
write) or moved on to another token. A journal whose lease is held with its
own token belongs to a living writer (or one that died less than a lease
time-to-live ago) and is never applied by another process.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from graphtape.jsontext import one_shot
from graphtape.store.base import EventRow, TapeStore, WriteBatch

#: the journal file's suffix before the run id (``<database>.gtj-<run id>``)
SUFFIX = ".gtj-"
MAGIC = b"GTJ1"
#: a record's head: payload length, crc32 of the payload
_HEAD = struct.Struct("<II")
#: an event entry's head: seq, ts, kind length, body length
_EVENT = struct.Struct("<qdHI")
#: a blob entry's head: address length, data length
_BLOB = struct.Struct("<HI")
#: a chain entry's head: id, parent (0: none), item lengths
_CHAIN = struct.Struct("<HHH")
_E, _B, _C = b"E", b"B", b"C"
#: an event's body in the journal: compact JSON, not the store's packed form (deflating it costs
#: about 27 us an event, five times the JSON; the store packs it once, when it writes the row)
_event_json = one_shot(json.JSONEncoder(separators=(",", ":")))


def base_path(store: TapeStore) -> Path | None:
    """The SQLite file a run's journals go beside, or None: no local file (PostgreSQL, Redis,
    ``:memory:``) keeps today's one commit per call."""
    from graphtape.store.sqlite import SqliteTapeStore

    if not isinstance(store, SqliteTapeStore):
        return None
    text = str(store.path)
    if not text or text == ":memory:" or text.startswith("file:"):
        return None
    return store.path


def path_for(base: Path, run_id: str) -> Path:
    return base.with_name(base.name + SUFFIX + run_id)


class Journal:
    """The append-only journal of one run (opened on its first append; not thread-safe: the
    writer calls it under its flush lock)."""

    def __init__(self, path: Path, run_id: str, lease: str, token: int):
        self.path = path
        self.run_id = run_id
        head = json.dumps({"run_id": run_id, "lease": lease, "token": token}).encode()
        self._header = MAGIC + struct.pack("<I", len(head)) + head
        self._fd: int | None = None
        #: bytes after the header: records written since the journal was last emptied
        self.pending = 0

    def append(self, events: Iterable[EventRow], blobs: Iterable[tuple[str, bytes]], chains: Iterable[Any]) -> None:
        """Append one record with these rows, in one ``write`` (with the header if the file is new)."""
        parts: list[bytes] = []
        add = parts.append
        for e in events:
            kind = e.kind.encode()
            body = _event_json(e.data).encode()
            add(_E + _EVENT.pack(e.seq, e.ts, len(kind), len(body)))
            add(kind)
            add(body)
        for h, data in blobs:
            hb = h.encode()
            add(_B + _BLOB.pack(len(hb), len(data)))
            add(hb)
            add(data)
        for cid, (parent, item) in chains:
            cb, pb, ib = cid.encode(), (parent or "").encode(), item.encode()
            add(_C + _CHAIN.pack(len(cb), len(pb), len(ib)))
            add(cb + pb + ib)
        payload = b"".join(parts)
        record = _HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if os.fstat(self._fd).st_size == 0:
                record = self._header + record
        n = os.write(self._fd, record)
        if n != len(record):  # a full disk: what was written is ignored (a cut record), the rest raised
            raise OSError(f"short write to {self.path}: {n} of {len(record)} bytes")
        self.pending += 1

    def emptied(self) -> None:
        """Everything journaled is in the store now: drop the records (the header stays)."""
        if self._fd is not None and self.pending:
            os.ftruncate(self._fd, len(self._header))
            self.pending = 0

    def close(self) -> None:
        """Close the file; remove it if nothing in it is missing from the store (else recovery applies it)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        os.close(fd)
        if not self.pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


def read(path: Path) -> tuple[dict[str, Any], WriteBatch] | None:
    """A journal's header and rows (the records up to the first cut or damaged one); None if the
    file is gone or has no complete header."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if data[:4] != MAGIC or len(data) < 8:
        return None
    (hlen,) = struct.unpack_from("<I", data, 4)
    try:
        header = json.loads(data[8 : 8 + hlen])
    except ValueError:
        return None
    run_id = header["run_id"]
    batch = WriteBatch()
    pos = 8 + hlen
    while pos + _HEAD.size <= len(data):
        size, crc = _HEAD.unpack_from(data, pos)
        payload = data[pos + _HEAD.size : pos + _HEAD.size + size]
        if len(payload) != size or zlib.crc32(payload) != crc:
            break
        pos += _HEAD.size + size
        _entries(payload, run_id, batch)
    return header, batch


def _entries(payload: bytes, run_id: str, batch: WriteBatch) -> None:
    i = 0
    while i < len(payload):
        tag = payload[i : i + 1]
        i += 1
        if tag == _E:
            seq, ts, klen, blen = _EVENT.unpack_from(payload, i)
            i += _EVENT.size
            kind = payload[i : i + klen].decode()
            i += klen
            batch.events.append(EventRow(run_id, seq, kind, ts, json.loads(payload[i : i + blen])))
            i += blen
        elif tag == _B:
            hlen, dlen = _BLOB.unpack_from(payload, i)
            i += _BLOB.size
            h = payload[i : i + hlen].decode()
            i += hlen
            batch.blobs[h] = payload[i : i + dlen]
            i += dlen
        elif tag == _C:
            clen, plen, ilen = _CHAIN.unpack_from(payload, i)
            i += _CHAIN.size
            cid = payload[i : i + clen].decode()
            parent = payload[i + clen : i + clen + plen].decode() or None
            item = payload[i + clen + plen : i + clen + plen + ilen].decode()
            i += clen + plen + ilen
            batch.chains[cid] = (parent, item)
        else:
            raise ValueError(f"unknown journal entry {tag!r}")


def journals(base: Path) -> list[Path]:
    """The journal files beside the SQLite file ``base``."""
    try:
        names = os.listdir(base.parent or ".")
    except OSError:
        return []
    prefix = base.name + SUFFIX
    return [base.with_name(n) for n in sorted(names) if n.startswith(prefix)]


def apply_dead(store: TapeStore, run_ids: Iterable[str] | None = None) -> list[str]:
    """Write the rows of every journal whose writer is gone into ``store`` (of ``run_ids``' journals
    only, if given); returns the run ids of the journals applied.

    See the module's docstring for which journals those are. Called before a
    crashed run is read for recovery (:func:`graphtape.runtime.recovery.orphaned_runs`
    and :func:`~graphtape.runtime.recovery.recovery_chain`, which the server's
    resumption of a queued run uses too).
    """
    base = base_path(store)
    if base is None:
        return []
    wanted = None if run_ids is None else set(run_ids)
    applied = []
    for path in journals(base):
        run_id = path.name[len(base.name) + len(SUFFIX) :]
        if (wanted is None or run_id in wanted) and apply_one(store, path):
            applied.append(run_id)
    return applied


def apply_one(store: TapeStore, path: Path) -> bool:
    """Apply the journal at ``path`` if its writer is gone (see :func:`apply_dead`); whether it was."""
    from graphtape.runtime.lease import new_owner

    got = read(path)
    if got is None:
        return False
    header, batch = got
    name, token = header["lease"], header["token"]
    holder = store.lease_holder(name)
    owner = None
    if holder is None:
        # free or expired: take it while applying, which moves its token on (a paused writer is fenced out)
        owner = new_owner()
        if store.acquire_lease(name, owner, 30.0) is None:
            return False  # somebody took it just now: their run's journal is theirs to write
        got = read(path)  # the writer may have appended (then emptied or removed it) meanwhile
        if got is None:
            store.release_lease(name, owner)
            return False
        header, batch = got
    elif holder[2] == token:
        return False  # the writer's lease: alive, or dead less than its time-to-live ago
    try:
        _write_missing(store, header["run_id"], batch)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    finally:
        if owner is not None:
            store.release_lease(name, owner)
    return True


def _write_missing(store: TapeStore, run_id: str, batch: WriteBatch) -> None:
    """Write ``batch`` without the events the store has (blobs and chain nodes are written if absent)."""
    have = {e.seq for e in store.events(run_id)}
    seen: set[int] = set()
    events = []
    for e in batch.events:
        if e.seq not in have and e.seq not in seen:
            seen.add(e.seq)
            events.append(e)
    batch.events = events
    if batch:
        store.write(batch)
