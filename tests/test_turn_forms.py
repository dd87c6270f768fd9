"""A chat request whose messages all have ids (a graph's state) takes the writer's forms in one pass (issue 13)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from graphtape.record import llm
from graphtape.record.writer import TapeWriter
from graphtape.store.base import WriteBatch


class NullStore:
    def write(self, batch: WriteBatch, *, fence: Any = None) -> None:
        pass

    def get_chain_nodes(self, ids: list[str]) -> set[str]:
        return set()


def _forms(msgs: list[Any]) -> list[Any]:
    writer = TapeWriter(NullStore(), "turn")  # type: ignore[arg-type]
    return [(f.js, f.data, f.h, writer.form_key(f)) for f in llm._forms(writer, msgs)]


def _fresh(msgs: list[Any]) -> list[Any]:
    forms = TapeWriter(NullStore(), "fresh").forms(msgs)  # type: ignore[arg-type]
    return [(f.js, f.data, f.h, TapeWriter.form_key(f)) for f in forms]


def test_a_history_with_ids_is_the_writers_forms_in_order() -> None:
    history = [
        m for i in range(20) for m in (HumanMessage(f"question {i}", id=f"h{i}"), AIMessage(f"answer {i}", id=f"a{i}"))
    ]
    assert _forms(history) == _fresh(history)
    changed = [*history[:-1], AIMessage("another answer", id="a19")]  # the same id, other content
    assert _forms(changed) == _fresh(changed) != _fresh(history)


def test_an_id_less_message_anywhere_is_still_formed_by_content() -> None:
    for at in (0, 5, 9):
        msgs: list[Any] = [HumanMessage(f"m{i}", id=f"i{i}") for i in range(10)]
        msgs[at] = HumanMessage(f"prompt at {at}")  # a node's prompt: no id
        assert _forms(msgs) == _fresh(msgs)
        assert _forms(msgs) == _fresh(msgs)  # the second time from the id-less memo
