"""The per-call recording work made cheaper (issue 13): every shortcut gives what the full computation gives.

A chat request's model part is remembered per distinct set of parameters
(``graphtape.record.llm.model_request``), a chat fingerprint is hashed from
the request's remembered canonical JSON (``graphtape.calls.chat_fingerprint``),
JSON is written by the C encoder directly (``graphtape.serde``), secret keys,
branches and price entries are remembered. Replay matches on fingerprints and
request addresses, so each is checked against the computation it replaces.
"""

from __future__ import annotations

import json
import operator
import random
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel

import graphtape
from graphtape import calls, serde
from graphtape.pricing import PriceTable
from graphtape.record import llm
from graphtape.testing import SeededChatModel


def _full_request(model: Any, stop: Any, kwargs: dict[str, Any], redact_keys: frozenset[str]) -> dict[str, Any]:
    """The model part of a chat request as it was computed on every call before it was remembered."""
    sent = {k: v for k, v in kwargs.items() if k not in llm._TRACING_ONLY}
    params = llm.sent_form(model._get_invocation_params(stop=stop, **sent))
    params = serde.redact(serde.to_jsonable(params), redact_keys)
    return {"model": params, "class": f"{type(model).__module__}.{type(model).__qualname__}"}


def _naive_fingerprint(keys: list[Any], request: dict[str, Any]) -> str:
    return serde.digest(
        json.dumps(
            {"messages": keys, "request": request},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            default=serde._fallback,
        )
    )


def _check(model: Any, stop: Any = None, redact: frozenset[str] = frozenset(), **kwargs: Any) -> tuple[str, bytes]:
    """model_request against the full computation, twice (the second from the memo); the fingerprint and
    stored request bytes."""
    want = _full_request(model, stop, kwargs, redact)
    keys = [serde.digest(f"m{i}") for i in range(3)]
    for _ in range(2):
        request, request_json, _ = llm.model_request(model, stop, kwargs, redact)
        assert request == want
        assert serde.stored_json(request) == serde.stored_json(want)  # the same key order: the same address
        assert request_json == serde.canonical_json(want)
        assert calls.chat_fingerprint(keys, request_json) == _naive_fingerprint(keys, want)
    return _naive_fingerprint(keys, want), serde.stored_json(want)


def test_a_changed_field_or_argument_changes_the_remembered_request() -> None:
    llm._REQUESTS.clear()
    model = SeededChatModel(seed=1, latency=0, temperature=0.5)
    base = _check(model)
    assert any(v is not None for v in llm._REQUESTS.values())  # remembered
    model.temperature = 0.25  # a field changed in place on the same model object
    changed = _check(model)
    assert changed[0] != base[0]
    model.temperature = 0.5
    assert _check(model) == base
    # 1, 1.0 and True are equal in Python but not in JSON: each is a request of its own
    prints = {_check(model, max_tokens=v)[0] for v in (1, 1.0, True)}
    assert len(prints) == 3
    assert _check(model, stop=["\n"])[0] != base[0]
    a = _check(model, top_p=0.5, seed=3)
    b = _check(model, seed=3, top_p=0.5)
    # the same request in another key order: the same fingerprint, the stored bytes in the caller's order
    assert a[0] == b[0] and a[1] != b[1]
    # a nested argument changed in place
    tools = [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]
    first = _check(model, tools=tools)
    tools[0]["function"]["name"] = "u"
    assert _check(model, tools=tools)[0] != first[0]
    # the redacted keys are part of what is remembered
    secret = _check(model, redact=frozenset({"temperature"}))
    assert secret[0] != base[0] and b"**redacted**" in secret[1]


class Answer(BaseModel):
    text: str


def test_parameters_that_are_not_plain_data_are_worked_out_on_every_call() -> None:
    llm._REQUESTS.clear()
    model = SeededChatModel(seed=1, latency=0)
    # a class is sent as its schema (which may be edited): never remembered
    fp, _ = _check(model, response_format=Answer)
    assert all(v is None for v in llm._REQUESTS.values())

    class Answer2(BaseModel):
        text: str
        score: float

    assert _check(model, response_format=Answer2)[0] != fp
    import enum

    class Mode(enum.Enum):
        A = "a"

    _check(model, mode=Mode.A)  # an enum is not marshal-able: the full computation
    _check(model, when={1, 2}, raw=b"x", pair=(1, 2))  # marshal-able but not plain JSON: not remembered
    assert all(v is None for v in llm._REQUESTS.values())


class NotesState(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]


def _graph(model: Any) -> Any:
    def node(i: int) -> Any:
        def step(state: NotesState) -> dict[str, Any]:
            prev = state["notes"][-1] if state["notes"] else state["topic"]
            answer = model.invoke([SystemMessage(f"step {i}"), HumanMessage(f"Continue: {prev}")])
            return {"notes": [str(answer.content)]}

        return step

    builder = StateGraph(NotesState)
    prev = START
    for i in range(4):
        builder.add_node(f"s{i}", node(i))
        builder.add_edge(prev, f"s{i}")
        prev = f"s{i}"
    builder.add_edge(prev, END)
    return builder.compile()


def _call_rows(tape: Any, run_id: str) -> list[tuple[Any, ...]]:
    rows = []
    for e in tape.events(run_id, ["llm_call"]):
        d = e.data
        # the response's message ids are new on every run (``lc_run--<uuid>``): its messages' addresses are not
        response = json.dumps(tape.store.get_json(d["response"]))
        rows.append(
            (
                d["fingerprint"],
                d["request"],
                d.get("messages"),
                tape.store.get_blob(d["request"]),
                [m["h"] for m in json.loads(response)["v"]],
            )
        )
    return rows


def test_a_run_recorded_with_the_memo_stores_what_it_stores_without(tmp_path: Any, monkeypatch: Any) -> None:
    """The same run (same seed) recorded with every request computed in full, then from the warm memo."""
    tape = graphtape.connect(f"sqlite:///{tmp_path}/memo.db")
    inp = {"topic": "refunds", "notes": []}
    llm._REQUESTS.clear()
    with monkeypatch.context() as m:
        m.setattr(llm, "_plain", lambda value: False)  # nothing remembered: the full computation every call
        m.setattr(llm, "_forms", lambda writer, messages: writer.forms(list(messages)))
        rec = tape.record(_graph(SeededChatModel(seed=7, latency=0)), name="memo")
        rec.invoke(inp, {"configurable": {"thread_id": "full"}})
        full = _call_rows(tape, rec.last_run_id)
    assert all(v is None for v in llm._REQUESTS.values())
    llm._REQUESTS.clear()
    llm._IDLESS.clear()
    for thread in ("warm", "memo"):
        rec = tape.record(_graph(SeededChatModel(seed=7, latency=0)), name="memo")
        rec.invoke(inp, {"configurable": {"thread_id": thread}})
    assert any(v is not None for v in llm._REQUESTS.values()) and llm._IDLESS
    assert _call_rows(tape, rec.last_run_id) == full
    assert len(full) == 4
    # and the strict replay of the run recorded in full is served every call from the memo's fingerprints
    result = tape.replay(rec.last_run_id, _graph(SeededChatModel(seed=99, latency=0)), mode="strict")
    assert result.status == "finished" and result.served == 4 and result.live == 0
    tape.close()


def test_chat_fingerprint_is_the_canonical_digest_for_any_keys() -> None:
    rng = random.Random(11)
    req = {"model": {"temperature": 0.5, "é": ["x", 1.0, None]}, "class": "a.B"}
    pool: list[Any] = [serde.digest(str(i)) for i in range(5)] + ['a"b', "ü", 5, None, {"k": [1]}]
    for _ in range(300):
        keys = [rng.choice(pool) for _ in range(rng.randint(0, 30))]
        want = _naive_fingerprint(keys, req)
        assert calls.chat_fingerprint(keys, serde.canonical_json(req)) == want
        assert calls.fingerprint({"messages": keys, "request": req}) == want
        assert calls.fingerprint({"request": req, "messages": keys}) == want


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    scalars: list[Any] = [
        "",
        "plain",
        'é\u2028\x00"\\/\n',
        "\U0001f600",
        0,
        -7,
        2**70,
        1.5,
        -0.0,
        1e300,
        float("inf"),
        float("nan"),
        True,
        False,
        None,
    ]
    if depth > 3 or rng.random() < 0.4:
        return rng.choice(scalars)
    kind = rng.randrange(3)
    if kind == 0:
        return {
            rng.choice(["a", "b", "Z", "é", "10", "2"]): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))
        }
    if kind == 1:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return tuple(_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3)))


def test_json_is_written_as_json_dumps_writes_it() -> None:
    import datetime

    rng = random.Random(5)
    values = [_random_value(rng) for _ in range(500)]
    values += [{1: "int key", 2.5: "float key", False: "bool key"}, {"t": datetime.datetime(2020, 1, 2, 3, 4)}]
    for v in values:
        stored = json.dumps(v, separators=(",", ":"), ensure_ascii=False, default=serde._fallback).encode("utf-8")
        canon = json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=serde._fallback)
        assert serde.stored_json(v) == stored
        assert serde.canonical_json(v) == canon
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular"):
        serde.stored_json(cycle)
    with pytest.raises(ValueError, match="Circular"):
        serde.stored_json(cycle)  # a failed write leaves nothing behind that breaks the next one
    assert serde.stored_json([[1]]) == b"[[1]]"
    with pytest.raises(TypeError):
        serde.canonical_json({1: 1, "a": 2})  # keys that cannot be sorted, as json.dumps


def test_remembered_secret_keys_redact_as_the_pattern_does() -> None:
    keys = ["api_key", "API-KEY", "query", "token", "tokens", "access_token", "Authorization", "name", "pass", "x"]
    for _ in range(2):  # the second time from the memo
        for k in keys:
            out = serde.redact({k: "v", 3: {k: "w"}}, frozenset({"x"}))
            secret = serde.SECRET_KEY_PATTERN.search(k) is not None or k == "x"
            assert out[k] == ("**redacted**" if secret else "v")
            assert out[3][k] == ("**redacted**" if secret else "w")
    assert serde.redact({"password": "", "secret": None, "api_key": {"type": "secret", "id": ["X"]}}) == {
        "password": "",
        "secret": None,
        "api_key": {"type": "secret", "id": ["X"]},
    }


def test_a_remembered_price_entry_follows_the_price_table() -> None:
    table = PriceTable()
    assert table.cost("gpt-4o-mini-2024", 1_000_000, 0) == pytest.approx(0.15)
    assert table.cost("gpt-4o-mini-2024", 1_000_000, 0) == pytest.approx(0.15)
    table.prices["gpt-4o-mini-2024"] = (9.0, 0.0)  # a longer entry added later is seen
    assert table.cost("gpt-4o-mini-2024", 1_000_000, 0) == pytest.approx(9.0)
    table.prices["gpt-4o-mini-2024"] = (1.0, 0.0)
    assert table.cost("gpt-4o-mini-2024", 1_000_000, 0) == pytest.approx(1.0)
    assert table.cost("unknown", 10, 10) == 0.0 and table.cost(None, 10, 10) == 0.0


def test_a_remembered_branch_is_the_normalised_path() -> None:
    uuid = "0f0d5f3e-8b8f-6c1e-2a6e-4b0e2e7c5a11"
    for path in [("__pregel_pull", "n"), ("__pregel_push", 2), ("__pregel_push", ("__pregel_pull", "a"), 1, uuid), ()]:
        want = ",".join(str(p) for p in calls.normalise_path(path))
        for _ in range(2):
            assert calls.branch_of({"langgraph_path": path}) == want
    assert calls.branch_of({}) == ""

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

    odd = ("__pregel_push", ("__pregel_pull", "a"), 0, uuid, Unhashable())
    assert calls.branch_of({"langgraph_path": odd}) == ",".join(str(p) for p in calls.normalise_path(odd))
    assert calls.branch_of({"langgraph_path": ["__pregel_pull", "n"]}) == "__pregel_pull,n"


def test_a_served_message_is_decoded_with_its_id_as_before() -> None:
    from langchain_core.messages import AIMessage, ToolMessage

    msgs = [
        AIMessage(
            "hi",
            id="lc_run--1",
            tool_calls=[{"name": "t", "args": {"b": 1, "a": 2}, "id": "c1"}],
            usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
            response_metadata={"model_name": "m"},
        ),
        ToolMessage("done", tool_call_id="c1", id="tm-1", name="t"),
        HumanMessage("no id"),
        SystemMessage("sys", id="s-1"),
    ]
    blobs: dict[str, Any] = {}

    def put(value: Any) -> str:
        h = serde.digest(serde.stored_json(value))
        blobs[h] = serde.json_round_trip(value)
        return h

    env = serde.json_round_trip(serde.encode_value(msgs, put))
    back = serde.decode_value(env, blobs.__getitem__)
    assert back == msgs
    for got, want in zip(back, msgs, strict=True):
        assert type(got) is type(want) and got.id == want.id
        # as the copy with the id set gave it before
        before = serde.message_from_json(blobs[serde.digest(serde.stored_json(serde.message_json(want)))])
        if want.id is not None:
            before = before.model_copy(update={"id": want.id})
        assert got == before and got.model_dump() == before.model_dump()


def test_a_tool_code_is_remembered_per_function() -> None:
    from langchain_core.tools import BaseTool, tool

    from graphtape.record import tools as tools_mod
    from graphtape.record.codeprint import tool_code

    @tool
    def first(x: str) -> str:
        """First."""
        return x

    @tool
    def second(x: str) -> str:
        """Second."""
        return x + x

    assert tools_mod._code(first) == tool_code(first) == tools_mod._code(first)
    assert tools_mod._code(second) == tool_code(second) != tool_code(first)
    first.func = second.func  # a tool given another function is fingerprinted by it
    assert tools_mod._code(first) == tool_code(second)

    class Plain(BaseTool):
        name: str = "plain"
        description: str = "plain"

        def _run(self, x: str) -> str:
            return x

    t = Plain()
    code = tools_mod._code(t)
    assert code == tool_code(t)

    def other_run(self: Any, x: str) -> str:
        return x * 3

    Plain._run = other_run  # type: ignore[method-assign]
    assert tools_mod._code(t) == tool_code(t) != code


def test_a_message_without_an_id_is_found_by_its_exact_content() -> None:
    from langchain_core.messages import AIMessage

    from graphtape.record.writer import TapeWriter
    from graphtape.store.base import WriteBatch

    class NullStore:
        def write(self, batch: WriteBatch, *, fence: Any = None) -> None:
            pass

        def get_chain_nodes(self, ids: list[str]) -> set[str]:
            return set()

    def fresh(msgs: list[Any]) -> list[Any]:
        forms = TapeWriter(NullStore(), "fresh").forms(msgs)  # type: ignore[arg-type]
        return [(f.js, f.data, f.h, TapeWriter.form_key(f)) for f in forms]

    def memo(msgs: list[Any]) -> list[Any]:
        writer = TapeWriter(NullStore(), "memo")  # type: ignore[arg-type]
        return [(f.js, f.data, f.h, writer.form_key(f)) for f in llm._forms(writer, msgs)]

    class NamedHuman(HumanMessage):
        name: str | None = "bot"  # another default: None is written for this class, left out for HumanMessage

    llm._IDLESS.clear()
    variants = [
        HumanMessage("same fields"),
        NamedHuman("same fields", name=None),
        SystemMessage("You are step 1."),
        SystemMessage("You are step 2."),
        HumanMessage("You are step 1."),  # another class, the same content
        HumanMessage("x", additional_kwargs={"n": 1}),
        HumanMessage("x", additional_kwargs={"n": 1.0}),  # equal in Python, not in JSON
        HumanMessage("x", additional_kwargs={"n": True}),
        HumanMessage("x", additional_kwargs={"a": 1, "b": 2}),
        HumanMessage("x", additional_kwargs={"b": 2, "a": 1}),  # another key order, stored as given
        HumanMessage("x", extra_field=1),  # extra fields are stored too
        HumanMessage("x", extra_field=2),
        HumanMessage([{"type": "text", "text": "parts"}]),
        AIMessage("a", tool_calls=[{"name": "t", "args": {"q": 1}, "id": "c"}]),
        HumanMessage("with id", id="m-1"),  # left to the writer's memo
        HumanMessage("object", additional_kwargs={"o": Answer(text="t")}),  # not plain: left to the writer
    ]
    for _ in range(2):  # then from the memo
        assert memo(variants) == fresh(variants)
        assert memo(list(reversed(variants))) == fresh(list(reversed(variants)))
    assert len({m[2] for m in memo(variants)}) == len(variants)
    # a message changed in place after its form was remembered gets the form of what it now holds
    msg = HumanMessage("x", additional_kwargs={"a": {"b": 1}})
    first = memo([msg])
    msg.additional_kwargs["a"]["b"] = 2
    assert memo([msg]) == fresh([msg]) != first


class ChatState(TypedDict):
    messages: list


def test_a_replayed_request_with_content_blocks_is_normalised_as_langchain_does(tmp_path: Any) -> None:
    """The replay's own path passes text messages as they are, and translates blocks as ``generate`` does."""
    blocks = [{"type": "text", "text": "look"}, {"type": "image", "source_type": "url", "url": "http://x/y.png"}]

    def build(model: Any) -> Any:
        def chat(state: ChatState) -> dict[str, Any]:
            text = model.invoke([SystemMessage("sys"), HumanMessage("plain")])
            multi = model.invoke([HumanMessage(list(blocks))])
            return {"messages": [text, multi]}

        builder = StateGraph(ChatState)
        builder.add_node("chat", chat)
        builder.add_edge(START, "chat")
        builder.add_edge("chat", END)
        return builder.compile()

    tape = graphtape.connect(f"sqlite:///{tmp_path}/blocks.db")
    rec = tape.record(build(SeededChatModel(seed=3, latency=0)), name="blocks")
    out = rec.invoke({"messages": []}, {"configurable": {"thread_id": "b"}})
    result = tape.replay(rec.last_run_id, build(SeededChatModel(seed=4, latency=0)), mode="strict")
    assert result.status == "finished" and result.served == 2 and result.live == 0
    recorded = [e.data["fingerprint"] for e in tape.events(rec.last_run_id, ["llm_call"])]
    replayed = [e.data["fingerprint"] for e in tape.events(result.run_id, ["llm_call"])]
    assert replayed == recorded
    assert [m.content for m in out["messages"]] == [m.content for m in result.output["messages"]]
    tape.close()


def test_message_json_is_the_json_able_dict_of_the_non_default_fields() -> None:
    import datetime

    from langchain_core.messages import AIMessage, ToolMessage, message_to_dict
    from pydantic_core import PydanticUndefined

    def defaults(cls: type) -> dict[str, Any]:
        """Each field's default as pydantic declares it (a factory other than dict/list/tuple: none to compare)."""
        out: dict[str, Any] = {}
        for key, f in cls.model_fields.items():  # type: ignore[attr-defined]
            if f.default_factory is not None:
                if f.default_factory in (dict, list, tuple):
                    out[key] = f.default_factory()
            elif f.default is not PydanticUndefined:
                out[key] = f.default
        return out

    def reference(msg: Any) -> dict[str, Any]:
        d = message_to_dict(msg)
        out: dict[str, Any] = {"type": d["type"]}
        declared = defaults(type(msg))
        for key, value in d["data"].items():
            if key in ("type", "id"):
                continue
            if key in declared and value == declared[key]:
                continue
            out[key] = value
        return serde.to_jsonable(out)

    msgs = [
        HumanMessage("plain", id="x"),
        HumanMessage([{"type": "text", "text": "t"}, "s"], name="n"),
        AIMessage(
            "a",
            tool_calls=[{"name": "t", "args": {"when": datetime.date(2020, 1, 2), "pair": (1, 2)}, "id": "c"}],
            additional_kwargs={"obj": Answer(text="x"), 3: "int key", "set": {2, 1}},
            usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
        ),
        ToolMessage("r", tool_call_id="c", artifact={"b": b"bytes"}, status="error"),
        SystemMessage("s", extra_field=datetime.datetime(2020, 1, 2, 3, 4)),
    ]
    for msg in msgs:
        got = serde.message_json(msg)
        assert got == reference(msg)
        assert serde.stored_json(got) == serde.stored_json(reference(msg))
