"""``graphtape history``, ``graphtape state`` and ``graphtape diff``, through typer's CliRunner.

Runs are recorded with the Python API into a store in ``tmp_path``; the
commands are then run the way a user would, rendered at a fixed width
without colour.
"""

from __future__ import annotations

import json
import sys

import jsonpatch
import pytest
from langchain_core.messages import HumanMessage
from typer.testing import CliRunner

import graphtape
from graphtape.cli import app
from tests import graphs
from tests.graphs import forbid

ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", "GRAPHTAPE_URL": None}

FOREIGN = """
import sqlite3
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    n: int
    note: str


def bump(state):
    return {"n": state.get("n", 0) + 1, "note": "bumped"}


b = StateGraph(State)
b.add_node(bump)
b.add_edge(START, "bump")
b.add_edge("bump", END)
graph = b.compile(checkpointer=SqliteSaver(sqlite3.connect(PATH, check_same_thread=False)))
"""


@pytest.fixture(autouse=True)
def _isolate_imports(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("cli_foreign"):
            del sys.modules[name]


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/t.db"


class Cli:
    def __init__(self, url: str):
        self.url = url
        self.runner = CliRunner()

    def __call__(self, *args: str):
        return self.runner.invoke(app, ["--url", self.url, *args], env=ENV)

    def ok(self, *args: str):
        result = self(*args)
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
        return result.stdout

    def json(self, *args: str):
        return json.loads(self.ok(*args, "--json"))


@pytest.fixture
def cli(url) -> Cli:
    return Cli(url)


def one_line_error(result, code: int = 2) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stdout + result.stderr
    return lines[0]


@pytest.fixture
def recorded(url):
    """An agent run with a strict replay and a label; the checkpoints of the run."""
    with graphtape.connect(url) as tape:
        g = tape.record(graphs.build_agent(), checkpointer=tape.saver)
        g.invoke({"messages": [HumanMessage("find cats")]}, {"configurable": {"thread_id": "t-agent"}})
        run_id = g.last_run_id
        with forbid():
            replayed = tape.replay(run_id, graphs.build_agent(), mode="strict")
        tape.label(replayed.run_id, "strict check", note="all served")
        ids = [e.checkpoint_id for e in tape.history(run_id)]
    return {"run": run_id, "replay": replayed, "ids": ids}


# ---------------------------------------------------------------------------
# history
# ---------------------------------------------------------------------------


def test_history_of_a_thread(cli, recorded):
    out = cli.ok("history", "t-agent")
    assert "history of thread t-agent" in out and "5 checkpoint(s)" in out
    for cid in recorded["ids"]:
        assert cid in out
    assert "__start__" in out
    assert "llm graphtape-fake-test  live  in agent" in out
    assert "tool search  live  in tools" in out
    assert f"replay {recorded['replay'].run_id[:8]}" in out
    assert "[strict check]  all served" in out
    assert f"graphtape history {recorded['replay'].thread_id}" in out


def test_history_last_n(cli, recorded):
    out = cli.ok("history", "t-agent", "--last", "2")
    assert "5 checkpoint(s), the newest 2 shown" in out
    assert "… 3 earlier checkpoint(s) not shown (--last)" in out
    shown = [cid for cid in recorded["ids"] if cid in out]
    assert shown == recorded["ids"][-2:]
    data = cli.json("history", "t-agent", "-n", "2")
    assert [e["checkpoint_id"] for e in data["entries"]] == recorded["ids"][-2:] and data["hidden"] == 3
    assert len(data["branches"]) == 1  # the branch tree stays whole
    assert "the newest" not in cli.ok("history", "t-agent", "--last", "50")
    bad = cli("history", "t-agent", "--last", "0")  # a usage error (one line through main(): test_cli.py)
    assert bad.exit_code == 2 and "greater than or equal to 1" in bad.stderr


def test_history_rows_are_whole_when_piped(tmp_path):
    """A terminal crops rows to its width; piped output (no COLUMNS) keeps every row whole."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class S(TypedDict, total=False):
        n: int

    node = "a_node_with_a_name_long_enough_that_an_eighty_column_row_would_crop_it"
    b = StateGraph(S)
    b.add_node(node, lambda s: {"n": 1})
    b.add_edge(START, node)
    b.add_edge(node, END)
    url = f"sqlite:///{tmp_path}/w.db"
    with graphtape.connect(url) as tape:
        tape.record(b.compile(), checkpointer=tape.saver).invoke({}, {"configurable": {"thread_id": "wide"}})
    piped = CliRunner().invoke(app, ["--url", url, "history", "wide"], env={**ENV, "COLUMNS": None})
    assert piped.exit_code == 0 and node in piped.stdout
    narrow = CliRunner().invoke(app, ["--url", url, "history", "wide"], env={**ENV, "COLUMNS": "80"})
    assert narrow.exit_code == 0 and node not in narrow.stdout and "…" in narrow.stdout


def test_history_of_a_run_as_json(cli, recorded):
    data = cli.json("history", recorded["run"][:8])
    assert data["kind"] == "run" and data["run_id"] == recorded["run"] and data["thread_id"] == "t-agent"
    assert [e["checkpoint_id"] for e in data["entries"]] == recorded["ids"]
    assert [e["writers"] for e in data["entries"]] == [[], ["__start__"], ["agent"], ["tools"], ["agent"]]
    assert [c["kind"] for c in data["entries"][2]["calls"]] == ["llm"]
    (main,) = data["branches"]
    (replay,) = main["children"]
    assert replay["kind"] == "replay" and replay["label"] == "strict check" and replay["note"] == "all served"
    text = cli.ok("history", recorded["run"])
    assert "◀" in text  # the run is marked in its branch


def test_history_with_subgraph_namespaces(cli, url):
    with graphtape.connect(url) as tape:
        tape.record(graphs.build_subgraph_node(), checkpointer=tape.saver).invoke(
            {"question": "q"}, {"configurable": {"thread_id": "t-sub"}}
        )
    plain = cli.ok("history", "t-sub")
    nested = cli.ok("history", "t-sub", "--namespaces")
    assert "sub/inner" not in plain.replace("in sub/inner", "")
    assert "with subgraphs" in nested and "7 checkpoint(s)" in nested
    assert "sub   -1  input" in nested and "sub/inner" in nested
    data = cli.json("history", "t-sub", "--namespaces")
    assert sum(1 for e in data["entries"] if e["ns"]) == 3


# ---------------------------------------------------------------------------
# state
# ---------------------------------------------------------------------------


def test_state_at_a_checkpoint(cli, recorded):
    last = recorded["ids"][-1]
    out = cli.ok("state", last)
    assert f"checkpoint {last}  thread t-agent  step 3 (loop)" in out
    assert "messages: 4 message(s)" in out
    assert "[human] find cats" in out and "[tool search] result for" in out
    data = cli.json("state", last[:20], "--thread", "t-agent")
    assert data["checkpoint_id"] == last and data["in_saver"] is True
    assert len(data["values"]["messages"]) == 4
    first = cli.json("state", recorded["ids"][0])
    assert first["values"] == {}


def test_state_errors_are_one_line(cli, recorded):
    assert "at least 8" in one_line_error(cli("state", "1f"))
    assert "no checkpoint" in one_line_error(cli("state", "ffffffff-ffff"))
    assert "ambiguous" in one_line_error(cli("state", recorded["ids"][0][:8]))
    assert "no checkpoint" in one_line_error(cli("state", recorded["ids"][0], "--thread", "elsewhere"))


def test_state_of_a_checkpoint_in_another_saver_needs_the_graph(cli, url, tmp_path):
    from graphtape.loading import load_graph

    module = tmp_path / "cli_foreign.py"
    module.write_text(FOREIGN.replace("PATH", repr(str(tmp_path / "lg.db"))), encoding="utf-8")
    spec = f"{module}:graph"
    with graphtape.connect(url) as tape:
        g = tape.record(load_graph(spec))  # (compiled with its own SqliteSaver)
        g.invoke({"n": 41}, {"configurable": {"thread_id": "t-foreign"}})
        last = tape.history("t-foreign")[-1].checkpoint_id
    out = cli.ok("history", "t-foreign")
    assert "from the tape" in out and "bump" in out
    line = one_line_error(cli("state", last))
    assert "graph's own checkpointer" in line and "--graph" in line
    data = cli.json("state", last, "--graph", spec)
    assert data["values"] == {"n": 42, "note": "bumped"} and data["in_saver"] is False
    first = cli.json("history", "t-foreign")["entries"][0]["checkpoint_id"]
    assert "+ n: 42" in cli.ok("diff", first, last, "--graph", spec)


# ---------------------------------------------------------------------------
# diff
# ---------------------------------------------------------------------------


def test_diff_readable_patch_and_json(cli, recorded):
    a, b = recorded["ids"][1], recorded["ids"][-1]
    out = cli.ok("diff", a, b)
    assert f"diff {a} (t-agent step 0) → {b} (t-agent step 3)" in out
    assert "+ messages: appended 3 item(s)" in out
    assert "    [ai] → search(" in out
    patch = json.loads(cli.ok("diff", a, b, "--patch"))
    data = cli.json("diff", a, b)
    assert data["a"]["checkpoint_id"] == a and data["equal"] is False
    assert [c["op"] for c in data["changes"]] == ["appended"]
    assert data["patch"] == patch
    from graphtape.debug.diff import json_view

    a_view, b_view = json_view(cli.json("state", a)["values"]), json_view(cli.json("state", b)["values"])
    assert jsonpatch.apply_patch(a_view, patch) == b_view
    assert all(op["path"].startswith("/messages/") for op in patch)


def test_diff_of_a_run_and_its_strict_replay_is_empty(cli, recorded):
    replay_last = cli.json("history", recorded["replay"].thread_id)["entries"][-1]["checkpoint_id"]
    out = cli.ok("diff", recorded["ids"][-1], replay_last)
    assert "no differences" in out
    assert json.loads(cli.ok("diff", recorded["ids"][-1], replay_last, "--patch")) == []


def test_history_and_diff_errors_are_one_line(cli, recorded):
    assert "no run or thread" in one_line_error(cli("history", "no-such-thing"))
    assert "no checkpoint" in one_line_error(cli("diff", recorded["ids"][0], "ffffffff-0000"))
    assert "at least 8" in one_line_error(cli("diff", "abc", recorded["ids"][0]))
    one_line_error(cli("state", recorded["ids"][0], "--graph", "missing_mod.py:g"))


def test_commands_are_listed(cli):
    out = CliRunner().invoke(app, ["--help"], env=ENV).stdout
    for name in ("history", "state", "diff"):
        assert name in out


def test_help_of_each_command(cli):
    for name in ("history", "state", "diff"):
        result = CliRunner().invoke(app, [name, "--help"], env=ENV)
        assert result.exit_code == 0 and "--json" in result.stdout
