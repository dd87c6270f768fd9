"""Dict key order survives the tape: values are stored in their own order, only hashing is canonical.

Code renders values with ``json.dumps`` or f-strings (a human's edited tool
arguments, a served tool call's ``args``): sorted keys would make a replay
of unchanged code write different text than the recording did.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

import graphtape
from graphtape import serde
from tests.graphs import forbid, live

_rng = random.Random()


class Text(TypedDict, total=False):
    text: str


@tool
def lookup(q: str) -> dict:
    """Look an order up."""
    live("tool", "lookup")
    return {"b": _rng.randint(0, 10**6), "a": q}


class ArgsModel(BaseChatModel):
    """Answers with a tool call whose arguments are not in sorted order."""

    @property
    def _llm_type(self) -> str:
        return "test-unsorted-args"

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        live("llm", "unsorted")
        args = {"zeta": _rng.randint(0, 10**6), "alpha": "x", "mid": {"y": 1, "b": 2}}
        return ChatResult(
            generations=[
                ChatGeneration(message=AIMessage(content="", tool_calls=[{"name": "lookup", "args": args, "id": "c1"}]))
            ]
        )


def _one_node(fn) -> Any:
    b = StateGraph(Text)
    b.add_node("node", fn)
    b.add_edge(START, "node")
    b.add_edge("node", END)
    return b.compile()


def build_tool_graph():
    return _one_node(lambda s: {"text": json.dumps(lookup.invoke({"q": "A-1"}))})


def build_args_graph():
    model = ArgsModel()
    return _one_node(lambda s: {"text": json.dumps(model.invoke([HumanMessage("go")]).tool_calls[0]["args"])})


def build_resume_graph():
    def ask(s: Text):
        answer = interrupt("edit the arguments")
        return {"text": json.dumps(answer) + f" {answer}"}

    return _one_node(ask)


def _replayed_text(tape, run_id: str, build) -> str:
    with forbid():
        result = tape.replay(run_id, build(), mode="strict")
    assert result.status == "finished", (result.error, result.divergence)
    assert result.live == 0 and result.output_matches is True
    return result.output["text"]


def test_a_tool_result_comes_back_in_its_key_order(tape):
    rec = tape.record(build_tool_graph(), name="order-tool")
    text = rec.invoke({})["text"]
    assert text.startswith('{"b": ')
    assert _replayed_text(tape, rec.last_run_id, build_tool_graph) == text


def test_served_tool_call_args_come_back_in_their_key_order(tape):
    rec = tape.record(build_args_graph(), name="order-args")
    text = rec.invoke({})["text"]
    assert text.startswith('{"zeta": ') and '"mid": {"y": 1, "b": 2}' in text
    assert _replayed_text(tape, rec.last_run_id, build_args_graph) == text


def test_a_resume_answer_comes_back_in_its_key_order(tape):
    rec = tape.record(build_resume_graph(), name="order-resume", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "order-resume"}}
    rec.invoke({}, cfg)
    text = rec.invoke(Command(resume={"zeta": 1, "alpha": {"y": 2, "b": 3}}), cfg)["text"]
    assert text == '{"zeta": 1, "alpha": {"y": 2, "b": 3}} ' + "{'zeta': 1, 'alpha': {'y': 2, 'b': 3}}"
    assert _replayed_text(tape, rec.last_run_id, build_resume_graph) == text


def test_export_keeps_the_order_and_re_exports_byte_identically(tape, tmp_path):
    rec = tape.record(build_args_graph(), name="order-export")
    text = rec.invoke({})["text"]
    first = tmp_path / "a.jsonl"
    tape.export_run(rec.last_run_id, first)
    other = graphtape.connect(f"sqlite:///{tmp_path}/other.db")
    try:
        other.import_file(first)
        second = tmp_path / "b.jsonl"
        other.export_run(rec.last_run_id, second)
        assert first.read_bytes() == second.read_bytes()
        assert _replayed_text(other, rec.last_run_id, build_args_graph) == text
    finally:
        other.close()


def test_fingerprints_do_not_depend_on_key_order():
    a, b = {"x": 1, "y": {"p": 1, "q": 2}}, {"y": {"q": 2, "p": 1}, "x": 1}
    assert serde.canonical_json(a) == serde.canonical_json(b)
    assert serde.stored_json(a) != serde.stored_json(b)  # what is stored keeps each value's own order


# -- property: encode, store, load, decode keeps every dict's order ---------------------------------------


def _ordered(value: Any) -> Any:
    """``value`` with every dict turned into its list of items: equality then compares order too."""
    if isinstance(value, dict):
        return [("dict", [(k, _ordered(v)) for k, v in value.items()])]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_ordered(v) for v in value]]
    return value


_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=6) | st.datetimes()
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=6), inner, max_size=5)
    ),
    max_leaves=25,
)


@given(_values)
@settings(max_examples=200, deadline=None)
def test_encode_decode_keeps_dict_order(value):
    again = serde.decode_value(serde.json_round_trip(serde.encode_value(value)))
    assert _ordered(again) == _ordered(value)
