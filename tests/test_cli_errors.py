"""Every CLI error is one readable line on stderr with a non-zero exit, never a traceback.

Driven through the console entry point ``main()``, as a shell runs it.
"""

from __future__ import annotations

import sqlite3

import pytest

import graphtape
from graphtape.cli import main
from tests import graphs

GRAPH = "tests.graphs:build_linear"


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")
    url = f"sqlite:///{tmp_path}/t.db"
    with graphtape.connect(url) as tape:
        agent = tape.record(graphs.build_linear())
        agent.invoke({"topic": ""}, {"configurable": {"thread_id": "t1"}})
        run_id = agent.last_run_id
        checkpoint = next(e.data["checkpoint_id"] for e in tape.events(run_id, ["checkpoint"]) if e.data["step"] == 1)
    conn = sqlite3.connect(tmp_path / "app.db")
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    (tmp_path / "bad.jsonl").write_text("not json\n", encoding="utf-8")
    (tmp_path / "run.jsonl").write_text("", encoding="utf-8")
    return url, run_id, checkpoint, tmp_path


def cases(url: str, run_id: str, checkpoint: str, tmp) -> list[list[str]]:
    u = ["--url", url]
    return [
        ["--url", f"sqlite:///{tmp}/missing/t.db", "runs"],
        ["--url", f"sqlite:///{tmp}/app.db", "show", run_id],
        ["--url", f"{url}?timeout=3", "runs"],
        ["--url", "ftp://example/t", "runs"],
        [*u, "show", "nope"],
        [*u, "runs", "--status", "nope"],
        [*u, "invalidate-from", run_id, "nowhere", "-g", GRAPH],
        [*u, "debug", run_id, "-g", GRAPH, "-b", "nowhere"],
        [*u, "fork", checkpoint, "-g", GRAPH, "--set", "nope=1"],
        [*u, "fork", checkpoint, "-g", GRAPH, "--set", "draft=[1]"],
        [*u, "import", str(tmp / "bad.jsonl")],
        [*u, "import", str(tmp / "absent.jsonl")],
        [*u, "import", str(tmp / "run.jsonl"), "--into", "ftp://nowhere"],
        [*u, "replay", run_id, "-g", "no/such/file.py:graph"],
        [*u, "recover", "--run", "nope"],
        [*u, "override", run_id, "zzzzzz", "--output", '"x"', "-g", GRAPH],
        [*u, "state", "ffffffff-ffff"],
        [*u, "export", run_id],
        [*u, "history"],
    ]


def test_every_error_is_one_line(store, capsys):
    url, run_id, checkpoint, tmp = store
    for argv in cases(url, run_id, checkpoint, tmp):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        out = capsys.readouterr()
        assert exc.value.code not in (0, None), argv
        lines = out.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (argv, out.err)
        assert "Traceback" not in out.out + out.err and "unexpected" not in lines[0], (argv, lines[0])
    assert not (tmp / "missing").exists()
