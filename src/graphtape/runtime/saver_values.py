"""A message list channel value stored as a chain of its messages: each message once, each turn's new part only.

A chat thread's ``messages`` channel (``Annotated[list, add_messages]``)
changes in every super-step that talks. Stored as one serde blob per
checkpoint, turn *n* of a conversation serialised, hashed, compressed and
stored the whole history again: CPU and bytes grew with the square of the
conversation (a 200-turn conversation's tape file was 16 MB for ~170 KB of
text).

Here such a value is a small JSON blob ``{"$chain": <head>, "items": "serde"}``
naming a chain (the store's content-addressed linked list, see
``graphtape.store.base``) whose items are the messages, each serialised on
its own with the saver's serde and stored once by address. Turn *n* adds the
chain nodes and blobs of its new messages only: the list's earlier nodes are
the previous checkpoint's, known to be on the store (this run wrote them, or
one indexed read of the longest prefixes finds them). A message met again is
not serialised again: it is found by class and id in a memo that keeps a
private copy of its fields, and reused only while its fields are still equal.

Why a chain and not a flat list of addresses: the flat list is itself
quadratic (400 addresses at turn 200, ~13 KB per checkpoint), a chain node
is one row per message ever added. Why JSON with ``"$chain"``: garbage
collection, exports, archives and tape statistics already follow that
reference from a blob to a chain and from a chain to its items, so the
items stay alive and travel with the checkpoint without any change there.

Old tapes hold serde-typed blobs (``<type>\\x00<bytes>``): a type name never
starts with ``{``, so the first byte tells the two forms apart on load.
"""

from __future__ import annotations

import threading
import weakref
from itertools import repeat
from typing import Any

from langchain_core.messages import BaseMessage

from graphtape import serde
from graphtape.record.writer import chain_ids, frozen
from graphtape.store.base import TapeStore, WriteBatch

#: How a chained list value blob begins (a serde-typed blob begins with its type name)
CHAINED_PREFIX = b'{"$chain":"'
_CHAINED_SUFFIX = b'","items":"serde"}'

#: Lists shorter than this stay one blob: the chain's rows (one node and one blob per message, and
#: the list's own blob) would outnumber what they save
CHAIN_MIN = 4

#: Unknown chain nodes at the end of a list beyond which the store is asked (once) whether it has
#: the list's longest prefixes, instead of sending every node and message again
PROBE_MIN = 4
#: How many of the longest prefixes that read asks about
PROBE_WIDTH = 4

#: Messages kept in the memo, and bytes of their stored blobs (counted twice: the blob and the
#: private copy of the fields, about as large); past either, the older half is dropped
MEMO_MAX = 50_000
MEMO_BYTES = 64 << 20
#: Chains whose items are kept (a chain's head names its whole list: content addressed), and bytes of
#: the message blobs kept by address, for the next read of the thread's state
HEADS_MAX = 256
BLOBS_BYTES = 32 << 20
#: Decoded messages kept by address (a private copy each, handed out as copies), and the bytes of
#: their blobs (a measure of their size); past either, the older half goes
DECODED_MAX = 20_000
DECODED_BYTES = 64 << 20


def chainable(value: Any) -> bool:
    """Whether ``value`` is stored as a chain: a list (exactly) of CHAIN_MIN or more messages
    (the test runs in C: a conversation's state holds hundreds)."""
    return type(value) is list and len(value) >= CHAIN_MIN and all(map(isinstance, value, repeat(BaseMessage)))


def chained_head(blob: bytes) -> str | None:
    """The chain head a chained list value blob names, or None for any other blob."""
    if blob.startswith(CHAINED_PREFIX) and blob.endswith(_CHAINED_SUFFIX):
        return blob[len(CHAINED_PREFIX) : -len(_CHAINED_SUFFIX)].decode("ascii")
    return None


def chained_blob(head: str) -> bytes:
    return CHAINED_PREFIX + head.encode("ascii") + _CHAINED_SUFFIX


def _private_copy(msg: Any) -> Any:
    """A copy of a message that no change made in place to another copy can reach.

    Equal to decoding the message's blob again (the same class, fields, set
    fields and extra fields), in about a third of the time: pydantic's
    shallow copy, then each field value that is not a scalar copied as
    :func:`graphtape.record.writer.frozen` copies it.
    """
    c = msg.__copy__()
    d = c.__dict__
    for k, v in d.items():
        t = type(v)
        if not (t is str or v is None or t is int or t is float or t is bool):
            d[k] = frozen(v)
    extra = c.__pydantic_extra__
    if extra:
        object.__setattr__(c, "__pydantic_extra__", frozen(extra))
    return c


_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})
_set = object.__setattr__


class _Decoded:
    """A decoded message kept by address, and how to copy it: a private copy (never handed out)
    plus which of its fields a shallow ``.copy()`` copies whole (a dict or list of scalars: the
    ``response_metadata``, ``usage_metadata``, empty ``tool_calls`` of a chat message) and which
    need :func:`graphtape.record.writer.frozen`. Worked out once per message, when it is kept:
    every later read of the thread's state copies each message of its history, and doing that
    with :func:`_private_copy` was the largest cost of a long conversation's read that grew with
    the history (2.5 -> 1.0 us a message, measured on a 350-message history)."""

    __slots__ = ("cls", "deep", "extra", "fields", "fields_set", "private", "shallow", "size")

    def __init__(self, msg: Any, size: int):
        own = _private_copy(msg)
        shallow: list[str] = []
        deep: list[str] = []
        scalars = _SCALAR_TYPES
        for k, v in own.__dict__.items():
            t = type(v)
            if t in scalars:
                continue
            if (t is dict and scalars.issuperset(map(type, v.values()))) or (
                t is list and scalars.issuperset(map(type, v))
            ):
                shallow.append(k)
            else:
                deep.append(k)
        self.cls: Any = type(own)
        self.fields: dict[str, Any] = own.__dict__
        self.shallow = tuple(shallow)
        self.deep = tuple(deep)
        self.fields_set = own.__pydantic_fields_set__
        self.extra = own.__pydantic_extra__
        self.private = getattr(own, "__pydantic_private__", None)
        self.size = size

    def copy(self) -> Any:
        """What :func:`_private_copy` of the kept message gives (the same class, fields, set fields,
        extra and private fields; no container shared with the kept one or another copy)."""
        d = self.fields.copy()
        for k in self.shallow:
            d[k] = d[k].copy()
        for k in self.deep:
            d[k] = frozen(d[k])
        c = self.cls.__new__(self.cls)
        _set(c, "__dict__", d)
        extra = self.extra
        _set(c, "__pydantic_extra__", frozen(extra) if extra else (None if extra is None else {}))
        _set(c, "__pydantic_fields_set__", set(self.fields_set))
        private = self.private
        _set(c, "__pydantic_private__", None if private is None else dict(private))
        return c


_copy_decoded = _Decoded.copy


class _Entry:
    __slots__ = ("blob", "extra", "fields", "h", "obj")

    def __init__(self, obj: Any, fields: dict[str, Any], extra: Any, h: str, blob: bytes):
        #: the message itself for one without a string id (memoised by identity), else None
        self.obj = obj
        self.fields = fields
        self.extra = extra
        self.h = h
        self.blob = blob


class ChainedLists:
    """One saver's chained list values: serialising their messages once, writing each turn's new part."""

    def __init__(self, serde_: Any, typed: Any):
        self.serde = serde_
        #: (bytes type, bytes data) -> the stored typed blob (the saver's own framing)
        self._typed = typed
        self._lock = threading.Lock()
        #: (class, id) of a message with a string id, else ("", id(message)) -> what it was stored as
        self._memo: dict[tuple[Any, Any], _Entry] = {}
        self._memo_bytes = 0
        #: chain head -> its items; item address -> its blob (both immutable: content addressed). The
        #: state a turn ends with is read back at the start of the next one: from here, not the store
        self._chains: dict[str, list[str]] = {}
        self._blobs: dict[str, bytes] = {}
        self._blobs_bytes = 0
        #: item address -> the message its blob decodes to (never handed out: copies of it are), with its
        #: blob's size
        self._decoded: dict[str, _Decoded] = {}
        self._decoded_bytes = 0
        #: run session -> chain nodes and item blobs handed to it in batches (written, or held by a
        #: strict replay until the run's end: the run's set of written addresses does not show them yet)
        self._handed: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

    # -- writing -------------------------------------------------------------------------

    def item(self, msg: Any) -> tuple[str, bytes]:
        """A message's typed blob and its address, serialised once while its fields stay equal."""
        d = msg.__dict__
        mid = d.get("id")
        key: tuple[Any, Any] = (type(msg), mid) if type(mid) is str else ("", id(msg))
        hit = self._memo.get(key)
        extra = getattr(msg, "__pydantic_extra__", None)
        if hit is not None and (hit.obj is None or hit.obj is msg):
            try:
                same = bool(hit.fields == d and hit.extra == extra)
            except Exception:  # a field value whose == does not give a truth value (an array): serialise it
                same = False
            if same:
                return hit.h, hit.blob
        blob = self._typed(*self.serde.dumps_typed(msg))
        h = serde.digest(blob)
        entry = _Entry(
            None if type(mid) is str else msg,
            {k: frozen(v) for k, v in d.items()},
            frozen(extra),
            h,
            blob,
        )
        with self._lock:
            size = 2 * len(blob)
            if len(self._memo) >= MEMO_MAX or self._memo_bytes + size > MEMO_BYTES:
                self._drop_older()
            old = self._memo.get(key)
            self._memo[key] = entry
            self._memo_bytes += size - (2 * len(old.blob) if old is not None else 0)
        return h, blob

    def _drop_older(self) -> None:
        keys = list(self._memo)
        for key in keys[: len(keys) // 2 + 1]:
            entry = self._memo.pop(key, None)
            if entry is not None:
                self._memo_bytes -= 2 * len(entry.blob)
        self._memo_bytes = max(self._memo_bytes, 0)

    def put(self, value: list[Any], batch: WriteBatch, store: TapeStore, session: Any) -> str:
        """Add what the store lacks of ``value`` to ``batch``; returns the address of the value's blob.

        The nodes and messages sent are the list's end that neither this run
        handed over nor the store is found to have: a chain node on the store
        implies its ancestors and their items are there (they are written in
        one transaction, and garbage collection keeps a node's ancestors and
        items), so a conversation's turn sends its new messages only.
        """
        items = [self.item(m) for m in value]
        hashes = [h for h, _ in items]
        item_blobs = [b for _, b in items]
        ids = chain_ids(hashes)
        written: set[str] = session.writer._written if session is not None else set()
        handed = self._handed_to(session)
        n = len(ids)
        start = 0
        for i in range(n - 1, -1, -1):
            if ids[i] in written or ids[i] in handed:
                start = i + 1
                break
        if n - start >= PROBE_MIN:
            start = max(start, self._probe(store, ids, start))
        for i in range(start, n):
            cid = ids[i]
            if cid not in written and cid not in handed:
                batch.chains[cid] = (ids[i - 1] if i else None, hashes[i])
            h = hashes[i]
            if h not in written and h not in handed:
                batch.blobs[h] = item_blobs[i]
        self._keep(ids[-1], hashes, item_blobs)
        blob = chained_blob(ids[-1])
        address = serde.digest(blob)
        batch.blobs[address] = blob
        return address

    @staticmethod
    def _probe(store: TapeStore, ids: list[str], start: int) -> int:
        """How many leading nodes of ``ids`` the store has, asking about the longest prefixes only."""
        wanted = ids[max(start, len(ids) - PROBE_WIDTH) :]
        try:
            found = store.get_chain_nodes(wanted)
        except Exception:  # the probe is an optimisation: writing everything is always correct
            return start
        for i in range(len(ids) - 1, len(ids) - 1 - len(wanted), -1):
            if ids[i] in found:
                return i + 1
        return start

    def _handed_to(self, session: Any) -> set[str]:
        if session is None:
            return set()
        handed = self._handed.get(session)
        if handed is None:
            handed = self._handed.setdefault(session, set())
        return handed

    def handed(self, session: Any, batch: WriteBatch) -> None:
        """Note what ``batch`` (just handed to ``session``'s writer without an error) carried."""
        if session is not None:
            handed = self._handed_to(session)
            handed.update(batch.chains)
            handed.update(batch.blobs)

    def _keep(self, head: str, hashes: list[str], blobs: list[bytes]) -> None:
        """Remember a chain's items and their blobs (``blobs``: of each of ``hashes``; racing threads
        only lose entries)."""
        self._keep_chain(head, hashes)
        self._keep_blobs(hashes, blobs)

    def _keep_chain(self, head: str, hashes: list[str]) -> None:
        with self._lock:
            if head not in self._chains:
                if len(self._chains) >= HEADS_MAX:
                    for old in list(self._chains)[: HEADS_MAX // 2]:
                        del self._chains[old]
                self._chains[head] = hashes

    def _keep_blobs(self, hashes: list[str], blobs: list[bytes]) -> None:
        """Remember item blobs (of each of ``hashes``). Only the items not kept yet are gone
        through, found with a set difference in C: on a conversation's turn, the new messages."""
        kept = self._blobs
        new = set(hashes).difference(kept)
        if not new:
            return
        by_hash = dict(zip(hashes, blobs))
        with self._lock:
            for h in new:
                blob = by_hash[h]
                if h not in kept:
                    if self._blobs_bytes + len(blob) > BLOBS_BYTES:
                        self._blobs_bytes = 0
                        kept.clear()
                    kept[h] = blob
                    self._blobs_bytes += len(blob)

    def _keep_decoded(self, h: str, msg: Any, size: int) -> None:
        with self._lock:
            decoded = self._decoded
            if len(decoded) >= DECODED_MAX or self._decoded_bytes + size > DECODED_BYTES:
                for old in list(decoded)[: len(decoded) // 2 + 1]:
                    self._decoded_bytes -= decoded.pop(old).size
                self._decoded_bytes = max(self._decoded_bytes, 0)
            if h not in decoded:
                decoded[h] = _Decoded(msg, size)
                self._decoded_bytes += size

    # -- reading -------------------------------------------------------------------------

    def load(self, store: TapeStore, heads: dict[str, str], decode: Any) -> dict[str, list[Any]]:
        """``{channel: list}`` for chained values (``{channel: chain head}``), their items decoded by ``decode``.

        The chain and the blobs are taken from what this saver wrote or read
        lately when it has them (a conversation's next turn reads the state
        the last one wrote), else from the store.
        """
        chains: dict[str, list[str]] = {}
        for channel, head in heads.items():
            hashes = self._chains.get(head)
            if hashes is None:
                hashes = store.get_chain(head)
            chains[channel] = hashes
        kept = self._blobs
        decoded = self._decoded
        blobs: dict[str, bytes] = {}
        missing: set[str] = set()
        # the decoded messages this read uses, taken now (keeping a newly decoded one may drop others);
        # a conversation's next turn finds all of them: the look-ups and copies run as whole-list
        # operations (``map``), not a Python loop per message of the history
        found: dict[str, list[_Decoded | None]] = {}
        hits: dict[str, _Decoded] = {}
        for channel, hashes in chains.items():
            entries = found[channel] = list(map(decoded.get, hashes))
            if None not in entries:
                continue
            for h, hit in zip(hashes, entries):
                if hit is not None:
                    hits[h] = hit
                    continue
                blob = kept.get(h)
                if blob is None:
                    missing.add(h)
                else:
                    blobs[h] = blob
        if missing:
            blobs.update(store.get_blobs(missing))
        for channel, head in heads.items():
            self._keep_chain(head, chains[channel])
        fetched = [h for h in missing if h in blobs]
        if fetched:
            self._keep_blobs(fetched, [blobs[h] for h in fetched])
        out: dict[str, list[Any]] = {}
        for channel, hashes in chains.items():
            entries = found[channel]
            if None not in entries:
                out[channel] = list(map(_copy_decoded, entries))  # type: ignore[arg-type]
                continue
            values = []
            for h in hashes:
                hit = hits.get(h)
                if hit is not None:
                    values.append(hit.copy())
                    continue
                blob = blobs.get(h)
                if blob is None:
                    raise KeyError(f"message {h} of channel {channel!r} is missing from {store.url}")
                value = decode(blob)
                if isinstance(value, BaseMessage):
                    self._keep_decoded(h, value, len(blob))
                values.append(value)
            out[channel] = values
        return out
