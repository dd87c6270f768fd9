"""graphtape's saver stores a checkpoint's list of messages as a chain of its messages
(``graphtape.runtime.saver_values``): each message serialised and stored once, a turn sends only
its new messages, and the list reads back equal (same classes, same fields, same order)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypedDict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import graphtape
from graphtape.runtime import saver_values
from graphtape.runtime.saver import GraphtapeSaver, saver_for
from graphtape.store.base import WriteBatch
from graphtape.testing import SeededChatModel

# -- helpers ------------------------------------------------------------------------------


def _same(got: list[Any], want: list[Any]) -> None:
    """Equal lists of the same classes, field by field (extra fields included)."""
    assert [type(m) for m in got] == [type(m) for m in want]
    assert got == want
    for g, w in zip(got, want):
        assert g.model_dump() == w.model_dump()
        assert (g.__pydantic_extra__ or {}) == (w.__pydantic_extra__ or {})


def _put(saver: GraphtapeSaver, thread: str, values: dict[str, Any], parent: dict[str, Any] | None = None) -> dict:
    cp = empty_checkpoint()
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = {k: i + 1 for i, k in enumerate(values)}
    config = parent or {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return saver.put(config, cp, {"source": "loop", "step": 1}, dict(cp["channel_versions"]))


def _read(saver: GraphtapeSaver, config: dict) -> dict[str, Any]:
    tup = saver.get_tuple(config)
    assert tup is not None
    return tup.checkpoint["channel_values"]


def _conversation(n: int, prefix: str = "m") -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(n):
        if i % 2:
            out.append(AIMessage(f"answer {i} " * 5, id=f"{prefix}{i}", response_metadata={"finish_reason": "stop"}))
        else:
            out.append(HumanMessage(f"question {i}", id=f"{prefix}{i}"))
    return out


def _fresh(store: Any) -> GraphtapeSaver:
    """A saver with empty memos (another process reading the same store)."""
    return GraphtapeSaver(store)


# -- round trip -----------------------------------------------------------------------------

_text = st.text(max_size=20)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_ids = st.none() | st.text(alphabet="abcdef0123456789-", min_size=1, max_size=12)


@st.composite
def _message(draw: Any) -> BaseMessage:
    kind = draw(st.sampled_from(["human", "ai", "tool", "system", "blocks"]))
    mid = draw(_ids)
    kwargs = draw(st.dictionaries(st.sampled_from(["a", "b", "refusal"]), _json, max_size=2))
    if kind == "human":
        extra = draw(st.dictionaries(st.sampled_from(["custom", "tag"]), _json, max_size=1))
        return HumanMessage(draw(_text), id=mid, additional_kwargs=kwargs, **extra)
    if kind == "ai":
        calls = [
            {"name": draw(st.sampled_from(["search", "mail"])), "args": {"q": draw(_text)}, "id": f"call_{i}"}
            for i in range(draw(st.integers(0, 2)))
        ]
        return AIMessage(
            draw(_text),
            id=mid,
            tool_calls=calls,
            additional_kwargs=kwargs,
            response_metadata=draw(st.dictionaries(st.sampled_from(["model", "finish_reason"]), _json, max_size=2)),
        )
    if kind == "tool":
        return ToolMessage(
            draw(_text), tool_call_id=draw(_text), id=mid, status=draw(st.sampled_from(["success", "error"]))
        )
    if kind == "system":
        return SystemMessage(draw(_text), id=mid, name=draw(st.none() | _text))
    return AIMessage([{"type": "text", "text": draw(_text)}, draw(_text)], id=mid)


def test_lists_of_messages_read_back_as_put(tmp_path: Path) -> None:
    """A list of messages put (chained, or one blob below the threshold) reads back equal, through
    the saver that wrote it and through a fresh one; a sequence of checkpoints of one thread
    (growing, edited, shrunk) reads back checkpoint by checkpoint."""
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        saver = saver_for(tape.store)
        counter = iter(range(10**6))

        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(st.lists(st.lists(_message(), max_size=8), min_size=1, max_size=4), st.booleans())
        def check(lists: list[list[BaseMessage]], grow: bool) -> None:
            thread = f"t{next(counter)}"
            put: list[tuple[dict, list[BaseMessage]]] = []
            config = None
            history: list[BaseMessage] = []
            for part in lists:
                history = history + part if grow else list(part)
                value = list(history)
                config = _put(saver, thread, {"messages": value, "n": len(value)}, config)
                put.append((config, [m.model_copy(deep=True) for m in value]))
            for config, want in put:
                for reader in (saver, _fresh(tape.store)):
                    got = _read(reader, config)
                    _same(got["messages"], want)
                    assert got["n"] == len(want)

        check()


def test_a_message_changed_in_place_is_stored_again(tmp_path: Path) -> None:
    """The memo reuses a message's blob only while its fields are equal to what was stored."""
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        saver = saver_for(tape.store)
        msgs = _conversation(6)
        first = _put(saver, "t", {"messages": msgs})
        msgs[1].content = "changed"
        msgs[2].additional_kwargs["k"] = [1]  # inside a field
        second = _put(saver, "t", {"messages": msgs}, first)
        assert _read(_fresh(tape.store), first)["messages"][1].content == "answer 1 " * 5
        assert "k" not in _read(_fresh(tape.store), first)["messages"][2].additional_kwargs
        got = _read(_fresh(tape.store), second)["messages"]
        assert got[1].content == "changed" and got[2].additional_kwargs == {"k": [1]}


def test_a_message_read_back_is_a_copy_of_its_own(tmp_path: Path) -> None:
    """Messages read back are new objects each time: a change made in place to one read (a field,
    inside a field, an extra field) reaches neither the next read nor what was stored."""
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        saver = saver_for(tape.store)
        msgs = _conversation(6)
        msgs[1] = AIMessage(
            "calls", id="m1", tool_calls=[{"name": "f", "args": {"q": [1]}, "id": "c1"}], response_metadata={"a": {}}
        )
        msgs[0] = HumanMessage("hi", id="m0", custom={"k": [1]})
        want = [m.model_copy(deep=True) for m in msgs]
        config = _put(saver, "t", {"messages": msgs})
        for _ in range(3):
            got = _read(saver, config)["messages"]
            _same(got, want)
            got[1].tool_calls[0]["args"]["q"].append(2)
            got[1].response_metadata["a"]["x"] = 1
            got[1].content = "changed"
            got[0].custom["k"].append(2)  # type: ignore[attr-defined]
            got[2].additional_kwargs["y"] = 1
        _same(_read(_fresh(tape.store), config)["messages"], want)
        # a changed read put again is stored as changed
        config2 = _put(saver, "t", {"messages": got}, config)
        again = _read(_fresh(tape.store), config2)["messages"]
        assert again[1].content == "changed" and again[0].custom == {"k": [1, 2]}  # type: ignore[attr-defined]


def test_old_single_blob_values_still_load(tmp_path: Path) -> None:
    """A tape written before chained lists (one serde blob per value) reads back, and a thread goes
    on from such a checkpoint with chained values."""
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        old = GraphtapeSaver(tape.store)
        old.chain_lists = False
        msgs = _conversation(8)
        config = _put(old, "t", {"messages": msgs})
        row = tape.store.get_checkpoint("t", "")
        blob = tape.store.get_blobs([row.values["messages"]])[row.values["messages"]]
        assert blob.startswith(b"msgpack\x00")  # the old form, as such tapes hold it
        new = _fresh(tape.store)
        _same(_read(new, config)["messages"], msgs)
        more = msgs + _conversation(2, prefix="n")
        config2 = _put(new, "t", {"messages": more}, config)
        row2 = tape.store.get_checkpoint("t", "", config2["configurable"]["checkpoint_id"])
        assert saver_values.chained_head(tape.store.get_blobs([row2.values["messages"]])[row2.values["messages"]])
        _same(_read(_fresh(tape.store), config2)["messages"], more)
        _same(_read(_fresh(tape.store), config)["messages"], msgs)


def test_short_lists_and_other_lists_stay_one_blob(tmp_path: Path) -> None:
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        saver = saver_for(tape.store)
        short = _conversation(saver_values.CHAIN_MIN - 1)
        mixed = [*_conversation(4), "text"]
        config = _put(saver, "t", {"short": short, "mixed": mixed, "tuple": tuple(_conversation(5))})
        row = tape.store.get_checkpoint("t", "")
        blobs = tape.store.get_blobs(row.values.values())
        assert not any(saver_values.chained_head(b) for b in blobs.values())
        got = _read(_fresh(tape.store), config)
        _same(got["short"], short)
        # (a tuple comes back as the serde gives it back; the point is that it is not chained)
        assert got["mixed"] == mixed and list(got["tuple"]) == _conversation(5)


# -- a recorded conversation --------------------------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def _chat() -> Any:
    model = SeededChatModel(seed=3, latency=0)

    def chat(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(Chat)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    return builder.compile()


def _counting(store: Any) -> list[WriteBatch]:
    batches: list[WriteBatch] = []
    write = store.write

    def counting(batch: WriteBatch, **kw: Any) -> None:
        batches.append(batch)
        write(batch, **kw)

    store.write = counting
    return batches


def test_a_turn_sends_and_serialises_only_its_new_messages(tmp_path: Path) -> None:
    """What a turn of a conversation sends to the store (message blobs, chain nodes, bytes) and the
    messages it serialises do not grow with the history."""
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        saver = saver_for(tape.store)
        batches = _counting(tape.store)
        serialised: list[Any] = []
        dumps = saver.serde.dumps_typed

        def counting_dumps(obj: Any) -> Any:
            if isinstance(obj, BaseMessage):
                serialised.append(obj)
            return dumps(obj)

        saver.serde.dumps_typed = counting_dumps  # type: ignore[method-assign]
        rec = tape.record(_chat(), name="chat", checkpointer=tape.saver)
        cfg = {"configurable": {"thread_id": "c"}}
        per_turn: list[tuple[int, int, int]] = []
        for turn in range(24):
            batches.clear()
            serialised.clear()
            out = rec.invoke({"messages": [HumanMessage(f"turn {turn} " + "words " * 20)]}, cfg)
            assert len(out["messages"]) == 2 * (turn + 1)
            sent = sum(len(b) for batch in batches for b in batch.blobs.values())
            nodes = sum(len(batch.chains) for batch in batches)
            per_turn.append((sent, nodes, len(serialised)))
        early, late = per_turn[6], per_turn[-1]
        # the run's checkpoints add two messages to the channel: each serialised once, one chain node each
        assert late[2] <= 2, per_turn
        assert late[0] < 1.3 * early[0], per_turn
        # the state reads back, through a saver that did not write it
        got = _fresh(tape.store).get_tuple(cfg).checkpoint["channel_values"]["messages"]
        _same(got, out["messages"])


def test_time_travel_and_forks_of_a_conversation(tape: Any) -> None:
    """Every checkpoint of a recorded conversation reads back its own list; a fork from an earlier
    checkpoint goes on from that list and leaves the main line as it was (every backend)."""
    rec = tape.record(_chat(), name="chat", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "f"}}
    for turn in range(4):
        out = rec.invoke({"messages": [HumanMessage(f"turn {turn}")]}, cfg)
    final = out["messages"]
    history = list(rec.get_state_history(cfg))
    for snap in history:
        got = snap.values.get("messages", [])
        assert got == final[: len(got)]
    # fork from the end of turn 2 (4 messages)
    at = next(s for s in history if len(s.values.get("messages", [])) == 4 and not s.next)
    forked = rec.invoke({"messages": [HumanMessage("another way")]}, at.config)
    assert forked["messages"][:4] == final[:4] and forked["messages"][4].content == "another way"
    assert len(forked["messages"]) == 6
    # an edit (update_state) of the fork's state, then the main line: unchanged
    edited = rec.update_state(cfg, {"messages": [HumanMessage("edited", id=final[-1].id)]})
    assert rec.get_state(edited).values["messages"][-1].content == "edited"
    reader = _fresh(tape.store)
    for snap in history:
        got = reader.get_tuple(snap.config).checkpoint["channel_values"].get("messages", [])
        _same(got, final[: len(got)])


def test_garbage_collection_keeps_the_messages_of_a_live_value(tape: Any) -> None:
    """A chained value keeps its chain and its messages alive; a removed thread's go, and a later run
    that meets the same messages writes them again (every backend)."""
    store = tape.store
    saver = saver_for(store)
    msgs = _conversation(10)
    config = _put(saver, "keep", {"messages": msgs})
    _put(saver, "drop", {"messages": msgs[:6] + _conversation(4, prefix="d")})
    store.delete_thread("drop")
    store.collect_garbage()
    _same(_read(_fresh(store), config)["messages"], msgs)
    store.delete_thread("keep")
    removed_blobs, removed_nodes = store.collect_garbage()
    assert removed_blobs >= 10 and removed_nodes >= 10
    again = _put(saver, "again", {"messages": msgs})
    _same(_read(_fresh(store), again)["messages"], msgs)


def test_a_strict_replay_of_a_conversation_stores_its_lists(tape: Any) -> None:
    """A strict replay holds its checkpoints to its end (graphtape.replay.saver): its chained lists,
    each node handed over once, are on the store when it ends and read back as recorded."""
    rec = tape.record(_chat(), name="chat")
    cfg = {"configurable": {"thread_id": "r"}}
    for turn in range(3):
        out = rec.invoke({"messages": [HumanMessage(f"turn {turn}", id=f"h{turn}")]}, cfg)
    batches = _counting(tape.store)
    result = tape.replay(rec.last_run_id, _chat(), mode="strict")
    assert result.status == "finished" and result.output_matches, result.error
    nodes = [cid for batch in batches for cid in batch.chains]
    assert len(nodes) == len(set(nodes))
    got = _fresh(tape.store).get_tuple({"configurable": {"thread_id": result.thread_id}})
    _same(got.checkpoint["channel_values"]["messages"], out["messages"])


def test_small_memos_drop_entries_and_still_read_back(tmp_path: Path, monkeypatch: Any) -> None:
    """The memos are bounded: with room for a few entries only, what they dropped is worked out
    again (serialised, read from the store, decoded) and every list still reads back."""
    for name, small in (("MEMO_MAX", 3), ("HEADS_MAX", 2), ("BLOBS_BYTES", 2000), ("DECODED_MAX", 3)):
        monkeypatch.setattr(saver_values, name, small)
    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        saver = saver_for(tape.store)
        put = []
        config = None
        msgs: list[BaseMessage] = []
        for turn in range(6):
            msgs = msgs + _conversation(3, prefix=f"t{turn}-")
            config = _put(saver, "t", {"messages": msgs}, config)
            put.append((config, [m.model_copy(deep=True) for m in msgs]))
        for config, want in put * 2:
            _same(_read(saver, config)["messages"], want)
        assert len(saver._lists._decoded) <= 3 and len(saver._lists._chains) <= 2


def test_a_field_that_cannot_be_compared_is_serialised_again(tmp_path: Path) -> None:
    """A field value whose ``==`` raises (an array's) makes the memo miss, not the checkpoint fail."""

    class Ambiguous(list):
        def __eq__(self, other: object) -> bool:
            raise ValueError("the truth value is ambiguous")

        __hash__ = None  # type: ignore[assignment]

    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        saver = saver_for(tape.store)
        msgs = _conversation(5)
        msgs[0].additional_kwargs["data"] = Ambiguous([1, 2])
        first = _put(saver, "t", {"messages": msgs})
        second = _put(saver, "t", {"messages": [*msgs, HumanMessage("more", id="x")]}, first)
        got = _read(_fresh(tape.store), second)["messages"]
        assert list(got[0].additional_kwargs["data"]) == [1, 2] and len(got) == 6


def test_an_archived_conversation_comes_back_with_its_lists(tmp_path: Path) -> None:
    """An archive carries a chained list's chain and messages (the ``"$chain"`` reference is
    followed as for the tape's own chains); after garbage collection and a restore the thread's
    checkpoints read back as before."""
    from tests.test_archive import DAY, age_thread

    with graphtape.connect(f"sqlite:///{tmp_path}/t.db") as tape:
        rec = tape.record(_chat(), name="chat", checkpointer=tape.saver)
        cfg = {"configurable": {"thread_id": "old"}}
        for turn in range(3):
            rec.invoke({"messages": [HumanMessage(f"turn {turn}", id=f"h{turn}")]}, cfg)
        before = [
            (row.checkpoint_id, _read(_fresh(tape.store), {"configurable": {"thread_id": "old", "checkpoint_id": cid}}))
            for row in tape.store.list_checkpoints(thread_id="old")
            for cid in [row.checkpoint_id]
        ]
        latest = tape.store.get_checkpoint("old", "")
        head = saver_values.chained_head(tape.store.get_blob(latest.values["messages"]))
        assert head is not None
        age_thread(tape, "old")
        tape.archive(older_than=30 * DAY, to=tmp_path / "cold")
        tape.store.collect_garbage()
        assert tape.store.list_checkpoints(thread_id="old") == []
        assert tape.store.get_chain_nodes([head]) == {}
        tape.restore("old", from_=tmp_path / "cold")
        assert head in tape.store.get_chain_nodes([head])
        for cid, values in before:
            got = _read(_fresh(tape.store), {"configurable": {"thread_id": "old", "checkpoint_id": cid}})
            assert got.keys() == values.keys()
            if "messages" in values:
                _same(got["messages"], values["messages"])
