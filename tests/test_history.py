"""``Tape.history``, ``Tape.state``, ``Tape.diff`` and ``Tape.label``: time travel over a tape."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from graphtape.debug.history import LABEL_SEQ_BASE, is_internal_channel
from graphtape.errors import RunNotFound
from tests import graphs
from tests.graphs import forbid


def cfg(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def branches(history):
    """The branch tree as nested ``(kind, thread, [runs], children)`` tuples."""

    def one(b):
        return (b.kind, b.thread_id, b.run_ids, [one(c) for c in b.children])

    return [one(b) for b in history.branches]


def comparable(snapshot_values: dict, ours: dict) -> dict:
    """LangGraph's snapshot values without reducer channels never written (``[]``, absent in the checkpoint)."""
    return {k: v for k, v in snapshot_values.items() if k in ours or v != []}


# ---------------------------------------------------------------------------
# history of a run
# ---------------------------------------------------------------------------


def test_history_of_a_run(tape):
    g = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    g.invoke({}, cfg("lin"))
    run_id = g.last_run_id
    h = tape.history(run_id)
    assert h.kind == "run" and h.run_id == run_id and h.thread_id == "lin" and h.source == "saver"
    assert [(e.step, e.source) for e in h] == [(-1, "input"), (0, "loop"), (1, "loop"), (2, "loop"), (3, "loop")]
    assert [e.writers for e in h] == [(), ("__start__",), ("start",), ("write",), ("rate",)]
    assert [e.next for e in h] == [("__start__",), ("start",), ("write",), ("rate",), None]
    calls = {e.step: [(c["kind"], c["name"], c["source"], c["node_path"]) for c in e.calls] for e in h}
    assert calls[1] == [("effect", "tests.graphs.clock", "live", "start")]
    assert calls[2] == [("llm", "graphtape-fake-test", "live", "write"), ("tool", "search", "live", "write")]
    assert calls[3] == [("llm", "graphtape-fake-test", "live", "rate"), ("effect", "send_mail", "live", "rate")]
    assert calls[-1] == calls[0] == []
    recorded_ids = {c.call_id for c in tape.calls(run_id)}
    assert {c["call_id"] for e in h for c in e.calls} == recorded_ids
    # linked like LangGraph links them
    assert h[0].parent_id is None
    assert all(h[i].parent_id == h[i - 1].checkpoint_id for i in range(1, len(h)))
    assert all(e.run_id == run_id and e.thread_id == "lin" and e.created_at for e in h)
    history_ids = [s.config["configurable"]["checkpoint_id"] for s in g.get_state_history(cfg("lin"))]
    assert [e.checkpoint_id for e in h] == history_ids[::-1]
    # by unique prefix too, and as JSON
    assert [e.checkpoint_id for e in tape.history(run_id[:8])] == history_ids[::-1]
    data = json.loads(json.dumps(h.to_dict()))
    assert data["entries"][2]["writers"] == ["start"] and data["branches"][0]["kind"] == "main"
    assert h.entry(h[2].checkpoint_id[:20]) is h[2]


def test_history_reads_no_checkpoint_body_or_value(tape, monkeypatch):
    g = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    g.invoke({}, cfg("lean"))
    from graphtape.runtime.saver import GraphtapeSaver

    def forbidden(*a, **k):
        raise AssertionError("a listing deserialised something")

    monkeypatch.setattr(GraphtapeSaver, "_tuple", forbidden)
    monkeypatch.setattr(GraphtapeSaver, "_load", forbidden)
    monkeypatch.setattr(type(tape.store), "get_blobs", forbidden)
    assert len(tape.history("lean")) == 5
    assert len(tape.history(g.last_run_id)) == 5


# ---------------------------------------------------------------------------
# history of a thread: runs, resumes, interrupts
# ---------------------------------------------------------------------------


def test_history_of_a_thread_across_interrupts_and_resumes(tape):
    g = tape.record(graphs.build_review(), checkpointer=tape.saver)
    g.invoke({}, cfg("rev"))
    first = g.last_run_id
    pending = g.get_state(cfg("rev")).interrupts
    g.invoke(Command(resume={i.id: "ok" for i in pending}), cfg("rev"))
    second = g.last_run_id
    g.invoke(Command(resume="publish"), cfg("rev"))
    third = g.last_run_id

    h = tape.history("rev")
    assert h.kind == "thread" and h.run_id is None
    assert [(e.step, e.run_id) for e in h] == [(-1, first), (0, first), (1, first), (2, second), (3, third)]
    # the first run stopped in step 2 (both reviews interrupted); the second finished them
    assert h[2].next == ("review_a", "review_b") or sorted(h[2].next) == ["review_a", "review_b"]
    assert sorted(h[3].writers) == ["review_a", "review_b"]
    assert h[4].writers == ("finish",)
    assert [c["kind"] for c in h[4].calls] == ["llm"]
    # one line of runs, in order
    assert branches(h) == [("main", "rev", [first, second, third], [])]
    run_h = tape.history(second)
    assert [e.step for e in run_h] == [2]
    assert sorted(run_h[0].writers) == ["review_a", "review_b"]
    assert run_h[0].next == ("finish",)


def test_a_step_finished_by_a_resume_counts_the_tasks_done_before_the_interrupt(tape):
    """Parallel tasks: one finishes in the first run, the other after the resume."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    class S(TypedDict, total=False):
        a: str
        b: str

    def fast(s):
        return {"a": "done"}

    def slow(s):
        return {"b": interrupt("ok?")}

    b = StateGraph(S)
    b.add_node(fast)
    b.add_node(slow)
    b.add_edge(START, "fast")
    b.add_edge(START, "slow")
    b.add_edge("fast", END)
    b.add_edge("slow", END)
    g = tape.record(b.compile(), checkpointer=tape.saver)
    g.invoke({}, cfg("par"))
    g.invoke(Command(resume="yes"), cfg("par"))
    last = tape.history("par")[-1]
    assert sorted(last.writers) == ["fast", "slow"]
    assert last.run_id == g.last_run_id


def _parallel_interrupt_graph():
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    class S(TypedDict, total=False):
        a: str
        b: str

    b = StateGraph(S)
    b.add_node("fast", lambda s: {"a": "done"})
    b.add_node("slow", lambda s: {"b": interrupt("ok?")})
    b.add_edge(START, "fast")
    b.add_edge(START, "slow")
    b.add_edge("fast", END)
    b.add_edge("slow", END)
    return b.compile()


def _run_scenarios(tape, prefix: str) -> list[str]:
    """Threads with one run (LLM calls and effects), interrupts answered across runs, a step finished by a
    resume, a subgraph, a fan-out, an agent with tool calls."""
    g = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    g.invoke({}, cfg(f"{prefix}-lin"))
    g = tape.record(graphs.build_review(), checkpointer=tape.saver)
    g.invoke({}, cfg(f"{prefix}-rev"))
    g.invoke(Command(resume={i.id: "ok" for i in g.get_state(cfg(f"{prefix}-rev")).interrupts}), cfg(f"{prefix}-rev"))
    g.invoke(Command(resume="publish"), cfg(f"{prefix}-rev"))
    g = tape.record(_parallel_interrupt_graph(), checkpointer=tape.saver)
    g.invoke({}, cfg(f"{prefix}-par"))
    g.invoke(Command(resume="yes"), cfg(f"{prefix}-par"))
    tape.record(graphs.build_subgraph_node(), checkpointer=tape.saver).invoke({"question": "q"}, cfg(f"{prefix}-sub"))
    tape.record(graphs.build_fanout(), checkpointer=tape.saver).invoke({}, cfg(f"{prefix}-fan"))
    tape.record(graphs.build_agent(), checkpointer=tape.saver).invoke(
        {"messages": [HumanMessage("find cats")]}, cfg(f"{prefix}-agent")
    )
    return [f"{prefix}-{name}" for name in ("lin", "rev", "par", "sub", "fan", "agent")]


def _shape(tape, thread: str, namespaces: bool) -> list[tuple]:
    """A history without its ids: what the stored writers and the task events must agree on."""
    h = tape.history(thread, namespaces=namespaces)
    runs = {r: i for i, r in enumerate(dict.fromkeys(e.run_id for e in h))}
    return [
        (
            runs[e.run_id],
            e.ns.split(":")[0],
            e.step,
            e.source,
            sorted(e.writers),
            None if e.next is None else sorted(e.next),
            sorted((c["kind"], c["name"], c["source"], c["node_path"], c.get("error", False)) for c in e.calls),
            e.within is not None,
        )
        for e in h
    ]


def test_stored_writers_agree_with_the_task_events(tape, monkeypatch):
    """graphtape's saver stores each checkpoint's writers; rows without them (written before schema v5, or
    outside a recorded run) are listed from the task events. Both give the same history."""
    from graphtape.runtime.saver import GraphtapeSaver

    stored = _run_scenarios(tape, "stored")
    for thread in stored:
        rows = tape.store.list_checkpoints(thread_id=thread)
        assert rows and all(r.writers is not None and r.calls is not None for r in rows if r.run_id is not None), thread
    with monkeypatch.context() as m:
        m.setattr(GraphtapeSaver, "_listed", staticmethod(lambda *a, **k: (None, None)))
        unknown = _run_scenarios(tape, "unknown")
    for thread in unknown:
        assert all(r.writers is None and r.calls is None for r in tape.store.list_checkpoints(thread_id=thread)), thread
    for a, b in zip(stored, unknown):
        assert _shape(tape, a, False) == _shape(tape, b, False), a
        # parallel subgraphs' checkpoints interleave differently in each recording
        assert sorted(_shape(tape, a, True), key=repr) == sorted(_shape(tape, b, True), key=repr), a
    # and what they agree on is right (see the tests above for each case)
    assert _shape(tape, "stored-par", False)[-1][4] == ["fast", "slow"]
    assert [row[4] for row in _shape(tape, "stored-lin", False)] == [[], ["__start__"], ["start"], ["write"], ["rate"]]
    kinds = {c[0] for thread in stored for row in _shape(tape, thread, True) for c in row[6]}
    assert kinds == {"llm", "tool", "effect"}


def test_a_finished_run_is_listed_without_reading_task_or_call_events(tape, monkeypatch):
    """Its rows carry their writers and calls; only labels are read from the events."""
    from graphtape.store.base import TapeStore

    g = tape.record(graphs.build_agent(), checkpointer=tape.saver)
    g.invoke({"messages": [HumanMessage("find cats")]}, cfg("lean-calls"))
    expected = [(e.writers, e.calls) for e in tape.history("lean-calls")]
    assert any(calls for _, calls in expected)
    asked: list[tuple[str, ...]] = []
    for cls in {TapeStore, type(tape.store)}:
        original = cls.listed_events

        def spy(self, run_ids, kinds, _original=original):
            asked.append(tuple(kinds))
            return _original(self, run_ids, kinds)

        monkeypatch.setattr(cls, "listed_events", spy)
    assert [(e.writers, e.calls) for e in tape.history("lean-calls")] == expected
    assert asked and all(set(kinds) <= {"label"} for kinds in asked), asked


@pytest.mark.parametrize("stored", [True, False], ids=["stored-writers", "from-events"])
def test_a_retried_task_is_a_writer_of_its_step(tape, stored, monkeypatch):
    if not stored:
        from graphtape.runtime.saver import GraphtapeSaver

        monkeypatch.setattr(GraphtapeSaver, "_listed", staticmethod(lambda *a, **k: (None, None)))
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import RetryPolicy

    class S(TypedDict, total=False):
        n: int

    attempts = []

    def flaky(s):
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("first attempt fails")
        return {"n": 1}

    b = StateGraph(S)
    b.add_node("flaky", flaky, retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.0, jitter=False))
    b.add_edge(START, "flaky")
    b.add_edge("flaky", END)
    tape.record(b.compile(), checkpointer=tape.saver).invoke({}, cfg("retry"))
    assert len(attempts) == 2
    assert [e.writers for e in tape.history("retry")] == [(), ("__start__",), ("flaky",)]


# ---------------------------------------------------------------------------
# subgraphs
# ---------------------------------------------------------------------------


def test_subgraph_checkpoints_under_their_namespace(tape):
    g = tape.record(graphs.build_subgraph_node(), checkpointer=tape.saver)
    g.invoke({"question": "q"}, cfg("sub"))
    root = tape.history("sub")
    assert [e.ns for e in root] == [""] * 4
    assert [e.writers for e in root] == [(), ("__start__",), ("sub",), ("outer",)]
    # the subgraph's LLM call happened in root step 1 (the "sub" task)
    assert [(c["name"], c["node_path"]) for c in root[2].calls] == [("graphtape-fake-test", "sub/inner")]

    full = tape.history("sub", namespaces=True)
    nested = [e for e in full if e.ns]
    assert len(full) == 7 and len(nested) == 3
    assert {e.ns.split(":")[0] for e in nested} == {"sub"}
    assert [(e.step, e.source) for e in nested] == [(-1, "input"), (0, "loop"), (1, "loop")]
    assert nested[-1].writers == ("sub/inner",)
    assert [c["node_path"] for c in nested[-1].calls] == ["sub/inner"]
    producer = next(e for e in full if e.ns == "" and e.writers == ("sub",))
    assert all(e.within == producer.checkpoint_id for e in nested)
    # the state inside the subgraph
    assert set(tape.state(nested[-1].checkpoint_id)) == {"question", "answer"}


def test_send_fan_out_writers_and_namespaces(tape):
    g = tape.record(graphs.build_fanout(), checkpointer=tape.saver)
    g.invoke({}, cfg("fan"))
    h = tape.history("fan")
    assert sorted(h[3].writers) == ["side", "worker"]
    assert len([c for c in h[3].calls if c["kind"] == "llm"]) == 4  # three workers and the side branch
    full = tape.history("fan", namespaces=True)
    assert len({e.ns for e in full if e.ns}) == 3


# ---------------------------------------------------------------------------
# branches: replays, forks, labels
# ---------------------------------------------------------------------------


def test_replays_are_branches_of_the_run_they_replay(tape):
    g = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    g.invoke({}, cfg("orig"))
    run_id = g.last_run_id
    cps = [e.checkpoint_id for e in tape.history(run_id)]
    with forbid():
        whole = tape.replay(run_id, graphs.build_linear(), mode="strict")
    partial = tape.replay(run_id, graphs.build_linear(), mode="flight", from_checkpoint=cps[2])
    assert whole.status == partial.status == "finished"

    h = tape.history("orig")
    (main,) = h.branches
    assert main.kind == "main" and main.run_ids == [run_id]
    kids = {c.id: c for c in main.children}
    assert set(kids) == {whole.run_id, partial.run_id}
    assert kids[whole.run_id].kind == "replay" and kids[whole.run_id].thread_id == whole.thread_id
    assert kids[whole.run_id].from_run == run_id and kids[whole.run_id].from_checkpoint is None
    assert kids[partial.run_id].from_checkpoint == cps[2]
    assert h.runs[whole.run_id].replay_of == run_id and h.runs[whole.run_id].mode == "strict"

    # the replay's own thread: the copied checkpoint, then the replayed steps
    rh = tape.history(partial.thread_id)
    assert rh[0].checkpoint_id == cps[2] and rh[0].copied_from == cps[2] and rh[0].run_id is None
    assert [e.writers for e in rh[1:]] == [("write",), ("rate",)]
    assert rh.branches[0].from_checkpoint == cps[2]


def test_forks_in_the_same_thread(tape):
    g = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    g.invoke({}, cfg("tt"))
    first = g.last_run_id
    snaps = {s.metadata["step"]: s for s in g.get_state_history(cfg("tt"))}
    # LangGraph time travel: invoke from an earlier checkpoint
    g.invoke(None, snaps[1].config)
    travel = g.last_run_id
    # update_state on an earlier checkpoint, then continue from the edit
    edited = g.update_state(snaps[2].config, {"draft": "edited"})
    g.invoke(None, edited)
    after_edit = g.last_run_id

    h = tape.history("tt")
    (main,) = h.branches
    assert main.run_ids == [first]
    forks = {c.id: c for c in main.children}
    assert set(forks) == {travel, after_edit}
    assert forks[travel].kind == "fork"
    assert forks[travel].from_checkpoint == snaps[1].config["configurable"]["checkpoint_id"]
    assert forks[travel].via == []
    edit = forks[after_edit]
    assert edit.kind == "fork" and edit.from_checkpoint == snaps[2].config["configurable"]["checkpoint_id"]
    assert edit.via == [edited["configurable"]["checkpoint_id"]]
    update = h.entry(edited["configurable"]["checkpoint_id"])
    assert update.source == "update" and update.run_id is None
    assert tape.state(update.checkpoint_id)["draft"] == "edited"
    # the time-travel run starts with LangGraph's fork checkpoint
    assert next(e.source for e in h if e.run_id == travel) == "fork"


def test_a_run_continuing_a_fork_stays_on_the_fork(tape):
    g = tape.record(graphs.build_review(), checkpointer=tape.saver)
    g.invoke({}, cfg("fr"))
    first = g.last_run_id
    snaps = {s.metadata["step"]: s for s in g.get_state_history(cfg("fr"))}
    edited = g.update_state(snaps[1].config, {"draft": "edited"})
    g.invoke(None, edited)  # stops at the review interrupts again
    fork_run = g.last_run_id
    pending = g.get_state(cfg("fr")).interrupts
    g.invoke(Command(resume={i.id: "ok" for i in pending}), cfg("fr"))
    resumed = g.last_run_id
    (main,) = tape.history("fr").branches
    assert main.run_ids == [first]
    (fork,) = main.children
    assert fork.run_ids == [fork_run, resumed]


def test_labels_latest_wins_and_show_on_branches(tape):
    g = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    g.invoke({}, cfg("lab"))
    run_id = g.last_run_id
    replayed = tape.replay(run_id, graphs.build_linear(), mode="flight")
    tape.label(run_id, "baseline")
    tape.label(replayed.run_id, "try 1", note="first attempt")
    tape.label(replayed.run_id, "try 2", note="the prompt fix")
    h = tape.history("lab")
    (main,) = h.branches
    assert (main.label, main.note) == ("baseline", None)
    (rep,) = main.children
    assert (rep.label, rep.note) == ("try 2", "the prompt fix")
    assert h.runs[replayed.run_id].label == "try 2"
    labels = tape.events(replayed.run_id, ["label"])
    assert [e.seq for e in labels] == [LABEL_SEQ_BASE, LABEL_SEQ_BASE + 1]
    tape.label(run_id[:8], None)  # cleared, by prefix
    assert tape.history(run_id).branches[0].label is None
    with pytest.raises(RunNotFound):
        tape.label("no-such-run", "x")


def test_labels_travel_with_an_export(tape, tmp_path):
    import graphtape

    g = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    g.invoke({}, cfg("exp"))
    tape.label(g.last_run_id, "keep", note="exported")
    tape.export_run(g.last_run_id, tmp_path / "run.jsonl")
    with graphtape.connect(f"sqlite:///{tmp_path}/other.db") as other:
        other.import_file(tmp_path / "run.jsonl")
        assert other.history("exp").branches[0].label == "keep"


# ---------------------------------------------------------------------------
# state and diff
# ---------------------------------------------------------------------------


def test_state_at_every_checkpoint_matches_langgraph(tape):
    g = tape.record(graphs.build_agent(), checkpointer=tape.saver)
    g.invoke({"messages": [HumanMessage("find cats")]}, cfg("agent"))
    for snap in g.get_state_history(cfg("agent")):
        ours = tape.state(snap.config["configurable"]["checkpoint_id"])
        assert ours == comparable(snap.values, ours)
        assert not any(is_internal_channel(k) for k in ours)
    last = tape.history("agent")[-1].checkpoint_id
    assert len(tape.state(last)["messages"]) == 4
    assert tape.state(last[:13], thread_id="agent") == tape.state(last)


def test_state_errors(tape):
    g = tape.record(graphs.build_linear(), checkpointer=tape.saver)
    g.invoke({}, cfg("err"))
    ids = [e.checkpoint_id for e in tape.history("err")]
    with pytest.raises(RunNotFound, match="at least 8"):
        tape.state(ids[0][:5])
    with pytest.raises(RunNotFound, match="ambiguous"):
        tape.state(ids[0][:8])  # ids made in the same second share their first 8 characters
    with pytest.raises(RunNotFound, match="no checkpoint"):
        tape.state("ffffffff-0000")
    with pytest.raises(RunNotFound, match="no checkpoint"):
        tape.state(ids[0], thread_id="other-thread")
    with pytest.raises(RunNotFound, match="no run or thread"):
        tape.history("nothing-like-this")


def test_a_foreign_saver_history_comes_from_the_tape_and_state_needs_the_graph(tape):
    mem = graphs.build_agent().copy(update={"checkpointer": InMemorySaver()})
    g = tape.record(mem)
    g.invoke({"messages": [HumanMessage("hi")]}, cfg("mem"))
    h = tape.history("mem")
    assert h.source == "events"
    assert [e.writers for e in h] == [(), ("__start__",), ("agent",), ("tools",), ("agent",)]
    assert [c["name"] for c in h[3].calls] == ["search"]
    last = h[-1].checkpoint_id
    with pytest.raises(RunNotFound, match="graph=compiled_graph"):
        tape.state(last)
    values = tape.state(last, graph=g)
    assert values == g.get_state(cfg("mem")).values
    assert tape.state(last, graph=mem) == values

    # the same graph on graphtape's saver lists the same history
    g2 = tape.record(graphs.build_agent(), checkpointer=tape.saver)
    g2.invoke({"messages": [HumanMessage("hi")]}, cfg("gt"))
    h2 = tape.history("gt")
    assert h2.source == "saver"
    assert [(e.step, e.source, e.writers, e.next) for e in h2] == [(e.step, e.source, e.writers, e.next) for e in h]


def test_diff_between_checkpoints_of_one_run(tape):
    g = tape.record(graphs.build_agent(), checkpointer=tape.saver)
    g.invoke({"messages": [HumanMessage("find cats")]}, cfg("d1"))
    h = tape.history("d1")
    d = tape.diff(h[1].checkpoint_id, h[-1].checkpoint_id)
    assert [(c.op, c.path) for c in d.changes] == [("appended", "messages")]
    assert len(d.changes[0].new) == 3
    lines = d.render().splitlines()
    assert lines[0] == "+ messages: appended 3 item(s)"
    assert lines[1].startswith("    [ai] → search(")
    assert lines[2].startswith("    [tool search] result for")
    assert d.a_label == h[1].checkpoint_id
    import jsonpatch

    assert jsonpatch.apply_patch(d.a_view, d.json_patch()) == d.b_view


def test_diff_across_runs_ignores_message_ids(tape):
    g = tape.record(graphs.build_agent(), checkpointer=tape.saver)
    g.invoke({"messages": [HumanMessage("find cats")]}, cfg("orig-agent"))
    with forbid():
        result = tape.replay(g.last_run_id, graphs.build_agent(), mode="strict")
    assert result.status == "finished"
    original_end = tape.history("orig-agent")[-1]
    replay_end = tape.history(result.thread_id)[-1]
    a = tape.state(original_end.checkpoint_id)["messages"]
    b = tape.state(replay_end.checkpoint_id)["messages"]
    assert [m.id for m in a] != [m.id for m in b]  # ids regenerate on every execution...
    d = tape.diff(original_end.checkpoint_id, replay_end.checkpoint_id)
    assert not d and d.json_patch() == []  # ...and the states are the same

    # a flight re-run with another model answers differently: a change, not an append
    changed = tape.replay(
        g.last_run_id, graphs.build_agent(graphs.RandomModel(prefix="new", tool_name="search")), mode="flight"
    )
    d = tape.diff(original_end.checkpoint_id, tape.history(changed.thread_id)[-1].checkpoint_id)
    assert d and all(c.path.startswith("messages[") for c in d.changes)


def test_turns_of_a_conversation_are_one_branch(tape):
    g = tape.record(graphs.build_agent(), checkpointer=tape.saver)
    runs = []
    for text in ("find cats", "and dogs?", "thanks"):
        g.invoke({"messages": [HumanMessage(text)]}, cfg("chat"))
        runs.append(g.last_run_id)
    h = tape.history("chat")
    assert branches(h) == [("main", "chat", runs, [])]
    inputs = [e for e in h if e.source == "input"]
    assert [e.run_id for e in inputs] == runs
    assert [e.writers for e in inputs] == [(), (), ()]
    # each turn's input checkpoint follows the previous turn's last one
    assert all(h.entry(e.parent_id).run_id == runs[i - 1] for i, e in enumerate(inputs) if i)
    last_turn = tape.history(runs[-1])
    assert [e.run_id for e in last_turn] == [runs[-1]] * len(last_turn)


def test_sql_stores_list_through_narrow_readers(tape, backend):
    """SQLite and PostgreSQL select only the listed columns; other stores use the public interface."""
    from graphtape.store.base import TapeStore

    narrow = type(tape.store).checkpoint_listing is not TapeStore.checkpoint_listing
    assert narrow is (backend in ("sqlite", "postgresql"))
