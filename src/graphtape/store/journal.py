"""A run's call journal: completed calls kept across a crash without a store transaction per call.

Why it exists: recorded with graphtape's own saver, a completed call must be
safe before the run goes on, so that recovery after a crash serves it from
the tape instead of sending it again. Written as its own SQLite transaction,
that cost 130-300 us a call (BEGIN, the fence read, five or six WAL frames,
COMMIT) and waited for a checkpoint that LangGraph's background thread was
writing: about a third of what recording a run of fast calls cost. Here a
completed call is one ``write()`` to a file beside the tape file; its rows
stay buffered and go to the store with the run's next transaction (its next
checkpoint or its end), as every other row of the run does.

Durability is the store's own: the tape file runs with
``synchronous=NORMAL``, whose commits survive the death of the process but
not of the machine, and so does a ``write()`` that returned.

How a dead writer's rows reach the store:

* Each run has its own file, ``<tape file>-calls/<run id>.<random>.journal``, locked
  (``flock``) by its writer for as long as it is open. The operating
  system drops the lock when the process dies, so "the lock can be taken"
  means "the writer is gone".
* The file is created under a temporary name and renamed once locked: a
  reader never finds a journal its writer has not locked yet.
* Its first frame names the run and the lease token that fences the run's
  writes. :meth:`~graphtape.store.sqlite.SqliteTapeStore.import_journals`
  (run when the store opens, before a lease is taken and when a lease is
  found free) writes the rows of every unlocked journal whose token is still
  the lease's, exactly as the dead writer's next write would have, then
  deletes the file. A journal whose lease moved on is deleted unread: its
  writer had lost the thread, and its writes would have been refused.
* Rows are inserted only if absent, so a journal that still holds rows the
  store already has (the writer committed them and died before trimming the
  file) changes nothing.

A run forked into a child process without ``exec`` shares the open file and
its lock with the child: the journal then counts as live until both exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphtape import clock
from graphtape.jsontext import one_shot
from graphtape.store.base import WriteBatch
from graphtape.store.codec import pack_event_plain

try:  # pragma: no cover - the platform decides
    import fcntl
except ImportError:  # pragma: no cover - Windows: no journal, every call is written at once
    fcntl = None  # type: ignore[assignment]

#: the frame header: payload length, CRC-32 of the payload
_FRAME = struct.Struct(">II")
#: a rows frame's payload starts with the length of its JSON header
_HEAD = struct.Struct(">I")
#: the format of the first frame (the file's header)
VERSION = 1
#: a journal longer than this is cut back to its header once its rows are in the store
TRIM_OVER = 256 << 10
#: the suffix of a finished journal file (a file being created has another)
SUFFIX = ".journal"
#: event kinds never journaled: a checkpoint event is only true once its checkpoint row is
#: written, which happens in the store's transaction, never here
UNJOURNALED_KINDS = frozenset({"checkpoint"})


#: the names of the journals this process has open: never opened to be tried (a server running
#: many runs at once would open each of them at every run's start, to find them locked)
_OPEN: set[str] = set()


def supported() -> bool:
    """Whether this platform can hold a journal's lock (``flock``)."""
    return fcntl is not None


def journal_dir(store_path: Path) -> Path:
    """The folder of a tape file's journals (beside it, named after it)."""
    return store_path.with_name(store_path.name + "-calls")


#: ``json.dumps(head, separators=(",", ":"))`` with its C encoder built once (every completed call
#: appends a frame: 9-16 -> 7-15 us an append)
_head_json = one_shot(json.JSONEncoder(separators=(",", ":")))


def _frame(payload: bytes) -> bytes:
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def encode_rows(batch: WriteBatch) -> bytes:
    """One frame holding ``batch``'s events, blobs and chain nodes (nothing else is journaled).

    The payload is a JSON header listing the rows, then the event bodies
    (plain JSON, as :func:`~graphtape.store.codec.pack_event_plain` writes
    them) and the blobs' bytes, back to back in the header's order.
    """
    events, blobs = batch.events, batch.blobs
    bodies = [pack_event_plain(e.data) for e in events]
    head = {
        "e": [[e.run_id, e.seq, e.kind, e.ts, len(b)] for e, b in zip(events, bodies)],
        "b": [[h, len(d)] for h, d in blobs.items()],
        "c": [[k, p, i] for k, (p, i) in batch.chains.items()],
    }
    text = _head_json(head).encode("utf-8")
    return _frame(b"".join([_HEAD.pack(len(text)), text, *bodies, *blobs.values()]))


@dataclass
class JournalRows:
    """What a journal file holds: its header and its rows, in the order they were appended."""

    header: dict[str, Any]
    #: (run id, seq, kind, ts, plain JSON body)
    events: list[tuple[str, int, str, float, bytes]] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)
    chains: dict[str, tuple[str | None, str]] = field(default_factory=dict)


def _frames(data: bytes) -> Iterator[bytes]:
    """The payloads of ``data``'s frames, up to the first torn or damaged one (a crash mid-write)."""
    at = 0
    while at + _FRAME.size <= len(data):
        size, crc = _FRAME.unpack_from(data, at)
        payload = data[at + _FRAME.size : at + _FRAME.size + size]
        if len(payload) != size or zlib.crc32(payload) != crc:
            return
        yield payload
        at += _FRAME.size + size


def decode(data: bytes) -> JournalRows | None:
    """Parse a journal file's bytes; None when even its header frame is missing or damaged."""
    frames = _frames(data)
    first = next(frames, None)
    if first is None:
        return None
    try:
        header = json.loads(first)
    except ValueError:
        return None
    if not isinstance(header, dict) or header.get("v") != VERSION:
        return None
    rows = JournalRows(header)
    for payload in frames:
        (size,) = _HEAD.unpack_from(payload, 0)
        head = json.loads(payload[_HEAD.size : _HEAD.size + size])
        at = _HEAD.size + size
        for run_id, seq, kind, ts, n in head["e"]:
            rows.events.append((run_id, seq, kind, ts, payload[at : at + n]))
            at += n
        for h, n in head["b"]:
            rows.blobs[h] = payload[at : at + n]
            at += n
        for k, p, i in head["c"]:
            rows.chains[k] = (p, i)
    return rows


class CallJournal:
    """The open journal of one run, written by that run's writer only.

    Not thread safe by itself: the tape writer appends under its buffer lock
    (an append and the move of its rows to the writer's "journaled" batch
    must look like one step to a flush; see ``TapeWriter.secure``).
    """

    def __init__(self, folder: Path, run_id: str, fence: tuple[str, int] | None):
        if fcntl is None:  # pragma: no cover
            raise OSError("no flock on this platform")
        folder.mkdir(exist_ok=True)
        # a run continued by a later session of the same process (a resumed interrupt) opens a
        # journal of its own: the last one's may still hold rows an import has not taken yet. Its tag
        # is an id of graphtape's clock, like every id graphtape makes (not a uuid4 the user's code,
        # or a test's mock of it, expected to get)
        tag = clock.new_id()
        self.path = folder / f"{run_id}.{tag}{SUFFIX}"
        temp = folder / f".{run_id}.{tag}.new"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            lease, token = fence if fence else (None, None)
            header = {"v": VERSION, "run": run_id, "lease": lease, "token": token}
            self._header_size = self._write(fd, _frame(json.dumps(header).encode("utf-8")))
            os.rename(temp, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        self._fd: int | None = fd
        _OPEN.add(self.path.name)
        self.size = self._header_size
        #: frames appended since the file was opened (a flush compares it before trimming)
        self.appended = 0

    @staticmethod
    def _write(fd: int, data: bytes) -> int:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        return len(data)

    def append(self, batch: WriteBatch) -> None:
        """Add ``batch``'s events, blobs and chain nodes; on disk (the page cache) when this returns."""
        if self._fd is None:
            raise OSError("the journal is closed")
        self.size += self._write(self._fd, encode_rows(batch))
        self.appended += 1

    def trim(self) -> None:
        """Cut the file back to its header: every row it held is in the store now."""
        if self._fd is not None and self.size > self._header_size:
            os.ftruncate(self._fd, self._header_size)
            self.size = self._header_size

    def close(self, *, keep: bool = False) -> None:
        """Close the file: deleted, unless ``keep`` (rows not in the store yet: an import takes them)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _OPEN.discard(self.path.name)
        try:
            if not keep:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)  # while still locked: no importer reads it half-deleted
        finally:
            os.close(fd)  # releases the lock


def dead_journals(folder: Path) -> Iterator[tuple[Path, int, JournalRows | None]]:
    """Each journal of ``folder`` whose writer is gone: its path, an open locked descriptor and its rows.

    The caller imports the rows (or not), then calls :func:`discard` with the
    path and descriptor. A journal still locked by its writer is skipped.
    """
    if fcntl is None:  # pragma: no cover
        return
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if not name.endswith(SUFFIX) or name.startswith(".") or name in _OPEN:
            continue  # not a journal, not finished being created, or one this process writes
        path = folder / name
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue  # its writer finished and deleted it meanwhile (or it cannot be read: left alone)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            data = path.read_bytes()
        except OSError:
            os.close(fd)  # a live writer holds it (or it cannot be read now: tried again next time)
            continue
        except BaseException:
            os.close(fd)
            raise
        yield path, fd, decode(data)


def discard(path: Path, fd: int) -> None:
    """Delete an imported (or refused) journal and let its lock go."""
    try:
        with contextlib.suppress(OSError):  # one that cannot be deleted is imported again: no row twice
            os.unlink(path)
    finally:
        os.close(fd)
