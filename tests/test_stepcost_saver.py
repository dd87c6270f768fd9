"""graphtape's saver sends a value's blob once per run: a value met again in the run (a routing
write's ``None`` in every super-step) is not written again, and a later run writes it again
(garbage collection may have deleted it in between)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import graphtape
from graphtape.runtime.saver import saver_for
from graphtape.store.base import WriteBatch
from tests.graphs import counter_line


def _graph(nodes: int = 10) -> Any:
    return counter_line(nodes)


def _referenced(store: Any, thread: str) -> set[str]:
    out: set[str] = set()
    for row in store.list_checkpoints(thread_id=thread):
        out.update(row.values.values())
        out.update(w.value for w in store.get_writes(row.thread_id, row.checkpoint_ns, row.checkpoint_id))
    return out


def test_a_value_is_sent_once_per_run(tmp_path: Path) -> None:
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        store = tape.store
        sent: list[str] = []
        write = store.write

        def counting(batch: WriteBatch, **kw: Any) -> None:
            sent.extend(batch.blobs)
            write(batch, **kw)

        store.write = counting  # type: ignore[method-assign]
        rec = tape.record(_graph(), name="g", checkpointer=tape.saver)
        for durability in ("sync", "async"):
            sent.clear()
            assert rec.invoke({"n": 0}, {"configurable": {"thread_id": durability}}, durability=durability)["n"] == 10
            repeats = len(sent) - len(set(sent))
            if durability == "sync":
                assert repeats == 0, "a blob was sent twice in one run"
            else:
                # LangGraph saves on its background thread: a batch made while an earlier one is
                # being committed may send a blob of it again (the writer learns a batch's addresses
                # once it is committed; the store ignores the copy). Without the rule, a value met
                # in every step (the routing writes' None) is sent again every step: about 10 here.
                assert repeats <= 2, f"{repeats} blobs sent twice in one run"
            refs = _referenced(store, durability)
            assert refs and set(store.get_blobs(refs)) == refs
            # the state reads back through the saver
            assert (
                saver_for(store)
                .get_tuple({"configurable": {"thread_id": durability}})
                .checkpoint["channel_values"]["n"]
                == 10
            )


def test_a_later_run_writes_its_values_again_after_garbage_collection(tmp_path: Path) -> None:
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        store = tape.store
        rec = tape.record(_graph(), name="g", checkpointer=tape.saver)
        rec.invoke({"n": 0}, {"configurable": {"thread_id": "a"}})
        runs = [r.run_id for r in store.list_runs(thread_id="a")]
        store.remove_thread("a", runs)
        removed, _ = store.collect_garbage()
        assert removed > 0
        rec.invoke({"n": 0}, {"configurable": {"thread_id": "b"}})
        refs = _referenced(store, "b")
        assert set(store.get_blobs(refs)) == refs, "a checkpoint of the second run points at a deleted blob"
        state = rec.get_state({"configurable": {"thread_id": "b"}})
        assert state.values["n"] == 10
