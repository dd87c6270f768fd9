"""Forks, overrides, invalidation and answering interrupts: the original run never changes."""

from __future__ import annotations

import pytest

import graphtape
from tests import graphs
from tests.graphs import LIVE, forbid


def snapshot(tape, run_id):
    run = tape.run(run_id)
    return run, [(e.seq, e.kind, e.data) for e in tape.events(run_id)]


def record_linear(tape):
    rec = tape.record(graphs.build_linear())
    out = rec.invoke({"topic": ""}, {"configurable": {"thread_id": "orig"}})
    return rec, rec.last_run_id, out


def checkpoint_at(tape, run_id, step):
    return next(
        e.data["checkpoint_id"]
        for e in tape.events(run_id, ["checkpoint"])
        if e.data["step"] == step and not e.data["ns"]
    )


def test_fork_with_an_edited_state_in_flight_mode(tape):
    _rec, run_id, _out = record_linear(tape)
    before = snapshot(tape, run_id)
    cp = checkpoint_at(tape, run_id, 1)  # after `start`, before `write`
    spent = LIVE.copy()
    result = tape.fork(cp, graphs.build_linear(), values={"topic": "dogs"}, as_node="start", allow_live_effects=True)
    assert result.status == "finished", result.error
    assert result.output["topic"] == "dogs"
    # `write` asked about dogs: live; everything after it changed too
    assert (LIVE - spent)[("llm", "rnd")] == 2
    assert snapshot(tape, run_id) == before
    fork_run = tape.run(result.run_id)
    assert fork_run.meta["fork_of"] == cp and fork_run.replay_of == run_id


def test_fork_without_edit_in_strict_mode_serves_everything(tape):
    _rec, run_id, out = record_linear(tape)
    cp = checkpoint_at(tape, run_id, 1)
    with forbid():
        result = tape.fork(cp[:26], graphs.build_linear(), mode="strict")
    assert result.status == "finished" and result.live == 0
    assert result.output == out


@pytest.mark.parametrize(
    "values, message",
    [
        ({"nope": 1}, "unknown state key 'nope'"),
        ({"topic": ["not", "a", "string"]}, "value for 'topic' does not fit its type str"),
        ({}, "non-empty mapping"),
    ],
)
def test_fork_rejects_bad_edits(tape, values, message):
    _rec, run_id, _out = record_linear(tape)
    before = snapshot(tape, run_id)
    with pytest.raises(graphtape.InvalidEdit, match=message):
        tape.fork(checkpoint_at(tape, run_id, 1), graphs.build_linear(), values=values)
    assert snapshot(tape, run_id) == before


def test_override_changes_exactly_what_follows(tape):
    _rec, run_id, _out = record_linear(tape)
    before = snapshot(tape, run_id)
    calls = tape.calls(run_id)
    write_llm = next(c for c in calls if c.kind == "llm" and c.node_path == "write")
    spent = LIVE.copy()
    result = tape.override(run_id, write_llm.call_id, "OVERRIDDEN", graphs.build_linear(), allow_live_effects=True)
    assert result.status == "finished", result.error
    assert result.output["draft"].startswith("OVERRIDDEN | ")
    used = LIVE - spent
    # before the call: served (clock); the call: injected; after it: search + rate + mail changed -> live
    assert used[("effect", "clock")] == 0
    assert used[("llm", "rnd")] == 1 and used[("tool", "search")] == 1 and used[("effect", "send_mail")] == 1
    sources = {e.data["call_id"]: e.data["source"] for e in tape.events(result.run_id, ["llm_call"])}
    assert "override" in sources.values()
    assert snapshot(tape, run_id) == before


def test_override_in_strict_mode_diverges_after_the_override(tape):
    _rec, run_id, _out = record_linear(tape)
    call = next(c for c in tape.calls(run_id) if c.kind == "llm" and c.node_path == "write")
    with forbid():
        result = tape.override(run_id, call.call_id[:10], "OVERRIDDEN", graphs.build_linear(), mode="strict")
    assert result.status == "diverged"
    assert result.divergence["kind"] == "tool"  # the search that follows now asks about the override


def test_override_of_a_tool_and_an_effect(tape):
    _rec, run_id, _out = record_linear(tape)
    calls = tape.calls(run_id)
    clock = next(c for c in calls if c.kind == "effect" and c.node_path == "start")
    result = tape.override(run_id, clock.call_id, 0.5, graphs.build_linear(), from_start=True)
    assert result.output["log"][0] == 0.5
    search = next(c for c in calls if c.kind == "tool")
    result = tape.override(run_id, search.call_id, "tool says hi", graphs.build_linear(), allow_live_effects=True)
    assert result.output["draft"].endswith("| tool says hi")


def test_invalidate_from_a_node(tape):
    _rec, run_id, out = record_linear(tape)
    spent = LIVE.copy()
    result = tape.invalidate_from(run_id, "rate", graphs.build_linear(), allow_live_effects=True)
    used = LIVE - spent
    assert used[("llm", "rnd")] == 1 and used[("effect", "send_mail")] == 1
    assert used[("tool", "search")] == 0 and used[("effect", "clock")] == 0
    assert result.output["draft"] == out["draft"] and result.output["rating"] != out["rating"]
    with pytest.raises(graphtape.ReplayError, match="never ran"):
        tape.invalidate_from(run_id, "nope", graphs.build_linear())


def test_invalidate_blocks_effects_without_permission(tape):
    _rec, run_id, _out = record_linear(tape)
    result = tape.invalidate_from(run_id, "rate", graphs.build_linear())
    assert result.status == "failed" and "send_mail" in result.error


def test_resume_pending_interrupts_by_id_and_strict_replay_asks_nothing(tape):
    graph = graphs.build_review()
    rec = tape.record(graph, name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "hitl"}}
    rec.invoke({}, cfg)
    pending = rec.get_state(cfg).interrupts
    with pytest.raises(graphtape.ReplayError, match="answer them by id"):
        tape.resume("hitl", graph, "x")
    with pytest.raises(graphtape.ReplayError, match="no pending interrupt 'bogus'"):
        tape.resume("hitl", graph, by_id={"bogus": 1})
    tape.resume("hitl", graph, by_id={i.id: f"answer {n}" for n, i in enumerate(pending)})
    rec2 = tape.resume("hitl", graph, "publish!")
    last = rec2.last_run_id
    final = rec.get_state(cfg).values
    assert final["a"].startswith("answer") and final["b"].startswith("answer")
    with forbid():
        result = tape.replay(last, graphs.build_review())
    assert result.status == "finished" and result.output == final
    # a fork can answer differently: fork from the checkpoint where `finish` waits, re-answering it
    first_run = tape.runs(thread_id="hitl")[-1].run_id
    assert first_run


def test_live_mode_calls_models_and_serves_unchanged_effects(tape):
    _rec, run_id, _out = record_linear(tape)
    cp = checkpoint_at(tape, run_id, 1)
    spent = LIVE.copy()
    result = tape.fork(cp, graphs.build_linear(), mode="live", allow_live_effects=True)
    used = LIVE - spent
    assert used[("llm", "rnd")] == 2 and used[("tool", "search")] == 1
    assert result.status == "finished"


def test_override_inside_a_send_fanout_subgraph(tape):
    rec = tape.record(graphs.build_fanout())
    out = rec.invoke({"questions": []}, {"configurable": {"thread_id": "fan"}})
    run_id = rec.last_run_id
    before = snapshot(tape, run_id)
    # the third worker ("other") answers inside its subgraph
    target = next(
        c
        for c in tape.calls(run_id)
        if c.node_path == "worker/sub_answer" and "other" in str(tape.request(c)["messages"])
    )
    spent = LIVE.copy()
    result = tape.override(run_id, target.call_id, "OVERRIDDEN", graphs.build_fanout())
    assert result.status == "finished", result.error
    assert "OVERRIDDEN" in result.output["answers"]
    # the two "same" workers and the side branch are served; only the summary changed
    assert (LIVE - spent)[("llm", "rnd")] == 1
    assert sorted(a for a in result.output["answers"] if a != "OVERRIDDEN") == sorted(
        a for a in out["answers"] if a != next(x for x in out["answers"] if x not in result.output["answers"])
    )
    assert snapshot(tape, run_id) == before


def test_fork_a_fanout_run_strictly(tape):
    rec = tape.record(graphs.build_fanout())
    out = rec.invoke({"questions": []}, {"configurable": {"thread_id": "fan2"}})
    cp = checkpoint_at(tape, rec.last_run_id, 1)  # after `plan`: the Send fan-out is pending
    with forbid():
        result = tape.fork(cp, graphs.build_fanout(), mode="strict")
    assert result.status == "finished" and result.live == 0
    assert sorted(result.output["answers"]) == sorted(out["answers"])
