"""The LangGraph store kept in graphtape's store database (``graphtape.store.kv``), on every backend.

Every test takes ``kv``, a store on a fresh database of the current backend
(SQLite, PostgreSQL, Redis), so the three are held to one behaviour: this
file is their conformance suite (LangGraph ships none for stores). Property
tests compare random operation sequences with LangGraph's ``InMemoryStore``.
"""

from __future__ import annotations

import asyncio
import math
import threading
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

import graphtape
from graphtape import clock
from graphtape.errors import StoreError
from graphtape.store import open_store
from graphtape.store.kv import InvalidStoreOp, KVStore, attach_store, kv_store_for
from graphtape.store.kv_filter import json_equal


class FakeTime:
    """A clock the test moves by hand (graphtape's clock seam)."""

    def __init__(self, start: float = 1_800_000_000.0):
        self.t = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.t += seconds


@pytest.fixture
def kv(store_url):
    store = kv_store_for(store_url)
    yield store
    store.close()


@pytest.fixture
def fake_time():
    now = FakeTime()
    with clock.use(now=now):
        yield now


def keys(items):
    return [(i.namespace, i.key) for i in items]


# -- items ---------------------------------------------------------------------------------------


def test_put_get_update_delete(kv, fake_time):
    assert kv.get(("users", "u1"), "prefs") is None
    kv.put(("users", "u1"), "prefs", {"theme": "dark", "size": 14, "ratio": 1.0, "tags": ["a"], "none": None})
    item = kv.get(("users", "u1"), "prefs")
    assert item is not None
    assert item.namespace == ("users", "u1") and item.key == "prefs"
    assert item.value == {"theme": "dark", "size": 14, "ratio": 1.0, "tags": ["a"], "none": None}
    assert isinstance(item.value["size"], int) and isinstance(item.value["ratio"], float)
    assert item.created_at.timestamp() == fake_time.t == item.updated_at.timestamp()
    assert item.created_at.tzinfo is not None

    first = fake_time.t
    fake_time.advance(5)
    kv.put(("users", "u1"), "prefs", {"theme": "light"})
    again = kv.get(("users", "u1"), "prefs")
    assert again.value == {"theme": "light"}
    assert again.created_at.timestamp() == first and again.updated_at.timestamp() == first + 5

    kv.delete(("users", "u1"), "prefs")
    assert kv.get(("users", "u1"), "prefs") is None
    kv.delete(("users", "u1"), "prefs")  # deleting what is not there is no error
    assert kv.search(("users",)) == []
    assert kv.list_namespaces() == []


def test_labels_and_keys_of_any_text(kv):
    ns = ("ü", "*", "a b", "x/y", "[(")
    kv.put(ns, "", {"empty key": True})
    kv.put(ns, "ключ 🔑", {"v": "\u0000 and \n"})
    assert kv.get(ns, "").value == {"empty key": True}
    assert kv.get(ns, "ключ 🔑").value == {"v": "\u0000 and \n"}
    assert kv.list_namespaces() == [ns]
    assert set(keys(kv.search(("ü", "*")))) == {(ns, ""), (ns, "ключ 🔑")}


def test_search_order_prefix_and_pages(kv, fake_time):
    for ns, key in [(("a",), "k1"), (("a", "b"), "k2"), (("ab",), "k3"), (("a", "b", "c"), "k4"), (("b",), "k5")]:
        kv.put(ns, key, {"key": key})
        fake_time.advance(1)
    # most recently updated first; "ab" is not under "a"
    assert keys(kv.search(("a",))) == [(("a", "b", "c"), "k4"), (("a", "b"), "k2"), (("a",), "k1")]
    assert keys(kv.search(("a", "b"))) == [(("a", "b", "c"), "k4"), (("a", "b"), "k2")]
    assert len(kv.search(())) == 5
    assert keys(kv.search((), limit=2, offset=1)) == [(("a", "b", "c"), "k4"), (("ab",), "k3")]
    assert kv.search((), offset=10) == []
    # equal update times: by namespace, then key
    kv.batch([PutOp(("z",), "b", {}), PutOp(("y",), "c", {}), PutOp(("z",), "a", {})])
    assert keys(kv.search((), limit=3)) == [(("y",), "c"), (("z",), "a"), (("z",), "b")]
    # an update moves an item to the front
    fake_time.advance(1)
    kv.put(("a",), "k1", {"key": "k1", "again": True})
    assert keys(kv.search((), limit=1)) == [(("a",), "k1")]
    assert all(i.score is None for i in kv.search(()))


def test_filters(kv):
    docs = {
        "n1": {"kind": "note", "score": 1, "meta": {"lang": "en", "len": 3}, "tags": ["x", "y"], "flag": True},
        "n2": {"kind": "note", "score": 2.5, "meta": {"lang": "fr"}, "tags": ["x"], "flag": 1},
        "t1": {"kind": "todo", "score": 10, "title": "b"},
        "t2": {"kind": "todo", "score": "high", "title": "a"},
    }
    for key, value in docs.items():
        kv.put(("docs",), key, value)

    def found(filter):
        return sorted(i.key for i in kv.search(("docs",), filter=filter))

    assert found({"kind": "note"}) == ["n1", "n2"]
    assert found({"kind": {"$eq": "todo"}}) == ["t1", "t2"]
    assert found({"kind": {"$ne": "note"}}) == ["t1", "t2"]
    assert found({"score": {"$gt": 1}}) == ["n2", "t1"]  # "high" is no number: no comparison holds
    assert found({"score": {"$gte": 1, "$lt": 10}}) == ["n1", "n2"]
    assert found({"score": {"$lte": 2.5}}) == ["n1", "n2"]
    assert found({"score": 1.0}) == ["n1"]  # 1 equals 1.0
    assert found({"title": {"$lt": "b"}}) == ["t2"]  # strings compare with strings
    assert found({"flag": True}) == ["n1"]  # true is not 1
    assert found({"flag": 1}) == ["n2"]
    assert found({"meta": {"lang": "en"}}) == ["n1"]  # a nested object matches on the fields given
    assert found({"meta": {"len": {"$gt": 2}}}) == ["n1"]
    assert found({"tags": ["x"]}) == ["n2"]  # lists match whole
    assert found({"title": {"$ne": "a"}}) == ["n1", "n2", "t1"]  # a missing field is null, and null != "a"
    assert found({"title": None}) == ["n1", "n2"]
    assert found({"kind": "note", "score": {"$gt": 2}}) == ["n2"]
    assert found({"missing": {"$gt": 0}}) == []
    # filtered pages
    assert len(kv.search(("docs",), filter={"kind": "note"}, limit=1)) == 1
    assert kv.search(("docs",), filter={"kind": "note"}, offset=2) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"score": {"$regex": "x"}},
        {"score": {"$gt": [1]}},
        {"score": {"$gt": True}},
        {"score": {"$gt": 1, "x": 2}},
        {"$gt": 1},
        {"v": {"$eq": math.nan}},
        {"v": object()},
    ],
)
def test_bad_filters_are_refused(kv, bad):
    with pytest.raises(InvalidStoreOp):
        kv.search(("docs",), filter=bad)


def test_query_and_index_are_ignored(kv):
    kv.put(("docs",), "d", {"text": "tides"}, index=["text"])
    hits = kv.search(("docs",), query="anything at all")
    assert keys(hits) == [(("docs",), "d")] and hits[0].score is None


def test_namespaces(kv):
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"), ("b",)]:
        kv.put(ns, "k", {})
    assert kv.list_namespaces() == sorted(
        [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"), ("b",)]
    )
    assert kv.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert kv.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert kv.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert kv.list_namespaces(suffix=("*", "e")) == [("a", "b", "d", "e")]
    assert kv.list_namespaces(prefix=("a",), suffix=("f",), max_depth=2) == [("a", "b"), ("a", "c")]
    assert kv.list_namespaces(max_depth=1) == [("a",), ("b",)]
    assert kv.list_namespaces(limit=2, offset=1) == [("a", "b", "d", "e"), ("a", "b", "d", "i")]
    assert kv.list_namespaces(prefix=("zzz",)) == []
    assert kv.list_namespaces(prefix=("a", "b", "c", "d", "e")) == []


def test_a_batch_reads_before_it_writes_and_the_last_put_wins(kv):
    kv.put(("b",), "k", {"v": 0})
    results = kv.batch(
        [
            PutOp(("b",), "k", {"v": 1}),
            GetOp(("b",), "k"),
            PutOp(("b",), "new", {"v": 1}),
            PutOp(("b",), "k", {"v": 2}),
            SearchOp(("b",)),
            ListNamespacesOp(),
            PutOp(("b",), "new", None),
        ]
    )
    assert results[0] is None and results[2] is None
    assert results[1].value == {"v": 0}
    assert keys(results[4]) == [(("b",), "k")]
    assert results[5] == [("b",)]
    assert kv.get(("b",), "k").value == {"v": 2}
    assert kv.get(("b",), "new") is None


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda s: s.put(("a.b",), "k", {}), InvalidNamespaceError),
        (lambda s: s.put(("",), "k", {}), InvalidNamespaceError),
        (lambda s: s.put((), "k", {}), InvalidNamespaceError),
        (lambda s: s.put(("langgraph",), "k", {}), InvalidNamespaceError),
        (lambda s: s.batch([PutOp((), "k", {})]), InvalidNamespaceError),
        (lambda s: s.batch([PutOp(("langgraph", "x"), "k", {})]), InvalidNamespaceError),
        (lambda s: s.batch([GetOp(("a.b",), "k")]), InvalidNamespaceError),
        (lambda s: s.get(("a",), "nul\x00key"), InvalidStoreOp),
        (lambda s: s.put(("a",), "lone \ud800", {}), InvalidStoreOp),
        (lambda s: s.put(("a", "\udfff"), "k", {}), InvalidStoreOp),
        (lambda s: s.put(("a",), "k", {"v": "\ud800"}), InvalidStoreOp),
        (lambda s: s.search(("\ud800",)), InvalidStoreOp),
        (lambda s: s.put(("a",), "k", {"x": math.inf}), InvalidStoreOp),
        (lambda s: s.put(("a",), "k", {"x": object()}), InvalidStoreOp),
        (lambda s: s.batch([PutOp(("a",), "k", ["not", "a", "dict"])]), InvalidStoreOp),  # type: ignore[arg-type]
        (lambda s: s.put(("a",), "k", {}, ttl=-1), InvalidStoreOp),
        (lambda s: s.search(("a",), limit=-1), InvalidStoreOp),
        (lambda s: s.list_namespaces(max_depth=0), InvalidStoreOp),
        (lambda s: s.batch(["get"]), InvalidStoreOp),  # type: ignore[list-item]
    ],
)
def test_invalid_operations_write_nothing(kv, call, error):
    kv.put(("a",), "before", {"v": 1})
    with pytest.raises(error):
        call(kv)
    assert keys(kv.search(())) == [(("a",), "before")]


def test_a_refused_batch_applies_none_of_its_puts(kv):
    with pytest.raises(InvalidStoreOp):
        kv.batch([PutOp(("a",), "ok", {"v": 1}), PutOp(("a",), "bad", {"v": math.nan})])
    assert kv.search(()) == []


# -- TTL -------------------------------------------------------------------------------------------


def test_ttl_expires_refreshes_and_sweeps(kv, fake_time):
    kv.put(("t",), "short", {"v": 1}, ttl=1)  # one minute
    kv.put(("t",), "forever", {"v": 2})
    kv.put(("u",), "short", {"v": 3}, ttl=1)
    fake_time.advance(40)
    assert kv.get(("t",), "short").value == {"v": 1}  # a read restarts the minute
    fake_time.advance(40)
    assert kv.get(("t",), "short", refresh_ttl=False) is not None  # 40 s after the refresh
    assert kv.get(("u",), "short") is None  # 80 s after its write
    assert keys(kv.search(("u",))) == []
    fake_time.advance(30)
    assert kv.get(("t",), "short") is None
    assert keys(kv.search(())) == [(("t",), "forever")]
    assert kv.list_namespaces() == [("t",)]  # the listing swept the expired items first
    assert kv.sweep_ttl() == 0

    kv.put(("t",), "again", {"v": 4}, ttl=0.5)
    fake_time.advance(31)
    assert kv.sweep_ttl() == 1
    # a put over an expired (swept) item starts it again
    kv.put(("t",), "again", {"v": 5})
    assert kv.get(("t",), "again").created_at.timestamp() == fake_time.t


def test_search_refreshes_ttl_unless_told_not_to(kv, fake_time):
    kv.put(("s",), "a", {"v": 1}, ttl=1)
    kv.put(("s",), "b", {"v": 1}, ttl=1)
    fake_time.advance(50)
    assert len(kv.search(("s",), filter={"v": 1}, limit=1)) == 1  # refreshes only what it returns
    fake_time.advance(20)
    assert len(kv.search(("s",), refresh_ttl=False)) == 1


def test_default_ttl_from_config(store_url, fake_time):
    with kv_store_for(store_url, ttl={"default_ttl": 1, "refresh_on_read": False}) as kv:
        kv.put(("d",), "k", {"v": 1})
        kv.put(("d",), "kept", {"v": 1}, ttl=None)
        fake_time.advance(30)
        assert kv.get(("d",), "k") is not None
        fake_time.advance(31)
        assert kv.get(("d",), "k") is None
        assert kv.get(("d",), "kept") is not None


# -- async, sharing, the tape ----------------------------------------------------------------------


async def test_async_calls(kv):
    await kv.aput(("as",), "k", {"v": 1})
    await asyncio.gather(*(kv.aput(("as", str(i)), "k", {"i": i}) for i in range(10)))
    assert (await kv.aget(("as",), "k")).value == {"v": 1}
    assert len(await kv.asearch(("as",), limit=100)) == 11
    assert len(await kv.alist_namespaces(prefix=("as",))) == 11
    await kv.adelete(("as",), "k")
    assert await kv.aget(("as",), "k") is None


def test_two_stores_on_one_url_share_items(store_url, kv, fake_time):
    with kv_store_for(store_url) as other:
        kv.put(("shared",), "k", {"v": 1})
        assert other.get(("shared",), "k").value == {"v": 1}
        fake_time.advance(1)
        other.put(("shared",), "k", {"v": 2})
        item = kv.get(("shared",), "k")
        assert item.value == {"v": 2} and item.updated_at.timestamp() == fake_time.t
        assert item.created_at.timestamp() == fake_time.t - 1


def test_beside_a_tape_neither_disturbs_the_other(store_url):
    tape = graphtape.connect(store_url)
    try:
        with kv_store_for(tape.url) as kv:
            kv.put(("mem",), "k", {"v": 1})
            assert tape.runs() == []
        reopened = open_store(store_url, create=False)  # still a graphtape store, schema unchanged
        assert reopened.schema_version == tape.store.schema_version
        reopened.close()
        with kv_store_for(store_url) as kv:
            assert kv.get(("mem",), "k").value == {"v": 1}
        # opened from the tape store itself: its connections shared, and still open after
        with kv_store_for(tape.store) as shared:
            for attribute in ("_pool", "_redis"):  # PostgreSQL's pool, Redis's client: the tape store's own
                if hasattr(tape.store, attribute):
                    assert getattr(shared, attribute) is getattr(tape.store, attribute)
            assert shared.get(("mem",), "k").value == {"v": 1}
            shared.put(("mem",), "k2", {"v": 2})
        assert tape.runs() == []
        with kv_store_for(store_url) as kv:
            assert kv.get(("mem",), "k2").value == {"v": 2}
    finally:
        tape.close()


def test_unknown_url_scheme_is_refused():
    with pytest.raises(StoreError, match="unsupported store URL scheme"):
        kv_store_for("mysql://localhost/db")


def test_attach_store_gives_a_graph_the_store(kv):
    from langgraph.graph import END, START, StateGraph
    from langgraph.store.base import BaseStore
    from typing_extensions import TypedDict

    class S(TypedDict):
        n: int

    def remember(state: S, store: BaseStore) -> S:
        seen = store.get(("graph",), "count")
        count = (seen.value["count"] if seen else 0) + state["n"]
        store.put(("graph",), "count", {"count": count})
        return {"n": count}

    builder = StateGraph(S)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    graph = builder.compile()
    served = attach_store(graph, kv)
    assert graph.store is None and served.store is kv
    assert served.invoke({"n": 2}) == {"n": 2}
    assert served.invoke({"n": 3}) == {"n": 5}
    assert kv.get(("graph",), "count").value == {"count": 5}
    own = InMemoryStore()
    assert attach_store(builder.compile(store=own), kv).store is own


# -- properties ------------------------------------------------------------------------------------

labels = st.text(st.characters(blacklist_characters=".\x00", blacklist_categories=["Cs"]), min_size=1, max_size=4)
json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
item_keys = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    namespace=st.lists(labels, min_size=1, max_size=3).map(tuple),
    key=item_keys,
    value=st.dictionaries(st.text(max_size=6), json_values, max_size=5),
)
def test_any_json_value_comes_back_as_it_was_put(kv, namespace, key, value):
    root = ("p" + uuid.uuid4().hex[:8],)
    kv.put(root + namespace, key, value)
    got = kv.get(root + namespace, key)
    assert got is not None and got.value == value and json_equal(got.value, value)
    # types survive exactly: an int stays an int, a float a float
    assert repr(got.value) == repr(value)
    assert keys(kv.search(root)) == [(root + namespace, key)]
    assert kv.list_namespaces(prefix=root) == [root + namespace]


operations = st.lists(
    st.tuples(
        st.sampled_from([("x",), ("x", "y"), ("x", "y", "z"), ("xy",), ("w",)]),
        st.sampled_from(["k1", "k2", "k3"]),
        st.none() | st.fixed_dictionaries({"n": st.integers(-3, 3), "s": st.sampled_from(["a", "b", "c"])}),
    ),
    min_size=1,
    max_size=12,
)
filters = st.none() | st.one_of(
    st.builds(lambda s: {"s": s}, st.sampled_from(["a", "b"])),
    st.builds(lambda s: {"s": {"$ne": s}}, st.sampled_from(["a", "b"])),
    st.builds(
        lambda op, n: {"n": {op: n}}, st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]), st.integers(-3, 3)
    ),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, prefix=st.sampled_from([(), ("x",), ("x", "y"), ("xy",)]), filter=filters)
def test_same_answers_as_langgraphs_in_memory_store(kv, ops, prefix, filter):
    root = "p" + uuid.uuid4().hex[:8]
    oracle = InMemoryStore()
    for ns, key, value in ops:
        for store in (kv, oracle):
            if value is None:
                store.delete((root, *ns), key)
            else:
                store.put((root, *ns), key, value)
    for ns, key, _ in ops:
        ours, theirs = kv.get((root, *ns), key), oracle.get((root, *ns), key)
        assert (ours and ours.value) == (theirs and theirs.value)
    ours = kv.search((root, *prefix), filter=filter, limit=100)
    theirs = oracle.search((root, *prefix), filter=filter, limit=100)
    assert {(i.namespace, i.key, str(i.value)) for i in ours} == {(i.namespace, i.key, str(i.value)) for i in theirs}
    stamps = [i.updated_at for i in ours]
    assert stamps == sorted(stamps, reverse=True)
    # InMemoryStore keeps a namespace once emptied (and creates one on a get); ours lists those holding items
    held = {i.namespace for i in oracle.search((root,), limit=1000)}
    assert kv.list_namespaces(prefix=(root,)) == sorted(held)
    assert kv.list_namespaces(prefix=(root,), max_depth=2) == sorted({ns[:2] for ns in held})


def test_kv_stores_are_base_stores(kv):
    from langgraph.store.base import BaseStore

    assert isinstance(kv, KVStore) and isinstance(kv, BaseStore) and kv.supports_ttl


def test_concurrent_writers_on_one_database(store_url):
    """Writers on separate connections, each batch touching the same keys in its own order: nothing lost."""
    import random

    stores = [kv_store_for(store_url) for _ in range(4)]
    errors: list[BaseException] = []

    def writer(n: int, store: KVStore) -> None:
        rng = random.Random(n)
        try:
            for round_ in range(15):
                names = [f"k{i}" for i in range(6)]
                rng.shuffle(names)
                store.batch([PutOp(("race", k), "v", {"by": n, "round": round_}) for k in names])
                store.put(("race", "own"), f"w{n}", {"round": round_})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n, s)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    try:
        assert not errors, errors
        assert {i.key: i.value for i in stores[0].search(("race", "own"))} == {f"w{n}": {"round": 14} for n in range(4)}
        last = stores[0].search(("race",), filter={"round": 14}, limit=100)
        assert len(last) == 6 + 4
        assert stores[0].list_namespaces(prefix=("race",)) == sorted(
            [("race", f"k{i}") for i in range(6)] + [("race", "own")]
        )
    finally:
        for s in stores:
            s.close()
