"""A conversation's turn on graphtape's own saver serialises and decodes its new messages only
(``graphtape.runtime.saver_values``), and copies the messages it reads back from a recipe worked
out once per message. These tests pin that the shortcuts keep the promises of the slow paths: a
message changed in place is stored again, a message read back shares no container with another
read or with what is kept, and an id that is not exactly a string is not taken for another
message's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

import graphtape
from graphtape.runtime import saver_values
from graphtape.runtime.saver import GraphtapeSaver, saver_for


def _put(saver: GraphtapeSaver, thread: str, values: dict[str, Any], parent: Any = None) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = {k: i + 1 for i, k in enumerate(values)}
    config: Any = parent or {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return saver.put(config, cp, {"source": "loop", "step": 1}, dict(cp["channel_versions"]))


def _read(saver: GraphtapeSaver, config: Any) -> list[Any]:
    tup = saver.get_tuple(config)
    assert tup is not None
    return list(tup.checkpoint["channel_values"]["messages"])


def _answer(i: int) -> AIMessage:
    return AIMessage(
        f"answer {i} " * 5,
        id=f"a{i}",
        response_metadata={"finish_reason": "stop", "model_name": "m"},
        usage_metadata={"input_tokens": i, "output_tokens": 1, "total_tokens": i + 1},
    )


def test_a_turn_serialises_and_copies_only_its_new_messages(tmp_path: Path, monkeypatch: Any) -> None:
    """Read the state, add a question and an answer, put it: only the two new messages are
    serialised, and a read decodes the same few blobs whatever the length of the history."""
    items: list[Any] = []
    decodes: list[Any] = []
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        saver = saver_for(tape.store)
        msgs: list[BaseMessage] = [HumanMessage("q0", id="h0"), _answer(0), HumanMessage("q1", id="h1"), _answer(1)]
        config = _put(saver, "t", {"messages": msgs})
        serde = saver.serde
        real_loads = serde.loads_typed
        real_dumps = serde.dumps_typed

        def counted_dumps(value: Any) -> Any:
            items.append(value)
            return real_dumps(value)

        monkeypatch.setattr(serde, "dumps_typed", counted_dumps)

        def counted_loads(typed: Any) -> Any:
            decodes.append(typed)
            return real_loads(typed)

        monkeypatch.setattr(serde, "loads_typed", counted_loads)
        per_read: list[int] = []
        for turn in range(2, 12):
            decodes.clear()
            state = _read(saver, config)
            per_read.append(len(decodes))
            items.clear()
            config = _put(
                saver, "t", {"messages": [*state, HumanMessage(f"q{turn}", id=f"h{turn}"), _answer(turn)]}, config
            )
            assert [m.id for m in items if isinstance(m, BaseMessage)] == [f"h{turn}", f"a{turn}"]
        # a read decodes the checkpoint's body and the last turn's two messages, whatever the history
        assert per_read[1:] == [per_read[1]] * 9 and per_read[1] <= 3
        # what was put reads back equal, through this saver and a fresh one (another process)
        want = [m.id for m in _read(saver, config)]
        assert want == [x for t in range(12) for x in (f"h{t}", f"a{t}")]
        assert [m.id for m in _read(GraphtapeSaver(tape.store), config)] == want


def test_a_message_of_the_head_changed_in_place_is_stored_again(tmp_path: Path) -> None:
    """A message read back, changed in place (a field, a scalar inside metadata, an extra field) and
    put again with a new message after it is stored as changed; the checkpoint before keeps the old."""
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        saver = saver_for(tape.store)
        msgs: list[BaseMessage] = [HumanMessage(f"q{i}", id=f"h{i}") if i % 2 == 0 else _answer(i) for i in range(8)]
        first = _put(saver, "t", {"messages": msgs})
        for change in range(3):
            state = _read(saver, first)
            if change == 0:
                state[1].response_metadata["finish_reason"] = "length"
            elif change == 1:
                state[3].usage_metadata["output_tokens"] = 99
            else:
                state[2].content = "edited"
            second = _put(saver, "t", {"messages": [*state, HumanMessage("more", id="x")]}, first)
            for reader in (saver, GraphtapeSaver(tape.store)):
                got = _read(reader, second)
                assert got[:-1] == state and got[-1].content == "more"
                assert _read(reader, first) == msgs


def test_an_id_that_is_not_exactly_a_string_is_not_taken_for_another(tmp_path: Path) -> None:
    """A message whose id is a ``str`` subclass equal to another message's id is serialised on its
    own (the memo keys such a message by identity), as before the whole-list match."""

    class Tag(str):
        pass

    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        saver = saver_for(tape.store)
        msgs: list[BaseMessage] = [HumanMessage(f"q{i}", id=f"h{i}") for i in range(5)]
        first = _put(saver, "t", {"messages": msgs})
        other = [HumanMessage(f"q{i}", id=f"h{i}") for i in range(5)]
        other[0].id = Tag("h0")  # (assigned: validation at construction makes it a str)
        calls: list[Any] = []
        item = saver._lists.item

        def counted_item(msg: Any) -> tuple[str, bytes]:
            calls.append(msg)
            return item(msg)

        saver._lists.item = counted_item  # type: ignore[method-assign]
        _put(saver, "t", {"messages": other}, first)
        assert calls and type(calls[0].id) is Tag


_scalar = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8)
_json = st.recursive(
    _scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(["a", "b"]), _json, max_size=2),
    st.dictionaries(st.sampled_from(["finish_reason", "x"]), _json, max_size=2),
    st.dictionaries(st.sampled_from(["custom"]), _json, max_size=1),
    st.booleans(),
)
def test_a_copy_from_the_recipe_is_a_private_copy(kwargs: Any, meta: Any, extra: Any, ai: bool) -> None:
    """``_Decoded.copy`` gives what ``_private_copy`` gives (class, fields, set fields, extra fields)
    and shares no container with the kept message or another copy, whatever the fields hold."""
    if ai:
        msg: BaseMessage = AIMessage("x", id="m", additional_kwargs=kwargs, response_metadata=meta, **extra)
    else:
        msg = HumanMessage("x", id="m", additional_kwargs=kwargs, response_metadata=meta, **extra)
    kept = saver_values._Decoded(msg, 10)
    one, two = kept.copy(), kept.copy()
    want = saver_values._private_copy(msg)
    for c in (one, two):
        assert type(c) is type(want) and c.__dict__ == want.__dict__
        assert c.__pydantic_fields_set__ == want.__pydantic_fields_set__
        assert c.__pydantic_extra__ == want.__pydantic_extra__
        assert c.__pydantic_private__ == want.__pydantic_private__

    def containers(value: Any) -> list[int]:
        if type(value) is dict:
            return [id(value), *[i for v in value.values() for i in containers(v)]]
        if type(value) is list:
            return [id(value), *[i for v in value for i in containers(v)]]
        return []

    ids = [containers(x.__dict__) + containers(x.__pydantic_extra__) for x in (one, two)]
    kept_ids = set(containers(kept.fields) + containers(kept.extra))
    assert not set(ids[0]) & set(ids[1]) and not set(ids[0]) & kept_ids and not set(ids[1]) & kept_ids
    assert one.__pydantic_fields_set__ is not two.__pydantic_fields_set__
