"""Strict replay compares each task's writes with the tape: unwrapped nondeterminism is a divergence."""

from __future__ import annotations

import datetime
import random
import sys
import textwrap
from typing import TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from typer.testing import CliRunner

import graphtape
from tests import graphs
from tests.graphs import forbid


class Stamped(TypedDict, total=False):
    topic: str
    draft: str
    at: float
    tag: str


def now_text() -> str:
    return datetime.datetime.now().isoformat()


def build_stamped(model=None, *, wrapped: bool = False, source=random.random):
    """``stamp`` reads ``source`` directly (unless ``wrapped``): the tape cannot serve it."""
    m = model or graphs.RandomModel()
    source = graphs.clock if wrapped else source

    def write(s):
        return {"draft": m.invoke([HumanMessage(f"about {s['topic']}")]).content}

    def stamp(s):
        return {"at": source(), "tag": f"stamped {s['draft']}"}

    b = StateGraph(Stamped)
    b.add_node(write)
    b.add_node(stamp)
    b.add_edge(START, "write")
    b.add_edge("write", "stamp")
    b.add_edge("stamp", END)
    return b.compile()


def record(tape, build, run_input, **kw):
    rec = tape.record(build(**kw), name="stamped")
    out = rec.invoke(run_input)
    return rec.last_run_id, out


@pytest.mark.parametrize("source", [random.random, now_text], ids=["random", "datetime.now"])
def test_unwrapped_nondeterminism_diverges_in_strict_mode(tape, source):
    run_id, _ = record(tape, build_stamped, {"topic": "cats"}, source=source)
    with forbid():
        result = tape.replay(run_id, build_stamped(source=source))
    assert result.status == "diverged"
    div = result.divergence
    assert div["kind"] == "state" and div["node"] == "stamp" and div["step"] == 2
    assert div["channels"] == ["at"]  # "tag" was written the same
    assert "~ at:" in div["diff"]
    assert "@graphtape.effect" in div["message"] and div["run_id"] == run_id
    assert tape.run(result.run_id).status == "diverged"
    assert [e.data["kind"] for e in tape.events(result.run_id, ["divergence"])] == ["state"]
    with pytest.raises(graphtape.Divergence, match="diverged at node stamp step 2"):
        result.raise_for_divergence()


def test_wrapped_source_replays_without_divergence(tape):
    run_id, out = record(tape, build_stamped, {"topic": "cats"}, wrapped=True)
    with forbid():
        result = tape.replay(run_id, build_stamped(wrapped=True))
    assert result.status == "finished", result.error
    assert result.output == out and result.output_matches is True


def test_flight_mode_reports_the_difference_without_stopping(tape):
    run_id, _ = record(tape, build_stamped, {"topic": "cats"})
    result = tape.replay(run_id, build_stamped(), mode="flight")
    assert result.status == "finished" and result.divergence is None
    assert result.live == 0 and result.output_matches is False


def test_strict_fork_with_an_edit_is_not_a_state_comparison(tape):
    run_id, _ = record(tape, build_stamped, {"topic": "cats"}, wrapped=True)
    after_write = next(e.data["checkpoint_id"] for e in tape.events(run_id, ["checkpoint"]) if e.data["step"] == 1)
    with forbid():
        result = tape.fork(after_write, build_stamped(wrapped=True), values={"draft": "edited"}, mode="strict")
    # the edit changes what stamp writes on purpose: only the calls are held to the tape
    assert result.status == "finished", result.error
    assert result.output["tag"] == "stamped edited"


def test_strict_replay_from_a_checkpoint_compares_the_state(tape):
    run_id, _ = record(tape, build_stamped, {"topic": "cats"})
    after_write = next(e.data["checkpoint_id"] for e in tape.events(run_id, ["checkpoint"]) if e.data["step"] == 1)
    with forbid():
        result = tape.replay(run_id, build_stamped(), from_checkpoint=after_write)
    assert result.status == "diverged" and result.divergence["node"] == "stamp"


def test_a_node_the_recording_never_ran_diverges(tape):
    run_id, _ = record(tape, build_stamped, {"topic": "cats"}, wrapped=True)

    def extra(s):
        return {"tag": "new node"}

    b = StateGraph(Stamped)
    b.add_node("write", lambda s: {"draft": graphs.RandomModel().invoke([HumanMessage(f"about {s['topic']}")]).content})
    b.add_node(extra)
    b.add_edge(START, "write")
    b.add_edge("write", "extra")
    b.add_edge("extra", END)
    with forbid():
        result = tape.replay(run_id, b.compile())
    assert result.status == "diverged"
    assert result.divergence["node"] == "extra" and "no finished task" in result.divergence["reason"]


def test_async_nodes_are_compared_too(tape):
    import asyncio

    async def stamp(s):
        return {"at": random.random()}

    def build():
        b = StateGraph(Stamped)
        b.add_node(stamp)
        b.add_edge(START, "stamp")
        b.add_edge("stamp", END)
        return b.compile()

    rec = tape.record(build())
    asyncio.run(rec.ainvoke({"topic": "x"}))
    result = tape.replay(rec.last_run_id, build())
    assert result.status == "diverged" and result.divergence["node"] == "stamp"


def test_pytest_fixture_fails_on_a_state_divergence(tape, tmp_path, graphtape_replay):
    run_id, _ = record(tape, build_stamped, {"topic": "cats"})
    path = tmp_path / "stamped.jsonl"
    tape.export_run(run_id, path)
    with forbid(), pytest.raises(pytest.fail.Exception, match="diverged at node stamp step 2"):
        graphtape_replay(path, build_stamped())


GRAPH_FILE = textwrap.dedent("""
    import random
    from typing import TypedDict
    from langgraph.graph import END, START, StateGraph

    class S(TypedDict, total=False):
        n: float

    def roll(s):
        return {"n": random.random()}

    b = StateGraph(S)
    b.add_node(roll)
    b.add_edge(START, "roll")
    b.add_edge("roll", END)
    graph = b.compile()
""")


def test_cli_replay_exits_non_zero_on_a_state_divergence(tmp_path, monkeypatch):
    from graphtape.cli import app

    (tmp_path / "roll_graph.py").write_text(GRAPH_FILE, encoding="utf-8")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "roll_graph", raising=False)
    url = f"sqlite:///{tmp_path}/t.db"
    runner = CliRunner()
    ran = runner.invoke(app, ["--url", url, "run", "roll_graph.py:graph", "--input", "{}"])
    assert ran.exit_code == 0, ran.output
    with graphtape.connect(url) as tape:
        run_id = tape.runs()[0].run_id
    replayed = runner.invoke(app, ["--url", url, "replay", run_id, "--graph", "roll_graph.py:graph", "--json"])
    sys.modules.pop("roll_graph", None)
    assert replayed.exit_code == 1, replayed.output
    assert '"status": "diverged"' in replayed.output


def test_a_task_that_swallows_a_call_divergence_does_not_add_a_second_report(tape, monkeypatch):
    m = graphs.RandomModel()

    def write(s):
        try:
            return {"draft": m.invoke([HumanMessage(f"{graphs.PROMPTS['write']} {s['topic']}")]).content}
        except Exception:  # code that hides errors: the replay still reports the call's divergence
            return {"draft": "fallback"}

    def build():
        b = StateGraph(Stamped)
        b.add_node(write)
        b.add_edge(START, "write")
        b.add_edge("write", END)
        return b.compile()

    rec = tape.record(build())
    rec.invoke({"topic": "cats"})
    monkeypatch.setitem(graphs.PROMPTS, "write", "Write a haiku about")
    with forbid():
        result = tape.replay(rec.last_run_id, build())
    assert result.status == "diverged" and result.divergence["kind"] == "llm"
    assert [e.data["kind"] for e in tape.events(result.run_id, ["divergence"])] == ["llm"]


def test_a_state_divergence_is_not_also_logged_as_a_callback_error(tape, caplog):
    run_id, _ = record(tape, build_stamped, {"topic": "cats"})
    with forbid(), caplog.at_level("WARNING"):
        result = tape.replay(run_id, build_stamped())
    assert result.status == "diverged"
    assert not [r for r in caplog.records if "callback" in r.getMessage()]


def test_recorded_writes_that_cannot_be_read_back_are_not_held_against_the_replay(tape, monkeypatch):
    from graphtape.replay import statecheck

    run_id, _ = record(tape, build_stamped, {"topic": "cats"})

    def unreadable(tape, view):
        raise ValueError("a message type this version does not know")

    monkeypatch.setattr(statecheck, "_revive", unreadable)
    with forbid():
        result = tape.replay(run_id, build_stamped())
    assert result.status == "finished", result.error
