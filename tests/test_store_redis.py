"""The Redis store: behaviour specific to the backend (atomic scripts, leases on the server clock, GC lock).

Needs a Redis 7 server: ``GRAPHTAPE_TEST_REDIS_URL`` (default
``redis://127.0.0.1:6379/15``). Every test works under its own key prefix
and deletes its keys afterwards, so the database may be shared. Without a
server the tests are skipped locally and fail in CI (``CI`` set), where a
missing server is a broken setup rather than a reason to pass.
"""

from __future__ import annotations

import threading
import time

import pytest

redis_client = pytest.importorskip("redis")

import graphtape  # noqa: E402
from graphtape.runtime.saver import saver_for  # noqa: E402
from graphtape.store import (  # noqa: E402
    open_store,
    redis_layout,
)
from graphtape.store import redis as redis_store  # noqa: E402
from graphtape.store.base import CheckpointRow, EventRow, RunRecord, WriteBatch, WriteRow  # noqa: E402
from graphtape.store.redis import MIGRATIONS, RedisTapeStore  # noqa: E402
from graphtape.store.redis_layout import split_url  # noqa: E402
from tests.redis_prefixes import prefixes_fixture, redis_raw_fixture, url_for  # noqa: E402, F401


@pytest.fixture
def store(prefixes):
    s = RedisTapeStore(url_for(prefixes()))
    yield s
    s.close()


def _run(run_id: str, started: float = 1.0, thread: str = "t", status: str = "running") -> RunRecord:
    return RunRecord(run_id=run_id, thread_id=thread, graph="g", started_at=started, status=status)


def _cp(thread: str, ns: str, cid: str, *, values=None, **meta) -> CheckpointRow:
    return CheckpointRow(
        thread_id=thread,
        checkpoint_ns=ns,
        checkpoint_id=cid,
        parent_id=None,
        run_id=meta.get("run_id"),
        step=meta.get("step"),
        source=meta.get("source"),
        created_at="2024",
        metadata=dict(meta),
        body=b"json\x00{}",
        values=values or {},
    )


def _keys(redis_raw, prefix: str) -> set[str]:
    return {k.decode() for k in redis_raw.scan_iter(match=redis_layout.glob_escape(prefix) + "*")}


# -- opening ------------------------------------------------------------------------------


def test_open_store_by_url_and_schema(prefixes, redis_raw):
    prefix = prefixes()
    s = open_store(url_for(prefix))
    try:
        assert isinstance(s, RedisTapeStore)
        assert s.prefix == prefix
        assert s.schema_version == len(MIGRATIONS)
    finally:
        s.close()
    RedisTapeStore(url_for(prefix)).close()  # reopening migrates nothing
    redis_raw.set(prefix + "schema", len(MIGRATIONS) + 3)
    with pytest.raises(graphtape.SchemaTooNew, match="upgrade graphtape"):
        RedisTapeStore(url_for(prefix))


def test_default_prefix_and_url_hides_password():
    client_url, prefix, shown = split_url("redis://alice:s3cret@db.example:6380/2?prefix=gt:&socket_timeout=3")
    assert prefix == "gt:"
    assert "prefix" not in client_url and "s3cret" in client_url and "socket_timeout=3" in client_url
    assert shown == "redis://alice:***@db.example:6380/2?prefix=gt:&socket_timeout=3"
    _, prefix, shown = split_url("rediss://:s3cret@db.example/0?password=other")
    assert prefix == "graphtape:"
    assert "s3cret" not in shown and "other" not in shown


def test_unreachable_server_is_a_one_line_store_error():
    url = "redis://bob:hunter2@127.0.0.1:1/0?prefix=x:&socket_connect_timeout=0.5"
    started = time.monotonic()
    with pytest.raises(graphtape.StoreError) as info:
        open_store(url)
    message = str(info.value)
    assert "\n" not in message
    assert "cannot reach Redis at redis://bob:***@127.0.0.1:1/0" in message
    assert "hunter2" not in message
    assert "start the server" in message
    assert time.monotonic() - started < 10


def test_bad_urls_are_store_errors(redis_raw):
    with pytest.raises(graphtape.StoreError, match="empty prefix"):
        RedisTapeStore(url_for(""))
    with pytest.raises(graphtape.StoreError, match="remove the unknown parameter"):
        RedisTapeStore(url_for("gt-never-used:") + "&no_such_option=1")


# -- writes -----------------------------------------------------------------------------------


def test_a_failed_batch_writes_nothing(store, redis_raw):
    store.write(WriteBatch(new_runs=[_run("r1")], events=[EventRow("r1", 0, "run_started", 1.0, {})]))
    before = _keys(redis_raw, store.prefix)
    doomed = WriteBatch(
        new_runs=[_run("r2")],
        events=[EventRow("r2", 0, "run_started", 2.0, {}), EventRow("r1", 0, "run_started", 2.0, {})],
        blobs={"h-new": b"data", "h-big": b"x" * 5000},
        chains={"c-new": (None, "h-new")},
        checkpoints=[_cp("t", "", "0001", values={"a": "h-new"})],
        writes=[WriteRow("t", "", "0001", "task", "", 0, "ch", "h-new")],
        run_updates=[("r1", {"status": "finished"})],
    )
    with pytest.raises(graphtape.StoreError, match=r"event 0 of run r1 is already in the store") as info:
        store.write(doomed)
    assert "\n" not in str(info.value)
    assert _keys(redis_raw, store.prefix) == before
    assert store.get_run("r1").status == "running"
    assert store.get_run("r2") is None
    assert store.get_blobs(["h-new", "h-big"]) == {}
    assert store.get_chain_nodes(["c-new"]) == {}
    assert store.list_checkpoints() == []
    # a duplicate run id is refused the same way
    with pytest.raises(graphtape.StoreError, match="run r1 is already in the store"):
        store.write(WriteBatch(new_runs=[_run("r1")], blobs={"h-new": b"data"}))
    assert store.get_blobs(["h-new"]) == {}
    # and so are duplicates inside one batch, before anything is sent
    with pytest.raises(graphtape.StoreError, match="twice"):
        store.write(WriteBatch(events=[EventRow("r9", 1, "x", 0.0, {}), EventRow("r9", 1, "x", 0.0, {})]))
    with pytest.raises(graphtape.StoreError, match="cannot update run columns"):
        store.write(WriteBatch(run_updates=[("r1", {"thread_id": "other"})]))


def test_a_resent_batch_counts_as_applied(store, monkeypatch):
    """redis-py resends a script when the reply is lost; the batch id makes that harmless."""
    monkeypatch.setattr(redis_store.secrets, "token_hex", lambda n=16: "fixed-batch-id")
    batch = WriteBatch(new_runs=[_run("r1")], events=[EventRow("r1", 0, "run_started", 1.0, {})])
    store.write(batch)
    store.write(batch)  # the same id: recognised, not refused as a duplicate
    assert [e.seq for e in store.events("r1")] == [0]


def test_runs_events_and_updates(store):
    store.write(
        WriteBatch(
            new_runs=[
                _run("abcd1111", 2.0, "t1"),
                _run("abcd2222", 2.0, "t1", "finished"),
                _run("Abcx", 1.0, "t2"),
                _run("zz", 3.0, "t1"),
            ],
            events=[
                EventRow("abcd1111", seq, "llm_call" if seq % 2 else "tool_call", float(seq), {"n": seq})
                for seq in (3, 1, 12, 0, 2)
            ],
        )
    )
    assert [r.run_id for r in store.list_runs()] == ["zz", "abcd1111", "abcd2222", "Abcx"]
    assert [r.run_id for r in store.list_runs(newest_first=False)] == ["Abcx", "abcd1111", "abcd2222", "zz"]
    assert [r.run_id for r in store.list_runs(limit=2)] == ["zz", "abcd1111"]
    assert [r.run_id for r in store.list_runs(thread_id="t1", status="running")] == ["zz", "abcd1111"]
    assert store.list_runs(thread_id="nobody") == []
    # SQLite's LIKE ignores ASCII case, and so does this
    assert store.find_runs("abcd") == ["abcd1111", "abcd2222"]
    assert store.find_runs("ABC", limit=5) == ["abcd1111", "abcd2222", "Abcx"]
    assert store.find_runs("abcd1") == ["abcd1111"]
    assert store.find_runs("q") == []
    assert [e.seq for e in store.events("abcd1111")] == [0, 1, 2, 3, 12]
    assert [e.seq for e in store.events("abcd1111", kinds=["llm_call"])] == [1, 3]
    assert store.events("abcd1111")[4].data == {"n": 12} and store.events("abcd1111")[4].ts == 12.0
    store.write(
        WriteBatch(
            run_updates=[
                ("abcd1111", {"status": "finished", "ended_at": 5, "tokens": 7, "meta": {"k": [1]}, "error": None}),
                ("missing", {"status": "failed"}),
            ]
        )
    )
    run = store.get_run("abcd1111")
    assert (run.status, run.ended_at, run.duration, run.tokens, run.meta) == ("finished", 5.0, 3.0, 7, {"k": [1]})
    assert store.get_run("missing") is None  # updating an absent run is a no-op, as in SQLite
    store.delete_runs(["abcd1111", "zz"])
    assert store.get_run("abcd1111") is None and store.events("abcd1111") == []
    assert [r.run_id for r in store.list_runs(thread_id="t1")] == ["abcd2222"]
    assert store.find_runs("zz") == []


def test_blobs_and_chains(store, redis_raw):
    big = bytes(range(256)) * 40  # > 1 KB: stored compressed
    store.write(
        WriteBatch(
            blobs={"small": b"tiny", "big": big, "empty": b""},
            chains={"c1": (None, "m1"), "c2": ("c1", "m2"), "c3": ("c2", "m3")},
        )
    )
    assert store.get_blobs(["small", "big", "empty", "absent"]) == {"small": b"tiny", "big": big, "empty": b""}
    assert redis_raw.get(store.prefix + "blob:big")[:1] == b"z"
    assert len(redis_raw.get(store.prefix + "blob:big")) < len(big)
    # content addressed: a second write of an address keeps the first bytes
    store.write(WriteBatch(blobs={"small": b"other"}, chains={"c2": (None, "zzz")}))
    assert store.get_blob("small") == b"tiny"
    assert store.get_chain_nodes(["c2", "c1", "nope"]) == {"c2": ("c1", "m2"), "c1": (None, "m1")}
    assert store.get_chain("c3") == ["m1", "m2", "m3"]
    assert store.get_chain(None) == []
    store.write(WriteBatch(chains={"broken": ("gone", "m9")}))
    with pytest.raises(graphtape.StoreError, match="incomplete"):
        store.get_chain("broken")
    with pytest.raises(graphtape.StoreError, match="missing"):
        store.get_blob("absent")


def test_separators_inside_values_survive(store):
    """Ids and kinds are arbitrary strings: the encodings never split on a character they may hold."""
    odd = "a\x00b:-"
    store.write(
        WriteBatch(
            new_runs=[_run(odd), _run("A\x00c")],
            events=[EventRow(odd, 0, "k\x00ind", 1.5, {"d": None})],
            chains={"root": (None, "i:0"), "": ("root", "i\x001"), "x:y": ("", "-:2")},
        )
    )
    assert store.events(odd)[0].kind == "k\x00ind"
    assert store.find_runs("a\x00b", limit=5) == ["a\x00b:-"]
    assert store.find_runs("A\x00", limit=5) == ["a\x00b:-", "A\x00c"]  # by folded id, then id
    assert store.get_chain_nodes(["", "root"]) == {"": ("root", "i\x001"), "root": (None, "i:0")}
    assert store.get_chain("x:y") == ["i:0", "i\x001", "-:2"]


# -- checkpoints ---------------------------------------------------------------------------------


def test_checkpoint_listing_filter_before_limit(store):
    rows = [
        _cp("t1", "", "01", source="input", step=0, run_id="ra"),
        _cp("t1", "", "03", source="loop", step=1, run_id="ra"),
        _cp("t1", "", "05", source="loop", step=2, run_id="rb"),
        _cp("t1", "sub:1", "04", source="loop", step=1, run_id="rb"),
        _cp("t2", "", "02", source="input", step=0, score=42, nested={"a": [1, 2]}),
    ]
    store.write(WriteBatch(checkpoints=rows))
    ids = lambda rows: [r.checkpoint_id for r in rows]  # noqa: E731
    assert ids(store.list_checkpoints(thread_id="t1", checkpoint_ns="")) == ["05", "03", "01"]
    assert ids(store.list_checkpoints(thread_id="t1")) == ["05", "04", "03", "01"]
    assert ids(store.list_checkpoints()) == ["05", "04", "03", "02", "01"]
    assert ids(store.list_checkpoints(limit=2)) == ["05", "04"]
    assert ids(store.list_checkpoints(before="04")) == ["03", "02", "01"]
    assert ids(store.list_checkpoints(thread_id="t1", checkpoint_ns="", before="05", limit=1)) == ["03"]
    assert ids(store.list_checkpoints(checkpoint_ns="")) == ["05", "03", "02", "01"]
    assert ids(store.list_checkpoints(metadata_filter={"source": "loop"})) == ["05", "04", "03"]
    assert ids(store.list_checkpoints(metadata_filter={"source": "loop", "step": 1})) == ["04", "03"]
    assert ids(store.list_checkpoints(metadata_filter={"source": "loop"}, limit=1, before="05")) == ["04"]
    assert ids(store.list_checkpoints(metadata_filter={"score": 42})) == ["02"]
    assert ids(store.list_checkpoints(metadata_filter={"nested": {"a": [1, 2]}})) == ["02"]
    assert ids(store.list_checkpoints(metadata_filter={"source": "update"})) == []
    assert ids(store.list_checkpoints(thread_id="nobody")) == []
    assert store.list_checkpoints(limit=0) == []
    latest = store.get_checkpoint("t1", "")
    assert latest.checkpoint_id == "05" and latest.metadata["run_id"] == "rb" and latest.body == b"json\x00{}"
    assert store.get_checkpoint("t1", "", "01").step == 0
    assert store.get_checkpoint("t1", "", "99") is None
    assert store.get_checkpoint("t3", "") is None


def test_pending_writes_replace_and_keep_first(store):
    w = lambda task, idx, value, replace=False: WriteRow("t", "", "01", task, "", idx, "ch", value, replace)  # noqa: E731
    store.write(
        WriteBatch(checkpoints=[_cp("t", "", "01")], writes=[w("b", 1, "v1"), w("a", 0, "v2"), w("b", 0, "v3")])
    )
    store.write(WriteBatch(writes=[w("b", 1, "ignored"), w("a", -1, "err", True)]))
    store.write(WriteBatch(writes=[w("a", -1, "err2", True)]))
    assert [(x.task_id, x.idx, x.value) for x in store.get_writes("t", "", "01")] == [
        ("a", -1, "err2"),
        ("a", 0, "v2"),
        ("b", 0, "v3"),
        ("b", 1, "v1"),
    ]


def test_delete_checkpoints_and_thread_leave_no_keys(store, redis_raw):
    store.write(
        WriteBatch(
            checkpoints=[_cp("t1", "", "01"), _cp("t1", "", "02"), _cp("t1", "n", "03"), _cp("t2", "", "04")],
            writes=[
                WriteRow("t1", "", "01", "task", "", 0, "ch", "v"),
                WriteRow("t1", "n", "99", "task", "", 0, "ch", "v"),
            ],
        )
    )
    store.delete_checkpoints([("t1", "", "01"), ("t1", "", "02")])
    assert [r.checkpoint_id for r in store.list_checkpoints()] == ["04", "03"]
    assert store.get_writes("t1", "", "01") == []
    store.delete_thread("t1")
    assert [r.checkpoint_id for r in store.list_checkpoints()] == ["04"]
    assert store.get_writes("t1", "n", "99") == []  # writes go with the thread even without their checkpoint
    assert not any("t1" in k for k in _keys(redis_raw, store.prefix))


# -- leases --------------------------------------------------------------------------------------


def test_lease_expiry_renewal_and_tokens(store):
    assert store.lease_holder("L") is None
    assert store.acquire_lease("L", "a", 0.3) == 1
    owner, expires, token = store.lease_holder("L")
    assert (owner, token) == ("a", 1) and expires > time.time() - 5
    assert store.acquire_lease("L", "b", 0.3) is None  # held
    assert store.acquire_lease("L", "a", 0.3) == 1  # renewal keeps the token
    time.sleep(0.45)
    assert store.lease_holder("L") is None  # expired
    assert store.acquire_lease("L", "b", 10) == 2  # free to take; the token grows
    store.release_lease("L", "a")  # not the holder: a no-op
    assert store.lease_holder("L")[0] == "b"
    store.release_lease("L", "b")
    assert store.lease_holder("L") is None
    assert store.acquire_lease("L", "c", 10) == 3  # the token survives the release


def test_fenced_write_rejected_after_takeover(store, redis_raw):
    token = store.acquire_lease("thread:t", "proc-a", 0.2)
    store.write(WriteBatch(new_runs=[_run("r1")]), fence=("thread:t", token))
    time.sleep(0.3)
    new_token = store.acquire_lease("thread:t", "proc-b", 10)
    assert new_token == token + 1
    before = _keys(redis_raw, store.prefix)
    with pytest.raises(graphtape.LeaseLost, match=r"our token 1, current 2") as info:
        store.write(
            WriteBatch(events=[EventRow("r1", 0, "x", 0.0, {})], blobs={"h": b"late"}), fence=("thread:t", token)
        )
    assert "\n" not in str(info.value)
    assert _keys(redis_raw, store.prefix) == before
    with pytest.raises(graphtape.LeaseLost, match="current none"):
        store.write(WriteBatch(blobs={"h": b"x"}), fence=("never-taken", 1))
    store.write(WriteBatch(events=[EventRow("r1", 0, "x", 0.0, {})]), fence=("thread:t", new_token))
    assert len(store.events("r1")) == 1


# -- retention ---------------------------------------------------------------------------------------


def test_collect_garbage_keeps_everything_referenced(store):
    msg = b'{"content":"hi","type":"human"}'
    value_with_msg = b'{"t":"msg","h":"m-in-value"}'
    view = b'{"$chain":"c-view","x":{"$m":"m-view"}}'
    store.write(
        WriteBatch(
            new_runs=[_run("r1"), _run("r2")],
            events=[
                EventRow("r1", 0, "run_started", 0.0, {"input": "in1", "config": "cfg", "versions": "ver"}),
                EventRow("r1", 1, "llm_call", 0.0, {"request": "req", "response": "resp", "messages": "c2"}),
                EventRow("r1", 2, "run_finished", 0.0, {"output": "out-view", "note": "not-an-address"}),
                EventRow("r2", 0, "run_started", 0.0, {"input": "in2", "config": "cfg", "versions": "ver"}),
            ],
            blobs={
                h: b"{}"
                for h in (
                    "in1",
                    "in2",
                    "cfg",
                    "ver",
                    "req",
                    "resp",
                    "m1",
                    "m2",
                    "cpval",
                    "wval",
                    "m-in-value",
                    "m-view",
                    "mv1",
                    "dead1",
                    "not-an-address",
                )
            }
            | {"out-view": view, "cpval": value_with_msg, "m1": msg, "dead2": b"x" * 4000},
            chains={"c1": (None, "m1"), "c2": ("c1", "m2"), "c-view": (None, "mv1"), "c-dead": ("c1", "dead-item")},
            checkpoints=[_cp("t", "", "01", values={"messages": "cpval"})],
            writes=[WriteRow("t", "", "01", "task", "", 0, "ch", "wval")],
        )
    )
    removed = store.collect_garbage()
    assert removed == (3, 1)  # dead1, dead2, not-an-address; c-dead
    assert store.get_blobs(["dead1", "dead2", "not-an-address"]) == {}
    assert set(store.get_blobs(["m-in-value", "m-view", "mv1", "m1", "m2", "wval", "cpval", "cfg"])) == {
        "m-in-value",
        "m-view",
        "mv1",
        "m1",
        "m2",
        "wval",
        "cpval",
        "cfg",
    }
    assert store.get_chain("c2") == ["m1", "m2"]
    assert store.collect_garbage() == (0, 0)
    # deleting a run turns what only it referred to into garbage
    store.delete_runs(["r2"])
    assert store.collect_garbage() == (1, 0)  # in2 (cfg and ver are shared with r1)
    store.delete_runs(["r1"])
    store.delete_thread("t")
    blobs, nodes = store.collect_garbage()
    assert (blobs, nodes) == (13, 3)
    assert store.get_blobs(["cfg", "m1"]) == {}


def test_writers_wait_for_a_garbage_collection(prefixes, redis_raw):
    s = RedisTapeStore(url_for(prefixes()), busy_timeout=0.3)
    try:
        redis_raw.set(s.prefix + "gc:lock", "someone-else", px=5000)
        started = time.monotonic()
        with pytest.raises(graphtape.DatabaseLocked, match="garbage collection"):
            s.write(WriteBatch(blobs={"h": b"x"}))
        assert time.monotonic() - started >= 0.3
        assert s.get_blobs(["h"]) == {}
        with pytest.raises(graphtape.DatabaseLocked):
            s.collect_garbage()
        s.delete_runs(["anything"])  # deletions only make garbage: they do not wait
        redis_raw.delete(s.prefix + "gc:lock")
        s.write(WriteBatch(blobs={"h": b"x"}))
        assert s.collect_garbage() == (1, 0)
        assert redis_raw.get(s.prefix + "gc:lock") is None  # released
    finally:
        s.close()


def test_threads_share_one_store(store):
    errors = []

    def writer(i):
        try:
            for n in range(25):
                store.write(
                    WriteBatch(
                        new_runs=[_run(f"{i}-{n}", time.time())],
                        events=[EventRow(f"{i}-{n}", 0, "run_started", 0.0, {})],
                    )
                )
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(store.list_runs(limit=None)) == 100


# -- LangGraph's checkpointer conformance suite ------------------------------------------------------


async def test_langgraph_conformance_suite_on_redis(prefixes):
    from langgraph.checkpoint.conformance import checkpointer_test, validate

    opened: list[RedisTapeStore] = []

    async def factory():
        # a fresh store (its own prefix) per capability suite, as the suite expects
        s = RedisTapeStore(url_for(prefixes()))
        opened.append(s)
        yield saver_for(s)

    registered = checkpointer_test(name="GraphtapeSaver-redis")(factory)
    try:
        report = await validate(registered)
    finally:
        for s in opened:
            s.close()
    failures = {
        cap: [str(f) for f in result.failures] for cap, result in report.results.items() if result.passed is False
    }
    assert not failures, failures
    for cap in ("put", "put_writes", "get_tuple", "list", "delete_thread"):
        assert report.results[cap].passed is True, cap
    for cap in ("copy_thread", "delete_for_runs", "prune"):
        assert report.results[cap].detected and report.results[cap].passed is True, cap


def test_checkpoint_headers_written_before_the_writers_field_still_read():
    """Schema v1 headers have seven fields; v2 adds the writers (``None``: not known)."""
    import json

    old = json.dumps(["p1", "r1", 3, "loop", "2026-01-01", {"step": 3}, {"n": "h1"}]).encode() + b"\x00body"
    row = redis_layout.decode_checkpoint("t", "", "c1", old)
    assert (row.parent_id, row.step, row.values, row.body, row.writers) == ("p1", 3, {"n": "h1"}, b"body", None)
    new = CheckpointRow("t", "", "c2", "c1", "r1", 4, "loop", "2026-01-02", {}, b"b", {}, writers="a|b")
    assert redis_layout.decode_checkpoint("t", "", "c2", redis_layout.encode_checkpoint(new)) == new
