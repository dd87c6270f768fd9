"""The archive policy for operators, and the rules at the edges of archiving (every backend).

``run_policy`` / ``graphtape archive --policy``: archive what is due, delete
expired archives, report it (JSON, a metrics file) and show in ``stats``.
Threads paused at an interrupt are kept as long as ``keep_interrupted_for``
says; a thread with checkpoints and no recorded run is archived with them; a
restore creates the store it restores into; an archive from a newer graphtape
is refused in one line that says to upgrade.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import graphtape
from graphtape.cli import app
from graphtape.errors import GraphtapeError, TapeFormatError
from graphtape.runtime.archive import archive, file_name
from graphtape.runtime.archive_policy import Policy, read_policy, run_policy
from graphtape.runtime.saver import saver_for
from graphtape.store import open_store
from graphtape.store.base import WriteBatch
from tests import graphs
from tests.test_archive import (
    DAY,
    ENV,
    age,
    age_thread,
    archived_file,
    hitl_thread,
    record_linear,
    replays_strictly,
)


def make_expired(tape, thread: str, days: float = 400) -> None:
    """Say in the index that ``thread``'s archive was made ``days`` ago."""
    (entry,) = tape.store.archived_threads(thread)
    tape.store.remove_thread(thread, [], archived=dataclasses.replace(entry, archived_at=time.time() - days * DAY))


def test_run_policy_archives_what_is_due_expires_old_archives_and_reports(tape, tmp_path):
    dest = tmp_path / "cold"
    age(tape, record_linear(tape, "ancient"))
    archive(tape, older_than=30 * DAY, to=dest)
    make_expired(tape, "ancient")
    age(tape, record_linear(tape, "done"))
    record_linear(tape, "young")
    hitl_thread(tape, "waiting", finish=False)
    age_thread(tape, "waiting")  # paused 40 days ago: kept, the policy keeps paused threads 90 days

    policy = Policy(
        archive_after=30 * DAY, to=str(dest), delete_archives_after=365 * DAY, keep_interrupted_for=90 * DAY
    )
    dry = run_policy(tape, policy, dry_run=True)
    assert dry.dry_run and [t.thread_id for t in dry.archived] == ["done"]
    assert (dest / file_name("ancient")).is_file() and tape.store.archived_threads("ancient")

    report = run_policy(tape, policy)
    assert [t.thread_id for t in report.archived] == ["done"]
    assert [e.thread_id for e in report.expired] == ["ancient"] and not (dest / file_name("ancient")).exists()
    kept = dict(report.kept)
    assert kept["waiting"].startswith("paused at an interrupt 40d ago, less than the 90d")
    assert "young" not in kept  # young threads are simply not due
    assert report.started_at <= report.finished_at
    # the store's index, which stats and /metrics read, says what the policy did
    assert (report.archived_threads, report.archive_bytes) == (1, (dest / file_name("done")).stat().st_size)
    stats = tape.stats()
    assert stats.archived_threads == 1 and stats.archive_bytes == report.archive_bytes
    text = report.to_prometheus()
    assert "graphtape_archive_policy_archived_threads 1\n" in text
    assert "graphtape_archive_policy_expired_archives 1\n" in text
    assert "graphtape_archive_policy_kept_threads 1\n" in text
    assert f"graphtape_archive_policy_last_run_timestamp_seconds {report.finished_at}\n" in text
    data = report.to_dict()
    assert data["policy"]["archive_after"] == 30 * DAY and data["index"]["archived_threads"] == 1
    assert [k["thread_id"] for k in data["kept"]] == ["waiting"]


def test_cli_policy_from_options_and_from_a_file(tape, store_url, tmp_path):
    dest = tmp_path / "cold"
    age(tape, record_linear(tape, "a"))
    runner = CliRunner()
    base = ["--url", store_url, "archive", "--policy", "--archive-after", "30d", "--to", str(dest)]
    metrics = tmp_path / "graphtape_archive.prom"
    res = runner.invoke(
        app, [*base, "--delete-archives-after", "365d", "--json", "--metrics-file", str(metrics)], env=ENV
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [t["thread_id"] for t in data["archived"]] == ["a"] and data["policy"]["delete_archives_after"] == 365 * DAY
    assert data["index"] == {"archived_threads": 1, "archive_bytes": (dest / file_name("a")).stat().st_size}
    assert "graphtape_archive_policy_archived_threads 1\n" in metrics.read_text()
    assert list(tmp_path.glob(".*.tmp")) == []  # written atomically, nothing left beside it

    tape.restore("a")
    age(tape, tape.store.list_runs(thread_id="a")[0].run_id)
    policy = tmp_path / "policy.toml"
    policy.write_text(f'archive_after = "30d"\ndelete_archives_after = "365d"\nto = "{dest}"\n', encoding="utf-8")
    assert read_policy(policy) == Policy(30 * DAY, str(dest), 365 * DAY)
    res = runner.invoke(app, ["--url", store_url, "archive", "--policy-file", str(policy)], env=ENV)
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert "archived 1 thread(s)" in out and "and 0 expired archive(s)" in out.replace("; deleted", " and")
    assert "the store's index now names 1 archive(s)" in out

    # a bad policy is one line saying what to fix
    (tmp_path / "bad.json").write_text(json.dumps({"archive_after": "soon", "to": str(dest)}))
    res = runner.invoke(app, ["--url", store_url, "archive", "--policy-file", str(tmp_path / "bad.json")], env=ENV)
    assert res.exit_code == 2 and len(res.stderr.splitlines()) == 1 and "archive_after" in res.stderr, res.stderr
    res = runner.invoke(app, ["--url", store_url, "archive", "--policy", "--to", str(dest)], env=ENV)
    assert res.exit_code == 2 and "--older-than" in res.stderr
    with pytest.raises(GraphtapeError, match="unknown key 'archive_afer'"):
        Policy.from_mapping({"archive_afer": "30d", "to": "x"})


def test_paused_threads_follow_older_than_unless_kept_longer(tape, tmp_path):
    for thread, days in (("paused-10d", 10), ("paused-40d", 40)):
        hitl_thread(tape, thread, finish=False)
        age_thread(tape, thread, days)
    stopped = record_linear(tape, "stopped-10d")  # interrupted from outside (Ctrl-C): not waiting for an answer
    fields = {"status": "interrupted", "meta": {"stopped_by": "KeyboardInterrupt"}}
    tape.store.write(WriteBatch(run_updates=[(stopped, fields)]))
    age(tape, stopped, 10)
    dest = tmp_path / "cold"

    # the default rule: a thread paused more recently than --older-than is not due, like any other
    dry = archive(tape, older_than=30 * DAY, to=dest, dry_run=True)
    assert [t.thread_id for t in dry.threads] == ["paused-40d"]
    # keep_interrupted_for keeps paused threads longer than the others
    dry = archive(tape, older_than=5 * DAY, to=dest, keep_interrupted_for=30 * DAY, dry_run=True)
    assert sorted(t.thread_id for t in dry.threads) == ["paused-40d", "stopped-10d"]
    assert dict(dry.skipped)["paused-10d"].startswith("paused at an interrupt 10d ago, less than the 30d")
    # the Python API takes the same rule
    dry = tape.archive(older_than=5 * DAY, to=dest, keep_interrupted_for=30 * DAY, dry_run=True)
    assert sorted(t.thread_id for t in dry.threads) == ["paused-40d", "stopped-10d"]
    result = archive(tape, older_than=5 * DAY, to=dest, keep_interrupted_for=30 * DAY)
    assert sorted(t.thread_id for t in result.threads) == ["paused-40d", "stopped-10d"]
    assert tape.store.list_runs(thread_id="paused-10d")

    res = CliRunner().invoke(
        app,
        ["--url", tape.url, "archive", "--older-than", "5d", "--keep-interrupted-for", "nope", "--to", str(dest)],
        env=ENV,
    )
    assert res.exit_code == 2 and "--keep-interrupted-for" in res.stderr


def test_a_thread_with_checkpoints_and_no_run_is_archived_with_them(tape, tmp_path):
    record_linear(tape, "source")
    saver_for(tape.store).copy_thread("source", "copy")
    assert tape.store.list_runs(thread_id="copy") == [] and tape.store.has_checkpoints("copy")
    rec = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "copy"}}
    values = rec.get_state(cfg).values
    checkpoints = sorted(cp.checkpoint_id for cp in tape.store.list_checkpoints(thread_id="copy"))
    dest = tmp_path / "cold"

    # young: not due; a status filter is about runs, so it never selects a thread without any
    assert archive(tape, older_than=30 * DAY, to=dest).threads == []
    later = time.time() + 40 * DAY
    dry = archive(tape, older_than=30 * DAY, to=dest, statuses=["finished"], now=later, dry_run=True)
    assert [t.thread_id for t in dry.threads] == ["source"]
    result = archive(tape, older_than=30 * DAY, to=dest, now=later)
    archived = {t.thread_id: t for t in result.threads}
    assert set(archived) == {"source", "copy"} and archived["copy"].run_ids == []
    assert not tape.store.has_checkpoints("copy")
    assert tape.store.archived_threads("copy")[0].runs == 0

    restored = tape.restore("copy")
    assert (restored.thread_id, restored.run_ids, restored.checkpoints) == ("copy", [], len(checkpoints))
    assert sorted(cp.checkpoint_id for cp in tape.store.list_checkpoints(thread_id="copy")) == checkpoints
    assert rec.get_state(cfg).values == values
    assert tape.store.archived_threads("copy") == []


def test_restore_creates_the_store_it_restores_into(tape, new_store_url, backend, tmp_path):
    run, path = archived_file(tape, "a", tmp_path)
    runner = CliRunner()

    # a damaged file into a store that does not exist: refused, and a SQLite file it made is gone again
    damaged = tmp_path / "damaged.tape.jsonl.gz"
    damaged.write_bytes(path.read_bytes()[:-8])
    sqlite_target = tmp_path / "new" / "deeper" / "tape.db"
    res = runner.invoke(app, ["restore", str(damaged), "--into", f"sqlite:///{sqlite_target}"], env=ENV)
    assert res.exit_code == 2 and "not a readable archive" in res.stderr
    assert not (tmp_path / "new").exists()

    fresh = new_store_url()
    res = runner.invoke(app, ["--url", fresh, "restore", str(path)], env=ENV)
    assert res.exit_code == 0, res.output
    assert "restored thread a (1 run(s)" in " ".join(res.stdout.split())
    with graphtape.connect(fresh) as other:
        replays_strictly(other, run, graphs.build_linear)
    if backend == "sqlite":
        other_file = tmp_path / "other.db"
        res = runner.invoke(app, ["restore", str(path), "--into", f"sqlite:///{other_file}", "--json"], env=ENV)
        assert res.exit_code == 0 and json.loads(res.stdout)["thread_id"] == "a" and other_file.is_file()
    else:
        open_store(fresh, create=False).close()  # the store exists now


def test_an_archive_from_a_newer_graphtape_says_to_upgrade(tape, store_url, tmp_path):
    run, path = archived_file(tape, "a", tmp_path)
    header, _, body = gzip.decompress(path.read_bytes()).decode().partition("\n")
    newer = Path(tmp_path / "newer.tape.jsonl.gz")
    newer.write_bytes(gzip.compress((json.dumps({**json.loads(header), "version": 2}) + "\n" + body).encode()))
    with pytest.raises(TapeFormatError, match=r"tape format v2; this graphtape reads v1: upgrade graphtape"):
        tape.restore(str(newer))
    res = CliRunner().invoke(app, ["--url", store_url, "restore", str(newer)], env=ENV)
    assert res.exit_code == 2 and len(res.stderr.splitlines()) == 1 and "upgrade graphtape" in res.stderr
    assert tape.store.get_run(run) is None
