"""The call journal (graphtape.store.journal): a completed call on SQLite is one os.write, not a commit.

What is promised: the call's rows are in the run's journal before the node
goes on, and in the store after the next step commit; the journal is emptied
after every successful flush and removed at the run's end; a failed flush
keeps it; a dead writer's journal is applied into the store once (rows the
store has are skipped), a living writer's never; PostgreSQL, Redis and
``:memory:`` commit each call as before.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import graphtape
from graphtape import clock
from graphtape.record.writer import TapeWriter
from graphtape.runtime.lease import ThreadLease
from graphtape.store import journal, open_store
from graphtape.store.base import RunRecord, WriteBatch
from tests.graphs import Linear, RandomModel

# -- the file format -----------------------------------------------------------------------------


def _rows(n: int, start: int = 0) -> tuple[list, list, list]:
    from graphtape.store.base import EventRow

    events = [EventRow("run-1", start + i, "llm_call", 1.5 + i, {"call_id": f"c{i}", "n": i}) for i in range(n)]
    blobs = [(f"{start + i:032x}", f"blob {i}".encode()) for i in range(n)]
    chains = [
        (f"{9000 + start + i:032x}", (None if i == 0 else f"{9000 + start + i - 1:032x}", blobs[i][0]))
        for i in range(n)
    ]
    return events, blobs, chains


def test_records_read_back_and_a_cut_record_is_ignored(tmp_path):
    path = tmp_path / "t.db.gtj-run-1"
    j = journal.Journal(path, "run-1", "thread:t", 7)
    j.append(*_rows(2))
    size_one = path.stat().st_size
    j.append(*_rows(1, start=2))
    header, batch = journal.read(path)
    assert header == {"run_id": "run-1", "lease": "thread:t", "token": 7}
    assert [e.seq for e in batch.events] == [0, 1, 2]
    assert batch.events[1].data == {"call_id": "c1", "n": 1} and batch.events[1].ts == 2.5
    assert batch.blobs[f"{1:032x}"] == b"blob 1" and len(batch.chains) == 3
    assert batch.chains[f"{9001:032x}"] == (f"{9000:032x}", f"{1:032x}")
    # a crash in the middle of the second write: the first record stands, the cut one is ignored
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    assert [e.seq for e in journal.read(path)[1].events] == [0, 1]
    # a damaged record (checksum) and what follows it are ignored too
    damaged = bytearray(data)
    damaged[size_one + 12] ^= 0xFF
    path.write_bytes(bytes(damaged))
    assert [e.seq for e in journal.read(path)[1].events] == [0, 1]
    j.close()
    assert path.exists()  # records not known to be in the store: kept
    j2 = journal.Journal(tmp_path / "u.db.gtj-x", "x", "thread:u", 1)
    j2.append(*_rows(1))
    j2.emptied()
    j2.close()
    assert not (tmp_path / "u.db.gtj-x").exists()


def test_only_file_backed_sqlite_journals(tmp_path, new_store_url, backend):
    store = open_store(new_store_url())
    try:
        base = journal.base_path(store)
        assert (base is not None) == (backend == "sqlite")
    finally:
        store.close()
    mem = open_store("sqlite:///:memory:")
    try:
        assert journal.base_path(mem) is None
    finally:
        mem.close()


# -- the writer -----------------------------------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path}/tape.db"


def _writer(store, thread="t1"):
    lease = ThreadLease(store, thread, ttl=30)
    lease.acquire()
    run_id = clock.new_id()
    w = TapeWriter(store, run_id)
    w.lease = lease
    w.journal_base = journal.base_path(store)
    w.new_run(RunRecord(run_id=run_id, thread_id=thread, graph="g", status="running", started_at=clock.now()))
    w.flush()
    return w, lease


def _journal_files(tmp_path: Path) -> list[Path]:
    return sorted(p for p in tmp_path.iterdir() if journal.SUFFIX in p.name)


def test_a_call_is_journaled_then_committed_with_the_next_flush(sqlite_url, tmp_path):
    store = open_store(sqlite_url)
    w, lease = _writer(store)
    try:
        ref = w.put_json({"answer": 42})
        seq = w.event("llm_call", {"call_id": "c1", "response": ref})
        w.flush_call()
        (path,) = _journal_files(tmp_path)
        assert path.name == f"tape.db{journal.SUFFIX}{w.run_id}"
        assert [e.seq for e in store.events(w.run_id)] == []  # not committed: journaled
        assert [e.seq for e in journal.read(path)[1].events] == [seq]
        w.flush_call()  # nothing new: nothing appended
        assert len(journal.read(path)[1].events) == 1
        w.flush()
        assert [e.seq for e in store.events(w.run_id)] == [seq]
        assert store.get_json(ref) == {"answer": 42}
        assert journal.read(path)[1].events == []  # emptied after the commit
        w.event("tool_call", {"call_id": "c2"})
        w.flush_call()
        assert len(journal.read(path)[1].events) == 1  # only the new row
        w.flush()
        w.close_journal()
        assert _journal_files(tmp_path) == []
    finally:
        lease.release()
        store.close()


def test_a_failed_flush_keeps_the_journal_and_the_rows(sqlite_url, tmp_path, monkeypatch):
    store = open_store(sqlite_url)
    w, lease = _writer(store)
    try:
        w.event("llm_call", {"call_id": "c1"})
        w.flush_call()
        real = store.write

        def broken(batch, fence=None):
            raise OSError("disk on fire")

        monkeypatch.setattr(store, "write", broken)
        with pytest.raises(OSError):
            w.flush()
        (path,) = _journal_files(tmp_path)
        assert len(journal.read(path)[1].events) == 1  # kept: the rows are not in the store
        w.event("tool_call", {"call_id": "c2"})
        w.flush_call()  # the put-back rows are journaled again with the new one (applying skips repeats)
        assert sorted({e.seq for e in journal.read(path)[1].events}) == [0, 1]
        w.close_journal()
        assert path.exists()  # the run's end without its rows in the store: kept for recovery
        monkeypatch.setattr(store, "write", real)
        w.flush()
        assert [e.seq for e in store.events(w.run_id)] == [0, 1]
    finally:
        lease.release()
        store.close()
    for p in _journal_files(tmp_path):
        p.unlink()


def test_a_dead_writers_journal_is_applied_once_and_a_live_ones_never(sqlite_url, tmp_path):
    store = open_store(sqlite_url)
    w, lease = _writer(store)
    other = open_store(sqlite_url)  # another process's view of the file
    try:
        first = w.event("llm_call", {"call_id": "c1", "response": w.put_json({"a": 1})})
        w.flush_call()
        w.put_messages(["ab" * 16])
        second = w.event("tool_call", {"call_id": "c2"})
        w.flush_call()
        # the writer is alive and holds its lease: nobody else touches its journal
        assert journal.apply_dead(other) == []
        assert other.events(w.run_id) == []
        # one row reached the store before the crash (a partly applied journal): skipped, not refused
        w.journal_base = None  # (the writer dies here; its journal stays as it was)
        other.write(WriteBatch(events=[r for r in w._batch.events if r.seq == first]))
        lease.stop_renewing()
        store.release_lease(lease.name, lease.owner)  # as an expired lease: held by nobody
        token_before = store.lease_holder(lease.name)
        assert token_before is None
        assert journal.apply_dead(other) == [w.run_id]
        assert [e.seq for e in other.events(w.run_id)] == [first, second]
        assert other.get_json(other.events(w.run_id)[0].data["response"]) == {"a": 1}
        assert other.get_chain_nodes(list(w._batch.chains)) != {}
        assert _journal_files(tmp_path) == []
        assert journal.apply_dead(other) == []  # once
        # applying took the lease for a moment: its token moved on, so the dead writer is fenced out
        assert other.acquire_lease(lease.name, "someone", 1.0) == lease.token + 2
    finally:
        lease.token = None
        other.close()
        store.close()


def test_a_journal_whose_lease_moved_on_is_applied(sqlite_url, tmp_path):
    store = open_store(sqlite_url)
    w, lease = _writer(store)
    try:
        seq = w.event("llm_call", {"call_id": "c1"})
        w.flush_call()
        lease.stop_renewing()
        store.release_lease(lease.name, lease.owner)
        assert store.acquire_lease(lease.name, "new-owner", 30.0) == lease.token + 1  # the thread's next run
        assert journal.apply_dead(store) == [w.run_id]
        assert [e.seq for e in store.events(w.run_id)] == [seq]
    finally:
        lease.token = None
        store.close()


# -- whole runs -----------------------------------------------------------------------------------


def _store_events(url: str, run_id: str, kind: str) -> list:
    """The run's events of ``kind`` as the store file holds them (a separate connection: another reader)."""
    raw = open_store(url)
    try:
        return raw.events(run_id, [kind])
    finally:
        raw.close()


def test_a_recorded_call_waits_for_the_step_commit_in_the_journal(sqlite_url, tmp_path):
    """Inside the node, after the model answered: the call is journaled, not yet in the store."""
    model = RandomModel()
    seen: dict = {}

    def write(s):
        model.invoke([HumanMessage("hello")])
        files = _journal_files(tmp_path)
        seen["files"] = files
        seen["journaled"] = [e.kind for f in files for e in journal.read(f)[1].events]
        return {"draft": "x"}

    b = StateGraph(Linear)
    b.add_node(write)
    b.add_edge(START, "write")
    b.add_edge("write", END)
    tape = graphtape.connect(sqlite_url)
    try:
        rec = tape.record(b.compile())
        # (durability="sync": no checkpoint of the step before is still being written, by another thread,
        # when the node looks; such a write may take the journaled call with it, which is the point)
        rec.invoke({"topic": "t"}, {"configurable": {"thread_id": "j1"}}, durability="sync")
        run_id = rec.last_run_id
        (path,) = seen["files"]
        assert path.name.endswith(run_id)
        assert "llm_call" in seen["journaled"]
        assert len(_store_events(sqlite_url, run_id, "llm_call")) == 1  # committed with the step after
        assert tape.run(run_id).status == "finished"
        assert _journal_files(tmp_path) == []
    finally:
        tape.close()


def _two_step(model, *, fail: bool = False, pause: bool = False):
    def write(s):
        draft = model.invoke([HumanMessage("draft")]).content
        if pause:
            interrupt({"ok?": draft})
        if fail:
            raise RuntimeError("node failed after its call")
        return {"draft": draft}

    b = StateGraph(Linear)
    b.add_node(write)
    b.add_edge(START, "write")
    b.add_edge("write", END)
    return b.compile()


def test_a_run_that_fails_or_pauses_keeps_its_calls_and_leaves_no_journal(sqlite_url, tmp_path):
    tape = graphtape.connect(sqlite_url)
    try:
        rec = tape.record(_two_step(RandomModel(), fail=True))
        with pytest.raises(RuntimeError):
            rec.invoke({"topic": "t"}, {"configurable": {"thread_id": "f1"}})
        failed = rec.last_run_id
        assert tape.run(failed).status == "failed"
        assert len(_store_events(sqlite_url, failed, "llm_call")) == 1
        assert _journal_files(tmp_path) == []

        rec = tape.record(_two_step(RandomModel(), pause=True))
        rec.invoke({"topic": "t"}, {"configurable": {"thread_id": "p1"}})
        paused = rec.last_run_id
        assert tape.run(paused).status == "interrupted"
        assert len(_store_events(sqlite_url, paused, "llm_call")) == 1
        rec.invoke(Command(resume="yes"), {"configurable": {"thread_id": "p1"}})
        assert _journal_files(tmp_path) == []
    finally:
        tape.close()


def test_two_runs_at_once_in_one_process(sqlite_url, tmp_path):
    tape = graphtape.connect(sqlite_url)
    started = threading.Barrier(2)
    files: list = []

    def node(s):
        RandomModel().invoke([HumanMessage("a")])
        started.wait(timeout=10)  # both runs hold a journaled call now
        files.append(len(_journal_files(tmp_path)))
        started.wait(timeout=10)
        return {"draft": "x"}

    b = StateGraph(Linear)
    b.add_node("write", node)
    b.add_edge(START, "write")
    b.add_edge("write", END)
    rec = tape.record(b.compile())
    errors: list = []

    def go(thread: str) -> None:
        try:
            rec.invoke({"topic": "t"}, {"configurable": {"thread_id": thread}}, durability="sync")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    try:
        workers = [threading.Thread(target=go, args=(f"two-{i}",)) for i in range(2)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(timeout=60)
        assert errors == []
        assert files == [2, 2]  # one journal per run
        runs = tape.runs()
        assert sorted(r.status for r in runs) == ["finished", "finished"]
        assert all(len(_store_events(sqlite_url, r.run_id, "llm_call")) == 1 for r in runs)
        assert _journal_files(tmp_path) == []
    finally:
        tape.close()


def test_other_backends_commit_each_call(new_store_url, backend):
    if backend == "sqlite":
        pytest.skip("SQLite files journal their calls (the tests above)")
    url = new_store_url()
    seen: dict = {}

    def write(s):
        RandomModel().invoke([HumanMessage("hello")])
        raw = open_store(url)
        try:
            (run,) = raw.list_runs(status="running", limit=None)
            seen["calls"] = len(raw.events(run.run_id, ["llm_call"]))
        finally:
            raw.close()
        return {"draft": "x"}

    b = StateGraph(Linear)
    b.add_node(write)
    b.add_edge(START, "write")
    b.add_edge("write", END)
    tape = graphtape.connect(url)
    try:
        tape.record(b.compile()).invoke({"topic": "t"}, {"configurable": {"thread_id": "o1"}})
        assert seen["calls"] == 1  # in the store before the node went on
    finally:
        tape.close()


# -- a real crash ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("crash", "journaled_calls"), [("after-draft-llm", 1), ("after-check-llm", 3)])
def test_a_call_killed_before_its_step_commit_is_served_from_the_journal(tmp_path, crash, journaled_calls):
    """SIGKILL after the model answered, before the step committed: the node's calls are only in the
    journal; recovery applies them and serves them (the model is asked once, the charge made once)."""
    import time

    from tests.test_recovery import ledger_counts, worker

    url = f"sqlite:///{tmp_path}/crash.db"
    ledger = tmp_path / "crash.ledger"
    crashed = worker(url, ledger, "t-journal", crash)
    assert crashed.returncode == -9, crashed.stderr
    (path,) = _journal_files(tmp_path)
    (run,) = _runs(url)
    journaled = [e for e in journal.read(path)[1].events if e.kind in ("llm_call", "effect_call")]
    assert len(journaled) == journaled_calls  # the work node's calls: journaled ...
    stored = _store_events(url, run.run_id, "llm_call")
    assert len(stored) == 1  # ... and not committed: the store has only the plan node's call
    time.sleep(0.7)  # the dead process's lease expires

    recovered = worker(url, ledger, "t-journal", mode="recover")
    assert recovered.returncode == 0, recovered.stderr
    import json

    (result,) = json.loads(recovered.stdout)
    assert result["status"] == "finished", result
    assert result["served"] == journaled_calls  # from the journal (the plan node is not run again)
    llm, effects = ledger_counts(ledger)
    assert llm["draft o-1"] == 1 and llm["plan o-1"] == 1 and llm["check ch-o-1-42"] == 1
    assert effects[("charge", "o-1")] == 1
    assert [e.data["call_id"] for e in _store_events(url, run.run_id, "llm_call")][1] == journaled[0].data["call_id"]
    assert _journal_files(tmp_path) == []


def _runs(url: str) -> list:
    raw = open_store(url)
    try:
        return raw.list_runs(limit=None)
    finally:
        raw.close()
