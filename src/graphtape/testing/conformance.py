"""The conformance suite for :class:`graphtape.TapeStore` backends, shipped so third parties can run it.

Every backend of graphtape runs this same suite. To check your own backend,
subclass :class:`StoreConformance` in a test module and provide a
``conformance_store`` fixture that yields a fresh, empty store::

    import pytest
    from graphtape.testing.conformance import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def conformance_store(self):
            store = MyStore(...)
            yield store
            store.close()

The tests only use the public store interface (``graphtape/store/base.py``)
and graphtape's own LangGraph saver built on it.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
import uuid

import pytest

from graphtape import serde
from graphtape.errors import LeaseLost, StoreError
from graphtape.store.base import ArchiveEntry, CheckpointRow, EventRow, RunRecord, WriteBatch, WriteRow


def _run(run_id: str | None = None, **kw) -> RunRecord:
    return RunRecord(
        run_id=run_id or str(uuid.uuid4()),
        thread_id=kw.pop("thread_id", "t"),
        graph=kw.pop("graph", "g"),
        started_at=kw.pop("started_at", time.time()),
        **kw,
    )


def _blob(text: str) -> tuple[str, bytes]:
    data = text.encode()
    return serde.digest(data), data


def _checkpoint(thread: str, cid: str, parent: str | None = None, ns: str = "", **meta) -> CheckpointRow:
    return CheckpointRow(
        thread_id=thread,
        checkpoint_ns=ns,
        checkpoint_id=cid,
        parent_id=parent,
        run_id=meta.get("run_id"),
        step=meta.get("step"),
        source=meta.get("source"),
        created_at="2026-01-01T00:00:00+00:00",
        metadata=meta,
        body=b"body-" + cid.encode(),
        values={},
    )


class StoreConformance:
    """Tests every TapeStore must pass. Provide a ``conformance_store`` fixture."""

    # -- runs and events ---------------------------------------------------------

    def test_run_round_trip_and_update(self, conformance_store):
        run = _run(meta={"api": "invoke", "n": 1})
        conformance_store.write(WriteBatch(new_runs=[run]))
        assert conformance_store.get_run(run.run_id) == run
        conformance_store.write(
            WriteBatch(run_updates=[(run.run_id, {"status": "finished", "ended_at": 5.0, "tokens": 7})])
        )
        got = conformance_store.get_run(run.run_id)
        assert (got.status, got.ended_at, got.tokens) == ("finished", 5.0, 7)
        assert conformance_store.get_run("nope") is None

    def test_list_runs_filters_and_orders(self, conformance_store):
        runs = [
            _run(thread_id="a" if i % 2 else "b", started_at=100.0 + i, status="finished" if i < 3 else "failed")
            for i in range(5)
        ]
        conformance_store.write(WriteBatch(new_runs=runs))
        newest = conformance_store.list_runs()
        assert [r.run_id for r in newest] == [r.run_id for r in reversed(runs)]
        assert [r.run_id for r in conformance_store.list_runs(newest_first=False, limit=2)] == [
            runs[0].run_id,
            runs[1].run_id,
        ]
        assert {r.run_id for r in conformance_store.list_runs(thread_id="a")} == {runs[1].run_id, runs[3].run_id}
        assert {r.run_id for r in conformance_store.list_runs(status="failed")} == {runs[3].run_id, runs[4].run_id}
        assert len(conformance_store.list_runs(limit=None)) == 5

    def test_list_runs_by_graph_mode_and_time_window(self, conformance_store):
        runs = [
            _run(
                f"w{i:02d}",
                thread_id=f"t{i % 3}",
                graph="agent" if i % 2 else "pipeline",
                mode="strict" if i % 5 == 0 else "record",
                status="failed" if i % 4 == 0 else "finished",
                started_at=1000.0 + i,
            )
            for i in range(20)
        ]
        conformance_store.write(WriteBatch(new_runs=runs))

        def ids(**kw):
            return [r.run_id for r in conformance_store.list_runs(limit=None, **kw)]

        def expect(keep, newest_first=True):
            chosen = [r for r in runs if keep(r)]
            chosen.sort(key=lambda r: r.started_at, reverse=newest_first)
            return [r.run_id for r in chosen]

        assert ids(graph="agent") == expect(lambda r: r.graph == "agent")
        assert ids(mode="strict") == expect(lambda r: r.mode == "strict")
        assert ids(since=1005.0, until=1009.0) == expect(lambda r: 1005 <= r.started_at <= 1009)
        both = ids(graph="pipeline", status="failed", since=1002.0, thread_id="t2")
        assert (
            both
            == ["w08"]
            == expect(
                lambda r: (
                    r.graph == "pipeline" and r.status == "failed" and r.started_at >= 1002 and r.thread_id == "t2"
                )
            )
        )
        assert ids(graph="agent", newest_first=False) == expect(lambda r: r.graph == "agent", newest_first=False)
        assert ids(graph="nothing") == [] and ids(since=2000.0) == []
        # counts: the same filters; ``limit`` counts at most that many
        assert conformance_store.count_runs() == 20
        assert conformance_store.count_runs(graph="agent", status="finished") == len(
            expect(lambda r: r.graph == "agent" and r.status == "finished")
        )
        assert conformance_store.count_runs(since=1005.0, until=1009.0) == 5
        assert conformance_store.count_runs(thread_id="t1") == 7
        assert conformance_store.count_runs(limit=3) == 3
        assert conformance_store.count_runs(graph="agent", limit=4) == 4
        assert conformance_store.count_runs(mode="strict", limit=100) == 4

    def test_list_runs_pages_by_cursor_and_offset(self, conformance_store):
        # ties on started_at (three runs per instant) go by run id within the listing's order
        runs = [_run(f"p{i:02d}", started_at=500.0 + i // 3, graph="g" if i % 4 else "h") for i in range(30)]
        conformance_store.write(WriteBatch(new_runs=runs))
        for newest_first in (True, False):
            for graph in (None, "g"):
                whole = conformance_store.list_runs(limit=None, newest_first=newest_first, graph=graph)
                assert len(whole) == (30 if graph is None else 22)
                starts = [r.started_at for r in whole]
                assert starts == sorted(starts, reverse=newest_first)
                for a, b in itertools.pairwise(whole):
                    assert a.started_at != b.started_at or a.run_id < b.run_id  # ties by run id
                paged: list[str] = []
                after = None
                while True:
                    page = conformance_store.list_runs(limit=4, newest_first=newest_first, graph=graph, after=after)
                    paged += [r.run_id for r in page]
                    if len(page) < 4:
                        break
                    after = (page[-1].started_at, page[-1].run_id)
                assert paged == [r.run_id for r in whole]
                for offset in (0, 5, 21, 40):
                    page = conformance_store.list_runs(limit=4, offset=offset, newest_first=newest_first, graph=graph)
                    assert [r.run_id for r in page] == [r.run_id for r in whole[offset : offset + 4]]
                rest = conformance_store.list_runs(limit=None, offset=7, newest_first=newest_first, graph=graph)
                assert [r.run_id for r in rest] == [r.run_id for r in whole[7:]]
        # a cursor with a time window: the window bounds it on both sides
        window = conformance_store.list_runs(limit=None, since=503.0, until=506.0, after=(505.0, "p16"))
        assert [r.run_id for r in window] == ["p17", "p12", "p13", "p14", "p09", "p10", "p11"]

    def test_find_runs_by_prefix(self, conformance_store):
        conformance_store.write(WriteBatch(new_runs=[_run("abc_1"), _run("abc%2"), _run("xyz")]))
        assert conformance_store.find_runs("abc_", limit=5) == ["abc_1"]
        assert conformance_store.find_runs("abc%", limit=5) == ["abc%2"]
        assert conformance_store.find_runs("q", limit=5) == []

    def test_events_are_ordered_and_filtered(self, conformance_store):
        run = _run()
        events = [
            EventRow(run.run_id, i, "a" if i % 2 else "b", 1.0 + i, {"i": i, "text": "x" * (i * 60)}) for i in range(6)
        ]
        conformance_store.write(WriteBatch(new_runs=[run], events=list(reversed(events))))
        assert [e.seq for e in conformance_store.events(run.run_id)] == list(range(6))
        assert [e.data for e in conformance_store.events(run.run_id)] == [e.data for e in events]
        assert [e.seq for e in conformance_store.events(run.run_id, ["a"])] == [1, 3, 5]
        assert conformance_store.events("other") == []

    def test_a_failing_batch_writes_nothing(self, conformance_store):
        run = _run()
        conformance_store.write(WriteBatch(new_runs=[run], events=[EventRow(run.run_id, 0, "k", 1.0, {})]))
        h, data = _blob("fresh blob")
        bad = WriteBatch(
            events=[EventRow(run.run_id, 0, "dup", 2.0, {})], blobs={h: data}, checkpoints=[_checkpoint("t", "c1")]
        )
        with pytest.raises(StoreError):
            conformance_store.write(bad)
        assert conformance_store.get_blobs([h]) == {}
        assert conformance_store.get_checkpoint("t", "", "c1") is None
        assert [e.kind for e in conformance_store.events(run.run_id)] == ["k"]

    def test_duplicate_run_is_refused(self, conformance_store):
        run = _run()
        conformance_store.write(WriteBatch(new_runs=[run]))
        with pytest.raises(StoreError):
            conformance_store.write(WriteBatch(new_runs=[run]))

    # -- blobs and chains --------------------------------------------------------------

    def test_blobs_are_content_addressed_and_idempotent(self, conformance_store):
        small = _blob("small")
        large = _blob("L" * 50_000)
        conformance_store.write(WriteBatch(blobs=dict([small, large])))
        conformance_store.write(WriteBatch(blobs=dict([small])))
        assert conformance_store.get_blobs([small[0], large[0], "missing"]) == dict([small, large])
        with pytest.raises(StoreError):
            conformance_store.get_blob("missing")

    def test_chains_share_prefixes(self, conformance_store):
        items = [_blob(f"m{i}") for i in range(5)]
        chains: dict[str, tuple[str | None, str]] = {}
        heads = []
        parent = None
        for h, _ in items:
            cid = serde.digest(f"{parent or ''}/{h}")
            chains[cid] = (parent, h)
            heads.append(cid)
            parent = cid
        conformance_store.write(WriteBatch(blobs=dict(items), chains=chains))
        assert conformance_store.get_chain(heads[-1]) == [h for h, _ in items]
        assert conformance_store.get_chain(heads[1]) == [items[0][0], items[1][0]]
        assert conformance_store.get_chain(None) == []
        assert set(conformance_store.get_chain_nodes(heads)) == set(heads)

    # -- checkpoints ----------------------------------------------------------------------

    def test_checkpoints_latest_by_id_and_listing(self, conformance_store):
        rows = [
            _checkpoint("t1", f"c{i}", f"c{i - 1}" if i else None, step=i, source="loop", user="u" if i % 2 else "v")
            for i in range(5)
        ]
        rows.append(_checkpoint("t1", "s0", ns="sub:1", step=0))
        rows.append(_checkpoint("t2", "c9", step=0))
        conformance_store.write(WriteBatch(checkpoints=rows))
        assert conformance_store.get_checkpoint("t1", "").checkpoint_id == "c4"
        assert conformance_store.get_checkpoint("t1", "", "c2").parent_id == "c1"
        assert conformance_store.get_checkpoint("t1", "sub:1").checkpoint_id == "s0"
        assert conformance_store.get_checkpoint("t3", "") is None
        listed = conformance_store.list_checkpoints(thread_id="t1", checkpoint_ns="")
        assert [r.checkpoint_id for r in listed] == ["c4", "c3", "c2", "c1", "c0"]
        assert listed[0].metadata == {"step": 4, "source": "loop", "user": "v"}
        assert listed[0].body == b"body-c4"
        assert [
            r.checkpoint_id
            for r in conformance_store.list_checkpoints(thread_id="t1", checkpoint_ns="", before="c3", limit=2)
        ] == ["c2", "c1"]
        assert [
            r.checkpoint_id for r in conformance_store.list_checkpoints(thread_id="t1", metadata_filter={"user": "u"})
        ] == ["c3", "c1"]
        assert {r.checkpoint_id for r in conformance_store.list_checkpoints(thread_id="t1")} == {
            "c0",
            "c1",
            "c2",
            "c3",
            "c4",
            "s0",
        }
        assert len(conformance_store.list_checkpoints()) == 7

    def test_checkpoint_writers_and_calls_round_trip(self, conformance_store):
        # None: not known (written outside a recorded run); "": known to be none; else the listed value
        writers = [None, "", "agent", "review_a|review_b", "sub/inner"]
        calls = [None, "", '[["llm","m","live","c1","agent",0]]', "", '[["tool","search","tape","c2","tools",1]]']
        rows = []
        for i, (w, c) in enumerate(zip(writers, calls)):
            row = _checkpoint("w", f"c{i}", f"c{i - 1}" if i else None, step=i, source="loop")
            row.writers, row.calls = w, c
            rows.append(row)
        conformance_store.write(WriteBatch(checkpoints=rows))
        listed = conformance_store.list_checkpoints(thread_id="w", checkpoint_ns="")
        assert [r.writers for r in reversed(listed)] == writers
        assert [r.calls for r in reversed(listed)] == calls
        got = conformance_store.get_checkpoint("w", "", "c3")
        assert (got.writers, got.calls) == ("review_a|review_b", "")
        got = conformance_store.get_checkpoint("w", "", "c0")
        assert (got.writers, got.calls) == (None, None)

    def test_pending_writes_replace_or_keep_first(self, conformance_store):
        h1, d1 = _blob("v1")
        h2, d2 = _blob("v2")
        w = lambda idx, value, replace: WriteRow("t", "", "c1", "task", "path", idx, "ch", value, replace)  # noqa: E731
        conformance_store.write(WriteBatch(blobs={h1: d1, h2: d2}, writes=[w(0, h1, False), w(-1, h1, True)]))
        conformance_store.write(WriteBatch(writes=[w(0, h2, False), w(-1, h2, True)]))
        got = {(x.idx, x.value) for x in conformance_store.get_writes("t", "", "c1")}
        assert got == {(0, h1), (-1, h2)}

    def test_delete_thread_and_checkpoints(self, conformance_store):
        conformance_store.write(
            WriteBatch(
                checkpoints=[_checkpoint("t1", "c1"), _checkpoint("t1", "c2"), _checkpoint("t2", "c1")],
                writes=[WriteRow("t1", "", "c1", "task", "", 0, "ch", "h")],
            )
        )
        conformance_store.delete_checkpoints([("t1", "", "c2")])
        assert [r.checkpoint_id for r in conformance_store.list_checkpoints(thread_id="t1")] == ["c1"]
        conformance_store.delete_thread("t1")
        assert conformance_store.list_checkpoints(thread_id="t1") == []
        assert conformance_store.get_writes("t1", "", "c1") == []
        assert conformance_store.get_checkpoint("t2", "", "c1") is not None

    def test_remove_thread_takes_runs_and_checkpoints_together(self, conformance_store):
        gone, kept = _run(thread_id="t1"), _run(thread_id="t2")
        conformance_store.write(
            WriteBatch(
                new_runs=[gone, kept],
                events=[EventRow(r.run_id, 0, "run_started", 1.0, {}) for r in (gone, kept)],
                checkpoints=[_checkpoint("t1", "c1"), _checkpoint("t2", "c1")],
                writes=[WriteRow("t1", "", "c1", "task", "", 0, "ch", "h")],
            )
        )
        entry = ArchiveEntry("t1", "/cold/t1.tape.jsonl.gz", 1000.0, 123, "ab" * 32, 1)
        assert conformance_store.archived_threads() == []
        conformance_store.remove_thread("t1", [gone.run_id], archived=entry)
        assert conformance_store.archived_threads() == [entry]
        assert conformance_store.archived_threads("t1") == [entry]
        assert conformance_store.archived_threads("t2") == []
        conformance_store.remove_thread(
            "t3", [], archived=dataclasses.replace(entry, thread_id="t3", archived_at=2000.0)
        )
        assert [e.thread_id for e in conformance_store.archived_threads()] == ["t3", "t1"]  # newest first
        conformance_store.forget_archive("t3")
        conformance_store.forget_archive("t3")  # a no-op the second time
        assert conformance_store.archived_threads() == [entry]
        assert conformance_store.get_run(gone.run_id) is None
        assert conformance_store.events(gone.run_id) == []
        assert conformance_store.list_checkpoints(thread_id="t1") == []
        assert conformance_store.get_writes("t1", "", "c1") == []
        assert conformance_store.get_run(kept.run_id) is not None
        assert len(conformance_store.events(kept.run_id)) == 1
        assert conformance_store.get_checkpoint("t2", "", "c1") is not None

    # -- history listings --------------------------------------------------------------------------

    def test_checkpoint_listing_rows_keys_and_copies(self, conformance_store):
        from graphtape.store.listing import RowKeys

        rows = [
            _checkpoint("h", f"c{i}", f"c{i - 1}" if i else None, step=i, source="loop", run_id="r1") for i in range(3)
        ]
        rows[1].writers, rows[1].calls = "agent|tools", '[["llm","m","live","c1","agent",0]]'
        rows[2].writers = ""
        copy = _checkpoint("h", "c3", "c2", step=3, source="update", graphtape_copied_from="c1")
        sub = _checkpoint("h", "s0", ns="sub:1", step=0, run_id="r1")
        conformance_store.write(WriteBatch(checkpoints=[rows[2], copy, rows[0], sub, rows[1]]))
        assert conformance_store.has_checkpoints("h") and not conformance_store.has_checkpoints("other")
        listing = conformance_store.checkpoint_listing("h")
        assert [tuple(r) for r in listing.rows] == [
            ("c0", None, 0, "2026-01-01T00:00:00+00:00", listing.rows[0][4], None),
            ("c1", "c0", 1, "2026-01-01T00:00:00+00:00", listing.rows[1][4], '[["llm","m","live","c1","agent",0]]'),
            ("c2", "c1", 2, "2026-01-01T00:00:00+00:00", listing.rows[2][4], None),
            ("c3", "c2", 3, "2026-01-01T00:00:00+00:00", listing.rows[3][4], None),
        ]
        keys = RowKeys()
        assert [keys[r[4]] for r in listing.rows] == [
            ("r1", "loop", None),
            ("r1", "loop", ("agent", "tools")),
            ("r1", "loop", ()),
            (None, "update", None),
        ]
        assert listing.copies == {"c3": "c1"}
        with_ns = conformance_store.checkpoint_listing("h", namespaces=True)
        assert sorted((r[0], r[6]) for r in with_ns.rows) == [
            ("c0", ""),
            ("c1", ""),
            ("c2", ""),
            ("c3", ""),
            ("s0", "sub:1"),
        ]
        assert [r[0] for r in with_ns.rows] == sorted(r[0] for r in with_ns.rows)
        assert conformance_store.checkpoint_listing("none") == ([], {})

    def test_find_checkpoints_by_prefix(self, conformance_store):
        conformance_store.write(
            WriteBatch(
                checkpoints=[
                    _checkpoint("t1", "1f0a-1", step=1, source="loop", run_id="r", graphtape_run_id="r"),
                    _checkpoint("t1", "1f0a-2", step=2, source="loop", run_id="r", graphtape_run_id="r"),
                    _checkpoint("t2", "1f0b-1", step=0, source="update"),
                ]
            )
        )
        found = conformance_store.find_checkpoints("1f0a", thread_id="t1")
        assert sorted(found) == [("t1", "", "1f0a-1", "r", 1, "loop"), ("t1", "", "1f0a-2", "r", 2, "loop")]
        assert conformance_store.find_checkpoints("1f0a", thread_id="t2") == []
        assert conformance_store.find_checkpoints("1f0b", outside_runs=True) == [
            ("t2", "", "1f0b-1", None, 0, "update")
        ]
        assert conformance_store.find_checkpoints("1f0a", outside_runs=True) == []
        # a recorded run's checkpoint names its run in its row only (its metadata is the user's); an
        # unrecorded run's "run_id" metadata (LangGraph's server sets one) names no run on the store
        recorded = _run(thread_id="t3")
        in_run = dataclasses.replace(_checkpoint("t3", "1f0c-1", step=1, source="loop"), run_id=recorded.run_id)
        outside = _checkpoint("t3", "1f0c-2", step=2, source="loop", run_id="a-server-run")
        conformance_store.write(WriteBatch(new_runs=[recorded], checkpoints=[in_run, outside]))
        assert conformance_store.find_checkpoints("1f0c", outside_runs=True) == [
            ("t3", "", "1f0c-2", "a-server-run", 2, "loop")
        ]
        if conformance_store.finds_checkpoints_by_prefix:
            assert [m[2] for m in conformance_store.find_checkpoints("1f0b-")] == ["1f0b-1"]

    def test_listed_events_and_replays(self, conformance_store):
        first, second = _run(started_at=1.0), _run(started_at=2.0)
        replay = _run(started_at=3.0, replay_of=first.run_id)
        task = {"step": 1, "node_path": "agent", "task": "agent:1", "text": "x" * 300}  # large: stored deflated
        conformance_store.write(
            WriteBatch(
                new_runs=[replay, second, first],
                events=[
                    EventRow(first.run_id, 0, "task_started", 1.0, {"step": 0, "node_path": "n", "task": "n:0"}),
                    EventRow(first.run_id, 1, "llm_call", 1.5, {"model": "m"}),
                    EventRow(first.run_id, 2, "task_started", 2.0, task),
                    EventRow(second.run_id, 0, "label", 3.0, {"label": "x"}),
                ],
            )
        )
        got = list(conformance_store.listed_events([first.run_id, second.run_id], ["task_started", "label"]))
        # each run's events in seq order, the runs in any order
        assert [e[1] for e in got if e[0] == first.run_id] == [0, 2]
        listed = sorted(got, key=lambda e: (e[0] != first.run_id, e[1]))
        assert [(e[0], e[1], e[2], e[3], e[4], e[5], e[6]) for e in listed] == [
            (first.run_id, 0, "task_started", 1.0, 0, "n", "n:0"),
            (first.run_id, 2, "task_started", 2.0, 1, "agent", "agent:1"),
            (second.run_id, 0, "label", 3.0, None, None, None),
        ]
        assert listed[1][7] in (None, task) and listed[2][7] == {"label": "x"}
        assert list(conformance_store.listed_events([second.run_id], ["llm_call"])) == []
        assert [r.run_id for r in conformance_store.list_replays()] == [replay.run_id]

    def test_used_bytes_is_known_or_none(self, conformance_store):
        conformance_store.write(WriteBatch(blobs=dict([_blob("some bytes" * 100)])))
        used = conformance_store.used_bytes()
        assert used is None or (isinstance(used, int) and used > 0)

    # -- retention ------------------------------------------------------------------------------

    def test_delete_runs_and_collect_garbage(self, conformance_store):
        keep, drop = _run(), _run()
        kept_blob, dropped_blob, shared = _blob("kept"), _blob("dropped"), _blob("shared")
        conformance_store.write(
            WriteBatch(
                new_runs=[keep, drop],
                blobs=dict([kept_blob, dropped_blob, shared]),
                events=[
                    EventRow(keep.run_id, 0, "run_finished", 1.0, {"output": kept_blob[0]}),
                    EventRow(keep.run_id, 1, "task_finished", 1.0, {"writes": shared[0]}),
                    EventRow(drop.run_id, 0, "run_finished", 1.0, {"output": dropped_blob[0]}),
                    EventRow(drop.run_id, 1, "task_finished", 1.0, {"writes": shared[0]}),
                ],
            )
        )
        conformance_store.delete_runs([drop.run_id])
        assert conformance_store.get_run(drop.run_id) is None and conformance_store.events(drop.run_id) == []
        removed_blobs, _ = conformance_store.collect_garbage()
        assert removed_blobs == 1
        assert set(conformance_store.get_blobs([kept_blob[0], dropped_blob[0], shared[0]])) == {kept_blob[0], shared[0]}

    def test_garbage_collection_keeps_what_checkpoints_and_messages_use(self, conformance_store):
        msg = _blob('{"type":"human","content":"hi"}')
        envelope = serde.canonical_bytes({"t": "msg", "h": msg[0]})
        env_h = serde.digest(envelope)
        value = _blob("checkpoint value")
        run = _run()
        row = _checkpoint("t", "c1")
        row.values = {"ch": value[0]}
        conformance_store.write(
            WriteBatch(
                new_runs=[run],
                blobs=dict([msg, value, (env_h, envelope)]),
                checkpoints=[row],
                events=[EventRow(run.run_id, 0, "run_finished", 1.0, {"output": env_h})],
            )
        )
        assert conformance_store.collect_garbage() == (0, 0)
        assert len(conformance_store.get_blobs([msg[0], value[0], env_h])) == 3

    # -- leases -----------------------------------------------------------------------------------

    def test_lease_is_exclusive_and_fenced(self, conformance_store):
        first = conformance_store.acquire_lease("thread:t", "p1", ttl=30)
        assert first is not None
        assert conformance_store.acquire_lease("thread:t", "p2", ttl=30) is None
        assert conformance_store.acquire_lease("thread:t", "p1", ttl=30) == first  # renewal keeps the token
        owner, expires, token = conformance_store.lease_holder("thread:t")
        assert (owner, token) == ("p1", first) and expires > time.time()
        run = _run()
        conformance_store.write(WriteBatch(new_runs=[run]), fence=("thread:t", first))
        conformance_store.release_lease("thread:t", "p1")
        assert conformance_store.lease_holder("thread:t") is None
        second = conformance_store.acquire_lease("thread:t", "p2", ttl=30)
        assert second is not None and second > first
        with pytest.raises(LeaseLost):
            conformance_store.write(WriteBatch(new_runs=[_run()]), fence=("thread:t", first))
        assert len(conformance_store.list_runs()) == 1

    def test_expired_lease_can_be_taken_over(self, conformance_store):
        first = conformance_store.acquire_lease("thread:x", "dead", ttl=0.2)
        time.sleep(0.35)
        assert conformance_store.lease_holder("thread:x") is None
        second = conformance_store.acquire_lease("thread:x", "alive", ttl=30)
        assert second is not None and second > first
        conformance_store.release_lease("thread:x", "dead")  # the late owner cannot release it
        assert conformance_store.lease_holder("thread:x")[0] == "alive"

    def test_only_one_of_many_racing_owners_wins(self, conformance_store):
        wins: list[str] = []
        barrier = threading.Barrier(6)

        def race(i: int) -> None:
            barrier.wait()
            if conformance_store.acquire_lease("thread:race", f"p{i}", ttl=30) is not None:
                wins.append(f"p{i}")

        threads = [threading.Thread(target=race, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1

    # -- graphtape's LangGraph saver on the store ------------------------------------------------------

    def test_saver_stores_unchanged_values_once(self, conformance_store):
        from langgraph.checkpoint.base import empty_checkpoint

        from graphtape.runtime.saver import saver_for

        saver = saver_for(conformance_store)
        big = "x" * 100_000
        config = {"configurable": {"thread_id": "big", "checkpoint_ns": ""}}
        versions = {"big": saver.get_next_version(None, None), "n": saver.get_next_version(None, None)}
        for step in range(5):
            cp = empty_checkpoint()
            cp["channel_values"] = {"big": big, "n": step}
            new = {"n": saver.get_next_version(versions["n"], None)}
            if step == 0:
                new["big"] = versions["big"]
            versions.update(new)
            cp["channel_versions"] = dict(versions)
            config = saver.put(config, cp, {"source": "loop", "step": step}, new)
        rows = conformance_store.list_checkpoints(thread_id="big")
        assert len(rows) == 5
        assert len({r.values["big"] for r in rows}) == 1
        latest = saver.get_tuple({"configurable": {"thread_id": "big", "checkpoint_ns": ""}})
        assert latest.checkpoint["channel_values"] == {"big": big, "n": 4}
