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


def _naive(request: Any) -> str:
    from graphtape import serde

    return serde.digest(serde.canonical_json(request))


def test_a_chat_fingerprint_from_a_remembered_prefix_is_the_full_digest() -> None:
    import random

    from graphtape import serde
    from graphtape.calls import fingerprint

    rng = random.Random(3)
    keys = [serde.digest(str(i)) for i in range(40)]
    req = {"model": {"temperature": 0.5, "model_name": "m", "é": ["x"]}, "class": "a.B"}
    for n in (16, 17, 30, 40, 20, 40):  # grows, then shorter (no prefix of it remembered), then again
        request = {"messages": keys[:n], "request": req}
        assert fingerprint(request) == _naive(request)
    # a list that shares the first key but not the rest, or differs in its last key, or its request
    other = keys[:10] + [serde.digest(f"other {i}") for i in range(30)]
    assert fingerprint({"messages": other, "request": req}) == _naive({"messages": other, "request": req})
    changed = [*keys[:39], serde.digest("changed")]
    assert fingerprint({"request": req, "messages": changed}) == _naive({"messages": changed, "request": req})
    assert fingerprint({"messages": keys, "request": {"x": 1}}) == _naive({"messages": keys, "request": {"x": 1}})
    assert len({fingerprint({"messages": k, "request": req}) for k in (keys, changed, other)}) == 3
    # keys that are not plain digests, and lists of other shapes, are hashed from their full JSON
    odd = [*keys[:20], 'a"b', "ü"]
    assert fingerprint({"messages": odd, "request": req}) == _naive({"messages": odd, "request": req})
    mixed = [*keys[:20], 5, None]
    assert fingerprint({"messages": mixed, "request": req}) == _naive({"messages": mixed, "request": req})
    for _ in range(50):
        ks = [rng.choice(keys[:3]) for _ in range(rng.randint(16, 24))]
        assert fingerprint({"messages": ks, "request": req}) == _naive({"messages": ks, "request": req})


def test_chain_ids_from_a_remembered_prefix_are_the_full_computation() -> None:
    import random

    from graphtape import serde
    from graphtape.record import writer as writer_mod

    def naive(hashes: list[str]) -> list[str]:
        out: list[str] = []
        parent = ""
        for h in hashes:
            parent = serde.digest(f"{parent}/{h}")
            out.append(parent)
        return out

    rng = random.Random(5)
    items = [serde.digest(f"chain item {i}") for i in range(6)]
    for _ in range(300):
        hashes = [items[0]] + [rng.choice(items) for _ in range(rng.randint(0, 12))]
        got = writer_mod.chain_ids(hashes)
        assert got == naive(hashes)
        got.append("caller's edit")  # the memo keeps its own lists
    assert writer_mod.chain_ids([]) == []
