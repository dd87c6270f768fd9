"""Node task events recorded from LangGraph's task runner, with no callback handler on the run (issue 13).

Any LangChain callback handler on a run makes every runnable inside every
node go through langchain's callback dispatch; graphtape's task events now
come from a wrapper of LangGraph's ``run_with_retry``/``arun_with_retry``
(``record/task_runner.py``). What must not change: the rows, key for key, for
every shape of run the handler recorded (the handler is still what records a
run when the runner is not patched, so the two are compared directly), one
``task_started`` per attempt, an enclosing recorded run recording the tasks
of a recorded graph invoked inside its node, a recording error never failing
the user's graph, and ``graphtape.record.uninstall()`` restoring LangGraph.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import operator
import re
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.pregel import _runner
from langgraph.types import Command, RetryPolicy, Send, interrupt

import graphtape
from graphtape.errors import PatchConflict
from graphtape.record import task_runner
from graphtape.record.tasks import TaskCallbacks, TaskRecorder

TASK_KINDS = ["task_started", "task_finished", "task_failed", "task_interrupted"]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class S(TypedDict, total=False):
    n: int
    log: Annotated[list[str], operator.add]


def graph_of(schema: Any) -> Any:
    """A ``StateGraph`` of ``schema`` (untyped: its nodes here take the partial state dicts)."""
    return StateGraph(schema)


def line(k: int = 3) -> Any:
    b = graph_of(S)
    prev = START
    for i in range(k):
        b.add_node(f"n{i}", lambda s, i=i: {"n": s.get("n", 0) + 1, "log": [f"n{i}"]})
        b.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    b.add_edge(prev, END)
    return b.compile()


def with_subgraph() -> Any:
    b = graph_of(S)
    b.add_node("pre", lambda s: {"log": ["pre"]})
    b.add_node("sub", line(2))
    b.add_node("post", lambda s: {"log": ["post"]})
    b.add_edge(START, "pre")
    b.add_edge("pre", "sub")
    b.add_edge("sub", "post")
    b.add_edge("post", END)
    return b.compile()


def fan_out() -> Any:
    b = graph_of(S)
    b.add_node("work", lambda s: {"log": [f"w{s['n']}"]})
    b.add_conditional_edges(START, lambda s: [Send("work", {"n": i}) for i in range(3)])
    b.add_edge("work", END)
    return b.compile()


def flaky_graph(fail_times: int) -> Any:
    attempts = {"n": 0}

    def flaky(s: S) -> dict[str, Any]:
        attempts["n"] += 1
        if attempts["n"] <= fail_times:
            raise ValueError(f"flaky {attempts['n']}")
        return {"log": ["ok"]}

    b = graph_of(S)
    policy = RetryPolicy(max_attempts=5, initial_interval=0.001, jitter=False, retry_on=ValueError)
    b.add_node("flaky", flaky, retry_policy=policy)
    b.add_edge(START, "flaky")
    b.add_edge("flaky", END)
    return b.compile()


def failing() -> Any:
    def boom(s: S) -> dict[str, Any]:
        raise RuntimeError("boom")

    b = graph_of(S)
    b.add_node("a", lambda s: {"log": ["a"]})
    b.add_node("boom", boom)
    b.add_edge(START, "a")
    b.add_edge("a", "boom")
    b.add_edge("boom", END)
    return b.compile()


def asking_in_subgraph() -> Any:
    def ask(s: S) -> dict[str, Any]:
        return {"log": [interrupt("q?")]}

    inner = graph_of(S)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)
    b = graph_of(S)
    b.add_node("a", lambda s: {"log": ["a"]})
    b.add_node("outer", inner.compile())
    b.add_edge(START, "a")
    b.add_edge("a", "outer")
    b.add_edge("outer", END)
    return b.compile()


def goto_parent() -> Any:
    def jump(s: S) -> Command:
        return Command(graph=Command.PARENT, goto="after", update={"log": ["jump"]})

    sub = graph_of(S)
    sub.add_node("jump", jump)
    sub.add_edge(START, "jump")
    b = graph_of(S)
    b.add_node("sub", sub.compile(), destinations=("after",))
    b.add_node("after", lambda s: {"log": ["after"]})
    b.add_edge(START, "sub")
    b.add_edge("after", END)
    return b.compile()


@task
def double(x: int) -> int:
    return x * 2


@entrypoint(checkpointer=InMemorySaver())
def doubled_twice(x: int) -> dict[str, int]:
    return {"v": double(double(x).result()).result()}


def run(rec: Any, api: str, value: Any, thread: str) -> None:
    """One call of ``rec`` by ``api``; the graph's own error is expected of some shapes."""
    cfg = {"configurable": {"thread_id": thread}}

    async def consume(stream: Any) -> None:
        async for _ in stream:
            pass

    try:
        if api == "invoke":
            rec.invoke(value, cfg)
        elif api == "ainvoke":
            asyncio.run(rec.ainvoke(value, cfg))
        elif api == "stream":
            list(rec.stream(value, cfg))
        elif api == "astream":
            asyncio.run(consume(rec.astream(value, cfg)))
        else:
            asyncio.run(consume(rec.astream_events(value, cfg, version="v2")))
    except RuntimeError as exc:
        assert "boom" in str(exc)


def task_rows(tape: graphtape.Tape, run_ids: list[str]) -> list[Any]:
    """The runs' task events, key for key, ids and durations left out, writes and errors resolved."""
    ids: dict[str, str] = {}
    out: list[Any] = []
    for run_id in run_ids:
        for row in tape.store.events(run_id, TASK_KINDS):
            data = dict(row.data)
            keys = list(data)
            data.pop("duration", None)
            if isinstance(data.get("writes"), str):
                data["writes"] = tape.store.get_json(data["writes"])
            if isinstance(data.get("error"), dict):
                data["error"] = {k: data["error"].get(k) for k in ("type", "message")}
            text = UUID.sub(lambda m: ids.setdefault(m.group(0), f"<{len(ids)}>"), json.dumps(data, default=str))
            out.append((row.kind, keys, json.loads(text)))
    return out


SHAPES = {
    "line": (line, {"n": 0}),
    "subgraph": (with_subgraph, {"n": 0}),
    "fan_out": (fan_out, {"n": 0}),
    "failing": (failing, {}),
    "goto_parent": (goto_parent, {}),
    "retries": (lambda: flaky_graph(2), {}),
}


@pytest.fixture
def by_handler() -> Iterator[Any]:
    """Run a callable with tasks recorded by the callback handler (the runner unpatched), then patch again."""

    def call(fn: Any) -> Any:
        task_runner.uninstall()
        try:
            assert not task_runner.installed()
            return fn()
        finally:
            task_runner.install()

    yield call
    task_runner.install()


def record_shape(tape: graphtape.Tape, shape: str, api: str) -> list[Any]:
    build, value = SHAPES[shape]
    rec = tape.record(build(), name=shape, checkpointer=InMemorySaver())
    run(rec, api, value, f"{shape}-{api}")
    return task_rows(tape, rec.run_ids)


@pytest.mark.parametrize("api", ["invoke", "ainvoke", "stream", "astream", "astream_events"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_rows_are_the_handlers_rows(tape: graphtape.Tape, by_handler: Any, shape: str, api: str) -> None:
    from_runner = record_shape(tape, shape, api)
    from_handler = by_handler(lambda: record_shape(tape, shape, api))
    assert from_runner
    if shape in PARALLEL:
        # tasks of one step run at once: their rows interleave in either order, ids numbered as met
        from_runner, from_handler = unordered(from_runner), unordered(from_handler)
    assert from_runner == from_handler


#: shapes whose steps run several tasks at once (on LangGraph's thread pool)
PARALLEL = {"fan_out"}


def unordered(rows: list[Any]) -> list[str]:
    """``rows`` as a sorted list of their JSON, with the ids' numbers (their order of appearance) masked."""
    return sorted(re.sub(r"<\d+>", "<id>", json.dumps(row, sort_keys=True)) for row in rows)


@pytest.mark.parametrize("api", ["invoke", "ainvoke"])
def test_interrupts_and_the_functional_api_give_the_handlers_rows(
    tape: graphtape.Tape, by_handler: Any, api: str
) -> None:
    counter = itertools.count()

    def both() -> list[Any]:
        rec = tape.record(asking_in_subgraph(), name="ask", checkpointer=InMemorySaver())
        thread = f"ask-{api}-{next(counter)}"
        run(rec, api, {}, thread)
        run(rec, api, Command(resume="yes"), thread)
        fn = tape.record(doubled_twice, name="fn", checkpointer=InMemorySaver())
        run(fn, api, 3, f"fn-{thread}")
        return task_rows(tape, rec.run_ids + fn.run_ids)

    from_runner = both()
    assert [kind for kind, _, _ in from_runner].count("task_interrupted") == 2  # the subgraph node and its task
    assert from_runner == by_handler(both)


def test_each_attempt_of_a_retried_task_is_recorded(tape: graphtape.Tape) -> None:
    rec = tape.record(flaky_graph(2), name="flaky", checkpointer=InMemorySaver())
    rec.invoke({}, {"configurable": {"thread_id": "t"}})
    rows = task_rows(tape, rec.run_ids)
    flaky = [(kind, data.get("error", {}).get("message")) for kind, _, data in rows if "flaky" in json.dumps(data)]
    assert flaky == [
        ("task_started", None),
        ("task_failed", "flaky 1"),
        ("task_started", None),
        ("task_failed", "flaky 2"),
        ("task_started", None),
        ("task_finished", None),
    ]


def config_seen_by_a_node(tape: graphtape.Tape) -> tuple[Any, list[Any]]:
    """A recorded one-node graph whose node keeps the runnable config it runs with (in the list)."""
    seen: list[Any] = []

    def look(s: S) -> dict[str, Any]:
        seen.append(var_child_runnable_config.get())
        return {"n": 1}

    b = graph_of(S)
    b.add_node("look", look)
    b.add_edge(START, "look")
    b.add_edge("look", END)
    return tape.record(b.compile(), name="look", checkpointer=InMemorySaver()), seen


def test_a_recorded_run_puts_no_callback_handler_on_its_nodes(tape: graphtape.Tape) -> None:
    rec, seen = config_seen_by_a_node(tape)
    assert rec.invoke({}, {"configurable": {"thread_id": "t"}})["n"] == 1
    (config,) = seen
    assert config["callbacks"].handlers == []  # neither TaskCallbacks nor anything else of graphtape's
    assert [kind for kind, _, _ in task_rows(tape, rec.run_ids)] == ["task_started", "task_finished"]
    assert task_runner._RECORDERS == {}  # the run's recorder went with the run


def test_an_unrecorded_graph_runs_langgraphs_tasks_untouched(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapped: list[str] = []
    real = task_runner._recorded

    def spy(t: Any, recorders: Any) -> Any:
        wrapped.append(t.name)
        return real(t, recorders)

    monkeypatch.setattr(task_runner, "_recorded", spy)
    assert line(2).invoke({"n": 0}) == {"n": 2, "log": ["n0", "n1"]}
    assert wrapped == []
    rec = tape.record(line(2), name="line", checkpointer=InMemorySaver())
    assert rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}}) == {"n": 2, "log": ["n0", "n1"]}
    assert wrapped == ["n0", "n1"]
    assert line(2).invoke({"n": 0}) == {"n": 2, "log": ["n0", "n1"]}  # after the run: inert again
    assert wrapped == ["n0", "n1"]


def test_a_recorded_graph_inside_a_node_is_recorded_by_the_enclosing_run_too(tape: graphtape.Tape) -> None:
    """As before: the enclosing run's callback handler was inherited by everything inside its task."""
    inner = tape.record(line(2), name="inner", checkpointer=InMemorySaver())

    def outer_node(s: S) -> dict[str, Any]:
        inner.invoke({"n": 10}, {"configurable": {"thread_id": "inner"}})
        return {"log": ["outer"]}

    b = graph_of(S)
    b.add_node("o", outer_node)
    b.add_edge(START, "o")
    b.add_edge("o", END)
    outer = tape.record(b.compile(), name="outer", checkpointer=InMemorySaver())
    outer.invoke({}, {"configurable": {"thread_id": "outer"}})

    def started(rec: Any) -> list[str]:
        return [d["node_path"] for k, _, d in task_rows(tape, rec.run_ids) if k == "task_started"]

    assert started(inner) == ["n0", "n1"]
    assert started(outer) == ["o", "n0", "n1"]


def test_a_recording_error_does_not_fail_the_graph(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: TaskRecorder, *args: Any) -> Any:
        raise KeyError("recording broke")

    monkeypatch.setattr(TaskRecorder, "opened", broken)
    rec = tape.record(line(2), name="line", checkpointer=InMemorySaver())
    with caplog.at_level("WARNING", logger="graphtape.record.tasks"):
        assert rec.invoke({"n": 0}, {"configurable": {"thread_id": "t"}}) == {"n": 2, "log": ["n0", "n1"]}
    assert rec.last_status == "finished"
    assert "could not record a task" in caplog.text


class RecordingBroke(Exception):
    pass


@pytest.mark.parametrize("api", ["invoke", "ainvoke"])
@pytest.mark.parametrize("hook", ["finished", "failed"])
def test_an_error_of_an_attempts_end_is_logged_and_the_graph_goes_on(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, hook: str, api: str
) -> None:
    """The usual task (one recorder: task_runner._RecordedProc's direct path) as several recorders' loop."""

    def broken(self: TaskRecorder, *args: Any) -> Any:
        raise RecordingBroke(hook)

    monkeypatch.setattr(TaskRecorder, hook, broken)
    rec = tape.record(flaky_graph(1), name="flaky", checkpointer=InMemorySaver())  # fails once, then returns
    with caplog.at_level("WARNING", logger="graphtape.record.tasks"):
        run(rec, api, {}, "t")
    assert rec.last_status == "finished"
    assert f"could not record a task (task_{hook})" in caplog.text
    kinds = [kind for kind, _, _ in task_rows(tape, rec.run_ids)]
    assert kinds.count("task_started") == 2  # two attempts of flaky
    assert ("task_failed" in kinds) is (hook != "failed")


@pytest.mark.parametrize("api", ["invoke", "ainvoke"])
@pytest.mark.parametrize("hook", ["opened", "finished", "failed"])
def test_a_watching_recorders_error_stops_the_run(
    tape: graphtape.Tape, monkeypatch: pytest.MonkeyPatch, hook: str, api: str
) -> None:
    """As a strict replay's check or the debugger's stop does, from each hook of the one recorder of a task."""
    init = TaskRecorder.__init__

    def watching(self: TaskRecorder, session: Any) -> None:
        init(self, session)
        self.watching = True

    def broken(self: TaskRecorder, *args: Any) -> Any:
        raise RecordingBroke(hook)

    monkeypatch.setattr(TaskRecorder, "__init__", watching)
    monkeypatch.setattr(TaskRecorder, hook, broken)
    rec = tape.record(flaky_graph(1), name="flaky", checkpointer=InMemorySaver())
    with pytest.raises(RecordingBroke, match=hook):
        run(rec, api, {}, "t")


def test_a_task_copy_has_the_tasks_fields_but_the_one_replaced() -> None:
    """task_runner._copy_with (written out per class) is dataclasses.replace, sharing the same objects."""
    import dataclasses
    from collections import deque

    from langgraph.types import PregelExecutableTask

    fields = [f.name for f in dataclasses.fields(PregelExecutableTask)]
    values: list[Any] = [deque() if name == "writes" else object() for name in fields]
    task = PregelExecutableTask(*values)
    for name in ("proc", "config", "timeout"):
        value: Any = object()
        changed: dict[str, Any] = {name: value}
        copy = task_runner._copy_with(task, name, value)
        assert type(copy) is PregelExecutableTask and copy is not task
        for field in fields:
            assert getattr(copy, field) is (value if field == name else getattr(task, field))
        assert copy == dataclasses.replace(task, **changed)


def test_a_streamed_task_is_recorded_by_a_handler_on_its_own_run_only(tape: graphtape.Tape) -> None:
    """``astream_events`` streams each task: its output is seen by a TaskCallbacks not inherited inside it."""
    rec, seen = config_seen_by_a_node(tape)
    run(rec, "astream_events", {}, "t")
    (config,) = seen
    assert not any(isinstance(h, TaskCallbacks) for h in config["callbacks"].handlers)
    rows = task_rows(tape, rec.run_ids)
    assert [(k, d.get("writes")) for k, _, d in rows] == [("task_started", None), ("task_finished", {"n": 1})]


def test_uninstall_restores_langgraphs_runner_and_refuses_to_drop_a_later_wrapper() -> None:
    task_runner.install()
    ours = _runner.run_with_retry
    assert getattr(ours, "__graphtape_tasks__", False)
    try:
        graphtape.record.uninstall()
        assert not task_runner.installed()
        assert not getattr(_runner.run_with_retry, "__graphtape_tasks__", False)
        assert not getattr(_runner.arun_with_retry, "__graphtape_tasks__", False)
        task_runner.install()
        theirs = _runner.run_with_retry

        def someone_elses(*args: Any, **kwargs: Any) -> Any:
            return theirs(*args, **kwargs)

        _runner.run_with_retry = someone_elses
        with pytest.raises(PatchConflict, match="run_with_retry"):
            task_runner.uninstall()
        assert task_runner.installed() and _runner.arun_with_retry.__graphtape_tasks__  # type: ignore[attr-defined]
        _runner.run_with_retry = theirs
    finally:
        graphtape.record.install()
    assert task_runner.installed()
