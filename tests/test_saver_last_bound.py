"""graphtape's saver keeps each thread's last checkpoint (to reuse its unchanged values) for a bounded number
of threads: a long-lived saver (a server's, one per store) otherwise kept an entry for every thread ever
written. A thread whose entry was dropped goes on with the same checkpoints, its values serialised again."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from graphtape.runtime import saver as saver_mod
from graphtape.runtime.saver import GraphtapeSaver
from graphtape.store.sqlite import SqliteTapeStore


def _put(saver: GraphtapeSaver, thread: str, parent: str | None, n: int) -> str:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"payload": "x" * 100, "n": n}
    checkpoint["channel_versions"] = {"payload": 1, "n": n + 1}
    configurable = {"thread_id": thread, "checkpoint_ns": ""}
    if parent is not None:
        configurable["checkpoint_id"] = parent
    config = saver.put({"configurable": configurable}, checkpoint, {"source": "loop", "step": n}, {"n": n + 1})
    return str(config["configurable"]["checkpoint_id"])


def test_the_last_checkpoints_kept_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(saver_mod, "LAST_MAX", 8)
    store = SqliteTapeStore(tmp_path / "t.db")
    try:
        saver = GraphtapeSaver(store)
        first = _put(saver, "t0", None, 0)
        heads = {f"t{i}": _put(saver, f"t{i}", None, 0) for i in range(1, 30)}
        assert len(saver._last) <= 8
        assert ("t0", "") not in saver._last and ("t29", "") in saver._last  # the least recent went first
        # a thread whose entry was dropped goes on: its next checkpoint is stored whole and reads back
        nxt = _put(saver, "t0", first, 1)
        got = saver.get_tuple({"configurable": {"thread_id": "t0", "checkpoint_ns": ""}})
        assert got is not None and got.checkpoint["id"] == nxt
        assert got.checkpoint["channel_values"] == {"payload": "x" * 100, "n": 1}
        assert got.parent_config is not None and got.parent_config["configurable"]["checkpoint_id"] == first
        # a thread written again moves to the end: it outlives threads written after it the first time
        _put(saver, "t22", heads["t22"], 1)
        for i in range(30, 34):
            _put(saver, f"t{i}", None, 0)
        assert ("t22", "") in saver._last and len(saver._last) <= 8
    finally:
        store.close()
