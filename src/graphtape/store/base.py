"""The tape-store interface: the only thing the rest of graphtape knows about storage.

A store holds four kinds of rows:

* **runs**: one per recorded ``invoke``/``stream`` (or replay), a summary
  that is written when the run starts and completed when it ends;
* **events**: the append-only log of what happened in a run, ordered by
  ``seq``; payloads are referenced by content address, never inlined twice;
* **blobs**: content-addressed payloads (messages, responses, states);
* **chains**: content-addressed linked lists of blob addresses. A chat
  request is a chain of its messages, so a 200-turn conversation whose every
  request repeats the history stores each prefix once: turn *n* adds one
  chain node, not *n* message references.

Backends implement :class:`TapeStore`; ``graphtape.testing.conformance``
checks any backend against this contract.
"""

from __future__ import annotations

import abc
import dataclasses
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from graphtape.errors import StoreError
from graphtape.store.listing import (
    CheckpointListing,
    CheckpointMatch,
    ListedEvent,
    listed_event,
    row_key,
)


class StoreNotFound(StoreError):
    """There is no graphtape store at the URL, and the caller asked not to create one
    (``open_store(url, create=False)``; importable from :mod:`graphtape.store`)."""


#: The key of a recorded run's id in the checkpoint metadata of stores written before the run id moved
#: out of the metadata a user sees (``record/context.py``): still read, never written.
LEGACY_RUN_META_KEY = "graphtape_run_id"

#: Run statuses. ``running`` is also what a crashed run looks like.
RUN_STATUSES = ("running", "finished", "interrupted", "failed", "diverged", "crashed")


@dataclasses.dataclass
class RunRecord:
    """Summary of one run. Counters are filled in when the run ends."""

    run_id: str
    thread_id: str
    graph: str
    status: str = "running"
    started_at: float = 0.0
    ended_at: float | None = None
    parent_run_id: str | None = None
    replay_of: str | None = None
    mode: str = "record"
    llm_calls: int = 0
    tool_calls: int = 0
    effect_calls: int = 0
    served_calls: int = 0
    live_calls: int = 0
    tokens: int = 0
    error: str | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def calls(self) -> int:
        return self.llm_calls + self.tool_calls + self.effect_calls

    @property
    def duration(self) -> float | None:
        if self.ended_at is None:
            return None
        return self.ended_at - self.started_at

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class EventRow:
    """One stored event. ``data`` is the event's JSON body as a dict."""

    run_id: str
    seq: int
    kind: str
    ts: float
    data: dict[str, Any]


@dataclasses.dataclass
class CheckpointRow:
    """One LangGraph checkpoint as graphtape's saver stores it.

    ``metadata`` is plain JSON so listings and filters never deserialise a
    checkpoint; ``body`` is the checkpoint without its channel values
    (serde-typed bytes); ``values`` maps each channel to the content address
    of its value, so a value that did not change is stored once however many
    checkpoints refer to it.
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    step: int | None
    source: str | None
    created_at: str
    metadata: dict[str, Any]
    body: bytes
    values: dict[str, str]
    #: node paths of the tasks that wrote this checkpoint, ``|``-joined ("" for
    #: none), as the recording session knew them; ``None`` when not known
    #: (written outside a recorded run, or by graphtape before schema v5)
    writers: str | None = None
    #: the LLM, tool and effect calls made in the step, as a listing shows them: compact JSON
    #: ``[[kind, name, source, call_id, node_path, error], ...]`` ("" for none, ``None`` when not known)
    calls: str | None = None


@dataclasses.dataclass
class WriteRow:
    """A pending write of a task against a checkpoint; ``value`` is a blob address."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    idx: int
    channel: str
    value: str
    #: special writes (errors, interrupts, resumes) replace; others are kept first-wins
    replace: bool = False


@dataclasses.dataclass
class WriteBatch:
    """Everything one flush writes, applied atomically by :meth:`TapeStore.write`."""

    new_runs: list[RunRecord] = dataclasses.field(default_factory=list)
    run_updates: list[tuple[str, dict[str, Any]]] = dataclasses.field(default_factory=list)
    events: list[EventRow] = dataclasses.field(default_factory=list)
    blobs: dict[str, bytes] = dataclasses.field(default_factory=dict)
    chains: dict[str, tuple[str | None, str]] = dataclasses.field(default_factory=dict)
    checkpoints: list[CheckpointRow] = dataclasses.field(default_factory=list)
    writes: list[WriteRow] = dataclasses.field(default_factory=list)
    #: ``(lease name, owner)`` of leases given up in the same transaction, after the rows (a run's
    #: last write and the release of its thread are then one transaction). Only a store whose
    #: :attr:`TapeStore.releases_in_write` is true is handed a batch with releases.
    releases: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: store the events as plain JSON (``codec.pack_event_plain``), not deflated: a strict replay's rows
    plain_events: bool = False

    def __bool__(self) -> bool:
        return bool(
            self.new_runs
            or self.run_updates
            or self.events
            or self.blobs
            or self.chains
            or self.checkpoints
            or self.writes
            or self.releases
        )

    def extend(self, other: WriteBatch) -> None:
        self.new_runs.extend(other.new_runs)
        self.run_updates.extend(other.run_updates)
        self.events.extend(other.events)
        self.blobs.update(other.blobs)
        self.chains.update(other.chains)
        self.checkpoints.extend(other.checkpoints)
        self.writes.extend(other.writes)
        self.releases.extend(other.releases)


@dataclasses.dataclass(frozen=True)
class ArchiveEntry:
    """Where an archived thread went: the store's index of archives (``graphtape runs --archived``)."""

    thread_id: str
    #: the archive file (a path or an fsspec URL)
    file: str
    archived_at: float
    #: bytes of the compressed file
    size: int
    #: SHA-256 of the file's content after its header line (the header's ``digest``)
    digest: str
    #: how many runs the thread had
    runs: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: Columns of a run that :meth:`TapeStore.write` may update.
RUN_UPDATABLE = frozenset(
    {
        "status",
        "ended_at",
        "llm_calls",
        "tool_calls",
        "effect_calls",
        "served_calls",
        "live_calls",
        "tokens",
        "error",
        "meta",
    }
)


class TapeStore(abc.ABC):
    """Where tapes live. Implementations must be safe for several processes."""

    #: The URL the store was opened with (secrets removed).
    url: str

    #: Whether :meth:`write` gives up the leases of ``batch.releases`` (as :meth:`release_lease`
    #: would, after the fence check and the rows) in the batch's own transaction. A recorded run
    #: then ends with one transaction instead of two (its last rows, then its thread's release);
    #: on a store without it (the default) the recorder releases the lease on its own.
    releases_in_write: bool = False

    #: Whether deleting runs (:meth:`delete_runs`, :meth:`remove_thread`) moves the lease token of
    #: their threads on when nobody holds the lease, as a change of owner does. A recorder that
    #: finds the token it left plus one then knows that no run of the thread was deleted since its
    #: last run there: the message chains that run referred to are still stored (garbage
    #: collection keeps what a stored run refers to), and the next run need not ask the store.
    bumps_leases_on_delete: bool = False

    def open_journal(self, run_id: str, fence: tuple[str, int] | None) -> Any:
        """A call journal for ``run_id`` (see :mod:`graphtape.store.journal`), or None.

        A store that returns one lets a run keep its completed calls safe with
        a file append instead of a transaction per call; the default (None)
        has every completed call written by :meth:`write` at once. Only a
        store whose journals any process that opens it can find (a local
        file's) offers one.
        """
        return None

    def import_journals(self) -> int:
        """Write the rows of the journals of writers that died (see :meth:`open_journal`); returns
        how many events that added. A no-op for a store without journals."""
        return 0

    @abc.abstractmethod
    def write(self, batch: WriteBatch, *, fence: tuple[str, int] | None = None) -> None:
        """Apply a batch in one transaction: all of it or none of it.

        Blobs and chain nodes are inserted only if absent (content addressed);
        events are appended; a duplicate ``(run_id, seq)`` is an error
        (:class:`~graphtape.errors.StoreError`). With ``fence=(lease, token)``
        the write happens only if ``token`` is still the current token of
        that lease, checked inside the same transaction; otherwise
        :class:`~graphtape.errors.LeaseLost` is raised and nothing is written.
        ``batch.releases`` is only given to a store that sets
        :attr:`releases_in_write`.
        """

    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunRecord | None:
        """The run with exactly this id, or ``None``."""

    @abc.abstractmethod
    def find_runs(self, prefix: str, limit: int = 2) -> list[str]:
        """Ids of runs starting with ``prefix`` (for short ids on the CLI)."""

    @abc.abstractmethod
    def list_runs(
        self,
        *,
        thread_id: str | None = None,
        status: str | None = None,
        limit: int | None = 50,
        newest_first: bool = True,
        graph: str | None = None,
        mode: str | None = None,
        since: float | None = None,
        until: float | None = None,
        after: tuple[float, str] | None = None,
        offset: int = 0,
    ) -> list[RunRecord]:
        """Runs with every filter given, ordered by start time (ties by run id), one page of them.

        ``since``/``until`` bound ``started_at`` (both inclusive). ``after`` is a keyset cursor:
        the ``(started_at, run_id)`` of the last run of the previous page; the page holds the runs
        past it in this order. A store answers a page from an index whatever its size (the
        cursor, not ``offset``, is how a client pages through a big store: an offset still
        skips that many rows of the index).
        """

    def count_runs(
        self,
        *,
        thread_id: str | None = None,
        status: str | None = None,
        graph: str | None = None,
        mode: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = None,
    ) -> int:
        """How many runs :meth:`list_runs` lists with these filters, counting at most ``limit``
        (a count then costs the same in any store: the tape API counts up to 10,001)."""
        matched = self.list_runs(
            thread_id=thread_id, status=status, graph=graph, mode=mode, since=since, until=until, limit=limit
        )
        return len(matched)

    @abc.abstractmethod
    def events(self, run_id: str, kinds: Sequence[str] | None = None) -> list[EventRow]:
        """The run's events in ``seq`` order, optionally only some kinds."""

    @abc.abstractmethod
    def get_blobs(self, hashes: Iterable[str]) -> dict[str, bytes]:
        """The blobs that exist among ``hashes``."""

    @abc.abstractmethod
    def get_chain_nodes(self, ids: Iterable[str]) -> dict[str, tuple[str | None, str]]:
        """``{id: (parent, item)}`` for the chain nodes that exist among ``ids``."""

    # -- checkpoints (graphtape's own LangGraph saver is built on these) ------

    @abc.abstractmethod
    def get_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None
    ) -> CheckpointRow | None:
        """The checkpoint with that id, or the newest of the thread/namespace when ``checkpoint_id`` is None."""

    @abc.abstractmethod
    def list_checkpoints(
        self,
        *,
        thread_id: str | None = None,
        checkpoint_ns: str | None = None,
        before: str | None = None,
        limit: int | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> list[CheckpointRow]:
        """Checkpoints newest first (by id, which LangGraph makes time-ordered).

        ``before`` keeps ids strictly smaller; ``metadata_filter`` keeps rows
        whose metadata has every given key with an equal value. Rows come
        with metadata and value addresses; nothing is deserialised.
        """

    @abc.abstractmethod
    def get_writes(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[WriteRow]:
        """Pending writes of a checkpoint, ordered by task id then index."""

    @abc.abstractmethod
    def delete_checkpoints(self, keys: Sequence[tuple[str, str, str]]) -> None:
        """Remove these ``(thread_id, checkpoint_ns, checkpoint_id)`` checkpoints and their writes."""

    @abc.abstractmethod
    def delete_thread(self, thread_id: str) -> None:
        """Remove every checkpoint and write of a thread (the tape's runs stay)."""

    # -- runs: retention ---------------------------------------------------------

    @abc.abstractmethod
    def remove_thread(self, thread_id: str, run_ids: Sequence[str], *, archived: ArchiveEntry | None = None) -> None:
        """Remove a thread whole in one transaction: these runs (rows and events) and every
        checkpoint and write of the thread; blobs stay until :meth:`collect_garbage`.

        Archiving uses it after the thread's archive file was verified, with
        ``archived`` recorded in the index of archives in the same transaction:
        a crash leaves the thread either all in the store or all gone and
        indexed (never half).
        """

    @abc.abstractmethod
    def archived_threads(self, thread_id: str | None = None) -> list[ArchiveEntry]:
        """The index of archived threads (one thread's entry, or all), newest first."""

    @abc.abstractmethod
    def forget_archive(self, thread_id: str) -> None:
        """Drop a thread's entry from the index of archives (it was restored); a no-op when there is none."""

    @abc.abstractmethod
    def delete_runs(self, run_ids: Sequence[str]) -> None:
        """Remove runs (their rows and events) in one transaction; blobs stay until :meth:`collect_garbage`."""

    @abc.abstractmethod
    def collect_garbage(self) -> tuple[int, int]:
        """Delete blobs and chain nodes nothing refers to any more; returns ``(blobs, chain nodes)`` removed.

        Referrers are: event bodies (top-level address fields), other blobs
        (message references), chain nodes (their items and parents),
        checkpoints (channel values and bodies) and pending writes.
        """

    # -- leases: one writer per thread ------------------------------------------------

    @abc.abstractmethod
    def acquire_lease(self, name: str, owner: str, ttl: float) -> int | None:
        """Take (or renew, for the same owner) the lease ``name`` for ``ttl`` seconds.

        Returns the fencing token: a number that grows every time the lease
        changes hands (a renewal keeps it). Returns ``None`` when another
        owner holds an unexpired lease. An expired lease is free to take: a
        dead process never blocks a thread for longer than its ``ttl``.
        """

    @abc.abstractmethod
    def release_lease(self, name: str, owner: str) -> None:
        """Give the lease up if ``owner`` holds it (a no-op otherwise)."""

    @abc.abstractmethod
    def lease_holder(self, name: str) -> tuple[str, float, int] | None:
        """``(owner, expires_at, token)`` of the lease if it is held and unexpired, else ``None``."""

    # -- what a history listing and retention read ------------------------------------
    #
    # Generic defaults built on the methods above, correct for every backend;
    # a backend overrides them to read only the listed columns (SQL stores
    # select them from covering indexes, so a listing never reads a body).

    #: Whether :meth:`find_checkpoints` across every thread is cheap (an index
    #: on checkpoint ids); without it a history looks a prefix up in the
    #: tape's events first, and in the saver only for checkpoints outside runs.
    finds_checkpoints_by_prefix: bool = False

    def has_checkpoints(self, thread_id: str) -> bool:
        """Whether graphtape's saver holds any checkpoint of the thread."""
        return bool(self.list_checkpoints(thread_id=thread_id, limit=1))

    def checkpoint_listing(self, thread_id: str, *, namespaces: bool = False) -> CheckpointListing:
        """The thread's checkpoints as a history lists them, oldest first, and the copies among them.

        Rows are :class:`~graphtape.store.listing.ListedCheckpoint`-shaped
        tuples (root namespace only unless ``namespaces``, which adds ``ns``).
        """
        rows = self.list_checkpoints(thread_id=thread_id, checkpoint_ns=None if namespaces else "")
        copies = sorted(
            (r.checkpoint_id, str((r.metadata or {}).get("graphtape_copied_from") or ""))
            for r in rows
            if r.run_id is None and not r.checkpoint_ns
        )
        listed = [
            (
                r.checkpoint_id,
                r.parent_id,
                r.step,
                r.created_at or None,
                row_key(r.run_id, r.source, r.writers),
                r.calls,
                *((r.checkpoint_ns,) if namespaces else ()),
            )
            for r in rows
        ]
        listed.sort(key=lambda r: r[0])
        return CheckpointListing(listed, {cid: copied for cid, copied in copies if copied})

    def listed_events(self, run_ids: Sequence[str], kinds: Sequence[str]) -> Iterator[ListedEvent]:
        """Events of these kinds of these runs as :data:`~graphtape.store.listing.ListedEvent`
        tuples: each run's in ``seq`` order, one run after another (in any order of runs).
        A ``task_started`` event may come without its data (``None``) when its listed fields are there."""
        for rid in run_ids:
            for ev in self.events(rid, list(kinds)):
                yield listed_event(ev.run_id, ev.seq, ev.kind, ev.ts, ev.data)

    def list_replays(self) -> list[RunRecord]:
        """Runs that replay (or fork) another run, oldest first."""
        return [r for r in self.list_runs(limit=None, newest_first=False) if r.replay_of]

    def find_checkpoints(
        self, prefix: str, *, thread_id: str | None = None, outside_runs: bool = False
    ) -> list[CheckpointMatch]:
        """Checkpoints of graphtape's saver whose id starts with ``prefix``, as
        :data:`~graphtape.store.listing.CheckpointMatch` tuples, in no particular order.

        ``thread_id``: in that thread only; ``outside_runs``: only checkpoints
        written outside any recorded run (their row names no run on this
        store, and their metadata has no ``graphtape_run_id``, where a tape
        written before ``context.RUN_CONF_KEY`` kept the run's id). A backend
        may stop after 50 matches: enough to say a prefix is ambiguous.
        """
        rows = self.list_checkpoints(
            thread_id=thread_id, metadata_filter={LEGACY_RUN_META_KEY: None} if outside_runs else None
        )
        found = [
            (r.thread_id, r.checkpoint_ns, r.checkpoint_id, r.run_id, r.step, r.source)
            for r in rows
            if r.checkpoint_id.startswith(prefix)
        ]
        if outside_runs:
            # (a row's run_id is a recorded run's id, or the "run_id" of an unrecorded run's metadata)
            found = [m for m in found if m[3] is None or self.get_run(m[3]) is None]
        return found

    def used_bytes(self) -> int | None:
        """Bytes the store occupies, when the backend knows it cheaply (free space excluded); else None.

        Retention reports what a prune freed as the difference.
        """
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections. Safe to call twice."""

    # -- helpers built on the primitives ---------------------------------

    def get_blob(self, h: str) -> bytes:
        data = self.get_blobs([h]).get(h)
        if data is None:
            raise StoreError(f"blob {h} is missing from {self.url}: the tape is incomplete")
        return data

    def get_json(self, h: str) -> Any:
        return json.loads(self.get_blob(h))

    def get_chain(self, head: str | None) -> list[str]:
        """Items of the chain ending at ``head``, first to last."""
        items: list[str] = []
        cur = head
        while cur is not None:
            nodes = self.get_chain_nodes([cur])
            if cur not in nodes:
                raise StoreError(f"chain node {cur} is missing from {self.url}: the tape is incomplete")
            parent, item = nodes[cur]
            items.append(item)
            cur = parent
        items.reverse()
        return items
