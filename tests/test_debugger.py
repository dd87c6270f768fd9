"""Breakpoints, stepping and per-call decisions on a replay running in a worker thread."""

from __future__ import annotations

import pytest

from graphtape.debug.debugger import Debugger
from tests import graphs
from tests.graphs import LIVE, forbid


@pytest.fixture
def recorded(tape):
    rec = tape.record(graphs.build_linear())
    out = rec.invoke({"topic": ""}, {"configurable": {"thread_id": "dbg"}})
    return rec.last_run_id, out


def test_node_breakpoints_and_continue(tape, recorded):
    run_id, out = recorded
    dbg = Debugger(tape, run_id, graphs.build_linear()).break_before("write").break_after("rate")
    with forbid():
        p = dbg.start()
        assert (p.reason, p.node) == ("before_node", "write")
        assert dbg.state()["topic"] == "cats"  # the state at the last checkpoint before `write`
        p = dbg.continue_()
        assert (p.reason, p.node) == ("after_node", "rate")
        assert p.writes["rating"] == out["rating"]
        p = dbg.continue_()
    assert p.reason == "done"
    assert dbg.result.status == "finished" and dbg.result.output == out and dbg.result.live == 0


def test_call_breakpoint_shows_request_and_recorded_answer_then_use_an_edit(tape, recorded):
    run_id, out = recorded
    dbg = Debugger(tape, run_id, graphs.build_linear(), mode="flight", allow_live_effects=True)
    dbg.break_on_call("llm", node="write")
    p = dbg.start()
    assert p.reason == "call" and p.call["kind"] == "llm" and p.node == "write"
    assert "[human] Write about cats" in p.call["request"]
    assert p.call["recorded"][0].content == out["draft"].split(" | ")[0]
    spent = LIVE.copy()
    p = dbg.use("EDITED")
    assert p.reason == "done"
    assert dbg.result.output["draft"].startswith("EDITED | ")
    used = LIVE - spent
    assert used[("llm", "rnd")] == 1 and used[("tool", "search")] == 1  # what follows the edit went live


def test_call_breakpoint_live(tape, recorded):
    run_id, _out = recorded
    dbg = Debugger(tape, run_id, graphs.build_linear(), mode="flight", allow_live_effects=True)
    dbg.break_on_call("effect", name="send_mail")
    p = dbg.start()
    assert p.call["name"] == "send_mail"
    spent = LIVE.copy()
    p = dbg.live()
    assert p.reason == "done"
    assert (LIVE - spent)[("effect", "send_mail")] == 1


def test_step_and_step_call_and_conditional(tape, recorded):
    run_id, _out = recorded
    dbg = Debugger(tape, run_id, graphs.build_linear())
    dbg.break_when(lambda s: "draft" in s, "a draft exists")
    with forbid():
        p = dbg.start()
        assert p.reason == "condition" and "draft" in dbg.state()
        p = dbg.step_call()
        assert p.reason == "call" and p.node == "rate"
        p = dbg.step()
        assert p.reason == "step"
        p = dbg.continue_()
    assert p.reason == "done" and dbg.result.status == "finished"


def test_stop(tape, recorded):
    run_id, _out = recorded
    dbg = Debugger(tape, run_id, graphs.build_linear()).break_before("write")
    assert dbg.start().reason == "before_node"
    dbg.stop()
    assert dbg.paused.reason == "done" and "stopped" in dbg.paused.detail


def test_time_paused_at_a_breakpoint_is_not_latency(tape, recorded):
    import time

    run_id, _ = recorded
    dbg = Debugger(tape, run_id, graphs.build_linear()).break_before("write").break_after("write")
    dbg.break_on_call("llm", node="write")
    with forbid():
        assert dbg.start().reason == "before_node"
        time.sleep(0.6)
        assert dbg.continue_().reason == "call"
        time.sleep(0.6)
        assert dbg.continue_().reason == "after_node"
        time.sleep(0.6)
        assert dbg.continue_().reason == "done"
    replay_id = dbg.result.run_id
    (task,) = [e.data["task"] for e in tape.events(replay_id, ["task_started"]) if e.data["node_path"] == "write"]
    (write,) = [e.data for e in tape.events(replay_id, ["task_finished"]) if e.data["task"] == task]
    assert write["duration"] < 0.5, write  # 1.8 s if the pauses were counted
    (llm,) = [e.data for e in tape.events(replay_id, ["llm_call"]) if e.data["node_path"] == "write"]
    assert llm["latency"] < 0.5, llm


def test_unknown_breakpoint_nodes_and_a_stopped_replay(tape, recorded):
    from graphtape.errors import GraphtapeError

    run_id, _ = recorded
    dbg = Debugger(tape, run_id, graphs.build_linear())
    with pytest.raises(GraphtapeError, match=r"no node 'wirte'.*rate, start, write"):
        dbg.break_before("wirte")
    with pytest.raises(GraphtapeError, match="no node 'x'"):
        dbg.break_on_call("llm", node="x")
    dbg.break_before("rate")
    with forbid():
        assert dbg.start().reason == "before_node"
        dbg.stop()
    assert dbg.result.status == "stopped" and dbg.result.error is None
    assert tape.run(dbg.result.run_id).status == "interrupted"
