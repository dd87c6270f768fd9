"""graphtape's own LangGraph checkpoint saver, on any :class:`TapeStore`.

Why not LangGraph's savers (measured in ``docs/benchmarks.md``, ``benchmarks/savers.py``):

* they write a super-step as two transactions and know nothing of the tape,
  so a crash can leave a checkpoint without the calls that produced it (or
  the reverse). Here ``put`` and ``put_writes`` carry the recording run's
  buffered tape events **in the same transaction**;
* they store the whole state in every checkpoint, so a 200 KB value that
  never changes costs 200 KB per step and append-only lists grow
  quadratically. Here a channel value is stored once per content address:
  channels whose version did not change since the parent checkpoint reuse
  the parent's address without being serialised again, and a list of
  messages (a chat's ``messages`` channel) is a chain of its messages, each
  stored once (``graphtape.runtime.saver_values``);
* their history listings deserialise every checkpoint. Here metadata is
  plain JSON beside the body, so a listing reads only what it shows.

Async methods run the sync ones in a worker thread: every backend has a
thread-safe sync client, and one code path is one set of bugs.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import warnings
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.types import INTERRUPT

from graphtape import serde, typepolicy
from graphtape.errors import GraphtapeWarning
from graphtape.jsontext import one_shot
from graphtape.record.checkpoints import note_interrupts
from graphtape.record.context import LEGACY_RUN_META_KEY, RUN_CONF_KEY, SESSIONS, session_of
from graphtape.runtime.saver_values import ChainedLists, chainable, chained_head
from graphtape.store.base import CheckpointRow, TapeStore, WriteBatch, WriteRow


def _typed_blob(type_: str, data: bytes) -> bytes:
    return type_.encode("utf-8") + b"\x00" + data


def _untyped(blob: bytes) -> tuple[str, bytes]:
    type_, _, data = blob.partition(b"\x00")
    return type_.decode("utf-8"), data


#: JSON scalar types as checkpoint metadata holds them (exact types: a subclass, an enum, takes the slow path)
_SCALARS = frozenset({str, int, float, bool, type(None)})

#: exact types whose values :meth:`GraphtapeSaver._blob` memoises (immutable, hashable, and equal values
#: serialise alike; not floats: ``0.0 == -0.0``; a subclass, an enum, takes the full path every time)
_SMALL_SCALARS = frozenset({type(None), bool, int, str})

#: ``json.dumps(value, separators=(",", ":"), default=str)`` with its C encoder built once (a step's calls, listed
#: on its checkpoint: 3.7 -> 1.4 us for a step's LLM and tool call)
_calls_json = one_shot(json.JSONEncoder(separators=(",", ":"), default=str))

#: the key under which LangGraph puts a run's durability mode in the config it hands ``put``
#: (``langgraph._internal._constants.CONFIG_KEY_DURABILITY``; ``"sync"``, ``"async"`` or ``"exit"``), when
#: the run was given one: without it the run is ``"async"``, LangGraph's default
DURABILITY_KEY = "__pregel_durability"

#: threads (with namespace) whose last checkpoint a saver keeps for the next one's reuse of unchanged values;
#: past it the least recently written half is dropped (a dropped thread's next checkpoint serialises its
#: values again). A server's saver lives as long as its store: kept for every thread ever written, the
#: entries (every channel's version, ~5 KB for a 50-node graph) grew without end
LAST_MAX = 4096

#: an empty mapping to read from (never written)
_NOTHING: dict[str, Any] = {}

#: key -> whether it looks like a secret's key (the same few keys come with every checkpoint)
_SECRET_KEYS: dict[str, bool] = {}


def _secret_key(key: str) -> bool:
    hit = _SECRET_KEYS.get(key)
    if hit is None:
        if len(_SECRET_KEYS) >= 4096:
            _SECRET_KEYS.clear()
        hit = _SECRET_KEYS[key] = bool(serde.SECRET_KEY_PATTERN.search(key))
    return hit


def _plain(value: Any) -> bool:
    """Whether ``value`` is JSON as it is (checked without serialising it)."""
    if type(value) in _SCALARS:
        return True
    if type(value) is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if type(value) is list:
        return all(_plain(v) for v in value)
    return False


def _stored_metadata(metadata: Mapping[str, Any], session: Any, *, own: bool = False) -> dict[str, Any]:
    """Checkpoint metadata as stored: secret-looking keys redacted, the rest JSON.

    LangGraph's ``get_checkpoint_metadata`` copies every string and number of
    the run's ``configurable`` and ``metadata`` into each checkpoint's
    metadata, so an ``openai_api_key`` passed in the config would be stored
    with every checkpoint. Only top-level keys are LangGraph's copies (its own
    ``parents`` maps namespaces, which may contain any node name); the keys
    stay so a listing shows that a value was given. Keys the user named with
    ``connect(redact=[...])`` are known from the recording run's tape
    (``session``, None outside a recorded run).

    One pass over the keys, run for every checkpoint: the key test is
    memoised and plain JSON values are recognised without ``json.dumps``.
    ``own``: ``metadata`` is a dict the caller made for this call (``put``'s,
    from ``get_checkpoint_metadata``), redacted in place instead of copied.
    """
    extra = session.tape.redact_keys if session is not None else ()
    out = metadata if own and type(metadata) is dict else dict(metadata)
    plain = True
    secret = _SECRET_KEYS
    for key, value in metadata.items():
        if value not in (None, ""):
            hit = secret.get(key) if type(key) is str else None
            if hit is None:
                hit = _secret_key(str(key))
            if hit or key in extra:
                out[key] = serde.REDACTED
                continue
        if plain and type(value) not in _SCALARS and not _plain(value):
            plain = False
    if plain:
        return out
    try:
        json.dumps(out)
        return out
    except (TypeError, ValueError):
        return serde.to_jsonable(out)


#: (store id, opaque) -> the saver :func:`saver_for` made on it, while someone uses that saver
_SAVERS: weakref.WeakValueDictionary[tuple[int, bool], GraphtapeSaver] = weakref.WeakValueDictionary()

#: the key of the placeholder a checkpoint holds for a value that could not be stored (``opaque`` savers)
UNSTORED_KEY = "graphtape_unstored"


def saver_for(store: TapeStore, *, opaque: bool = False) -> GraphtapeSaver:
    """graphtape's LangGraph saver on ``store`` (``Tape.saver``: durable threads for a recorded graph).

    One saver per store while it is in use, so its cache of the last
    checkpoint of each thread (which lets an unchanged channel value be
    reused without serialising it again) is shared by everyone writing
    through it. The store does not build the saver itself: the saver belongs
    to the runtime (it links checkpoints to the recording run), and the store
    interface knows nothing above it. ``opaque``: the saver of the runs of a
    graph without a checkpointer (see :class:`GraphtapeSaver`).
    """
    key = (id(store), opaque)
    saver = _SAVERS.get(key)
    if saver is None or saver.store is not store:  # none yet, or an id reused after its store was freed
        saver = GraphtapeSaver(store, opaque=opaque)
        _SAVERS[key] = saver
    return saver


def unstored(value: Any) -> dict[str, str]:
    """The placeholder an ``opaque`` saver stores for a value it cannot serialise: its class, no data."""
    cls = value.cls if isinstance(value, serde.Opaque) else typepolicy.qualname(type(value))
    return {UNSTORED_KEY: cls}


class GraphtapeSaver(BaseCheckpointSaver):
    """A ``BaseCheckpointSaver`` storing checkpoints beside the tape, in the same transactions.

    ``opaque``: the saver graphtape runs a graph compiled without a checkpointer on. LangGraph
    never serialises such a graph's state, so a value no serializer knows (a ``RunnableLambda``,
    a client object) must not fail the run when recorded: its checkpoints hold a placeholder
    (:func:`unstored`) in its place, with one :class:`~graphtape.GraphtapeWarning` per run and
    class, and the run goes on with the value itself (checkpoints are only read back by a
    recovery or a replay of that run, never by the next call: each call is a thread of its own).
    """

    def __init__(self, store: TapeStore, *, serde_: Any = None, opaque: bool = False):
        super().__init__(serde=serde_)
        self.store = store
        self.opaque = opaque
        #: (run id, class) whose placeholder was warned about (bounded: cleared past 4096)
        self._warned: set[tuple[str | None, str]] = set()
        self._lock = threading.Lock()
        # (thread, ns) -> (checkpoint id, channel versions, channel -> address, source)
        self._last: dict[tuple[str, str], tuple[str, dict[str, Any], dict[str, str], str | None]] = {}
        #: whether a checkpoint's list of messages is stored as a chain of its messages (see
        #: saver_values); off, every value is one serde blob, as tapes before it hold them
        self.chain_lists = True
        self._lists = ChainedLists(self.serde, _typed_blob)
        #: (type, value) -> (address, stored bytes) of small scalar values: a routing write's ``None``
        #: in every super-step, a counter's value written by its task and then again as the next
        #: checkpoint's channel value (serialised and hashed once, not two or three times a step)
        self._scalars: dict[tuple[type, Any], tuple[str, bytes]] = {}

    def with_allowlist(self, extra_allowlist: Any) -> BaseCheckpointSaver:
        """A clone reading with LangGraph's msgpack allowlist (``LANGGRAPH_STRICT_MSGPACK``).

        The base class's clone keeps the message lists' reader, made with the old serializer: it
        gets one of its own. The caches of the last checkpoints and of small values are shared
        with this saver, as they are by everyone writing through it (what is written does not
        depend on the allowlist, only what is read back).
        """
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self and isinstance(clone, GraphtapeSaver):
            clone._lists = ChainedLists(clone.serde, _typed_blob)
        return clone

    # -- helpers --------------------------------------------------------------------

    @staticmethod
    def _session(config: RunnableConfig) -> Any:
        """The recording session of the run that wrote through ``config``, or None (not recorded)."""
        return session_of(config)

    def _write(
        self,
        session: Any,
        batch: WriteBatch,
        checkpoint_event: tuple | None = None,
        *,
        defer: bool = False,
        deferrable: bool = False,
    ) -> None:
        if session is None:
            self.store.write(batch)
            return
        # A value the run has already written (a routing write's ``None`` in every super-step, a
        # task's write met again as the next checkpoint's channel value) is not sent again: the
        # tape writer's own rule for its blobs, per run and not per process (garbage collection may
        # delete a blob between two runs). Its set holds what its committed writes carried, these
        # batches included once written (read without its lock: a membership test of a set that
        # only grows).
        written = session.writer._written
        for h in [h for h in batch.blobs if h in written]:
            del batch.blobs[h]
        if defer:
            # A task's pending writes ride with the next write of the run (the
            # next checkpoint, a completed call, or the run's end): one
            # transaction per super-step instead of two. A crash before then
            # loses only writes LangGraph can recompute: the task runs again on
            # recovery and every call it had completed is served from the tape.
            session.defer(batch)
            return
        if checkpoint_event is not None:
            session.on_checkpoint(*checkpoint_event)
        session.flush(extra=batch, deferrable=deferrable)

    @staticmethod
    def _listed(
        session: Any, checkpoint_ns: str, step: int | None, source: str | None, parent_source: str | None
    ) -> tuple[str | None, str | None]:
        """What a history lists of this checkpoint beyond its metadata: its writers and its step's calls.

        Writers: the node paths whose tasks wrote it, ``|``-joined (``|`` is
        not allowed in node names). Calls: the LLM, tool and effect calls made
        in the step, compact JSON (see ``CheckpointRow.calls``). Stored on the
        row so that a history listing reads no task or call events: the
        recording session knows which tasks ran in the step (and which were
        interrupted or failed) and which calls they made. ``(None, None)``
        outside a recorded run: not known. What a previous, interrupted run
        did in the same step is not included; the history adds it from that
        run's events.
        """
        if session is None or step is None:
            return None, None
        tasks = session.step_writers.pop((checkpoint_ns, step), None)
        calls = session.step_calls.pop((checkpoint_ns, step), None)
        listed_calls = _calls_json(calls) if calls else ""
        if tasks:
            return "|".join(dict.fromkeys(tasks.values())), listed_calls
        if source == "loop" and parent_source == "input":
            # the input's own task: LangGraph opens no callback run for it
            return "__start__", listed_calls
        return "", listed_calls

    def _blob(self, value: Any, batch: WriteBatch, run_id: str | None = None) -> str:
        cls = type(value)
        small = cls in _SMALL_SCALARS and (cls is not str or len(value) <= 64)
        if small:
            known = self._scalars.get((cls, value))
            if known is not None:
                batch.blobs[known[0]] = known[1]
                return known[0]
        try:
            type_, data = self.serde.dumps_typed(value)
        except (TypeError, ValueError):
            if not self.opaque:
                raise
            type_, data = self.serde.dumps_typed(self._storable(value, run_id))
        blob = _typed_blob(type_, data)
        h = serde.digest(blob)
        batch.blobs[h] = blob
        if small:
            if len(self._scalars) >= 4096:
                self._scalars.clear()
            self._scalars[(cls, value)] = (h, blob)
        return h

    def _value(self, value: Any, batch: WriteBatch, session: Any, run_id: str | None = None) -> str:
        """A checkpoint's channel value put in ``batch``: a list of messages as a chain, else one blob."""
        if self.chain_lists and chainable(value):
            return self._lists.put(value, batch, self.store, session)
        return self._blob(value, batch, run_id)

    def _storable(self, value: Any, run_id: str | None) -> Any:
        """``value`` with each part the serializer refuses replaced by its placeholder (``opaque`` savers).

        Only the refused parts: a dict or list holding one such value keeps the
        rest of its items. Walked only once a value has failed to serialise.
        """
        try:
            self.serde.dumps_typed(value)
            return value
        except (TypeError, ValueError):
            pass
        if type(value) is dict:
            return {k: self._storable(v, run_id) for k, v in value.items()}
        if type(value) in (list, tuple):
            return type(value)(self._storable(v, run_id) for v in value)
        placeholder = unstored(value)
        key = (run_id, placeholder[UNSTORED_KEY])
        # (an Opaque is the placeholder a replay was given for a value its recording warned about)
        if key not in self._warned and not isinstance(value, serde.Opaque):
            if len(self._warned) >= 4096:
                self._warned.clear()
            self._warned.add(key)
            warnings.warn(
                GraphtapeWarning(
                    f"run {run_id or '?'}: a value of type {key[1]} cannot be stored in a checkpoint; "
                    "the graph has no checkpointer, so the run goes on with it and its checkpoints hold a "
                    f"placeholder ({{{UNSTORED_KEY!r}: {key[1]!r}}}). A replay or recovery of the run sees the "
                    "placeholder: keep serialisable data in the state to replay the value itself"
                ),
                stacklevel=2,
            )
        return placeholder

    def _load(self, addresses: dict[str, str]) -> dict[str, Any]:
        blobs = self.store.get_blobs(addresses.values())
        out: dict[str, Any] = {}
        heads: dict[str, str] = {}
        for channel, h in addresses.items():
            blob = blobs.get(h)
            if blob is None:
                raise KeyError(f"checkpoint value {h} of channel {channel!r} is missing from {self.store.url}")
            head = chained_head(blob)
            if head is not None:
                heads[channel] = head
                out[channel] = None  # (in its place: the channels keep their order)
            else:
                out[channel] = self.serde.loads_typed(_untyped(blob))
        if heads:
            out.update(self._lists.load(self.store, heads, lambda b: self.serde.loads_typed(_untyped(b))))
        return out

    def _tuple(
        self, row: CheckpointRow, *, config: RunnableConfig | None = None, with_writes: bool = True
    ) -> CheckpointTuple:
        checkpoint = self.serde.loads_typed(_untyped(row.body))
        checkpoint["channel_values"] = self._load(row.values)
        pending: list[tuple[str, str, Any]] = []
        if with_writes:
            rows = self.store.get_writes(row.thread_id, row.checkpoint_ns, row.checkpoint_id)
            blobs = self.store.get_blobs(w.value for w in rows)
            pending = [(w.task_id, w.channel, self.serde.loads_typed(_untyped(blobs[w.value]))) for w in rows]
        own: RunnableConfig = {
            "configurable": {
                "thread_id": row.thread_id,
                "checkpoint_ns": row.checkpoint_ns,
                "checkpoint_id": row.checkpoint_id,
            }
        }
        parent: RunnableConfig | None = (
            {
                "configurable": {
                    "thread_id": row.thread_id,
                    "checkpoint_ns": row.checkpoint_ns,
                    "checkpoint_id": row.parent_id,
                }
            }
            if row.parent_id
            else None
        )
        return CheckpointTuple(
            config=config or own,
            checkpoint=checkpoint,
            # the metadata LangGraph put, as stored
            metadata=cast("CheckpointMetadata", row.metadata),
            parent_config=parent,
            pending_writes=pending,
        )

    # -- the BaseCheckpointSaver API ---------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        checkpoint_id = get_checkpoint_id(config)
        row = self.store.get_checkpoint(conf["thread_id"], conf.get("checkpoint_ns", ""), checkpoint_id)
        if row is None:
            return None
        return self._tuple(row, config=config if checkpoint_id else None)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        conf = (config or {}).get("configurable") or {}
        checkpoint_id = get_checkpoint_id(config) if config else None
        rows = self.store.list_checkpoints(
            thread_id=conf.get("thread_id"),
            checkpoint_ns=conf.get("checkpoint_ns"),
            before=get_checkpoint_id(before) if before else None,
            limit=None if checkpoint_id else limit,
            metadata_filter=filter,
        )
        if checkpoint_id:
            rows = [r for r in rows if r.checkpoint_id == checkpoint_id][: limit if limit is not None else None]
        for row in rows:
            yield self._tuple(row)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        checkpoint_ns = conf.get("checkpoint_ns", "")
        parent_id = conf.get("checkpoint_id")
        body: dict[str, Any] = dict(checkpoint)  # the checkpoint without its values, its keys in their order
        values: dict[str, Any] = body.pop("channel_values", None) or {}
        versions = dict(checkpoint.get("channel_versions") or {})
        batch = WriteBatch()
        last = self._last.get((thread_id, checkpoint_ns))  # (a dict read: atomic, no lock needed)
        if last is not None and last[0] == parent_id:
            _, last_versions, last_values, parent_source = last
        else:
            last_versions = last_values = _NOTHING
            parent_source = None
        rid = conf.get(RUN_CONF_KEY)
        session = SESSIONS.get(rid) if rid else None
        addresses: dict[str, str] = {}
        for channel, value in values.items():
            # a channel whose version did not change since the parent checkpoint: the parent's address
            h = last_values.get(channel)
            if (
                h is None
                or channel in new_versions
                or channel not in versions
                or last_versions.get(channel) != versions[channel]
            ):
                h = self._value(value, batch, session, rid)
            addresses[channel] = h
        full_metadata = _stored_metadata(get_checkpoint_metadata(config, metadata), session, own=True)
        step = full_metadata.get("step")
        if not isinstance(step, int):
            step = None
        source = full_metadata.get("source")
        if not isinstance(source, str):
            source = None
        writers, calls = self._listed(session, checkpoint_ns, step, source, parent_source=parent_source)
        type_, data = self.serde.dumps_typed(body)
        checkpoint_id = checkpoint["id"]
        # positional: a dataclass's __init__ takes keywords at 2.5x the cost (CheckpointRow's field order)
        row = CheckpointRow(
            thread_id,
            checkpoint_ns,
            checkpoint_id,
            parent_id,
            str(full_metadata.get("run_id") or rid or full_metadata.get(LEGACY_RUN_META_KEY) or "") or None,
            step,
            source,
            str(checkpoint.get("ts", "")),
            full_metadata,
            _typed_blob(type_, data),
            addresses,
            writers,
            calls,
        )
        batch.checkpoints.append(row)
        # under durability="async" the run may store it with its next write (Session.flush)
        self._write(
            session, batch, (config, checkpoint, full_metadata), deferrable=conf.get(DURABILITY_KEY, "async") == "async"
        )
        if batch.chains:
            self._lists.handed(session, batch)
        key = (thread_id, checkpoint_ns)
        with self._lock:
            kept = self._last
            if kept.pop(key, None) is None and len(kept) >= LAST_MAX:
                for old in list(kept)[: LAST_MAX // 2]:
                    del kept[old]
            kept[key] = (checkpoint_id, versions, addresses, source)  # (re)inserted last: the most recent
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}
        }

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        checkpoint_ns = conf.get("checkpoint_ns", "")
        checkpoint_id = conf["checkpoint_id"]
        replace = all(map(WRITES_IDX_MAP.__contains__, [channel for channel, _ in writes]))
        batch = WriteBatch()
        rows = batch.writes
        blob = self._blob
        special = WRITES_IDX_MAP.get
        rid = conf.get(RUN_CONF_KEY)
        for idx, (channel, value) in enumerate(writes):
            # positional, as CheckpointRow's in put (WriteRow's field order)
            rows.append(
                WriteRow(
                    thread_id,
                    checkpoint_ns,
                    checkpoint_id,
                    task_id,
                    task_path,
                    special(channel, idx),
                    channel,
                    blob(value, batch, rid),
                    replace,
                )
            )
        if replace and any(channel == INTERRUPT for channel, _ in writes):
            note_interrupts(config, writes)
        self._write(SESSIONS.get(rid) if rid else None, batch, defer=True)

    def delete_thread(self, thread_id: str) -> None:
        self.store.delete_thread(thread_id)
        with self._lock:
            for key in [k for k in self._last if k[0] == thread_id]:
                del self._last[key]

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        rows = self.store.list_checkpoints(thread_id=source_thread_id)
        batch = WriteBatch()
        for row in rows:
            for w in self.store.get_writes(row.thread_id, row.checkpoint_ns, row.checkpoint_id):
                w.thread_id = target_thread_id
                batch.writes.append(w)
            row.thread_id = target_thread_id
            if "thread_id" in row.metadata:
                row.metadata = {**row.metadata, "thread_id": target_thread_id}
            batch.checkpoints.append(row)
        self.store.write(batch)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        doomed = [r for r in self.store.list_checkpoints() if r.run_id in wanted]
        self.store.delete_checkpoints([(r.thread_id, r.checkpoint_ns, r.checkpoint_id) for r in doomed])

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            rows = self.store.list_checkpoints(thread_id=thread_id)
            keep: set[tuple[str, str]] = set()
            doomed = []
            for r in rows:  # newest first
                if strategy == "keep_latest" and r.checkpoint_ns not in {ns for ns, _ in keep}:
                    keep.add((r.checkpoint_ns, r.checkpoint_id))
                    continue
                doomed.append((r.thread_id, r.checkpoint_ns, r.checkpoint_id))
            self.store.delete_checkpoints(doomed)

    def get_next_version(self, current: str | int | None, channel: None) -> str | int:
        """The next version of a channel: an integer in a thread begun by this saver, the string form
        LangGraph's savers use (``<32 digits>.<random>``) in a thread that already has it.

        Why integers: a checkpoint body holds every channel's version and, for every node, the
        versions it has seen; with 50-character strings a 50-node graph's body was 3.1 KB
        (an overflow page per super-step in SQLite, ~4 KB of WAL in PostgreSQL) where integers
        make it a few hundred bytes. LangGraph compares versions and takes the next one from the
        largest of the checkpoint (``apply_writes``), so the versions of one thread keep one type:
        a thread written before (strings) goes on with strings, never a mix (``max`` of a str and an
        int fails). The random suffix of the string form keeps versions of forked branches distinct
        for savers that store values by (channel, version); this saver stores them by content
        address and reuses one only from the checkpoint's own parent, so equal versions on two
        branches are harmless here.
        """
        if current is None:
            return 1
        if isinstance(current, int):
            return current + 1
        current_v = int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # -- async: the sync methods on a worker thread -----------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        return await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        return await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        return await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        return await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        return await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
