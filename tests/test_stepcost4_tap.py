"""Recording beside a user's own saver, per super-step (issue 13, benchmark 1 "SqliteSaver passed in").

The task callback buffers its two rows per task from their JSON form instead
of through the typed events (``record/tasks.py``), keeps the step bookkeeping
only for graphtape's own saver (which stores it on the checkpoint row), and
the tap hands LangGraph the inner saver's ``get_next_version`` and looks at a
task's writes for an interrupt in line (``record/checkpoints.py``). What must
not change: the rows are the typed events' JSON, key for key and in order
(stored bytes depend on it); an interrupt beside a foreign saver still ends
the run as interrupted; the tape is written in the background, a few times
per run.
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import graphtape
import graphtape.recorder as recorder_mod
from graphtape import events
from graphtape.record import checkpoints as checkpoints_mod
from graphtape.record.tasks import TaskRecorder
from graphtape.store.base import EventRow
from tests.graphs import counter_line


def spy_rows(tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch) -> tuple[list[EventRow], list[str]]:
    """Every event row the store is asked to write (as buffered), and the thread of each write."""
    real = tape.store.write
    rows: list[EventRow] = []
    threads: list[str] = []
    lock = threading.Lock()

    def spy(batch: Any, **kw: Any) -> None:
        with lock:
            rows.extend(batch.events)
            threads.append(threading.current_thread().name)
        real(batch, **kw)

    monkeypatch.setattr(tape.store, "write", spy)
    return rows, threads


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_task_rows_are_the_typed_events_json(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    rows, _ = spy_rows(tape, monkeypatch)
    rec = tape.record(counter_line(4), name="line", checkpointer=InMemorySaver())
    assert rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}}, durability=durability) == {"n": 4}
    started = [r for r in rows if r.kind == "task_started"]
    finished = [r for r in rows if r.kind == "task_finished"]
    assert [r.data["node_path"] for r in started] == ["n0", "n1", "n2", "n3"]
    assert [r.data["step"] for r in started] == [1, 2, 3, 4]
    assert [r.data["task"] for r in finished] == [r.data["task"] for r in started]
    for row in started:
        typed = events.TaskStarted(**row.data).to_data()
        assert list(row.data.items()) == list(typed.items())
    for row in finished:
        typed = events.TaskFinished(**row.data).to_data()
        assert list(row.data.items()) == list(typed.items())
        assert isinstance(row.data["writes"], str)  # resolved to the stored address before the write
        assert tape.store.get_json(row.data["writes"]) is not None
        assert isinstance(row.data["duration"], float) and row.data["duration"] >= 0.0
    # read back through the typed reader too: the recorded writes are each task's return value
    stored = [events.parse(r) for r in tape.store.events(rec.last_run_id or "", [events.TaskFinished.KIND])]
    assert [tape.store.get_json(ev.writes) for ev in stored] == [  # type: ignore[attr-defined]
        {"n": i} for i in range(1, 5)
    ]


@pytest.mark.parametrize("own_saver", [False, True])
def test_checkpoint_rows_are_the_typed_events_json(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch, own_saver: bool
) -> None:
    rows, _ = spy_rows(tape, monkeypatch)
    saver = tape.saver if own_saver else InMemorySaver()
    rec = tape.record(counter_line(3), name="line", checkpointer=saver)
    assert rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}}) == {"n": 3}
    checkpoints = [r for r in rows if r.kind == events.Checkpoint.KIND]
    assert [r.data["step"] for r in checkpoints] == [-1, 0, 1, 2, 3]
    assert [r.data["source"] for r in checkpoints] == ["input", "loop", "loop", "loop", "loop"]
    for row in checkpoints:
        typed = events.Checkpoint(**row.data).to_data()
        assert list(row.data.items()) == list(typed.items())
    # each names the previous one as its parent, and they are the thread's checkpoints
    ids = [r.data["checkpoint_id"] for r in checkpoints]
    assert [r.data["parent_id"] for r in checkpoints][1:] == ids[:-1]
    assert rec.get_state({"configurable": {"thread_id": "t"}}).config["configurable"]["checkpoint_id"] == ids[-1]


class Sessions(TaskRecorder):
    seen: ClassVar[list[Any]] = []

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        Sessions.seen.append(session)


def test_step_bookkeeping_is_kept_only_for_graphtapes_own_saver(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder_mod, "TaskRecorder", Sessions)
    monkeypatch.setattr(Sessions, "seen", [])
    foreign = tape.record(counter_line(3), name="line", checkpointer=InMemorySaver())
    foreign.invoke({"n": 0}, {"configurable": {"thread_id": "a"}})
    (session,) = Sessions.seen
    assert session.step_writers == {} and session.task_steps == {}  # nobody would read them
    # graphtape's saver stores each step's writers on its checkpoint row, from that bookkeeping
    own = tape.record(counter_line(3), name="line", checkpointer=tape.saver)
    own.invoke({"n": 0}, {"configurable": {"thread_id": "b"}})
    entries = own.tape.history("b").entries
    assert sorted(w for e in entries for w in e.writers) == ["__start__", "n0", "n1", "n2"]
    assert all(not s.step_writers for s in Sessions.seen)  # each step's, taken by its checkpoint


def test_the_tap_hands_over_the_inner_savers_versions() -> None:
    inner = InMemorySaver()
    tap = checkpoints_mod.TapSaver(inner)
    assert tap.get_next_version == inner.get_next_version
    # InMemorySaver's versions end in a random fraction: the counter part is what must agree
    counter = inner.get_next_version(None, None).split(".")[0]
    assert tap.get_next_version(None, None).split(".")[0] == counter
    assert checkpoints_mod.TapSaver.get_next_version(tap, None, None).split(".")[0] == counter


class Ask(TypedDict, total=False):
    answer: str


def asking() -> Any:
    def ask(state: Ask) -> dict[str, Any]:
        return {"answer": interrupt("name?")}

    b = StateGraph(Ask)
    b.add_node("ask", ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b


@pytest.mark.parametrize("api", ["invoke", "ainvoke"])
def test_an_interrupt_beside_a_foreign_saver_ends_the_run_interrupted(tape: graphtape.Tape, api: str) -> None:
    import asyncio

    rec = tape.record(asking().compile(), name="ask", checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}}

    def call(value: Any) -> Any:
        if api == "invoke":
            return rec.invoke(value, cfg)
        return asyncio.run(rec.ainvoke(value, cfg))

    call({})
    assert rec.last_status == "interrupted"
    assert call(Command(resume="Ada")) == {"answer": "Ada"}
    assert rec.last_status == "finished"


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_long_run_writes_its_tape_a_few_times_in_the_background(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """50 steps beside a foreign saver: the run's own thread writes once (its end, with the start
    when no background write came first); the others come from the tape writer, at most one per
    FLUSH_INTERVAL of the run."""
    _, threads = spy_rows(tape, monkeypatch)
    rec = tape.record(counter_line(50, pause=0.002), name="line", checkpointer=InMemorySaver())
    t0 = time.monotonic()
    assert rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}}, durability=durability) == {"n": 50}
    took = time.monotonic() - t0
    main = threading.current_thread().name
    assert threads.count(main) == 1
    background = [t for t in threads if t != main]
    assert set(background) <= {"graphtape-tape-writer"}
    assert 1 <= len(background) <= took / checkpoints_mod.FLUSH_INTERVAL + 1


def test_the_tap_asks_the_flusher_only_when_ask_has_something_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TapeFlusher.due`` is ``ask``'s own test, done before calling it: the first checkpoint, a write
    whose interval is over, a failed background write to report; nothing else."""
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 1.0)
    monkeypatch.setattr(checkpoints_mod, "HOLD", 0.1)
    flusher = checkpoints_mod.TapeFlusher()
    s: Any = object()
    assert flusher.due(s)  # the run's first checkpoint starts the clock
    flusher.ask(s)
    assert not flusher.due(s)
    assert id(s) not in flusher._due
    # 0.85 s later a write would start at 0.95 s (HOLD 0.1 ahead): not an interval after the last
    flusher._asked[id(s)] -= 0.85
    flusher._ask_from[id(s)] -= 0.85
    assert not flusher.due(s)
    flusher.ask(s)
    assert id(s) not in flusher._due  # ask agrees: nothing to do
    # 0.95 s later it would start at 1.05 s: due, and ask schedules it
    flusher._asked[id(s)] -= 0.1
    flusher._ask_from[id(s)] -= 0.1
    assert flusher.due(s)
    with flusher._cond:  # keep the writer thread from taking it
        flusher.ask(s)
        assert id(s) in flusher._due
        assert not flusher.due(s)  # asked: the next one is an interval later
        flusher._due.clear()
    flusher._errors[id(s)] = RuntimeError("the last background write failed")
    assert flusher.due(s)  # reported by ask
    with pytest.raises(RuntimeError, match="last background write"):
        flusher.ask(s)
    flusher.forget(s)
    assert flusher.due(s) and id(s) not in flusher._ask_from
