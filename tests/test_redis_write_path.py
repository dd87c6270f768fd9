"""The Redis store's write path: one script call per batch on the store's own connections.

What is checked here is what the fast path must keep from redis-py's client
layer and the old per-batch marker: a resent batch is recognised, a lost
script cache and a dropped connection are recovered from, and the key
layout (groups listed, writes indexed) is the one older versions wrote.
Needs a Redis 7 server, as tests/test_store_redis.py.
"""

from __future__ import annotations

import socket

import pytest

redis_client = pytest.importorskip("redis")

import graphtape  # noqa: E402
from graphtape.store.base import CheckpointRow, EventRow, RunRecord, WriteBatch, WriteRow  # noqa: E402
from graphtape.store.redis import RedisTapeStore  # noqa: E402
from graphtape.store.redis_layout import encode_checkpoint, glob_escape  # noqa: E402
from tests.redis_prefixes import prefixes_fixture, redis_raw_fixture, url_for  # noqa: E402, F401


@pytest.fixture
def new_url(prefixes):
    """Hands out URLs of stores under fresh key prefixes (deleted at teardown)."""
    return lambda: url_for(prefixes())


@pytest.fixture
def store(new_url):
    s = RedisTapeStore(new_url())
    yield s
    s.close()


def _keys(redis_raw, prefix: str) -> set[str]:
    return {k.decode() for k in redis_raw.scan_iter(match=glob_escape(prefix) + "*")}


def _cp(thread: str, cid: str, ns: str = "") -> CheckpointRow:
    return CheckpointRow(
        thread_id=thread,
        checkpoint_ns=ns,
        checkpoint_id=cid,
        parent_id=None,
        run_id="r1",
        step=1,
        source="loop",
        created_at="2024",
        metadata={"step": 1},
        body=b"json\x00{}",
        values={"a": "h1"},
    )


def _step(seq: int, cid: str, thread: str = "t") -> WriteBatch:
    """A super-step's batch as a recording writes it: events, a checkpoint, its pending writes, no new run."""
    return WriteBatch(
        events=[EventRow("r1", seq, "task_started", 1.0 + seq, {"n": seq}), EventRow("r1", seq + 1, "x", 2.0, {})],
        blobs={"h1": b"value"},
        checkpoints=[_cp(thread, cid)],
        writes=[
            WriteRow(thread, "", cid, "task", "", 0, "a", "h1"),
            WriteRow(thread, "", cid, "task", "", 1, "b", "h1"),
        ],
    )


def _started(store: RedisTapeStore) -> None:
    run = RunRecord(run_id="r1", thread_id="t", graph="g", started_at=1.0, status="running")
    store.write(WriteBatch(new_runs=[run], events=[EventRow("r1", 0, "run_started", 1.0, {})]))


def test_a_resent_step_batch_counts_as_applied(store, redis_raw):
    """A batch without new runs leaves no marker key: its events, stored byte for byte, show it was applied."""
    _started(store)
    markers = {k for k in _keys(redis_raw, store.prefix) if k.startswith(store.prefix + "applied:")}
    assert len(markers) == 1  # the run's first batch: a resend of it would meet "run already in the store"
    batch = _step(1, "c1")
    store.write(batch)
    before = _keys(redis_raw, store.prefix)
    assert {k for k in before if k.startswith(store.prefix + "applied:")} == markers
    store.write(batch)  # what redis-py's resend after a lost reply sends: recognised, nothing changes
    assert _keys(redis_raw, store.prefix) == before
    assert [e.seq for e in store.events("r1")] == [0, 1, 2]
    assert len(store.get_writes("t", "", "c1")) == 2


def test_an_event_seq_taken_by_other_content_is_still_refused(store, redis_raw):
    _started(store)
    store.write(_step(1, "c1"))
    before = _keys(redis_raw, store.prefix)
    other = _step(1, "c2")
    other.events[0] = EventRow("r1", 1, "task_started", 99.0, {"n": 1})  # same seq, other content
    with pytest.raises(graphtape.StoreError, match=r"event 1 of run r1 is already in the store"):
        store.write(other)
    # one event equal and one new: not a resend either (a batch is stored whole or not at all)
    partial = _step(2, "c3")
    partial.events[0] = store.events("r1")[2]
    with pytest.raises(graphtape.StoreError, match=r"event 2 of run r1 is already in the store"):
        store.write(partial)
    assert _keys(redis_raw, store.prefix) == before
    assert store.get_checkpoint("t", "", "c2") is None and store.get_checkpoint("t", "", "c3") is None


def test_groups_are_listed_as_before(store, redis_raw):
    """A group is listed when its first checkpoint is written, also after its thread was deleted."""
    store.write(_step(1, "c1"))
    store.write(_step(3, "c2"))
    p = store.prefix
    assert redis_raw.smembers(p + "cp:groups") == {b'["t", ""]'}
    assert redis_raw.smembers(p + "cp:thread:t") == {b'["t", ""]'}
    assert redis_raw.smembers(p + "wrt:t") == {b'["t", "", "c1"]', b'["t", "", "c2"]'}
    assert [c.checkpoint_id for c in store.list_checkpoints(thread_id="t")] == ["c2", "c1"]
    store.delete_thread("t")
    assert store.list_checkpoints(thread_id="t") == [] and not redis_raw.exists(p + "cp:groups")
    store.write(_step(5, "c3"))
    assert redis_raw.smembers(p + "cp:groups") == {b'["t", ""]'}
    assert [c.checkpoint_id for c in store.list_checkpoints()] == ["c3"]
    store.delete_checkpoints([("t", "", "c3")])
    assert store.list_checkpoints() == [] and not redis_raw.exists(p + "cp:groups")


def test_keys_written_by_the_previous_version_are_read_and_extended(store, redis_raw):
    """The layout did not change: a thread written key by key as the previous script wrote it stays readable,
    and a new checkpoint joins its group."""
    p = store.prefix
    g = '["old", ""]'
    row = _cp("old", "c1")
    redis_raw.hset(p + "cp:data:" + g, "c1", encode_checkpoint(row))
    redis_raw.zadd(p + "cp:ids:" + g, {"c1": 0})
    redis_raw.sadd(p + "cp:groups", g)
    redis_raw.sadd(p + "cp:thread:old", g)
    redis_raw.hset(p + 'wr:["old", "", "c1"]', '["task", 0]', '["", "a", "h1"]')
    redis_raw.sadd(p + "wrt:old", '["old", "", "c1"]')
    assert store.get_checkpoint("old", "") == row
    store.write(_step(1, "c2", thread="old"))
    assert [c.checkpoint_id for c in store.list_checkpoints(thread_id="old")] == ["c2", "c1"]
    assert redis_raw.smembers(p + "cp:groups") == {g.encode()}
    assert [w.channel for w in store.get_writes("old", "", "c1")] == ["a"]
    store.delete_thread("old")
    assert _keys(redis_raw, p) - {p + "blob:h1", p + "ev:r1"} == {p + "schema"}


def test_a_lost_script_cache_is_refilled(store):
    """A restarted server (or SCRIPT FLUSH) has no scripts: the store loads its script and runs it."""
    store._apply.sha = "0" * 40  # a script the server does not know, as after a flush
    store.write(_step(1, "c1"))
    assert store._apply.sha != "0" * 40
    assert [e.seq for e in store.events("r1")] == [1, 2]


def test_a_dropped_connection_is_reopened(store):
    store.write(_step(1, "c1"))
    assert store._spare, "the write path keeps its connection for the next batch"
    for conn in store._spare:
        conn._sock.shutdown(socket.SHUT_RDWR)  # the server or network went away under an idle connection
    store.write(_step(3, "c2"))
    assert [c.checkpoint_id for c in store.list_checkpoints(thread_id="t")] == ["c2", "c1"]


def test_leases_and_close_use_the_own_connections(new_url):
    s = RedisTapeStore(new_url())
    assert s.acquire_lease("thread:t", "me", 30) == 1
    s.write(_step(1, "c1"), fence=("thread:t", 1))
    with pytest.raises(graphtape.LeaseLost):
        s.write(_step(3, "c2"), fence=("thread:t", 2))
    s.release_lease("thread:t", "me")
    made = list(s._made)
    assert made
    s.close()
    assert all(conn._sock is None for conn in made)


def test_a_large_blob_is_sent_once_and_again_when_it_is_gone(store, redis_raw, monkeypatch):
    """The same large input in run after run is compressed and sent once; a collected one is sent again."""
    from graphtape.store import redis_layout

    big = b"a large document " * 1000
    assert len(big) > redis_layout.COMPRESS_OVER and len(big) > 8192
    encoded: list[int] = []
    encode = redis_layout._encode_blob
    monkeypatch.setattr(redis_layout, "_encode_blob", lambda data: encoded.append(len(data)) or encode(data))

    def run_start(run_id: str) -> WriteBatch:
        run = RunRecord(run_id=run_id, thread_id=run_id, graph="g", started_at=1.0, status="running")
        return WriteBatch(
            new_runs=[run], events=[EventRow(run_id, 0, "run_started", 1.0, {})], blobs={"big": big, "s": b"x"}
        )

    store.write(run_start("r1"))
    assert sorted(encoded) == [1, len(big)]
    encoded.clear()
    store.write(run_start("r2"))
    assert encoded == [1]  # only the small one
    redis_raw.delete(store.prefix + "blob:big")  # collected meanwhile (by another process's garbage collection)
    encoded.clear()
    store.write(run_start("r3"))
    assert sorted(encoded) == [1, 1, len(big)]  # refused with nothing written, then sent whole
    assert store.get_blob("big") == big
    assert {r.run_id for r in store.list_runs()} == {"r1", "r2", "r3"}
    assert [e.seq for e in store.events("r3")] == [0]


def test_small_events_are_stored_as_json_and_large_ones_deflated(store, redis_raw):
    """Both forms are read back; an event deflated by an earlier version (all were) reads as before."""
    from graphtape.store import redis_layout
    from graphtape.store.codec import pack_event

    small = {"node_path": "n1", "step": 3, "task": "n1:abc"}
    large = {"messages": [{"role": "user", "content": "tell me about billing refunds " * 20}], "n": 1}
    events = [EventRow("r1", 1, "task_started", 1.5, small), EventRow("r1", 2, "llm", 2.5, large)]
    store.write(WriteBatch(events=events))
    stored = redis_raw.hgetall(store.prefix + "ev:r1")
    assert stored[b"1"].split(b"\x00", 2)[2] == b'{"node_path":"n1","step":3,"task":"n1:abc"}'
    assert stored[b"2"].split(b"\x00", 2)[2][:1] == b"\x01"
    assert len(stored[b"2"]) < len(str(large))
    # as the previous version wrote every event: deflated whenever that was shorter
    old = {"node_path": "n2", "step": 4, "task": "n2:" + "d" * 80, "writes": {"n": "9f2eec1e7764e510a01f60e2a15b96a5"}}
    redis_raw.hset(store.prefix + "ev:r1", "3", b"3.5\x00" + b'"task_finished"\x00' + pack_event(old))
    assert pack_event(old)[:1] == b"\x01"
    assert [(e.seq, e.kind, e.ts, e.data) for e in store.events("r1")] == [
        (1, "task_started", 1.5, small),
        (2, "llm", 2.5, large),
        (3, "task_finished", 3.5, old),
    ]
    assert redis_layout.PLAIN_EVENT_MAX >= 200  # a super-step's events stay plain


def test_threads_write_at_once_on_their_own_connections(store):
    """Each concurrent writer takes a spare connection or makes one; none is shared mid-command."""
    import threading

    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(20):
                seq = 1000 * n + 2 * i
                store.write(_step(seq, f"c{n}-{i:02d}", thread=f"t{n}"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.events("r1")) == 6 * 20 * 2
    for n in range(1, 7):
        assert len(store.list_checkpoints(thread_id=f"t{n}")) == 20
    assert 1 <= len(store._made) <= 6 and len(store._spare) == len(store._made)
