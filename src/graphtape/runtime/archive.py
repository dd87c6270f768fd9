"""Archiving: move quiet threads to cold storage, whole, and bring them back.

:func:`archive` writes each selected thread (its runs, their events, the
blobs and chain nodes they use, and the thread's checkpoints and pending
writes in graphtape's saver) to one gzip-compressed tape file of kind
``archive`` (see :mod:`graphtape.export`), reads the file back and checks it
against what was written, and only then removes the thread from the store
with :meth:`~graphtape.store.base.TapeStore.remove_thread`, one transaction
per thread. A crash before that transaction leaves the thread in the store
(and perhaps a complete file beside it, which a later archive overwrites); a
crash after it leaves a verified file: never half a thread.

Which threads go. The selection is retention's (:func:`plan_prune` without
truncating threads): a thread goes only when every one of its runs would be
pruned, so a thread with a run still ``running``, a run younger than
``older_than`` (an interrupt paused more recently than that included), or a
run that another kept run replays, forks or recovers, stays. On top of that,
a thread whose lease another process holds is skipped, and a thread whose
runs are replayed by runs of another thread still in the store waits until
that thread is archived first (the command does so in the same pass).

Threads paused at an interrupt. ``older_than`` is their rule too: a thread
whose run paused for an answer less than ``older_than`` ago is not selected.
``keep_interrupted_for`` keeps them longer than the others (archive finished
conversations after 30 days, but leave one waiting for a human for 90).

Threads with checkpoints and no recorded run (a copied thread, a graph run
on graphtape's saver without recording) go with their checkpoints, by the
age of their newest one, unless ``statuses`` filters by run status: their
archive holds no run, restores whole, and resumes like any other.

:func:`restore` reads an archive, refuses it with
:class:`~graphtape.errors.TapeFormatError` when it is unreadable or altered
(nothing written), and writes the whole thread back in one transaction.
Blobs shared with other threads were never removed and are simply found
again. The thread then resumes, replays and forks like any other, and
exports to the same bytes as before it was archived.

Where files go. ``to`` is a local directory, or an ``fsspec`` URL
(``s3://bucket/tapes``) when ``fsspec`` and its driver are installed
(``pip install graphtape[archive] s3fs``).

The index. The store records where each thread went
(:class:`~graphtape.store.base.ArchiveEntry`) in the same transaction that
removes it, and forgets it when the thread is restored: ``graphtape runs
--archived`` lists it, and :func:`where_archived` is what ``graphtape
history`` says about a thread that is no longer there.
"""

from __future__ import annotations

import dataclasses
import datetime
import gzip
import hashlib
import json
import os
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from graphtape import clock
from graphtape.errors import GraphtapeError, StoreError, TapeFormatError
from graphtape.export import ARCHIVE_KIND, FORMAT, VERSION, body_lines, parse_text
from graphtape.runtime.lease import lease_name
from graphtape.runtime.retention import plan_prune
from graphtape.store.base import ArchiveEntry, RunRecord, TapeStore, WriteRow

if TYPE_CHECKING:
    from graphtape.tape import Tape

#: Archive files end with this (a gzip-compressed JSONL tape).
SUFFIX = ".tape.jsonl.gz"

#: Seconds a thread stays leased while it is archived: no run starts on it meanwhile,
#: and an archiver that died blocks the thread no longer than this.
LEASE_TTL = 60.0


@dataclasses.dataclass
class ArchivedThread:
    """One thread written to cold storage (or, in a dry run, that would be)."""

    thread_id: str
    #: where the file is (or would be)
    file: str
    run_ids: list[str]
    #: bytes of the thread's tape before compression: what the store holds for it, shared blobs included
    size: int
    #: bytes of the compressed file (None in a dry run)
    compressed: int | None
    #: SHA-256 of the file's content after its header line
    digest: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class ArchiveResult:
    """What :func:`archive` did (or, for a dry run, would do)."""

    dry_run: bool
    threads: list[ArchivedThread]
    #: ``(thread_id, why)`` for the threads that matched but stayed
    skipped: list[tuple[str, str]]
    #: bytes the store stopped using, when it knows (``TapeStore.used_bytes``); None in a dry run
    bytes_freed: int | None
    #: archives older than ``expire_after`` that were deleted (or, in a dry run, would be)
    expired: list[ArchiveEntry] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "threads": [t.to_dict() for t in self.threads],
            "skipped": [{"thread_id": t, "why": why} for t, why in self.skipped],
            "bytes_freed": self.bytes_freed,
            "expired": [e.to_dict() for e in self.expired],
        }


@dataclasses.dataclass
class RestoreResult:
    """The thread :func:`restore` brought back."""

    thread_id: str
    run_ids: list[str]
    checkpoints: int
    file: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def file_name(thread_id: str) -> str:
    """The archive file of a thread: its id, %-quoted so any id is one safe file name."""
    return quote(thread_id, safe="") + SUFFIX


def archive_text(store: TapeStore, thread_id: str, runs: list[RunRecord]) -> tuple[str, str]:
    """The archive of a thread as text, and the digest its header carries."""
    checkpoints = store.list_checkpoints(thread_id=thread_id)
    writes: list[WriteRow] = []
    for cp in checkpoints:
        writes.extend(store.get_writes(cp.thread_id, cp.checkpoint_ns, cp.checkpoint_id))
    body = "".join(line + "\n" for line in body_lines(store, runs, checkpoints, writes))
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    header = {"digest": digest, "format": FORMAT, "kind": ARCHIVE_KIND, "thread_id": thread_id, "version": VERSION}
    return json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n" + body, digest


def archive(
    tape: Tape,
    *,
    older_than: float,
    to: str | os.PathLike[str],
    statuses: Iterable[str] | None = None,
    dry_run: bool = False,
    expire_after: float | None = None,
    keep_interrupted_for: float | None = None,
    now: float | None = None,
) -> ArchiveResult:
    """Archive every thread that went quiet more than ``older_than`` seconds ago; see the module docstring.

    ``expire_after`` (seconds) is the other half of a retention policy: the
    archives this store made longer ago than that are deleted, files and
    index entries (only files the index names: nothing else in ``to`` is
    ever touched). Run from cron, one command keeps a store to its last
    month and its archives to their last year.

    ``keep_interrupted_for`` (seconds): a thread paused at an interrupt
    (waiting for an answer) more recently than that stays, however old
    ``older_than`` would let it be; without it, ``older_than`` is the rule
    for paused threads as for the others.
    """
    if older_than is None or older_than < 0:
        raise GraphtapeError(f"older_than must be 0 seconds or more, not {older_than}")
    if expire_after is not None and expire_after < 0:
        raise GraphtapeError(f"expire_after must be 0 seconds or more, not {expire_after}")
    if keep_interrupted_for is not None and keep_interrupted_for < 0:
        raise GraphtapeError(f"keep_interrupted_for must be 0 seconds or more, not {keep_interrupted_for}")
    store = tape.store
    dest = str(to)
    current = clock.now() if now is None else now
    plan = plan_prune(tape, older_than=older_than, statuses=statuses, truncate_threads=False, now=current)
    skipped: dict[str, str] = {}
    for kept in plan.kept:
        if kept.run.thread_id not in skipped:
            skipped[kept.run.thread_id] = kept.reason
    todo = [t for t in plan.threads]
    # threads with checkpoints and no recorded run (copies, a saver used without recording): by the
    # age of their newest checkpoint; a status filter is about runs, so it selects none of them
    bare: set[str] = set()
    if statuses is None:
        with_runs = {r.thread_id for r in store.list_runs(limit=None)}
        for thread, newest in sorted(_threads_without_runs(store, with_runs).items()):
            if newest is None:
                skipped[thread] = "checkpoints without a recorded run, and no readable time on them"
            elif newest <= current - older_than:
                todo.append(thread)
                bare.add(thread)
    done: list[ArchivedThread] = []
    before = None if dry_run else store.used_bytes()
    owner = f"graphtape-archive:{os.getpid()}:{clock.new_id()[:8]}"
    gone: set[str] = set()
    needs = _dependents(store) if todo else {}
    needs_at = clock.now()
    while todo:
        waiting: list[str] = []
        for thread in todo:
            runs = store.list_runs(thread_id=thread, limit=None, newest_first=False)
            paused = _paused_for(store, thread, runs, current)
            if keep_interrupted_for is not None and paused is not None and paused < keep_interrupted_for:
                skipped[thread] = (
                    f"paused at an interrupt {_age(paused)} ago, less than the {_age(keep_interrupted_for)} "
                    "paused threads are kept for"
                )
                continue
            needed = _needed_elsewhere(needs, thread, runs, gone)
            if needed is not None:
                waiting.append(thread)
                skipped[thread] = needed
                continue
            if dry_run:
                text, digest = archive_text(store, thread, runs)
                done.append(
                    ArchivedThread(
                        thread,
                        _join(dest, file_name(thread)),
                        [r.run_id for r in runs],
                        len(text.encode()),
                        None,
                        digest,
                    )
                )
                gone.update(r.run_id for r in runs)
                skipped.pop(thread, None)
                continue
            if store.acquire_lease(lease_name(thread), owner, LEASE_TTL) is None:
                skipped[thread] = "leased: a process is running it"
                continue
            try:
                # read again under the lease: a run may have started since the plan
                runs = store.list_runs(thread_id=thread, limit=None, newest_first=False)
                if bool(runs) == (thread in bare) or any(r.status == "running" for r in runs):
                    skipped[thread] = "a run started on it meanwhile"
                    continue
                if thread in bare and not store.has_checkpoints(thread):
                    skipped[thread] = "its checkpoints were removed meanwhile"
                    continue
                # a fork or replay of it may have started in another thread since the dependents were read
                needs, needs_at = _refresh(store, needs, needs_at)
                needed = _needed_elsewhere(needs, thread, runs, gone)
                if needed is not None:
                    skipped[thread] = needed
                    continue
                done.append(_archive_one(store, thread, runs, dest))
                gone.update(r.run_id for r in runs)
                skipped.pop(thread, None)
            finally:
                store.release_lease(lease_name(thread), owner)
        if len(waiting) == len(todo):
            break  # no progress: what remains is needed by threads that stay
        todo = waiting
    freed = None
    if not dry_run and done:
        store.collect_garbage()
        after = store.used_bytes()
        freed = max(0, before - after) if before is not None and after is not None else None
    archived = {t.thread_id for t in done}
    expired: list[ArchiveEntry] = []
    if expire_after is not None:
        cutoff = current - expire_after
        expired = [e for e in store.archived_threads() if e.archived_at < cutoff and e.thread_id not in archived]
        if not dry_run:
            for e in expired:
                _delete(e.file)
                store.forget_archive(e.thread_id)
    return ArchiveResult(
        dry_run=dry_run,
        threads=done,
        skipped=sorted((t, why) for t, why in skipped.items() if t not in archived),
        bytes_freed=freed,
        expired=expired,
    )


def _dependents(store: TapeStore) -> dict[str, list[RunRecord]]:
    """For each run that another run replays, forks or recovers: those runs (read once per archive)."""
    needs: dict[str, list[RunRecord]] = {}
    for r in store.list_runs(limit=None):
        recovers = (r.meta or {}).get("recovers")
        for target in {r.replay_of, recovers if isinstance(recovers, str) else None} - {None}:
            needs.setdefault(str(target), []).append(r)
    return needs


#: Checkpoints read per page when looking for threads that have checkpoints but no recorded run.
CHECKPOINT_PAGE = 1000


def _threads_without_runs(store: TapeStore, with_runs: set[str]) -> dict[str, float | None]:
    """Threads whose checkpoints are in the store but none of whose runs is, and when the newest
    root checkpoint of each was written (None when its time is unreadable).

    Reads every root checkpoint once, a page at a time (keeping only thread ids and times), since the
    store has no listing of threads: the price of finding threads that no run names.
    """
    found: dict[str, float | None] = {}
    before = None
    while True:
        page = store.list_checkpoints(checkpoint_ns="", before=before, limit=CHECKPOINT_PAGE)
        for cp in page:  # newest first: a thread's first row is its newest
            if cp.thread_id not in with_runs and cp.thread_id not in found:
                found[cp.thread_id] = _timestamp(cp.created_at)
        if len(page) < CHECKPOINT_PAGE:
            return found
        before = page[-1].checkpoint_id


#: The pending write LangGraph records for an ``interrupt()`` waiting for its answer.
INTERRUPT = "__interrupt__"


def _timestamp(text: str) -> float | None:
    try:
        when = datetime.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def _paused_for(store: TapeStore, thread: str, runs: list[RunRecord], now: float) -> float | None:
    """Seconds the thread has waited at an interrupt for an answer (None when it is not waiting).

    A thread waits when its newest run ended ``interrupted`` by an ``interrupt()`` (not stopped from
    outside: those have ``stopped_by``); a thread without runs, when its newest checkpoint has a
    pending interrupt.
    """
    if runs:
        last = runs[-1]
        if last.status != "interrupted" or (last.meta or {}).get("stopped_by"):
            return None
        return max(0.0, now - (last.ended_at or last.started_at))
    newest = store.list_checkpoints(thread_id=thread, checkpoint_ns="", limit=1)
    if not newest or not any(w.channel == INTERRUPT for w in store.get_writes(thread, "", newest[0].checkpoint_id)):
        return None
    when = _timestamp(newest[0].created_at)
    return None if when is None else max(0.0, now - when)


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


#: Runs read to find the ones started since the dependents were read; more new runs than this: read all again.
RECENT_RUNS = 100

#: Seconds before the last read that still count as new (clocks of writers differ a little).
CLOCK_SLACK = 60.0


def _refresh(
    store: TapeStore, needs: dict[str, list[RunRecord]], since: float
) -> tuple[dict[str, list[RunRecord]], float]:
    """The dependents, with the runs started since ``since`` added: cheap (the newest runs only)."""
    now = clock.now()
    recent = store.list_runs(limit=RECENT_RUNS)  # newest first
    new = [r for r in recent if r.started_at >= since - CLOCK_SLACK]
    if len(new) == len(recent) == RECENT_RUNS:
        return _dependents(store), now
    known = {r.run_id for targets in needs.values() for r in targets}
    for r in new:
        if r.run_id in known:
            continue
        recovers = (r.meta or {}).get("recovers")
        for target in {r.replay_of, recovers if isinstance(recovers, str) else None} - {None}:
            needs.setdefault(str(target), []).append(r)
    return needs, now


def _needed_elsewhere(
    needs: dict[str, list[RunRecord]], thread: str, runs: list[RunRecord], gone: set[str]
) -> str | None:
    """Why a run outside the thread, still in the store, needs one of the thread's runs (None if none does)."""
    for run in runs:
        for r in needs.get(run.run_id, ()):
            if r.thread_id != thread and r.run_id not in gone:
                how = "replays or forks" if r.replay_of == run.run_id else "recovers"
                return f"run {r.run_id[:8]} of thread {r.thread_id} {how} it"
    return None


def _archive_one(store: TapeStore, thread: str, runs: list[RunRecord], dest: str) -> ArchivedThread:
    text, digest = archive_text(store, thread, runs)
    data = text.encode("utf-8")
    # mtime=0: the same thread compresses to the same bytes whenever it is archived
    packed = gzip.compress(data, mtime=0)
    path = _join(dest, file_name(thread))
    _write(dest, file_name(thread), packed)
    # Read back what storage holds, not what we meant to write, and check it before deleting anything.
    back = _read(path)
    if back != packed or gzip.decompress(back) != data:
        raise StoreError(f"{path} does not read back as written; thread {thread} was left in the store")
    header, batch = parse_text(data.decode("utf-8"), path)
    if header.get("digest") != digest or {r.run_id for r in batch.new_runs} != {r.run_id for r in runs}:
        raise StoreError(f"{path} does not hold thread {thread} whole; it was left in the store")
    entry = ArchiveEntry(thread, path, clock.now(), len(packed), digest, len(runs))
    store.remove_thread(thread, [r.run_id for r in runs], archived=entry)
    return ArchivedThread(thread, path, [r.run_id for r in runs], len(data), len(packed), digest)


# -- where archive files live: a directory, or an fsspec URL ------------------------------------


def _is_url(dest: str) -> bool:
    return "://" in dest


def _join(dest: str, name: str) -> str:
    return f"{dest.rstrip('/')}/{name}" if _is_url(dest) else str(Path(dest) / name)


def _fs(url: str) -> Any:
    try:
        import fsspec  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        raise GraphtapeError(
            f"{url} is a URL: archiving to object storage needs fsspec (pip install 'graphtape[archive]' "
            "and the driver, e.g. s3fs); or give a local directory"
        ) from None
    return fsspec


def _write(dest: str, name: str, data: bytes) -> None:
    if _is_url(dest):
        try:
            with _fs(dest).open(_join(dest, name), "wb") as f:
                f.write(data)
        except GraphtapeError:
            raise
        except Exception as exc:  # fsspec drivers raise their own errors
            raise StoreError(f"cannot write {_join(dest, name)}: {exc}") from exc
        return
    directory = Path(dest)
    target = directory / name
    tmp = directory / (name + ".partial")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(target)
    except OSError as exc:
        raise StoreError(f"cannot write {target}: {exc.strerror or exc}") from exc


def _delete(path: str) -> None:
    """Delete an expired archive file (gone already is fine: the goal is that it is gone)."""
    try:
        if _is_url(path):
            fs, inner = _fs(path).core.url_to_fs(path)
            if fs.exists(inner):
                fs.rm(inner)
            return
        Path(path).unlink(missing_ok=True)
    except GraphtapeError:
        raise
    except Exception as exc:
        raise StoreError(f"cannot delete the expired archive {path}: {exc}") from exc


def _read(path: str) -> bytes:
    try:
        if _is_url(path):
            with _fs(path).open(path, "rb") as f:
                return bytes(f.read())
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise TapeFormatError(f"{path}: no such archive file") from None
    except GraphtapeError:
        raise
    except Exception as exc:
        raise TapeFormatError(f"{path} is unreadable: {exc}") from exc


# -- restore -------------------------------------------------------------------------------------


def restore(tape: Tape, thread_or_file: str, *, from_: str | os.PathLike[str] | None = None) -> RestoreResult:
    """Bring an archived thread back into ``tape``'s store (any store), whole, in one transaction.

    ``thread_or_file`` is an archive file, or a thread id whose file is in
    ``from_`` (or, without ``from_``, in the store's index of archives). An
    unreadable or altered file, or a thread whose runs or checkpoints are
    already in the store, is refused and nothing is written.
    """
    path = _locate(tape.store, thread_or_file, from_)
    raw = _read(path)
    try:
        text = gzip.decompress(raw).decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise TapeFormatError(f"{path} is not a readable archive ({exc}); nothing was restored") from None
    header, batch = parse_text(text, path)
    if header.get("kind") != ARCHIVE_KIND:
        raise TapeFormatError(f"{path} is a tape export, not an archive; load it with `graphtape import`")
    threads = {r.thread_id for r in batch.new_runs} | {cp.thread_id for cp in batch.checkpoints}
    if len(threads) != 1:
        raise TapeFormatError(f"{path} holds {len(threads)} threads; an archive holds one")
    thread = threads.pop()
    store = tape.store
    present = [r.run_id for r in batch.new_runs if store.get_run(r.run_id) is not None]
    if present:
        raise StoreError(f"run {present[0]} of thread {thread} is already in {tape.url}; nothing was restored")
    if batch.checkpoints and store.has_checkpoints(thread):
        raise StoreError(f"thread {thread} has checkpoints in {tape.url} already; nothing was restored")
    store.write(batch)
    store.forget_archive(thread)
    return RestoreResult(thread, [r.run_id for r in batch.new_runs], len(batch.checkpoints), path)


def _locate(store: TapeStore, thread_or_file: str, from_: str | os.PathLike[str] | None) -> str:
    if from_ is not None:
        dest = str(from_)
        if not _is_url(dest) and Path(thread_or_file).is_file():
            return thread_or_file
        name = thread_or_file if thread_or_file.endswith(SUFFIX) else file_name(thread_or_file)
        return _join(dest, name)
    if _is_url(thread_or_file) or Path(thread_or_file).is_file():
        return thread_or_file
    indexed = store.archived_threads(thread_or_file)
    if indexed:
        return indexed[0].file
    raise TapeFormatError(
        f"{thread_or_file} is neither an archive file nor a thread this store archived; "
        "say where its archive is (--from DEST)"
    )


def where_archived(store: TapeStore, thread_id: str) -> str | None:
    """A sentence saying where an archived thread went and how to bring it back (None if it was not archived)."""
    entries = store.archived_threads(thread_id)
    if not entries:
        return None
    e = entries[0]
    when = datetime.datetime.fromtimestamp(e.archived_at, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"thread {thread_id} was archived to {e.file} on {when} ({e.runs} run(s)); "
        f"bring it back with `graphtape restore {thread_id}`"
    )
