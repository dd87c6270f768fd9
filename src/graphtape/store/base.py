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
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

#: Top-level event fields that hold a blob address, per event kind, and those
#: that hold a chain head. Only these are followed: other strings in an event
#: (an interrupt's value, a config key) are data, not addresses.
EVENT_BLOB_KEYS: dict[str, frozenset[str]] = {
    "run_started": frozenset({"input", "config", "versions"}),
    "resume": frozenset({"value"}),
    "task_finished": frozenset({"writes"}),
    "llm_call": frozenset({"request", "response"}),
    "tool_call": frozenset({"request", "response"}),
    "effect_call": frozenset({"request", "response"}),
    "run_finished": frozenset({"output"}),
}
EVENT_CHAIN_KEYS: dict[str, frozenset[str]] = {"llm_call": frozenset({"messages"})}


def event_refs(kind: str, data: dict[str, Any], blobs: set[str], chains: set[str]) -> None:
    """Add the blob and chain addresses an event refers to directly."""
    for key in EVENT_BLOB_KEYS.get(kind, ()):
        if isinstance(data.get(key), str):
            blobs.add(data[key])
    for key in EVENT_CHAIN_KEYS.get(kind, ()):
        if isinstance(data.get(key), str):
            chains.add(data[key])


def mark_live(
    blobs: set[str],
    chains: Iterable[str],
    nodes: dict[str, tuple[str | None, str]],
    fetch: Callable[[list[str]], dict[str, bytes]],
    tick: Callable[[], None] = lambda: None,
) -> tuple[set[str], set[str]]:
    """The mark phase of garbage collection, shared by every backend.

    ``blobs`` and ``chains`` are the roots (addresses events, checkpoints and
    writes refer to); ``nodes`` is every chain node ``{id: (parent, item)}``;
    ``fetch`` returns stored blob bytes by address. A chain keeps its
    ancestors and their items; a blob keeps the messages and chains it refers
    to (values and views). Returns ``(live blobs, live chain nodes)``.
    ``tick`` is called between rounds (the Redis collector renews its lock).
    """
    live_blobs = set(blobs)
    live_chains: set[str] = set()

    def keep_chain(head: str, into: set[str]) -> None:
        stack = [head]
        while stack:
            cid = stack.pop()
            if cid in live_chains or cid not in nodes:
                continue
            live_chains.add(cid)
            parent, item = nodes[cid]
            into.add(item)
            if parent:
                stack.append(parent)

    for head in chains:
        keep_chain(head, live_blobs)
    frontier = set(live_blobs)
    while frontier:
        found_b: set[str] = set()
        found_c: set[str] = set()
        chunk = list(frontier)
        for i in range(0, len(chunk), 500):
            for raw in fetch(chunk[i:i + 500]).values():
                if b'"t":"msg"' in raw or b'"$m"' in raw or b'"$chain"' in raw:
                    try:
                        _serde_refs(json.loads(raw), found_b, found_c)
                    except ValueError:  # a typed (non-JSON) checkpoint value that merely contains the marker
                        pass
        for head in found_c - live_chains:
            keep_chain(head, found_b)
        frontier = found_b - live_blobs
        live_blobs |= found_b
        tick()
    return live_blobs, live_chains


def _serde_refs(obj: Any, blobs: set[str], chains: set[str]) -> None:
    from graphtape.serde import blob_refs

    blob_refs(obj, blobs, chains)


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


def listed_call(kind: str, data: dict[str, Any]) -> list[Any]:
    """A call as a history lists it, in the form of ``CheckpointRow.calls``: built from the call
    event's data by the recording session (stored) and by the history (from events) alike."""
    return [kind, data.get("name") or data.get("model"), data.get("source") or "live",
            data.get("call_id"), data.get("node_path"), 1 if data.get("error") else 0]


def call_levels(task: str, step: Any, step_of: Callable[[str], Any], *,
                depth: int | None = None) -> list[tuple[str, int]]:
    """The (checkpoint namespace, step) of each level a call belongs to, outermost first.

    ``task`` is the call's task namespace (``a:<id>|b:<id>``), ``step`` its
    own task's step, ``step_of(task namespace)`` the step of an enclosing
    task (``None`` if unknown). A call in a subgraph belongs to the
    subgraph's step and to the step of every task that ran the subgraph.
    ``depth``: at most that many levels (1: the root only).
    """
    if not task or task == "(root)":
        return [("", step)] if isinstance(step, int) else []
    segments = task.split("|")
    levels = []
    for d in range(len(segments) if depth is None else min(depth, len(segments))):
        at = step_of("|".join(segments[:d + 1]))
        if at is None and d == len(segments) - 1:
            at = step
        if isinstance(at, int):
            levels.append(("|".join(segments[:d]), at))
    return levels


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

    def __bool__(self) -> bool:
        return bool(self.new_runs or self.run_updates or self.events or self.blobs or self.chains
                    or self.checkpoints or self.writes)

    def extend(self, other: "WriteBatch") -> None:
        self.new_runs.extend(other.new_runs)
        self.run_updates.extend(other.run_updates)
        self.events.extend(other.events)
        self.blobs.update(other.blobs)
        self.chains.update(other.chains)
        self.checkpoints.extend(other.checkpoints)
        self.writes.extend(other.writes)


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


#: Preset dictionary for compressing event bodies (format 1). Never edit it:
#: stored events depend on it byte for byte. A new dictionary is a new format byte.
_EVENT_ZDICT_1 = (
    b'"branch":"__pregel_push,"call_id":"","checkpoint_id":"","cost":0.0,"fingerprint":"","latency":0.0,'
    b'"messages":"","model":"","node_path":"","ordinal":0,"request":"","response":"","source":"tape",'
    b'"served_from":"","recorded_latency":0.0,"tokens":,"parent_id":"1f1","ns":"","source":"loop","step":,'
    b'"duration":0.00,"writes":"","status":"finished","output":"","input":"","config":"","versions":"",'
    b'"task":"tools:agent:","name":"source":"live",'
)


def pack_event(data: dict[str, Any]) -> bytes:
    """An event body as stored: compact JSON, deflated with a preset dictionary when that pays.

    Events are small and full of the same keys; per-event deflate with a
    shared dictionary halves them (about 8 us each) while every event stays
    its own row, readable on its own.
    """
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode("utf-8")
    if len(raw) < 96:
        return raw
    c = zlib.compressobj(6, zlib.DEFLATED, -10, 2, zdict=_EVENT_ZDICT_1)
    packed = b"\x01" + c.compress(raw) + c.flush()
    return packed if len(packed) < len(raw) else raw


def unpack_event(blob: bytes | str) -> dict[str, Any]:
    if isinstance(blob, str):
        return json.loads(blob)
    if blob[:1] == b"\x01":
        d = zlib.decompressobj(-10, zdict=_EVENT_ZDICT_1)
        return json.loads(d.decompress(blob[1:]) + d.flush())
    return json.loads(blob)


def dump_meta(meta: dict[str, Any]) -> str:
    return json.dumps(meta, sort_keys=True, separators=(",", ":"), default=str)


class TapeStore(abc.ABC):
    """Where tapes live. Implementations must be safe for several processes."""

    #: The URL the store was opened with (secrets removed).
    url: str

    @abc.abstractmethod
    def write(self, batch: WriteBatch, *, fence: tuple[str, int] | None = None) -> None:
        """Apply a batch in one transaction: all of it or none of it.

        Blobs and chain nodes are inserted only if absent (content addressed);
        events are appended; a duplicate ``(run_id, seq)`` is an error
        (:class:`~graphtape.errors.StoreError`). With ``fence=(lease, token)``
        the write happens only if ``token`` is still the current token of
        that lease, checked inside the same transaction; otherwise
        :class:`~graphtape.errors.LeaseLost` is raised and nothing is written.
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
    ) -> list[RunRecord]:
        """Runs, filtered, ordered by start time."""

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
    def get_checkpoint(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None) -> CheckpointRow | None:
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

    def checkpointer(self) -> BaseCheckpointSaver:
        """graphtape's LangGraph saver on this store (used when the user has none)."""
        saver = getattr(self, "_graphtape_saver", None)
        if saver is None:
            from graphtape.runtime.saver import GraphtapeSaver

            saver = GraphtapeSaver(self)
            self._graphtape_saver = saver
        return saver

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections. Safe to call twice."""

    # -- helpers built on the primitives ---------------------------------

    def get_blob(self, h: str) -> bytes:
        data = self.get_blobs([h]).get(h)
        if data is None:
            from graphtape.errors import StoreError

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
                from graphtape.errors import StoreError

                raise StoreError(f"chain node {cur} is missing from {self.url}: the tape is incomplete")
            parent, item = nodes[cur]
            items.append(item)
            cur = parent
        items.reverse()
        return items
