"""What the per-run and per-step shortcuts of the recording must keep (issue 13).

Beside a foreign checkpoint saver, the tape is written by a background thread
(``record/checkpoints.py``'s ``TapeFlusher``) instead of inside the
checkpoint call: the tape must still be written while a long run goes on,
be complete when the run returns, never be written after the run gave its
lease up, and a failed background write must stop the run at its next
checkpoint as an inline write's failure did (the run stays ``running`` for
``graphtape recover``). A store that can give a lease up in a write ends a
run with one transaction, and the lease is released whatever happens. The
task callback and graphtape's saver take shortcuts too (a root task's
namespace parsed without splitting, plain metadata stored without a JSON
round trip); their results must be what the long way gives.
"""

from __future__ import annotations

import threading
import time
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

import graphtape
from graphtape import events, serde
from graphtape.errors import StoreError
from graphtape.record import checkpoints as checkpoints_mod
from graphtape.record import writer as writer_mod
from graphtape.runtime.lease import HEARTBEATS
from graphtape.runtime.saver import _stored_metadata
from graphtape.store.base import WriteBatch
from graphtape.store.sqlite import SqliteTapeStore
from tests.graphs import counter_line


class State(TypedDict):
    n: int


def line(n_nodes: int, pause: float = 0.0) -> Any:
    return counter_line(n_nodes, pause=pause)


def kinds(tape: graphtape.Tape, run_id: str) -> list[str]:
    return [r.kind for r in tape.store.events(run_id)]


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_beside_a_foreign_saver_the_tape_is_written_during_the_run_and_complete_at_its_end(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 0.0)
    written_by: list[str] = []
    real = tape.store.write

    def spy(batch: Any, **kw: Any) -> None:
        written_by.append(threading.current_thread().name)
        real(batch, **kw)

    monkeypatch.setattr(tape.store, "write", spy)
    rec = tape.record(line(6, pause=0.01), name="line", checkpointer=InMemorySaver())
    out = rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}}, durability=durability)
    assert out == {"n": 6}
    assert "graphtape-tape-writer" in written_by  # written while the run went on
    got = kinds(tape, rec.last_run_id or "")
    assert got[0] == "run_started" and got[-1] == "run_finished"
    assert got.count("task_started") == got.count("task_finished") == 6
    assert got.count("checkpoint") == 8  # the input's (step -1), then steps 0 (__start__) to 6
    seqs = [r.seq for r in tape.store.events(rec.last_run_id or "")]
    assert seqs == list(range(len(seqs)))
    assert tape.store.get_run(rec.last_run_id or "").status == "finished"  # type: ignore[union-attr]


def test_no_background_write_after_the_run_returns(tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's end waits for a background write under way and none starts afterwards (the lease is gone)."""
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 0.0)
    real = tape.store.write
    late: list[bool] = []
    done = threading.Event()

    def slow(batch: Any, **kw: Any) -> None:
        if threading.current_thread().name == "graphtape-tape-writer":
            time.sleep(0.05)  # a write still under way when the run ends
            late.append(done.is_set())
        real(batch, **kw)

    monkeypatch.setattr(tape.store, "write", slow)
    # long enough for background writes to start (a write asked for waits HOLD, 5 ms, and the run's
    # end drops one that has not started: its saves to the InMemorySaver run in line, in microseconds)
    rec = tape.record(line(4, pause=0.01), name="line", checkpointer=InMemorySaver())
    for i in range(3):
        rec.invoke({"n": 0}, {"configurable": {"thread_id": f"t{i}"}})
        done.set()
        time.sleep(0.1)  # a straggler would write now
        done.clear()
    assert late and not any(late)


def test_a_failed_background_write_stops_the_run_at_its_next_checkpoint(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 0.0)
    real = tape.store.write
    failures: list[str] = []

    def flaky(batch: Any, **kw: Any) -> None:
        if threading.current_thread().name == "graphtape-tape-writer" and not failures:
            failures.append("once")
            raise StoreError("the store went away for a moment")
        real(batch, **kw)

    monkeypatch.setattr(tape.store, "write", flaky)
    rec = tape.record(line(8, pause=0.02), name="line", checkpointer=InMemorySaver())
    with pytest.raises(StoreError, match="went away"):
        rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}})
    run = tape.store.get_run(rec.last_run_id or "")
    assert run is not None and run.status == "running"  # kept for `graphtape recover`, as an inline failure was
    # stopped at the checkpoint after the failure, as an inline failure stopped it: the tape has no hole
    seqs = [r.seq for r in tape.store.events(rec.last_run_id or "")]
    assert seqs == list(range(len(seqs)))
    # the lease was given up: the thread can be run again at once
    assert rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}}) == {"n": 8}


def test_a_subgraph_task_gets_its_nested_node_path(tape: graphtape.Tape) -> None:
    inner = line(2)
    b = StateGraph(State)
    b.add_node("outer", inner)
    b.add_edge(START, "outer")
    b.add_edge("outer", END)
    rec = tape.record(b.compile(), name="nested", checkpointer=tape.saver)
    assert rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}}) == {"n": 2}
    started = [events.parse(r) for r in tape.store.events(rec.last_run_id or "", [events.TaskStarted.KIND])]
    paths = sorted(e.node_path for e in started)  # type: ignore[attr-defined]
    assert paths == ["outer", "outer/n0", "outer/n1"]
    nested = [e for e in started if "|" in (e.task or "")]  # type: ignore[attr-defined]
    assert nested and all(e.step is not None for e in nested)  # type: ignore[attr-defined]


def test_checkpoint_metadata_is_stored_as_the_long_way_gives() -> None:
    class Key(str):
        pass

    cases: list[dict[str, Any]] = [
        {"source": "loop", "step": 3, "parents": {"": "abc"}, "user": "ann", "openai_api_key": "sk-1"},
        {"source": "loop", "step": 1, "flag": True, "ratio": 0.5, "none": None, "empty_token": ""},
        {"source": "loop", "step": 1, "odd": object(), "tags": ("a", "b"), Key("my_password"): "x"},
        {"source": "loop", "step": 1, "nested": {"list": [1, {"a": None}]}, "mine": "secret value"},
    ]
    for metadata in cases:
        extra = frozenset({"mine"})
        redacted = dict(metadata)
        for key, value in metadata.items():
            if value not in (None, "") and (serde.SECRET_KEY_PATTERN.search(str(key)) or key in extra):
                redacted[key] = serde.REDACTED
        expected = serde.to_jsonable(redacted)

        class Session:
            class tape:  # the recording session's tape
                redact_keys = extra

        assert _stored_metadata(metadata, Session()) == expected
        assert _stored_metadata(metadata, None)["source"] == "loop"


def test_the_flusher_asks_at_most_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    flushed: list[int] = []

    class Session:
        def flush(self) -> None:
            flushed.append(1)

    flusher = checkpoints_mod.TapeFlusher()
    s = Session()
    for _ in range(50):
        flusher.ask(s)  # type: ignore[arg-type]
    flusher.forget(s)  # type: ignore[arg-type]
    assert len(flushed) <= 1 + 0  # the first checkpoint only starts the clock; none of 50 quick ones is due
    assert writer_mod.FLUSH_INTERVAL == checkpoints_mod.FLUSH_INTERVAL


class ReleasingStore(SqliteTapeStore):
    """A store that gives leases up in its writes (here after them: the protocol, not the one transaction)."""

    releases_in_write = True

    def __init__(self, *a: Any, fail_releasing_write: bool = False, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.fail_releasing_write = fail_releasing_write
        self.released_in_write: list[str] = []
        self.released_alone: list[str] = []

    def write(self, batch: WriteBatch, *, fence: tuple[str, int] | None = None) -> None:
        releases, batch.releases = batch.releases, []
        if releases and self.fail_releasing_write:
            raise StoreError("the last write of the run failed")
        super().write(batch, fence=fence)
        for name, owner in releases:
            super().release_lease(name, owner)
            self.released_in_write.append(name)

    def release_lease(self, name: str, owner: str) -> None:
        self.released_alone.append(name)
        super().release_lease(name, owner)


@pytest.mark.parametrize("own_saver", [True, False])
def test_a_store_that_releases_in_write_ends_a_run_with_one_write(tmp_path: Any, own_saver: bool) -> None:
    store = ReleasingStore(tmp_path / "tape.db")
    tape = graphtape.Tape(store)
    rec = tape.record(line(3), name="line", checkpointer=tape.saver if own_saver else InMemorySaver())
    for _ in range(2):  # the thread is free again at once, and no renewal took it back
        assert rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}}) == {"n": 3}
        assert store.lease_holder("thread:t") is None
    assert store.released_in_write == ["thread:t", "thread:t"] and store.released_alone == []
    assert not HEARTBEATS._leases
    run = store.get_run(rec.last_run_id or "")
    assert run is not None and run.status == "finished"
    tape.close()


def test_when_the_releasing_write_fails_the_lease_is_still_given_up(tmp_path: Any) -> None:
    store = ReleasingStore(tmp_path / "tape.db", fail_releasing_write=True)
    tape = graphtape.Tape(store)
    rec = tape.record(line(2), name="line", checkpointer=tape.saver)
    with pytest.raises(StoreError, match="last write"):
        rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}})
    assert store.lease_holder("thread:t") is None
    assert store.released_alone == ["thread:t"]
    assert not HEARTBEATS._leases
    tape.close()


def test_a_failing_read_of_the_state_after_a_run_still_ends_it(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state read after a run (which writes a strict replay's held rows) fails: the run ends, its lease goes."""
    graph = line(2)
    recorded = tape.record(graph, name="ends", checkpointer=tape.saver)

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("state read failed")

    monkeypatch.setattr(type(recorded), "_needs_state", lambda *_: True)
    monkeypatch.setattr(type(recorded), "_status", broken)
    cfg = {"configurable": {"thread_id": "ends"}}
    with pytest.raises(RuntimeError, match="state read failed"):
        recorded.invoke({"n": 0}, cfg)
    run = tape.run(recorded.last_run_id)
    assert run.status == "failed" and "state read failed" in (run.error or "")
    monkeypatch.undo()
    # the thread's lease was given up: a second run on the thread starts at once
    assert tape.record(graph, name="ends", checkpointer=tape.saver).invoke({"n": 0}, cfg) == {"n": 2}
