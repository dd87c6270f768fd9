"""The call journal: a completed call is safe with one file append; a dead writer's calls reach the store."""

from __future__ import annotations

import operator
import os
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

import graphtape
from graphtape.record import checkpoints as checkpoints_mod
from graphtape.record import writer as writer_mod
from graphtape.store import journal
from graphtape.store.base import EventRow, WriteBatch
from graphtape.store.sqlite import SqliteTapeStore
from graphtape.testing import SeededChatModel

N_NODES = 4
CALL_KINDS = ("llm_call", "tool_call")


class Notes(TypedDict):
    notes: Annotated[list, operator.add]


@tool
def lookup(query: str) -> str:
    """Look the query up."""
    return f"kb: {len(query)}"


def calls_graph() -> Any:
    model = SeededChatModel(seed=3)

    def node(i: int):
        def step(state: Notes) -> dict[str, Any]:
            answer = model.invoke([HumanMessage(f"step {i}: {len(state['notes'])}")])
            return {"notes": [f"{answer.content} | {lookup.invoke({'query': str(answer.content)})}"]}

        return step

    builder = StateGraph(Notes)
    prev = START
    for i in range(N_NODES):
        builder.add_node(f"n{i}", node(i))
        builder.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    builder.add_edge(prev, END)
    return builder.compile()


def count_writes(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[WriteBatch]:
    """Every batch the store is asked to write from now on."""
    seen: list[WriteBatch] = []
    original = type(store).write

    def write(self: Any, batch: WriteBatch, **kw: Any) -> None:
        seen.append(batch)
        original(self, batch, **kw)

    monkeypatch.setattr(type(store), "write", write)
    return seen


def call_events(tape: graphtape.Tape, run_id: str) -> list[EventRow]:
    return [e for e in tape.store.events(run_id) if e.kind in CALL_KINDS]


# -- recording ---------------------------------------------------------------------------------


def test_completed_calls_ride_with_the_next_checkpoint(tape, backend, monkeypatch):
    """On SQLite a completed call is a journal append, not a transaction; elsewhere it is written at once."""
    # calls further apart than this are written at once, and journaled ones by the background writer
    # after it: a loaded machine must not change what is counted
    monkeypatch.setattr(writer_mod, "FLUSH_INTERVAL", 60.0)
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 60.0)
    rec = tape.record(calls_graph(), name="calls")
    appends: list[int] = []
    original = journal.CallJournal.append

    def append(self: journal.CallJournal, batch: WriteBatch) -> None:
        appends.append(len(batch.events))
        original(self, batch)

    monkeypatch.setattr(journal.CallJournal, "append", append)
    writes = count_writes(tape.store, monkeypatch)
    rec.invoke({"notes": []}, {"configurable": {"thread_id": "t1"}})
    run_id = rec.last_run_id
    calls = call_events(tape, run_id)
    assert len(calls) == 2 * N_NODES
    with_calls = [b for b in writes if any(e.kind in CALL_KINDS for e in b.events)]
    if backend == "sqlite":
        # (a call buffered while a checkpoint is written goes with it: not every call needs the journal)
        assert 1 <= len(appends) <= 2 * N_NODES and all(n >= 1 for n in appends)
        # every call event went to the store with a checkpoint or the run's end, never on its own
        assert all(b.checkpoints or b.run_updates for b in with_calls), [len(b.events) for b in with_calls]
        assert len(with_calls) <= N_NODES + 1
        folder = journal.journal_dir(Path(tape.store.path))
        assert list(folder.iterdir()) == []  # the run's journal is gone once its rows are stored
    else:
        assert appends == []
        assert len(with_calls) >= 2 * N_NODES  # one write per completed call


def test_a_failing_journal_falls_back_to_writing_each_call(tmp_path, monkeypatch):
    tape = graphtape.connect(f"sqlite:///{tmp_path}/t.db")
    try:
        tries: list[int] = []

        def broken(self: journal.CallJournal, batch: WriteBatch) -> None:
            tries.append(1)
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(journal.CallJournal, "append", broken)
        monkeypatch.setattr(writer_mod, "FLUSH_INTERVAL", 60.0)
        writes = count_writes(tape.store, monkeypatch)
        rec = tape.record(calls_graph(), name="calls")
        rec.invoke({"notes": []}, {"configurable": {"thread_id": "t1"}})
        assert len(call_events(tape, rec.last_run_id)) == 2 * N_NODES
        # the call that found the journal broken was written at once, and the run wrote every later call
        # at once (or with a checkpoint written meanwhile) without trying the journal again
        assert tries == [1]
        assert sum(any(e.kind in CALL_KINDS for e in b.events) for b in writes) >= N_NODES
        assert rec.last_status == "finished"
        assert list(journal.journal_dir(Path(tape.store.path)).iterdir()) == []
    finally:
        tape.close()


def test_calls_far_apart_are_written_at_once(tmp_path, monkeypatch):
    """A call that ends long after the run's last write (a hosted model's) is written to the store at once."""
    monkeypatch.setattr(writer_mod, "FLUSH_INTERVAL", 0.0)
    tape = graphtape.connect(f"sqlite:///{tmp_path}/t.db")
    try:
        appends: list[int] = []
        monkeypatch.setattr(journal.CallJournal, "append", lambda self, batch: appends.append(1))
        writes = count_writes(tape.store, monkeypatch)
        rec = tape.record(calls_graph(), name="calls")
        rec.invoke({"notes": []}, {"configurable": {"thread_id": "t1"}})
        assert appends == [] and not journal.journal_dir(Path(tape.store.path)).exists()
        assert len(call_events(tape, rec.last_run_id)) == 2 * N_NODES
        assert sum(any(e.kind in CALL_KINDS for e in b.events) for b in writes) >= N_NODES
    finally:
        tape.close()


def test_a_journaled_call_is_seen_by_another_process_while_its_node_waits(tmp_path):
    """The journal keeps a call safe; the background writer makes it visible within ~FLUSH_INTERVAL."""
    import threading

    model = SeededChatModel(seed=5)
    gate = threading.Event()

    def slow(state: Notes) -> dict[str, Any]:
        time.sleep(0.3)  # the step's checkpoint is written by now: the call is not taken with it
        answer = model.invoke([HumanMessage("hello")])
        gate.wait(30)  # a node that goes on long after its call
        return {"notes": [str(answer.content)]}

    builder = StateGraph(Notes)
    builder.add_node("slow", slow)
    builder.add_edge(START, "slow")
    builder.add_edge("slow", END)
    tape = graphtape.connect(f"sqlite:///{tmp_path}/t.db")
    reader = SqliteTapeStore(tmp_path / "t.db")
    try:
        appends: list[int] = []
        original = journal.CallJournal.append

        def append(self: journal.CallJournal, batch: WriteBatch) -> None:
            appends.append(1)
            original(self, batch)

        rec = tape.record(builder.compile(), name="slow", checkpointer=tape.saver)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(journal.CallJournal, "append", append)
            mp.setattr(writer_mod, "FLUSH_INTERVAL", 5.0)  # the call goes to the journal, however slow the machine
            worker = threading.Thread(target=rec.invoke, args=({"notes": []}, {"configurable": {"thread_id": "s"}}))
            worker.start()
            try:
                deadline = time.monotonic() + 20
                seen = False
                while time.monotonic() < deadline and not seen:
                    runs = reader.list_runs(thread_id="s", limit=1)
                    seen = bool(runs) and bool(reader.events(runs[0].run_id, ["llm_call"]))
                    time.sleep(0.05)
                assert appends == [1] and seen  # in the journal first, then on the store while the node waits
            finally:
                gate.set()
                worker.join(30)
        assert rec.last_status == "finished"
    finally:
        reader.close()
        tape.close()


def test_a_call_secured_while_a_flush_resolves_a_task_end_keeps_both(tmp_path):
    """A flush resolves a task end's Lazy writes outside the buffer lock; a call secured meanwhile (on the
    run's thread) journals what it can and leaves that event to the flush, which writes it."""
    from graphtape.record.writer import Lazy, TapeWriter

    store = SqliteTapeStore(tmp_path / "t.db")
    try:
        writer = TapeWriter(store, "run-l")
        secured: list[bool] = []

        def resolve() -> Any:
            writer.event("llm_call", {"call_id": "c1"})  # a call that ends on the run's thread meanwhile
            secured.append(writer.secure())
            return {"out": writer.put_json({"v": 1})}

        writer.event("task_finished", {"task": "t", "writes": Lazy(resolve)})
        writer.flush()
        assert secured == [True]
        writer.flush()
        kinds = {e.seq: (e.kind, e.data) for e in store.events("run-l")}
        assert kinds[0][0] == "task_finished" and isinstance(kinds[0][1]["writes"]["out"], str)
        assert kinds[1] == ("llm_call", {"call_id": "c1"})
        writer.close_journal()
        assert list(journal.journal_dir(store.path).iterdir()) == []
    finally:
        store.close()


def test_securing_a_call_leaves_a_task_ends_lazy_writes_to_the_flush(tmp_path):
    """A task end waiting for its writes to be resolved stays buffered: only a flush resolves it (a flush on
    another thread could otherwise take the buffer while secure resolves, and store an unresolved field)."""
    from graphtape.record.writer import Lazy, TapeWriter

    store = SqliteTapeStore(tmp_path / "t.db")
    try:
        writer = TapeWriter(store, "run-m")
        resolved: list[int] = []

        def resolve() -> Any:
            resolved.append(1)
            return {"out": writer.put_json({"v": 2})}

        writer.event("task_finished", {"task": "t", "writes": Lazy(resolve)})
        writer.event("tool_call", {"call_id": "c2"})
        assert writer.secure() is True
        assert resolved == [] and [e.kind for e in writer._batch.events] == ["task_finished"]
        writer.flush()
        assert resolved == [1]
        assert [e.kind for e in store.events("run-m")] == ["task_finished", "tool_call"]
        writer.close_journal()
    finally:
        store.close()


# -- importing a dead writer's journal ----------------------------------------------------------


def _rows(run_id: str, seqs: range) -> WriteBatch:
    batch = WriteBatch()
    for seq in seqs:
        batch.events.append(EventRow(run_id, seq, "llm_call", 1.5 + seq, {"call_id": f"c{seq}", "kind": "llm"}))
    batch.blobs[f"{seqs.start:064x}"] = b'{"x":1}'
    batch.chains[f"{seqs.start + 1:064x}"] = (None, f"{seqs.start:064x}")
    return batch


def _dead_journal(store: SqliteTapeStore, run_id: str, fence: tuple[str, int] | None, *batches: WriteBatch) -> Path:
    """A journal as a writer that died leaves it: complete frames, unlocked."""
    j = store.open_journal(run_id, fence)
    assert j is not None
    for batch in batches:
        j.append(batch)
    j.close(keep=True)
    return j.path


def test_a_dead_writers_calls_are_imported_when_the_store_opens(tmp_path):
    path = tmp_path / "t.db"
    store = SqliteTapeStore(path)
    token = store.acquire_lease("thread:a", "dead-process", ttl=60)
    assert token is not None
    file = _dead_journal(store, "run-a", ("thread:a", token), _rows("run-a", range(0, 2)), _rows("run-a", range(2, 3)))
    store.close()

    reopened = SqliteTapeStore(path)
    try:
        assert [e.seq for e in reopened.events("run-a")] == [0, 1, 2]
        assert reopened.events("run-a")[0].data == {"call_id": "c0", "kind": "llm"}
        assert reopened.get_blobs([f"{0:064x}"]) == {f"{0:064x}": b'{"x":1}'}
        assert reopened.get_chain_nodes([f"{1:064x}"]) == {f"{1:064x}": (None, f"{0:064x}")}
        assert not file.exists()
        assert reopened.import_journals() == 0  # nothing left, nothing twice
    finally:
        reopened.close()


def test_rows_already_stored_are_not_added_again(tmp_path):
    store = SqliteTapeStore(tmp_path / "t.db")
    try:
        rows = _rows("run-b", range(0, 2))
        store.write(rows)
        _dead_journal(store, "run-b", None, _rows("run-b", range(0, 2)), _rows("run-b", range(2, 4)))
        assert store.import_journals() == 2
        assert [e.seq for e in store.events("run-b")] == [0, 1, 2, 3]
    finally:
        store.close()


def test_a_journal_whose_lease_moved_on_is_dropped(tmp_path):
    store = SqliteTapeStore(tmp_path / "t.db")
    try:
        old = store.acquire_lease("thread:c", "p1", ttl=0.05)
        time.sleep(0.1)
        new = store.acquire_lease("thread:c", "p2", ttl=60)
        assert old is not None and new == old + 1
        file = _dead_journal(store, "run-c", ("thread:c", old), _rows("run-c", range(0, 3)))
        assert store.import_journals() == 0
        assert store.events("run-c") == [] and not file.exists()
    finally:
        store.close()


def test_a_live_writers_journal_is_left_alone(tmp_path):
    store = SqliteTapeStore(tmp_path / "t.db")
    try:
        live = store.open_journal("run-d", None)
        assert live is not None
        live.append(_rows("run-d", range(0, 2)))
        assert store.import_journals() == 0
        assert store.lease_holder("thread:none") is None  # a free lease looks for dead journals too
        assert store.events("run-d") == [] and live.path.exists()
        live.close()
        assert not live.path.exists()
    finally:
        store.close()


def test_a_torn_last_frame_is_ignored(tmp_path):
    store = SqliteTapeStore(tmp_path / "t.db")
    try:
        file = _dead_journal(store, "run-e", None, _rows("run-e", range(0, 2)), _rows("run-e", range(2, 5)))
        size = file.stat().st_size
        with open(file, "r+b") as f:
            f.truncate(size - 7)  # the process died inside its last write
        assert store.import_journals() == 2
        assert [e.seq for e in store.events("run-e")] == [0, 1]
    finally:
        store.close()


def test_a_file_being_created_is_not_taken_for_a_journal(tmp_path):
    store = SqliteTapeStore(tmp_path / "t.db")
    try:
        folder = journal.journal_dir(store.path)
        folder.mkdir()
        (folder / ".run-f.1234abcd.new").write_bytes(b"")
        (folder / "notes.txt").write_text("not a journal")
        assert store.import_journals() == 0
        assert sorted(os.listdir(folder)) == [".run-f.1234abcd.new", "notes.txt"]
    finally:
        store.close()


# -- the file format ------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
_batches = st.builds(
    lambda events, blobs, chains: WriteBatch(
        events=[EventRow("r", i, kind, ts, data) for i, (kind, ts, data) in enumerate(events)],
        blobs=blobs,
        chains=chains,
    ),
    st.lists(
        st.tuples(
            st.sampled_from(["llm_call", "task_started", "task_finished"]),
            st.floats(0, 2e9, allow_nan=False),
            st.dictionaries(st.text(max_size=8), _json, max_size=5),
        ),
        max_size=4,
    ),
    st.dictionaries(st.text(min_size=1, max_size=12), st.binary(max_size=64), max_size=3),
    st.dictionaries(
        st.text(min_size=1, max_size=12), st.tuples(st.none() | st.text(max_size=12), st.text(max_size=12)), max_size=3
    ),
)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(_batches, min_size=1, max_size=4), cut=st.integers(0, 400))
def test_frames_round_trip_and_a_cut_file_keeps_whole_frames(tmp_path_factory, batches, cut):
    from graphtape.store.codec import unpack_event

    folder = tmp_path_factory.mktemp("j")
    j = journal.CallJournal(folder, "r", ("thread:x", 7))
    for b in batches:
        j.append(b)
    j.close(keep=True)
    data = j.path.read_bytes()
    whole = journal.decode(data)
    assert whole is not None and whole.header == {"v": 1, "run": "r", "lease": "thread:x", "token": 7}
    expected_events = [(e.run_id, e.seq, e.kind, e.ts, e.data) for b in batches for e in b.events]
    got = [(r, s, k, t, unpack_event(body)) for r, s, k, t, body in whole.events]
    assert got == expected_events
    blobs: dict[str, bytes] = {}
    chains: dict[str, tuple[str | None, str]] = {}
    for b in batches:
        blobs.update(b.blobs)
        chains.update(b.chains)
    assert whole.blobs == blobs and whole.chains == chains
    # a file cut anywhere reads as a prefix of its frames
    part = journal.decode(data[: max(0, len(data) - cut)])
    if part is not None:
        assert whole.events[: len(part.events)] == part.events
    j.path.unlink()
