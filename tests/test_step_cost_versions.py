"""graphtape's saver gives integer channel versions to a new thread, and keeps a thread begun with
LangGraph's string versions on strings (a mix would break LangGraph's ``max`` of the versions)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import graphtape
from graphtape.runtime.saver import saver_for
from tests.graphs import counter_line


def _old_version(current: Any, channel: None) -> str:
    """The versions graphtape's saver gave before (LangGraph's string form)."""
    v = 0 if current is None else current if isinstance(current, int) else int(str(current).split(".")[0])
    return f"{v + 1:032}.{random.random():016}"


def _versions(tape: Any, thread: str) -> list[Any]:
    saver = saver_for(tape.store)
    out = []
    for t in saver.list({"configurable": {"thread_id": thread}}):
        out.extend(t.checkpoint["channel_versions"].values())
        for seen in t.checkpoint["versions_seen"].values():
            out.extend(seen.values())
    return out


def test_new_thread_has_integer_versions_and_a_small_body(tmp_path: Path) -> None:
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        rec = tape.record(counter_line(12), name="g", checkpointer=tape.saver)
        out = rec.invoke({"n": 0}, {"configurable": {"thread_id": "a"}})
        assert out["n"] == 12
        versions = _versions(tape, "a")
        assert versions and all(type(v) is int for v in versions)
        rows = tape.store.list_checkpoints(thread_id="a")
        # 14 channels and 12 nodes' seen versions: strings made this ~1 KB
        assert max(len(r.body) for r in rows) < 700
        # resumed on the same thread: still integers, and the graph runs from its state
        out = rec.invoke({"n": 100}, {"configurable": {"thread_id": "a"}})
        assert out["n"] == 112
        assert all(type(v) is int for v in _versions(tape, "a"))


def test_thread_with_string_versions_goes_on_with_strings(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    with graphtape.connect(url) as tape:
        saver = saver_for(tape.store)
        saver.get_next_version = _old_version  # type: ignore[method-assign]
        try:
            tape.record(counter_line(12), name="g").invoke({"n": 0}, {"configurable": {"thread_id": "old"}})
        finally:
            del saver.get_next_version
        assert all(type(v) is str for v in _versions(tape, "old"))
    with graphtape.connect(url) as tape:  # an old tape opened again: the thread goes on
        rec = tape.record(counter_line(12), name="g")
        out = rec.invoke({"n": 5}, {"configurable": {"thread_id": "old"}})
        assert out["n"] == 17
        assert all(type(v) is str for v in _versions(tape, "old"))
        out = rec.invoke({"n": 0}, {"configurable": {"thread_id": "new"}})
        assert out["n"] == 12
        assert all(type(v) is int for v in _versions(tape, "new"))
