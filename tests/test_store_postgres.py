"""The PostgreSQL store: what only this backend has to get right.

The behaviour every backend shares is checked by the conformance suite (run
per backend from ``conftest.py``); here: URLs and schemas, migrations across
processes, server errors, locking, fencing against concurrent takeovers,
byte storage, and LangGraph's own checkpointer conformance on the saver.

The server comes from ``GRAPHTAPE_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Each test gets a fresh
schema that is dropped afterwards. Without a server the tests are skipped,
except under CI (``CI`` set) where that is a failure.
"""

from __future__ import annotations

import os
import random
import threading
import time
import urllib.parse
import uuid

import pytest

psycopg = pytest.importorskip("psycopg")

import graphtape  # noqa: E402
from graphtape import serde  # noqa: E402
from graphtape.errors import DatabaseLocked, LeaseLost, SchemaTooNew, StoreError  # noqa: E402
from graphtape.runtime.saver import saver_for  # noqa: E402
from graphtape.store import (  # noqa: E402
    open_store,
    postgres,
)
from graphtape.store.base import CheckpointRow, EventRow, RunRecord, WriteBatch, WriteRow  # noqa: E402
from graphtape.store.postgres import MIGRATIONS, PostgresTapeStore, parse_url  # noqa: E402

BASE_URL = os.environ.get("GRAPHTAPE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


@pytest.fixture(scope="module")
def server() -> str:
    try:
        psycopg.connect(BASE_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        shown = parse_url(BASE_URL)[2].rsplit("schema=", 1)[0].rstrip("?&")
        reason = (
            f"no PostgreSQL server at {shown} ({' '.join(str(exc).split())}); "
            "start one or point GRAPHTAPE_TEST_POSTGRES_URL at one"
        )
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return BASE_URL


@pytest.fixture
def schemas(server):
    """Make unique schema names; every one of them is dropped at teardown."""
    made: list[str] = []

    def make() -> str:
        name = f"gt_test_{uuid.uuid4().hex[:12]}"
        made.append(name)
        return name

    yield make
    with psycopg.connect(server, autocommit=True) as conn:
        for name in made:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def pg_url(server, schemas) -> str:
    return _with_schema(server, schemas())


@pytest.fixture
def store(pg_url):
    s = PostgresTapeStore(pg_url)
    yield s
    s.close()


def _sql(url: str, query: str, params=None):
    conninfo, schema, _ = parse_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else None


def _run(run_id: str | None = None, **kw) -> RunRecord:
    return RunRecord(
        run_id=run_id or uuid.uuid4().hex,
        thread_id=kw.pop("thread_id", "t"),
        graph="g",
        started_at=kw.pop("started_at", time.time()),
        **kw,
    )


def _blob(data: bytes) -> tuple[str, bytes]:
    return serde.digest(data), data


def _checkpoint(thread: str, cid: str, ns: str = "", values=None, **meta) -> CheckpointRow:
    return CheckpointRow(
        thread,
        ns,
        cid,
        None,
        meta.get("run_id"),
        meta.get("step"),
        meta.get("source"),
        "2026-01-01T00:00:00+00:00",
        meta,
        b"body-" + cid.encode(),
        values or {},
    )


# -- URLs and connections ------------------------------------------------------------


def test_url_keeps_everything_but_the_password():
    conninfo, schema, safe = parse_url("postgresql://me:s3cret@db.example:6543/tapes?schema=team&sslmode=require")
    assert schema == "team"
    assert "s3cret" not in safe and safe == "postgresql://me@db.example:6543/tapes?sslmode=require&schema=team"
    assert "schema=" not in conninfo and "s3cret" in conninfo and "sslmode=require" in conninfo
    _, schema, safe = parse_url("postgres://me@h/db?password=s3cret")
    assert schema == "graphtape" and "s3cret" not in safe


def test_url_query_reaches_libpq_byte_for_byte():
    """libpq decodes only %XX: a "+" stays a "+", a socket URL keeps its empty host."""
    conninfo, schema, safe = parse_url("postgresql:///db?host=/run/pg&application_name=a+b&schema=my%20tapes")
    assert conninfo == "postgresql:///db?host=/run/pg&application_name=a+b"
    assert schema == "my tapes" and safe.endswith("&schema=my%20tapes")


def test_libpq_options_in_the_url_apply_to_every_connection(server, schemas):
    url = _with_schema(f"{server}{'&' if '?' in server else '?'}options=-c%20statement_timeout%3D12345", schemas())
    s = PostgresTapeStore(url)
    try:
        assert s._query("SHOW statement_timeout") == [("12345ms",)]
        assert s._query("SELECT current_schemas(false)") == [([parse_url(url)[1]],)]
    finally:
        s.close()


def test_opened_store_url_hides_the_password(server, schemas):
    parts = urllib.parse.urlsplit(server)
    user = parts.username or "postgres"
    # trust authentication accepts any password: the secret reaches the server and is ignored there
    url = _with_schema(parts._replace(netloc=f"{user}:hunter2@{parts.netloc.rpartition('@')[2]}").geturl(), schemas())
    tape = graphtape.connect(url)
    try:
        assert isinstance(tape.store, PostgresTapeStore)
        assert "hunter2" not in tape.url and "schema=gt_test_" in tape.url
        assert tape.store.get_run("nope") is None
    finally:
        tape.close()


@pytest.mark.parametrize(
    "url, message",
    [
        ("postgresql://postgres@127.0.0.1:1/test", "cannot reach PostgreSQL"),  # nothing listens on port 1
        ("postgresql://postgres@127.0.0.1:notaport/test", "cannot reach PostgreSQL"),
        ("postgresql://postgres@127.0.0.1/test?bogus=1", "invalid PostgreSQL URL"),
        ("postgresql://postgres@127.0.0.1/test?schema=", "empty schema name"),
    ],
)
def test_bad_url_or_unreachable_server_is_one_clear_line(url, message):
    started = time.monotonic()
    with pytest.raises(StoreError, match=message) as info:
        open_store(url.replace("postgres@", "postgres:pw@"))
    text = str(info.value)
    assert "\n" not in text and "pw@" not in text and ("postgresql://" in text)
    assert time.monotonic() - started < 5


def test_missing_database_is_a_store_error(server):
    conninfo, _, _ = parse_url(server)
    base, _, _ = conninfo.rpartition("/")
    with pytest.raises(StoreError, match="does not exist") as info:
        PostgresTapeStore(f"{base}/graphtape_no_such_db_{uuid.uuid4().hex[:6]}")
    assert "\n" not in str(info.value)


# -- migrations -----------------------------------------------------------------------------


def test_migrations_are_idempotent(pg_url):
    first = PostgresTapeStore(pg_url)
    assert first.schema_version == len(MIGRATIONS)
    first.write(WriteBatch(new_runs=[_run("r1")]))
    second = PostgresTapeStore(pg_url)  # reopening migrates nothing and loses nothing
    try:
        assert second.schema_version == len(MIGRATIONS)
        assert second.get_run("r1") is not None
        assert _sql(pg_url, "SELECT version FROM gt_schema") == [(len(MIGRATIONS),)]
    finally:
        first.close()
        second.close()


def test_stores_opening_at_once_migrate_once(pg_url):
    barrier = threading.Barrier(4)
    opened: list[PostgresTapeStore] = []
    errors: list[BaseException] = []

    def open_one():
        barrier.wait()
        try:
            opened.append(PostgresTapeStore(pg_url))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        assert [s.schema_version for s in opened] == [len(MIGRATIONS)] * 4
        assert _sql(pg_url, "SELECT version FROM gt_schema") == [(len(MIGRATIONS),)]
    finally:
        for s in opened:
            s.close()


def test_tables_live_in_the_named_schema_only(pg_url, server):
    PostgresTapeStore(pg_url).close()
    schema = parse_url(pg_url)[1]
    rows = _sql(
        server,
        "SELECT table_schema FROM information_schema.tables WHERE table_name = 'gt_runs' AND table_schema = %s",
        (schema,),
    )
    assert rows == [(schema,)]


def test_a_user_without_create_rights_opens_an_up_to_date_store(pg_url):
    """The usual grant on a managed database: read and write the tables, create nothing."""
    PostgresTapeStore(pg_url).close()
    _, schema, _ = parse_url(pg_url)
    role = f"gt_user_{uuid.uuid4().hex[:8]}"
    try:
        _sql(pg_url, f'CREATE ROLE "{role}" LOGIN')
    except psycopg.errors.InsufficientPrivilege:
        pytest.skip("the test server's user may not create roles")
    try:
        _sql(
            pg_url,
            f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"; '
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"',
        )
        (may_create,) = _sql(
            pg_url,
            "SELECT has_database_privilege(%s, current_database(), 'CREATE') "
            "OR has_schema_privilege(%s, current_schema(), 'CREATE')",
            (role, role),
        )[0]
        assert not may_create
        parts = urllib.parse.urlsplit(pg_url)
        limited_url = parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}").geturl()
        s = PostgresTapeStore(limited_url)
        try:
            token = s.acquire_lease("thread:t", "me", ttl=30)
            s.write(WriteBatch(new_runs=[_run("r1")]), fence=("thread:t", token))
            assert s.get_run("r1") is not None
        finally:
            s.close()
    finally:
        _sql(pg_url, f'DROP OWNED BY "{role}"; DROP ROLE "{role}"')


def test_newer_schema_is_refused_not_altered(pg_url):
    PostgresTapeStore(pg_url).close()
    _sql(pg_url, "UPDATE gt_schema SET version = %s", (len(MIGRATIONS) + 5,))
    with pytest.raises(SchemaTooNew, match="upgrade graphtape"):
        PostgresTapeStore(pg_url)
    assert _sql(pg_url, "SELECT version FROM gt_schema") == [(len(MIGRATIONS) + 5,)]


# -- writes ----------------------------------------------------------------------------------


def test_a_failed_batch_writes_nothing(store):
    run = _run()
    store.write(WriteBatch(new_runs=[run], events=[EventRow(run.run_id, 0, "k", 1.0, {})]))
    h, data = _blob(b"fresh" * 500)
    chain = {serde.digest(b"node"): (None, h)}
    bad = WriteBatch(
        blobs={h: data},
        chains=chain,
        checkpoints=[_checkpoint("t", "c1")],
        writes=[WriteRow("t", "", "c1", "task", "", 0, "ch", h)],
        run_updates=[(run.run_id, {"status": "finished"})],
        events=[EventRow(run.run_id, 1, "ok", 2.0, {}), EventRow(run.run_id, 0, "dup", 2.0, {})],
    )
    with pytest.raises(StoreError, match="already in the store") as info:
        store.write(bad)
    assert "\n" not in str(info.value)
    assert store.get_blobs([h]) == {} and store.get_chain_nodes(chain) == {}
    assert store.get_checkpoint("t", "", "c1") is None and store.get_writes("t", "", "c1") == []
    assert store.get_run(run.run_id).status == "running"
    assert [e.kind for e in store.events(run.run_id)] == ["k"]


def test_writes_replace_or_keep_first_within_one_batch(store):
    w = lambda idx, value, replace: WriteRow("t", "", "c1", "task", "p", idx, "ch", value, replace)  # noqa: E731
    store.write(
        WriteBatch(
            writes=[w(0, "a", False), w(0, "b", False), w(-1, "x", True), w(-1, "y", True)],
            checkpoints=[_checkpoint("t", "c1", step=1), _checkpoint("t", "c1", step=2)],
        )
    )
    assert {(x.idx, x.value) for x in store.get_writes("t", "", "c1")} == {(0, "a"), (-1, "y")}
    assert store.get_checkpoint("t", "", "c1").step == 2


def test_one_statement_batch_applies_like_row_by_row(store):
    """The batch is one statement, whose parts share a snapshot; the result is as if applied in order."""
    old = _run("old")
    store.write(WriteBatch(new_runs=[old]))
    new = _run("new")
    store.write(
        WriteBatch(
            new_runs=[new],
            run_updates=[
                ("new", {"status": "finished", "tokens": 3}),
                ("old", {"status": "failed", "error": "x"}),
                ("new", {"tokens": 5, "meta": {"a": 1}}),
                ("old", {"error": "y"}),
                ("ghost", {"status": "failed"}),
            ],
        )
    )
    got_new, got_old = store.get_run("new"), store.get_run("old")
    assert (got_new.status, got_new.tokens, got_new.meta) == ("finished", 5, {"a": 1})
    assert (got_old.status, got_old.error) == ("failed", "y")
    assert store.get_run("ghost") is None
    assert new.status == "running"  # the caller's record is not modified


def test_lock_wait_is_bounded_and_reported(pg_url):
    s = PostgresTapeStore(pg_url, lock_timeout=0.2)
    conninfo, schema, _ = parse_url(pg_url)
    blocker = psycopg.connect(conninfo)
    try:
        blocker.execute(f'LOCK TABLE "{schema}".gt_runs IN ACCESS EXCLUSIVE MODE')
        with pytest.raises(DatabaseLocked, match="locked by another process") as info:
            s.write(WriteBatch(new_runs=[_run("r1")]))
        assert "\n" not in str(info.value)
        blocker.rollback()
        s.write(WriteBatch(new_runs=[_run("r1")]))
        assert s.get_run("r1") is not None
    finally:
        blocker.close()
        s.close()


def test_concurrent_writers_sharing_new_blobs_do_not_deadlock(pg_url, monkeypatch):
    """Writers inserting the same new content-addressed rows lock them in one order: no deadlock, no retry."""
    monkeypatch.setattr(postgres, "WRITE_ATTEMPTS", 1)  # a deadlock would surface instead of being retried
    stores = [PostgresTapeStore(pg_url) for _ in range(3)]
    # each inserted blob takes a millisecond, so that the writers' inserts overlap
    _sql(
        pg_url,
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN PERFORM pg_sleep(0.001); RETURN NEW; END $$",
    )
    _sql(pg_url, "CREATE TRIGGER slow BEFORE INSERT ON gt_blobs FOR EACH ROW EXECUTE FUNCTION slow()")
    writers, rounds = 4, 5
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        rng = random.Random(n)
        try:
            for i in range(rounds):
                # every writer of round i inserts the same new blobs, each in its own order
                blobs = [_blob(f"round {i} blob {j}".encode() * 40) for j in range(20)]
                rng.shuffle(blobs)
                run = _run(f"{n}-{i}")
                barrier.wait()
                stores[n % 3].write(
                    WriteBatch(
                        new_runs=[run],
                        blobs=dict(blobs),
                        events=[EventRow(run.run_id, 0, "task_finished", 1.0, {"writes": blobs[0][0]})],
                    )
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        assert len(stores[0].list_runs(limit=None)) == writers * rounds
    finally:
        for s in stores:
            s.close()


# -- blobs and events -----------------------------------------------------------------------------


def test_blobs_round_trip_compressed_past_one_kilobyte_without_pglz(store, pg_url):
    rng = random.Random(7)
    blobs = dict(
        [
            _blob(b""),
            _blob(b"\x00\xff binary \x00"),
            _blob(b"a" * 1024),
            _blob(b"b" * 1025),
            _blob(bytes(rng.getrandbits(8) for _ in range(300_000))),  # incompressible
            _blob(b'{"k":"' + b"v" * 2_000_000 + b'"}'),
        ]
    )
    store.write(WriteBatch(blobs=blobs))
    assert store.get_blobs([*list(blobs), "missing"]) == blobs
    enc = dict(
        _sql(pg_url, "SELECT octet_length(data), enc FROM gt_blobs WHERE octet_length(data) IN (1024, 1025)") or []
    )
    assert enc.get(1024) == "raw"
    assert "z" in {e for (e,) in _sql(pg_url, "SELECT enc FROM gt_blobs")}
    storage = _sql(
        pg_url,
        "SELECT c.relname, a.attname, a.attstorage FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
        "AND t.typname = 'bytea' AND a.attnum > 0",
    )
    assert {(r, a) for r, a, _ in storage} == {("gt_blobs", "data"), ("gt_events", "data"), ("gt_checkpoints", "body")}
    # EXTERNAL: out of line, never pglz (deflated by us); checkpoint bodies are
    # EXTENDED, compressed by the server (migration 6: we never deflate them)
    assert {(r, s) for r, _, s in storage} == {("gt_blobs", "e"), ("gt_events", "e"), ("gt_checkpoints", "x")}


def test_event_bodies_are_packed_bytes(store, pg_url):
    run = _run()
    data = {"request": "h" * 64, "response": "r" * 64, "text": "é" * 300}
    store.write(WriteBatch(new_runs=[run], events=[EventRow(run.run_id, 0, "llm_call", 1, data)]))  # int ts is fine
    assert store.events(run.run_id)[0].data == data
    assert store.events(run.run_id)[0].ts == 1.0
    (first_byte,) = _sql(pg_url, "SELECT substring(data from 1 for 1) FROM gt_events")[0]
    assert first_byte == b"\x01"  # deflated with the preset dictionary, as pack_event decided


# -- checkpoints ----------------------------------------------------------------------------------


def test_checkpoint_listing_order_before_limit_and_filters(store):
    ids = ["1ef-a", "1ef-B", "1efa", "1ef_a", "1ef.a"]  # a locale collation would order these differently
    rows = [
        _checkpoint(
            "t1",
            cid,
            step=i,
            source="loop" if i % 2 else "input",
            tags=["x", "y"] if i == 3 else ["x"],
            nested={"a": 1, "b": i},
            flag=i == 2,
        )
        for i, cid in enumerate(ids)
    ]
    rows.append(_checkpoint("t1", "1ef-c", ns="sub", step=9))
    rows.append(_checkpoint("t2", "1eg-z", step=0))
    rows.append(_checkpoint("t3", "1eg-z", step=0))  # same id in two threads (a copied thread)
    store.write(WriteBatch(checkpoints=rows))
    by_bytes = sorted(ids, reverse=True)
    listed = store.list_checkpoints(thread_id="t1", checkpoint_ns="")
    assert [r.checkpoint_id for r in listed] == by_bytes
    assert store.get_checkpoint("t1", "").checkpoint_id == by_bytes[0]
    before = store.list_checkpoints(thread_id="t1", checkpoint_ns="", before=by_bytes[1], limit=2)
    assert [r.checkpoint_id for r in before] == by_bytes[2:4]
    # newest first across threads and namespaces, even with a limit
    assert [(r.thread_id, r.checkpoint_id) for r in store.list_checkpoints(limit=3)] == [
        ("t3", "1eg-z"),
        ("t2", "1eg-z"),
        ("t1", "1efa"),
    ]

    def f(**flt):
        return [r.checkpoint_id for r in store.list_checkpoints(thread_id="t1", metadata_filter=flt)]

    assert f(source="input", step=2) == ["1efa"]
    assert f(step=9) == ["1ef-c"]
    assert f(tags=["x"]) == [c for c in by_bytes if c != "1ef_a"]  # equality, not list containment
    assert f(nested={"a": 1}) == []  # equality, not object containment
    assert f(nested={"a": 1, "b": 4}) == ["1ef.a"]
    assert f(flag=True) == ["1efa"] and f(flag=1) == []  # JSON true is not the number 1
    assert f(missing=None) == [r.checkpoint_id for r in store.list_checkpoints(thread_id="t1")]
    assert f(source="nope") == []


def test_checkpoint_values_and_metadata_round_trip(store):
    row = _checkpoint(
        "t",
        "c1",
        values={"messages": "h1", "n": "h2"},
        step=-1,
        source="input",
        writes=None,
        parents={"": "c0"},
        score=1.5,
        big=2**53 + 1,
        text="ünï",
    )
    row.body = bytes(range(256)) * 100
    store.write(WriteBatch(checkpoints=[row]))
    got = store.get_checkpoint("t", "", "c1")
    assert got == row


def test_strings_postgres_text_cannot_hold_round_trip(store):
    """NUL (which PostgreSQL text refuses) and the escape marker itself survive every column."""
    odd = ["a\x00b", "\ufdd0lead", "\x00", "plain"]
    runs = [_run(f"r{i}{o}", thread_id=o, error=f"boom {o}", meta={"k": o}) for i, o in enumerate(odd)]
    events = [EventRow(runs[0].run_id, i, o, 1.0, {"v": o}) for i, o in enumerate(odd)]
    events.append(EventRow(runs[1].run_id, 0, "llm_call", 1.0, {"messages": "c\x00"}))
    row = _checkpoint("t\x00", "c\x00", ns="n\ufdd0", values={"ch\x00": "h"}, note="x\x00y", big=1e23, tiny=5e-324)
    store.write(
        WriteBatch(
            new_runs=runs,
            events=events,
            checkpoints=[row],
            writes=[WriteRow("t\x00", "n\ufdd0", "c\x00", "task\x00", "p\x00", 0, "c\x00", "h\x00")],
            blobs={"h\x00": b"x"},
            chains={"c\x00": (None, "h\x00")},
        )
    )
    for run in runs:
        assert store.get_run(run.run_id) == run
        assert [r.run_id for r in store.list_runs(thread_id=run.thread_id)] == [run.run_id]
    assert [e.kind for e in store.events(runs[0].run_id)] == odd
    assert [e.seq for e in store.events(runs[0].run_id, ["a\x00b", "plain"])] == [0, 3]
    assert store.find_runs("r0a\x00", limit=5) == [runs[0].run_id]
    assert store.find_runs("r1", limit=5) == [runs[1].run_id]
    assert store.get_checkpoint("t\x00", "n\ufdd0") == row
    assert store.list_checkpoints(thread_id="t\x00", metadata_filter={"big": 1e23}) == [row]
    assert store.list_checkpoints(metadata_filter={"note": "x\x00y"}) == [row]  # NUL is U+FFFD on both sides
    assert [(w.task_id, w.value) for w in store.get_writes("t\x00", "n\ufdd0", "c\x00")] == [("task\x00", "h\x00")]
    assert store.get_chain("c\x00") == ["h\x00"] and store.get_blobs(["h\x00"]) == {"h\x00": b"x"}
    store.acquire_lease("lease\x00", "me\x00", ttl=30)
    assert store.lease_holder("lease\x00")[0] == "me\x00"
    store.write(
        WriteBatch(run_updates=[(runs[0].run_id, {"error": "\x00", "status": "failed"})]), fence=("lease\x00", 1)
    )
    assert store.get_run(runs[0].run_id).error == "\x00"
    assert store.collect_garbage() == (0, 0)  # the chain (an event's) and its item (also a pending write's)
    store.delete_runs([r.run_id for r in runs])
    store.delete_thread("t\x00")
    assert store.collect_garbage() == (1, 1)


# -- leases ---------------------------------------------------------------------------------------


def test_fenced_write_is_rejected_after_a_takeover(pg_url):
    old, new = PostgresTapeStore(pg_url), PostgresTapeStore(pg_url)  # two processes, in effect
    try:
        first = old.acquire_lease("thread:t", "old", ttl=0.2)
        old.write(WriteBatch(new_runs=[_run("before")]), fence=("thread:t", first))
        time.sleep(0.35)  # "old" paused past its lease
        second = new.acquire_lease("thread:t", "new", ttl=30)
        assert second == first + 1
        h, data = _blob(b"late")
        with pytest.raises(LeaseLost, match="another process") as info:
            old.write(WriteBatch(new_runs=[_run("late")], blobs={h: data}), fence=("thread:t", first))
        assert "\n" not in str(info.value)
        assert old.get_run("late") is None and old.get_blobs([h]) == {}
        new.write(WriteBatch(new_runs=[_run("after")]), fence=("thread:t", second))
        assert old.acquire_lease("thread:t", "old", ttl=30) is None
        with pytest.raises(LeaseLost):
            old.write(WriteBatch(new_runs=[_run("never")]), fence=("thread:nobody", 1))
    finally:
        old.close()
        new.close()


def test_a_takeover_waits_for_an_inflight_fenced_write(pg_url, store):
    """The fence is read FOR SHARE: no stale write can commit after the new owner got its token."""
    # a trigger holds the write open between its fence check and its commit
    _sql(
        pg_url,
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.5); RETURN NEW; END $$",
    )
    _sql(pg_url, "CREATE TRIGGER slow BEFORE INSERT ON gt_runs FOR EACH ROW EXECUTE FUNCTION slow()")
    first = store.acquire_lease("thread:t", "old", ttl=0.2)
    time.sleep(0.3)  # expired, but nobody has taken it yet: the old owner's write still passes the fence
    done: dict[str, float] = {}

    def write():
        store.write(WriteBatch(new_runs=[_run("stale")]), fence=("thread:t", first))
        done["write"] = time.monotonic()

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.15)
    second = store.acquire_lease("thread:t", "new", ttl=30)
    # The moment the new owner holds its token, the stale write has already
    # committed (the takeover waited for it): it is visible now, not later.
    committed_before_takeover = store.get_run("stale") is not None
    writer.join()
    assert second == first + 1
    assert "write" in done and committed_before_takeover
    assert store.get_run("stale") is not None


def test_lease_expiry_uses_the_server_clock(store, pg_url):
    token = store.acquire_lease("thread:e", "p1", ttl=0.3)
    owner, expires, held = store.lease_holder("thread:e")
    (now,) = _sql(pg_url, "SELECT extract(epoch FROM clock_timestamp())::float8")[0]
    assert (owner, held) == ("p1", token) and 0 < expires - now <= 0.3
    time.sleep(0.45)
    assert store.lease_holder("thread:e") is None
    # the same owner coming back after expiry may have been overtaken: it gets a new token
    assert store.acquire_lease("thread:e", "p1", ttl=30) == token + 1
    store.release_lease("thread:e", "p1")
    assert store.lease_holder("thread:e") is None
    assert store.acquire_lease("thread:e", "p2", ttl=30) == token + 2  # tokens survive release


# -- garbage collection ---------------------------------------------------------------------------


def test_garbage_collection_follows_every_referrer(store):
    msgs = [_blob(f'{{"type":"human","content":"m{i}"}}'.encode()) for i in range(3)]
    node = lambda parent, item: serde.digest(f"{parent or ''}/{item}".encode())  # noqa: E731
    c0 = node(None, msgs[0][0])
    c1 = node(c0, msgs[1][0])
    orphan_chain = node(None, msgs[2][0])
    view = serde.canonical_bytes({"messages": {"$chain": c1}})  # a blob referring to a chain
    view_h = serde.digest(view)
    write_value, cp_value, garbage = _blob(b"write value"), _blob(b"cp value" * 400), _blob(b"garbage")
    run = _run()
    store.write(
        WriteBatch(
            new_runs=[run],
            blobs=dict([*msgs, (view_h, view), write_value, cp_value, garbage]),
            chains={c0: (None, msgs[0][0]), c1: (c0, msgs[1][0]), orphan_chain: (None, msgs[2][0])},
            events=[EventRow(run.run_id, 0, "run_finished", 1.0, {"output": view_h})],
            checkpoints=[_checkpoint("t", "c1", values={"ch": cp_value[0]})],
            writes=[WriteRow("t", "", "c1", "task", "", 0, "ch", write_value[0])],
        )
    )
    assert store.collect_garbage() == (2, 1)  # garbage and m2 (only the orphan chain held it); the orphan node
    assert set(store.get_blobs([h for h, _ in msgs])) == {msgs[0][0], msgs[1][0]}
    assert store.get_chain(c1) == [msgs[0][0], msgs[1][0]]
    assert store.collect_garbage() == (0, 0)
    store.delete_thread("t")
    assert store.collect_garbage() == (2, 0)  # the checkpoint value and the pending write's value
    store.delete_runs([run.run_id])
    assert store.collect_garbage() == (3, 2)  # the view and the two messages; both chain nodes
    assert store.get_blobs([view_h]) == {}


def test_garbage_collection_never_races_a_writer(pg_url):
    """A write that starts using an unreferenced blob while a collection runs must not lose that blob.

    The writer inserts nothing (the blob exists) and commits its event while
    the collector, which did not see that event, sweeps: without the table
    locks the blob is deleted under a committed reference.
    """
    s = PostgresTapeStore(pg_url)
    try:
        # ballast: enough rows that a collection takes a while
        s.write(WriteBatch(blobs=dict(_blob(f"ballast {i}".encode()) for i in range(3000))))
        errors: list[BaseException] = []
        stop = threading.Event()

        def collector():
            try:
                while not stop.is_set():
                    s.collect_garbage()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        used = []
        gc = threading.Thread(target=collector)
        gc.start()
        try:
            for i in range(60):
                h, data = _blob(f"orphan {i}".encode())
                s.write(WriteBatch(blobs={h: data}))  # exists, referenced by nothing (yet)
                run = _run(f"r{i}")
                s.write(
                    WriteBatch(
                        new_runs=[run],
                        blobs={h: data},
                        events=[EventRow(run.run_id, 0, "run_finished", 1.0, {"output": h})],
                    )
                )
                used.append(h)
        finally:
            stop.set()
            gc.join()
        assert not errors, errors
        assert len(s.get_blobs(used)) == len(used)
    finally:
        s.close()


# -- LangGraph's checkpointer conformance on graphtape's saver ----------------------------------------


async def test_langgraph_conformance_suite_on_postgres(server, schemas):
    from langgraph.checkpoint.conformance import checkpointer_test, validate

    opened = []

    async def factory():
        tape = graphtape.connect(_with_schema(server, schemas()))  # a fresh store per capability suite
        opened.append(tape)
        yield saver_for(tape.store)

    registered = checkpointer_test(name="GraphtapeSaver[postgres]")(factory)
    try:
        report = await validate(registered)
    finally:
        for tape in opened:
            tape.close()
    failures = {
        cap: [f"{f}" for f in result.failures] for cap, result in report.results.items() if result.passed is False
    }
    assert not failures, failures
    for cap in ("put", "put_writes", "get_tuple", "list", "delete_thread"):
        assert report.results[cap].passed is True, cap
    for cap in ("copy_thread", "delete_for_runs", "prune"):
        assert report.results[cap].detected and report.results[cap].passed is True, cap
