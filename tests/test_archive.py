"""Archiving threads to cold storage and restoring them (``graphtape archive`` / ``restore``).

Every test runs on each backend. Runs are made old by moving their
``ended_at`` back. A restored thread must replay strictly (no live call),
resume from its checkpoints and export to the same bytes as before.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import time
import uuid
from pathlib import Path

import pytest
from langgraph.types import Command
from typer.testing import CliRunner

from graphtape.cli import app
from graphtape.errors import GraphtapeError, TapeFormatError
from graphtape.runtime.archive import file_name
from graphtape.store.base import RunRecord, WriteBatch
from tests import graphs
from tests.graphs import forbid

DAY = 86400.0
ENV = {"COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb", "GRAPHTAPE_URL": None}


def age(tape, run_id: str, days: float = 40) -> None:
    tape.store.write(WriteBatch(run_updates=[(run_id, {"ended_at": time.time() - days * DAY})]))


def age_thread(tape, thread: str, days: float = 40) -> None:
    for r in tape.store.list_runs(thread_id=thread, limit=None):
        age(tape, r.run_id, days)


def record_linear(tape, thread: str) -> str:
    rec = tape.record(graphs.build_linear(), name="linear", checkpointer=tape.saver)
    rec.invoke({"topic": ""}, {"configurable": {"thread_id": thread}})
    return rec.last_run_id


def archived_file(tape, thread: str, tmp_path: Path) -> tuple[str, Path]:
    """A linear run recorded on ``thread``, aged and archived to ``tmp_path/cold``: the run's id and the archive."""
    run = record_linear(tape, thread)
    age(tape, run)
    dest = tmp_path / "cold"
    tape.archive(older_than=30 * DAY, to=dest)
    return run, dest / file_name(thread)


def exported(tape, thread: str, path: Path) -> bytes:
    tape.export_thread(thread, path)
    return path.read_bytes()


def replays_strictly(tape, run_id: str, build, status: str = "finished", **kw) -> None:
    with forbid():
        result = tape.replay(run_id, build(), **kw)
    assert result.status == status, (result.error, result.divergence)
    assert result.live == 0


def hitl_thread(tape, thread: str, *, finish: bool) -> str:
    rec = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": thread}}
    rec.invoke({}, cfg)
    if finish:
        rec.invoke(Command(resume={i.id: "ok" for i in rec.get_state(cfg).interrupts}), cfg)
    return rec.last_run_id


def test_round_trip_with_an_interrupt_and_a_fork(tape, tmp_path):
    lin = record_linear(tape, "lin")
    cp = next(e.data["checkpoint_id"] for e in tape.events(lin, ["checkpoint"]) if e.data["step"] == 1)
    with forbid():
        fork = tape.fork(cp, graphs.build_linear(), mode="strict")
    fork_thread = tape.run(fork.run_id).thread_id
    paused = hitl_thread(tape, "paused", finish=False)
    assert tape.run(paused).status == "interrupted"
    fresh = record_linear(tape, "fresh")
    for thread in ("lin", fork_thread, "paused"):
        age_thread(tape, thread)
    before = {
        t: exported(tape, t, tmp_path / f"before-{i}.jsonl") for i, t in enumerate(("lin", fork_thread, "paused"))
    }
    cps_before = len(tape.store.list_checkpoints(thread_id="paused"))

    dest = tmp_path / "cold"
    result = tape.archive(older_than=30 * DAY, to=dest)
    assert sorted(t.thread_id for t in result.threads) == sorted(["lin", fork_thread, "paused"])
    # the fork needs lin: it went first, then lin could go
    order = [t.thread_id for t in result.threads]
    assert order.index(fork_thread) < order.index("lin")
    assert {r.run_id for r in tape.store.list_runs(limit=None)} == {fresh}
    assert tape.store.list_checkpoints(thread_id="paused") == []
    assert (dest / file_name("paused")).is_file()
    replays_strictly(tape, fresh, graphs.build_linear)  # the blobs it shares stayed

    for thread in ("lin", fork_thread, "paused"):
        restored = tape.restore(thread, from_=dest)
        assert restored.thread_id == thread
    assert len(tape.store.list_checkpoints(thread_id="paused")) == cps_before
    after = {t: exported(tape, t, tmp_path / f"after-{i}.jsonl") for i, t in enumerate(("lin", fork_thread, "paused"))}
    assert after == before
    replays_strictly(tape, lin, graphs.build_linear)
    first = next(e.data["checkpoint_id"] for e in tape.events(fork.run_id, ["checkpoint"]) if not e.data["ns"])
    replays_strictly(tape, fork.run_id, graphs.build_linear, from_checkpoint=first)
    with forbid():  # and lin forks again, served from the restored tape
        again = tape.fork(cp, graphs.build_linear(), mode="strict")
    assert again.status == "finished" and again.live == 0
    replays_strictly(tape, paused, graphs.build_review, "interrupted")
    # the paused thread resumes from its restored checkpoints
    rec = tape.record(graphs.build_review(), name="review", checkpointer=tape.saver)
    cfg = {"configurable": {"thread_id": "paused"}}
    interrupts = rec.get_state(cfg).interrupts
    assert interrupts
    rec.invoke(Command(resume={i.id: "ok" for i in interrupts}), cfg)
    assert tape.run(rec.last_run_id).status in ("finished", "interrupted")


def test_archive_is_deterministic_and_restores_into_another_store(tape, tmp_path):
    import graphtape

    run = record_linear(tape, "a")
    age(tape, run)
    tape.archive(older_than=30 * DAY, to=tmp_path / "one")
    archived = (tmp_path / "one" / file_name("a")).read_bytes()
    tape.restore(str(tmp_path / "one" / file_name("a")))
    tape.archive(older_than=30 * DAY, to=tmp_path / "two")
    assert (tmp_path / "two" / file_name("a")).read_bytes() == archived

    with graphtape.connect(f"sqlite:///{tmp_path / 'other.db'}") as other:
        other.restore(file_name("a"), from_=tmp_path / "two")
        replays_strictly(other, run, graphs.build_linear)


def test_dry_run_writes_nothing(tape, tmp_path):
    run = record_linear(tape, "a")
    age(tape, run)
    dest = tmp_path / "cold"
    result = tape.archive(older_than=30 * DAY, to=dest, dry_run=True)
    assert result.dry_run and [t.thread_id for t in result.threads] == ["a"]
    assert result.threads[0].size > 0 and result.threads[0].compressed is None
    assert not dest.exists()
    assert tape.store.get_run(run) is not None and tape.store.list_checkpoints(thread_id="a")


def test_running_leased_and_young_threads_stay(tape, tmp_path):
    old = record_linear(tape, "leased")
    age(tape, old)
    young = record_linear(tape, "young")
    running = record_linear(tape, "running")
    tape.store.write(WriteBatch(run_updates=[(running, {"status": "running", "ended_at": None})]))
    tape.store.write(WriteBatch(run_updates=[(running, {"ended_at": None})]))
    assert tape.store.acquire_lease("thread:leased", "someone-else", 60.0) is not None

    result = tape.archive(older_than=0, to=tmp_path / "cold")
    assert [t.thread_id for t in result.threads] == ["young"]
    skipped = dict(result.skipped)
    assert "leased" in skipped["leased"]
    assert "running" in skipped["running"]
    assert tape.store.get_run(old) is not None and tape.store.get_run(running) is not None
    assert tape.store.get_run(young) is None


def test_tampered_or_unreadable_archive_is_refused(tape, tmp_path):
    run, path = archived_file(tape, "a", tmp_path)
    text = gzip.decompress(path.read_bytes()).decode()
    assert '"topic":""' in text or "run_started" in text
    # an edit that keeps every line valid JSON and every blob hash right: only the digest catches it
    tampered = text.replace('"status":"finished"', '"status":"failed"', 1)
    assert tampered != text
    path.write_bytes(gzip.compress(tampered.encode()))
    with pytest.raises(TapeFormatError, match="altered or damaged"):
        tape.restore(str(path))
    path.write_bytes(gzip.compress(text.encode())[:-20])  # truncated
    with pytest.raises(TapeFormatError, match="not a readable archive"):
        tape.restore(str(path))
    assert tape.store.get_run(run) is None and tape.store.list_checkpoints(thread_id="a") == []
    with pytest.raises(TapeFormatError, match="--from"):
        tape.restore("never-archived")


def test_cli_archive_and_restore(tape, store_url, tmp_path):
    run = record_linear(tape, "a")
    age(tape, run)
    dest = tmp_path / "cold"
    runner = CliRunner()
    base = ["--url", store_url]
    res = runner.invoke(app, [*base, "archive", "--older-than", "30d", "--to", str(dest), "--dry-run"], env=ENV)
    assert res.exit_code == 0, res.output
    assert "would archive 1 thread(s)" in res.output and not dest.exists()
    res = runner.invoke(app, [*base, "archive", "--older-than", "30d", "--to", str(dest)], env=ENV)
    assert res.exit_code == 0, res.output
    assert "archived 1 thread(s)" in res.output and tape.store.get_run(run) is None
    res = runner.invoke(app, [*base, "restore", "a", "--from", str(dest)], env=ENV)
    assert res.exit_code == 0, res.output
    assert "restored thread a" in res.output and tape.store.get_run(run) is not None
    res = runner.invoke(app, [*base, "restore", "a", "--from", str(dest)], env=ENV)
    assert res.exit_code == 2 and res.stderr.startswith("error: run ") and "already in" in res.stderr
    # --json, and a damaged file refused in one line with nothing written
    data = json.loads(runner.invoke(app, [*base, "archive", "--older-than", "30d", "--to", str(dest), "--json"]).stdout)
    assert [t["thread_id"] for t in data["threads"]] == ["a"] and data["dry_run"] is False
    path = dest / file_name("a")
    path.write_bytes(path.read_bytes()[:-8])
    res = runner.invoke(app, [*base, "restore", str(path)], env=ENV)
    assert res.exit_code == 2 and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("error: ") and "not a readable archive" in res.stderr
    assert tape.store.get_run(run) is None
    res = runner.invoke(app, [*base, "archive", "--older-than", "soon", "--to", str(dest)], env=ENV)
    assert res.exit_code == 2 and "--older-than" in res.stderr


def test_the_store_indexes_what_it_archived(tape, store_url, tmp_path):
    run = record_linear(tape, "a")
    age(tape, run)
    dest = tmp_path / "cold"
    result = tape.archive(older_than=30 * DAY, to=dest)
    (entry,) = tape.store.archived_threads()
    assert (entry.thread_id, entry.runs, entry.digest) == ("a", 1, result.threads[0].digest)
    assert entry.file == str(dest / file_name("a")) and entry.size == (dest / file_name("a")).stat().st_size

    runner = CliRunner()
    res = runner.invoke(app, ["--url", store_url, "runs", "--archived"], env=ENV)
    assert res.exit_code == 0, res.output
    assert file_name("a") in " ".join(res.stdout.split()) and "1 run(s)" in res.stdout
    res = runner.invoke(app, ["--url", store_url, "history", "a"], env=ENV)
    assert res.exit_code == 2
    assert "was archived to" in res.stderr and "graphtape restore a" in res.stderr

    # restore by thread id alone: the index knows the file; then the index forgets it
    res = runner.invoke(app, ["--url", store_url, "restore", "a"], env=ENV)
    assert res.exit_code == 0, res.output
    assert tape.store.archived_threads() == [] and tape.store.get_run(run) is not None
    res = runner.invoke(app, ["--url", store_url, "runs", "--archived"], env=ENV)
    assert "no archived threads" in res.stdout


@pytest.mark.parametrize("crash", ["before-rename", "before-remove", "after-remove"])
def test_a_crash_mid_archive_loses_nothing(tape, store_url, tmp_path, crash):
    import signal
    import subprocess
    import sys

    run = record_linear(tape, "a")
    age(tape, run)
    before = exported(tape, "a", tmp_path / "before.jsonl")
    checkpoints = len(tape.store.list_checkpoints(thread_id="a"))
    dest = tmp_path / "cold"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.archive_crash_worker", store_url, str(dest), crash],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    # the dead archiver's lease would expire; take it back now rather than wait
    holder = tape.store.lease_holder("thread:a")
    if holder is not None:
        tape.store.release_lease("thread:a", holder[0])

    path = dest / file_name("a")
    if crash == "after-remove":
        # the thread left in one transaction, with its index entry
        assert tape.store.get_run(run) is None and tape.store.list_checkpoints(thread_id="a") == []
        assert [e.thread_id for e in tape.store.archived_threads()] == ["a"]
    else:
        # the thread is whole, and not indexed as archived
        assert tape.store.get_run(run) is not None
        assert len(tape.store.list_checkpoints(thread_id="a")) == checkpoints
        assert tape.store.archived_threads() == []
        assert path.is_file() == (crash == "before-remove")
        # archiving again finishes the job
        result = tape.archive(older_than=30 * DAY, to=dest)
        assert [t.thread_id for t in result.threads] == ["a"]
    tape.restore("a")
    assert exported(tape, "a", tmp_path / "after.jsonl") == before
    assert len(tape.store.list_checkpoints(thread_id="a")) == checkpoints
    replays_strictly(tape, run, graphs.build_linear)


def test_expire_after_deletes_only_the_old_archives_the_store_made(tape, store_url, tmp_path):
    dest = tmp_path / "cold"
    for thread in ("old", "new"):
        age(tape, record_linear(tape, thread))
    tape.archive(older_than=30 * DAY, to=dest)
    # make "old"'s archive a year old, as its index entry says
    (entry,) = tape.store.archived_threads("old")
    tape.store.remove_thread("old", [], archived=dataclasses.replace(entry, archived_at=time.time() - 400 * DAY))
    (dest / "unrelated.txt").write_text("not ours")

    dry = tape.archive(older_than=30 * DAY, to=dest, expire_after=365 * DAY, dry_run=True)
    assert [e.thread_id for e in dry.expired] == ["old"] and (dest / file_name("old")).is_file()
    res = CliRunner().invoke(
        app,
        ["--url", store_url, "archive", "--older-than", "30d", "--to", str(dest), "--expire-after", "365d"],
        env=ENV,
    )
    assert res.exit_code == 0, res.output
    assert "deleted 1 expired archive(s)" in " ".join(res.stdout.split())
    assert not (dest / file_name("old")).exists() and (dest / file_name("new")).is_file()
    assert (dest / "unrelated.txt").is_file()
    assert [e.thread_id for e in tape.store.archived_threads()] == ["new"]


def test_stats_and_metrics_report_the_archives(tape, tmp_path):
    assert "graphtape_archived_threads 0\n" in tape.stats().to_prometheus()
    age(tape, record_linear(tape, "a"))
    result = tape.archive(older_than=30 * DAY, to=tmp_path / "cold")
    stats = tape.stats()
    assert stats.archived_threads == 1 and stats.archive_bytes == result.threads[0].compressed
    text = stats.to_prometheus()
    assert "graphtape_archived_threads 1\n" in text
    assert f"graphtape_archive_bytes {result.threads[0].compressed}\n" in text
    assert "graphtape_last_archive_timestamp_seconds " in text
    assert stats.to_dict()["archives"]["threads"] == 1


class MemoryFs:
    """A stand-in for fsspec (not installed here): object storage as a dict, through the calls archive makes."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.core = self

    def open(self, url: str, mode: str):
        import contextlib
        import io

        @contextlib.contextmanager
        def opened():
            if mode == "rb":
                if url not in self.files:
                    raise FileNotFoundError(url)
                yield io.BytesIO(self.files[url])
                return
            buf = io.BytesIO()
            yield buf
            self.files[url] = buf.getvalue()

        return opened()

    def url_to_fs(self, url: str):
        return self, url

    def exists(self, url: str) -> bool:
        return url in self.files

    def rm(self, url: str) -> None:
        del self.files[url]


def test_archive_to_an_object_store_url_through_fsspec(tape, tmp_path, monkeypatch):
    import sys

    run = record_linear(tape, "a")
    age(tape, run)
    before = exported(tape, "a", tmp_path / "before.jsonl")
    monkeypatch.setitem(sys.modules, "fsspec", None)  # not installed: a clear error, nothing removed
    with pytest.raises(GraphtapeError, match=r"needs fsspec .*graphtape\[archive\]"):
        tape.archive(older_than=30 * DAY, to="memory://cold")
    assert tape.store.get_run(run) is not None

    fs = MemoryFs()
    monkeypatch.setitem(sys.modules, "fsspec", fs)
    tape.archive(older_than=30 * DAY, to="memory://cold/")
    assert list(fs.files) == ["memory://cold/" + file_name("a")]
    assert tape.store.get_run(run) is None
    tape.restore("a")  # the index names the URL
    assert exported(tape, "a", tmp_path / "after.jsonl") == before
    again = tape.archive(older_than=30 * DAY, to="memory://cold")
    assert [t.thread_id for t in again.threads] == ["a"]
    tape.store.remove_thread(
        "a", [], archived=dataclasses.replace(tape.store.archived_threads("a")[0], archived_at=time.time() - 400 * DAY)
    )
    result = tape.archive(older_than=30 * DAY, to="memory://cold", expire_after=365 * DAY)
    assert [e.thread_id for e in result.expired] == ["a"] and fs.files == {}


def test_a_fork_started_while_archiving_keeps_its_original(tape, tmp_path, monkeypatch):
    lin = record_linear(tape, "lin")
    age(tape, lin)
    store = tape.store
    take = store.acquire_lease

    def fork_meanwhile(name, owner, ttl):
        # another process forks lin into a new thread between the plan and the removal
        store.write(
            WriteBatch(
                new_runs=[RunRecord(str(uuid.uuid4()), "forked", "linear", started_at=time.time(), replay_of=lin)]
            )
        )
        monkeypatch.setattr(store, "acquire_lease", take)
        return take(name, owner, ttl)

    monkeypatch.setattr(store, "acquire_lease", fork_meanwhile)
    result = tape.archive(older_than=30 * DAY, to=tmp_path / "cold")
    assert result.threads == []
    assert "replays or forks it" in dict(result.skipped)["lin"]
    assert store.get_run(lin) is not None and store.archived_threads() == []
