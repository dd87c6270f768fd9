"""Tool and effect code is fingerprinted: a fixed tool is not served its old answer in flight mode."""

from __future__ import annotations

import random
from typing import TypedDict

from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

import graphtape
from graphtape.record.codeprint import code_fingerprint, tool_code
from tests import graphs
from tests.graphs import LIVE, forbid


@tool("lookup")
def lookup_v1(q: str) -> str:
    """Look something up."""
    graphs.live("tool", "lookup")
    return f"v1 {q} {random.random()}"


@tool("lookup")
def lookup_v2(q: str) -> str:
    """Look something up."""
    graphs.live("tool", "lookup")
    return f"v2 {q} {random.random()}"


def _stamp_v1() -> float:
    graphs.live("effect", "stamp")
    return random.random()


def _stamp_v2() -> float:
    graphs.live("effect", "stamp")
    return round(random.random(), 3)


stamp_v1 = graphtape.effect(name="stamp")(_stamp_v1)
stamp_v2 = graphtape.effect(name="stamp")(_stamp_v2)


class S(TypedDict, total=False):
    topic: str
    found: str
    at: float


def build(lookup=lookup_v1, stamp=stamp_v1):
    def ask(s):
        return {"found": lookup.invoke({"q": s["topic"]}), "at": stamp()}

    b = StateGraph(S)
    b.add_node(ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b.compile()


def recorded(tape) -> str:
    rec = tape.record(build(), name="tool_code")
    rec.invoke({"topic": "cats"})
    return rec.last_run_id


def _load(path, text):
    import importlib.util

    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"_code_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


def test_fingerprints_see_code_not_comments(tmp_path):
    assert tool_code(lookup_v1) != tool_code(lookup_v2)
    assert tool_code(lookup_v1) == tool_code(lookup_v1)
    assert code_fingerprint(_stamp_v1) != code_fingerprint(_stamp_v2)
    plain = _load(tmp_path / "a.py", "def f(x):\n    return x + 1\n")
    commented = _load(tmp_path / "b.py", "# header\ndef f(x):\n    # add one\n\n    return x + 1   \n")
    changed = _load(tmp_path / "c.py", "def f(x):\n    return x + 2\n")
    assert code_fingerprint(plain) == code_fingerprint(commented)
    assert code_fingerprint(plain) != code_fingerprint(changed)


def test_calls_record_their_code_fingerprint(tape):
    run_id = recorded(tape)
    calls = {e.kind: e.data for e in tape.events(run_id, ["tool_call", "effect_call"])}
    assert calls["tool_call"]["code"] == tool_code(lookup_v1)
    assert calls["effect_call"]["code"] == code_fingerprint(_stamp_v1)


def test_unchanged_code_is_served_and_not_listed(tape):
    run_id = recorded(tape)
    with forbid():
        strict = tape.replay(run_id, build())
        flight = tape.replay(run_id, build(), mode="flight")
    assert strict.status == flight.status == "finished"
    assert strict.changed_code == flight.changed_code == []
    assert flight.live == 0


def test_flight_mode_runs_a_changed_tool_live(tape):
    run_id = recorded(tape)
    before = LIVE.copy()
    result = tape.replay(run_id, build(lookup=lookup_v2), mode="flight")
    assert result.status == "finished", result.error
    assert (LIVE - before) == {("tool", "lookup"): 1}
    assert result.live == 1 and result.served == 1
    assert result.output["found"].startswith("v2 cats")
    assert result.changed_code == ["lookup"]


def test_strict_mode_serves_a_changed_tool_and_lists_it(tape):
    run_id = recorded(tape)
    with forbid():
        result = tape.replay(run_id, build(lookup=lookup_v2, stamp=stamp_v2))
    assert result.status == "finished", result.error
    assert result.live == 0 and result.output_matches is True
    assert result.changed_code == ["lookup", "stamp"]
    assert result.to_dict()["changed_code"] == ["lookup", "stamp"]


def test_a_changed_effect_runs_live_only_when_allowed(tape):
    run_id = recorded(tape)
    with forbid():
        served = tape.replay(run_id, build(stamp=stamp_v2), mode="flight")
    assert served.live == 0 and served.changed_code == ["stamp"]
    before = LIVE.copy()
    allowed = tape.replay(run_id, build(stamp=stamp_v2), mode="flight", allow_live_effects=True)
    assert (LIVE - before) == {("effect", "stamp"): 1}
    assert allowed.live == 1 and allowed.changed_code == ["stamp"]


def test_the_cli_panel_names_tools_whose_code_changed(tape):
    from rich.console import Console

    from graphtape.cli.render_replay import replay_panel

    run_id = recorded(tape)
    with forbid():
        result = tape.replay(run_id, build(lookup=lookup_v2), mode="strict")
    console = Console(width=120, record=True, color_system=None)
    console.print(replay_panel(result))
    text = console.export_text()
    assert "code changed" in text and "lookup (since recording; served from the tape all the same)" in text
