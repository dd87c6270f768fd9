"""``graphtape fork``, ``override``, ``resume`` and ``debug`` through typer's CliRunner."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from graphtape.cli.app import app

ENV = {"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb", "GRAPHTAPE_URL": None}
GRAPH = "tests.graphs:build_linear"
REVIEW = "tests.graphs:build_review"


@pytest.fixture(autouse=True)
def _isolate(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def cli(store_url):
    runner = CliRunner()

    def run(*args: str, input: str | None = None):
        return runner.invoke(app, ["--url", store_url, *args], env=ENV, input=input)

    return run


@pytest.fixture
def recorded(cli):
    out = cli("run", GRAPH, "--input", '{"topic": ""}', "--thread", "t1", "--json")
    assert out.exit_code == 0, out.stdout + out.stderr
    return json.loads(out.stdout)["run_id"]


def events(store_url, run_id, kind):
    import graphtape

    tape = graphtape.connect(store_url)
    try:
        return [e.data for e in tape.events(run_id, [kind])]
    finally:
        tape.close()


def test_fork_with_set_and_errors(cli, store_url, recorded):
    cp = next(c["checkpoint_id"] for c in events(store_url, recorded, "checkpoint") if c["step"] == 1)
    out = cli("fork", cp, "-g", GRAPH, "--set", 'topic="dogs"', "--as-node", "start", "--allow-live-effects", "--json")
    assert out.exit_code == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["output"]["topic"] == "dogs"
    bad = cli("fork", cp, "-g", GRAPH, "--set", "nope=1")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "unknown state key 'nope'" in bad.stderr
    bad = cli("fork", cp, "-g", GRAPH, "--set", "topic=dogs")
    assert bad.exit_code == 2 and "strings need quotes" in bad.stderr
    bad = cli("fork", "ffffffff-nope", "-g", GRAPH)
    assert bad.exit_code == 2 and "no checkpoint" in bad.stderr


def test_override_and_strict_divergence_exit_code(cli, store_url, recorded):
    call = next(c["call_id"] for c in events(store_url, recorded, "llm_call") if c["node_path"] == "write")
    out = cli("override", recorded, call, "--output", '"NEW DRAFT"', "-g", GRAPH, "--allow-live-effects", "--json")
    assert out.exit_code == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["output"]["draft"].startswith("NEW DRAFT | ")
    strict = cli("override", recorded, call, "--output", '"NEW DRAFT"', "-g", GRAPH, "--mode", "strict")
    assert strict.exit_code == 1 and "diverged" in strict.stdout
    bad = cli("override", recorded, "zzzzzzzz", "--output", "1", "-g", GRAPH)
    assert bad.exit_code == 2 and "no call" in bad.stderr


def test_resume_by_value_and_by_id(cli, store_url):
    out = cli("run", REVIEW, "--input", "{}", "--thread", "h1", "--json")
    assert out.exit_code == 0, out.stdout + out.stderr
    run_id = json.loads(out.stdout)["run_id"]
    pending = events(store_url, run_id, "interrupt")
    assert len(pending) == 2
    single = cli("resume", "h1", "--value", '"x"', "-g", REVIEW)
    assert single.exit_code == 2 and "answer them by id" in single.stderr
    answers = json.dumps({p["interrupt_id"]: "fine" for p in pending})
    out = cli("resume", "h1", "--value", answers, "--by-id", "-g", REVIEW, "--json")
    assert out.exit_code == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["run"]["status"] == "interrupted"
    out = cli("resume", "h1", "--value", '"publish"', "-g", REVIEW, "--json")
    assert json.loads(out.stdout)["run"]["status"] == "finished"
    again = cli("resume", "h1", "--value", '"x"', "-g", REVIEW)
    assert again.exit_code == 2 and "no pending interrupt" in again.stderr


def test_debug_session_from_stdin(cli, recorded):
    script = 'state\nbc llm\nc\nreq\nuse "EDITED"\nstate\nc\nc\n'
    out = cli("debug", recorded, "-g", GRAPH, "-m", "flight", "--allow-live-effects", "-b", "write", input=script)
    assert out.exit_code == 0, out.stdout + out.stderr
    text = out.stdout
    assert "paused: before node write step 2" in text
    assert 'topic: "cats"' in text
    assert "paused: before llm call" in text and "[human] Write about cats" in text
    assert 'draft: "EDITED | result for EDITED' in text
    assert "paused: replay finished: finished" in text


def test_debug_strict_with_no_breakpoints_steps(cli, recorded):
    out = cli("debug", recorded, "-g", GRAPH, input="s\nq\n")
    assert out.exit_code == 0, out.stdout + out.stderr
    assert out.stdout.count("paused: super-step done") >= 2 and "stopped: replay run " in out.stdout


def _written(store_url):
    """Threads, checkpoints and runs the store holds."""
    import graphtape

    with graphtape.connect(store_url) as tape:
        checkpoints = tape.store.list_checkpoints()
        return ({c.thread_id for c in checkpoints}, len(checkpoints), len(tape.store.list_runs(limit=None)))


def test_a_rejected_fork_writes_nothing(cli, store_url, recorded):
    """An unknown key, a wrong type or an unknown --as-node is refused before the checkpoint is copied."""
    cp = next(c["checkpoint_id"] for c in events(store_url, recorded, "checkpoint") if c["step"] == 1)
    before = _written(store_url)
    for args, words in (
        (["--set", "nope=1"], "unknown state key 'nope'"),
        (["--set", "draft=[1, 2]"], "does not fit its type"),
        (["--set", 'topic="dogs"', "--as-node", "nowhere"], "unknown node 'nowhere'"),
    ):
        bad = cli("fork", cp, "-g", GRAPH, *args)
        assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and words in bad.stderr, bad.stderr
        assert _written(store_url) == before


AGENT = "tests.graphs:build_agent"


def test_debug_breakpoint_on_an_unknown_node_lists_the_nodes(cli, recorded):
    for args in (["-b", "wirte"], ["--break-after", "nowhere"]):
        out = cli("debug", recorded, "-g", GRAPH, *args, input="c\n")
        assert out.exit_code == 2 and out.stderr.count("\n") == 1, out.stdout + out.stderr
        assert "has no node" in out.stderr and "rate, start, write" in out.stderr


def test_quitting_the_debugger_stops_the_replay_quietly(cli, store_url, recorded, caplog):
    import graphtape

    for args in (["-b", "write"], ["--break-after", "start"], ["--break-call", "llm"]):
        out = cli("debug", recorded, "-g", GRAPH, *args, input="q\n")
        assert out.exit_code == 0, out.stdout + out.stderr
        assert "stopped: replay run " in out.stdout
        # no internal callback error (LangChain logs an exception raised in a callback handler)
        assert "Error in" not in out.stdout + out.stderr and "callback" not in caplog.text
        replay_id = out.stdout.split("stopped: replay run ")[1].split()[0]
        with graphtape.connect(store_url) as tape:
            run = tape.run(replay_id)
        assert run.status == "interrupted" and run.meta["stopped_by"] == "DebugStopped", args


def test_debug_state_and_req_render_messages_like_show(cli, store_url):
    out = cli("run", AGENT, "--input", '{"messages": [["human", "find cats"]]}', "--json")
    assert out.exit_code == 0, out.stdout + out.stderr
    run_id = json.loads(out.stdout)["run_id"]
    out = cli("debug", run_id, "-g", AGENT, "--break-call", "llm", input="req\nc\nstate\nq\n")
    assert out.exit_code == 0, out.stdout + out.stderr
    text = out.stdout
    assert "recorded answer:\n  [ai] → search(" in text
    assert "messages: 3 message(s)\n    [human] find cats\n    [ai] → search(" in text and "    [tool] " in text
    assert '"lc": 1' not in text and "additional_kwargs" not in text
