"""Under ``durability="async"`` a recording with graphtape's saver stores its checkpoints in batches.

LangGraph lets an async checkpoint's save overlap the next super-steps and
promises them all stored when the run ends; the recording buffers them and
writes them with its next write (the background writer's within
``FLUSH_INTERVAL``, a call written at once, the run's end) instead of one
transaction per step. ``durability="sync"`` still stores each before the next
step. A recording's saves run on the graph's thread (``graphtape.replay.saver``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import graphtape
from graphtape.errors import StoreError
from graphtape.record import checkpoints as checkpoints_mod
from graphtape.record import writer as writer_mod
from graphtape.store.base import WriteBatch
from tests.graphs import counter_line

N_NODES = 6


def chain(n_nodes: int = N_NODES, *, wait: threading.Event | None = None, at: int = -1) -> Any:
    """``n_nodes`` nodes adding one each; node ``at`` waits for ``wait`` first (up to 20 s)."""

    def probe(n: int) -> None:
        if n == at and wait is not None:
            wait.wait(20)

    return counter_line(n_nodes, probe=probe)


def record_writes(store: Any, monkeypatch: pytest.MonkeyPatch, fail_on: str | None = None) -> list[tuple[str, int]]:
    """(thread name, checkpoints) of every write the store is asked for from now on; the first write
    from the thread named ``fail_on`` fails (a store that is briefly unreachable)."""
    seen: list[tuple[str, int]] = []
    failed: list[bool] = []
    original = type(store).write

    def write(self: Any, batch: WriteBatch, **kw: Any) -> None:
        name = threading.current_thread().name
        if name == fail_on and not failed:
            failed.append(True)
            raise StoreError("the store went away for a moment")
        seen.append((name, len(batch.checkpoints)))
        original(self, batch, **kw)

    monkeypatch.setattr(type(store), "write", write)
    return seen


def slow_background_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """No background write during a short run: what is counted must not depend on the machine's load."""
    monkeypatch.setattr(writer_mod, "FLUSH_INTERVAL", 60.0)
    monkeypatch.setattr(checkpoints_mod, "FLUSH_INTERVAL", 60.0)


def stored_checkpoints(tape: graphtape.Tape, thread_id: str) -> int:
    return len(tape.store.list_checkpoints(thread_id=thread_id))


def test_an_async_run_stores_its_checkpoints_together(tape, monkeypatch):
    slow_background_writer(monkeypatch)
    rec = tape.record(chain(), name="chain", checkpointer=tape.saver)
    writes = record_writes(tape.store, monkeypatch)
    out = rec.invoke({"n": 0}, {"configurable": {"thread_id": "a"}})
    assert out == {"n": N_NODES}
    # the input's checkpoint, one per node and the loop's first: all stored by the time invoke returns
    assert stored_checkpoints(tape, "a") == N_NODES + 2
    with_checkpoints = [n for _, n in writes if n]
    assert sum(with_checkpoints) == N_NODES + 2
    assert len(with_checkpoints) == 1, writes  # the run's end wrote them, in one transaction
    history = list(rec.graph.get_state_history({"configurable": {"thread_id": "a"}}))
    # newest first: the values after each node, the input's (0), and the loop's first checkpoint (empty)
    assert [s.values.get("n") for s in history] == [*range(N_NODES, -1, -1), None]


def test_a_sync_run_stores_each_checkpoint_before_the_next_step(tape, monkeypatch):
    slow_background_writer(monkeypatch)
    rec = tape.record(chain(), name="chain", checkpointer=tape.saver)
    writes = record_writes(tape.store, monkeypatch)
    rec.invoke({"n": 0}, {"configurable": {"thread_id": "s"}}, durability="sync")
    assert [n for _, n in writes if n] == [1] * (N_NODES + 2)
    assert stored_checkpoints(tape, "s") == N_NODES + 2


def test_deferred_checkpoints_reach_the_store_while_the_run_waits(tape, store_url):
    """Another reader sees the run's checkpoints within the background writer's interval, mid-run."""
    go_on = threading.Event()
    rec = tape.record(chain(wait=go_on, at=3), name="chain", checkpointer=tape.saver)
    result: dict[str, Any] = {}
    runner = threading.Thread(
        target=lambda: result.update(out=rec.invoke({"n": 0}, {"configurable": {"thread_id": "w"}}))
    )
    runner.start()
    other = graphtape.connect(store_url)
    try:
        seen = 0
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            seen = len(other.store.list_checkpoints(thread_id="w"))
            if seen >= 4:  # the input's, the loop's first and nodes 0-2
                break
            time.sleep(0.01)
    finally:
        go_on.set()
        runner.join(30)
        other.close()
    assert seen >= 4
    assert result["out"] == {"n": N_NODES}
    assert stored_checkpoints(tape, "w") == N_NODES + 2


def test_after_a_failed_background_write_checkpoints_are_written_in_line(tape, monkeypatch):
    """The failed write's rows stay buffered and go with the next one; the run no longer defers."""
    go_on = threading.Event()
    rec = tape.record(chain(wait=go_on, at=2), name="chain", checkpointer=tape.saver)
    writes = record_writes(tape.store, monkeypatch, fail_on="graphtape-tape-writer")
    timer = threading.Timer(0.5, go_on.set)  # node 2 waits past the background write, which fails
    timer.start()
    try:
        out = rec.invoke({"n": 0}, {"configurable": {"thread_id": "f"}})
    finally:
        timer.cancel()
    assert out == {"n": N_NODES}
    assert rec.last_status == "finished"
    assert stored_checkpoints(tape, "f") == N_NODES + 2
    # the checkpoints of nodes 2.. (taken after the failure) were each written by the saver itself
    in_line = [n for name, n in writes if n and name != "graphtape-tape-writer"]
    assert len(in_line) >= N_NODES - 2, writes


def test_a_recordings_saves_run_on_the_graphs_thread(tape, monkeypatch):
    """LangGraph hands every save to a thread of its own; a recording's run in line: under "async"
    they only buffer rows, under "sync" the graph waits for them anyway."""
    from graphtape.runtime.saver import GraphtapeSaver

    threads: dict[str, set[str]] = {"put": set(), "put_writes": set()}
    for name in threads:
        original = getattr(GraphtapeSaver, name)

        def spy(self: Any, *args: Any, _original: Any = original, _name: str = name, **kw: Any) -> Any:
            threads[_name].add(threading.current_thread().name)
            return _original(self, *args, **kw)

        monkeypatch.setattr(GraphtapeSaver, name, spy)
    slow_background_writer(monkeypatch)
    rec = tape.record(chain(), name="chain", checkpointer=tape.saver)
    rec.invoke({"n": 0}, {"configurable": {"thread_id": "i"}})
    here = threading.current_thread().name
    assert threads == {"put": {here}, "put_writes": {here}}
    threads["put"].clear()
    rec.invoke({"n": 0}, {"configurable": {"thread_id": "j"}}, durability="sync")
    assert threads["put"] == {here}
    assert stored_checkpoints(tape, "i") == stored_checkpoints(tape, "j") == N_NODES + 2
    # the same saver in an unrecorded run: LangGraph's threads, as before
    threads["put"].clear()
    chain().copy(update={"checkpointer": rec.graph.checkpointer}).invoke({"n": 0}, {"configurable": {"thread_id": "k"}})
    assert threads["put"] and here not in threads["put"]
