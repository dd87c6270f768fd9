"""Per-call and per-turn recording work (issue 13): what is memoised must stay exact."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from graphtape.record.writer import TapeWriter
from graphtape.store.base import WriteBatch


class NullStore:
    """A store that keeps its batches and knows no chain node."""

    def __init__(self) -> None:
        self.batches: list[WriteBatch] = []

    def write(self, batch: WriteBatch, *, fence: Any = None) -> None:
        self.batches.append(batch)

    def get_chain_nodes(self, ids: list[str]) -> set[str]:
        return set()


def test_a_change_inside_a_field_gives_a_new_form() -> None:
    writer = TapeWriter(NullStore(), "r")  # type: ignore[arg-type]
    msg = AIMessage("hello", id="pc-nested", additional_kwargs={"a": {"b": 1}})
    first = writer.forms([msg])[0]
    msg.additional_kwargs["a"]["b"] = 2  # in place, inside a field: the field's identity is unchanged
    second = writer.forms([msg])[0]
    assert second.h != first.h and second.js["additional_kwargs"] == {"a": {"b": 2}}
    assert writer.message_blob(msg)[1] == second.h


def test_messages_without_ids_are_read_again_when_a_field_changes() -> None:
    writer = TapeWriter(NullStore(), "r")  # type: ignore[arg-type]
    msg = HumanMessage("no id")
    first = writer.forms([msg])[0]
    assert writer.forms([msg])[0] is first  # the run's memo
    msg.content = "changed"
    assert writer.forms([msg])[0].js["content"] == "changed"
    other = HumanMessage("no id")
    assert writer.forms([other])[0].h == first.h  # same content, same address
