"""Retention (``graphtape prune``) and ``graphtape recover`` from the command line.

Every test runs on each backend. Runs are made old by moving their
``ended_at`` back; the kept runs must still replay strictly (no live call)
after the others and their garbage are gone.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from typer.testing import CliRunner

from graphtape.cli import app
from graphtape.errors import GraphtapeError
from graphtape.runtime.retention import parse_duration, plan_prune, prune
from graphtape.store.base import EventRow, RunRecord, WriteBatch
from tests import graphs
from tests.graphs import forbid

DAY = 86400.0
ENV = {"COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb", "GRAPHTAPE_URL": None}


def record_linear(tape, thread: str) -> str:
    rec = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
    rec.invoke({"topic": ""}, {"configurable": {"thread_id": thread}})
    return rec.last_run_id


def age(tape, run_id: str, days: float) -> None:
    tape.store.write(WriteBatch(run_updates=[(run_id, {"ended_at": time.time() - days * DAY})]))


def run_ids(tape) -> set[str]:
    return {r.run_id for r in tape.store.list_runs(limit=None)}


def replays_strictly(tape, run_id: str, build=graphs.build_linear, **kw) -> None:
    with forbid():
        result = tape.replay(run_id, build(), **kw)
    assert result.status == "finished", (result.error, result.divergence)
    assert result.live == 0


def build_failing():
    def boom(s):
        raise RuntimeError("boom")

    b = StateGraph(graphs.Linear)
    b.add_node("boom", boom)
    b.add_edge(START, "boom")
    b.add_edge("boom", END)
    return b.compile()


def synthetic_run(
    tape,
    *,
    thread: str,
    status: str = "finished",
    started_days_ago: float = 40,
    meta: dict | None = None,
    replay_of: str | None = None,
    parent: str | None = None,
) -> str:
    rid = str(uuid.uuid4())
    started = time.time() - started_days_ago * DAY
    run = RunRecord(
        run_id=rid,
        thread_id=thread,
        graph="synthetic",
        status=status,
        started_at=started,
        ended_at=None if status == "running" else started + 1,
        meta=meta or {},
        replay_of=replay_of,
        parent_run_id=parent,
    )
    tape.store.write(WriteBatch(new_runs=[run], events=[EventRow(rid, 0, "run_started", started, {})]))
    return rid


# ---------------------------------------------------------------------------
# criteria
# ---------------------------------------------------------------------------


def test_prune_by_age_deletes_quiet_threads_and_their_checkpoints(tape):
    old_a1 = record_linear(tape, "a")
    old_a2 = record_linear(tape, "a")
    fresh = record_linear(tape, "b")
    age(tape, old_a1, 40)
    age(tape, old_a2, 35)
    assert tape.store.list_checkpoints(thread_id="a")

    plan = plan_prune(tape, older_than=30 * DAY)
    assert set(plan.run_ids) == {old_a1, old_a2}
    assert plan.threads == ["a"] and plan.kept == []

    result = prune(tape, plan)
    assert (result.runs, result.threads) == (2, 1) and not result.dry_run
    assert result.blobs > 0  # the payloads only thread a used
    assert run_ids(tape) == {fresh}
    assert tape.store.list_checkpoints(thread_id="a") == []
    assert tape.store.list_checkpoints(thread_id="b")
    # the payloads thread b shares with the deleted runs (config, versions...) survived
    replays_strictly(tape, fresh)


def test_prune_by_status(tape):
    ok = record_linear(tape, "ok")
    rec = tape.record(build_failing(), name="failing", checkpointer=tape.saver)
    with pytest.raises(RuntimeError):
        rec.invoke({"topic": ""}, {"configurable": {"thread_id": "bad"}})
    failed = rec.last_run_id
    assert tape.run(failed).status == "failed"

    result = tape.prune(statuses=["failed", "diverged"])
    assert result.run_ids == [failed] and result.threads == 1
    assert run_ids(tape) == {ok}
    assert tape.store.list_checkpoints(thread_id="bad") == []
    replays_strictly(tape, ok)


def test_keep_last_keeps_thread_history_unless_truncating(tape):
    runs = [record_linear(tape, "long") for _ in range(3)]
    other = record_linear(tape, "short")

    plan = plan_prune(tape, keep_last=1, truncate_threads=False)
    # a kept run replays its thread from the first run: nothing can go
    assert plan.delete == []
    assert {k.run.run_id for k in plan.kept} == set(runs[:2])
    assert all("earlier run of thread long" in k.reason and k.needed_by in runs for k in plan.kept)

    # keep_last implies truncation by default
    assert set(plan_prune(tape, keep_last=1).run_ids) == set(runs[:2])
    plan = plan_prune(tape, keep_last=1, truncate_threads=True)
    assert set(plan.run_ids) == set(runs[:2]) and plan.threads == []
    prune(tape, plan)
    assert run_ids(tape) == {runs[2], other}
    # the thread is untouched for LangGraph, and the kept run replays from its own checkpoints
    assert tape.store.list_checkpoints(thread_id="long")
    after_start = next(
        e.data["checkpoint_id"]
        for e in tape.events(runs[2], ["checkpoint"])
        if e.data["source"] == "loop" and not e.data["ns"]
    )
    replays_strictly(tape, runs[2], from_checkpoint=after_start)

    # keep_last=0 keeps nothing: every run goes, the replay just made included
    assert set(plan_prune(tape, keep_last=0).run_ids) == run_ids(tape)


def test_truncating_never_leaves_a_hole_in_a_thread(tape):
    first = synthetic_run(tape, thread="t", started_days_ago=50)
    middle = synthetic_run(tape, thread="t", started_days_ago=45, status="failed", parent=first)
    last = synthetic_run(tape, thread="t", started_days_ago=1, parent=middle)
    plan = plan_prune(tape, statuses=["failed"], truncate_threads=True)
    assert plan.delete == []
    assert [(k.run.run_id, k.reason) for k in plan.kept] == [(middle, "between kept runs of thread t")]
    plan = plan_prune(tape, older_than=30 * DAY, truncate_threads=True)
    assert set(plan.run_ids) == {first, middle}
    assert last not in plan.run_ids


# ---------------------------------------------------------------------------
# dependencies
# ---------------------------------------------------------------------------


def test_a_replay_keeps_its_original_and_shared_blobs_survive(tape):
    original = record_linear(tape, "orig")
    with forbid():
        replay = tape.replay(original, graphs.build_linear())
    other = record_linear(tape, "other")
    age(tape, original, 60)
    age(tape, other, 60)

    plan = plan_prune(tape, older_than=30 * DAY)
    assert plan.run_ids == [other]
    (kept,) = plan.kept
    assert kept.run.run_id == original and kept.needed_by == replay.run_id
    assert kept.reason.startswith("replayed by kept run")

    result = prune(tape, plan)
    assert result.runs == 1 and result.threads == 1
    assert run_ids(tape) == {original, replay.run_id}
    replays_strictly(tape, original)
    replays_strictly(tape, replay.run_id)


def test_a_later_run_keeps_the_earlier_runs_of_its_thread(tape):
    rec = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "hitl"}}
    rec.invoke({}, cfg)
    first = rec.last_run_id
    answers = {i.id: "ok" for i in rec.get_state(cfg).interrupts}
    rec.invoke(Command(resume=answers), cfg)
    second = rec.last_run_id
    rec.invoke(Command(resume="yes"), cfg)
    last = rec.last_run_id
    age(tape, first, 90)
    age(tape, second, 90)

    plan = plan_prune(tape, older_than=30 * DAY)
    assert plan.delete == []
    assert {k.run.run_id for k in plan.kept} == {first, second}
    result = prune(tape, plan)
    assert result.runs == 0 and run_ids(tape) == {first, second, last}
    replays_strictly(tape, last, graphs.build_review)


def test_a_recovery_keeps_the_run_it_recovers_and_running_runs_stay(tape):
    crashed = synthetic_run(tape, thread="c", status="crashed", started_days_ago=60)
    recovery = synthetic_run(tape, thread="c2", started_days_ago=1, meta={"recovers": crashed})
    running = synthetic_run(tape, thread="r", status="running", started_days_ago=60)
    plan = plan_prune(tape, older_than=30 * DAY)
    assert plan.delete == []
    reasons = {k.run.run_id: k.reason for k in plan.kept}
    assert reasons[crashed].startswith("recovered by kept run") and reasons[running].startswith("still running")
    assert recovery not in reasons
    # dependencies are followed to a fixpoint: the recovery is itself replayed
    replay = synthetic_run(tape, thread="rp", started_days_ago=0, replay_of=recovery)
    age(tape, recovery, 60)
    plan = plan_prune(tape, older_than=30 * DAY)
    assert plan.delete == [] and {k.run.run_id for k in plan.kept} == {crashed, recovery, running}
    tape.store.delete_runs([replay])
    assert set(plan_prune(tape, older_than=30 * DAY).run_ids) == {crashed, recovery}


def test_dry_run_deletes_nothing(tape):
    a = record_linear(tape, "a")
    age(tape, a, 40)
    before = (run_ids(tape), len(tape.store.list_checkpoints()))
    result = tape.prune(older_than=30 * DAY, dry_run=True)
    assert result.dry_run and result.runs == 1 and result.threads == 1 and result.run_ids == [a]
    assert result.blobs is None and result.plan is not None and result.plan.run_ids == [a]
    assert (run_ids(tape), len(tape.store.list_checkpoints())) == before
    replays_strictly(tape, a)


def test_prune_checks_the_plan_again_before_deleting(tape):
    a = record_linear(tape, "a")
    age(tape, a, 40)
    plan = plan_prune(tape, older_than=30 * DAY)
    assert plan.run_ids == [a]
    with forbid():
        tape.replay(a, graphs.build_linear())  # a new dependant since the plan was made
    result = prune(tape, plan)
    assert result.runs == 0 and a in run_ids(tape)
    assert result.threads == 0 and result.threads_skipped == ["a"]


def test_collecting_garbage_counts_chain_nodes(tape):
    rec = tape.record(graphs.build_agent(), name="agent", checkpointer=tape.saver)
    from langchain_core.messages import HumanMessage

    rec.invoke({"messages": [HumanMessage("hello there")]}, {"configurable": {"thread_id": "chat"}})
    age(tape, rec.last_run_id, 40)
    result = tape.prune(older_than=30 * DAY)
    assert result.runs == 1 and result.blobs > 0 and result.chain_nodes > 0
    assert tape.store.collect_garbage() == (0, 0)


def test_criteria_are_checked(tape):
    with pytest.raises(GraphtapeError, match="say what to prune"):
        plan_prune(tape)
    with pytest.raises(GraphtapeError, match="never pruned"):
        plan_prune(tape, statuses=["running"])
    with pytest.raises(GraphtapeError, match="unknown status 'nope'"):
        plan_prune(tape, statuses=["nope"])
    with pytest.raises(GraphtapeError, match="keep_last"):
        plan_prune(tape, keep_last=-1)
    with pytest.raises(GraphtapeError, match="older_than"):
        plan_prune(tape, older_than=-5)


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30d", 30 * DAY),
        ("12h", 43200),
        ("90m", 5400),
        ("45s", 45),
        ("2w", 14 * DAY),
        ("1.5h", 5400),
        ("600", 600),
        (" 7D ", 7 * DAY),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "d", "abc", "-3d", "10x", "infd", "nan"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------


class Cli:
    def __init__(self, url: str):
        self.url = url
        self.runner = CliRunner()

    def __call__(self, *args: str):
        return self.runner.invoke(app, ["--url", self.url, *args], env=ENV)

    def ok(self, *args: str, code: int = 0):
        result = self(*args)
        assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
        return result


def one_line_error(result, code: int = 2) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    return lines[0]


def test_cli_prune(tape, store_url):
    cli = Cli(store_url)
    old = record_linear(tape, "old")
    with forbid():
        replay = tape.replay(old, graphs.build_linear())
    gone = record_linear(tape, "gone")
    age(tape, old, 40)
    age(tape, gone, 40)

    out = cli.ok("prune", "--older-than", "30d", "--dry-run").stdout
    assert "would delete:" in out and gone[:8] in out
    assert "kept although they match:" in out and old[:8] in out and "replayed by kept run" in out
    flat = " ".join(out.split())  # the summary names the store's path: it may wrap at any width
    assert "dry run: would delete 1 run(s)" in flat and "nothing was deleted" in flat
    assert run_ids(tape) == {old, gone, replay.run_id}

    data = json.loads(cli.ok("prune", "--older-than", "30d", "--dry-run", "--json").stdout)
    assert data["dry_run"] and data["run_ids"] == [gone]
    assert data["plan"]["kept"][0]["run_id"] == old and data["plan"]["threads"] == ["gone"]

    data = json.loads(cli.ok("prune", "--older-than", "30d", "--json").stdout)
    assert not data["dry_run"] and data["runs"] == 1 and data["threads"] == 1 and data["blobs"] > 0
    assert run_ids(tape) == {old, replay.run_id}
    assert "nothing to prune" in cli.ok("prune", "--status", "failed,diverged").stdout
    # both left are finished: the replay goes, and then nothing needs its original
    out = cli.ok("prune", "--status", "finished").stdout
    assert "deleted 2 run(s)" in out and run_ids(tape) == set()


def test_cli_prune_deletes_with_a_summary(tape, store_url):
    a = record_linear(tape, "a")
    age(tape, a, 3)
    out = Cli(store_url).ok("prune", "--older-than", "2d").stdout
    assert "deleted:" in out and "deleted 1 run(s), 1 thread(s)' checkpoints" in out
    assert run_ids(tape) == set()


def test_cli_prune_errors(tape, store_url):  # tape: the store exists (a missing one is its own error)
    cli = Cli(store_url)
    assert "say what to prune" in one_line_error(cli("prune"))
    assert "--older-than: '3 days' is not a duration" in one_line_error(cli("prune", "--older-than", "3 days"))
    assert "never pruned" in one_line_error(cli("prune", "--status", "running"))
    assert "unknown status 'nope'" in one_line_error(cli("prune", "--status", "finished,nope"))
    assert "--keep-last must be 0 or more" in one_line_error(cli("prune", "--keep-last", "-2"))
    assert "--status names no status" in one_line_error(cli("prune", "--status", ","))


# ---------------------------------------------------------------------------
# recover from the command line
# ---------------------------------------------------------------------------

AGENT = """
from typing import TypedDict

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph

from graphtape.testing import SeededChatModel

model = SeededChatModel(seed=5)


class State(TypedDict, total=False):
    q: str
    a: str


def ask(state):
    return {"a": model.invoke([HumanMessage(state["q"])]).content}


b = StateGraph(State)
b.add_node(ask)
b.add_edge(START, "ask")
b.add_edge("ask", END)
graph = b.compile()
"""


@pytest.fixture
def agent_file(tmp_path, monkeypatch):
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    path = tmp_path / "ops_agent.py"
    path.write_text(AGENT, encoding="utf-8")
    yield path
    for name in set(sys.modules) - before:
        if name.startswith("ops_agent"):
            del sys.modules[name]


def orphan(tape, run_id: str) -> None:
    """Make a recorded run look like its process died before finishing."""
    tape.store.write(WriteBatch(run_updates=[(run_id, {"status": "running", "ended_at": None})]))


def test_cli_recover(tape, store_url, agent_file):
    from graphtape.loading import load_graph

    cli = Cli(store_url)
    spec = f"{agent_file}:graph"
    named = tape.record(load_graph(spec), name=spec, checkpointer=tape.saver)
    named.invoke({"q": "one"}, {"configurable": {"thread_id": "t1"}})
    first = named.last_run_id
    anonymous = tape.record(load_graph(spec), name="support-bot", checkpointer=tape.saver)
    anonymous.invoke({"q": "two"}, {"configurable": {"thread_id": "t2"}})
    second = anonymous.last_run_id
    assert "no orphaned runs" in cli.ok("recover", "--dry-run").stdout
    orphan(tape, first)
    orphan(tape, second)
    assert {r.run_id for r in tape.orphaned_runs()} == {first, second}

    out = cli.ok("recover", "--dry-run").stdout
    assert first[:8] in out and second[:8] in out and "needs --graph" in out and spec in out
    listed = json.loads(cli.ok("recover", "--dry-run", "--json").stdout)
    assert {(r["run_id"], r["needs_graph"]) for r in listed} == {(first, False), (second, True)}

    line = one_line_error(cli("recover"))
    assert "1 orphaned run(s) need --graph" in line and second[:8] in line and "'support-bot'" in line
    assert {r.run_id for r in tape.orphaned_runs()} == {first, second}  # nothing was recovered

    (done,) = json.loads(cli.ok("recover", "--run", first[:8], "--json").stdout)
    assert done["crashed_run_id"] == first and done["status"] == "finished" and done["error"] is None
    assert tape.run(first).status == "crashed" and tape.run(first).meta["recovered_by"] == done["run_id"]

    out = cli.ok("recover", "--graph", spec).stdout
    assert f"run {second[:8]} on thread t2: finished" in out
    assert tape.orphaned_runs() == []
    assert "no orphaned runs to recover" in cli.ok("recover").stdout


def test_cli_recover_errors(tape, store_url, agent_file):
    cli = Cli(store_url)
    rid = record_linear(tape, "done")
    assert "is finished, not orphaned" in one_line_error(cli("recover", "--run", rid))
    assert "no run 'zzzzzz'" in one_line_error(cli("recover", "--run", "zzzzzz"))
    busy = synthetic_run(tape, thread="busy", status="running", started_days_ago=0)
    assert tape.store.acquire_lease("thread:busy", "someone", ttl=60) is not None
    assert "is still running" in one_line_error(cli("recover", "--run", busy))
    orphan(tape, rid)
    assert "nope.py" in one_line_error(cli("recover", "--graph", f"{agent_file.parent}/nope.py:graph"))
