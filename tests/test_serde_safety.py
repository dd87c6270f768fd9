"""A tape is data, never code: decoding imports and calls nothing the tape names.

Every hostile payload here would create the file ``pwned-by-tape`` in the
working directory (``tmp_path``) if a decoder imported or called what it
names; each test checks that the file does not exist afterwards.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import sys
from pathlib import Path

import pytest
from langchain_core.load import dumpd
from langchain_core.prompts import PromptTemplate
from pydantic import BaseModel
from typing_extensions import TypedDict

import graphtape
from graphtape import export, serde
from graphtape.errors import GraphtapeWarning, TapeFormatError
from graphtape.record.errors_codec import RecordedError, rebuild_error
from graphtape.typepolicy import TypePolicy, register_types
from tests import graphs
from tests.graphs import forbid

HOSTILE = Path(__file__).parent / "tapes" / "hostile"
MARKER = "pwned-by-tape"
PAYLOAD_MODULE = "gt_hostile_payload"


@pytest.fixture
def payload_module(tmp_path, monkeypatch):
    """A module on sys.path whose import creates the marker: a decoder that imports by name runs it."""
    (tmp_path / f"{PAYLOAD_MODULE}.py").write_text(
        f"open({MARKER!r}, 'w').close()\nclass Order:\n    pass\nclass Boom(Exception):\n    pass\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(PAYLOAD_MODULE, None)
    yield
    sys.modules.pop(PAYLOAD_MODULE, None)


def nothing_ran() -> bool:
    return not Path(MARKER).exists() and PAYLOAD_MODULE not in sys.modules


# -- decoding envelopes that name callables -----------------------------------------------------

HOSTILE_VALUES = [
    {"t": "enum", "c": "os:system", "v": {"t": "json", "v": f"touch {MARKER}"}},
    {"t": "enum", "c": "builtins:exec", "v": {"t": "json", "v": f"open({MARKER!r}, 'w').close()"}},
    {"t": "dataclass", "c": "subprocess:Popen", "v": {"args": {"t": "json", "v": ["touch", MARKER]}}},
    {"t": "pydantic", "c": "subprocess:Popen", "v": ["touch", MARKER]},
    {"t": "pydantic", "c": f"{PAYLOAD_MODULE}:Order", "v": {"order": "A-1"}},
    {"t": "dataclass", "c": "os:system.__call__", "v": {}},
    {"t": "namedtuple", "c": "os:system", "v": [{"t": "json", "v": f"touch {MARKER}"}]},
    {"t": "namedtuple", "c": f"{PAYLOAD_MODULE}:Order", "v": [{"t": "json", "v": "A-1"}]},
]


@pytest.mark.parametrize("env", HOSTILE_VALUES, ids=lambda e: f"{e['t']}-{e['c']}")
def test_a_value_naming_a_callable_decodes_as_plain_data(env, payload_module):
    with pytest.warns(GraphtapeWarning, match="not an allowed class"):
        value = serde.decode_value(serde.json_round_trip(env))
    assert nothing_ran()
    inner = env["v"]
    expected = inner["v"] if env["t"] == "enum" else inner
    if env["t"] == "dataclass":
        expected = {k: x["v"] for k, x in inner.items()}
    if env["t"] == "namedtuple":
        expected = tuple(x["v"] for x in inner)
    assert value == expected


@pytest.mark.parametrize(
    "name",
    ["os:system", "builtins:eval", "subprocess:Popen", f"{PAYLOAD_MODULE}:Boom", "builtins:SystemExit", "not a name"],
)
def test_a_recorded_error_naming_a_callable_comes_back_as_recorded_error(name, payload_module):
    info = {
        "type": name,
        "message": f"touch {MARKER}",
        "detail": json.dumps({"args": [{"t": "json", "v": f"touch {MARKER}"}]}),
    }
    with pytest.warns(GraphtapeWarning, match="not an allowed class"):
        error = rebuild_error(info)
    assert type(error) is RecordedError and str(error) == f"{name}: touch {MARKER}"
    assert nothing_ran()


def test_langchain_payloads_revive_data_classes_only(monkeypatch):
    template = dumpd(PromptTemplate.from_template("hello {name}"))
    with pytest.raises(ValueError, match="not allowed"):
        serde.load_lc(template)
    monkeypatch.setenv("GT_TEST_SECRET", "s3cret")
    leak = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "AIMessage"],
        "kwargs": {"content": {"lc": 1, "type": "secret", "id": ["GT_TEST_SECRET"]}},
    }
    try:
        msg = serde.load_lc(leak)
    except (ValueError, KeyError, TypeError):
        return  # refused outright: fine
    assert "s3cret" not in str(msg.content)


# -- what is allowed ------------------------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Order(BaseModel):
    id: str
    colour: Colour
    at: Point | None = None


class Helper(BaseModel):  # declared by no graph: must be registered
    n: int


class Plan(TypedDict):
    orders: list[Order]


def test_the_graph_declares_its_types_recursively():
    from langgraph.graph import END, START, StateGraph

    def node(s: Plan) -> Plan:
        return s

    b = StateGraph(Plan)
    b.add_node("node", node)
    b.add_edge(START, "node")
    b.add_edge("node", END)
    policy = TypePolicy.for_graph(b.compile())
    value = Order(id="A-1", colour=Colour.RED, at=Point(1, 2))
    again = serde.decode_value(serde.json_round_trip(serde.encode_value(value)), policy=policy)
    assert again == value and type(again) is Order and type(again.colour) is Colour


def test_registered_types_and_kinds(monkeypatch):
    from graphtape import typepolicy

    monkeypatch.setattr(typepolicy, "_REGISTERED", {})
    env = serde.encode_value({"h": Helper(n=1), "p": Point(1, 2)})
    policy = TypePolicy([Point])
    with pytest.warns(GraphtapeWarning, match="Helper"):
        assert serde.decode_value(env, policy=policy) == {"h": {"n": 1}, "p": Point(1, 2)}
    register_types(Helper)
    assert serde.decode_value(env, policy=policy) == {"h": Helper(n=1), "p": Point(1, 2)}
    # the class must be of the kind the envelope claims
    wrong = {"t": "pydantic", "c": f"{Point.__module__}:{Point.__qualname__}", "v": {"x": 1, "y": 2}}
    with pytest.warns(GraphtapeWarning):
        assert serde.decode_value(wrong, policy=policy) == {"x": 1, "y": 2}
    with pytest.raises(TypeError, match="not a pydantic model"):
        graphtape.register_types(os.system)


def test_trusted_packages_give_data_classes_not_clients(monkeypatch):
    from langchain_openai import ChatOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    env = {
        "t": "pydantic",
        "c": f"{ChatOpenAI.__module__}:ChatOpenAI",
        "v": {"model": "gpt-4o", "base_url": "http://attacker.invalid"},
    }
    with pytest.warns(GraphtapeWarning, match="ChatOpenAI"):
        value = serde.decode_value(env)
    assert value == env["v"]


def test_langgraph_command_is_trusted():
    from langgraph.types import Command

    cmd = Command(resume={"z": 1, "a": 2})
    assert serde.decode_value(serde.json_round_trip(serde.encode_value(cmd))) == cmd


def test_named_tuples_are_rebuilt_when_allowed():
    """LangGraph's ``StateUpdate`` (a ``NamedTuple``, in ``update_state``'s values) is rebuilt as itself;
    a named tuple of a class that is not allowed comes back as a plain tuple."""
    import collections

    from langgraph.types import StateUpdate

    update = [StateUpdate(values={"name": "one*"}, as_node="one")]
    env = serde.encode_value(update)
    assert env["v"][0] == {
        "t": "namedtuple",
        "c": "langgraph.types:StateUpdate",
        "v": [{"t": "json", "v": {"name": "one*"}}, {"t": "json", "v": "one"}, {"t": "json", "v": None}],
    }
    back = serde.decode_value(serde.json_round_trip(env))
    assert back == update and type(back[0]) is StateUpdate
    Point = collections.namedtuple("Point", "x y")
    env = serde.encode_value(Point(1, 2))
    with pytest.warns(GraphtapeWarning, match="not an allowed class"):
        assert serde.decode_value(serde.json_round_trip(env)) == (1, 2)
    assert serde.decode_value(env, policy=TypePolicy([Point])) == Point(1, 2)


# -- hostile golden tapes -------------------------------------------------------------------------

REFUSED = {
    "os_system.must_refuse.jsonl": "'os:system' as an enum",
    "subprocess_popen.must_refuse.jsonl": "'subprocess:Popen' as a dataclass",
    "builtins_eval.must_refuse.jsonl": "'builtins:eval' as an exception class",
}


def test_import_check_accepts_what_recordings_contain():
    from graphtape.typepolicy import clearly_not_data

    for name, kind in [
        ("builtins:KeyboardInterrupt", "error"),
        ("json.decoder:JSONDecodeError", "error"),
        ("langgraph.types:Command", "dataclass"),
        ("someapp.models:Order", "pydantic"),
        (f"{Colour.__module__}:Colour", "enum"),
    ]:
        assert clearly_not_data(name, kind) is None, name
    for name, kind in [
        ("os:system", "enum"),
        ("os.path:join", "dataclass"),
        ("builtins:eval", "error"),
        ("subprocess:Popen", "dataclass"),
        ("shutil:rmtree", "pydantic"),
        ("os", "enum"),
    ]:
        assert clearly_not_data(name, kind) is not None, name


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_import_refuses_a_tape_that_names_code(name, tape, payload_module):
    with pytest.raises(TapeFormatError, match=REFUSED[name]):
        tape.import_file(HOSTILE / name)
    assert tape.runs() == []
    assert nothing_ran()


def test_cli_import_refuses_a_tape_that_names_code(tmp_path, payload_module):
    from typer.testing import CliRunner

    from graphtape.cli import app

    result = CliRunner().invoke(
        app, ["import", str(HOSTILE / "os_system.must_refuse.jsonl"), "--into", f"sqlite:///{tmp_path}/t.db"]
    )
    assert result.exit_code != 0
    assert "os:system" in result.output and "refused" in result.output
    assert nothing_ran()


@pytest.mark.parametrize("name", sorted([*REFUSED, "unknown_module.as_data.jsonl"]))
def test_replaying_a_hostile_tape_runs_nothing(name, tape, payload_module, monkeypatch):
    """Even past the import check (written straight into the store), replay decodes data only."""
    monkeypatch.setattr(export, "check_names", lambda batch, path: None)
    (run_id,) = tape.import_file(HOSTILE / name)
    with forbid(), pytest.warns(GraphtapeWarning, match="not an allowed class"):
        result = tape.replay(run_id, graphs.build_linear(), mode="strict")
    assert nothing_ran()
    assert result.live == 0
    # what came back is data: the run failed on the stand-in error, or the plain data made the
    # replay write another state (a divergence), or it went on with the data
    if "eval" in name:
        assert result.status == "failed" and "RecordedError: builtins:eval" in (result.error or "")
    elif "unknown" in name:
        assert result.status in ("failed", "diverged")


def test_a_tape_naming_an_unimported_module_is_imported_and_decodes_as_data(tape, payload_module):
    (run_id,) = tape.import_file(HOSTILE / "unknown_module.as_data.jsonl")
    call = next(c for c in tape.calls(run_id) if c.kind == "tool")
    with pytest.warns(GraphtapeWarning, match=f"{PAYLOAD_MODULE}:Order"):
        value = serde.decode_value(tape.store.get_json(call.response_ref), tape.store.get_json)
    assert value == {"order": "A-1"}
    assert nothing_ran()


def test_classes_an_effect_returns_are_allowed(tape, tmp_path, monkeypatch):
    """An effect defined beside its result class, in a module the graph's nodes only import."""
    import importlib

    from langgraph.graph import END, START, StateGraph

    (tmp_path / "gt_effect_helpers.py").write_text(
        "import dataclasses, random\nimport graphtape\n\n"
        "@dataclasses.dataclass\nclass Reading:\n    value: float\n\n"
        "@graphtape.effect\ndef read_sensor() -> Reading:\n    return Reading(random.random())\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    helpers = importlib.import_module("gt_effect_helpers")

    class Seen(TypedDict, total=False):
        seen: str

    def build():
        def node(s: Seen):
            reading = helpers.read_sensor()
            return {"seen": f"{type(reading).__name__} {reading.value}"}

        b = StateGraph(Seen)
        b.add_node("node", node)
        b.add_edge(START, "node")
        b.add_edge("node", END)
        return b.compile()

    try:
        rec = tape.record(build(), name="effect-types")
        out = rec.invoke({})
        result = tape.replay(rec.last_run_id, build(), mode="strict")
        assert result.status == "finished", result.error
        assert result.live == 0 and result.output == out and out["seen"].startswith("Reading ")
    finally:
        sys.modules.pop("gt_effect_helpers", None)


def test_connect_types_allow_classes_for_one_tape(store_url, tmp_path, monkeypatch):
    """A tool from another module, called inside a node, returns a model the graph does not declare."""
    import importlib

    from langgraph.graph import END, START, StateGraph

    (tmp_path / "gt_tool_helpers.py").write_text(
        "import random\nfrom pydantic import BaseModel\nfrom langchain_core.tools import tool\n\n"
        "class Quote(BaseModel):\n    price: float\n\n"
        "@tool\ndef quote(item: str) -> Quote:\n    '''Price an item.'''\n    return Quote(price=random.random())\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    helpers = importlib.import_module("gt_tool_helpers")

    class Priced(TypedDict, total=False):
        seen: str

    def build():
        def node(s: Priced):
            q = helpers.quote.invoke({"item": "x"})
            return {"seen": f"{type(q).__name__} {q.price}"}

        b = StateGraph(Priced)
        b.add_node("node", node)
        b.add_edge(START, "node")
        b.add_edge("node", END)
        return b.compile()

    try:
        with graphtape.connect(store_url) as plain:
            rec = plain.record(build(), name="quote")
            out = rec.invoke({})
            assert out["seen"].startswith("Quote ")
            with pytest.warns(GraphtapeWarning, match="gt_tool_helpers:Quote"):
                failed = plain.replay(rec.last_run_id, build(), mode="strict")
            assert failed.status != "finished"  # the plain dict has no .price
        with graphtape.connect(store_url, types=[helpers.Quote]) as typed:
            result = typed.replay(rec.last_run_id, build(), mode="strict")
            assert result.status == "finished", result.error
            assert result.live == 0 and result.output == out
        with pytest.raises(TypeError, match="not a pydantic model"):
            graphtape.connect(store_url, types=[os.system])
    finally:
        sys.modules.pop("gt_tool_helpers", None)
