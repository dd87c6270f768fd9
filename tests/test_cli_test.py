"""``graphtape test`` (recorded runs replayed against the current code, for CI) and ``graphtape tapes prune``."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

import graphtape
from graphtape.cli import app
from graphtape.testing import live_call_counts, reset_live_calls

ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", "GRAPHTAPE_URL": ""}

APP = """
from langgraph.graph import END, START, MessagesState, StateGraph

from graphtape.testing import SeededChatModel

PROMPT = {prompt!r}


def build(prompt=PROMPT):
    model = SeededChatModel(seed=11)

    def agent(state):
        return {{"messages": [model.invoke([("system", prompt)] + state["messages"])]}}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    return g.compile()


graph = build()
"""

OLD_PROMPT = "Refund everything."
PROMPT = "Refund orders under 100 EUR."


@pytest.fixture(autouse=True)
def _isolate_imports(monkeypatch):
    """Graph loading adds to sys.path and sys.modules: undo it after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("tape_app"):
            del sys.modules[name]


def _record(tape: graphtape.Tape, prompt: str, question: str) -> str:
    ns: dict = {}
    exec(compile(APP.format(prompt=prompt), "<app>", "exec"), ns)
    recorded = tape.record(ns["graph"])
    recorded.invoke({"messages": [("human", question)]})
    return recorded.last_run_id


@pytest.fixture
def project(tmp_path):
    """The current code (tape_app.py) and a directory with a passing and a diverging tape."""
    (tmp_path / "tape_app.py").write_text(APP.format(prompt=PROMPT), encoding="utf-8")
    tapes = tmp_path / "tapes"
    (tapes / "prod").mkdir(parents=True)
    with graphtape.connect(f"sqlite:///{tmp_path / 'prod.db'}") as tape:
        tape.export_run(_record(tape, PROMPT, "refund A-1"), tapes / "prod" / "good.jsonl")
        tape.export_run(_record(tape, OLD_PROMPT, "refund A-2"), tapes / "prod" / "stale.jsonl")
    (tapes / "notes.jsonl").write_text('{"not": "a tape"}\n', encoding="utf-8")  # ignored: no tape header
    return tmp_path


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env=ENV)


def test_a_diverging_tape_fails_the_run_with_a_table_a_diff_and_junit_xml(project):
    junit = project / "report.xml"
    reset_live_calls()
    result = cli(
        "test",
        str(project / "tapes"),
        "--graph",
        f"{project / 'tape_app.py'}:graph",
        "--junit-xml",
        str(junit),
        "--jobs",
        "2",
    )
    assert result.exit_code == 1, result.output
    assert sum(live_call_counts().values()) == 0  # strict: nothing reached the model
    out = result.output
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.startswith("prod/")}
    assert rows == {"prod/good.jsonl": "passed", "prod/stale.jsonl": "diverged"}
    assert f"-[system] {OLD_PROMPT}" in out and f"+[system] {PROMPT}" in out
    assert "1 passed, 1 diverged" in out

    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"prod/good.jsonl", "prod/stale.jsonl"}
    assert cases["prod/good.jsonl"].find("failure") is None
    failure = cases["prod/stale.jsonl"].find("failure")
    assert failure is not None and f"+[system] {PROMPT}" in (failure.text or "")
    assert "diverged" in failure.get("message", "")


def test_all_passing_exits_zero(project):
    (project / "tapes" / "prod" / "stale.jsonl").unlink()
    result = cli("test", str(project / "tapes"), "--graph", f"{project / 'tape_app.py'}:graph", "--json")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert (row["tape"], row["status"], row["runs"]) == ("prod/good.jsonl", "passed", 1)


def test_flight_mode_rerecords_what_changed_then_strict_passes(project):
    from graphtape.testing.normalize import normalize_export

    stale = project / "tapes" / "prod" / "stale.jsonl"
    stale.write_text(normalize_export(stale.read_text(encoding="utf-8")), encoding="utf-8")  # a cassette
    good = project / "tapes" / "prod" / "good.jsonl"
    good_before = good.read_bytes()
    reset_live_calls()
    result = cli("test", str(project / "tapes"), "--graph", f"{project / 'tape_app.py'}:graph", "--mode", "flight")
    assert result.exit_code == 0, result.output
    assert "re-recorded" in result.output
    assert sum(live_call_counts().values()) == 1  # only the changed call
    assert PROMPT in stale.read_text(encoding="utf-8") and OLD_PROMPT not in stale.read_text(encoding="utf-8")
    assert good.read_bytes() == good_before  # nothing changed: not rewritten
    rewritten = stale.read_text(encoding="utf-8")
    assert '"normalized":true' in rewritten.splitlines()[0] and normalize_export(rewritten) == rewritten
    again = cli("test", str(project / "tapes"), "--graph", f"{project / 'tape_app.py'}:graph")
    assert again.exit_code == 0, again.output


def test_a_store_url_is_replayed_without_changing_the_store(project):
    url = f"sqlite:///{project / 'prod.db'}"
    with graphtape.connect(url) as tape:
        before = [r.run_id for r in tape.runs(limit=None)]
    result = cli("test", url, "--graph", f"{project / 'tape_app.py'}:graph", "--json")
    assert result.exit_code == 1, result.output
    assert sorted(r["status"] for r in json.loads(result.output)) == ["diverged", "passed"]
    with graphtape.connect(url) as tape:
        assert [r.run_id for r in tape.runs(limit=None)] == before


def test_a_graph_that_fails_is_an_error_row(project, tmp_path):
    broken = tmp_path / "tape_app_broken.py"
    broken.write_text(
        APP.format(prompt=PROMPT).replace(
            'return {"messages"', 'raise RuntimeError("tool backend down")\n        return {"messages"'
        ),
        encoding="utf-8",
    )
    result = cli("test", str(project / "tapes" / "prod" / "good.jsonl"), "--graph", f"{broken}:graph", "--json")
    assert result.exit_code == 1, result.output
    [row] = json.loads(result.output)
    assert row["status"] == "errored" and "tool backend down" in row["message"]


def test_no_tapes_is_a_usage_error(tmp_path):
    (tmp_path / "tape_app.py").write_text(APP.format(prompt=PROMPT), encoding="utf-8")
    result = cli("test", str(tmp_path), "--graph", f"{tmp_path / 'tape_app.py'}:graph")
    assert result.exit_code == 2
    assert "no tape files" in result.output


def test_flight_mode_needs_files_not_a_store(project):
    result = cli(
        "test", f"sqlite:///{project / 'prod.db'}", "--graph", f"{project / 'tape_app.py'}:graph", "--mode", "flight"
    )
    assert result.exit_code == 2
    assert "rewrites tape files" in result.output


# -- tapes prune ------------------------------------------------------------------------------

TESTS = """
import pytest


@pytest.mark.graphtape
def test_kept():
    pass


@pytest.mark.graphtape
@pytest.mark.parametrize("model", ["a", "b"])
def test_param(model):
    pass


def test_unmarked():
    pass
"""


def test_prune_removes_tapes_no_collected_test_uses(project):
    suite = project / "suite"
    (suite / "tapes" / "test_mod").mkdir(parents=True)
    (suite / "tapes" / "test_deleted_module").mkdir(parents=True)
    (suite / "test_mod.py").write_text(TESTS, encoding="utf-8")
    tape = (project / "tapes" / "prod" / "good.jsonl").read_text(encoding="utf-8")
    kept = [suite / "tapes" / "test_mod" / n for n in ("test_kept.jsonl", "test_param[a].jsonl", "test_param[b].jsonl")]
    unused = [
        suite / "tapes" / "test_mod" / "test_renamed.jsonl",
        suite / "tapes" / "test_mod" / "test_unmarked.jsonl",
        suite / "tapes" / "test_deleted_module" / "test_x.jsonl",
    ]
    for p in kept + unused:
        p.write_text(tape, encoding="utf-8")
    exported = suite / "tapes" / "bug-1234.jsonl"  # not a cassette (not tapes/<module>/<test>.jsonl): never pruned
    exported.write_text(tape, encoding="utf-8")

    dry = cli("tapes", "prune", str(suite), "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert sorted(json.loads(dry.output)["unused"]) == sorted(str(p) for p in unused)
    assert all(p.exists() for p in kept + unused)

    result = cli("tapes", "prune", str(suite))
    assert result.exit_code == 0, result.output
    assert "3 unused tape(s) removed" in result.output
    assert all(p.exists() for p in kept) and exported.exists()
    assert not any(p.exists() for p in unused)
    assert not (suite / "tapes" / "test_deleted_module").exists()


def test_prune_removes_nothing_when_collection_fails(project):
    suite = project / "suite"
    (suite / "tapes" / "test_mod").mkdir(parents=True)
    (suite / "test_mod.py").write_text("import not_a_module_anywhere\n", encoding="utf-8")
    orphan = suite / "tapes" / "test_mod" / "test_x.jsonl"
    orphan.write_text((project / "tapes" / "prod" / "good.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    result = cli("tapes", "prune", str(suite))
    assert result.exit_code == 2
    assert "could not collect" in result.output and "nothing was removed" in result.output
    assert orphan.exists()


def test_cassette_paths_are_derived_from_node_ids():
    from graphtape.testing.cassette import tape_path

    assert tape_path(Path("t/test_a.py"), "t/test_a.py::test_x") == Path("t/tapes/test_a/test_x.jsonl")
    assert tape_path(Path("t/test_a.py"), "t/test_a.py::TestC::test_y[gpt-4/o mini]") == Path(
        "t/tapes/test_a/TestC.test_y[gpt-4_o_mini].jsonl"
    )
