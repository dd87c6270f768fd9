"""End-to-end: record real graphs, replay them strictly and in flight mode."""

from __future__ import annotations

import asyncio
import contextlib
import operator
import time
from typing import Annotated, TypedDict

import pytest
from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

import graphtape
from tests import graphs
from tests.graphs import LIVE, forbid


def history_values(recorded, thread_id):
    """The state at every checkpoint of a thread, oldest first, message ids removed."""
    from graphtape.replay.engine import strip_ids
    from graphtape.serde import to_jsonable

    cfg = {"configurable": {"thread_id": thread_id}}
    snaps = list(recorded.get_state_history(cfg))
    snaps.reverse()
    return [(strip_ids(to_jsonable(s.values)), tuple(s.next)) for s in snaps]


def record_and_replay(tape, build, run_input, *, api="invoke", config=None):
    graph = build()
    rec = tape.record(graph, name=build.__name__, checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "t-1"}, **(config or {})}
    if api == "ainvoke":
        out = asyncio.run(rec.ainvoke(run_input, cfg))
    else:
        out = rec.invoke(run_input, cfg)
    run_id = rec.last_run_id
    before = sum(LIVE.values())
    with forbid():
        result = tape.replay(run_id, build())
    assert sum(LIVE.values()) == before
    assert result.status == "finished", result.error
    assert result.divergence is None
    assert result.live == 0
    assert result.unused == 0
    assert result.output_matches is True
    assert history_values(rec, "t-1") == history_values(rec, result.thread_id)
    return rec, run_id, out, result


def test_linear_graph_replays_strictly_with_zero_live_calls(tape):
    _rec, run_id, out, result = record_and_replay(tape, graphs.build_linear, {"topic": ""})
    run = tape.run(run_id)
    assert (run.llm_calls, run.tool_calls, run.effect_calls) == (2, 1, 2)
    assert result.served == 5
    assert result.output == out
    replay_run = tape.run(result.run_id)
    assert replay_run.replay_of == run_id and replay_run.mode == "strict"


def test_subgraph_send_fanout_and_parallel_branches(tape):
    _rec, run_id, out, result = record_and_replay(tape, graphs.build_fanout, {"questions": []})
    # three fan-out workers (two with the same request), one side branch, one summary
    assert tape.run(run_id).llm_calls == 5
    assert result.output["answers"] == out["answers"]
    paths = {c.node_path for c in tape.calls(run_id)}
    assert paths == {"worker/sub_answer", "side", "summarize"}


def test_compiled_subgraph_node_has_namespaced_calls(tape):
    _rec, run_id, _out, _result = record_and_replay(tape, graphs.build_subgraph_node, {"question": "q"})
    paths = sorted(c.node_path for c in tape.calls(run_id))
    assert paths == ["outer", "sub/inner"]


def test_agent_loop_with_toolnode(tape):
    _rec, run_id, out, result = record_and_replay(tape, graphs.build_agent, {"messages": [HumanMessage("find cats")]})
    kinds = [c.kind for c in tape.calls(run_id)]
    assert kinds == ["llm", "tool", "llm"]
    # served messages keep their recorded tool calls and ids
    assert [m.content for m in result.output["messages"]] == [m.content for m in out["messages"]]
    assert result.output["messages"][1].tool_calls == out["messages"][1].tool_calls


def test_async_nodes_and_astream_replay(tape):
    _rec, run_id, out, result = record_and_replay(tape, graphs.build_async, {"topic": "x"}, api="ainvoke")
    assert tape.run(run_id).meta["api"] == "ainvoke"
    assert result.output == out


def test_functional_api(tape):
    _rec, run_id, out, result = record_and_replay(tape, graphs.build_functional, "cats")
    assert result.output == out
    assert tape.run(run_id).llm_calls == 2


def test_interrupts_and_resume_replay_without_asking(tape):
    graph = graphs.build_review()
    rec = tape.record(graph, name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "hitl"}}
    rec.invoke({}, cfg)
    first = rec.last_run_id
    assert tape.run(first).status == "interrupted"
    pending = rec.get_state(cfg).interrupts
    assert len(pending) == 2
    answers = {i.id: f"ok-{i.value['question']}" for i in pending}
    rec.invoke(Command(resume=answers), cfg)
    assert tape.run(rec.last_run_id).status == "interrupted"
    out = rec.invoke(Command(resume="yes"), cfg)
    last = rec.last_run_id
    assert tape.run(last).status == "finished"
    resumes = [e for r in tape.runs(thread_id="hitl") for e in tape.events(r.run_id, ["resume"])]
    assert len(resumes) == 2
    with forbid():
        result = tape.replay(last, graphs.build_review())
    assert result.status == "finished", result.error
    assert len(result.run_ids) == 3
    assert result.output == out
    assert result.output_matches


def test_replay_of_an_interrupted_run_stops_at_the_same_interrupt(tape):
    rec = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
    rec.invoke({}, {"configurable": {"thread_id": "h2"}})
    with forbid():
        result = tape.replay(rec.last_run_id, graphs.build_review())
    assert result.status == "interrupted"
    assert tape.run(result.run_id).status == "interrupted"


#: seconds each of the two reviewers of build_parallel_reviews waits before its interrupt (finishing order)
_REVIEW_DELAY = {"a": 0.0, "b": 0.0}


class _Reviews(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def build_parallel_reviews(answered: str = ""):
    """Two nodes of a subgraph interrupt in one step with the same question: the subgraph's
    interrupts reach the parent in the order the nodes finished (``_REVIEW_DELAY``). ``answered``:
    what each writes before the answer it is given."""

    def reviewer(name: str):
        def review(s: _Reviews) -> _Reviews:
            time.sleep(_REVIEW_DELAY[name])
            return {"log": [f"{name}:{answered}{interrupt('ok?')}"]}

        return review

    sub = StateGraph(_Reviews)
    for name in ("a", "b"):
        sub.add_node(name, reviewer(name))
        sub.add_edge(START, name)
        sub.add_edge(name, END)
    parent = StateGraph(_Reviews)
    parent.add_node("reviews", sub.compile())
    parent.add_edge(START, "reviews")
    parent.add_edge("reviews", END)
    return parent.compile()


def test_parallel_interrupts_are_matched_by_the_task_that_raised_them(tape, monkeypatch):
    """Resume values go to the interrupt of the same node whatever order the nodes finish in, and the
    ``__interrupt__`` list's order does not make an interrupted run's output differ."""
    monkeypatch.setitem(_REVIEW_DELAY, "a", 0.05)
    rec = tape.record(build_parallel_reviews(), name="reviews", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "par"}}
    rec.invoke({"log": []}, cfg)
    first = rec.last_run_id
    tasks = rec.get_state(cfg, subgraphs=True).tasks[0].state.tasks
    answers = {i.id: f"yes-{t.name}" for t in tasks for i in t.interrupts}
    assert len(answers) == 2
    out = rec.invoke(Command(resume=answers), cfg)
    assert sorted(out["log"]) == ["a:yes-a", "b:yes-b"]
    last = rec.last_run_id
    for slow in ("b", "a", "b", "a", "b", "a"):
        monkeypatch.setitem(_REVIEW_DELAY, "a", 0.05 if slow == "a" else 0.0)
        monkeypatch.setitem(_REVIEW_DELAY, "b", 0.05 if slow == "b" else 0.0)
        with forbid():
            interrupted = tape.replay(first, build_parallel_reviews())
            finished = tape.replay(last, build_parallel_reviews())
        assert (interrupted.status, interrupted.output_matches) == ("interrupted", True)
        assert finished.divergence is None, finished.error
        assert (finished.status, finished.output_matches, finished.live) == ("finished", True, 0)
        assert sorted(finished.output["log"]) == ["a:yes-a", "b:yes-b"]


def test_a_resumed_task_that_writes_another_state_is_not_blamed_on_the_clock(tape):
    """A task that resumed an interrupt and then wrote another state diverges with a hint about its
    interrupt's answer first, not only the clock and random numbers."""
    rec = tape.record(build_parallel_reviews(), name="reviews", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "hint"}}
    rec.invoke({"log": []}, cfg)
    rec.invoke(Command(resume={i.id: "ok" for i in rec.get_state(cfg).interrupts}), cfg)
    with forbid():
        result = tape.replay(rec.last_run_id, build_parallel_reviews(answered="not "))
    assert result.status == "diverged" and result.divergence["node_path"] in ("reviews/a", "reviews/b")
    assert result.divergence["hint"].startswith("this task resumed an interrupt")


def test_strict_resume_refusing_an_answer_is_replayed_as_recorded(tape):
    """LangGraph's ``__pregel_strict_resume`` (set in ``configurable``) refuses an answer to an
    interrupt already answered; the replay passes it as recorded, so it refuses it again."""
    from langgraph._internal._constants import CONFIG_KEY_STRICT_RESUME
    from langgraph.errors import UnknownInterruptError

    rec = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "strict", CONFIG_KEY_STRICT_RESUME: True}}
    rec.invoke({}, cfg)
    answers = {i.id: "ok" for i in rec.get_state(cfg).interrupts}
    rec.invoke(Command(resume=answers), cfg)
    with pytest.raises(UnknownInterruptError):
        rec.invoke(Command(resume=answers), cfg)  # the same answers again: already consumed
    refused = tape.run(rec.last_run_id)
    assert refused.status == "failed" and refused.error.startswith("UnknownInterruptError")
    with forbid():
        result = tape.replay(refused.run_id, graphs.build_review())
    assert len(result.run_ids) == 3 and result.divergence is None
    assert result.status == "failed" and tape.run(result.run_id).status == "failed"
    assert result.error.startswith("UnknownInterruptError: Unknown or already-consumed interrupt")
    # the refusal, reproduced, is a step of the chain: the run that then answers the pending one replays
    out = rec.invoke(Command(resume={i.id: "publish" for i in rec.get_state(cfg).interrupts}), cfg)
    with forbid():
        result = tape.replay(rec.last_run_id, graphs.build_review())
    assert len(result.run_ids) == 4 and result.error is None and result.divergence is None
    assert (result.status, result.output_matches, result.output) == ("finished", True, out)


def test_prompt_edit_diverges_in_strict_mode(tape, monkeypatch):
    rec = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    rec.invoke({"topic": ""})
    run_id = rec.last_run_id
    monkeypatch.setitem(graphs.PROMPTS, "write", "Write a haiku about")
    with forbid():
        result = tape.replay(run_id, graphs.build_linear())
    assert result.status == "diverged"
    div = result.divergence
    assert div["node"] == "write" and div["kind"] == "llm" and div["step"] == 2
    assert div["run_id"] == run_id
    assert "-[human] Write about cats" in div["diff"]
    assert "+[human] Write a haiku about cats" in div["diff"]
    assert tape.run(result.run_id).status == "diverged"
    with pytest.raises(graphtape.Divergence, match="diverged at llm call #0 in node write step 2"):
        result.raise_for_divergence()
    # the recorded run is untouched
    assert tape.run(run_id).status == "finished"


def test_new_call_diverges(tape):
    rec = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    rec.invoke({"topic": ""})

    # a graph whose code makes one more model call in a node
    from langgraph.graph import END, START, StateGraph

    m = graphs.RandomModel()
    b = StateGraph(graphs.Linear)
    b.add_node("start", lambda s: {"log": [m.invoke([HumanMessage("new")]).content]})
    b.add_edge(START, "start")
    b.add_edge("start", END)
    with forbid():
        result = tape.replay(rec.last_run_id, b.compile())
    assert result.status == "diverged"
    assert result.divergence["reason"] == "the recorded run never made this call"


def test_flight_mode_serves_unchanged_and_calls_changed_live(tape, monkeypatch):
    rec = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    out = rec.invoke({"topic": ""})
    run_id = rec.last_run_id
    monkeypatch.setitem(graphs.PROMPTS, "write", "Write a haiku about")
    before = LIVE.copy()
    result = tape.replay(run_id, graphs.build_linear(), mode="flight", allow_live_effects=True)
    assert result.status == "finished"
    spent = LIVE - before
    # clock() unchanged -> served; write's model call changed -> live, and everything after it
    assert spent[("effect", "clock")] == 0
    assert spent[("llm", "rnd")] == 2 and spent[("tool", "search")] == 1
    assert spent[("effect", "send_mail")] == 1
    assert result.served == 1 and result.live == 4
    assert result.output["log"][0] == out["log"][0]
    assert result.output["draft"] != out["draft"]


def test_flight_mode_reports_tokens_and_cost_saved(tape):
    rec = tape.record(graphs.build_fanout(), checkpointer=tape.saver)
    rec.invoke({"questions": []})
    result = tape.replay(rec.last_run_id, graphs.build_fanout(), mode="flight")
    assert result.live == 0 and result.served == 5
    assert result.tokens_saved == tape.run(rec.last_run_id).tokens > 0
    assert result.cost_saved > 0


def test_changed_effect_is_blocked_in_flight_mode_without_permission(tape, monkeypatch):
    rec = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    rec.invoke({"topic": ""})
    monkeypatch.setitem(graphs.PROMPTS, "write", "Write a limerick about")
    before = LIVE.copy()
    result = tape.replay(rec.last_run_id, graphs.build_linear(), mode="flight")
    assert result.status == "failed"
    assert "send_mail" in result.error and "allow_live_effects" in result.error
    assert (LIVE - before)[("effect", "send_mail")] == 0


def test_models_with_own_cache_or_cache_false_are_recorded(tape):
    from langchain_core.caches import InMemoryCache
    from langchain_core.globals import set_llm_cache

    global_cache = InMemoryCache()
    set_llm_cache(global_cache)
    try:
        for model in (graphs.RandomModel(cache=False), graphs.RandomModel(cache=InMemoryCache()), graphs.RandomModel()):
            rec = tape.record(graphs.build_linear(model), checkpointer=tape.saver)
            rec.invoke({"topic": ""})
            assert tape.run(rec.last_run_id).llm_calls == 2
        # the global cache kept working for the model that uses it
        assert global_cache._cache
        m = graphs.RandomModel()
        assert m.invoke("same").content == m.invoke("same").content
    finally:
        set_llm_cache(None)


@pytest.mark.parametrize("api", ["stream", "astream", "astream_events"])
def test_streaming_apis_are_recorded_and_replayable(tape, api):
    rec = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": f"s-{api}"}}
    if api == "stream":
        chunks = list(rec.stream({"topic": ""}, cfg, stream_mode="updates"))
    else:

        async def consume():
            fn = rec.astream if api == "astream" else rec.astream_events
            kw = {"stream_mode": "messages"} if api == "astream" else {"version": "v2"}
            return [c async for c in fn({"topic": ""}, cfg, **kw)]

        chunks = asyncio.run(consume())
    assert chunks
    run = tape.run(rec.last_run_id)
    assert run.status == "finished" and run.meta["api"] == api
    assert (run.llm_calls, run.tool_calls, run.effect_calls) == (2, 1, 2)
    with forbid():
        result = tape.replay(run.run_id, graphs.build_linear())
    assert result.status == "finished" and result.live == 0 and result.output_matches


class _Parallel(TypedDict, total=False):
    fast: str
    slow: str


def build_fast_and_slow(log: list[str]):
    """A fast node and a slow one in the same step; ``log`` says whether the slow one was cancelled."""

    async def fast(s: _Parallel) -> _Parallel:
        return {"fast": "x"}

    async def slow(s: _Parallel) -> _Parallel:
        try:
            await asyncio.sleep(0.3)
        except asyncio.CancelledError:
            log.append("cancelled")
            raise
        log.append("done")
        return {"slow": "y"}

    b = StateGraph(_Parallel)
    b.add_node("fast", fast)
    b.add_node("slow", slow)
    for name in ("fast", "slow"):
        b.add_edge(START, name)
        b.add_edge(name, END)
    return b.compile()


def test_closing_a_recorded_astream_cancels_the_run_as_langgraph_does(tape):
    """``break`` out of ``aclosing(astream(...))``: LangGraph cancels the step's other tasks before the
    close returns; recorded, the close reaches LangGraph's stream the same way (not later, from the
    garbage collector, or never while something holds the stream)."""

    async def break_after_first_event(recorded: bool) -> tuple[list[str], list[str]]:
        log: list[str] = []
        graph = build_fast_and_slow(log)
        target = tape.record(graph, name="fast-slow", checkpointer=tape.saver) if recorded else graph
        cfg = {"configurable": {"thread_id": f"close-{recorded}"}}
        async with contextlib.aclosing(target.astream({}, cfg, stream_mode="updates")) as events:
            async for _event in events:
                break
        at_close = list(log)
        await asyncio.sleep(0.5)
        return at_close, log

    assert asyncio.run(break_after_first_event(False)) == (["cancelled"], ["cancelled"])
    assert asyncio.run(break_after_first_event(True)) == (["cancelled"], ["cancelled"])


def test_secrets_are_redacted_on_capture(tape):
    class KeyedModel(graphs.RandomModel):
        api_key: str = "sk-live-SECRET"

        @property
        def _identifying_params(self):
            return {**super()._identifying_params, "api_key": self.api_key}

    rec = tape.record(graphs.build_linear(KeyedModel()), checkpointer=tape.saver)
    rec.invoke({"topic": ""}, {"configurable": {"thread_id": "k", "openai_api_key": "sk-config-SECRET"}})
    run_id = rec.last_run_id
    for call in tape.calls(run_id):
        assert "SECRET" not in str(tape.request(call))
    import json

    for ev in tape.events(run_id):
        assert "SECRET" not in json.dumps(ev.data)


def test_run_id_from_config_and_failed_runs(tape):
    import uuid

    def boom(s):
        raise ValueError("kaboom")

    from langgraph.graph import END, START, StateGraph

    b = StateGraph(graphs.Linear)
    b.add_node("boom", boom)
    b.add_edge(START, "boom")
    b.add_edge("boom", END)
    rec = tape.record(b.compile(), checkpointer=tape.saver)
    rid = uuid.uuid4()
    with pytest.raises(ValueError):
        rec.invoke({"topic": ""}, {"run_id": rid})
    run = tape.run(str(rid))
    assert run.status == "failed" and "kaboom" in run.error
    assert [e.kind for e in tape.events(str(rid))][-1] == "run_failed"
    assert "task_failed" in [e.kind for e in tape.events(str(rid))]


def test_a_failed_run_reproduced_in_a_chain_is_a_faithful_step(tape):
    """Run 1 fails, run 2 retries it on the same thread and finishes: replaying run 2 replays run 1's
    failure (the recorded error, served) and goes on to run 2; a failure that differs ends the chain."""
    attempts: list[int] = []

    @graphtape.effect
    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("the service is down")
        return "up"

    def build(fail_with: str | None = None):
        def work(s):
            if fail_with is not None:
                raise RuntimeError(fail_with)
            return {"topic": flaky()}

        b = StateGraph(graphs.Linear)
        b.add_node("work", work)
        b.add_edge(START, "work")
        b.add_edge("work", END)
        return b.compile()

    rec = tape.record(build(), name="retried", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "retry"}}
    with pytest.raises(ConnectionError):
        rec.invoke({"topic": ""}, cfg)
    failed = rec.last_run_id
    assert rec.invoke(None, cfg)["topic"] == "up"
    retried = rec.last_run_id
    assert tape.run(retried).parent_run_id == failed
    with forbid():
        result = tape.replay(retried, build())
    assert result.error is None and result.divergence is None
    assert (result.status, result.output_matches, result.live) == ("finished", True, 0)
    assert len(result.run_ids) == 2 and [tape.run(r).status for r in result.run_ids] == ["failed", "finished"]
    assert len(attempts) == 2  # served both times
    # the failed run itself replays as failed, with its error
    alone = tape.replay(failed, build())
    assert (alone.status, alone.error) == ("failed", "ConnectionError: the service is down")
    # a failure that is not the recorded one ends the chain there
    other = tape.replay(retried, build(fail_with="another bug"))
    assert (other.status, other.error, len(other.run_ids)) == ("failed", "RuntimeError: another bug", 1)


def test_replay_from_a_checkpoint(tape):
    rec = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    out = rec.invoke({"topic": ""}, {"configurable": {"thread_id": "cp"}})
    run_id = rec.last_run_id
    checkpoints = [e.data for e in tape.events(run_id, ["checkpoint"])]
    # the checkpoint after `start` ran, before `write`
    after_start = next(c for c in checkpoints if c["step"] == 1)
    with forbid():
        result = tape.replay(run_id, graphs.build_linear(), from_checkpoint=after_start["checkpoint_id"])
    assert result.status == "finished", result.error
    assert result.live == 0 and result.served == 4
    assert result.unused == 1  # clock() in `start` ran before the checkpoint
    assert result.output == out
    with pytest.raises(graphtape.ReplayError, match="not one of the checkpoints"):
        tape.replay(run_id, graphs.build_linear(), from_checkpoint="nope")


def test_users_own_checkpointer_keeps_working(tape):
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    graph = graphs.build_review().copy(update={"checkpointer": saver})
    rec = tape.record(graph)
    cfg = {"configurable": {"thread_id": "mine"}}
    rec.invoke({}, cfg)
    assert saver.get_tuple(cfg) is not None  # the user's saver holds the checkpoints
    assert graph.get_state(cfg).next  # and the user's graph sees them
    linked = {e.data["checkpoint_id"] for e in tape.events(rec.last_run_id, ["checkpoint"])}
    assert {c.config["configurable"]["checkpoint_id"] for c in saver.list(cfg)} <= linked
    with forbid():
        result = tape.replay(rec.last_run_id, graph)
    assert result.status == "interrupted"


def test_a_saver_without_task_path_gets_the_arguments_it_takes(tape):
    """LangGraph passes ``task_path`` to ``put_writes``/``aput_writes`` only when the saver's method
    takes it (an older saver has three arguments): recorded, the saver is called the same way."""
    from langgraph.checkpoint.memory import InMemorySaver

    class OlderSaver(InMemorySaver):
        def put_writes(self, config, writes, task_id):  # type: ignore[override]
            super().put_writes(config, writes, task_id)

        async def aput_writes(self, config, writes, task_id):  # type: ignore[override]
            super().put_writes(config, writes, task_id)

    graph = graphs.build_review().copy(update={"checkpointer": OlderSaver()})
    rec = tape.record(graph, name="older-saver")
    rec.invoke({}, {"configurable": {"thread_id": "older"}})
    assert tape.run(rec.last_run_id).status == "interrupted"
    asyncio.run(rec.ainvoke({}, {"configurable": {"thread_id": "older-async"}}))
    assert tape.run(rec.last_run_id).status == "interrupted"
    assert len(rec.get_state({"configurable": {"thread_id": "older-async"}}).interrupts) == 2
    with forbid():
        result = tape.replay(rec.last_run_id, graph)
    assert (result.status, result.output_matches, result.divergence) == ("interrupted", True, None)


def test_batch_calls_are_each_recorded(tape):
    from langgraph.graph import END, START, StateGraph

    m = graphs.RandomModel()
    b = StateGraph(graphs.Linear)
    b.add_node("many", lambda s: {"log": [r.content for r in m.batch(["a", "b", "c"])]})
    b.add_edge(START, "many")
    b.add_edge("many", END)
    rec = tape.record(b.compile(), checkpointer=tape.saver)
    out = rec.invoke({"topic": ""})
    assert tape.run(rec.last_run_id).llm_calls == 3
    with forbid():
        result = tape.replay(rec.last_run_id, b.compile())
    assert result.output == out


def _recorded_output_messages(tape, run_id: str) -> list[dict]:
    (finished,) = [e for e in tape.store.events(run_id) if e.kind == "run_finished"]
    out = tape.store.get_json(finished.data["output"])
    return [tape.store.get_json(h) for h in tape.store.get_chain(out["messages"]["$chain"])]


class _ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def test_a_message_changed_after_a_call_is_recorded_as_it_ends(tape):
    """Messages are turned into JSON once per run (the requests and the final state share them),
    unless a field was given a new value in between."""
    from langgraph.graph import END, START, StateGraph

    model = graphs.RandomModel(seed=3)

    def ask(state):
        return {"messages": [model.invoke(state["messages"])]}

    def edit(state):
        state["messages"][0].content = "edited in place"  # a field given a new value, same object
        return {}

    b = StateGraph(_ChatState)
    b.add_node(ask)
    b.add_node(edit)
    b.add_edge(START, "ask")
    b.add_edge("ask", "edit")
    b.add_edge("edit", END)
    g = tape.record(b.compile(), checkpointer=tape.saver)
    result = g.invoke({"messages": [HumanMessage("original question")]}, {"configurable": {"thread_id": "memo"}})
    recorded = _recorded_output_messages(tape, g.last_run_id)
    assert result["messages"][0].content == "edited in place"
    assert [m["content"] for m in recorded] == [m.content for m in result["messages"]]
    (call,) = tape.calls(g.last_run_id)
    request = tape.store.get_json(tape.store.get_chain(call.messages_ref)[0])
    assert request["content"] == "original question"  # the request as it was sent


def test_a_run_that_ends_with_no_output_has_the_same_final_state_when_replayed(tape):
    """LangGraph returns None for a run whose output channel was never written, and an interrupted
    functional-API run has no state values yet: the same on both sides is the same final state."""
    from langgraph.channels import LastValue
    from langgraph.func import entrypoint, task
    from langgraph.pregel import NodeBuilder, Pregel

    @task
    def double(x: int) -> int:
        return x * 2

    @entrypoint()
    def asks(xs: list[int]) -> list:
        futures = [double(x) for x in xs]
        return [f.result() for f in futures] + [interrupt("more?")]

    rec = tape.record(asks, name="asks")
    chunks = list(rec.stream([1, 2], {"configurable": {"thread_id": "t-1"}}))
    assert any("__interrupt__" in c for c in chunks)
    result = tape.replay(rec.last_run_id, asks)
    assert (result.status, result.divergence, result.live) == ("interrupted", None, 0)
    assert result.output_matches is True

    no_out = Pregel(
        nodes={"one": NodeBuilder().subscribe_only("input").do(lambda x: x + 1).write_to("between")},
        channels={"input": LastValue(int), "between": LastValue(int), "output": LastValue(int)},
        input_channels="input",
        output_channels="output",
    )
    rec = tape.record(no_out, name="no_out")
    assert rec.invoke(2, {"configurable": {"thread_id": "t-2"}}) is None
    result = tape.replay(rec.last_run_id, no_out)
    assert (result.status, result.divergence, result.live) == ("finished", None, 0)
    assert result.output_matches is True


def test_a_tool_given_the_state_is_matched_without_its_messages_ids(tape):
    """A tool run as a node (or with ``InjectedState``) gets the state, whose messages ``add_messages``
    stamps with fresh uuids on every execution: its request is matched without them, like a model's."""
    from langchain_core.tools import tool
    from langgraph.graph import MessagesState

    @tool(return_direct=True)
    def get_user_name() -> Command:
        """Retrieve user name"""
        return Command(update={"user_name": "Meow"}, graph=Command.PARENT)

    sub = StateGraph(MessagesState)
    sub.add_node("tool", get_user_name)
    sub.add_edge(START, "tool")

    class Parent(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]
        user_name: str

    builder = StateGraph(Parent)
    builder.add_node("alice", sub.compile())
    builder.add_edge(START, "alice")
    graph = builder.compile()
    rec = tape.record(graph, name="parent_command")
    out = rec.invoke({"messages": [("user", "get user name")]}, {"configurable": {"thread_id": "t-1"}})
    assert out["user_name"] == "Meow"
    result = tape.replay(rec.last_run_id, graph)
    assert (result.status, result.divergence, result.live) == ("finished", None, 0)
    assert result.served == 1 and result.output_matches is True


def test_the_recorded_tags_and_metadata_are_given_to_the_replay(tape):
    """A node may read the run's ``tags`` and ``metadata`` (``config["tags"]``): the replay runs with the
    recorded ones, as it does with the recorded ``configurable`` keys."""
    from langchain_core.runnables import RunnableConfig

    class Seen(TypedDict):
        copies: int
        who: str

    def leaf(state: Seen, config: RunnableConfig) -> Seen:
        return {"copies": config["tags"].count("my-tag"), "who": config["metadata"].get("user", "?")}

    graph = StateGraph(Seen).add_node("leaf", leaf).add_edge(START, "leaf").compile()
    rec = tape.record(graph, name="tags")
    config = {"configurable": {"thread_id": "t-1"}, "tags": ["my-tag"], "metadata": {"user": "ada"}}
    assert rec.invoke({"copies": 0, "who": ""}, config) == {"copies": 1, "who": "ada"}
    result = tape.replay(rec.last_run_id, graph)
    assert (result.status, result.divergence, result.live) == ("finished", None, 0)
    assert result.output == {"copies": 1, "who": "ada"} and result.output_matches is True


def test_a_run_of_the_chain_that_ends_otherwise_than_recorded_is_a_divergence(tape):
    """A node that interrupts only the first time it is called (a counter outside the tape) does not
    interrupt when the chain is replayed: the resume after it then has nothing to resume and ends
    as recorded, but the replay did not do what the recording did, so it is not exact."""
    calls = {"n": 0}

    class Log(TypedDict):
        log: Annotated[list[str], operator.add]

    def flaky(state: Log) -> Log:
        calls["n"] += 1
        if calls["n"] == 1:
            interrupt("once")
        return {"log": ["flaky"]}

    graph = StateGraph(Log).add_node("flaky", flaky).add_edge(START, "flaky").compile()
    rec = tape.record(graph, name="flaky", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "t-1"}}
    rec.invoke({"log": []}, cfg)
    assert tape.run(rec.last_run_id).status == "interrupted"
    rec.invoke(None, cfg)  # (calls["n"] is 2: flaky does not interrupt again)
    assert tape.run(rec.last_run_id).status == "finished"
    result = tape.replay(rec.last_run_id, graph)
    assert result.status == "diverged"
    assert result.divergence["reason"] == "the run ended finished; the recorded run ended interrupted"
    assert len(result.run_ids) == 1
