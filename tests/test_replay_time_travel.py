"""Replays of runs started by LangGraph's own time travel: from a past checkpoint, after ``update_state``.

A recorded run that started from a checkpoint (``invoke(None, snapshot.config)``), from a fork
(``update_state(config, values, as_node=...)`` then ``invoke(None, new_config)``) or after an
``update_state`` on the latest state must replay from the same place: the replay maps the
checkpoint the run started from to its own copy and repeats the recorded ``update_state`` calls
on its thread first. Each test records with LangGraph's API on a graph whose model answers at
random, so only a replay served from the tape, from the right start, reproduces the state.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from graphtape.replay.engine import strip_ids
from graphtape.serde import to_jsonable
from tests.graphs import LIVE, RandomModel, forbid


class Ask(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def build_ask(checkpointer: Any = None) -> Any:
    """``a`` (a model call) -> ``human`` (an interrupt) -> ``b`` (a model call with the answer)."""
    m = RandomModel(prefix="ask")

    def a(s: Ask) -> Ask:
        return {"log": [m.invoke([HumanMessage("a")]).content]}

    def human(s: Ask) -> Ask:
        return {"log": [f"human:{interrupt('what now?')}"]}

    def b(s: Ask) -> Ask:
        return {"log": [m.invoke([HumanMessage(f"b after {s['log'][-1]}")]).content]}

    g = StateGraph(Ask)
    g.add_node(a)
    g.add_node(human)
    g.add_node(b)
    g.add_edge(START, "a")
    g.add_edge("a", "human")
    g.add_edge("human", "b")
    g.add_edge("b", END)
    return g.compile(checkpointer=checkpointer)


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def snapshot_before(rec: Any, thread: str, node: str) -> Any:
    """The latest checkpoint of the thread whose next task is ``node``."""
    return next(s for s in rec.get_state_history(cfg(thread)) if s.next == (node,))


def state_of(rec: Any, thread: str) -> tuple[Any, tuple[str, ...], list[Any]]:
    snap = rec.get_state(cfg(thread))
    return strip_ids(to_jsonable(snap.values)), tuple(snap.next), [i.value for i in snap.interrupts]


def history_of(rec: Any, thread: str) -> list[tuple[Any, tuple[str, ...], str | None]]:
    """Every checkpoint of the thread, oldest first: values, next tasks and source."""
    snaps = list(rec.get_state_history(cfg(thread)))
    snaps.reverse()
    return [(strip_ids(to_jsonable(s.values)), tuple(s.next), s.metadata.get("source")) for s in snaps]


def assert_exact(tape: Any, rec: Any, thread: str, result: Any, live_before: int) -> None:
    """The replay of the thread's last run is exact: same status, nothing live, same state and history."""
    recorded = tape.run(rec.last_run_id)
    assert result.replay_of == recorded.run_id
    assert result.status == recorded.status, result.error
    assert result.divergence is None, result.divergence
    assert result.live == 0 and sum(LIVE.values()) == live_before
    assert result.unused == 0
    assert result.output_matches is True
    assert state_of(rec, result.thread_id) == state_of(rec, thread)
    assert history_of(rec, result.thread_id) == history_of(rec, thread)


def replay_last(tape: Any, rec: Any) -> Any:
    before = sum(LIVE.values())
    with forbid():
        result = tape.replay(rec.last_run_id, build_ask())
    return result, before


async def areplay_last(tape: Any, rec: Any) -> Any:
    before = sum(LIVE.values())
    with forbid():
        result = await tape.areplay(rec.last_run_id, build_ask())
    return result, before


def test_a_run_from_a_past_checkpoint_replays_from_that_checkpoint(tape):
    rec = tape.record(build_ask(), checkpointer=tape.saver)
    rec.invoke({"log": []}, cfg("past"))  # interrupted at human
    rec.invoke(None, snapshot_before(rec, "past", "a").config)  # a runs again, interrupted again
    assert tape.run(rec.last_run_id).status == "interrupted"
    result, before = replay_last(tape, rec)
    assert_exact(tape, rec, "past", result, before)
    assert len(result.run_ids) == 2


def test_a_run_from_before_an_answered_interrupt_stops_at_it_again(tape):
    # the example: recorded `interrupted ['a']`, replayed `finished ['a', 'human:hello']`
    rec = tape.record(build_ask(), checkpointer=tape.saver)
    rec.invoke({"log": []}, cfg("again"))
    rec.invoke(Command(resume="hello"), cfg("again"))
    rec.invoke(None, snapshot_before(rec, "again", "human").config)
    assert tape.run(rec.last_run_id).status == "interrupted"
    result, before = replay_last(tape, rec)
    assert_exact(tape, rec, "again", result, before)
    assert result.output["log"] == rec.get_state(cfg("again")).values["log"]


def test_a_fork_made_by_update_state_on_a_past_checkpoint(tape):
    rec = tape.record(build_ask(), checkpointer=tape.saver)
    rec.invoke({"log": []}, cfg("fork"))
    rec.invoke(Command(resume="hello"), cfg("fork"))
    forked = rec.update_state(snapshot_before(rec, "fork", "human").config, {"log": ["edited"]}, as_node="human")
    rec.invoke(None, forked)  # b runs after the edit, as if human had written it
    assert tape.run(rec.last_run_id).status == "finished"
    result, before = replay_last(tape, rec)
    assert_exact(tape, rec, "fork", result, before)
    assert result.output["log"][-2] == "edited"


def test_update_state_on_the_latest_checkpoint_then_resume(tape):
    rec = tape.record(build_ask(), checkpointer=tape.saver)
    rec.invoke({"log": []}, cfg("latest"))
    rec.update_state(cfg("latest"), {"log": ["note"]})  # as_node inferred by LangGraph (a)
    rec.invoke(Command(resume="hi"), cfg("latest"))
    assert tape.run(rec.last_run_id).status == "finished"
    result, before = replay_last(tape, rec)
    assert_exact(tape, rec, "latest", result, before)
    assert "note" in result.output["log"]


def test_a_resume_on_a_forked_branch(tape):
    rec = tape.record(build_ask(), checkpointer=tape.saver)
    rec.invoke({"log": []}, cfg("branch"))
    rec.invoke(Command(resume="first"), cfg("branch"))
    forked = rec.update_state(snapshot_before(rec, "branch", "human").config, {"log": ["x"]}, as_node="a")
    rec.invoke(None, forked)  # interrupted at human on the fork
    rec.invoke(Command(resume="second"), cfg("branch"))
    assert tape.run(rec.last_run_id).status == "finished"
    result, before = replay_last(tape, rec)
    assert_exact(tape, rec, "branch", result, before)
    assert len(result.run_ids) == 4


def test_update_state_on_a_new_thread_before_its_first_run(tape):
    rec = tape.record(build_ask(), checkpointer=tape.saver)
    seeded = rec.update_state(cfg("seeded"), {"log": ["seed"]}, as_node="a")
    rec.invoke(None, seeded)  # human interrupts at once: the seed is a's output
    assert tape.run(rec.last_run_id).status == "interrupted"
    result, before = replay_last(tape, rec)
    assert_exact(tape, rec, "seeded", result, before)
    assert result.output["log"] == ["seed"]


def test_bulk_update_state_is_replayed_superstep_by_superstep(tape):
    from langgraph.types import StateUpdate

    rec = tape.record(build_ask(), checkpointer=tape.saver)
    rec.invoke({"log": []}, cfg("bulk"))
    rec.bulk_update_state(
        cfg("bulk"),
        [[StateUpdate({"log": ["one"]}, "a")], [StateUpdate({"log": ["two"]}, "human")]],
    )
    rec.invoke(None, cfg("bulk"))  # b runs after the update as human
    result, before = replay_last(tape, rec)
    assert_exact(tape, rec, "bulk", result, before)


def test_a_copy_of_a_past_checkpoint_with_updates_as_named_tuples(tape):
    """``update_state(config, [StateUpdate(...)], as_node="__copy__")`` forks a copy of a checkpoint and
    applies the updates to it: the values are a list of LangGraph's ``StateUpdate`` named tuples,
    kept on the tape as named tuples (not a repr the replay cannot rebuild)."""
    from langgraph.types import StateUpdate

    rec = tape.record(build_ask(), checkpointer=tape.saver)
    rec.invoke({"log": []}, cfg("copy"))
    rec.invoke(Command(resume="hello"), cfg("copy"))
    past = snapshot_before(rec, "copy", "human").config
    forked = rec.update_state(past, [StateUpdate(values={"log": ["copied"]}, as_node="human")], as_node="__copy__")
    rec.invoke(None, forked)
    assert tape.run(rec.last_run_id).status == "finished"
    result, before = replay_last(tape, rec)
    assert_exact(tape, rec, "copy", result, before)
    assert "copied" in result.output["log"]


def test_the_update_is_on_the_tape_of_the_next_run(tape):
    rec = tape.record(build_ask(), checkpointer=tape.saver)
    rec.invoke({"log": []}, cfg("ev"))
    first = rec.last_run_id
    past = snapshot_before(rec, "ev", "human").config
    forked = rec.update_state(past, {"log": ["edited"]}, as_node="human")
    rec.invoke(None, forked)
    (update,) = tape.events(rec.last_run_id, ["state_update"])
    assert update.data["checkpoint_id"] == past["configurable"]["checkpoint_id"]
    assert update.data["result"] == forked["configurable"]["checkpoint_id"]
    assert update.data["as_node"] == "human" and update.data["api"] == "update_state"
    assert tape.store.get_json(update.data["values"]) == {"t": "json", "v": {"log": ["edited"]}}
    assert tape.events(first, ["state_update"]) == []


async def test_async_time_travel_and_fork(tape):
    rec = tape.record(build_ask(), checkpointer=tape.saver)
    await rec.ainvoke({"log": []}, cfg("async"))
    await rec.ainvoke(Command(resume="hello"), cfg("async"))
    past = next(iter([s async for s in rec.aget_state_history(cfg("async")) if s.next == ("human",)]))
    await rec.ainvoke(None, past.config)  # from a past checkpoint: interrupted again
    forked = await rec.aupdate_state(past.config, {"log": ["edited"]}, as_node="human")
    await rec.ainvoke(None, forked)
    assert tape.run(rec.last_run_id).status == "finished"
    (update,) = tape.events(rec.last_run_id, ["state_update"])
    assert update.data["api"] == "aupdate_state"
    result, before = await areplay_last(tape, rec)
    assert_exact(tape, rec, "async", result, before)
    # and a sync replay of the same async-recorded thread (one event loop of its own, in a thread)
    with forbid():
        again = await asyncio.to_thread(tape.replay, rec.last_run_id, build_ask())
    assert again.status == "finished" and again.output_matches is True and again.live == 0


def test_a_replay_from_a_checkpoint_copies_a_start_it_did_not_replay(tape):
    # from_checkpoint skips the runs before it: a later run's start is copied from the recording
    rec = tape.record(build_ask(), checkpointer=tape.saver)
    rec.invoke({"log": []}, cfg("copy"))
    rec.invoke(Command(resume="hello"), cfg("copy"))
    second = rec.last_run_id
    # the second run's checkpoint after human: the replay starts there, b runs; the third run started
    # before a, in the first run, which the replay does not re-play
    start = next(e.data["checkpoint_id"] for e in tape.events(second, ["checkpoint"]) if e.data["step"] == 2)
    rec.invoke(None, snapshot_before(rec, "copy", "a").config)
    before = sum(LIVE.values())
    with forbid():
        result = tape.replay(rec.last_run_id, build_ask(), from_checkpoint=start)
    assert result.status == "interrupted", result.error
    assert result.divergence is None and result.live == 0 and sum(LIVE.values()) == before
    assert result.output_matches is True
    assert tape.run(result.run_ids[0]).replay_of == second
    assert state_of(rec, result.thread_id) == state_of(rec, "copy")


async def _call(graph: Any, api: str, config: Any) -> Any:
    if api == "invoke":
        return graph.invoke({"log": []}, config)
    if api == "stream":
        return list(graph.stream({"log": []}, config))
    if api == "ainvoke":
        return await graph.ainvoke({"log": []}, config)
    return [c async for c in graph.astream({"log": []}, config)]


@pytest.mark.parametrize("api", ["invoke", "stream", "ainvoke", "astream"])
@pytest.mark.parametrize("config", [None, {"configurable": {"user": "u"}}], ids=["no-config", "no-thread"])
async def test_a_graph_with_a_checkpointer_needs_a_thread_id_when_recorded(tape, api, config):
    # LangGraph's ValueError asking for a thread_id (no `configurable`), or its saver's error: the same
    # recorded, never a thread graphtape makes up
    from langgraph.checkpoint.memory import InMemorySaver

    def build() -> Any:
        g = StateGraph(Ask)
        g.add_node("a", lambda s: {"log": ["a"]})
        g.add_edge(START, "a")
        g.add_edge("a", END)
        return g.compile(checkpointer=InMemorySaver())

    with pytest.raises(Exception) as unrecorded:
        await _call(build(), api, config)
    if config is None:
        assert unrecorded.type is ValueError and "thread_id" in str(unrecorded.value)
    rec = tape.record(build())
    with pytest.raises(unrecorded.type) as recorded:
        await _call(rec, api, config)
    assert str(recorded.value) == str(unrecorded.value)
    assert tape.runs() == []


def test_a_subgraph_start_the_replay_did_not_re_play_is_refused_with_what_to_do(tape):
    # a run invoked with a subgraph's checkpoint that no re-played run wrote: not copied, and said so
    from graphtape.errors import ReplayError
    from graphtape.replay.startpoint import StartPoints

    starts = StartPoints(tape, lambda source, checkpoint: None, [], [])
    config: dict[str, Any] = {"configurable": {"thread_id": "replay-x"}}
    recorded = {"configurable": {"thread_id": "t", "checkpoint_ns": "sub:1", "checkpoint_id": "c-1"}}
    with pytest.raises(ReplayError, match=r"subgraph namespace 'sub:1'.*from_checkpoint"):
        starts.start_config(recorded, "t", config)
    assert config == {"configurable": {"thread_id": "replay-x"}}


def test_autorecording_keeps_the_update_state_calls_of_a_graph(tmp_path):
    # LangGraph's own tests call update_state on the compiled graph: routed to its recorder as runs are
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.pregel import Pregel

    from graphtape.testing.cassette import Cassette

    methods = dict(Pregel.__dict__)
    cassette = Cassette(tmp_path / "fork.jsonl", "all")
    try:
        with cassette.autorecording():
            graph = build_ask(InMemorySaver())
            graph.invoke({"log": []}, cfg("auto"))
            past = snapshot_before(graph, "auto", "human").config
            graph.invoke(None, graph.update_state(past, {"log": ["edited"]}, as_node="human"))
        last = cassette.run_ids[-1]
        (update,) = cassette.tape.events(last, ["state_update"])
        assert update.data["checkpoint_id"] == past["configurable"]["checkpoint_id"]
        with forbid():
            result = cassette.tape.replay(last, graph)
        assert result.status == "finished" and result.live == 0 and result.output_matches is True, result.error
        assert result.output["log"][-2] == "edited"
    finally:
        cassette.close()
    assert {k: Pregel.__dict__[k] for k in methods} == methods  # put back after the block


def test_autorecording_an_update_of_a_subgraphs_namespace_is_one_update(tmp_path):
    # LangGraph's update_state on a subgraph's namespace calls the subgraph's own update_state, on a
    # graph compiled without a checkpointer: part of the recorded update, not a recording of its own
    # (it recursed between the two recorders until the stack ran out)
    from langgraph.checkpoint.memory import InMemorySaver

    from graphtape.testing.cassette import Cassette

    def ask(s: Ask) -> Ask:
        return {"log": [f"human:{interrupt('what now?')}"]}

    sub = StateGraph(Ask).add_node("ask", ask).add_edge(START, "ask").compile()
    parent = StateGraph(Ask).add_node("sub", sub).add_edge(START, "sub").compile(checkpointer=InMemorySaver())
    cassette = Cassette(tmp_path / "sub.jsonl", "all")
    try:
        with cassette.autorecording():
            parent.invoke({"log": []}, cfg("nested"))
            (task,) = parent.get_state(cfg("nested"), subgraphs=True).tasks
            forked = parent.update_state(task.state.config, {"log": ["edited"]})
            assert forked["configurable"]["checkpoint_ns"].startswith("sub:")
            parent.invoke(Command(resume="yes"), cfg("nested"))
        assert parent.get_state(cfg("nested")).values["log"] == ["edited", "human:yes"]
        (update,) = cassette.tape.events(cassette.run_ids[-1], ["state_update"])  # recorded once, by the parent
        assert update.data["ns"].startswith("sub:")
    finally:
        cassette.close()


@pytest.mark.parametrize("own_history", [True, False], ids=["checkpointer-true", "per-task"])
def test_time_travel_to_a_subgraph_checkpoint_and_a_fork_there(tape, own_history):
    # the subgraph's checkpoint (`checkpoint_ns` "sub", or "sub:<task id>", which differs in the
    # replay) and LangGraph's `checkpoint_map` are mapped to the replay's, for the run and the update
    m = RandomModel(prefix="sub")

    def step_a(s: Ask) -> Ask:
        return {"log": [m.invoke([HumanMessage("a")]).content]}

    def ask(s: Ask) -> Ask:
        return {"log": [f"ask:{interrupt('q')}"]}

    def build() -> Any:
        sub = StateGraph(Ask)
        sub.add_node(step_a)
        sub.add_node(ask)
        sub.add_edge(START, "step_a")
        sub.add_edge("step_a", "ask")
        outer = StateGraph(Ask)
        outer.add_node("sub", sub.compile(checkpointer=True if own_history else None))
        outer.add_edge(START, "sub")
        return outer.compile()

    rec = tape.record(build(), checkpointer=tape.saver)
    rec.invoke({"log": []}, cfg("nested"))
    at_ask = rec.get_state(cfg("nested"), subgraphs=True).tasks[0].state.config
    assert at_ask["configurable"]["checkpoint_ns"].startswith("sub")
    rec.invoke(Command(resume="first"), cfg("nested"))
    rec.invoke(None, at_ask)  # back to the subgraph's checkpoint: ask interrupts again, step_a does not re-run
    assert tape.run(rec.last_run_id).status == "interrupted"
    before = sum(LIVE.values())
    with forbid():
        result = tape.replay(rec.last_run_id, build())
    assert_exact(tape, rec, "nested", result, before)
    rec.invoke(None, rec.update_state(at_ask, {"log": ["forked"]}))  # a fork in the subgraph
    before = sum(LIVE.values())
    with forbid():
        result = tape.replay(rec.last_run_id, build())
    assert_exact(tape, rec, "nested", result, before)
