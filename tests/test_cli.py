"""The ``graphtape`` command line, driven through typer's CliRunner.

Every test uses a store in ``tmp_path`` (``--url``) and a small agent
written to ``tmp_path`` as a file, loaded the way a user would load theirs
(``cli_agent.py:graph``). Rich output is rendered at a fixed width without
colour so assertions on text are stable.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import graphtape
from graphtape.cli import app, main
from graphtape.errors import GraphLoadError
from graphtape.loading import load_graph

ENV = {"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb", "GRAPHTAPE_URL": None}

AGENT = '''
import operator
from typing import Annotated, TypedDict

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import graphtape
from graphtape.testing import SeededChatModel

PROMPT = "Write a joke about"
model = SeededChatModel(seed=7)


class State(TypedDict, total=False):
    topic: str
    joke: str
    approved: str
    log: Annotated[list, operator.add]


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"facts about {q}"


@graphtape.effect(name="notify")
def notify(text: str) -> str:
    return "sent"


def write(state):
    joke = model.invoke([HumanMessage(f"{PROMPT} {state['topic']}")]).content
    return {"joke": joke, "log": [lookup.invoke({"q": state["topic"]})]}


def review(state):
    answer = interrupt({"question": "approve this joke?"})
    return {"approved": str(answer)}


def send(state):
    return {"log": [notify(state["joke"])]}


def _builder(with_review):
    b = StateGraph(State)
    b.add_node(write)
    b.add_node(send)
    if with_review:
        b.add_node(review)
        b.add_edge("write", "review")
        b.add_edge("review", "send")
    else:
        b.add_edge("write", "send")
    b.add_edge(START, "write")
    b.add_edge("send", END)
    return b


graph = _builder(False).compile()
builder = _builder(False)


def build_review():
    return _builder(True).compile()
'''

ASYNC_AGENT = """
from typing import TypedDict

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph

from graphtape.testing import SeededChatModel

model = SeededChatModel(seed=3)


class State(TypedDict, total=False):
    q: str
    a: str


async def ask(state):
    return {"a": (await model.ainvoke([HumanMessage(state["q"])])).content}


b = StateGraph(State)
b.add_node(ask)
b.add_edge(START, "ask")
b.add_edge("ask", END)
graph = b.compile()
"""


@pytest.fixture(autouse=True)
def _isolate_imports(monkeypatch):
    """Graph loading adds to sys.path and sys.modules: undo it after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("cli_agent", "cli_async", "cli_broken", "cli_pkg")):
            del sys.modules[name]


@pytest.fixture
def agent(tmp_path) -> Path:
    path = tmp_path / "cli_agent.py"
    path.write_text(AGENT, encoding="utf-8")
    return path


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/t.db"


class Cli:
    def __init__(self, url: str):
        self.url = url
        self.runner = CliRunner()

    def __call__(self, *args: str, url: str | None = None):
        return self.runner.invoke(app, ["--url", url or self.url, *args], env=ENV)

    def ok(self, *args: str, url: str | None = None):
        result = self(*args, url=url)
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
        return result

    def json(self, *args: str, url: str | None = None):
        return json.loads(self.ok(*args, "--json", url=url).stdout)

    def record(self, agent: Path, attr: str = "graph", topic: str = "cats", *extra: str) -> str:
        out = self.json("run", f"{agent}:{attr}", "--input", json.dumps({"topic": topic}), *extra)
        return out["run_id"]


@pytest.fixture
def cli(url) -> Cli:
    return Cli(url)


def assert_one_line_error(result, code: int = 2) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stdout + result.stderr
    return lines[0]


# ---------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------


def test_run_records_a_run_and_prints_the_final_state(cli, agent):
    result = cli.ok("run", f"{agent}:graph", "--input", '{"topic": "cats"}', "--thread", "t-1")
    out = result.stdout
    assert "recorded run" in out and "finished" in out
    assert "thread t-1; 1 llm, 1 tool, 1 effect calls" in out
    assert "final state:" in out
    assert 'topic: "cats"' in out
    assert 'log: ["facts about cats", "sent"]' in out
    runs = cli.json("runs")
    assert len(runs) == 1 and runs[0]["thread_id"] == "t-1" and runs[0]["graph"] == f"{agent}:graph"
    assert runs[0]["run_id"] in out


def test_output_is_not_read_as_rich_markup(cli, agent, tmp_path):
    out = cli.ok("run", f"{agent}:graph", "--input", '{"topic": "[red]cats[/red]"}').stdout
    assert 'topic: "[red]cats[/red]"' in out
    chat = tmp_path / "cli_agent_chat.py"
    chat.write_text(
        "from typing import Annotated, TypedDict\n"
        "from langgraph.graph import StateGraph, START, END\n"
        "from langgraph.graph.message import add_messages\n"
        "from graphtape.testing import SeededChatModel\n"
        "m = SeededChatModel(seed=1)\n"
        "class S(TypedDict):\n    messages: Annotated[list, add_messages]\n"
        "def chat(s):\n    return {'messages': [m.invoke(s['messages'])]}\n"
        "b = StateGraph(S); b.add_node(chat); b.add_edge(START, 'chat'); b.add_edge('chat', END)\n"
        "graph = b.compile()\n"
    )
    out = cli.ok("run", f"{chat}:graph", "--input", '{"messages": [["human", "hi"]]}').stdout
    assert "messages: 2 messages, last [ai] " in out


def test_run_json_and_name(cli, agent):
    out = cli.json("run", f"{agent}:graph", "--input", '{"topic": "dogs"}', "--name", "jokes")
    assert out["status"] == "finished"
    assert out["graph"] == "jokes"
    assert out["output"]["topic"] == "dogs"
    assert out["output"]["log"] == ["facts about dogs", "sent"]
    assert (out["llm_calls"], out["tool_calls"], out["effect_calls"]) == (1, 1, 1)
    assert out["tokens"] > 0 and out["interrupts"] == []


def test_run_reads_input_from_a_file(cli, agent, tmp_path):
    (tmp_path / "in.json").write_text('{"topic": "owls"}')
    out = cli.json("run", f"{agent}:graph", "--input", f"@{tmp_path / 'in.json'}")
    assert out["output"]["topic"] == "owls"


def test_run_interrupt_then_resume(cli, agent):
    first = cli.ok("run", f"{agent}:build_review", "--input", '{"topic": "cats"}', "--thread", "t1")
    assert "interrupted" in first.stdout
    assert 'waiting for input: {"question": "approve this joke?"}' in first.stdout
    assert "--thread t1 --resume" in first.stdout
    second = cli.json("run", f"{agent}:build_review", "--resume", '"yes"', "--thread", "t1")
    assert second["status"] == "finished"
    assert second["output"]["approved"] == "yes"
    shown = cli.ok("show", second["run_id"]).stdout
    assert 'resumed with "yes"' in shown
    assert 'Command(resume="yes")' in shown
    # the thread is finished now: nothing to resume
    line = assert_one_line_error(cli("run", f"{agent}:build_review", "--resume", '"again"', "--thread", "t1"))
    assert "is finished, not interrupted" in line
    # a strict replay of the resumed run replays the whole thread, answers included
    rep = cli.json("replay", second["run_id"][:8], "--graph", f"{agent}:build_review")
    assert rep["status"] == "finished" and len(rep["run_ids"]) == 2 and rep["live"] == 0
    assert rep["output_matches"] is True


def test_run_async_graph(cli, tmp_path):
    (tmp_path / "cli_async.py").write_text(ASYNC_AGENT)
    out = cli.json("run", f"{tmp_path / 'cli_async.py'}:graph", "--input", '{"q": "hi"}')
    assert out["status"] == "finished" and out["output"]["a"]
    rep = cli.json("replay", out["run_id"], "--graph", f"{tmp_path / 'cli_async.py'}:graph")
    assert rep["status"] == "finished" and rep["served"] == 1 and rep["live"] == 0


def test_run_module_spec_from_the_working_directory(cli, tmp_path, monkeypatch):
    pkg = tmp_path / "cli_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "agent.py").write_text(AGENT)
    monkeypatch.chdir(tmp_path)
    out = cli.json("run", "cli_pkg.agent:graph", "--input", '{"topic": "cats"}')
    assert out["status"] == "finished"


def test_a_graph_that_raises_is_recorded_as_failed(cli, agent):
    result = cli("run", f"{agent}:graph", "--input", "{}")  # no topic: the node raises KeyError
    line = assert_one_line_error(result, code=1)
    assert "the graph raised KeyError" in line and "recorded as failed run" in line
    assert "failed" in result.stdout
    runs = cli.json("runs", "--status", "failed")
    assert len(runs) == 1 and "KeyError" in runs[0]["error"]
    shown = cli.ok("show", runs[0]["run_id"]).stdout
    assert "run failed: KeyError" in shown
    assert "failed: KeyError" in shown  # on the node task too


# ---------------------------------------------------------------------------
# runs / show
# ---------------------------------------------------------------------------


def test_runs_table_filters_and_json(cli, agent):
    a = cli.record(agent, "graph", "cats", "--thread", "ta")
    b = cli.record(agent, "graph", "dogs", "--thread", "tb")
    wide = CliRunner().invoke(app, ["--url", cli.url, "runs"], env={**ENV, "COLUMNS": "160"})
    header = wide.stdout.splitlines()[0]
    for col in ("id", "graph", "thread", "status", "mode", "started", "duration", "calls", "tokens", "replay of"):
        assert col in header
    table = cli.ok("runs").stdout
    assert a[:8] in table and b[:8] in table
    assert a not in table  # short ids in the table
    assert "1/1/1" in table and "record" in table and "finished" in table
    assert table.index(b[:8]) < table.index(a[:8])  # newest first
    rows = cli.json("runs")
    assert [r["run_id"] for r in rows] == [b, a]
    assert rows[0]["duration"] is not None and rows[0]["calls"] == 3
    assert [r["run_id"] for r in cli.json("runs", "--thread", "ta")] == [a]
    assert [r["run_id"] for r in cli.json("runs", "--limit", "1")] == [b]
    assert cli.json("runs", "--status", "diverged") == []
    assert "no runs with status 'diverged'" in cli.ok("runs", "--status", "diverged").stdout


def test_runs_on_an_empty_store(cli, url):
    graphtape.connect(url).close()  # created, nothing recorded (a missing store is an error: test_store_open.py)
    assert "no runs in" in cli.ok("runs").stdout
    assert cli.json("runs") == []


def test_runs_narrow_terminal_keeps_the_table_on_one_line_per_run(cli, agent):
    rid = cli.record(agent)
    result = CliRunner().invoke(app, ["--url", cli.url, "runs"], env={**ENV, "COLUMNS": "70"})
    assert result.exit_code == 0
    lines = [ln for ln in result.stdout.splitlines() if rid[:8] in ln]
    assert len(lines) == 1 and len(lines[0]) <= 70


def test_show_renders_steps_tasks_and_calls(cli, agent):
    rid = cli.record(agent)
    out = cli.ok("show", rid[:6]).stdout  # a prefix is enough
    assert f"run {rid}" in out and f"{agent}:graph" in out and "finished" in out
    assert 'input     {"topic": "cats"}' in out
    assert "versions" in out and "langgraph" in out
    assert "step 1" in out and "step 2" in out
    assert "├── write" in out or "└── write" in out
    calls = {e["kind"]: e["data"]["call_id"] for e in cli.json("show", rid)["events"] if e["kind"].endswith("_call")}
    assert set(calls) == {"llm_call", "tool_call", "effect_call"}
    # each call with the short id that `graphtape override RUN CALL` takes
    assert f"llm graphtape-fake-1  #{calls['llm_call'][:8]}  live" in out
    assert f"tool lookup  #{calls['tool_call'][:8]}  live" in out and "facts about cats" in out
    assert f"effect notify  #{calls['effect_call'][:8]}  live" in out and "sent" in out
    assert "checkpoint " in out and "(loop)" in out
    assert "run finished" in out and 'topic: "cats"' in out
    # the llm line shows the start of the answer
    joke = cli.json("show", rid)["output"]["joke"]
    assert " tok " in out
    assert joke[:30] in out


def test_show_says_served_and_live_only_for_replays_and_why_a_cost_is_unknown(cli, tmp_path):
    source = AGENT.replace("SeededChatModel(seed=7)", 'SeededChatModel(seed=7, model_name="house-model-7")')
    assert source != AGENT
    path = tmp_path / "house_agent.py"
    path.write_text(source, encoding="utf-8")
    rid = cli.record(path)
    out = " ".join(cli.ok("show", rid).stdout.replace("│", " ").split())  # rich folds long lines: read it as one
    assert "calls 1 llm · 1 tool · 1 effect tokens " in out and " served, " not in out
    assert "cost – (No price known for model house-model-7 when the call was recorded." in out
    assert 'graphtape.connect(url, prices={"model-name":' in out
    replay = cli.json("replay", rid, "--graph", f"{path}:graph")
    out = " ".join(cli.ok("show", replay["run_id"]).stdout.replace("│", " ").split())
    assert "1 llm · 1 tool · 1 effect (3 served, 0 live)" in out


def test_show_json(cli, agent):
    rid = cli.record(agent)
    out = cli.json("show", rid)
    assert out["run"]["run_id"] == rid and out["run"]["status"] == "finished"
    assert out["input"] == {"topic": "cats"}
    assert out["output"]["log"] == ["facts about cats", "sent"]
    kinds = [e["kind"] for e in out["events"]]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert {"llm_call", "tool_call", "effect_call", "task_started", "checkpoint"} <= set(kinds)


# ---------------------------------------------------------------------------
# replay
# ---------------------------------------------------------------------------


def test_replay_strict_serves_everything(cli, agent):
    rid = cli.record(agent)
    result = cli.ok("replay", rid, "--graph", f"{agent}:graph")
    out = result.stdout
    assert "replay (strict)" in out and "finished" in out
    assert "3 served from tape, 0 live" in out
    assert "matches the recording" in out
    data = cli.json("replay", rid[:8], "--graph", f"{agent}:graph")
    assert data["status"] == "finished" and data["replay_of"] == rid
    assert (data["served"], data["live"], data["unused"]) == (3, 0, 0)
    assert data["tokens_saved"] > 0 and data["divergence"] is None
    runs = cli.json("runs")
    replays = [r for r in runs if r["replay_of"] == rid]
    assert len(replays) == 2 and {r["mode"] for r in replays} == {"strict"}
    table = cli.ok("runs").stdout
    assert "strict" in table and rid[:8] in table
    shown = cli.ok("show", data["run_id"]).stdout
    assert re.search(r"llm graphtape-fake-1  #\w{8}  tape", shown) and "saved" in shown


def test_replay_diverges_after_a_prompt_edit(cli, agent):
    rid = cli.record(agent)
    agent.write_text(AGENT.replace("Write a joke about", "Write a PUN about"))
    result = cli("replay", rid, "--graph", f"{agent}:graph")
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    out = result.stdout
    assert "diverged" in out
    assert f"replay of run {rid} diverged at llm call #0 in node write" in " ".join(out.split())
    assert "--- recorded" in out and "+++ current" in out
    assert "-[human] Write a joke about cats" in out
    assert "+[human] Write a PUN about cats" in out
    data = cli("replay", rid, "--graph", f"{agent}:graph", "--json")
    assert data.exit_code == 1
    body = json.loads(data.stdout)
    assert body["status"] == "diverged"
    assert "+[human] Write a PUN about cats" in body["divergence"]["diff"]
    # the diverged replay is on the tape and shows its divergence
    diverged = [r for r in cli.json("runs", "--status", "diverged")]
    assert diverged and diverged[0]["replay_of"] == rid
    shown = cli.ok("show", diverged[0]["run_id"]).stdout
    assert "divergence at llm graphtape-fake-1 in node write" in shown
    assert "+[human] Write a PUN about cats" in shown


def test_replay_flight_runs_only_the_changed_call_live(cli, agent):
    rid = cli.record(agent)
    agent.write_text(AGENT.replace("Write a joke about", "Write a PUN about"))
    out = cli.ok("replay", rid, "--graph", f"{agent}:graph", "--mode", "flight").stdout
    assert "replay (flight)" in out and "finished" in out
    assert "2 served from tape, 1 live" in out
    assert "spent live" in out
    data = cli.json("replay", rid, "--graph", f"{agent}:graph", "--mode", "flight")
    assert (data["served"], data["live"], data["unused"]) == (2, 1, 1)
    assert data["live_tokens"] > 0
    shown = cli.ok("show", data["run_id"]).stdout
    assert re.search(r"llm graphtape-fake-1  #\w{8}  live", shown)
    assert re.search(r"tool lookup  #\w{8}  tape", shown) and re.search(r"effect notify  #\w{8}  tape", shown)


def test_replay_flight_with_a_changed_effect_needs_permission(cli, agent):
    rid = cli.record(agent)
    agent.write_text(
        AGENT.replace('return {"log": [notify(state["joke"])]}', 'return {"log": [notify(state["joke"] + \'!\')]}')
    )
    blocked = cli("replay", rid, "--graph", f"{agent}:graph", "--mode", "flight", "--json")
    assert blocked.exit_code == 1
    body = json.loads(blocked.stdout)
    assert body["status"] == "failed" and "allow-live-effects" in body["error"]
    allowed = cli.json("replay", rid, "--graph", f"{agent}:graph", "--mode", "flight", "--allow-live-effects")
    assert allowed["status"] == "finished" and allowed["live"] == 1


def test_replay_from_a_checkpoint(cli, agent):
    rid = cli.record(agent)
    checkpoints = [
        e["data"] for e in cli.json("show", rid)["events"] if e["kind"] == "checkpoint" and not e["data"]["ns"]
    ]
    after_write = next(c["checkpoint_id"] for c in checkpoints if c["step"] == 1)
    out = cli.ok("replay", rid, "--graph", f"{agent}:graph", "--from-checkpoint", after_write[:16]).stdout
    assert f"checkpoint {after_write}" in out
    assert "1 served from tape, 0 live" in out  # only `send` ran again
    assert "matches the recording" in out
    line = assert_one_line_error(cli("replay", rid, "--graph", f"{agent}:graph", "-c", after_write[:8]))
    assert "ambiguous" in line
    line = assert_one_line_error(cli("replay", rid, "--graph", f"{agent}:graph", "-c", "nope"))
    assert "not one of the checkpoints" in line


def test_replay_explains_unused_calls(cli, agent):
    """Recorded calls a replay did not need are explained (before the start, or asked differently), not flagged."""
    rid = cli.record(agent)
    after_write = next(
        e["data"]["checkpoint_id"]
        for e in cli.json("show", rid)["events"]
        if e["kind"] == "checkpoint" and e["data"]["step"] == 1 and not e["data"]["ns"]
    )
    data = cli.json("replay", rid, "--graph", f"{agent}:graph", "-c", after_write)
    assert data["unused"] == 2 and data["unused_reasons"] == {"before_start": 2}
    out = " ".join(cli.ok("replay", rid, "--graph", f"{agent}:graph", "-c", after_write).stdout.split())
    assert "2 recorded call(s) not needed by this replay" in out
    assert "2: made before the checkpoint the replay started from" in out
    agent.write_text(AGENT.replace("Write a joke about", "Write a PUN about"))
    data = cli.json("replay", rid, "--graph", f"{agent}:graph", "--mode", "flight")
    assert data["unused"] == 1 and data["unused_reasons"] == {"replaced": 1}
    out = " ".join(cli.ok("replay", rid, "--graph", f"{agent}:graph", "--mode", "flight").stdout.split())
    assert "1: asked differently now" in out and "not asked for" not in out


def test_invalidate_from_on_the_command_line(cli, agent):
    rid = cli.record(agent)
    data = cli.json("invalidate-from", rid[:8], "send", "-g", f"{agent}:graph", "--allow-live-effects")
    assert data["status"] == "finished" and (data["served"], data["live"]) == (2, 1)
    assert data["unused_reasons"] == {"replaced": 1}
    assert cli.json("show", data["run_id"])["run"]["meta"]["invalidate_from"] == "send"
    line = assert_one_line_error(cli("invalidate-from", rid, "nowhere", "-g", f"{agent}:graph"))
    assert "no node 'nowhere'" in line and "send, write" in line
    # the effect in `send` is not re-sent without permission
    blocked = cli("invalidate-from", rid, "send", "-g", f"{agent}:graph", "--json")
    assert blocked.exit_code == 1 and "allow-live-effects" in json.loads(blocked.stdout)["error"]


def test_a_crashed_run_shows_its_real_call_counts(cli, agent, url):
    """A run whose process died has no counters on its row; runs and show count its call events."""
    from graphtape.store.base import WriteBatch

    rid = cli.record(agent)
    with graphtape.connect(url) as tape:
        tape.store.write(
            WriteBatch(run_updates=[(rid, {"status": "crashed", "llm_calls": 0, "tool_calls": 0, "effect_calls": 0})])
        )
    row = next(r for r in cli.json("runs") if r["run_id"] == rid)
    assert (row["llm_calls"], row["tool_calls"], row["effect_calls"], row["calls"]) == (1, 1, 1, 3)
    assert "1/1/1" in cli.ok("runs").stdout
    assert cli.json("show", rid)["run"]["calls"] == 3
    assert "1 llm · 1 tool · 1 effect" in cli.ok("show", rid).stdout


def test_readme_shell_examples_work_as_written(cli, agent, url, tmp_path, capsys, monkeypatch):
    """The README's export/import line runs as printed (in a fresh directory, GRAPHTAPE_URL set),
    and the README says how to get `graphtape` on the PATH after `make demo`."""
    import shlex

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert "source .venv/bin/activate" in readme and ".venv/bin/graphtape" in readme
    line = next(ln for ln in readme.splitlines() if ln.startswith("graphtape export <run>"))
    rid = cli.record(agent)
    monkeypatch.setenv("GRAPHTAPE_URL", url)
    monkeypatch.chdir(tmp_path)
    for command in line.split("#")[0].split("&&"):
        argv = [a.replace("<run>", rid[:8]) for a in shlex.split(command)]
        assert argv[0] == "graphtape"
        with pytest.raises(SystemExit) as exc:
            main(argv[1:])
        assert exc.value.code == 0, (argv, capsys.readouterr())
    into = next(a for a in shlex.split(line) if a.startswith("sqlite:///"))
    assert cli.json("show", rid, url=into)["run"]["run_id"] == rid


# ---------------------------------------------------------------------------
# export / import
# ---------------------------------------------------------------------------


def test_export_import_round_trip(cli, agent, tmp_path):
    rid = cli.record(agent)
    path = tmp_path / "run.jsonl"
    out = cli.ok("export", rid[:8], "-o", str(path)).stdout
    assert f"wrote run {rid} to" in " ".join(out.split()) and path.exists()
    other = f"sqlite:///{tmp_path}/other.db"
    imported = cli.ok("import", str(path), url=other).stdout
    assert "imported 1 run(s)" in imported and rid[:8] in imported
    assert cli.json("show", rid, url=other)["run"]["status"] == "finished"
    # re-exporting the imported run gives the same bytes
    again = tmp_path / "again.jsonl"
    info = cli.json("export", rid, "-o", str(again), url=other)
    assert info["runs"] == [rid] and info["lines"] > 0
    assert again.read_bytes() == path.read_bytes()
    # and the imported run replays in the other store
    assert cli.json("replay", rid, "--graph", f"{agent}:graph", url=other)["status"] == "finished"


def test_export_thread_and_import_json(cli, agent, tmp_path):
    first = cli.json("run", f"{agent}:build_review", "--input", '{"topic": "cats"}', "--thread", "conv")
    second = cli.json("run", f"{agent}:build_review", "--resume", "true", "--thread", "conv")
    path = tmp_path / "thread.jsonl"
    out = cli.ok("export", "--thread", "conv", "-o", str(path)).stdout
    assert "wrote 2 run(s) of thread conv" in out
    other = f"sqlite:///{tmp_path}/other.db"
    data = cli.json("import", str(path), url=other)
    assert data["imported"] == [first["run_id"], second["run_id"]]


def test_export_thread_with_a_string_interrupt(cli, tmp_path):
    path = tmp_path / "cli_agent_str.py"
    path.write_text(
        "from typing import TypedDict\n"
        "from langgraph.graph import StateGraph, START, END\n"
        "from langgraph.types import interrupt\n"
        "class S(TypedDict, total=False):\n    a: str\n"
        "def ask(s):\n    return {'a': interrupt('approve?')}\n"
        "b = StateGraph(S); b.add_node(ask); b.add_edge(START, 'ask'); b.add_edge('ask', END)\n"
        "graph = b.compile()\n"
    )
    cli.ok("run", f"{path}:graph", "--input", "{}", "--thread", "s")
    cli.ok("export", "--thread", "s", "-o", str(tmp_path / "s.jsonl"))


def test_export_needs_a_run_or_a_thread(cli, agent, tmp_path):
    rid = cli.record(agent)
    assert "give a RUN id or --thread" in assert_one_line_error(cli("export", "-o", str(tmp_path / "x.jsonl")))
    assert_one_line_error(cli("export", rid, "--thread", "t", "-o", str(tmp_path / "x.jsonl")))
    line = assert_one_line_error(cli("export", "--thread", "nope", "-o", str(tmp_path / "x.jsonl")))
    assert "no runs on thread 'nope'" in line
    assert not (tmp_path / "x.jsonl").exists()


# ---------------------------------------------------------------------------
# errors: one line on stderr, exit 2
# ---------------------------------------------------------------------------


def test_unknown_run(cli, agent):
    cli.record(agent)
    for command in (
        ["show", "deadbeef"],
        ["replay", "deadbeef", "--graph", f"{agent}:graph"],
        ["export", "deadbeef", "-o", "x.jsonl"],
    ):
        line = assert_one_line_error(cli(*command))
        assert "no run 'deadbeef'" in line and "graphtape runs" in line


def test_import_errors(cli, agent, tmp_path):
    assert "no such file" in assert_one_line_error(cli("import", str(tmp_path / "missing.jsonl")))
    bad = tmp_path / "binary.jsonl"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    assert "unreadable" in assert_one_line_error(cli("import", str(bad)))
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"hello": "world"}\n')
    assert "is not a graphtape tape" in assert_one_line_error(cli("import", str(foreign)))
    rid = cli.record(agent)
    path = tmp_path / "run.jsonl"
    cli.ok("export", rid, "-o", str(path))
    assert "already in" in assert_one_line_error(cli("import", str(path)))


def test_graph_load_errors(cli, agent, tmp_path):
    broken = tmp_path / "cli_broken.py"
    broken.write_text("import json\nraise RuntimeError('no API key configured')\n")
    line = assert_one_line_error(cli("run", f"{broken}:graph", "--input", "{}"))
    assert "importing cli_broken.py raised RuntimeError: no API key configured" in line
    line = assert_one_line_error(cli("run", f"{tmp_path / 'nope.py'}:graph", "--input", "{}"))
    assert "not found" in line
    line = assert_one_line_error(cli("run", "cli_no_such_module:graph", "--input", "{}"))
    assert "no module named 'cli_no_such_module'" in line
    line = assert_one_line_error(cli("run", f"{agent}:grpah", "--input", "{}"))
    assert "has no attribute 'grpah'" in line and "compiled graphs in it: graph" in line
    line = assert_one_line_error(cli("run", f"{agent}:model", "--input", "{}"))
    assert "SeededChatModel, not a compiled LangGraph graph" in line
    line = assert_one_line_error(cli("run", f"{agent}:builder", "--input", "{}"))
    assert "uncompiled StateGraph" in line
    line = assert_one_line_error(cli("run", "no-colon", "--input", "{}"))
    assert "module:attr" in line
    rid = cli.record(agent)
    assert "RuntimeError" in assert_one_line_error(cli("replay", rid, "--graph", f"{broken}:graph"))
    assert cli.json("runs")[0]["run_id"] == rid  # nothing was recorded by the failures


def test_bad_json_and_option_errors(cli, agent):
    line = assert_one_line_error(cli("run", f"{agent}:graph", "--input", "{topic: cats}"))
    assert "--input is not valid JSON" in line
    assert "--resume is not valid JSON" in assert_one_line_error(
        cli("run", f"{agent}:graph", "--resume", "yes", "--thread", "t")
    )
    assert "give --input" in assert_one_line_error(cli("run", f"{agent}:graph"))
    assert "not both" in assert_one_line_error(cli("run", f"{agent}:graph", "--input", "{}", "--resume", "1"))
    assert "--resume needs --thread" in assert_one_line_error(cli("run", f"{agent}:graph", "--resume", "1"))
    assert "no runs on thread 'zz'" in assert_one_line_error(
        cli("run", f"{agent}:graph", "--resume", "1", "--thread", "zz")
    )
    assert "unknown status 'bogus'" in assert_one_line_error(cli("runs", "--status", "bogus"))
    assert "unsupported store URL scheme" in assert_one_line_error(cli("runs", url="mysql://x/y"))
    assert cli.json("runs") == []


def test_default_store_comes_from_the_environment(agent, tmp_path):
    runner = CliRunner()
    env = {**ENV, "GRAPHTAPE_URL": f"sqlite:///{tmp_path}/env.db"}
    result = runner.invoke(app, ["run", f"{agent}:graph", "--input", '{"topic": "cats"}'], env=env)
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "env.db").exists()
    assert not (tmp_path / ".graphtape").exists()
    listed = runner.invoke(app, ["runs", "--json"], env=env)
    assert len(json.loads(listed.stdout)) == 1


# ---------------------------------------------------------------------------
# main(): the console script's exit codes
# ---------------------------------------------------------------------------


def test_main_exit_codes(url, agent, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")

    def run(*args: str) -> int:
        with pytest.raises(SystemExit) as exc:
            main(["--url", url, *args])
        return exc.value.code

    assert run("runs") == 2  # no store at the URL yet: said on one line, nothing created
    err = capsys.readouterr().err
    assert err.startswith("error: no tape store at") and err.count("\n") == 1
    graphtape.connect(url).close()
    assert run("runs") == 0
    assert "no runs" in capsys.readouterr().out
    assert run("show", "nope") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no run 'nope'") and err.count("\n") == 1
    assert run("run", f"{agent}:graph", "--input", '{"topic": "cats"}', "--json") == 0
    rid = json.loads(capsys.readouterr().out)["run_id"]
    agent.write_text(AGENT.replace("Write a joke about", "Write a PUN about"))
    assert run("replay", rid, "--graph", f"{agent}:graph") == 1
    assert "+[human] Write a PUN about cats" in capsys.readouterr().out
    assert run("replay", rid) == 2  # usage error: --graph missing
    err = capsys.readouterr().err
    assert "--graph" in err and err.startswith("error: ") and err.count("\n") == 1
    assert run("runs", "--limit", "abc") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Invalid value for '--limit'") and "(see 'graphtape runs -h')" in err
    assert err.count("\n") == 1
    assert run("history") == 2
    assert capsys.readouterr().err == "error: Missing argument 'RUN|THREAD'. (see 'graphtape history -h')\n"
    assert run("--version") == 0
    assert capsys.readouterr().out.startswith("graphtape ")


# ---------------------------------------------------------------------------
# load_graph
# ---------------------------------------------------------------------------


def test_load_graph_forms(agent, tmp_path, monkeypatch):
    from langgraph.pregel import Pregel

    assert isinstance(load_graph(f"{agent}:graph"), Pregel)
    assert isinstance(load_graph(f"{agent}:build_review"), Pregel)  # a factory
    monkeypatch.chdir(tmp_path)
    assert isinstance(load_graph("cli_agent:graph"), Pregel)  # module from the working directory
    (tmp_path / "cli_agent_factory.py").write_text(
        "def make():\n    raise ValueError('bad config')\n"
        "def other(x):\n    return x\n"
        "def none():\n    return None\n"
        "class Holder:\n    pass\n"
    )
    with pytest.raises(GraphLoadError, match=r"calling make\(\) raised ValueError: bad config"):
        load_graph("cli_agent_factory.py:make")
    with pytest.raises(GraphLoadError, match="function, not a compiled LangGraph graph"):
        load_graph("cli_agent_factory.py:other")
    with pytest.raises(GraphLoadError, match=r"none\(\) returned a NoneType"):
        load_graph("cli_agent_factory.py:none")
    with pytest.raises(GraphLoadError, match="'Holder' has no attribute 'graph'"):
        load_graph("cli_agent_factory.py:Holder.graph")
    with pytest.raises(GraphLoadError, match="is not a file"):
        load_graph(f"{tmp_path}/:graph")
    sys.modules.pop("cli_agent_factory", None)


def test_load_graph_never_replaces_another_module(agent, tmp_path):
    import json as json_module

    (tmp_path / "json.py").write_text(AGENT)
    graph = load_graph(f"{tmp_path / 'json.py'}:graph")
    assert graph.nodes and sys.modules["json"] is json_module
    assert "_graphtape_graph_json" in sys.modules
    del sys.modules["_graphtape_graph_json"]


def test_show_says_a_run_of_a_graph_without_checkpointer_had_a_thread_of_its_own(cli, agent, url):
    """Recorded through the API without a checkpointer, a call runs afresh; ``show`` names the caller's thread."""
    with graphtape.connect(url) as tape:
        recorded = tape.record(load_graph(f"{agent}:graph"))
        recorded.invoke({"topic": "cats"}, {"configurable": {"thread_id": "chat-7"}})
        rid, thread = recorded.last_run_id, tape.run(recorded.last_run_id).thread_id
    assert thread != "chat-7"
    out = " ".join(cli.ok("show", rid).stdout.replace("│", " ").split())  # (as one line: the row wraps)
    assert f"thread {thread} (its own: the graph has no checkpointer; called with thread_id chat-7)" in out
    # the CLI's own runs keep the thread they are given (``--resume`` continues it)
    assert cli.json("show", cli.record(agent, "graph", "dogs", "--thread", "tb"))["run"]["thread_id"] == "tb"
