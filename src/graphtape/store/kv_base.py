"""The LangGraph store kept in graphtape's store database: what every backend shares.

A graph's node that takes ``store: BaseStore`` (or calls ``get_store()``)
and the Studio's ``/store/...`` endpoints read and write the same items, in
the database that already holds the tapes: no second service to run, and one
URL names both. :func:`graphtape.store.kv.kv_store_for` takes a tape store URL
(the forms :func:`graphtape.store.open_store` accepts) and returns the backend
for its technology, with tables or keys of its own (``gt_kv`` in SQLite and in the
PostgreSQL schema, ``<prefix>kv:...`` in Redis), created on first use. The
tape's tables, keys and migrations are never touched.

How the work is split: this module holds everything the backends share, so
the three behave the same by construction; ``kv_sqlite``, ``kv_postgres`` and
``kv_redis`` only move rows in and out (:class:`KVStore`'s abstract methods);
:mod:`graphtape.store.kv` opens the right one for a URL and attaches it to graphs.

Semantics (LangGraph documents the operations, not all of their edges):

* **Namespaces** are tuples of labels; a label is a non-empty string with no
  ``.`` and no NUL (LangGraph's own rule), so the labels joined by ``.`` name a
  namespace without ambiguity, and "under ``("a", "b")``" is the text range
  ``"a.b." <= ns < "a.b/"``, which every backend can scan in order. Items live
  in non-empty namespaces whose first label is not ``langgraph`` (reserved by
  LangGraph); keys are strings without NUL (PostgreSQL text cannot hold one).
* **A batch** reads the store as it was before the batch's writes, and the
  last put of a ``(namespace, key)`` in it wins (what LangGraph's in-memory
  and SQL stores do). A put keeps the item's ``created_at`` and sets
  ``updated_at``; a ``None`` value deletes.
* **Values** are JSON objects, stored as JSON text: numbers come back exactly
  as they were put (``1`` stays an int, ``1.0`` a float). NaN and infinities
  are refused: they are not JSON, and an HTTP client could not read them back.
* **Search** returns the items under the prefix that match the filter, most
  recently updated first (then by namespace and key), ``offset``/``limit``
  applied after filtering. ``query`` is ignored and every ``score`` is None:
  there is no vector search (no embeddings are configured, which is what
  LangGraph's stores do without an ``index``); ``index`` on a put is ignored
  for the same reason.
* **Filters** test top-level fields of the value with LangGraph's operators,
  evaluated in Python the same way on every backend
  (:mod:`graphtape.store.kv_filter` says how and why).
* **TTL** (minutes, ``ttl=`` on a put or ``TTLConfig(default_ttl=...)``): an
  item expires that long after its last write, or its last read when the read
  asks for ``refresh_ttl`` (the default). Expired items are never returned,
  and are deleted by the next batch that writes or lists namespaces (or by
  :meth:`KVStore.sweep_ttl`).

Rejected: wrapping LangGraph's ``SqliteStore``/``PostgresStore`` (tables
named ``store`` in the public schema, migrations of their own beside ours,
and no Redis store without the RediSearch module).
"""

from __future__ import annotations

import asyncio
import json
import math
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from graphtape import clock
from graphtape.errors import GraphtapeError
from graphtape.store.kv_filter import InvalidFilter, check_filter, matches_filter

__all__ = [
    "InvalidStoreOp",
    "KVStore",
    "Row",
    "Write",
    "namespace_of",
    "namespace_text",
    "under",
]

#: the first label LangGraph keeps for itself
RESERVED_ROOT = "langgraph"


class InvalidStoreOp(GraphtapeError, ValueError):
    """An operation the store refuses: a bad key, value, filter, limit or TTL (the message says which)."""


@dataclass(frozen=True)
class Row:
    """One stored item as a backend reads it."""

    namespace: str  #: the labels joined by "."
    key: str
    value: str  #: the JSON text of the value
    created_at: float  #: seconds since the epoch
    updated_at: float
    expires_at: float | None = None  #: when the item expires (None: never)
    ttl: float | None = None  #: its TTL in minutes

    def live(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at > now


@dataclass(frozen=True)
class Write:
    """One put (``value`` is JSON text) or deletion (``value`` None) for a backend to apply."""

    namespace: str
    key: str
    value: str | None
    ttl: float | None = None


def namespace_text(namespace: Sequence[str]) -> str:
    """The stored form of a namespace: its labels joined by ``.``."""
    return ".".join(namespace)


def namespace_of(text: str) -> tuple[str, ...]:
    """The namespace whose stored form is ``text``."""
    return tuple(text.split(".")) if text else ()


def under(prefix: str) -> tuple[str, str] | None:
    """The text range ``[low, high)`` holding the namespaces strictly under ``prefix`` (None: the whole store)."""
    if not prefix:
        return None
    return prefix + ".", prefix + "/"  # "/" is the character after "."


# -- namespaces --------------------------------------------------------------------------


def _condition_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path) :]
    return all(p == "*" or p == label for p, label in zip(path, part))


def _literal_prefix(conditions: Sequence[MatchCondition]) -> str:
    """The stored form of the longest wildcard-free start that every listed namespace must have."""
    for condition in conditions:
        if condition.match_type == "prefix":
            labels: list[str] = []
            for label in condition.path:
                if label == "*":
                    break
                labels.append(label)
            return namespace_text(labels)
    return ""


# -- the store ---------------------------------------------------------------------------


class KVStore(BaseStore):
    """A LangGraph ``BaseStore`` kept in a graphtape store database; see the module docstring.

    ``ttl``: LangGraph's ``TTLConfig`` (``default_ttl`` in minutes,
    ``refresh_on_read``); ``sweep_interval_minutes`` is not used, expired
    items are swept by the writes. ``clock``: where timestamps come from
    (graphtape's clock by default, so ``graphtape.clock.fixed`` fixes them).
    """

    supports_ttl = True
    #: the store's URL, as :func:`kv_store_for` was given it (without secrets)
    url: str

    def __init__(self, *, ttl: TTLConfig | None = None, clock_fn: Callable[[], float] | None = None):
        if ttl is not None:
            default = ttl.get("default_ttl")
            if default is not None:
                _check_ttl(default)
        self.ttl_config = ttl
        self._clock = clock_fn or clock.now

    # -- what a backend does ----------------------------------------------------------

    @abstractmethod
    def _rows(self, addresses: Sequence[tuple[str, str]], now: float) -> list[Row]:
        """The live rows at these ``(namespace text, key)`` addresses (missing ones left out)."""

    @abstractmethod
    def _rows_under(self, prefix: str, now: float, limit: int | None) -> list[Row]:
        """The live rows in ``prefix`` or under it ("" = all), most recently updated first, then by
        namespace and key; the first ``limit`` of them when ``limit`` is given."""

    @abstractmethod
    def _namespaces(self, prefix: str, now: float) -> list[str]:
        """The stored forms of the namespaces, ``prefix`` itself or under it, that hold a live item."""

    @abstractmethod
    def _apply(self, writes: Sequence[Write], now: float) -> None:
        """Apply the writes (one per address) at once: all or nothing."""

    @abstractmethod
    def _touch(self, rows: Sequence[Row], now: float) -> None:
        """Restart the TTL of these rows (each has one) from ``now``, if they still exist."""

    @abstractmethod
    def _sweep(self, now: float) -> int:
        """Delete the rows expired at ``now``; how many."""

    @abstractmethod
    def close(self) -> None:
        """Release the connections."""

    # -- BaseStore ------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        for op in ops:
            _check_op(op)
        now = self._clock()
        if any(isinstance(op, (PutOp, ListNamespacesOp)) for op in ops):
            self._sweep(now)
        results: list[Result] = [None] * len(ops)
        gets = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp)]
        refresh: dict[tuple[str, str], Row] = {}
        if gets:
            addresses = list(dict.fromkeys((namespace_text(op.namespace), op.key) for _, op in gets))
            found = {(r.namespace, r.key): r for r in self._rows(addresses, now)}
            for i, op in gets:
                row = found.get((namespace_text(op.namespace), op.key))
                if row is not None:
                    results[i] = _item(row)
                    if op.refresh_ttl and row.ttl is not None:
                        refresh[(row.namespace, row.key)] = row
        writes: dict[tuple[str, str], Write] = {}
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp):
                rows = self._search(op, now)
                results[i] = [_search_item(r) for r in rows]
                if op.refresh_ttl:
                    refresh.update({(r.namespace, r.key): r for r in rows if r.ttl is not None})
            elif isinstance(op, ListNamespacesOp):
                results[i] = self._list(op, now)
            elif isinstance(op, PutOp):
                writes[(namespace_text(op.namespace), op.key)] = _write(op)  # the last put of an address wins
        if refresh:
            self._touch(list(refresh.values()), now)
        if writes:
            self._apply(list(writes.values()), now)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        # One implementation, run off the event loop: every backend is safe to share between threads.
        return await asyncio.to_thread(self.batch, list(ops))

    def sweep_ttl(self) -> int:
        """Delete the items whose TTL has run out; how many were deleted."""
        return self._sweep(self._clock())

    def _search(self, op: SearchOp, now: float) -> list[Row]:
        prefix = namespace_text(op.namespace_prefix)
        if op.filter:
            rows = [r for r in self._rows_under(prefix, now, None) if matches_filter(json.loads(r.value), op.filter)]
        else:
            rows = self._rows_under(prefix, now, op.offset + op.limit)
        rows = [r for r in rows if r.live(now)]
        rows.sort(key=lambda r: (-r.updated_at, r.namespace, r.key))
        return rows[op.offset : op.offset + op.limit]

    def _list(self, op: ListNamespacesOp, now: float) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        found = [namespace_of(text) for text in self._namespaces(_literal_prefix(conditions), now)]
        found = [ns for ns in found if all(_condition_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            found = [ns[: op.max_depth] for ns in found]
        return sorted(set(found))[op.offset : op.offset + op.limit]

    def __enter__(self) -> KVStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _item(row: Row) -> Item:
    return Item(
        value=json.loads(row.value),
        key=row.key,
        namespace=namespace_of(row.namespace),
        created_at=_when(row.created_at),
        updated_at=_when(row.updated_at),
    )


def _search_item(row: Row) -> SearchItem:
    return SearchItem(
        namespace=namespace_of(row.namespace),
        key=row.key,
        value=json.loads(row.value),
        created_at=_when(row.created_at),
        updated_at=_when(row.updated_at),
    )


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _check_ttl(ttl: Any) -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl <= 0:
        raise InvalidStoreOp(f"ttl is a positive number of minutes, not {ttl!r}")
    return float(ttl)


def _check_page(limit: Any, offset: Any, what: str) -> None:
    for name, n in (("limit", limit), ("offset", offset)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidStoreOp(f"{what} {name} is a whole number >= 0, not {n!r}")


def _check_key(key: Any) -> None:
    if not isinstance(key, str):
        raise InvalidStoreOp(f"an item key is a string, not {type(key).__name__}")
    if "\x00" in key:
        raise InvalidStoreOp(f"item key {key!r} contains a NUL character; remove it")
    _check_unicode(key, "item key")


def _check_unicode(text: str, what: str) -> None:
    """Refuse a lone surrogate: no database stores it as text, and no JSON answer could carry it back."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidStoreOp(f"{what} {text!r} is not valid Unicode (it holds a lone surrogate)") from None


def _check_op(op: Any) -> None:
    """Refuse what no backend can store or answer, before anything is read or written."""
    if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
        raise InvalidStoreOp(
            f"unknown store operation {type(op).__name__}; use GetOp, PutOp, SearchOp or ListNamespacesOp"
        )
    validate_op_namespace(op)
    for label in _labels_of(op):
        _check_unicode(label, "namespace label")
    if isinstance(op, GetOp):
        _check_key(op.key)
    elif isinstance(op, PutOp):
        if not op.namespace:
            raise InvalidNamespaceError("an item's namespace has at least one label, e.g. ('users', 'u1')")
        if op.namespace[0] == RESERVED_ROOT:
            raise InvalidNamespaceError(f"the first namespace label cannot be {RESERVED_ROOT!r}: LangGraph keeps it")
        _check_key(op.key)
        if op.value is not None and not isinstance(op.value, Mapping):
            raise InvalidStoreOp(f"an item's value is an object (a dict), not {type(op.value).__name__}")
        if op.ttl is not None:
            _check_ttl(op.ttl)
    elif isinstance(op, SearchOp):
        _check_page(op.limit, op.offset, "search")
        if op.filter is not None:
            try:
                check_filter(op.filter)
            except InvalidFilter as exc:
                raise InvalidStoreOp(str(exc)) from None
    else:
        _check_page(op.limit, op.offset, "namespace listing")
        if op.max_depth is not None and (not isinstance(op.max_depth, int) or op.max_depth < 1):
            raise InvalidStoreOp(f"max_depth is a whole number >= 1, not {op.max_depth!r}")
        for condition in op.match_conditions or ():
            if condition.match_type not in ("prefix", "suffix"):
                raise InvalidStoreOp(f"match_type is 'prefix' or 'suffix', not {condition.match_type!r}")


def _labels_of(op: Op) -> Iterator[str]:
    if isinstance(op, (GetOp, PutOp)):
        yield from op.namespace
    elif isinstance(op, SearchOp):
        yield from op.namespace_prefix
    elif isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            yield from condition.path


def _write(op: PutOp) -> Write:
    address = (namespace_text(op.namespace), op.key)
    if op.value is None:
        return Write(*address, None)
    try:
        text = json.dumps(dict(op.value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidStoreOp(f"the value of {op.namespace}/{op.key!r} is not JSON: {exc}") from None
    _check_unicode(text, f"the value of {op.namespace}/{op.key!r}:")
    return Write(*address, text, None if op.ttl is None else float(op.ttl))
