"""The background tape writer holds a write a moment, so that a run ending meanwhile drops it (issue 13).

Beside a foreign saver, a checkpoint asks ``record/checkpoints.py``'s
``TapeFlusher`` for a write when the run's last one is old. A run's last
checkpoint comes just before its end, which writes the tape in line: a write
started there was a second transaction, and the end waited for it. The write
is held ``HOLD`` (asked for that much earlier, so writes still start
``FLUSH_INTERVAL`` apart) and the run's end drops it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

import graphtape
from graphtape.record import checkpoints as checkpoints_mod
from tests.graphs import counter_line


class FakeSession:
    def __init__(self) -> None:
        self.flushed: list[float] = []
        self.done = threading.Event()

    def flush(self) -> None:
        self.flushed.append(time.monotonic())
        self.done.set()

    background_flush = flush  # a run beside a foreign saver: the background write is a flush


def test_a_run_that_ends_within_the_hold_drops_the_write(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 1.0)
    monkeypatch.setattr(checkpoints_mod, "HOLD", 0.1)
    flusher = checkpoints_mod.TapeFlusher()
    s = FakeSession()
    flusher.ask(s)  # type: ignore[arg-type]  # the first checkpoint starts the clock
    flusher._asked[id(s)] -= 2.0  # the last write is long past: the next checkpoint asks for one
    flusher.ask(s)  # type: ignore[arg-type]
    assert id(s) in flusher._due
    flusher.forget(s)  # type: ignore[arg-type]  # the run ends at once: its end writes the rows
    time.sleep(0.25)
    assert s.flushed == []


def test_a_held_write_starts_after_the_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 1.0)
    monkeypatch.setattr(checkpoints_mod, "HOLD", 0.05)
    flusher = checkpoints_mod.TapeFlusher()
    s = FakeSession()
    flusher.ask(s)  # type: ignore[arg-type]
    flusher._asked[id(s)] -= 2.0
    asked = time.monotonic()
    flusher.ask(s)  # type: ignore[arg-type]
    assert s.done.wait(5.0)
    assert s.flushed[0] - asked >= 0.05
    flusher.forget(s)  # type: ignore[arg-type]


def test_writes_still_start_an_interval_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked ``HOLD`` early, written ``HOLD`` late: no write starts sooner than FLUSH_INTERVAL after the last."""
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 0.2)
    monkeypatch.setattr(checkpoints_mod, "HOLD", 0.02)
    flusher = checkpoints_mod.TapeFlusher()
    s = FakeSession()
    flusher.ask(s)  # type: ignore[arg-type]
    started = time.monotonic()
    while time.monotonic() - started < 1.0:
        flusher.ask(s)  # type: ignore[arg-type]  # a checkpoint every 5 ms
        time.sleep(0.005)
    flusher.forget(s)  # type: ignore[arg-type]
    assert 3 <= len(s.flushed) <= 5
    gaps = [b - a for a, b in zip(s.flushed, s.flushed[1:])]
    assert min(gaps) >= 0.2 - 0.002  # monotonic clock granularity


def test_the_hold_is_at_most_a_tenth_of_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """With FLUSH_INTERVAL 0 (every checkpoint writes) nothing is held."""
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 0.0)
    flusher = checkpoints_mod.TapeFlusher()
    s = FakeSession()
    flusher.ask(s)  # type: ignore[arg-type]
    asked = time.monotonic()
    flusher.ask(s)  # type: ignore[arg-type]
    assert s.done.wait(5.0)
    assert s.flushed[0] - asked < checkpoints_mod.HOLD
    flusher.forget(s)  # type: ignore[arg-type]


def slow_line(n_nodes: int, pause: float) -> Any:
    return counter_line(n_nodes, pause=pause)


def test_the_last_checkpoint_of_a_run_starts_no_background_write(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each node outlasts the interval: every checkpoint after one asks for a write; the last one's is dropped."""
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 0.2)
    monkeypatch.setattr(checkpoints_mod, "HOLD", 0.05)
    written_by: list[str] = []
    real = tape.store.write

    def spy(batch: Any, **kw: Any) -> None:
        written_by.append(threading.current_thread().name)
        real(batch, **kw)

    monkeypatch.setattr(tape.store, "write", spy)
    rec = tape.record(slow_line(3, pause=0.25), name="line", checkpointer=InMemorySaver())
    assert rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}}, durability="sync") == {"n": 3}
    background = written_by.count("graphtape-tape-writer")
    # checkpoints after n0 and n1 are written while the run goes on; n2's rows go with the run's end
    assert background == 2, written_by
    kinds = [r.kind for r in tape.store.events(rec.last_run_id or "")]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds.count("checkpoint") == 5
    seqs = [r.seq for r in tape.store.events(rec.last_run_id or "")]
    assert seqs == list(range(len(seqs)))
