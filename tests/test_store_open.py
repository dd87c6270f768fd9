"""Opening a store: commands that only read never create one, and sqlite:/// URLs take options."""

from __future__ import annotations

import json
import sqlite3

import pytest

import graphtape
from graphtape.cli import main
from graphtape.errors import DatabaseLocked, StoreError
from graphtape.store import StoreNotFound, open_store
from graphtape.store.base import RunRecord, WriteBatch
from tests import graphs
from tests.store_raw import exists


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``graphtape ARGV`` through the console entry point: exit code, stdout, stderr."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def assert_one_line_error(code: int, err: str, *words: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], lines[0]


def test_read_only_open_of_a_missing_store_creates_nothing(new_store_url):
    url = new_store_url()
    with pytest.raises(StoreNotFound, match="no tape store"):
        open_store(url, create=False)
    assert not exists(url)
    # once created, the same read-only open works
    open_store(url).close()
    store = open_store(url, create=False)
    try:
        assert store.list_runs() == []
    finally:
        store.close()


@pytest.mark.parametrize(
    "command",
    [
        ["runs"],
        ["show", "abcd1234"],
        ["history", "abcd1234"],
        ["stats"],
        ["prune", "--older-than", "1d"],
        ["recover", "--dry-run"],
        ["export", "abcd1234", "-o", "out.jsonl"],
        ["serve", "--port", "9"],
    ],
)
def test_reading_commands_on_a_mistyped_url_say_so_and_create_nothing(new_store_url, capsys, monkeypatch, command):
    url = new_store_url()
    monkeypatch.setenv("GRAPHTAPE_URL", url)
    code, _out, err = cli(capsys, *command)
    assert_one_line_error(code, err, "no tape store")
    assert not exists(url)


def test_typo_path_from_the_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRAPHTAPE_URL", "sqlite:///typo/path.db")
    code, _, err = cli(capsys, "runs")
    assert_one_line_error(code, err, "typo/path.db", "does not exist")
    assert not (tmp_path / "typo").exists()


def test_a_foreign_sqlite_database_is_refused_untouched(tmp_path, capsys):
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    code, _, err = cli(capsys, "--url", f"sqlite:///{path}", "runs")
    assert_one_line_error(code, err, "not a graphtape store", "users")
    assert path.read_bytes() == before  # no gt_* tables, journal mode unchanged
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert tables == {"users"}


def test_a_failed_import_into_a_new_url_leaves_no_file(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "something-else"}\n', encoding="utf-8")
    target = tmp_path / "new" / "store.db"
    code, _, err = cli(capsys, "import", str(bad), "--into", f"sqlite:///{target}")
    assert_one_line_error(code, err)
    assert not target.exists() and not (tmp_path / "new").exists()


def test_export_then_import_into_another_store_as_the_readme_says(tmp_path, capsys):
    """The README's example: export a run, import it with --into (or --url) into another store."""
    first = f"sqlite:///{tmp_path}/a.db"
    with graphtape.connect(first) as tape:
        agent = tape.record(graphs.build_linear())
        agent.invoke({}, {"configurable": {"thread_id": "t1"}})
        run_id = agent.last_run_id
    code, _, err = cli(capsys, "--url", first, "export", run_id, "-o", str(tmp_path / "run.jsonl"))
    assert code == 0, err
    # into the same store: refused with what to do instead
    code, _, err = cli(capsys, "--url", first, "import", str(tmp_path / "run.jsonl"))
    assert_one_line_error(code, err, "already in", "--into")
    second = f"sqlite:///{tmp_path}/b.db"
    code, out, err = cli(capsys, "--url", first, "import", str(tmp_path / "run.jsonl"), "--into", second, "--json")
    assert code == 0, err
    assert json.loads(out)["imported"] == [run_id]
    with graphtape.connect(second) as tape:
        assert tape.run(run_id).status == "finished"


def test_sqlite_url_options_are_parsed(tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/opts.db?busy_timeout=30")
    try:
        assert store.path.name == "opts.db" and store.busy_timeout == 30
        assert (tmp_path / "opts.db").exists() and not list(tmp_path.glob("*busy_timeout*"))
    finally:
        store.close()
    with pytest.raises(StoreError, match="busy_timeout=SECONDS"):
        open_store(f"sqlite:///{tmp_path}/opts.db?timeout=30")
    with pytest.raises(StoreError, match="not a number"):
        open_store(f"sqlite:///{tmp_path}/opts.db?busy_timeout=soon")


def test_the_locked_message_names_the_url_option(tmp_path):
    path = tmp_path / "locked.db"
    open_store(f"sqlite:///{path}").close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    store = open_store(f"sqlite:///{path}?busy_timeout=0.05")
    try:
        batch = WriteBatch()
        batch.new_runs.append(
            RunRecord(run_id="r1", thread_id="t", graph="g", status="running", started_at=0.0, mode="record")
        )
        with pytest.raises(DatabaseLocked, match=r"\?busy_timeout=\d+"):
            store.write(batch)
    finally:
        store.close()
        holder.execute("ROLLBACK")
        holder.close()
